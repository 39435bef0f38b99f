/*  =========================================================================
    dsh_fspath - open files beneath a root directory, and nowhere else

    Checking a path (realpath, then "is it inside?") and opening it later is
    a race: between the two, a directory in the path can become a symlink to
    anywhere, and O_NOFOLLOW guards only the last component. So nothing here
    checks a name and then uses it. A request path is first put in normal
    form as text (so ".." never reaches the kernel and cannot climb out of a
    directory that was moved), then opened relative to the root's descriptor
    in one of two ways, both refusing every symlink:

    - openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS: the kernel walks the
      whole path and fails if any step is a symlink or leaves the root;
    - where the kernel or the headers lack openat2, a walk: each directory is
      opened with openat (O_PATH | O_NOFOLLOW | O_DIRECTORY) relative to the
      one before it, then the last component with O_NOFOLLOW. Every step
      holds a descriptor, so renaming anything meanwhile cannot redirect it.
    =========================================================================
*/

#include "dsh_fspath.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined (SYS_openat2) && __has_include (<linux/openat2.h>)
#   include <linux/openat2.h>
#   define DSH_HAVE_OPENAT2 1
#endif

struct _dsh_fspath_t {
    char *root;                 //  realpath of the root, no trailing '/'
    int root_fd;                //  the root, held open: every open starts here
    bool walk;                  //  open by the walk, not openat2
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

//  The length of the UTF-8 sequence at text (1-4), or 0 if the bytes there
//  are not one (overlong forms, surrogates and values past U+10FFFF are not).
static size_t
s_utf8_length (const unsigned char *text)
{
    unsigned char lead = text [0];
    if (lead < 0x80)
        return 1;
    size_t length = lead >= 0xc2 && lead <= 0xdf? 2: lead >= 0xe0 && lead <= 0xef? 3:
                    lead >= 0xf0 && lead <= 0xf4? 4: 0;
    for (size_t index = 1; index < length; index++)
        if ((text [index] & 0xc0) != 0x80)
            return 0;
    if ((lead == 0xe0 && text [1] < 0xa0) || (lead == 0xed && text [1] > 0x9f)
    ||  (lead == 0xf0 && text [1] < 0x90) || (lead == 0xf4 && text [1] > 0x8f))
        return 0;
    return length;
}

void
dsh_fspath_shown (const char *path, char *shown, size_t shown_size)
{
    //  A reason goes back to the caller as a msgpack str, which is UTF-8:
    //  any byte of the path that is not part of a UTF-8 character is shown
    //  as \xNN, and a long path is cut between characters
    assert (shown_size > 8);
    const unsigned char *text = (const unsigned char *) path;
    size_t used = 0;
    while (*text) {
        size_t length = s_utf8_length (text);
        size_t needed = length? length: 4;
        if (used + needed + 4 > shown_size) {
            memcpy (shown + used, "...", 3);
            used += 3;
            break;
        }
        if (length) {
            memcpy (shown + used, text, length);
            text += length;
        }
        else
            snprintf (shown + used, 5, "\\x%02x", *text++);
        used += needed;
    }
    shown [used] = 0;
}

void
dsh_fspath_errno_error (int error_number, const char *path, char *error, size_t error_size)
{
    char shown [DSH_FSPATH_SHOWN_MAX + 1];
    dsh_fspath_shown (path, shown, sizeof shown);
    switch (error_number) {
        case ELOOP:
            dsh_fspath_error (error, error_size,
                              "path \"%s\" goes through a symlink (dsh-fs follows none)", shown);
            break;
        case EXDEV:
            dsh_fspath_error (error, error_size, "path \"%s\" escapes the root", shown);
            break;
        case ENOENT:
            dsh_fspath_error (error, error_size, "path \"%s\" does not exist", shown);
            break;
        case EACCES:
        case EPERM:
            dsh_fspath_error (error, error_size, "path \"%s\" is not accessible", shown);
            break;
        case ENOTDIR:
            dsh_fspath_error (error, error_size,
                              "a component of path \"%s\" is not a directory", shown);
            break;
        case EISDIR:
            dsh_fspath_error (error, error_size, "path \"%s\" is a directory", shown);
            break;
        case ENAMETOOLONG:
            dsh_fspath_error (error, error_size, "path \"%s\" is too long", shown);
            break;
        case ENOSPC:
        case EDQUOT:
            dsh_fspath_error (error, error_size, "no space left for \"%s\"", shown);
            break;
        case ENOMEM:
            dsh_fspath_error (error, error_size, "out of memory");
            break;
        default:
            dsh_fspath_error (error, error_size, "path \"%s\": %s", shown, strerror (error_number));
            break;
    }
}

//  The components of path without empty, "." and ".." ones, joined by '/'.
//  A ".." with nothing left to remove sets *climbs_out and is dropped (so an
//  absolute path stops at "/", as the kernel does). NULL if out of memory.
static char *
s_normalise (const char *path, bool *climbs_out)
{
    char *normal = malloc (strlen (path) + 1);
    if (!normal)
        return NULL;
    size_t length = 0;
    *climbs_out = false;
    const char *component = path;
    while (*component) {
        size_t component_length = strcspn (component, "/");
        if (component_length == 2 && strncmp (component, "..", 2) == 0) {
            if (length == 0)
                *climbs_out = true;
            while (length > 0 && normal [length - 1] != '/')
                length--;
            if (length > 0)
                length--;
        }
        else
        if (component_length > 0 && !(component_length == 1 && component [0] == '.')) {
            if (length > 0)
                normal [length++] = '/';
            memcpy (normal + length, component, component_length);
            length += component_length;
        }
        component += component_length;
        while (*component == '/')
            component++;
    }
    normal [length] = '\0';
    return normal;
}

//  Whether the request path, as written, can only name a directory: its
//  last component is "", "." or "..". Its normal form no longer says so.
static bool
s_names_directory (const char *path)
{
    const char *slash = strrchr (path, '/');
    const char *last = slash? slash + 1: path;
    return *last == '\0' || strcmp (last, ".") == 0 || strcmp (last, "..") == 0;
}

//  After a walk step failed with ENOTDIR: a symlink where a directory was
//  wanted says ELOOP, as openat2 would. Only the error text depends on
//  this look, never what is opened.
static int
s_symlink_or (int dir_fd, const char *name, int error_number)
{
    struct stat entry_stat;
    if (error_number == ENOTDIR
    &&  fstatat (dir_fd, name, &entry_stat, AT_SYMLINK_NOFOLLOW) == 0
    &&  S_ISLNK (entry_stat.st_mode))
        return ELOOP;
    return error_number;
}

//  Opens normal (in normal form) beneath the root one directory at a time.
//  Returns the descriptor, or -1 with errno set.
static int
s_open_by_walk (dsh_fspath_t *self, const char *normal, int flags)
{
    int dir_fd = fcntl (self->root_fd, F_DUPFD_CLOEXEC, 0);
    const char *component = normal;
    char name [NAME_MAX + 1];
    while (dir_fd >= 0 && strchr (component, '/')) {
        size_t length = strcspn (component, "/");
        if (length > NAME_MAX) {
            close (dir_fd);
            errno = ENAMETOOLONG;
            return -1;
        }
        memcpy (name, component, length);
        name [length] = '\0';
        int next_fd = openat (dir_fd, name, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
        int open_errno = next_fd < 0? s_symlink_or (dir_fd, name, errno): 0;
        close (dir_fd);
        dir_fd = next_fd;
        errno = open_errno;
        component += length + 1;
    }
    if (dir_fd < 0)
        return -1;
    const char *last = *component? component: ".";
    int fd = openat (dir_fd, last, flags | O_NOFOLLOW | O_CLOEXEC);
    int open_errno = fd < 0? s_symlink_or (dir_fd, last, errno): 0;
    close (dir_fd);
    errno = open_errno;
    return fd;
}

#ifdef DSH_HAVE_OPENAT2
//  Opens normal beneath the root with openat2. No O_NOFOLLOW: with it the
//  kernel would open a final symlink itself under O_PATH; without it,
//  RESOLVE_NO_SYMLINKS refuses a final symlink like any other. normal has
//  no "..", so the EAGAIN that RESOLVE_BENEATH gives when a rename races a
//  ".." cannot happen.
static int
s_open_by_openat2 (int root_fd, const char *normal, int flags)
{
    struct open_how how = {
        .flags = (unsigned long long) (flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
    };
    return (int) syscall (SYS_openat2, root_fd, *normal? normal: ".", &how, sizeof how);
}
#endif

//  Opens normal beneath the root the way this confinement does.
static int
s_open (dsh_fspath_t *self, const char *normal, int flags)
{
    assert (!(flags & O_CREAT));
    //  O_PATH | O_NOFOLLOW opens a final symlink itself; only directories
    //  are opened that way, and O_DIRECTORY refuses the link.
    assert (!(flags & O_PATH) || (flags & O_DIRECTORY));
#ifdef DSH_HAVE_OPENAT2
    if (!self->walk)
        return s_open_by_openat2 (self->root_fd, normal, flags);
#endif
    return s_open_by_walk (self, normal, flags);
}

dsh_fspath_t *
dsh_fspath_new (const char *root)
{
    if (!root)
        return NULL;
    char *resolved = realpath (root, NULL);
    if (!resolved)
        return NULL;
    int root_fd = open (resolved, O_PATH | O_DIRECTORY | O_CLOEXEC);
    dsh_fspath_t *self = root_fd >= 0? calloc (1, sizeof (dsh_fspath_t)): NULL;
    if (!self) {
        if (root_fd >= 0)
            close (root_fd);
        free (resolved);
        return NULL;
    }
    self->root = resolved;
    self->root_fd = root_fd;
    self->walk = true;
#ifdef DSH_HAVE_OPENAT2
    //  Kernels before 5.6 say ENOSYS; some seccomp filters say EPERM.
    //  Opening the root itself cannot fail otherwise.
    int probe_fd = s_open_by_openat2 (root_fd, "", O_PATH | O_DIRECTORY);
    if (probe_fd >= 0) {
        close (probe_fd);
        self->walk = false;
    }
#endif
    return self;
}

void
dsh_fspath_destroy (dsh_fspath_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_fspath_t *self = *self_p;
        close (self->root_fd);
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

const char *
dsh_fspath_resolver (dsh_fspath_t *self)
{
    assert (self);
    return self->walk? "walk": "openat2";
}

void
dsh_fspath_force_walk (dsh_fspath_t *self)
{
    assert (self);
    self->walk = true;
}

char *
dsh_fspath_normal (dsh_fspath_t *self, const char *path, char *error, size_t error_size)
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
    bool climbs_out;
    char *normal = s_normalise (path, &climbs_out);
    if (!normal) {
        dsh_fspath_error (error, error_size, "out of memory");
        return NULL;
    }
    //  Refused whether or not the target exists, so a caller cannot probe
    //  which files exist outside the root.
    if (climbs_out) {
        free (normal);
        dsh_fspath_errno_error (EXDEV, path, error, error_size);
        return NULL;
    }
    return normal;
}

int
dsh_fspath_open (dsh_fspath_t *self, const char *path, int flags,
                 char *error, size_t error_size)
{
    assert (self);
    char *normal = dsh_fspath_normal (self, path, error, error_size);
    if (!normal)
        return -1;
    if (s_names_directory (path))
        flags |= O_DIRECTORY;
    int fd = s_open (self, normal, flags);
    if (fd < 0)
        dsh_fspath_errno_error (errno, path, error, error_size);
    free (normal);
    return fd;
}

int
dsh_fspath_open_parent (dsh_fspath_t *self, const char *path, char **name_p,
                        char *error, size_t error_size)
{
    assert (self);
    assert (name_p);
    *name_p = NULL;
    char *normal = dsh_fspath_normal (self, path, error, error_size);
    if (!normal)
        return -1;
    if (s_names_directory (path)) {
        free (normal);
        char shown [DSH_FSPATH_SHOWN_MAX + 1];
        dsh_fspath_shown (path, shown, sizeof shown);
        dsh_fspath_error (error, error_size, "path \"%s\" does not name a file", shown);
        return -1;
    }
    char *slash = strrchr (normal, '/');
    char *name = strdup (slash? slash + 1: normal);
    if (slash)
        *slash = '\0';
    else
        normal [0] = '\0';
    int dir_fd = name? s_open (self, normal, O_PATH | O_DIRECTORY): -1;
    int open_errno = name? errno: ENOMEM;
    free (normal);
    if (dir_fd < 0) {
        free (name);
        if (open_errno == ENOENT) {
            char shown [DSH_FSPATH_SHOWN_MAX + 1];
            dsh_fspath_shown (path, shown, sizeof shown);
            dsh_fspath_error (error, error_size, "parent of \"%s\" does not exist", shown);
        }
        else
            dsh_fspath_errno_error (open_errno, path, error, error_size);
        return -1;
    }
    *name_p = name;
    return dir_fd;
}

//  Whether the normal-form path text is prefix or lies beneath it; every
//  path lies beneath "".
static bool
s_beneath (const char *text, const char *prefix)
{
    size_t length = strlen (prefix);
    return length == 0
        || (strncmp (text, prefix, length) == 0 && (text [length] == '\0' || text [length] == '/'));
}

//  Whether normal (relative to the root) lies in dir_normal (absolute, in
//  normal form without its leading '/').
static bool
s_names_within (const char *root, const char *normal, const char *dir_normal)
{
    const char *root_normal = root + 1;
    if (s_beneath (root_normal, dir_normal))
        return true;            //  dir is the root or holds it
    if (!s_beneath (dir_normal, root_normal))
        return false;
    size_t root_length = strlen (root_normal);
    return s_beneath (normal, dir_normal + root_length + (root_length > 0));
}

bool
dsh_fspath_is_within (dsh_fspath_t *self, const char *normal, const char *dir)
{
    assert (self);
    if (!normal || !dir || *dir == '\0')
        return false;
    char *absolute = NULL;
    if (asprintf (&absolute, "%s/%s", dir [0] == '/'? "": self->root, dir) < 0)
        return false;
    bool climbs_out;
    char *dir_normal = s_normalise (absolute, &climbs_out);
    bool within = dir_normal && s_names_within (self->root, normal, dir_normal);
    //  A dir spelled through symlinks outside the root (the root itself
    //  is stored resolved) is compared resolved. One that lies under the
    //  root by name is not: anyone who can write there could swap it.
    bool under_root = dir_normal && s_beneath (dir_normal, self->root + 1);
    if (!within && !under_root) {
        char *resolved = realpath (absolute, NULL);
        free (dir_normal);
        dir_normal = resolved? s_normalise (resolved, &climbs_out): NULL;
        within = dir_normal && s_names_within (self->root, normal, dir_normal);
        free (resolved);
    }
    free (dir_normal);
    free (absolute);
    return within;
}
