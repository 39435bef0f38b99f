/*  =========================================================================
    dsh_fspath - confine file paths to a root directory

    dsh-fs serves a directory tree to agents; nothing outside it may be read
    or written. A request path is taken relative to the root (a leading '/'
    means the root itself); it is refused if it is empty, holds a NUL, or, once
    every symlink in it is resolved, names anything outside the root. Paths to
    files that do not exist yet (write_file) are resolved through their
    nearest existing ancestor, so a new file under a symlinked directory that
    points outside is refused too.
    =========================================================================
*/

#ifndef DSH_FSPATH_H_INCLUDED
#define DSH_FSPATH_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_fspath_t dsh_fspath_t;

//  How much of a request path an error echoes: enough to recognise it, and
//  short enough that the reason after it survives a small error buffer.
#define DSH_FSPATH_SHOWN_MAX 80

//  A confinement to root (must be an existing directory; it is resolved
//  with realpath). NULL if root is not a directory.
dsh_fspath_t *
    dsh_fspath_new (const char *root);

//  Destroy; safe to call twice.
void
    dsh_fspath_destroy (dsh_fspath_t **self_p);

//  The resolved root.
const char *
    dsh_fspath_root (dsh_fspath_t *self);

//  Resolve path under the root. Returns a new absolute path inside the root
//  (caller frees), or NULL with a one-line reason in error (e.g. 'path
//  "../x" escapes the root'). With must_exist false, the last component may
//  be missing (its parent must exist and resolve inside the root).
char *
    dsh_fspath_resolve (dsh_fspath_t *self, const char *path, bool must_exist,
                        char *error, size_t error_size);

//  Whether the resolved absolute path lies inside the directory dir
//  (also resolved). Used to enforce a workspace root.
bool
    dsh_fspath_is_within (const char *resolved, const char *dir);

//  Write a one-line reason into error (may be NULL): request paths are
//  echoed in reasons, so control bytes in them are shown as '?'.
void
    dsh_fspath_error (char *error, size_t error_size, const char *format, ...)
        __attribute__ ((format (printf, 3, 4)));

//  A request path as reasons show it: long ones cut, with "...".
void
    dsh_fspath_shown (const char *path, char *shown, size_t shown_size);

#ifdef __cplusplus
}
#endif

#endif
