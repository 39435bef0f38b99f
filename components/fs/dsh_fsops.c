/*  =========================================================================
    dsh_fsops - the file operations dsh-fs serves, confined to a root

    Every open goes through dsh_fspath, which opens beneath the root in one
    step and follows no symlink; nothing here opens a path by name. A write
    works on its final name with the *at calls, relative to the parent
    directory dsh_fspath opened, so the file it replaces is the one in that
    directory whatever is renamed meanwhile. Handlers run on many threads:
    nothing here keeps state.
    =========================================================================
*/

#include "dsh_fsops.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

//  jansson refuses a string that is not UTF-8; nothing else in our
//  libraries exports that check.
static bool
s_is_utf8 (const char *text, size_t size)
{
    json_t *string = json_stringn (text, size);
    bool valid = string != NULL;
    json_decref (string);
    return valid;
}

//  Reads the whole regular file behind fd, refusing more than
//  DSH_FSOPS_READ_MAX bytes even if it grows while we read.
static char *
s_read_all (int fd, size_t expected, size_t *size_p, const char *shown,
            char *error, size_t error_size)
{
    size_t capacity = (expected < DSH_FSOPS_READ_MAX? expected: DSH_FSOPS_READ_MAX) + 1;
    char *buffer = malloc (capacity + 1);
    size_t size = 0;
    while (buffer) {
        if (size == capacity) {
            if (capacity > DSH_FSOPS_READ_MAX) {
                free (buffer);
                dsh_fspath_error (error, error_size,
                             "path \"%s\": file too large (the limit is %d bytes)",
                             shown, DSH_FSOPS_READ_MAX);
                return NULL;
            }
            capacity = capacity * 2 > DSH_FSOPS_READ_MAX + 1
                     ? DSH_FSOPS_READ_MAX + 1: capacity * 2;
            char *grown = realloc (buffer, capacity + 1);
            if (!grown)
                break;
            buffer = grown;
        }
        ssize_t got = read (fd, buffer + size, capacity - size);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int read_errno = errno;
            free (buffer);
            dsh_fspath_errno_error (read_errno, shown, error, error_size);
            return NULL;
        }
        if (got == 0) {
            buffer [size] = '\0';
            *size_p = size;
            return buffer;
        }
        size += (size_t) got;
    }
    free (buffer);
    dsh_fspath_error (error, error_size, "out of memory");
    return NULL;
}

char *
dsh_fsops_read (dsh_fspath_t *fspath, const char *path, int64_t offset,
                int64_t limit, size_t *size_p, char *error, size_t error_size)
{
    assert (fspath);
    assert (size_p);
    //  O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
    //  writer; the stat below refuses it before any read.
    int fd = dsh_fspath_open (fspath, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, error, error_size);
    if (fd < 0)
        return NULL;
    char shown [DSH_FSPATH_SHOWN_MAX + 1];
    dsh_fspath_shown (path, shown, sizeof shown);
    struct stat file_stat;
    if (fstat (fd, &file_stat) != 0) {
        dsh_fspath_errno_error (errno, path, error, error_size);
        close (fd);
        return NULL;
    }
    if (!S_ISREG (file_stat.st_mode)) {
        if (S_ISDIR (file_stat.st_mode))
            dsh_fspath_error (error, error_size, "path \"%s\" is a directory", shown);
        else
            dsh_fspath_error (error, error_size, "path \"%s\" is not a regular file", shown);
        close (fd);
        return NULL;
    }
    if (file_stat.st_size > DSH_FSOPS_READ_MAX) {
        dsh_fspath_error (error, error_size,
                     "path \"%s\": file too large (%lld bytes; the limit is %d)",
                     shown, (long long) file_stat.st_size, DSH_FSOPS_READ_MAX);
        close (fd);
        return NULL;
    }
    size_t size = 0;
    char *text = s_read_all (fd, (size_t) file_stat.st_size, &size, shown, error, error_size);
    close (fd);
    if (!text)
        return NULL;
    if (!s_is_utf8 (text, size)) {
        free (text);
        dsh_fspath_error (error, error_size, "path \"%s\": file is not UTF-8 text", shown);
        return NULL;
    }
    //  A line is everything up to and including its '\n'; a last line
    //  without one still counts.
    const char *start = text;
    const char *end = text + size;
    for (int64_t skipped = 0; skipped < offset && start < end; skipped++) {
        const char *newline = memchr (start, '\n', (size_t) (end - start));
        start = newline? newline + 1: end;
    }
    const char *stop = start;
    if (limit < 0)
        stop = end;
    else
        for (int64_t taken = 0; taken < limit && stop < end; taken++) {
            const char *newline = memchr (stop, '\n', (size_t) (end - stop));
            stop = newline? newline + 1: end;
        }
    size = (size_t) (stop - start);
    memmove (text, start, size);
    text [size] = '\0';
    *size_p = size;
    return text;
}

static void
s_entry_destroy (void **item_p)
{
    dsh_fsops_entry_t *entry = (dsh_fsops_entry_t *) *item_p;
    if (entry) {
        free (entry->name);
        free (entry);
        *item_p = NULL;
    }
}

static int
s_entry_compare (const void *item1, const void *item2)
{
    return strcmp (((const dsh_fsops_entry_t *) item1)->name,
                   ((const dsh_fsops_entry_t *) item2)->name);
}

//  The kind of the entry name in the directory dir_fd, without following
//  a symlink.
static dsh_fsops_kind_t
s_entry_kind (int dir_fd, const struct dirent *dirent)
{
    unsigned char type = dirent->d_type;
    if (type == DT_UNKNOWN) {
        struct stat entry_stat;
        if (fstatat (dir_fd, dirent->d_name, &entry_stat, AT_SYMLINK_NOFOLLOW) != 0)
            return DSH_FSOPS_OTHER;
        return S_ISREG (entry_stat.st_mode)? DSH_FSOPS_FILE
             : S_ISDIR (entry_stat.st_mode)? DSH_FSOPS_DIRECTORY
             : DSH_FSOPS_OTHER;
    }
    return type == DT_REG? DSH_FSOPS_FILE
         : type == DT_DIR? DSH_FSOPS_DIRECTORY
         : DSH_FSOPS_OTHER;
}

//  File names are bytes; listings go out as UTF-8 strings.
static char *
s_entry_name (const char *name)
{
    char *copy = strdup (name);
    if (copy && !s_is_utf8 (copy, strlen (copy)))
        for (char *c = copy; *c; c++)
            if ((unsigned char) *c > 0x7f)
                *c = '?';
    return copy;
}

zlistx_t *
dsh_fsops_list (dsh_fspath_t *fspath, const char *path, char *error, size_t error_size)
{
    assert (fspath);
    int fd = dsh_fspath_open (fspath, path, O_RDONLY | O_DIRECTORY, error, error_size);
    if (fd < 0)
        return NULL;
    DIR *dir = fdopendir (fd);
    if (!dir) {
        dsh_fspath_errno_error (errno, path, error, error_size);
        close (fd);
        return NULL;
    }
    zlistx_t *entries = zlistx_new ();
    zlistx_set_destructor (entries, s_entry_destroy);
    zlistx_set_comparator (entries, s_entry_compare);
    bool failed = false;
    while (!failed) {
        errno = 0;
        struct dirent *dirent = readdir (dir);
        if (!dirent) {
            if (errno) {
                dsh_fspath_errno_error (errno, path, error, error_size);
                failed = true;
            }
            break;
        }
        if (strcmp (dirent->d_name, ".") == 0 || strcmp (dirent->d_name, "..") == 0)
            continue;
        dsh_fsops_entry_t *entry = calloc (1, sizeof (dsh_fsops_entry_t));
        if (entry) {
            entry->name = s_entry_name (dirent->d_name);
            entry->kind = s_entry_kind (dirfd (dir), dirent);
        }
        if (!entry || !entry->name) {
            s_entry_destroy ((void **) &entry);
            dsh_fspath_error (error, error_size, "out of memory");
            failed = true;
        }
        else
            zlistx_add_end (entries, entry);
    }
    closedir (dir);
    if (failed) {
        zlistx_destroy (&entries);
        return NULL;
    }
    zlistx_sort (entries);
    return entries;
}

const char *
dsh_fsops_kind_name (dsh_fsops_kind_t kind)
{
    return kind == DSH_FSOPS_FILE? "file"
         : kind == DSH_FSOPS_DIRECTORY? "directory"
         : "other";
}

//  Writes all of content to fd, retrying short writes.
static int
s_write_all (int fd, const void *content, size_t size)
{
    const char *cursor = (const char *) content;
    while (size > 0) {
        ssize_t written = write (fd, cursor, size);
        if (written < 0 && errno == EINTR)
            continue;
        if (written < 0)
            return -1;
        cursor += written;
        size -= (size_t) written;
    }
    return 0;
}

int
dsh_fsops_write (dsh_fspath_t *fspath, const char *path, const void *content,
                 size_t size, char *error, size_t error_size)
{
    assert (fspath);
    assert (content || size == 0);
    char *name = NULL;
    int dir_fd = dsh_fspath_open_parent (fspath, path, &name, error, error_size);
    if (dir_fd < 0)
        return -1;
    char shown [DSH_FSPATH_SHOWN_MAX + 1];
    dsh_fspath_shown (path, shown, sizeof shown);

    //  0666 lets the umask decide a new file's mode, as any editor would;
    //  a replaced file keeps the mode it had.
    mode_t mode = 0666;
    bool replacing = false;
    struct stat target_stat;
    if (fstatat (dir_fd, name, &target_stat, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK (target_stat.st_mode)) {
            dsh_fspath_errno_error (ELOOP, path, error, error_size);
            goto failed;
        }
        if (S_ISDIR (target_stat.st_mode)) {
            dsh_fspath_error (error, error_size, "path \"%s\" is a directory", shown);
            goto failed;
        }
        if (!S_ISREG (target_stat.st_mode)) {
            dsh_fspath_error (error, error_size, "path \"%s\" is not a regular file", shown);
            goto failed;
        }
        mode = target_stat.st_mode & 07777;
        replacing = true;
    }
    else
    if (errno != ENOENT) {
        dsh_fspath_errno_error (errno, path, error, error_size);
        goto failed;
    }
    //  A unique hidden name beside the target; O_EXCL never follows a
    //  symlink someone planted there. The rename then replaces whatever
    //  entry holds the name by then (a symlink swapped in is replaced, not
    //  followed), in the directory we hold.
    zuuid_t *uuid = zuuid_new ();
    char temp_name [64];
    snprintf (temp_name, sizeof temp_name, ".dsh-%s.tmp", zuuid_str_canonical (uuid));
    zuuid_destroy (&uuid);
    int fd = openat (dir_fd, temp_name,
                     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) {
        dsh_fspath_errno_error (errno, path, error, error_size);
        goto failed;
    }
    int rc = s_write_all (fd, content, size);
    int write_errno = errno;
    if (rc == 0 && replacing && fchmod (fd, mode) != 0) {
        rc = -1;
        write_errno = errno;
    }
    if (close (fd) != 0 && rc == 0) {
        rc = -1;
        write_errno = errno;
    }
    if (rc == 0 && renameat (dir_fd, temp_name, dir_fd, name) != 0) {
        rc = -1;
        write_errno = errno;
    }
    if (rc != 0) {
        unlinkat (dir_fd, temp_name, 0);
        dsh_fspath_errno_error (write_errno, path, error, error_size);
        goto failed;
    }
    close (dir_fd);
    free (name);
    return 0;

failed:
    close (dir_fd);
    free (name);
    return -1;
}

int
dsh_fsops_check_sandbox (dsh_fspath_t *fspath, const char *path, bool writing,
                         const char *policy, const char *workspace,
                         char *error, size_t error_size)
{
    assert (fspath);
    if (!policy || streq (policy, "danger-full-access"))
        return 0;
    if (streq (policy, "read-only")) {
        if (!writing)
            return 0;
        dsh_fspath_error (error, error_size, "sandbox policy \"read-only\" forbids writing");
        return -1;
    }
    if (!streq (policy, "workspace-write")) {
        char shown [DSH_FSPATH_SHOWN_MAX + 1];
        dsh_fspath_shown (policy, shown, sizeof shown);
        dsh_fspath_error (error, error_size, "unknown sandbox policy \"%s\"", shown);
        return -1;
    }
    //  workspace-write reads anywhere the root allows, and writes only in
    //  the workspace (the coding agents' policy of that name)
    if (!writing)
        return 0;
    if (!workspace || !*workspace) {
        dsh_fspath_error (error, error_size, "sandbox policy \"workspace-write\" names no workspace");
        return -1;
    }
    char *normal = dsh_fspath_normal (fspath, path, NULL, 0);
    if (!normal)
        return 0;
    bool within = dsh_fspath_is_within (fspath, normal, workspace);
    free (normal);
    if (within)
        return 0;
    char shown [DSH_FSPATH_SHOWN_MAX + 1];
    dsh_fspath_shown (path, shown, sizeof shown);
    dsh_fspath_error (error, error_size, "path \"%s\" is outside the sandbox workspace", shown);
    return -1;
}
