/*  =========================================================================
    dsh_fspath - confine file paths to a root directory

    Every answer comes from realpath, never from string surgery alone: the
    kernel's view of symlinks and ".." is the only one that matters. A
    lexical pass runs first only to refuse paths that climb above the root
    before we touch the filesystem, so a caller cannot probe which files
    exist outside it by comparing "escapes" with "does not exist".
    =========================================================================
*/

#include "dsh_fspath.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct _dsh_fspath_t {
    char *root;                 //  realpath of the root, no trailing '/'
};

void
dsh_fspath_error (char *error, size_t error_size, const char *format, ...)
{
    if (!error || error_size == 0)
        return;
    va_list args;
    va_start (args, format);
    vsnprintf (error, error_size, format, args);
    va_end (args);
    for (char *c = error; *c; c++)
        if ((unsigned char) *c < 0x20 || *c == 0x7f)
            *c = '?';
}

void
dsh_fspath_shown (const char *path, char *shown, size_t shown_size)
{
    if (strlen (path) < shown_size)
        snprintf (shown, shown_size, "%s", path);
    else
        snprintf (shown, shown_size, "%.*s...", (int) (shown_size - 4), path);
}

//  True if path is dir or lies beneath it; "/rootX" is not beneath "/root".
//  Both must already be resolved.
static bool
s_inside (const char *path, const char *dir)
{
    if (strcmp (dir, "/") == 0)
        return path [0] == '/';
    size_t dir_len = strlen (dir);
    return strncmp (path, dir, dir_len) == 0
        && (path [dir_len] == '\0' || path [dir_len] == '/');
}

//  Refuses paths whose ".." components climb above their starting point,
//  counting components the way the text reads. Stricter than the kernel
//  when a symlink precedes "..", which only ever refuses more.
static bool
s_climbs_out (const char *path)
{
    long depth = 0;
    const char *component = path;
    while (*component) {
        size_t length = strcspn (component, "/");
        if (length == 2 && strncmp (component, "..", 2) == 0) {
            if (--depth < 0)
                return true;
        }
        else
        if (length > 0 && !(length == 1 && component [0] == '.'))
            depth++;
        component += length;
        while (*component == '/')
            component++;
    }
    return false;
}

//  Joins dir and name with one '/', minding a dir of "/". NULL if out of
//  memory.
static char *
s_join (const char *dir, const char *name)
{
    char *joined = NULL;
    const char *separator = dir [strlen (dir) - 1] == '/'? "": "/";
    if (asprintf (&joined, "%s%s%s", dir, separator, name) < 0)
        return NULL;
    return joined;
}

//  The error for a realpath failure on the whole request path.
static void
s_set_realpath_error (int error_number, const char *shown,
                      char *error, size_t error_size)
{
    switch (error_number) {
        case EACCES:
            dsh_fspath_error (error, error_size, "path \"%s\" is not accessible", shown);
            break;
        case ELOOP:
            dsh_fspath_error (error, error_size, "path \"%s\" has too many symlinks", shown);
            break;
        case ENAMETOOLONG:
            dsh_fspath_error (error, error_size, "path \"%s\" is too long", shown);
            break;
        case ENOTDIR:
            dsh_fspath_error (error, error_size,
                         "a component of path \"%s\" is not a directory", shown);
            break;
        case ENOMEM:
            dsh_fspath_error (error, error_size, "out of memory");
            break;
        default:
            dsh_fspath_error (error, error_size, "path \"%s\" does not exist", shown);
            break;
    }
}

//  Resolves the final component of a path that does not fully exist: its
//  parent must exist inside the root, and the name must not be a symlink
//  that dangles or leads out.
static char *
s_resolve_new (dsh_fspath_t *self, const char *shown, const char *relative,
               char *error, size_t error_size)
{
    const char *slash = strrchr (relative, '/');
    const char *name = slash? slash + 1: relative;
    if (*name == '\0' || strcmp (name, ".") == 0 || strcmp (name, "..") == 0) {
        dsh_fspath_error (error, error_size, "path \"%s\" does not name a file", shown);
        return NULL;
    }
    char *parent_request = slash
        ? strndup (relative, (size_t) (slash - relative))
        : strdup ("");
    char *parent_joined = parent_request? s_join (self->root, parent_request): NULL;
    free (parent_request);
    if (!parent_joined) {
        dsh_fspath_error (error, error_size, "out of memory");
        return NULL;
    }
    char *parent = realpath (parent_joined, NULL);
    free (parent_joined);
    if (!parent) {
        dsh_fspath_error (error, error_size, "parent of \"%s\" does not exist", shown);
        return NULL;
    }
    if (!s_inside (parent, self->root)) {
        free (parent);
        dsh_fspath_error (error, error_size, "path \"%s\" escapes the root", shown);
        return NULL;
    }
    struct stat parent_stat;
    if (stat (parent, &parent_stat) != 0 || !S_ISDIR (parent_stat.st_mode)) {
        free (parent);
        dsh_fspath_error (error, error_size, "parent of \"%s\" is not a directory", shown);
        return NULL;
    }
    char *candidate = s_join (parent, name);
    free (parent);
    if (!candidate) {
        dsh_fspath_error (error, error_size, "out of memory");
        return NULL;
    }
    struct stat name_stat;
    if (lstat (candidate, &name_stat) != 0) {
        int lstat_errno = errno;
        if (lstat_errno == ENOENT)
            return candidate;
        free (candidate);
        s_set_realpath_error (lstat_errno, shown, error, error_size);
        return NULL;
    }
    //  The name exists after all: a dangling symlink (realpath of the whole
    //  path failed on it), or something created since. Writing through a
    //  dangling link would create its target wherever it points.
    char *target = realpath (candidate, NULL);
    int realpath_errno = errno;
    free (candidate);
    if (!target) {
        if (S_ISLNK (name_stat.st_mode) && realpath_errno == ENOENT)
            dsh_fspath_error (error, error_size, "path \"%s\" is a dangling symlink", shown);
        else
            s_set_realpath_error (realpath_errno, shown, error, error_size);
        return NULL;
    }
    if (!s_inside (target, self->root)) {
        free (target);
        dsh_fspath_error (error, error_size, "path \"%s\" escapes the root", shown);
        return NULL;
    }
    return target;
}

dsh_fspath_t *
dsh_fspath_new (const char *root)
{
    if (!root)
        return NULL;
    char *resolved = realpath (root, NULL);
    if (!resolved)
        return NULL;
    struct stat root_stat;
    if (stat (resolved, &root_stat) != 0 || !S_ISDIR (root_stat.st_mode)) {
        free (resolved);
        return NULL;
    }
    dsh_fspath_t *self = calloc (1, sizeof (dsh_fspath_t));
    if (!self) {
        free (resolved);
        return NULL;
    }
    self->root = resolved;
    return self;
}

void
dsh_fspath_destroy (dsh_fspath_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_fspath_t *self = *self_p;
        free (self->root);
        free (self);
        *self_p = NULL;
    }
}

const char *
dsh_fspath_root (dsh_fspath_t *self)
{
    assert (self);
    return self->root;
}

char *
dsh_fspath_resolve (dsh_fspath_t *self, const char *path, bool must_exist,
                    char *error, size_t error_size)
{
    assert (self);
    if (!path || *path == '\0') {
        dsh_fspath_error (error, error_size, "path is empty");
        return NULL;
    }
    if (strnlen (path, PATH_MAX + 1) > PATH_MAX) {
        dsh_fspath_error (error, error_size, "path is too long");
        return NULL;
    }
    char shown [DSH_FSPATH_SHOWN_MAX + 1];
    dsh_fspath_shown (path, shown, sizeof shown);
    const char *relative = path;
    while (*relative == '/')
        relative++;
    if (s_climbs_out (relative)) {
        dsh_fspath_error (error, error_size, "path \"%s\" escapes the root", shown);
        return NULL;
    }
    char *joined = s_join (self->root, relative);
    if (!joined) {
        dsh_fspath_error (error, error_size, "out of memory");
        return NULL;
    }
    char *resolved = realpath (joined, NULL);
    int realpath_errno = errno;
    free (joined);
    if (!resolved) {
        if (!must_exist && realpath_errno == ENOENT)
            return s_resolve_new (self, shown, relative, error, error_size);
        s_set_realpath_error (realpath_errno, shown, error, error_size);
        return NULL;
    }
    if (!s_inside (resolved, self->root)) {
        free (resolved);
        dsh_fspath_error (error, error_size, "path \"%s\" escapes the root", shown);
        return NULL;
    }
    return resolved;
}

bool
dsh_fspath_is_within (const char *resolved, const char *dir)
{
    if (!resolved || !dir || *resolved == '\0' || *dir == '\0')
        return false;
    char *dir_real = realpath (dir, NULL);
    if (!dir_real)
        return false;
    char *path_real = realpath (resolved, NULL);
    if (!path_real && errno == ENOENT) {
        //  A file about to be created: its parent decides where it lands.
        const char *slash = strrchr (resolved, '/');
        const char *name = slash? slash + 1: resolved;
        char *parent = slash == resolved? strdup ("/")
                     : slash? strndup (resolved, (size_t) (slash - resolved))
                     : strdup (".");
        char *parent_real = parent? realpath (parent, NULL): NULL;
        free (parent);
        if (parent_real && *name && strcmp (name, ".") != 0 && strcmp (name, "..") != 0)
            path_real = s_join (parent_real, name);
        free (parent_real);
    }
    bool within = path_real && s_inside (path_real, dir_real);
    free (path_real);
    free (dir_real);
    return within;
}
