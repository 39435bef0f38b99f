/*  =========================================================================
    dsh_cli_call - dsh call: one tool call, or a batch of them
    =========================================================================
*/

#include "dsh_cli.h"
#include "dsh_cli_call.h"
#include "dsh_json.h"
#include "dsh_proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CALL_MARGIN_MS      2000        //  as the SDK: a lost broker must not hang a call
#define CANCEL_WAIT_MS      2000        //  after Ctrl-C, how long call waits for the answer

//  Whether a progress bar is on the terminal's last line.
static bool s_bar_shown;

//  A call's progress on stderr: a bar on a terminal, plain lines otherwise.
static void
s_progress_show (dsh_reply_t *reply)
{
    const msgpack_object *body = dsh_reply_body (reply);
    const msgpack_object *progress = dsh_map_get (body, "progress");
    const msgpack_object *total = dsh_map_get (body, "total");
    const msgpack_object *message = dsh_map_get (body, "message");
    double done = progress && (progress->type == MSGPACK_OBJECT_FLOAT64 || progress->type == MSGPACK_OBJECT_FLOAT32)?
        progress->via.f64: progress && progress->type == MSGPACK_OBJECT_POSITIVE_INTEGER? (double) progress->via.u64: 0;
    double all = total && (total->type == MSGPACK_OBJECT_FLOAT64 || total->type == MSGPACK_OBJECT_FLOAT32)?
        total->via.f64: total && total->type == MSGPACK_OBJECT_POSITIVE_INTEGER? (double) total->via.u64: -1;
    int text_size = message && message->type == MSGPACK_OBJECT_STR? (int) message->via.str.size: 0;
    const char *text = text_size? message->via.str.ptr: "";
    if (text_size > 60)
        text_size = 60;
    if (isatty (STDERR_FILENO)) {
        char bar [31];
        int filled = all > 0? (int) (30 * (done > all? 1: done / all)): 0;
        for (int index = 0; index < 30; index++)
            bar [index] = index < filled? '#': '.';
        bar [30] = 0;
        if (all > 0)
            fprintf (stderr, "\r[%s] %g/%g %.*s\033[K", bar, done, all, text_size, text);
        else
            fprintf (stderr, "\r%g %.*s\033[K", done, text_size, text);
        s_bar_shown = true;
    }
    else
    if (all > 0)
        fprintf (stderr, "progress %g/%g %.*s\n", done, all, text_size, text);
    else
        fprintf (stderr, "progress %g %.*s\n", done, text_size, text);
    fflush (stderr);
}

static void
s_progress_end (void)
{
    if (s_bar_shown)
        fprintf (stderr, "\n");
    s_bar_shown = false;
}

//  Waits for the RESULT of call_id: at most the call's deadline plus a
//  margin. Ctrl-C (or SIGTERM) cancels the call instead, and then waits at
//  most CANCEL_WAIT_MS for the broker's answer to it. NULL if none came.
static dsh_reply_t *
s_call_wait (dsh_client_t *client, const char *call_id, int timeout_ms, bool *interrupted, int *waited_ms)
{
    int wait_ms = (timeout_ms > 0? timeout_ms: DSH_DEFAULT_CALL_TIMEOUT_MS) + CALL_MARGIN_MS;
    int64_t started = zclock_mono ();
    int64_t give_up = started + wait_ms;
    //  A broker that cannot be reached is given up on as ping gives it up,
    //  not at the call's deadline
    int connect_ms = wait_ms < QUERY_TIMEOUT_MS? wait_ms: QUERY_TIMEOUT_MS;
    *interrupted = false;
    *waited_ms = wait_ms;
    while (true) {
        if (zsys_interrupted && !*interrupted) {
            *interrupted = true;
            if (dsh_client_cancel (client, call_id))
                return NULL;
            give_up = zclock_mono () + CANCEL_WAIT_MS;
        }
        int64_t now = zclock_mono ();
        if (!*interrupted && now - started >= connect_ms && !dsh_client_connected (client)) {
            *waited_ms = connect_ms;
            return NULL;
        }
        int64_t left = give_up - now;
        if (left <= 0 || dsh_client_handshake_failure (client))
            return NULL;
        //  Short waits, so that a signal is seen even if it does not
        //  interrupt the poll
        dsh_reply_t *reply = dsh_client_recv (client, left < WATCH_POLL_MS? (int) left: WATCH_POLL_MS);
        bool ours = reply && dsh_reply_call_id (reply) && streq (dsh_reply_call_id (reply), call_id);
        if (ours && streq (dsh_reply_command (reply), DSH_RESULT)) {
            s_progress_end ();
            return reply;
        }
        if (ours && streq (dsh_reply_command (reply), DSH_PROGRESS))
            s_progress_show (reply);
        dsh_reply_destroy (&reply);        //  shown, or a stray reply
    }
}

//  call --batch: one model turn's calls, the way coding agents run them.
static int
s_call_batch (dsh_cli_options_t *options)
{
    json_error_t parse_error;
    json_t *calls = streq (options->batch, "-")?
        json_loadf (stdin, JSON_REJECT_DUPLICATES, &parse_error):
        json_load_file (options->batch, JSON_REJECT_DUPLICATES, &parse_error);
    if (!calls) {
        fprintf (stderr, "dsh: invalid batch %s: %s (line %d)\n", options->batch, parse_error.text, parse_error.line);
        return EXIT_USAGE;
    }
    dsh_client_t *client = dsh_cli_client (options);
    if (!client) {
        json_decref (calls);
        return EXIT_NO_BROKER;
    }
    char error [512];
    json_t *results = dsh_client_batch (client, calls, options->agent, options->timeout_ms, error, sizeof (error));
    int exit_code = 0;
    if (!results) {
        fprintf (stderr, "dsh: %s\n", error);
        exit_code = json_is_array (calls)? EXIT_NO_BROKER: EXIT_USAGE;
        if (strstr (error, "batch entry"))
            exit_code = EXIT_USAGE;
    }
    else {
        dsh_cli_print (results, JSON_DOCUMENT);
        for (size_t index = 0; index < json_array_size (results); index++)
            if (json_is_true (json_object_get (json_array_get (results, index), "isError")))
                exit_code = EXIT_TOOL_ERROR;
        json_decref (results);
    }
    json_decref (calls);
    dsh_client_destroy (&client);
    return exit_code;
}

//  The call's meta when $TRACEPARENT holds a W3C traceparent (and
//  $TRACESTATE its tracestate): the environment carrier OpenTelemetry
//  specifies for processes, so a script a traced program runs continues
//  its trace. NULL when it is unset; an invalid one is said and ignored,
//  as W3C says of a traceparent that does not parse.
static zchunk_t *
s_trace_meta (void)
{
    const char *traceparent = getenv ("TRACEPARENT");
    if (!traceparent || !*traceparent)
        return NULL;
    const char *tracestate = getenv ("TRACESTATE");
    dsh_trace_ctx_t ctx;
    if (dsh_trace_parse_meta (&ctx, traceparent, strlen (traceparent), tracestate,
                              tracestate? strlen (tracestate): 0)) {
        fprintf (stderr, "dsh: ignoring $TRACEPARENT: not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)\n");
        return NULL;
    }
    return dsh_client_trace_meta (&ctx, NULL, 0);
}

int
dsh_cli_call (dsh_cli_options_t *options)
{
    if (options->batch) {
        if (options->nargs) {
            fprintf (stderr, "dsh: call --batch takes no NAME or JSON\n");
            return EXIT_USAGE;
        }
        return s_call_batch (options);
    }
    if (options->nargs < 1) {
        fprintf (stderr, "dsh: call: missing argument (try dsh call --help)\n");
        return EXIT_USAGE;
    }
    const char *args_json = options->nargs > 1? options->args [1]: "{}";
//  Checked here so that bad input is a usage error and nothing is sent
    char error [512];
    msgpack_sbuffer args;
    if (dsh_json_text_to_msgpack (args_json, &args, error, sizeof (error))) {
        msgpack_sbuffer_destroy (&args);
        fprintf (stderr, "dsh: invalid JSON arguments: %s\n", error);
        return EXIT_USAGE;
    }
    dsh_client_t *client = dsh_cli_client (options);
    if (!client) {
        msgpack_sbuffer_destroy (&args);
        return EXIT_NO_BROKER;
    }
    zchunk_t *meta = s_trace_meta ();
    const char *sent = dsh_client_call_send (client, NULL, options->args [0], args.data, args.size,
                                             options->agent, meta? zchunk_data (meta): NULL,
                                             meta? zchunk_size (meta): 0, options->timeout_ms);
    zchunk_destroy (&meta);
    msgpack_sbuffer_destroy (&args);
    if (!sent) {
        fprintf (stderr, "dsh: cannot send to broker at %s: %s\n", dsh_cli_endpoint (options), zmq_strerror (errno));
        dsh_client_destroy (&client);
        return EXIT_NO_BROKER;
    }
    char *call_id = strdup (sent);
    bool interrupted;
    int waited_ms;
    dsh_reply_t *reply = s_call_wait (client, call_id, options->timeout_ms, &interrupted, &waited_ms);
    int exit_code = 0;
    if (!reply) {
        if (interrupted) {
            fprintf (stderr, "dsh: interrupted; the broker did not answer the cancel within %d ms\n",
                     CANCEL_WAIT_MS);
            exit_code = EXIT_INTERRUPTED;
        }
        else {
            dsh_client_explain_silence (client, waited_ms, error, sizeof (error));
            fprintf (stderr, "dsh: %s\n", error);
            exit_code = EXIT_NO_BROKER;
        }
    }
    else {
        json_t *body = dsh_reply_json (reply);
        if (body) {
            dsh_cli_print (body, JSON_DOCUMENT);
            json_decref (body);
        }
        else
            fprintf (stderr, "dsh: the RESULT has no JSON form\n");
        exit_code = (body && !dsh_reply_is_error (reply))? 0: EXIT_TOOL_ERROR;
    }
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);
    dsh_client_destroy (&client);
    return exit_code;
}
