/*  =========================================================================
    dsh-fs - serve one directory tree to agents as dsh tools

        dsh-fs --root DIR [--broker ENDPOINT[,ENDPOINT...]] [--id ID] [--workers N]
               [--prefix P] [--cert FILE --broker-cert FILE] [-v]

    Tools: read_file, list_directory (both read-only) and write_file. Every
    path is taken relative to the root and opened beneath it in one step
    from a descriptor of the root, following no symlink (dsh_fspath), so a
    directory swapped for a symlink mid-call cannot lead outside; the
    operations live in dsh_fsops.
    A call stamped with a sandbox policy (meta "sandbox") is held to it
    too: read-only refuses writes, workspace-write keeps writes inside the
    workspace (reads go anywhere under the root). The
    handlers share only the confinement, which never changes after start,
    so they run on the provider's worker threads without locks.
    =========================================================================
*/

#include "dsh_fsops.h"
#include "dsh_proto.h"
#include "dsh_component.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dsh_param_t s_read_file_params [] = {
    { .name = "path", .type = DSH_TYPE_STRING, .required = true,
      .description = "file path, relative to the served root" },
    { .name = "offset", .type = DSH_TYPE_INTEGER,
      .description = "number of lines to skip first (0-based line offset)" },
    { .name = "limit", .type = DSH_TYPE_INTEGER,
      .description = "maximum number of lines to return" },
    { .name = NULL }
};

static const dsh_tooldef_t s_read_file_def = {
    .name = "read_file",
    .title = "Read file",
    .description = "Read a UTF-8 text file under the served root, whole or a range of lines "
                   "(at most 10 MiB)",
    .params = s_read_file_params,
    .read_only = DSH_HINT_TRUE,
    .open_world = DSH_HINT_FALSE,
    .confined = true
};

static const dsh_param_t s_list_directory_params [] = {
    { .name = "path", .type = DSH_TYPE_STRING, .required = true,
      .description = "directory path, relative to the served root (\"/\" is the root)" },
    { .name = NULL }
};

static const dsh_tooldef_t s_list_directory_def = {
    .name = "list_directory",
    .title = "List directory",
    .description = "List a directory under the served root: one \"[DIR] name\" or "
                   "\"[FILE] name\" line per entry, sorted by name",
    .params = s_list_directory_params,
    .read_only = DSH_HINT_TRUE,
    .open_world = DSH_HINT_FALSE,
    .confined = true
};

static const dsh_param_t s_write_file_params [] = {
    { .name = "path", .type = DSH_TYPE_STRING, .required = true,
      .description = "file path, relative to the served root; its directory must exist" },
    { .name = "content", .type = DSH_TYPE_STRING, .required = true,
      .description = "the complete new content of the file" },
    { .name = NULL }
};

static const dsh_tooldef_t s_write_file_def = {
    .name = "write_file",
    .title = "Write file",
    .description = "Create a file under the served root, or replace its whole content",
    .params = s_write_file_params,
    .read_only = DSH_HINT_FALSE,
    .destructive = DSH_HINT_TRUE,
    .idempotent = DSH_HINT_TRUE,
    .open_world = DSH_HINT_FALSE,
    //  s_sandbox_allows checks every path against the call's stamp
    .confined = true
};

//  Set once before the provider starts, only read afterwards.
static bool s_verbose = false;

//  A string argument with its length: C strings would silently cut one
//  at an embedded NUL. The typed spec has already checked it is a string.
static const char *
s_string_arg (dsh_call_t *call, const char *key, size_t *size_p)
{
    const msgpack_object *value = dsh_call_arg (call, key);
    if (!value || value->type != MSGPACK_OBJECT_STR) {
        *size_p = 0;
        return "";
    }
    *size_p = value->via.str.size;
    return value->via.str.ptr;
}

//  The path argument as a C string, or NULL with the error set when it
//  holds a NUL byte (it would name a different file than the caller sent).
static const char *
s_path_arg (dsh_call_t *call, dsh_result_t *result)
{
    size_t size;
    const char *path = s_string_arg (call, "path", &size);
    if (memchr (path, '\0', size)) {
        dsh_result_error (result, NULL, "path holds a NUL byte");
        return NULL;
    }
    return dsh_call_string (call, "path", "");
}

//  The sandbox policy stamped on the call (meta "sandbox": {policy,
//  workspace?}, set by the broker's sandbox stage) allows the request;
//  else the error is set. A stamp we cannot read refuses, as the most
//  restrictive reading of it would.
static bool
s_sandbox_allows (dsh_call_t *call, dsh_result_t *result, dsh_fspath_t *fspath,
                  const char *path, bool writing)
{
    const msgpack_object *stamp = dsh_map_get (dsh_call_meta (call), "sandbox");
    if (!stamp)
        return true;
    const msgpack_object *policy = dsh_map_get (stamp, "policy");
    const msgpack_object *workspace = dsh_map_get (stamp, "workspace");
    if (!policy || policy->type != MSGPACK_OBJECT_STR
    ||  (workspace && workspace->type != MSGPACK_OBJECT_STR)) {
        dsh_result_error (result, DSH_E_DENIED, "malformed sandbox policy");
        return false;
    }
    char *policy_text = strndup (policy->via.str.ptr, policy->via.str.size);
    char *workspace_text = workspace? strndup (workspace->via.str.ptr, workspace->via.str.size): NULL;
    char error [256];
    int rc = policy_text && (!workspace || workspace_text)
           ? dsh_fsops_check_sandbox (fspath, path, writing, policy_text, workspace_text,
                                      error, sizeof error)
           : (snprintf (error, sizeof error, "out of memory"), -1);
    free (policy_text);
    free (workspace_text);
    if (rc != 0)
        dsh_result_error (result, DSH_E_DENIED, "%s", error);
    return rc == 0;
}

static void
s_log_call (dsh_call_t *call)
{
    if (s_verbose)
        zsys_info ("dsh-fs: %s %s (call %s)", dsh_call_name (call),
                   dsh_call_string (call, "path", ""), dsh_call_id (call));
}

static int
s_read_file (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    dsh_fspath_t *fspath = (dsh_fspath_t *) arg;
    s_log_call (call);
    const char *path = s_path_arg (call, result);
    if (!path || !s_sandbox_allows (call, result, fspath, path, false))
        return 0;
    int64_t offset = dsh_call_integer (call, "offset", 0);
    int64_t limit = dsh_call_has (call, "limit")? dsh_call_integer (call, "limit", -1): -1;
    if (offset < 0 || (dsh_call_has (call, "limit") && limit < 0)) {
        dsh_result_error (result, DSH_E_INVALID_ARGS,
                          "invalid arguments: offset and limit must be 0 or more");
        return 0;
    }
    char error [256];
    size_t size = 0;
    char *text = dsh_fsops_read (fspath, path, offset, limit, &size, error, sizeof error);
    if (!text) {
        dsh_result_error (result, NULL, "%s", error);
        return 0;
    }
    dsh_result_text_n (result, text, size);
    free (text);
    return 0;
}

//  Listing text shows one entry per line; a control byte in a name would
//  forge a line, so those are shown as '?' there (the structured entries
//  keep the name as it is).
static void
s_print_listing_line (FILE *listing, const dsh_fsops_entry_t *entry, bool first)
{
    if (!first)
        fputc ('\n', listing);
    fputs (entry->kind == DSH_FSOPS_DIRECTORY? "[DIR] ": "[FILE] ", listing);
    for (const char *c = entry->name; *c; c++)
        fputc ((unsigned char) *c < 0x20 || *c == 0x7f? '?': *c, listing);
}

static int
s_list_directory (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    dsh_fspath_t *fspath = (dsh_fspath_t *) arg;
    s_log_call (call);
    const char *path = s_path_arg (call, result);
    if (!path || !s_sandbox_allows (call, result, fspath, path, false))
        return 0;
    char error [256];
    zlistx_t *entries = dsh_fsops_list (fspath, path, error, sizeof error);
    if (!entries) {
        dsh_result_error (result, NULL, "%s", error);
        return 0;
    }
    char *text = NULL;
    size_t text_size = 0;
    FILE *listing = open_memstream (&text, &text_size);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 1);
    msgpack_pack_str_with_body (&pk, "entries", 7);
    msgpack_pack_array (&pk, zlistx_size (entries));
    bool first = true;
    for (dsh_fsops_entry_t *entry = (dsh_fsops_entry_t *) zlistx_first (entries);
         entry; entry = (dsh_fsops_entry_t *) zlistx_next (entries)) {
        if (listing)
            s_print_listing_line (listing, entry, first);
        first = false;
        const char *type = dsh_fsops_kind_name (entry->kind);
        msgpack_pack_map (&pk, 2);
        msgpack_pack_str_with_body (&pk, "name", 4);
        msgpack_pack_str_with_body (&pk, entry->name, strlen (entry->name));
        msgpack_pack_str_with_body (&pk, "type", 4);
        msgpack_pack_str_with_body (&pk, type, strlen (type));
    }
    zlistx_destroy (&entries);
    if (listing && fclose (listing) == 0) {
        dsh_result_text_n (result, text, text_size);
        dsh_result_structured (result, sbuf.data, sbuf.size);
    }
    else
        dsh_result_error (result, NULL, "out of memory");
    free (text);
    msgpack_sbuffer_destroy (&sbuf);
    return 0;
}

static int
s_write_file (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    dsh_fspath_t *fspath = (dsh_fspath_t *) arg;
    s_log_call (call);
    const char *path = s_path_arg (call, result);
    if (!path || !s_sandbox_allows (call, result, fspath, path, true))
        return 0;
    size_t size;
    const char *content = s_string_arg (call, "content", &size);
    char error [256];
    if (dsh_fsops_write (fspath, path, content, size, error, sizeof error) != 0) {
        dsh_result_error (result, NULL, "%s", error);
        return 0;
    }
    dsh_result_textf (result, "wrote %zu bytes to %s", size, path);
    return 0;
}

static const dsh_component_tool_t s_tools [] = {
    { &s_read_file_def, s_read_file },
    { &s_list_directory_def, s_list_directory },
    { &s_write_file_def, s_write_file }
};
#define TOOL_COUNT (sizeof s_tools / sizeof s_tools [0])

static void
s_usage (FILE *stream)
{
    fprintf (stream,
        "usage: dsh-fs --root DIR [--broker ENDPOINT[,ENDPOINT...]] [--id ID] [--workers N] [--queue N] [--prefix P] [--cert FILE --broker-cert FILE] [-v]\n"
        "Serve the directory tree DIR to a dsh broker: read_file, list_directory, write_file.\n"
        "  --root DIR         the directory to serve (required); nothing outside it is reachable\n"
        DSH_COMPONENT_FLAGS_HELP);
}

int
main (int argc, char *argv [])
{
    const char *root = NULL;
    const dsh_component_flag_t flags [] = { { "root", &root }, { NULL, NULL } };
    dsh_component_options_t options = { .program = "dsh-fs" };
    int status = dsh_component_parse (&options, argc, argv, flags);
    if (status == 1) {
        s_usage (stdout);
        return 0;
    }
    if (status == 0 && !root)
        status = dsh_component_usage_error (&options, "--root DIR is required");
    dsh_fspath_t *fspath = NULL;
    if (status == 0 && !(fspath = dsh_fspath_new (root)))
        status = dsh_component_usage_error (&options, "--root \"%s\" is not a directory", root);
    if (status == 0) {
        s_verbose = options.verbose;
        if (s_verbose)
            zsys_info ("dsh-fs: serving %s, paths opened by %s", dsh_fspath_root (fspath),
                       dsh_fspath_resolver (fspath));
        status = dsh_component_serve (&options, s_tools, TOOL_COUNT, fspath, dsh_fspath_root (fspath));
    }
    dsh_fspath_destroy (&fspath);
    return status;
}
