/*  =========================================================================
    dsh_fspath - open files beneath a root directory, and nowhere else

    dsh-fs serves a directory tree to agents; nothing outside it may be read
    or written, even while a local process rearranges the tree. So a request
    path is never checked and then opened by name: it is opened in one step
    relative to a descriptor of the root held open for the confinement's
    life, and no symlink anywhere in it is followed. A request path is taken
    relative to the root (a leading '/' means the root itself); it is refused
    if it is empty, climbs above the root with "..", or has a symlink in it.
    Operations on a final name (create, replace) get the descriptor of its
    parent directory and work on the name with the *at calls.
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
//  with realpath and opened once). NULL if root is not a directory.
dsh_fspath_t *
    dsh_fspath_new (const char *root);

//  Destroy; safe to call twice.
void
    dsh_fspath_destroy (dsh_fspath_t **self_p);

//  The resolved root.
const char *
    dsh_fspath_root (dsh_fspath_t *self);

//  How paths are opened: "openat2" (the kernel refuses symlinks and escapes
//  in one call) or "walk" (one directory at a time, where openat2 is
//  missing).
const char *
    dsh_fspath_resolver (dsh_fspath_t *self);

//  Open paths by the walk even where openat2 works, so tests cover both.
void
    dsh_fspath_force_walk (dsh_fspath_t *self);

//  The request path in normal form: relative to the root, without empty,
//  "." or ".." components ("" for the root itself). Caller frees. NULL with
//  a one-line reason in error if it is empty, too long, or climbs above the
//  root.
char *
    dsh_fspath_normal (dsh_fspath_t *self, const char *path,
                       char *error, size_t error_size);

//  Open path beneath the root with open(2) flags (O_CLOEXEC and O_NOFOLLOW
//  are added; O_CREAT is not allowed: create through the parent). Returns
//  the descriptor, or -1 with a one-line reason in error.
int
    dsh_fspath_open (dsh_fspath_t *self, const char *path, int flags,
                     char *error, size_t error_size);

//  Open the directory that holds the last component of path (an O_PATH
//  descriptor for the *at calls) and return that component in *name_p
//  (caller frees). The last component must name an entry: not "", "." or
//  "..". Returns the descriptor, or -1 with a one-line reason in error.
int
    dsh_fspath_open_parent (dsh_fspath_t *self, const char *path, char **name_p,
                            char *error, size_t error_size);

//  Whether a path in normal form lies inside dir (absolute, or relative to
//  the root). Names are compared, not resolved: a path with a symlink in it
//  is never opened, so its names are where it lands. Used to enforce a
//  workspace.
bool
    dsh_fspath_is_within (dsh_fspath_t *self, const char *normal, const char *dir);

//  Write the reason an open or a later call on path failed with
//  error_number into error (may be NULL).
void
    dsh_fspath_errno_error (int error_number, const char *path,
                            char *error, size_t error_size);

//  Write a one-line reason into error (may be NULL): request paths are
//  echoed in reasons, so control bytes in them are shown as '?'.
void
    dsh_fspath_error (char *error, size_t error_size, const char *format, ...)
        __attribute__ ((format (printf, 3, 4)));

//  A request path as reasons show it: any byte that is not part of a UTF-8
//  character as \xNN (a reason is a msgpack str), long ones cut, with "...".
void
    dsh_fspath_shown (const char *path, char *shown, size_t shown_size);

#ifdef __cplusplus
}
#endif

#endif
