/*  =========================================================================
    dsh-fs - serve one directory tree to agents as dsh tools

        dsh-fs --root DIR [--broker ENDPOINT] [--id ID] [--workers N]
               [--prefix P] [-v]

    Tools: read_file, list_directory (both read-only) and write_file. Every
    path is taken relative to the root and refused if it leads outside it,
    symlinks included (dsh_fspath); the operations live in dsh_fsops.
    A call stamped with a sandbox policy (meta "sandbox") is held to it
    too: read-only refuses writes, workspace-write keeps writes inside the
    workspace (reads go anywhere under the root). The
    handlers share only the confinement, which never changes after start,
    so they run on the provider's worker threads without locks.
    =========================================================================
*/

#include "dsh_fsops.h"
#include "dsh_proto.h"
#include "dsh_provider.h"

#include <getopt.h>
#include <stdarg.h>
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
    .open_world = DSH_HINT_FALSE
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
    .open_world = DSH_HINT_FALSE
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
    .open_world = DSH_HINT_FALSE
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

static const struct {
    const dsh_tooldef_t *def;
    dsh_handler_fn *handler;
} s_tools [] = {
    { &s_read_file_def, s_read_file },
    { &s_list_directory_def, s_list_directory },
    { &s_write_file_def, s_write_file }
};
#define TOOL_COUNT (sizeof s_tools / sizeof s_tools [0])

static void
s_usage (FILE *stream)
{
    fprintf (stream,
        "usage: dsh-fs --root DIR [--broker ENDPOINT] [--id ID] [--workers N] [--prefix P] [-v]\n"
        "Serve the directory tree DIR to a dsh broker: read_file, list_directory, write_file.\n"
        "  --root DIR         the directory to serve (required); nothing outside it is reachable\n"
        "  --broker ENDPOINT  the broker's front endpoint (default: $DSH_BROKER, else %s)\n"
        "  --id ID            the component id (default: a fresh one)\n"
        "  --workers N        handler threads, 1-1024 (default: 4)\n"
        "  --prefix P         prefix every tool name with P (e.g. \"proj_\" -> proj_read_file)\n"
        "  -v, --verbose      log every call on stderr\n"
        "  -h, --help         show this help\n",
        DSH_DEFAULT_ENDPOINT);
}

//  Bad usage: one line on stderr, exit status 2.
static int
s_bad_usage (const char *format, ...) __attribute__ ((format (printf, 1, 2)));

static int
s_bad_usage (const char *format, ...)
{
    va_list args;
    va_start (args, format);
    fprintf (stderr, "dsh-fs: ");
    vfprintf (stderr, format, args);
    fprintf (stderr, " (try --help)\n");
    va_end (args);
    return 2;
}

int
main (int argc, char *argv [])
{
    static const struct option options [] = {
        { "root", required_argument, NULL, 'r' },
        { "broker", required_argument, NULL, 'b' },
        { "id", required_argument, NULL, 'i' },
        { "workers", required_argument, NULL, 'w' },
        { "prefix", required_argument, NULL, 'p' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    const char *root = NULL, *broker = NULL, *id = NULL, *prefix = "";
    long workers = 0;
    opterr = 0;
    int option;
    while ((option = getopt_long (argc, argv, ":vh", options, NULL)) != -1) {
        switch (option) {
            case 'r': root = optarg; break;
            case 'b': broker = optarg; break;
            case 'i': id = optarg; break;
            case 'p': prefix = optarg; break;
            case 'v': s_verbose = true; break;
            case 'h': s_usage (stdout); return 0;
            case 'w': {
                char *end = NULL;
                workers = strtol (optarg, &end, 10);
                if (end == optarg || *end || workers < 1 || workers > 1024)
                    return s_bad_usage ("--workers needs a number from 1 to 1024, not \"%s\"", optarg);
                break;
            }
            case ':':
                return s_bad_usage ("option %s needs a value", argv [optind - 1]);
            default:
                if (optopt)
                    return s_bad_usage ("unknown option -%c", optopt);
                return s_bad_usage ("unknown option %s", argv [optind - 1]);
        }
    }
    if (optind < argc)
        return s_bad_usage ("unexpected argument \"%s\"", argv [optind]);
    if (!root)
        return s_bad_usage ("--root DIR is required");
    if (id && !dsh_proto_valid_id (id, strlen (id)))
        return s_bad_usage ("invalid component id \"%s\"", id);

    //  Prefixed definitions are copies with their own names; the provider
    //  keeps pointers to them, so they live until it is destroyed.
    dsh_tooldef_t defs [TOOL_COUNT];
    char *names [TOOL_COUNT];
    for (size_t index = 0; index < TOOL_COUNT; index++) {
        names [index] = zsys_sprintf ("%s%s", prefix, s_tools [index].def->name);
        defs [index] = *s_tools [index].def;
        defs [index].name = names [index];
    }
    int status = 0;
    for (size_t index = 0; index < TOOL_COUNT && status == 0; index++)
        if (!dsh_proto_valid_name (names [index], strlen (names [index])))
            status = s_bad_usage ("prefix \"%s\" makes an invalid tool name", prefix);
    dsh_fspath_t *fspath = NULL;
    if (status == 0) {
        fspath = dsh_fspath_new (root);
        if (!fspath)
            status = s_bad_usage ("--root \"%s\" is not a directory", root);
    }
    if (status == 0 && !broker) {
        broker = getenv ("DSH_BROKER");
        if (broker && !*broker)
            broker = NULL;
    }
    dsh_provider_t *provider = NULL;
    if (status == 0) {
        zsys_init ();
        //  stdout carries only the start line, for whoever launched us.
        zsys_set_logstream (stderr);
        provider = dsh_provider_new (broker, id, (size_t) workers);
        if (!provider) {
            fprintf (stderr, "dsh-fs: cannot start the provider\n");
            status = 1;
        }
    }
    for (size_t index = 0; index < TOOL_COUNT && status == 0; index++)
        if (dsh_provider_add (provider, &defs [index], s_tools [index].handler, fspath) != 0) {
            fprintf (stderr, "dsh-fs: cannot add tool %s\n", names [index]);
            status = 1;
        }
    if (status == 0) {
        if (dsh_provider_wait_ready (provider, 3000) != 0)
            fprintf (stderr, "dsh-fs: no answer from the broker yet; still trying\n");
        printf ("dsh-fs: component %s serving %s via %s\n", dsh_provider_id (provider),
                dsh_fspath_root (fspath), broker? broker: DSH_DEFAULT_ENDPOINT);
        fflush (stdout);
        while (!zsys_interrupted)
            zclock_sleep (100);
    }
    //  Withdraws first: no handler runs once this returns.
    dsh_provider_destroy (&provider);
    dsh_fspath_destroy (&fspath);
    for (size_t index = 0; index < TOOL_COUNT; index++)
        zstr_free (&names [index]);
    return status;
}
