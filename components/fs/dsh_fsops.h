/*  =========================================================================
    dsh_fsops - the file operations dsh-fs serves, confined to a root

    Read a text file (whole, or a range of lines), list a directory, write a
    file: each on a dsh_fspath, with no sockets, so they can be tested on
    their own. Every request path is opened by dsh_fspath, beneath the root
    and through no symlink, in the same step that checks it: nothing is
    checked by name and opened later. Safe to call from many threads at once.
    =========================================================================
*/

#ifndef DSH_FSOPS_H_INCLUDED
#define DSH_FSOPS_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

#include "dsh_fspath.h"

#ifdef __cplusplus
extern "C" {
#endif

//  The largest file dsh_fsops_read returns, in bytes.
#define DSH_FSOPS_READ_MAX  (10 * 1024 * 1024)

//  What a directory entry is (symlinks are not followed: they are OTHER).
typedef enum {
    DSH_FSOPS_FILE,
    DSH_FSOPS_DIRECTORY,
    DSH_FSOPS_OTHER
} dsh_fsops_kind_t;

//  One directory entry. name is valid UTF-8: a name that is not has each
//  byte above 0x7f shown as '?'.
typedef struct {
    char *name;
    dsh_fsops_kind_t kind;
} dsh_fsops_entry_t;

//  Read a regular UTF-8 text file under the root. offset skips that many
//  lines first; limit (negative: no limit) caps the lines returned. Returns
//  the text, NUL-terminated (caller frees), with its length in *size_p, or
//  NULL with a one-line reason in error.
char *
    dsh_fsops_read (dsh_fspath_t *fspath, const char *path, int64_t offset,
                    int64_t limit, size_t *size_p, char *error, size_t error_size);

//  List a directory under the root: a list of dsh_fsops_entry_t sorted by
//  name (bytewise), without "." and "..". The list destroys its entries;
//  caller destroys the list. NULL with a one-line reason in error.
zlistx_t *
    dsh_fsops_list (dsh_fspath_t *fspath, const char *path,
                    char *error, size_t error_size);

//  The kind as listings name it: "file", "directory" or "other".
const char *
    dsh_fsops_kind_name (dsh_fsops_kind_t kind);

//  Create or replace a regular file under the root with size bytes of
//  content. The new content appears at once (written beside the file, then
//  renamed over it, in the parent directory dsh_fspath opened); a replaced
//  file keeps its permissions; a symlink is refused, not followed. Returns
//  0, or -1 with a one-line reason in error.
int
    dsh_fsops_write (dsh_fspath_t *fspath, const char *path, const void *content,
                     size_t size, char *error, size_t error_size);

//  Check a request against the sandbox policy stamped on its call (NULL:
//  none): "read-only" refuses writing, "workspace-write" refuses any path
//  whose normal form lies outside workspace (a relative workspace is taken
//  under the root; see dsh_fspath_is_within), "danger-full-access" or none
//  leaves the root's confinement alone. Returns 0 if allowed (also when the
//  path is refused by the root: the operation reports that), or -1 with a
//  one-line reason in error.
int
    dsh_fsops_check_sandbox (dsh_fspath_t *fspath, const char *path, bool writing,
                             const char *policy, const char *workspace,
                             char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
