/*  =========================================================================
    dsh-demo - a small component that shows what a tool provider looks like

        dsh-demo [--broker ENDPOINT[,ENDPOINT...]] [--id ID] [--workers N] [--queue N] [--prefix P] [--cert FILE --broker-cert FILE] [-v]

    Tools: echo (returns the message), sleep_ms (a slow read-only call, for
    timeouts, cancellation and parallelism), tick (a slow call that is NOT
    concurrency-safe, reporting when it ran, to show exclusive execution),
    count (reports progress as it counts), fail (always an error result)
    and sample_content (one content block of every MCP kind plus
    structuredContent, so tests can see every block survive the trip).
    Each tool is a typed definition written as static data; the provider
    checks arguments against it before a handler runs.
    =========================================================================
*/

#include "dsh_component.h"
#include "dsh_proto.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  The longest sleep_ms accepts: ten minutes.
#define SLEEP_MS_MAX    600000

static const dsh_param_t s_echo_params [] = {
    { .name = "message", .type = DSH_TYPE_STRING, .required = true,
      .description = "the text to return" },
    { .name = NULL }
};

static const dsh_tooldef_t s_echo_def = {
    .name = "echo",
    .description = "Return the message unchanged, as one text block",
    .params = s_echo_params,
    .read_only = DSH_HINT_TRUE
};

static const dsh_param_t s_sleep_ms_params [] = {
    { .name = "ms", .type = DSH_TYPE_INTEGER, .required = true,
      .description = "milliseconds to sleep, 0-600000" },
    { .name = NULL }
};

static const dsh_tooldef_t s_sleep_ms_def = {
    .name = "sleep_ms",
    .description = "Sleep for the given number of milliseconds, then say so",
    .params = s_sleep_ms_params,
    .read_only = DSH_HINT_TRUE,
    .idempotent = DSH_HINT_TRUE,
    .concurrency_safe = true
};

static const dsh_tooldef_t s_tick_def = {
    .name = "tick",
    .description = "Sleep for the given number of milliseconds and report when it started and ended "
                   "(monotonic ms); not concurrency-safe, so a batch runs ticks one at a time",
    .params = s_sleep_ms_params,
    .read_only = DSH_HINT_FALSE,
    .destructive = DSH_HINT_FALSE
};

static const dsh_param_t s_count_params [] = {
    { .name = "to", .type = DSH_TYPE_INTEGER, .required = true, .description = "count from 1 to this, 1-1000" },
    { .name = "step_ms", .type = DSH_TYPE_INTEGER, .description = "milliseconds per step (default 10)" },
    { .name = NULL }
};

static const dsh_tooldef_t s_count_def = {
    .name = "count",
    .description = "Count slowly, reporting progress at every step",
    .params = s_count_params,
    .read_only = DSH_HINT_TRUE,
    .concurrency_safe = true
};

static const dsh_param_t s_fail_params [] = {
    { .name = "message", .type = DSH_TYPE_STRING,
      .description = "the error message (default: \"requested failure\")" },
    { .name = NULL }
};

static const dsh_tooldef_t s_fail_def = {
    .name = "fail",
    .description = "Always fail, with the given message",
    .params = s_fail_params,
    .read_only = DSH_HINT_TRUE
};

static const dsh_tooldef_t s_sample_content_def = {
    .name = "sample_content",
    .description = "Return one content block of every MCP kind (text, image, audio, "
                   "resource_link, text resource, blob resource) and structuredContent",
    .read_only = DSH_HINT_TRUE
};

//  A real 1x1 PNG: one opaque green pixel.
static const unsigned char s_tiny_png [] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d,
    0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01,
    0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00,
    0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x56, 0xc7, 0x2f, 0x0d, 0x00, 0x00,
    0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82
};

//  A WAV header with no samples: 8 kHz, mono, 8-bit PCM.
static const unsigned char s_empty_wav [] = {
    'R', 'I', 'F', 'F', 0x24, 0x00, 0x00, 0x00, 'W', 'A', 'V', 'E',
    'f', 'm', 't', ' ', 0x10, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00,
    0x40, 0x1f, 0x00, 0x00, 0x40, 0x1f, 0x00, 0x00, 0x01, 0x00, 0x08, 0x00,
    'd', 'a', 't', 'a', 0x00, 0x00, 0x00, 0x00
};

//  Bytes that are not text, including a zero, for the blob resource.
static const unsigned char s_blob [] = { 0x00, 0x01, 0x02, 0xfe, 0xff };

//  Set once before the provider starts, only read afterwards.
static bool s_verbose = false;

static void
s_log_call (dsh_call_t *call)
{
    if (s_verbose)
        zsys_info ("dsh-demo: %s (call %s, agent %s)", dsh_call_name (call),
                   dsh_call_id (call), dsh_call_agent (call)? dsh_call_agent (call): "-");
}

static int
s_echo (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    s_log_call (call);
    //  The raw string, so a message holding a NUL comes back whole.
    const msgpack_object *message = dsh_call_arg (call, "message");
    if (message && message->type == MSGPACK_OBJECT_STR)
        dsh_result_text_n (result, message->via.str.ptr, message->via.str.size);
    else
        dsh_result_text (result, "");
    return 0;
}

static int
s_sleep_ms (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    s_log_call (call);
    int64_t ms = dsh_call_integer (call, "ms", -1);
    if (ms < 0 || ms > SLEEP_MS_MAX) {
        dsh_result_error (result, DSH_E_INVALID_ARGS,
                          "invalid arguments: \"ms\" must be from 0 to %d", SLEEP_MS_MAX);
        return 0;
    }
    //  Waits on the call's cancel fd, in slices so Ctrl-C does not wait
    //  for a ten-minute sleep to end either
    int64_t deadline = zclock_mono () + ms;
    zmq_pollitem_t cancel = { NULL, dsh_call_cancel_fd (call), ZMQ_POLLIN, 0 };
    for (int64_t left = ms; left > 0 && !zsys_interrupted && !dsh_call_cancelled (call);
         left = deadline - zclock_mono ())
        zmq_poll (&cancel, cancel.fd == -1? 0: 1, left < 50? left: 50);
    if (dsh_call_cancelled (call))
        dsh_result_error (result, DSH_E_CANCELLED, "cancelled after %" PRId64 " ms", ms - (deadline - zclock_mono ()));
    else
    if (zsys_interrupted && zclock_mono () < deadline)
        dsh_result_error (result, NULL, "interrupted: the component is shutting down");
    else
        dsh_result_textf (result, "slept %" PRId64 " ms", ms);
    return 0;
}

static int
s_tick (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    s_log_call (call);
    int64_t ms = dsh_call_integer (call, "ms", -1);
    if (ms < 0 || ms > SLEEP_MS_MAX) {
        dsh_result_error (result, DSH_E_INVALID_ARGS,
                          "invalid arguments: \"ms\" must be from 0 to %d", SLEEP_MS_MAX);
        return 0;
    }
    int64_t started = zclock_mono ();
    zclock_sleep ((int) ms);
    dsh_result_textf (result, "%" PRId64 " %" PRId64, started, zclock_mono ());
    return 0;
}

static int
s_count (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    s_log_call (call);
    int64_t to = dsh_call_integer (call, "to", 0);
    int64_t step_ms = dsh_call_integer (call, "step_ms", 10);
    if (to < 1 || to > 1000 || step_ms < 0 || step_ms > 10000) {
        dsh_result_error (result, DSH_E_INVALID_ARGS,
                          "invalid arguments: \"to\" must be from 1 to 1000 and \"step_ms\" from 0 to 10000");
        return 0;
    }
    for (int64_t step = 1; step <= to && !dsh_call_cancelled (call); step++) {
        zclock_sleep ((int) step_ms);
        char message [32];
        snprintf (message, sizeof (message), "step %" PRId64, step);
        dsh_call_progress (call, (double) step, (double) to, message);
    }
    dsh_result_textf (result, "counted to %" PRId64, to);
    return 0;
}

static int
s_fail (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    s_log_call (call);
    dsh_result_error (result, NULL, "%s", dsh_call_string (call, "message", "requested failure"));
    return 0;
}

static int
s_sample_content (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    s_log_call (call);
    dsh_result_text (result, "sample text");
    dsh_result_image (result, "image/png", s_tiny_png, sizeof s_tiny_png);
    dsh_result_audio (result, "audio/wav", s_empty_wav, sizeof s_empty_wav);
    dsh_result_resource_link (result, "dsh://demo/sample.txt", "sample.txt",
                              "text/plain", "a linked sample resource");
    dsh_result_resource_text (result, "dsh://demo/embedded.txt", "text/plain",
                              "embedded sample text");
    dsh_result_resource_blob (result, "dsh://demo/sample.bin", "application/octet-stream",
                              s_blob, sizeof s_blob);

    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 2);
    msgpack_pack_str_with_body (&pk, "ok", 2);
    msgpack_pack_true (&pk);
    msgpack_pack_str_with_body (&pk, "count", 5);
    msgpack_pack_int (&pk, 6);
    dsh_result_structured (result, sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    return 0;
}

static const dsh_component_tool_t s_tools [] = {
    { &s_echo_def, s_echo },
    { &s_sleep_ms_def, s_sleep_ms },
    { &s_tick_def, s_tick },
    { &s_count_def, s_count },
    { &s_fail_def, s_fail },
    { &s_sample_content_def, s_sample_content }
};
#define TOOL_COUNT (sizeof s_tools / sizeof s_tools [0])

static void
s_usage (FILE *stream)
{
    fprintf (stream,
        "usage: dsh-demo [--broker ENDPOINT[,ENDPOINT...]] [--id ID] [--workers N] [--queue N] [--prefix P] [--cert FILE --broker-cert FILE] [-v]\n"
        "Serve the demo tools echo, sleep_ms, tick, count, fail and sample_content to a dsh broker.\n"
        DSH_COMPONENT_FLAGS_HELP);
}

int
main (int argc, char *argv [])
{
    dsh_component_options_t options = { .program = "dsh-demo" };
    int status = dsh_component_parse (&options, argc, argv, NULL);
    if (status == 1) {
        s_usage (stdout);
        return 0;
    }
    if (status == 0) {
        s_verbose = options.verbose;
        status = dsh_component_serve (&options, s_tools, TOOL_COUNT, NULL, NULL);
    }
    return status;
}
