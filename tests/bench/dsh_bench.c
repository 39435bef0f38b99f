/*  =========================================================================
    dsh-bench - what a dsh call costs, next to the raw ZeroMQ floor

        dsh-bench [--quick] [--json] [--only PARTS]
        dsh-bench --drive ENDPOINT [--inflight N] [--payload BYTES] [--seconds S]
                  [--calls N]

    In one run, on loopback tcp with free ports, it starts and measures:

      raw        client -> dsh-bench-echo forward -> dsh-bench-echo echo
                 (ROUTER/DEALER relay, frames echoed; no registry, no chain)
      dsh        client -> dsh-broker (empty chain) -> dsh-demo's echo
      dsh+3pass  the same through three built-in pass-through stages

    latency (one call in flight, p50/p99) and throughput (1, 16 and 64 in
    flight) against 1 and 4 replicas, with payloads of 64 B and 4 KiB; then
    the scale run: 100 components announcing 10 000 tools (dsh-bench-swarm),
    time until LIST shows them all, LIST and SNAPSHOT latency, the broker's
    memory, and fan-out of one change event to 100 subscribers. Every dsh
    figure is printed with its ratio to the raw floor of the same run.
    --quick does it all with small counts (scale: 10 x 100) in a few seconds.
    --only runs some parts (raw, dsh, pass3, scale), e.g. --only scale to
    look at the broker's memory run after run.
    --drive only loads an existing broker's echo tool, for profiling (and
    for tests/mcp/bench.mjs); with --inflight 1 it also prints p50/p99.

    Targets are reported, never asserted; the exit status is 1 only when a
    figure is missing or insane (no calls completed, errors, timeouts).
    =========================================================================
*/

#include "dsh.h"
#include "dsh_proto.h"
#include "dsh_testkit.h"

#include "dsh_sock.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>

#define S_VARIANTS      3
#define S_RAW           0
#define S_DSH           1
#define S_PASS3         2
#define S_PAYLOADS      2
#define S_SUBSCRIBERS   100
#define S_PART_SCALE    S_VARIANTS
#define S_PARTS         (S_VARIANTS + 1)
//  Longest wait for any one reply before a run counts as failed.
#define S_REPLY_WAIT_MS 5000

static const char *s_variant_names [S_VARIANTS] = { "raw floor", "dsh (empty chain)", "dsh (3 pass stages)" };
static const char *s_variant_keys [S_VARIANTS] = { "raw", "dsh", "dsh_pass3" };
//  What --only takes: the variants, then the scale run.
static const char *s_part_names [S_PARTS] = { "raw", "dsh", "pass3", "scale" };
static const size_t s_payloads [S_PAYLOADS] = { 64, 4096 };
static const int s_inflights [] = { 1, 16, 64 };
#define S_INFLIGHTS     (sizeof (s_inflights) / sizeof (s_inflights [0]))

//  How long and how many: every run stops at whichever bound comes first.
typedef struct {
    bool quick;
    int warmup_calls;
    int latency_calls;
    int latency_ms;
    int throughput_calls;
    int throughput_ms;
    int components;
    int tools;
    int queries;                //  LIST and SNAPSHOT samples
    int fanouts;                //  fan-out samples
} s_plan_t;

//  One figure of the call runs, for each variant.
typedef struct {
    char figure [32];           //  latency_p50_us, latency_p99_us, calls_per_s
    size_t payload;
    int replicas;
    int inflight;
    double value [S_VARIANTS];  //  0: not measured or failed
    bool higher_is_better;
} s_row_t;

#define S_ROWS_MAX      64

typedef struct {
    s_plan_t plan;
    bool run [S_PARTS];         //  which parts this run measures
    s_row_t rows [S_ROWS_MAX];
    size_t row_count;
    json_t *scale;              //  scale figures, by name
    bool sane;                  //  false as soon as any figure is missing or insane
    char failures [1024];
} s_bench_t;

//  Whatever a run sends calls through: a bare DEALER or a dsh client.
typedef struct {
    int variant;
    zsock_t *raw;
    dsh_client_t *client;
    zframe_t *raw_body [S_PAYLOADS];    //  the CALL body the raw client sends
    msgpack_sbuffer args [S_PAYLOADS];  //  {"message": payload}
    uint64_t errors;
    char last_error [256];
} s_target_t;

static void
s_fail (s_bench_t *self, const char *format, ...) __attribute__ ((format (printf, 2, 3)));

static void
s_fail (s_bench_t *self, const char *format, ...)
{
    char text [256];
    va_list args;
    va_start (args, format);
    vsnprintf (text, sizeof (text), format, args);
    va_end (args);
    fprintf (stderr, "dsh-bench: %s\n", text);
    self->sane = false;
    size_t used = strlen (self->failures);
    snprintf (self->failures + used, sizeof (self->failures) - used, "%s%s", used? "; ": "", text);
}

static int
s_compare_int64 (const void *a, const void *b)
{
    int64_t left = *(const int64_t *) a, right = *(const int64_t *) b;
    return (left > right) - (left < right);
}

//  The given percentile of count samples (sorts them).
static int64_t
s_percentile (int64_t *samples, size_t count, int percent)
{
    if (count == 0)
        return 0;
    qsort (samples, count, sizeof (int64_t), s_compare_int64);
    size_t index = count * (size_t) percent / 100;
    return samples [index < count? index: count - 1];
}

//  ---------------------------------------------------------------------
//  Targets

static s_target_t *
s_target_new (int variant, const char *endpoint)
{
    s_target_t *self = (s_target_t *) zmalloc (sizeof (s_target_t));
    assert (self);
    self->variant = variant;
    for (size_t index = 0; index < S_PAYLOADS; index++) {
        char *message = (char *) malloc (s_payloads [index]);
        assert (message);
        memset (message, 'x', s_payloads [index]);
        msgpack_sbuffer_init (&self->args [index]);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &self->args [index], msgpack_sbuffer_write);
        msgpack_pack_map (&pk, 1);
        dsh_pack_cstr (&pk, "message");
        msgpack_pack_str (&pk, s_payloads [index]);
        msgpack_pack_str_body (&pk, message, s_payloads [index]);
        free (message);
        self->raw_body [index] = dsh_proto_encode_call ("call-bench000-1", "echo", self->args [index].data,
                                                        self->args [index].size, NULL, NULL, 0, 10000);
    }
    if (variant == S_RAW) {
        self->raw = zsock_new (ZMQ_DEALER);
        assert (self->raw);
        dsh_sock_limit (self->raw, DSH_MAX_MESSAGE_DEFAULT, 100000);
        zsock_connect (self->raw, "%s", endpoint);
    }
    else
        self->client = dsh_client_new (endpoint);
    return self;
}

static void
s_target_destroy (s_target_t **self_p)
{
    if (*self_p) {
        s_target_t *self = *self_p;
        for (size_t index = 0; index < S_PAYLOADS; index++) {
            zframe_destroy (&self->raw_body [index]);
            msgpack_sbuffer_destroy (&self->args [index]);
        }
        zsock_destroy (&self->raw);
        dsh_client_destroy (&self->client);
        free (self);
        *self_p = NULL;
    }
}

static int
s_target_send (s_target_t *self, size_t payload)
{
    if (self->raw) {
        zmsg_t *msg = zmsg_new ();
        zmsg_addmem (msg, "", 0);
        zmsg_addstr (msg, DSH_PROTOCOL);
        zmsg_addstr (msg, DSH_CALL);
        zframe_t *body = zframe_dup (self->raw_body [payload]);
        zmsg_append (msg, &body);
        return zmsg_send (&msg, self->raw);
    }
    return dsh_client_call_send (self->client, NULL, "echo", self->args [payload].data,
                                 self->args [payload].size, NULL, NULL, 0, 10000)? 0: -1;
}

//  Takes one reply; false if none came in time. A dsh reply that is not a
//  successful RESULT counts as an error.
static bool
s_target_recv (s_target_t *self)
{
    if (self->raw) {
        zmq_pollitem_t item = { zsock_resolve (self->raw), 0, ZMQ_POLLIN, 0 };
        if (zmq_poll (&item, 1, S_REPLY_WAIT_MS) <= 0)
            return false;
        zmsg_t *msg = zmsg_recv (self->raw);
        if (!msg)
            return false;
        if (zmsg_size (msg) != 4) {
            self->errors++;
            snprintf (self->last_error, sizeof (self->last_error), "raw reply of %zu frames", zmsg_size (msg));
        }
        zmsg_destroy (&msg);
        return true;
    }
    dsh_reply_t *reply = dsh_client_recv (self->client, S_REPLY_WAIT_MS);
    if (!reply)
        return false;
    if (!streq (dsh_reply_command (reply), DSH_RESULT) || dsh_reply_is_error (reply)) {
        self->errors++;
        snprintf (self->last_error, sizeof (self->last_error), "%s %s: %s", dsh_reply_command (reply),
                  dsh_reply_error_code (reply)? dsh_reply_error_code (reply): "-",
                  dsh_reply_text (reply)? dsh_reply_text (reply): "-");
    }
    dsh_reply_destroy (&reply);
    return true;
}

//  Keeps inflight calls going until max_calls are sent or max_ms passed,
//  then collects the rest. Returns calls per second (0 on failure); with
//  samples, records each call's round trip (inflight must be 1).
static double
s_run (s_target_t *self, size_t payload, int inflight, int max_calls, int max_ms,
       int64_t *samples, size_t *sample_count)
{
    int64_t started = zclock_usecs ();
    int64_t stop_sending = started + (int64_t) max_ms * 1000;
    int sent = 0, done = 0;
    int64_t sent_at = 0;
    uint64_t errors_before = self->errors;
    while (sent < inflight && sent < max_calls) {
        sent_at = zclock_usecs ();
        if (s_target_send (self, payload))
            return 0;
        sent++;
    }
    while (done < sent) {
        if (!s_target_recv (self))
            return 0;
        done++;
        int64_t now = zclock_usecs ();
        if (samples)
            samples [(*sample_count)++] = now - sent_at;
        if (sent < max_calls && now < stop_sending) {
            sent_at = now;
            if (s_target_send (self, payload))
                return 0;
            sent++;
        }
    }
    if (self->errors != errors_before)
        return 0;
    int64_t elapsed = zclock_usecs () - started;
    return elapsed > 0? (double) done * 1e6 / (double) elapsed: 0;
}

static s_row_t *
s_row (s_bench_t *self, const char *figure, size_t payload, int replicas, int inflight, bool higher_is_better)
{
    for (size_t index = 0; index < self->row_count; index++) {
        s_row_t *row = &self->rows [index];
        if (streq (row->figure, figure) && row->payload == payload && row->replicas == replicas
        &&  row->inflight == inflight)
            return row;
    }
    assert (self->row_count < S_ROWS_MAX);
    s_row_t *row = &self->rows [self->row_count++];
    memset (row, 0, sizeof (*row));
    snprintf (row->figure, sizeof (row->figure), "%s", figure);
    row->payload = payload;
    row->replicas = replicas;
    row->inflight = inflight;
    row->higher_is_better = higher_is_better;
    return row;
}

//  Latency rows for one variant (one replica).
static void
s_measure_latency (s_bench_t *self, s_target_t *target)
{
    int64_t *samples = (int64_t *) calloc ((size_t) self->plan.latency_calls, sizeof (int64_t));
    assert (samples);
    for (size_t payload = 0; payload < S_PAYLOADS; payload++) {
        size_t count = 0;
        double rate = s_run (target, payload, 1, self->plan.latency_calls, self->plan.latency_ms, samples, &count);
        if (rate <= 0 || count == 0) {
            s_fail (self, "%s: latency run with %zu B failed (%s)", s_variant_names [target->variant],
                    s_payloads [payload], target->last_error [0]? target->last_error: "no reply");
            continue;
        }
        s_row (self, "latency_p50_us", s_payloads [payload], 1, 1, false)->value [target->variant]
            = (double) s_percentile (samples, count, 50);
        s_row (self, "latency_p99_us", s_payloads [payload], 1, 1, false)->value [target->variant]
            = (double) s_percentile (samples, count, 99);
    }
    free (samples);
}

static void
s_measure_throughput (s_bench_t *self, s_target_t *target, int replicas)
{
    for (size_t payload = 0; payload < S_PAYLOADS; payload++)
        for (size_t index = 0; index < S_INFLIGHTS; index++) {
            double rate = s_run (target, payload, s_inflights [index], self->plan.throughput_calls,
                                 self->plan.throughput_ms, NULL, NULL);
            if (rate <= 0)
                s_fail (self, "%s: throughput run (%d replicas, %d in flight, %zu B) failed (%s)",
                        s_variant_names [target->variant], replicas, s_inflights [index], s_payloads [payload],
                        target->last_error [0]? target->last_error: "no reply");
            s_row (self, "calls_per_s", s_payloads [payload], replicas, s_inflights [index], true)
                ->value [target->variant] = rate;
        }
}

static void
s_warm_up (s_bench_t *self, s_target_t *target)
{
    s_run (target, 0, 8, self->plan.warmup_calls, 2000, NULL, NULL);
    s_run (target, 1, 8, self->plan.warmup_calls, 2000, NULL, NULL);
    target->errors = 0;
}

//  ---------------------------------------------------------------------
//  Process layouts

//  Waits until the broker lists count providers of echo.
static int
s_wait_providers (const char *endpoint, size_t count, int timeout_ms)
{
    dsh_client_t *client = dsh_client_new (endpoint);
    int64_t give_up = zclock_mono () + timeout_ms;
    int rc = -1;
    while (rc && zclock_mono () < give_up) {
        char error [256];
        dsh_reply_t *reply = dsh_client_request (client, DSH_GET, "echo", 1000, error, sizeof (error));
        const msgpack_object *providers = reply? dsh_map_get (dsh_reply_body (reply), "providers"): NULL;
        if (providers && providers->type == MSGPACK_OBJECT_ARRAY && providers->via.array.size == count)
            rc = 0;
        dsh_reply_destroy (&reply);
        if (rc)
            zclock_sleep (20);
    }
    dsh_client_destroy (&client);
    return rc;
}

static void
s_stop (dsh_testproc_t **proc_p)
{
    if (*proc_p) {
        dsh_testproc_signal (*proc_p, SIGTERM);
        dsh_testproc_wait (*proc_p, 2000);
        dsh_testproc_destroy (proc_p);
    }
}

static void
s_bench_raw (s_bench_t *self)
{
    const char *argv [] = { "tests/bench/dsh-bench-echo", "forward", NULL };
    dsh_testproc_t *forwarder = dsh_testproc_start (argv);
    char *line = forwarder? dsh_testproc_wait_line (forwarder, "forwarding ", 5000): NULL;
    char front [128] = "", back [128] = "";
    if (!line || sscanf (line, "forwarding %127s %127s", front, back) != 2) {
        s_fail (self, "raw floor: the forwarder did not start");
        free (line);
        dsh_testproc_destroy (&forwarder);
        return;
    }
    free (line);
    dsh_testproc_t *echoes [4] = { NULL };
    s_target_t *target = s_target_new (S_RAW, front);
    for (int replicas = 1; replicas <= 4; replicas += 3) {
        for (int index = 0; index < replicas; index++)
            if (!echoes [index]) {
                const char *echo_argv [] = { "tests/bench/dsh-bench-echo", "echo", back, NULL };
                echoes [index] = dsh_testproc_start (echo_argv);
                char *started = echoes [index]? dsh_testproc_wait_line (echoes [index], "echoing", 5000): NULL;
                if (!started)
                    s_fail (self, "raw floor: an echo process did not start");
                free (started);
            }
        //  Connections are asynchronous: give the last ones time to be up
        //  so the forwarder's DEALER shares calls among all of them
        zclock_sleep (300);
        s_warm_up (self, target);
        if (replicas == 1)
            s_measure_latency (self, target);
        s_measure_throughput (self, target, replicas);
    }
    s_target_destroy (&target);
    for (int index = 0; index < 4; index++)
        s_stop (&echoes [index]);
    s_stop (&forwarder);
}

//  Writes a broker config with three pass stages; returns its path (caller
//  unlinks and frees) or NULL.
static char *
s_write_pass_config (void)
{
    char *path = strdup ("/tmp/dsh-bench-XXXXXX");
    int fd = mkstemp (path);
    if (fd < 0) {
        free (path);
        return NULL;
    }
    const char *text =
        "#   dsh-bench: three built-in pass-through stages\n"
        "chain\n"
        "    stage\n        name = \"p1\"\n        kind = \"pass\"\n"
        "    stage\n        name = \"p2\"\n        kind = \"pass\"\n"
        "    stage\n        name = \"p3\"\n        kind = \"pass\"\n";
    bool ok = write (fd, text, strlen (text)) == (ssize_t) strlen (text);
    close (fd);
    if (!ok) {
        unlink (path);
        zstr_free (&path);
    }
    return path;
}

static void
s_bench_dsh (s_bench_t *self, int variant)
{
    char *config = variant == S_PASS3? s_write_pass_config (): NULL;
    const char *extra [] = { "-c", config, NULL };
    char endpoint [256];
    dsh_testproc_t *broker = dsh_testkit_broker (1000, config? extra: NULL, endpoint, sizeof (endpoint));
    if (!broker) {
        s_fail (self, "%s: the broker did not start", s_variant_names [variant]);
        if (config)
            unlink (config);
        zstr_free (&config);
        return;
    }
    dsh_testproc_t *demos [4] = { NULL };
    s_target_t *target = s_target_new (variant, endpoint);
    for (int replicas = 1; replicas <= 4; replicas += 3) {
        for (int index = 0; index < replicas; index++)
            if (!demos [index]) {
                char id [32];
                snprintf (id, sizeof (id), "bench-demo-%d", index + 1);
                demos [index] = dsh_testkit_component ("components/demo/dsh-demo", endpoint, id, NULL);
                if (!demos [index])
                    s_fail (self, "%s: dsh-demo %s did not start", s_variant_names [variant], id);
            }
        if (s_wait_providers (endpoint, (size_t) replicas, 10000)) {
            s_fail (self, "%s: echo never had %d providers", s_variant_names [variant], replicas);
            break;
        }
        s_warm_up (self, target);
        if (replicas == 1)
            s_measure_latency (self, target);
        s_measure_throughput (self, target, replicas);
    }
    s_target_destroy (&target);
    for (int index = 0; index < 4; index++)
        s_stop (&demos [index]);
    s_stop (&broker);
    if (config)
        unlink (config);
    zstr_free (&config);
}

//  ---------------------------------------------------------------------
//  Scale

//  A field of /proc/PID/status in KiB, or -1.
static long
s_proc_status_kib (pid_t pid, const char *field)
{
    char path [64];
    snprintf (path, sizeof (path), "/proc/%d/status", (int) pid);
    FILE *file = fopen (path, "r");
    if (!file)
        return -1;
    char line [256];
    long value = -1;
    size_t length = strlen (field);
    while (fgets (line, sizeof (line), file))
        if (strncmp (line, field, length) == 0 && line [length] == ':') {
            value = strtol (line + length + 1, NULL, 10);
            break;
        }
    fclose (file);
    return value;
}

//  Starts dsh-broker (heartbeat 1 s) on the given front, announce, work
//  and events endpoints, or on free ports if given is NULL; writes the
//  endpoints it listens on into bound (if not NULL).
static dsh_testproc_t *
s_start_broker (char given [4][128], char bound [4][128])
{
    const char *argv [16] = { "broker/dsh-broker", "--heartbeat-ms", "1000", "--endpoint",
                              given? given [0]: "tcp://127.0.0.1:*" };
    size_t argc = 5;
    if (given) {
        argv [argc++] = "--announce";
        argv [argc++] = given [1];
        argv [argc++] = "--work";
        argv [argc++] = given [2];
        argv [argc++] = "--events";
        argv [argc++] = given [3];
    }
    argv [argc] = NULL;
    dsh_testproc_t *broker = dsh_testproc_start (argv);
    char *line = broker? dsh_testproc_wait_line (broker, "listening on ", 10000): NULL;
    //  dsh-broker: listening on F (announce A, work W, events E)
    char parsed [4][128];
    const char *start = line? strstr (line, "listening on "): NULL;
    if (!start || sscanf (start, "listening on %127s (announce %127[^,], work %127[^,], events %127[^)])",
                          parsed [0], parsed [1], parsed [2], parsed [3]) != 4) {
        free (line);
        dsh_testproc_destroy (&broker);
        return NULL;
    }
    free (line);
    if (bound)
        memcpy (bound, parsed, sizeof (parsed));
    return broker;
}

static uint64_t
s_uint_field (const msgpack_object *map, const char *key)
{
    const msgpack_object *value = map? dsh_map_get (map, key): NULL;
    return value && value->type == MSGPACK_OBJECT_POSITIVE_INTEGER? value->via.u64: 0;
}

//  Round trip of one front query, as the SDK gives it (decoded and checked),
//  in microseconds; checks the reply holds expected tools. -1 on failure.
static int64_t
s_query_sdk (dsh_client_t *client, const char *command, size_t expected)
{
    char error [256];
    int64_t started = zclock_usecs ();
    dsh_reply_t *reply = dsh_client_request (client, command, NULL, 10000, error, sizeof (error));
    int64_t elapsed = zclock_usecs () - started;
    const msgpack_object *tools = reply? dsh_map_get (dsh_reply_body (reply), "tools"): NULL;
    bool ok = tools && tools->type == MSGPACK_OBJECT_ARRAY && tools->via.array.size == expected;
    dsh_reply_destroy (&reply);
    return ok? elapsed: -1;
}

//  The same query on a bare DEALER: the broker's time plus transport, with
//  no decoding on our side. -1 on failure.
static int64_t
s_query_wire (zsock_t *dealer, const char *command)
{
    zmsg_t *msg = dsh_proto_message (NULL, command);
    zmsg_addmem (msg, "\x80", 1);          //  {}
    int64_t started = zclock_usecs ();
    if (zmsg_send (&msg, dealer))
        return -1;
    zmq_pollitem_t item = { zsock_resolve (dealer), 0, ZMQ_POLLIN, 0 };
    if (zmq_poll (&item, 1, 10000) <= 0)
        return -1;
    zmsg_t *reply = zmsg_recv (dealer);
    int64_t elapsed = zclock_usecs () - started;
    bool ok = reply && zmsg_size (reply) == 4;
    zmsg_destroy (&reply);
    return ok? elapsed: -1;
}

static double
s_query_p50 (s_bench_t *self, dsh_client_t *client, zsock_t *dealer, const char *command, size_t expected)
{
    int64_t samples [256];
    size_t count = 0;
    for (int index = 0; index < self->plan.queries && count < 256; index++) {
        int64_t elapsed = dealer? s_query_wire (dealer, command): s_query_sdk (client, command, expected);
        if (elapsed < 0) {
            s_fail (self, "scale: %s %s failed", dealer? "wire": "SDK", command);
            return 0;
        }
        samples [count++] = elapsed;
    }
    return (double) s_percentile (samples, count, 50) / 1000.0;
}

static int
s_fan_out_answer (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) call;
    (void) arg;
    dsh_result_text (result, "ok");
    return 0;
}

//  Adds one tool to provider and waits until every subscriber got its
//  tool.registered event. Writes microseconds to the first and the last
//  arrival; -1 on timeout.
static int
s_fan_out (dsh_provider_t *provider, zmq_pollitem_t *items, zsock_t **subs, const char *name,
           int64_t *first, int64_t *last)
{
    //  Nothing stale may count as an arrival. Until the subscribers have
    //  been quiet for a moment the broker may still hold a backlog for
    //  them (they did not read while the swarm joined); a PUB that drops
    //  for a full subscriber would drop the probe too
    int64_t give_up = zclock_usecs () + 10 * 1000000LL;
    int ready;
    while ((ready = zmq_poll (items, S_SUBSCRIBERS, 100)) > 0 && zclock_usecs () < give_up)
        for (int index = 0; index < S_SUBSCRIBERS; index++) {
            zmsg_t *msg;
            while ((msg = zmsg_recv_nowait (subs [index])))
                zmsg_destroy (&msg);
        }
    if (ready != 0)
        return -1;
    char entry [256];
    snprintf (entry, sizeof (entry), "{\"name\":\"%s\",\"description\":\"fan-out probe\","
              "\"parameters\":{\"type\":\"object\"}}", name);
    bool got [S_SUBSCRIBERS] = { false };
    int arrived = 0;
    *first = *last = 0;
    int64_t started = zclock_usecs ();
    if (dsh_provider_add_raw (provider, entry, s_fan_out_answer, NULL))
        return -1;
    while (arrived < S_SUBSCRIBERS) {
        int64_t left_ms = 5000 - (zclock_usecs () - started) / 1000;
        if (left_ms <= 0 || zmq_poll (items, S_SUBSCRIBERS, (long) left_ms) < 0)
            return -1;
        int64_t now = zclock_usecs ();
        for (int index = 0; index < S_SUBSCRIBERS; index++) {
            if (!(items [index].revents & ZMQ_POLLIN))
                continue;
            zmsg_t *msg = zmsg_recv_nowait (subs [index]);
            zframe_t *body = msg? zmsg_last (msg): NULL;
            if (body && !got [index] && memmem (zframe_data (body), zframe_size (body), name, strlen (name))) {
                got [index] = true;
                arrived++;
                if (arrived == 1)
                    *first = now - started;
                *last = now - started;
            }
            zmsg_destroy (&msg);
        }
    }
    return 0;
}

static double
s_median_ms (int64_t *samples, size_t count)
{
    return (double) s_percentile (samples, count, 50) / 1000.0;
}

static void
s_bench_scale (s_bench_t *self)
{
    const int heartbeat_ms = 1000;
    size_t expected = (size_t) self->plan.components * (size_t) self->plan.tools;
    char endpoints [4][128];
    dsh_testproc_t *broker = s_start_broker (NULL, endpoints);
    if (!broker) {
        s_fail (self, "scale: the broker did not start");
        return;
    }
    const char *endpoint = endpoints [0];
    pid_t pid = dsh_testproc_pid (broker);
    json_t *scale = self->scale;
    json_object_set_new (scale, "components", json_integer (self->plan.components));
    json_object_set_new (scale, "tools", json_integer ((json_int_t) expected));
    json_object_set_new (scale, "heartbeat_ms", json_integer (heartbeat_ms));
    json_object_set_new (scale, "broker_rss_idle_kib", json_integer (s_proc_status_kib (pid, "VmRSS")));

    //  The subscribers first, so they are connected before anything happens
    dsh_client_t *client = dsh_client_new (endpoint);
    char error [256];
    dsh_reply_t *welcome = dsh_client_request (client, DSH_HELLO, NULL, 5000, error, sizeof (error));
    const msgpack_object *advertised = welcome? dsh_map_get (dsh_reply_body (welcome), "events"): NULL;
    char events [256] = "";
    if (advertised && advertised->type == MSGPACK_OBJECT_STR)
        snprintf (events, sizeof (events), "%.*s", (int) advertised->via.str.size, advertised->via.str.ptr);
    dsh_reply_destroy (&welcome);
    char *events_endpoint = dsh_sock_resolve (events, endpoint);
    zsock_t *subs [S_SUBSCRIBERS];
    zmq_pollitem_t items [S_SUBSCRIBERS];
    for (int index = 0; index < S_SUBSCRIBERS; index++) {
        subs [index] = zsock_new_sub (events_endpoint, DSH_EV_REGISTERED);
        assert (subs [index]);
        items [index] = (zmq_pollitem_t) { zsock_resolve (subs [index]), 0, ZMQ_POLLIN, 0 };
    }
    zstr_free (&events_endpoint);
    zsock_t *dealer = zsock_new_dealer (endpoint);
    assert (dealer);

    //  The swarm joins; the clock runs from its start to a LIST showing all
    char components [16], tools [16];
    snprintf (components, sizeof (components), "%d", self->plan.components);
    snprintf (tools, sizeof (tools), "%d", self->plan.tools);
    const char *argv [] = { "tests/bench/dsh-bench-swarm", endpoint, components, tools, NULL };
    int64_t started = zclock_usecs ();
    dsh_testproc_t *swarm = dsh_testproc_start (argv);
    int64_t listed = -1;
    while (swarm && listed < 0 && zclock_usecs () - started < 60 * 1000000LL) {
        dsh_reply_t *pong = dsh_client_request (client, DSH_PING, NULL, 2000, error, sizeof (error));
        const msgpack_object *body = pong? dsh_reply_body (pong): NULL;
        bool complete = s_uint_field (body, "tools") >= expected
                     && s_uint_field (body, "components") >= (uint64_t) self->plan.components;
        dsh_reply_destroy (&pong);
        if (complete && s_query_sdk (client, DSH_LIST, expected) >= 0)
            listed = zclock_usecs () - started;
        else
            zclock_sleep (5);
    }
    if (listed < 0)
        s_fail (self, "scale: LIST never showed all %zu tools", expected);
    else {
        json_object_set_new (scale, "listed_ms", json_real ((double) listed / 1000.0));
        json_object_set_new (scale, "listed_heartbeats", json_real ((double) listed / 1000.0 / heartbeat_ms));
        char *line = dsh_testproc_wait_line (swarm, "swarm:", 10000);
        const char *added = line? strstr (line, "added in "): NULL;
        if (added)
            json_object_set_new (scale, "swarm_setup_ms", json_real (strtod (added + strlen ("added in "), NULL)));
        free (line);
        json_object_set_new (scale, "broker_rss_kib", json_integer (s_proc_status_kib (pid, "VmRSS")));

        json_object_set_new (scale, "list_p50_ms", json_real (s_query_p50 (self, client, NULL, DSH_LIST, expected)));
        json_object_set_new (scale, "list_wire_p50_ms", json_real (s_query_p50 (self, NULL, dealer, DSH_LIST, 0)));
        json_object_set_new (scale, "snapshot_p50_ms",
                             json_real (s_query_p50 (self, client, NULL, DSH_SNAPSHOT, expected)));
        json_object_set_new (scale, "snapshot_wire_p50_ms",
                             json_real (s_query_p50 (self, NULL, dealer, DSH_SNAPSHOT, 0)));

        //  Fan-out: one new tool, one tool.registered to every subscriber
        dsh_provider_t *provider = dsh_provider_new (endpoint, "bench-fanout", 1);
        int64_t first [64], last [64];
        size_t count = 0;
        if (dsh_provider_add_raw (provider, "{\"name\":\"fanout_base\",\"parameters\":{\"type\":\"object\"}}",
                                  s_fan_out_answer, NULL)
        ||  dsh_provider_wait_ready (provider, 10000)
        ||  s_fan_out (provider, items, subs, "fanout_warm", &first [0], &last [0]))
            s_fail (self, "scale: the fan-out probe did not reach all %d subscribers", S_SUBSCRIBERS);
        else
            for (int index = 0; index < self->plan.fanouts && index < 64; index++) {
                char name [32];
                snprintf (name, sizeof (name), "fanout_%04d", index);
                if (s_fan_out (provider, items, subs, name, &first [count], &last [count])) {
                    s_fail (self, "scale: fan-out of %s did not reach all %d subscribers", name, S_SUBSCRIBERS);
                    break;
                }
                count++;
            }
        if (count) {
            json_object_set_new (scale, "fanout_subscribers", json_integer (S_SUBSCRIBERS));
            json_object_set_new (scale, "fanout_first_p50_ms", json_real (s_median_ms (first, count)));
            json_object_set_new (scale, "fanout_all_p50_ms", json_real (s_median_ms (last, count)));
        }
        dsh_provider_destroy (&provider);
        json_object_set_new (scale, "broker_rss_final_kib", json_integer (s_proc_status_kib (pid, "VmRSS")));
        json_object_set_new (scale, "broker_hwm_kib", json_integer (s_proc_status_kib (pid, "VmHWM")));

        //  A broker restart on the same endpoints: the swarm's components
        //  each announce their whole set once (on SYNC), so this is the
        //  registry's memory without the one-announce-per-added-tool
        //  backlog of the first start, and the relearn guarantee's time
        dsh_testproc_signal (broker, SIGKILL);
        dsh_testproc_wait (broker, 2000);
        dsh_testproc_destroy (&broker);
        int64_t restarted = zclock_usecs ();
        broker = s_start_broker (endpoints, NULL);
        int64_t relearned = -1;
        while (broker && relearned < 0 && zclock_usecs () - restarted < 30 * 1000000LL) {
            if (s_query_sdk (client, DSH_LIST, expected) >= 0)
                relearned = zclock_usecs () - restarted;
            else
                zclock_sleep (10);
        }
        if (relearned < 0)
            s_fail (self, "scale: a restarted broker never relearned all %zu tools", expected);
        else {
            json_object_set_new (scale, "relearn_ms", json_real ((double) relearned / 1000.0));
            json_object_set_new (scale, "relearn_heartbeats",
                                 json_real ((double) relearned / 1000.0 / heartbeat_ms));
            json_object_set_new (scale, "relearn_broker_rss_kib",
                                 json_integer (s_proc_status_kib (dsh_testproc_pid (broker), "VmRSS")));
            json_object_set_new (scale, "relearn_snapshot_p50_ms",
                                 json_real (s_query_p50 (self, client, NULL, DSH_SNAPSHOT, expected)));
        }
    }
    for (int index = 0; index < S_SUBSCRIBERS; index++)
        zsock_destroy (&subs [index]);
    zsock_destroy (&dealer);
    dsh_client_destroy (&client);
    s_stop (&swarm);
    s_stop (&broker);
}

//  ---------------------------------------------------------------------
//  Report

static double
s_scale_number (s_bench_t *self, const char *key)
{
    json_t *value = json_object_get (self->scale, key);
    return value? json_number_value (value): NAN;
}

static const s_row_t *
s_find_row (s_bench_t *self, const char *figure, size_t payload, int replicas, int inflight)
{
    for (size_t index = 0; index < self->row_count; index++) {
        const s_row_t *row = &self->rows [index];
        if (streq (row->figure, figure) && row->payload == payload && row->replicas == replicas
        &&  row->inflight == inflight)
            return row;
    }
    return NULL;
}

//  The targets of the benchmark issue, evaluated (never asserted).
static json_t *
s_targets (s_bench_t *self)
{
    json_t *targets = json_array ();
    char text [160];
    for (size_t payload = 0; payload < S_PAYLOADS; payload++) {
        const s_row_t *row = s_find_row (self, "latency_p50_us", s_payloads [payload], 1, 1);
        if (row && row->value [S_RAW] > 0) {
            double ratio = row->value [S_PASS3] / row->value [S_RAW];
            snprintf (text, sizeof (text), "p50 through 3 pass stages <= 1.25x raw (%zu B)", s_payloads [payload]);
            json_array_append_new (targets, json_pack ("{s:s, s:f, s:f, s:b}", "target", text, "value", ratio,
                                                       "limit", 1.25, "met", ratio <= 1.25));
        }
    }
    for (int variant = S_DSH; variant <= S_PASS3; variant++)
        for (int replicas = 1; replicas <= 4; replicas += 3) {
            const s_row_t *row = s_find_row (self, "calls_per_s", 64, replicas, 64);
            if (!row || row->value [S_RAW] <= 0)
                continue;
            double ratio = row->value [variant] / row->value [S_RAW];
            snprintf (text, sizeof (text), "%s, 64 in flight, %d replica(s), 64 B: >= 0.5x raw",
                      s_variant_names [variant], replicas);
            json_array_append_new (targets, json_pack ("{s:s, s:f, s:f, s:b}", "target", text, "value", ratio,
                                                       "limit", 0.5, "met", ratio >= 0.5));
            snprintf (text, sizeof (text), "%s, 64 in flight, %d replica(s), 64 B: >= 100000 calls/s",
                      s_variant_names [variant], replicas);
            json_array_append_new (targets, json_pack ("{s:s, s:f, s:f, s:b}", "target", text,
                                                       "value", row->value [variant], "limit", 100000.0,
                                                       "met", row->value [variant] >= 100000));
        }
    struct { const char *key; const char *text; double limit; bool below; double scale; } scale [] = {
        { "snapshot_p50_ms", "SNAPSHOT p50 (SDK) < 50 ms", 50, true, 1 },
        { "broker_rss_kib", "broker RSS with all tools < 64 MiB (KiB)", 65536, true, 1 },
        { "listed_heartbeats", "all listed within 2 heartbeat intervals", 2, true, 1 },
    };
    for (size_t index = 0; index < sizeof (scale) / sizeof (scale [0]); index++) {
        double value = s_scale_number (self, scale [index].key);
        if (isnan (value))
            continue;
        snprintf (text, sizeof (text), "%s (%d x %d tools)", scale [index].text, self->plan.components,
                  self->plan.tools);
        json_array_append_new (targets, json_pack ("{s:s, s:f, s:f, s:b}", "target", text, "value", value,
                                                   "limit", scale [index].limit, "met", value < scale [index].limit));
    }
    return targets;
}

static const char *
s_figure_label (const s_row_t *row, char *label, size_t size)
{
    if (streq (row->figure, "calls_per_s"))
        snprintf (label, size, "calls/s  %d repl %2d in flight %4zu B", row->replicas, row->inflight, row->payload);
    else
        snprintf (label, size, "latency %s us          %4zu B",
                  streq (row->figure, "latency_p50_us")? "p50": "p99", row->payload);
    return label;
}

static void
s_print_table (s_bench_t *self, json_t *machine, json_t *targets)
{
    printf ("dsh-bench (%s): %s, %lld cpus, loopback tcp\n\n", self->plan.quick? "quick": "full",
            json_string_value (json_object_get (machine, "model")),
            (long long) json_integer_value (json_object_get (machine, "nproc")));
    printf ("%-40s %12s %12s %8s %12s %8s\n", "figure", "raw floor", "dsh", "ratio", "dsh+3pass", "ratio");
    for (size_t index = 0; index < self->row_count; index++) {
        const s_row_t *row = &self->rows [index];
        char label [80];
        double raw = row->value [S_RAW];
        printf ("%-40s %12.1f %12.1f %7.2fx %12.1f %7.2fx\n", s_figure_label (row, label, sizeof (label)),
                raw, row->value [S_DSH], raw > 0? row->value [S_DSH] / raw: 0,
                row->value [S_PASS3], raw > 0? row->value [S_PASS3] / raw: 0);
    }
    printf ("\nscale (%d components x %d tools, %d subscribers):\n", self->plan.components, self->plan.tools,
            S_SUBSCRIBERS);
    const char *key;
    json_t *value;
    json_object_foreach (self->scale, key, value)
        if (json_is_integer (value))
            printf ("  %-26s %12lld\n", key, (long long) json_integer_value (value));
        else
            printf ("  %-26s %12.2f\n", key, json_number_value (value));
    printf ("\ntargets (reported, not asserted):\n");
    size_t index;
    json_array_foreach (targets, index, value)
        printf ("  [%s] %-68s %12.2f (limit %.2f)\n", json_is_true (json_object_get (value, "met"))? "met ": "MISS",
                json_string_value (json_object_get (value, "target")),
                json_real_value (json_object_get (value, "value")),
                json_real_value (json_object_get (value, "limit")));
    if (!self->sane)
        printf ("\nFAILED: %s\n", self->failures);
}

static json_t *
s_json (s_bench_t *self, json_t *machine, json_t *targets)
{
    json_t *calls = json_array ();
    for (size_t index = 0; index < self->row_count; index++) {
        const s_row_t *row = &self->rows [index];
        json_t *item = json_pack ("{s:s, s:i, s:i, s:i}", "figure", row->figure, "payload", (json_int_t) row->payload,
                                  "replicas", row->replicas, "inflight", row->inflight);
        for (int variant = 0; variant < S_VARIANTS; variant++) {
            json_object_set_new (item, s_variant_keys [variant], json_real (row->value [variant]));
            if (variant != S_RAW) {
                char key [32];
                snprintf (key, sizeof (key), "%s_ratio", s_variant_keys [variant]);
                json_object_set_new (item, key, json_real (row->value [S_RAW] > 0?
                                                           row->value [variant] / row->value [S_RAW]: 0));
            }
        }
        json_array_append_new (calls, item);
    }
    return json_pack ("{s:o, s:s, s:o, s:O, s:O, s:b, s:s}", "machine", json_incref (machine),
                      "mode", self->plan.quick? "quick": "full", "calls", calls, "scale", self->scale,
                      "targets", targets, "sane", self->sane, "failures", self->failures);
}

static json_t *
s_machine (void)
{
    char model [256] = "unknown";
    FILE *file = fopen ("/proc/cpuinfo", "r");
    char line [512];
    while (file && fgets (line, sizeof (line), file))
        if (strncmp (line, "model name", 10) == 0) {
            const char *colon = strchr (line, ':');
            if (colon)
                snprintf (model, sizeof (model), "%.*s", (int) strcspn (colon + 2, "\n"), colon + 2);
            break;
        }
    if (file)
        fclose (file);
    return json_pack ("{s:i, s:s}", "nproc", (json_int_t) sysconf (_SC_NPROCESSORS_ONLN), "model", model);
}

//  Without DSH_BUILD_DIR (meson sets it for tests), the build directory is
//  three levels above this program (build/tests/bench/dsh-bench).
static void
s_find_build_dir (void)
{
    if (getenv ("DSH_BUILD_DIR"))
        return;
    char path [4096];
    ssize_t size = readlink ("/proc/self/exe", path, sizeof (path) - 1);
    if (size <= 0)
        return;
    path [size] = 0;
    for (int level = 0; level < 3; level++) {
        char *slash = strrchr (path, '/');
        if (slash)
            *slash = 0;
    }
    setenv ("DSH_BUILD_DIR", path, 1);
}

//  Loads endpoint's echo tool for up to calls calls (0: no bound) or
//  seconds, after a few warm-up calls (the first one also connects). With
//  one call in flight every round trip is a latency sample, printed as p50
//  and p99 on a second line.
static int
s_drive (const char *endpoint, int inflight, size_t payload_bytes, int seconds, int calls)
{
    s_target_t *target = s_target_new (S_DSH, endpoint);
    size_t payload = payload_bytes <= 64? 0: 1;
    s_run (target, payload, inflight < 8? inflight: 8, 50, 2000, NULL, NULL);
    target->errors = 0;
    int max_calls = calls > 0? calls: INT32_MAX;
    int64_t *samples = NULL;
    size_t sample_count = 0;
    if (inflight == 1) {
        //  The samples need a bound; no dsh call takes under 20 us
        if (max_calls / 50000 >= seconds)
            max_calls = seconds * 50000;
        samples = (int64_t *) calloc ((size_t) max_calls, sizeof (int64_t));
    }
    double rate = s_run (target, payload, inflight, max_calls, seconds * 1000, samples, &sample_count);
    printf ("drive: %.1f calls/s, %d in flight, %zu B, %" PRIu64 " errors%s%s\n", rate, inflight,
            s_payloads [payload], target->errors, target->errors? ": ": "", target->last_error);
    if (samples && rate > 0)
        printf ("drive: latency p50 %" PRId64 " us, p99 %" PRId64 " us, %zu calls\n",
                s_percentile (samples, sample_count, 50), s_percentile (samples, sample_count, 99), sample_count);
    int rc = rate > 0? 0: 1;
    free (samples);
    s_target_destroy (&target);
    return rc;
}

//  Which parts --only names (all when only is NULL). Returns 0, or -1 if
//  it names something else or nothing.
static int
s_parse_only (const char *only, bool run [S_PARTS])
{
    for (int part = 0; part < S_PARTS; part++)
        run [part] = only == NULL;
    if (!only)
        return 0;
    char *list = strdup (only);
    char *cursor = list;
    char *name;
    int rc = 0, named = 0;
    while (rc == 0 && (name = strsep (&cursor, ","))) {
        int part = 0;
        while (part < S_PARTS && !streq (name, s_part_names [part]))
            part++;
        if (part == S_PARTS)
            rc = -1;
        else {
            run [part] = true;
            named++;
        }
    }
    free (list);
    return rc == 0 && named > 0? 0: -1;
}

static void
s_usage (FILE *out)
{
    fprintf (out,
        "usage: dsh-bench [--quick] [--json] [--only PARTS]\n"
        "       dsh-bench --drive ENDPOINT [--inflight N] [--payload BYTES] [--seconds S] [--calls N]\n"
        "  --quick        small counts, scale 10 x 100 tools (a few seconds)\n"
        "  --json         print the results as JSON instead of a table\n"
        "  --only PARTS   run only these, comma-separated: raw, dsh, pass3, scale\n"
        "  --drive EP     only load EP's echo tool (for profiling a broker or component);\n"
        "                 with --inflight 1 also print latency p50/p99\n"
        "  --calls N      with --drive: stop after N calls (default: only --seconds)\n");
}

int
main (int argc, char *argv [])
{
    bool quick = false, as_json = false;
    const char *drive = NULL;
    const char *only = NULL;
    int inflight = 64, seconds = 5, calls = 0;
    long payload = 64;
    static struct option options [] = {
        { "quick", no_argument, NULL, 'q' }, { "json", no_argument, NULL, 'j' },
        { "drive", required_argument, NULL, 'd' }, { "inflight", required_argument, NULL, 'i' },
        { "payload", required_argument, NULL, 'p' }, { "seconds", required_argument, NULL, 's' },
        { "calls", required_argument, NULL, 'c' }, { "only", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }
    };
    int option;
    while ((option = getopt_long (argc, argv, "h", options, NULL)) != -1)
        switch (option) {
            case 'q': quick = true; break;
            case 'j': as_json = true; break;
            case 'd': drive = optarg; break;
            case 'i': inflight = atoi (optarg); break;
            case 'p': payload = atol (optarg); break;
            case 's': seconds = atoi (optarg); break;
            case 'c': calls = atoi (optarg); break;
            case 'o': only = optarg; break;
            case 'h': s_usage (stdout); return 0;
            default: s_usage (stderr); return 2;
        }
    bool run [S_PARTS];
    if (optind < argc || inflight < 1 || inflight > 10000 || seconds < 1 || payload < 1
    ||  calls < 0 || s_parse_only (only, run)) {
        s_usage (stderr);
        return 2;
    }
    zsys_init ();
    zsys_set_logstream (stderr);
    //  A child's pipe may close under us while we stop it
    signal (SIGPIPE, SIG_IGN);
    s_find_build_dir ();
    if (drive)
        return s_drive (drive, inflight, (size_t) payload, seconds, calls);

    s_bench_t *self = (s_bench_t *) zmalloc (sizeof (s_bench_t));
    assert (self);
    self->sane = true;
    self->scale = json_object ();
    memcpy (self->run, run, sizeof (run));
    self->plan = quick?
        (s_plan_t) { true, 100, 300, 300, 3000, 120, 10, 100, 5, 3 }:
        (s_plan_t) { false, 2000, 5000, 3000, 300000, 2000, 100, 100, 20, 15 };
    bool any_variant = false;
    for (int variant = 0; variant < S_VARIANTS && !zsys_interrupted; variant++) {
        if (!self->run [variant])
            continue;
        any_variant = true;
        if (variant == S_RAW)
            s_bench_raw (self);
        else
            s_bench_dsh (self, variant);
    }
    if (self->run [S_PART_SCALE] && !zsys_interrupted)
        s_bench_scale (self);

    //  Sanity: every figure of what ran there and positive
    for (size_t index = 0; index < self->row_count; index++)
        for (int variant = 0; variant < S_VARIANTS; variant++)
            if (self->run [variant]
            &&  (!(self->rows [index].value [variant] > 0) || !isfinite (self->rows [index].value [variant]))) {
                char label [80];
                s_fail (self, "%s: %s missing", s_variant_names [variant],
                        s_figure_label (&self->rows [index], label, sizeof (label)));
            }
    size_t expected_rows = S_PAYLOADS * 2 + S_PAYLOADS * S_INFLIGHTS * 2;
    if (any_variant && self->row_count != expected_rows)
        s_fail (self, "%zu call figures instead of %zu", self->row_count, expected_rows);
    const char *scale_keys [] = { "listed_ms", "list_p50_ms", "snapshot_p50_ms", "broker_rss_kib",
                                  "fanout_all_p50_ms" };
    for (size_t index = 0; self->run [S_PART_SCALE] && index < sizeof (scale_keys) / sizeof (scale_keys [0]);
         index++)
        if (!(s_scale_number (self, scale_keys [index]) > 0))
            s_fail (self, "scale: %s missing", scale_keys [index]);

    json_t *machine = s_machine ();
    json_t *targets = s_targets (self);
    if (as_json) {
        json_t *report = s_json (self, machine, targets);
        char *text = json_dumps (report, JSON_INDENT (2) | JSON_REAL_PRECISION (6));
        printf ("%s\n", text);
        free (text);
        json_decref (report);
    }
    else
        s_print_table (self, machine, targets);
    int rc = self->sane? 0: 1;
    json_decref (targets);
    json_decref (machine);
    json_decref (self->scale);
    free (self);
    return rc;
}
