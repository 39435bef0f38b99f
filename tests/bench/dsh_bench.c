/*  =========================================================================
    dsh-bench - what a dsh call costs, next to the raw ZeroMQ floor and NATS

        dsh-bench [--quick] [--json] [--only PARTS] [--full] [--settings LIST]
        dsh-bench --drive ENDPOINT [--inflight N] [--payload BYTES] [--seconds S]
                  [--calls N]
        dsh-bench --limit-configs DIR

    In one run, on loopback tcp with free ports, it starts and measures:

      raw        client -> dsh-bench-echo forward -> dsh-bench-echo echo
                 (ROUTER/DEALER relay, frames echoed; no registry, no chain)
      NATS       requester -> nats-server -> dsh-bench-nats-echo, a queue
                 group of responders, SendAsap on both sides (built when
                 libnats is found; skipped, with the reason, when it is
                 not or nats-server does not start)
      dsh        client -> dsh-broker (empty chain) -> dsh-demo's echo
      dsh+3pass  the same through three built-in pass-through stages
      CURVE      dsh and the raw floor again, each plain and with CURVE on
                 both hops (keys made for the run, the broker checking an
                 allow-list): p50/p99, calls/s and CPU time per call at 1
                 and 64 in flight, 1 replica, plain and CURVE back to back
                 in five short rounds per figure, with the CURVE/plain
                 ratio and its range over the rounds
      statistics dsh (empty chain) with the broker's call statistics on
                 and off (--no-stats): calls/s at 64 and 1 in flight and
                 the broker's CPU time per call, 64 B, 1 replica, on and
                 off back to back in ten short rounds, the on/off ratio
                 and its range over the rounds
      audit      dsh (empty chain) with the audit trail off, on with
                 SQLite (--state-dir, a directory of the bench's own) and
                 on with PostgreSQL (a scratch server the bench starts with
                 tests/kit/pg_scratch.sh and stops; its column is dropped,
                 with the reason, when it cannot): calls/s (also until
                 recorded: until the writer's queue is empty again) and the
                 broker's CPU time per call at 64 in flight, p50/p99 at 1,
                 64 B and 4 KiB, 1 replica, the three in turns in ten
                 short rounds, each audited one against off (calls/s as a
                 ratio, microseconds as a difference) with the range over
                 the rounds, SQLite's calls/s over NATS's; the records/s
                 its writer sustains (STATS audit), calls refused and
                 records dropped, and the store's size per million calls
      pins       dsh with the audit off (--audit off) in four layouts:
                 pins off (--pins off), pins tofu (the default), tofu
                 with a permission stage whose one rule allows, and the
                 same stage asking for echo, with a grant for the bench's
                 agent and echo made first through a raw approver
                 (DECIDE scope tool), which every measured call passes by
                 (CONTROL grants lists it; PENDINGs counted): calls/s and
                 the broker's CPU time per call at 64 in flight, p50/p99
                 at 1, 64 B and 4 KiB, the four in turns in ten short
                 rounds, tofu over off and granted over allow as ratios
                 with their range over the rounds, and NATS's calls/s of
                 the same run beside them
      trace      dsh with the audit off and the broker's tracing off
                 (two brokers: off against off is the noise floor), the
                 broker of an earlier build ($DSH_BENCH_PREVIOUS_BUILD, a
                 build directory; not measured without it), and tracing on
                 (the standard OTEL_* variables in the broker's
                 environment only) with 1 % sampled (traceidratio) and
                 100 % (always_on), exporting http/protobuf to a sink in
                 the bench (libmicrohttpd) that answers every POST
                 /v1/traces 200, unread: calls/s and the broker's CPU time
                 per call at 64 in flight, p50/p99 at 1, 64 B, the five in
                 turns in ten short rounds, the ratios with their range
                 over the rounds; what the sink received and the broker's
                 span counters (STATS); it says so when no span left the
                 broker
      limit      dsh with the audit off, the empty chain, one pass stage
                 (what any stage costs), the main job's limit stage alone
                 and its whole chain
                 (deploy/dsh-broker.cfg), each limit rule that the bench's
                 calls meet raised so none is refused: the same figures,
                 in turns, and calls/s against the raw floor's and NATS's
                 of the same run

    latency (one call in flight, p50/p99) and throughput (1, 16 and 64 in
    flight) against 1 and 4 replicas, with payloads of 64 B and 4 KiB; then
    the scale run: 100 components announcing 10 000 tools (dsh-bench-swarm),
    time until LIST shows them all, LIST and SNAPSHOT latency, the broker's
    memory, and fan-out of one change event to 100 subscribers. Every dsh
    figure is printed with its ratio to the raw floor of the same run, and
    the empty chain's also with its ratio to NATS.
    Last, the swarm part (issue 24): for each setting of components x
    tools, watchers, churn and brokers, a broker (or two) with
    dsh-bench-swarm, dsh-bench-watchers (Clone-procedure watchers in one
    process) and dsh-demo beside them: the join, the broker's idle CPU per
    connection-second, its CPU per event under churn, its memory, the
    watchers' gaps, re-syncs, SNAPSHOT round trips and fan-out spread,
    components that expired, and calls at 64 in flight (--drive) without
    watchers, beside idle ones and beside the churn. The default settings
    are a representative few (minutes); --full (or DSH_BENCH_SWARM_FULL=1)
    runs the issue's whole matrix, --settings one's own.
    --quick does it all with small counts (scale: 10 x 100) in a few seconds.
    --only runs some parts (raw, nats, dsh, pass3, scale, curve, stats,
    audit, pins, trace, limit, swarm), e.g. --only scale to look at the broker's memory run
    after run. Every broker keeps its audit store in a directory the bench
    makes and removes at the end ($DSH_STATE_DIR for its children, unless
    it is set), so a run does not grow ~/.local/state.
    --drive only loads an existing broker's echo tool, for profiling (and
    for tests/mcp/bench.mjs); with --inflight 1 it also prints p50/p99, and
    with more in flight p50/p99 from the send time each callId carries.
    --limit-configs only writes the limit part's chains into a directory,
    for tests/bench/profile_limit_trace.sh.

    The targets of issues 10, 14, 24, 25, 26 and 28 are printed, each met or
    missed, never asserted; the exit status is 1 only when a dsh or floor
    figure is missing or insane (no calls completed, errors, timeouts). NATS is the
    peer, not the subject: when it fails, its column is dropped with the
    reason and the targets against it are "not measured".
    =========================================================================
*/

#include "dsh.h"
#include "dsh_bench_fds.h"
#include "dsh_bench_nats.h"
#include "dsh_proto.h"
#include "dsh_testkit.h"

#include "dsh_sock.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define S_VARIANTS      4
#define S_RAW           0
#define S_NATS          1
#define S_DSH           2
#define S_PASS3         3
#define S_PAYLOADS      2
#define S_SUBSCRIBERS   100
#define S_PART_SCALE    S_VARIANTS
#define S_PART_CURVE    (S_VARIANTS + 1)
#define S_PART_STATS    (S_VARIANTS + 2)
#define S_PART_SWARM    (S_VARIANTS + 3)
#define S_PART_AUDIT    (S_VARIANTS + 4)
#define S_PART_PINS     (S_VARIANTS + 5)
#define S_PART_TRACE    (S_VARIANTS + 6)
#define S_PART_LIMIT    (S_VARIANTS + 7)
#define S_PARTS         (S_VARIANTS + 8)
//  Longest wait for any one reply before a run counts as failed.
#define S_REPLY_WAIT_MS 5000
//  Calls --drive makes before it counts (the first one also connects).
#define S_DRIVE_WARMUP  50

static const char *s_variant_names [S_VARIANTS] = { "raw floor", "NATS", "dsh (empty chain)", "dsh (3 pass stages)" };
static const char *s_variant_keys [S_VARIANTS] = { "raw", "nats", "dsh", "dsh_pass3" };
//  What --only takes: the variants, then the scale run, the CURVE part, the
//  statistics part, the swarm part, the audit part, the pins part, the
//  trace part and the limit part.
static const char *s_part_names [S_PARTS] = { "raw", "nats", "dsh", "pass3", "scale", "curve", "stats", "swarm",
                                              "audit", "pins", "trace", "limit" };
static const size_t s_payloads [S_PAYLOADS] = { 64, 4096 };
static const int s_inflights [] = { 1, 16, 64 };
#define S_INFLIGHTS     (sizeof (s_inflights) / sizeof (s_inflights [0]))

//  The CURVE part's layouts: each call path plain, and with CURVE
#define S_CURVE_LAYOUTS 4
#define S_CURVE_DSH     0
#define S_CURVE_DSH_ON  1
#define S_CURVE_RAW     2
#define S_CURVE_RAW_ON  3
static const char *s_curve_layout_names [S_CURVE_LAYOUTS] = {
    "dsh (empty chain)", "dsh with CURVE", "raw floor", "raw floor with CURVE"
};
static const char *s_curve_layout_keys [S_CURVE_LAYOUTS] = { "dsh", "dsh_curve", "raw", "raw_curve" };
//  Its figures for each payload, in the order they are printed
static const struct {
    const char *figure;
    int inflight;
} s_curve_figures [] = {
    { "latency_p50_us", 1 }, { "latency_p99_us", 1 }, { "calls_per_s", 1 }, { "cpu_us_per_call", 1 },
    { "calls_per_s", 64 }, { "cpu_us_per_call", 64 }
};
#define S_CURVE_FIGURES (sizeof (s_curve_figures) / sizeof (s_curve_figures [0]))
#define S_CURVE_ROWS    (S_PAYLOADS * S_CURVE_FIGURES)
//  The bench client's agent id, in its key and in every call it sends, so
//  the CURVE broker checks it and has none to splice in
#define S_CURVE_AGENT   "bench-agent"
//  The echo component's id, the one its key may serve
#define S_CURVE_COMPONENT "bench-curve-demo"
//  Each figure is measured in this many rounds per layout
#define S_CURVE_ROUNDS  5

//  The statistics part: a broker with them on, one with them off
#define S_STATS_ON      0
#define S_STATS_OFF     1
#define S_STATS_ROUNDS  10
static const char *s_stats_layout_names [2] = { "dsh, statistics on", "dsh, statistics off" };
//  Its figures, 64 B, in the order they are printed
static const struct {
    const char *figure;
    int inflight;
} s_stats_figures [] = {
    { "calls_per_s", 64 }, { "broker_cpu_us_per_call", 64 }, { "calls_per_s", 1 }, { "broker_cpu_us_per_call", 1 }
};
#define S_STATS_FIGURES (sizeof (s_stats_figures) / sizeof (s_stats_figures [0]))

//  The audit part (issue 25): a broker with the audit trail off, one
//  writing it to SQLite, one to PostgreSQL
#define S_AUDIT_LAYOUTS     3
#define S_AUDIT_OFF         0
#define S_AUDIT_SQLITE      1
#define S_AUDIT_POSTGRES    2
#define S_AUDIT_ROUNDS      10
static const char *s_audit_layout_names [S_AUDIT_LAYOUTS] = {
    "dsh, audit off", "dsh, audit on SQLite", "dsh, audit on PostgreSQL"
};
static const char *s_audit_layout_keys [S_AUDIT_LAYOUTS] = { "off", "sqlite", "postgresql" };
//  Its figures for each payload, in the order they are printed, and how an
//  audited layout's is held against off's: as a ratio, or (microseconds)
//  as a difference
static const struct {
    const char *figure;
    int inflight;
    bool difference;
} s_audit_figures [] = {
    { "calls_per_s", 64, false }, { "recorded_calls_per_s", 64, false }, { "broker_cpu_us_per_call", 64, true },
    { "latency_p50_us", 1, true }, { "latency_p99_us", 1, true }
};
#define S_AUDIT_FIGURES (sizeof (s_audit_figures) / sizeof (s_audit_figures [0]))
#define S_AUDIT_ROWS    (S_PAYLOADS * S_AUDIT_FIGURES)

//  The pins part (issue 26): pinned definitions off and on (tofu), then a
//  permission stage that allows and the same stage asking, with a grant
//  that answers every ask; the audit off in all four
#define S_PINS_LAYOUTS  4
#define S_PINS_OFF      0
#define S_PINS_TOFU     1
#define S_PINS_ALLOW    2
#define S_PINS_GRANT    3
#define S_PINS_ROUNDS   10
//  The permission stage's name in the last two
#define S_PINS_STAGE    "permission"
static const char *s_pins_layout_names [S_PINS_LAYOUTS] = {
    "dsh, pins off", "dsh, pins tofu", "dsh, tofu, permission allow", "dsh, tofu, permission ask, granted"
};
static const char *s_pins_layout_keys [S_PINS_LAYOUTS] = { "off", "tofu", "allow", "grant" };
//  What is held against what, as a ratio: pins against none, a grant
//  against a plain allow
#define S_PINS_COMPARISONS 2
static const struct {
    const char *key;
    int layout;
    int reference;
} s_pins_comparisons [S_PINS_COMPARISONS] = {
    { "tofu_vs_off", S_PINS_TOFU, S_PINS_OFF }, { "grant_vs_allow", S_PINS_GRANT, S_PINS_ALLOW }
};
//  Its figures for each payload, in the order they are printed
static const struct {
    const char *figure;
    int inflight;
} s_pins_figures [] = {
    { "calls_per_s", 64 }, { "broker_cpu_us_per_call", 64 }, { "latency_p50_us", 1 }, { "latency_p99_us", 1 }
};
#define S_PINS_FIGURES  (sizeof (s_pins_figures) / sizeof (s_pins_figures [0]))
#define S_PINS_ROWS     (S_PAYLOADS * S_PINS_FIGURES)

//  The trace and limit parts (issue 28) measure as the pins part does, in
//  turns, its figures at 64 B: a layout per column, comparisons as ratios
#define S_TURNS_LAYOUTS_MAX     5
#define S_TURNS_COMPARISONS_MAX 4
typedef struct {
    const char *key;
    int layout;
    int reference;
} s_versus_t;

//  The trace part: a broker with tracing off, a second one with it off
//  (off against off: the noise floor), the broker of an earlier build
//  ($DSH_BENCH_PREVIOUS_BUILD, before tracing; not measured without it),
//  and tracing on with 1 % and 100 % sampled, exporting over OTLP/HTTP to
//  a sink in the bench that accepts everything
#define S_TRACE_LAYOUTS     5
#define S_TRACE_OFF         0
#define S_TRACE_TWIN        1
#define S_TRACE_PREVIOUS    2
#define S_TRACE_RATIO       3
#define S_TRACE_ALWAYS      4
#define S_TRACE_ROUNDS      10
static const char *s_trace_layout_names [S_TRACE_LAYOUTS] = {
    "dsh, tracing off", "dsh, tracing off (a second broker)", "dsh, the previous build's broker",
    "dsh, tracing on, 1 % sampled", "dsh, tracing on, 100 % sampled"
};
static const char *s_trace_layout_keys [S_TRACE_LAYOUTS] = { "off", "off_twin", "previous", "sampled_1pct",
                                                             "sampled_100pct" };
#define S_TRACE_COMPARISONS 4
static const s_versus_t s_trace_comparisons [S_TRACE_COMPARISONS] = {
    { "off_vs_off", S_TRACE_OFF, S_TRACE_TWIN }, { "off_vs_previous", S_TRACE_OFF, S_TRACE_PREVIOUS },
    { "1pct_vs_off", S_TRACE_RATIO, S_TRACE_OFF }, { "100pct_vs_off", S_TRACE_ALWAYS, S_TRACE_OFF }
};

//  The limit part: an empty chain, one pass stage (what any one stage
//  costs), the main job's limit stage alone, and the main job's whole
//  chain, each limit rule that the bench's calls meet raised so that it
//  never refuses them; the audit off in all four
#define S_LIMIT_LAYOUTS     4
#define S_LIMIT_NONE        0
#define S_LIMIT_PASS        1
#define S_LIMIT_STAGE       2
#define S_LIMIT_MAIN        3
#define S_LIMIT_ROUNDS      10
//  What a raised rule allows (the stage's largest): far above any rate here
#define S_LIMIT_RAISED      "1000000"
static const char *s_limit_layout_names [S_LIMIT_LAYOUTS] = {
    "dsh, empty chain", "dsh, a pass stage", "dsh, a limit stage", "dsh, the main job's chain"
};
static const char *s_limit_layout_keys [S_LIMIT_LAYOUTS] = { "empty", "pass", "limit", "main_chain" };
#define S_LIMIT_COMPARISONS 3
static const s_versus_t s_limit_comparisons [S_LIMIT_COMPARISONS] = {
    { "limit_vs_empty", S_LIMIT_STAGE, S_LIMIT_NONE }, { "limit_vs_pass", S_LIMIT_STAGE, S_LIMIT_PASS },
    { "main_vs_empty", S_LIMIT_MAIN, S_LIMIT_NONE }
};

//  One setting of the swarm part.
typedef struct {
    int components;
    int tools;                  //  per component
    int watchers;
    int churn_percent;          //  of the components, each cycle; 0: no churn
    int churn_every_s;
    int brokers;
} s_swarm_setting_t;

#define S_SWARM_BROKERS_MAX     4
#define S_SWARM_SETTINGS_MAX    32

//  Issue 24's settings. Light churn: 100 x 10 tools, 10 % leaving and
//  rejoining every 10 s (22 events/s); heavy: 100 x 100 tools, the same
//  (209 events/s, in bursts of 1 010). The default: the join of 50 000
//  tools, light and heavy churn with 100 watchers, heavy churn with 1 000
//  (where the broker collapsed), 1 000 components and 1 000 watchers idle,
//  and heavy churn on two brokers.
static const s_swarm_setting_t s_swarm_default [] = {
    { 100, 500, 0, 0, 10, 1 }, { 100, 10, 100, 10, 10, 1 }, { 100, 100, 100, 10, 10, 1 },
    { 100, 100, 1000, 10, 10, 1 }, { 1000, 50, 1000, 0, 10, 1 }, { 100, 100, 100, 10, 10, 2 }
};
//  --full: every size with 0, 100 and 1 000 watchers idle, light and heavy
//  churn with each, and heavy churn on two brokers
static const s_swarm_setting_t s_swarm_full [] = {
    { 100, 10, 0, 0, 10, 1 }, { 100, 10, 100, 0, 10, 1 }, { 100, 10, 1000, 0, 10, 1 },
    { 100, 500, 0, 0, 10, 1 }, { 100, 500, 100, 0, 10, 1 }, { 100, 500, 1000, 0, 10, 1 },
    { 1000, 50, 0, 0, 10, 1 }, { 1000, 50, 100, 0, 10, 1 }, { 1000, 50, 1000, 0, 10, 1 },
    { 100, 10, 0, 10, 10, 1 }, { 100, 10, 100, 10, 10, 1 }, { 100, 10, 1000, 10, 10, 1 },
    { 100, 100, 0, 10, 10, 1 }, { 100, 100, 100, 10, 10, 1 }, { 100, 100, 1000, 10, 10, 1 },
    { 100, 100, 100, 10, 10, 2 }, { 100, 100, 1000, 10, 10, 2 }
};
//  --quick: a small swarm churning fast, on one broker and on two
static const s_swarm_setting_t s_swarm_quick [] = { { 10, 10, 10, 20, 2, 1 }, { 10, 10, 10, 20, 2, 2 } };

//  How long the swarm part's windows are.
typedef struct {
    int drive_s;                //  each run of calls beside no churn
    int idle_s;                 //  the quiet window for idle CPU
    int cycles;                 //  churn cycles in each churn window
} s_swarm_plan_t;

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

//  One figure of the CURVE part, for each of its layouts.
typedef struct {
    const char *figure;
    size_t payload;
    int inflight;
    double value [S_CURVE_LAYOUTS];     //  0: not measured or failed
    //  The range of the rounds' own ratios (CURVE over plain), dsh's and
    //  the raw floor's: how far noise moved the ratio within this run
    double ratio_low [2];
    double ratio_high [2];
} s_curve_row_t;

//  One figure of the statistics part: on, off, and the range of the
//  rounds' own on/off ratios.
typedef struct {
    const char *figure;
    int inflight;
    double value [2];           //  0: not measured or failed
    double ratio_low;
    double ratio_high;
} s_stats_row_t;

//  One figure of the audit part: each layout's, and the range of the
//  rounds' own comparisons of each audited layout with off (low above
//  high: none made).
typedef struct {
    const char *figure;
    size_t payload;
    int inflight;
    bool difference;            //  held against off as audited - off, not audited / off
    double value [S_AUDIT_LAYOUTS];     //  0: not measured or failed
    double compare_low [S_AUDIT_LAYOUTS];
    double compare_high [S_AUDIT_LAYOUTS];
} s_audit_row_t;

//  A broker's audit counts, from STATS; all 0 with its audit off.
typedef struct {
    bool healthy;
    uint64_t records;
    uint64_t dropped;
    uint64_t refused;
    uint64_t queue_bytes;
    uint64_t batches;
    uint64_t write_us_total;
    uint64_t write_us_max;
} s_audit_counts_t;

//  What an audited layout's writer and store did while one payload's
//  figures ran.
typedef struct {
    uint64_t records;           //  written in the turns of 64 in flight
    int64_t usecs;              //  those turns, each from its start until the queue was empty
    uint64_t write_us;          //  of it in the store's appends (writeUsTotal)
    uint64_t batches;
    uint64_t queue_bytes_max;   //  left in the queue as a turn's last call was answered, the most
    int64_t drain_us_max;       //  the longest wait after a turn's calls for the queue to empty
    uint64_t store_records;     //  recorded meanwhile, in every turn
    int64_t store_bytes;        //  what the store grew by meanwhile; -1: not known
} s_audit_writer_t;

//  A layout of the audit part over the whole part.
typedef struct {
    bool measured;              //  it ran (PostgreSQL's: its server started)
    char reason [512];          //  why not, if not
    char location [256];        //  the SQLite file, or the server's URI
    s_audit_writer_t payloads [S_PAYLOADS];
    s_audit_counts_t counts;    //  at the end
    int64_t bytes;              //  the store's size at the end; -1: not known
    bool checkpointed;          //  SQLite: its log was checkpointed before each size was read
} s_audit_store_t;

//  One figure of the pins part: each layout's, and for each comparison
//  its ratio's range over the rounds (low 0: none made).
typedef struct {
    const char *figure;
    size_t payload;
    int inflight;
    double value [S_PINS_LAYOUTS];      //  0: not measured or failed
    double ratio_low [S_PINS_COMPARISONS];
    double ratio_high [S_PINS_COMPARISONS];
} s_pins_row_t;

//  The grant the pins part's last layout runs under, and whether every
//  call passed by it.
typedef struct {
    char id [32];               //  "" until it was made
    bool listed_before;         //  CONTROL grants listed it before the measured calls
    bool listed_after;          //  and after them
    uint64_t asked;             //  PENDINGs the approver was sent during the measured calls
} s_pins_grant_t;

//  One figure of the trace or limit part: each layout's, and for each
//  comparison its ratio's range over the rounds (low 0: none made).
typedef struct {
    const char *figure;
    int inflight;
    double value [S_TURNS_LAYOUTS_MAX];  //  0: not measured or failed
    double ratio_low [S_TURNS_COMPARISONS_MAX];
    double ratio_high [S_TURNS_COMPARISONS_MAX];
} s_turns_row_t;

//  The trace or limit part: what its layouts are, which ran, its figures.
typedef struct {
    const char *name;
    int layouts;
    const char *const *layout_names;
    const char *const *layout_keys;
    int comparisons;
    const s_versus_t *versus;
    int rounds;
    bool measured [S_TURNS_LAYOUTS_MAX];     //  the layout ran
    s_turns_row_t rows [S_PINS_FIGURES];     //  the pins part's figures, at 64 B
    double seconds;                          //  how long the part took
} s_turns_t;

//  What a traced layout's broker exported, by its own count (STATS) and
//  by the sink's.
typedef struct {
    bool counted;               //  STATS carried the broker's tracing counters
    uint64_t spans_ended;
    uint64_t spans_exported;
    uint64_t spans_dropped;
    uint64_t export_failures;
    uint64_t requests;          //  POST /v1/traces the sink answered
    uint64_t bytes;             //  their bodies
    uint64_t calls;             //  measured and warm-up calls on the layout
} s_trace_export_t;

typedef struct {
    s_plan_t plan;
    bool run [S_PARTS];         //  which parts this run measures
    s_row_t rows [S_ROWS_MAX];
    size_t row_count;
    json_t *scale;              //  scale figures, by name
    s_curve_row_t curve_rows [S_CURVE_ROWS];
    double curve_seconds;       //  how long the CURVE part took
    s_stats_row_t stats_rows [S_STATS_FIGURES];
    double stats_seconds;       //  how long the statistics part took
    s_audit_row_t audit_rows [S_AUDIT_ROWS];
    s_audit_store_t audit_stores [S_AUDIT_LAYOUTS];
    double audit_seconds;       //  how long the audit part took
    s_pins_row_t pins_rows [S_PINS_ROWS];
    s_pins_grant_t pins_grant;
    double pins_seconds;        //  how long the pins part took
    s_turns_t trace;
    s_trace_export_t trace_export [S_TRACE_LAYOUTS];
    char trace_previous [512];  //  the previous build's directory, or why it was not measured
    s_turns_t limit;
    char limit_source [256];    //  where the limit stage and the chain came from
    s_swarm_setting_t swarm_settings [S_SWARM_SETTINGS_MAX];
    size_t swarm_count;
    s_swarm_plan_t swarm_plan;
    json_t *swarm;              //  one object of figures per setting
    json_t *swarm_files;        //  the open-file limit and what the settings need
    double swarm_seconds;       //  how long the swarm part took
    json_t *nats;               //  how NATS was run, or why not
    bool nats_dropped;          //  no NATS figures: not run, or skipped
    bool sane;                  //  false as soon as any figure is missing or insane
    char failures [1024];
} s_bench_t;

//  Whatever a run sends calls through: a bare DEALER, a NATS requester
//  or a dsh client.
typedef struct {
    int variant;
    zsock_t *raw;
    dsh_bench_nats_t *nats;             //  borrowed
    dsh_client_t *client;
    const char *agent;                  //  the agent id dsh calls carry, or NULL
    size_t payload;                     //  what was last sent
    zframe_t *raw_body [S_PAYLOADS];    //  the CALL body the raw client sends
    msgpack_sbuffer args [S_PAYLOADS];  //  {"message": payload}
    uint64_t sent;                      //  every call sent, or tried
    uint64_t replies;                   //  every reply, error or not
    uint64_t errors;
    uint64_t broker_gone;               //  errors that were BROKER_GONE
    char last_error [256];
    //  With stamp, a dsh call's callId carries its send time, and each
    //  result gives a round trip whatever is in flight (--drive)
    bool stamp;
    uint64_t stamped;
    int64_t *round_trips;
    size_t round_trip_count;
    size_t round_trip_size;
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
        //  A no-op but in the CURVE part, which gives the process keys
        //  while it makes its targets (s_curve_use)
        dsh_curve_client (self->raw);
        zsock_connect (self->raw, "%s", endpoint);
    }
    else
    if (variant != S_NATS)
        self->client = dsh_client_new (endpoint);
    return self;
}

//  A target that sends through nats' requester.
static s_target_t *
s_target_new_nats (dsh_bench_nats_t *nats)
{
    s_target_t *self = s_target_new (S_NATS, NULL);
    self->nats = nats;
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
        free (self->round_trips);
        free (self);
        *self_p = NULL;
    }
}

static int
s_target_send (s_target_t *self, size_t payload)
{
    self->payload = payload;
    self->sent++;
    if (self->nats)
        //  The same bytes as the raw floor's CALL body, echoed back
        return dsh_bench_nats_send (self->nats, zframe_data (self->raw_body [payload]),
                                    zframe_size (self->raw_body [payload]),
                                    self->last_error, sizeof (self->last_error));
    if (self->raw) {
        zmsg_t *msg = zmsg_new ();
        zmsg_addmem (msg, "", 0);
        zmsg_addstr (msg, DSH_PROTOCOL);
        zmsg_addstr (msg, DSH_CALL);
        zframe_t *body = zframe_dup (self->raw_body [payload]);
        zmsg_append (msg, &body);
        return zmsg_send (&msg, self->raw);
    }
    char call_id [48];
    if (self->stamp)
        snprintf (call_id, sizeof (call_id), "t%" PRId64 "-%" PRIu64, zclock_usecs (), ++self->stamped);
    return dsh_client_call_send (self->client, self->stamp? call_id: NULL, "echo", self->args [payload].data,
                                 self->args [payload].size, self->agent, NULL, 0, 10000)? 0: -1;
}

//  The round trip of a reply whose callId carries its send time.
static void
s_target_round_trip (s_target_t *self, dsh_reply_t *reply)
{
    const msgpack_object *call_id = dsh_map_get (dsh_reply_body (reply), "callId");
    if (!call_id || call_id->type != MSGPACK_OBJECT_STR || call_id->via.str.size < 2
    ||  call_id->via.str.size > 40 || call_id->via.str.ptr [0] != 't')
        return;
    char text [48];
    snprintf (text, sizeof (text), "%.*s", (int) call_id->via.str.size, call_id->via.str.ptr);
    int64_t sent = strtoll (text + 1, NULL, 10);
    if (self->round_trip_count == self->round_trip_size) {
        self->round_trip_size = self->round_trip_size? self->round_trip_size * 2: 65536;
        self->round_trips = (int64_t *) realloc (self->round_trips, self->round_trip_size * sizeof (int64_t));
        assert (self->round_trips);
    }
    self->round_trips [self->round_trip_count++] = zclock_usecs () - sent;
}

//  Takes one reply; false if none came in time. A dsh reply that is not a
//  successful RESULT counts as an error.
static bool
s_target_take (s_target_t *self)
{
    if (self->nats) {
        long size = dsh_bench_nats_recv (self->nats, S_REPLY_WAIT_MS, self->last_error,
                                         sizeof (self->last_error));
        if (size < 0)
            return false;
        if ((size_t) size != zframe_size (self->raw_body [self->payload])) {
            self->errors++;
            snprintf (self->last_error, sizeof (self->last_error), "NATS reply of %ld bytes", size);
        }
        return true;
    }
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
    if (self->stamp)
        s_target_round_trip (self, reply);
    if (!streq (dsh_reply_command (reply), DSH_RESULT) || dsh_reply_is_error (reply)) {
        self->errors++;
        if (dsh_reply_error_code (reply) && streq (dsh_reply_error_code (reply), DSH_E_BROKER_GONE))
            self->broker_gone++;
        snprintf (self->last_error, sizeof (self->last_error), "%s %s: %s", dsh_reply_command (reply),
                  dsh_reply_error_code (reply)? dsh_reply_error_code (reply): "-",
                  dsh_reply_text (reply)? dsh_reply_text (reply): "-");
    }
    dsh_reply_destroy (&reply);
    return true;
}

//  s_target_take, counted: --drive says how many calls it completed, which
//  profile.sh divides by.
static bool
s_target_recv (s_target_t *self)
{
    bool got = s_target_take (self);
    if (got)
        self->replies++;
    return got;
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

//  A problem with the NATS peer is not dsh's: its column goes, with the
//  first reason, and the exit status stays about dsh and the floor.
static void
s_nats_skip (s_bench_t *self, const char *format, ...) __attribute__ ((format (printf, 2, 3)));

static void
s_nats_skip (s_bench_t *self, const char *format, ...)
{
    if (self->nats_dropped)
        return;
    char reason [512];
    va_list args;
    va_start (args, format);
    vsnprintf (reason, sizeof (reason), format, args);
    va_end (args);
    fprintf (stderr, "dsh-bench: NATS skipped: %s\n", reason);
    json_object_set_new (self->nats, "status", json_string ("skipped"));
    json_object_set_new (self->nats, "reason", json_string (reason));
    self->nats_dropped = true;
    for (size_t index = 0; index < self->row_count; index++)
        self->rows [index].value [S_NATS] = 0;
}

static bool
s_nats_skipped (s_bench_t *self, s_target_t *target)
{
    return target->variant == S_NATS && self->nats_dropped;
}

static void
s_run_failed (s_bench_t *self, s_target_t *target, const char *what)
{
    const char *why = target->last_error [0]? target->last_error: "no reply";
    if (target->variant == S_NATS)
        s_nats_skip (self, "%s failed (%s)", what, why);
    else
        s_fail (self, "%s: %s failed (%s)", s_variant_names [target->variant], what, why);
}

//  Latency rows for one variant (one replica).
static void
s_measure_latency (s_bench_t *self, s_target_t *target)
{
    int64_t *samples = (int64_t *) calloc ((size_t) self->plan.latency_calls, sizeof (int64_t));
    assert (samples);
    for (size_t payload = 0; payload < S_PAYLOADS && !s_nats_skipped (self, target); payload++) {
        size_t count = 0;
        double rate = s_run (target, payload, 1, self->plan.latency_calls, self->plan.latency_ms, samples, &count);
        if (rate <= 0 || count == 0) {
            char what [64];
            snprintf (what, sizeof (what), "latency run with %zu B", s_payloads [payload]);
            s_run_failed (self, target, what);
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
        for (size_t index = 0; index < S_INFLIGHTS && !s_nats_skipped (self, target); index++) {
            double rate = s_run (target, payload, s_inflights [index], self->plan.throughput_calls,
                                 self->plan.throughput_ms, NULL, NULL);
            if (rate <= 0) {
                char what [96];
                snprintf (what, sizeof (what), "throughput run (%d replicas, %d in flight, %zu B)", replicas,
                          s_inflights [index], s_payloads [payload]);
                s_run_failed (self, target, what);
            }
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

//  Waits until the broker lists count providers of echo, and echo is not
//  quarantined (under pins tofu, a tool that comes before the broker has
//  read its pins waits for them).
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
        const msgpack_object *tool = reply? dsh_map_get (dsh_reply_body (reply), "tool"): NULL;
        const msgpack_object *quarantined = tool && tool->type == MSGPACK_OBJECT_MAP?
            dsh_map_get (tool, "quarantined"): NULL;
        if (providers && providers->type == MSGPACK_OBJECT_ARRAY && providers->via.array.size == count
        &&  !(quarantined && quarantined->type == MSGPACK_OBJECT_BOOLEAN && quarantined->via.boolean))
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

//  Starts the raw floor's forwarder, plain or (with its keypair cert and
//  the allow-list directory allow) CURVE; writes its two endpoints.
static dsh_testproc_t *
s_forwarder_start (const char *cert, const char *allow, char front [128], char back [128])
{
    const char *argv [] = { "tests/bench/dsh-bench-echo", "forward", cert, allow, NULL };
    dsh_testproc_t *forwarder = dsh_testproc_start (argv);
    char *line = forwarder? dsh_testproc_wait_line (forwarder, "forwarding ", 5000): NULL;
    if (!line || sscanf (line, "forwarding %127s %127s", front, back) != 2)
        dsh_testproc_destroy (&forwarder);
    free (line);
    return forwarder;
}

//  Starts a raw echo process on the forwarder's back endpoint, plain or
//  (with its keypair cert and the forwarder's public server_cert) CURVE.
static dsh_testproc_t *
s_echo_start (const char *back, const char *cert, const char *server_cert)
{
    const char *argv [] = { "tests/bench/dsh-bench-echo", "echo", back, cert, server_cert, NULL };
    dsh_testproc_t *echo = dsh_testproc_start (argv);
    char *started = echo? dsh_testproc_wait_line (echo, "echoing", 5000): NULL;
    if (!started)
        dsh_testproc_destroy (&echo);
    free (started);
    return echo;
}

static void
s_bench_raw (s_bench_t *self)
{
    char front [128] = "", back [128] = "";
    dsh_testproc_t *forwarder = s_forwarder_start (NULL, NULL, front, back);
    if (!forwarder) {
        s_fail (self, "raw floor: the forwarder did not start");
        return;
    }
    dsh_testproc_t *echoes [4] = { NULL };
    s_target_t *target = s_target_new (S_RAW, front);
    for (int replicas = 1; replicas <= 4; replicas += 3) {
        for (int index = 0; index < replicas; index++)
            if (!echoes [index]) {
                echoes [index] = s_echo_start (back, NULL, NULL);
                if (!echoes [index])
                    s_fail (self, "raw floor: an echo process did not start");
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

//  requester (this process) -> nats-server -> 1, then 4 responder processes
//  in one queue group. Any trouble drops the NATS column, never the run.
static void
s_bench_nats (s_bench_t *self)
{
    self->nats_dropped = false;
    char reason [512];
    dsh_bench_nats_t *nats = dsh_bench_nats_new (5000, reason, sizeof (reason));
    if (!nats) {
        s_nats_skip (self, "%s", reason);
        return;
    }
    pid_t server = dsh_bench_nats_server_pid (nats);
    json_object_set_new (self->nats, "status", json_string ("measured"));
    json_object_del (self->nats, "reason");
    json_object_set_new (self->nats, "server_version", json_string (dsh_bench_nats_server_version (nats)));
    json_object_set_new (self->nats, "client_version", json_string (dsh_bench_nats_client_version ()));
    json_object_set_new (self->nats, "server_rss_idle_kib", json_integer (s_proc_status_kib (server, "VmRSS")));
    dsh_testproc_t *responders [4] = { NULL };
    s_target_t *target = s_target_new_nats (nats);
    for (int replicas = 1; replicas <= 4 && !self->nats_dropped; replicas += 3) {
        for (int index = 0; index < replicas && !self->nats_dropped; index++)
            if (!responders [index]) {
                const char *argv [] = { "tests/bench/dsh-bench-nats-echo", dsh_bench_nats_url (nats), NULL };
                responders [index] = dsh_testproc_start (argv);
                //  It prints once the server has its subscription
                char *started = responders [index]?
                    dsh_testproc_wait_line (responders [index], "responding", 5000): NULL;
                if (!started)
                    s_nats_skip (self, "a responder (dsh-bench-nats-echo) did not start");
                free (started);
            }
        if (self->nats_dropped)
            break;
        s_warm_up (self, target);
        if (replicas == 1)
            s_measure_latency (self, target);
        s_measure_throughput (self, target, replicas);
    }
    //  Its peak, which was under the 64-in-flight runs
    if (!self->nats_dropped)
        json_object_set_new (self->nats, "server_hwm_kib", json_integer (s_proc_status_kib (server, "VmHWM")));
    s_target_destroy (&target);
    for (int index = 0; index < 4; index++)
        s_stop (&responders [index]);
    dsh_bench_nats_destroy (&nats);
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
//  CURVE: the same call paths plain and with CURVE

//  The part's keys, in a directory of their own: the broker's (the raw
//  forwarder's too), the echo component's and the bench client's, and the
//  allow-list directory with the public halves of the last two.
typedef struct {
    char dir [64];
    char broker [96];
    char component [96];
    char agent [96];
    char allow [96];
} s_curve_keys_t;

//  Removes the directory at path (if any: "" is none) and everything in it.
static void
s_dir_remove (const char *path)
{
    zdir_t *dir = path [0]? zdir_new (path, NULL): NULL;
    if (dir)
        zdir_remove (dir, true);
    zdir_destroy (&dir);
}

//  Removes the keys' directory and everything in it.
static void
s_curve_keys_remove (s_curve_keys_t *keys)
{
    s_dir_remove (keys->dir);
    keys->dir [0] = 0;
}

//  Makes the keys as `dsh keygen` would. Returns 0, or -1 with a reason.
static int
s_curve_keys_make (s_curve_keys_t *keys, char *error, size_t error_size)
{
    memset (keys, 0, sizeof (*keys));
    snprintf (keys->dir, sizeof (keys->dir), "/tmp/dsh-bench-curve-XXXXXX");
    if (!mkdtemp (keys->dir)) {
        snprintf (error, error_size, "cannot make a directory for keys: %s", strerror (errno));
        keys->dir [0] = 0;
        return -1;
    }
    snprintf (keys->broker, sizeof (keys->broker), "%s/broker.cert", keys->dir);
    snprintf (keys->component, sizeof (keys->component), "%s/component.cert", keys->dir);
    snprintf (keys->agent, sizeof (keys->agent), "%s/agent.cert", keys->dir);
    snprintf (keys->allow, sizeof (keys->allow), "%s/allow", keys->dir);
    if (dsh_curve_keygen (keys->broker, DSH_ROLE_ADMIN, NULL, NULL, NULL, "dsh-bench broker", error, error_size)
    ||  dsh_curve_keygen (keys->component, DSH_ROLE_COMPONENT, S_CURVE_COMPONENT, NULL, NULL, "dsh-bench echo",
                          error, error_size)
    ||  dsh_curve_keygen (keys->agent, DSH_ROLE_AGENT, NULL, NULL, S_CURVE_AGENT, "dsh-bench client", error, error_size))
        return -1;
    if (zsys_dir_create ("%s", keys->allow)) {
        snprintf (error, error_size, "cannot make %s: %s", keys->allow, strerror (errno));
        return -1;
    }
    //  Only public halves in the allow-list, as an operator would copy them
    const char *parties [] = { keys->component, keys->agent };
    for (size_t index = 0; index < 2; index++) {
        char path [128];
        snprintf (path, sizeof (path), "%s/%s", keys->allow, strrchr (parties [index], '/') + 1);
        zcert_t *cert = zcert_load (parties [index]);
        int rc = cert? zcert_save_public (cert, path): -1;
        zcert_destroy (&cert);
        if (rc) {
            snprintf (error, error_size, "cannot write %s", path);
            return -1;
        }
    }
    return 0;
}

//  Gives the sockets this process makes from now on the bench client's
//  keys, or (keys NULL) none. The SDK applies the process's keys to a
//  socket as it makes it, so a target keeps the keys it was made with.
//  Returns 0, or -1 with a reason.
static int
s_curve_use (const s_curve_keys_t *keys, char *error, size_t error_size)
{
    //  NULL, NULL would read $DSH_CERT, which main clears
    return dsh_curve_setup (keys? keys->agent: NULL, keys? keys->broker: NULL, error, error_size);
}

//  One layout of a part (CURVE, statistics): a server, one echo and a
//  target calling it.
typedef struct {
    dsh_testproc_t *server;     //  dsh-broker, or the raw forwarder
    dsh_testproc_t *echo;       //  dsh-demo, or a raw echo process
    s_target_t *target;
} s_layout_t;

//  Starts layout index, plain or (keys given) with CURVE on every hop.
//  Returns 0, or -1 (and the run fails).
static int
s_curve_layout_start (s_bench_t *self, s_layout_t *layout, int index, const s_curve_keys_t *keys)
{
    char error [512];
    if (s_curve_use (keys, error, sizeof (error))) {
        s_fail (self, "%s: %s", s_curve_layout_names [index], error);
        return -1;
    }
    const char *broker_cert = keys? keys->broker: NULL;
    const char *component_cert = keys? keys->component: NULL;
    int rc = -1;
    if (index == S_CURVE_RAW || index == S_CURVE_RAW_ON) {
        char front [128], back [128];
        layout->server = s_forwarder_start (broker_cert, keys? keys->allow: NULL, front, back);
        layout->echo = layout->server? s_echo_start (back, component_cert, broker_cert): NULL;
        if (layout->echo) {
            layout->target = s_target_new (S_RAW, front);
            rc = 0;
        }
    }
    else {
        const char *broker_flags [] = { "--cert", broker_cert, "--allow", keys? keys->allow: NULL, NULL };
        const char *demo_flags [] = { "--cert", component_cert, "--broker-cert", broker_cert, NULL };
        char endpoint [256];
        layout->server = dsh_testkit_broker (1000, keys? broker_flags: NULL, endpoint, sizeof (endpoint));
        layout->echo = layout->server?
            dsh_testkit_component ("components/demo/dsh-demo", endpoint, S_CURVE_COMPONENT, keys? demo_flags: NULL):
            NULL;
        if (layout->echo && s_wait_providers (endpoint, 1, 10000) == 0) {
            layout->target = s_target_new (S_DSH, endpoint);
            //  Plain too, so both send the same bytes
            layout->target->agent = S_CURVE_AGENT;
            rc = 0;
        }
    }
    if (s_curve_use (NULL, error, sizeof (error)))
        s_fail (self, "CURVE: cannot turn the keys off again: %s", error);
    if (rc)
        s_fail (self, "%s: did not start", s_curve_layout_names [index]);
    return rc;
}

static s_curve_row_t *
s_curve_row (s_bench_t *self, const char *figure, size_t payload, int inflight)
{
    for (size_t index = 0; index < S_CURVE_ROWS; index++) {
        s_curve_row_t *row = &self->curve_rows [index];
        if (streq (row->figure, figure) && row->payload == payload && row->inflight == inflight)
            return row;
    }
    assert (false);
    return NULL;
}

//  One layout's figures, over a round or all rounds.
typedef struct {
    double latency_p50_us;
    double latency_p99_us;
    double calls_per_s;
    double cpu_us_per_call;
} s_curve_figures_t;

//  What one layout's rounds of one figure add up to.
typedef struct {
    int64_t *samples;           //  round trips, with one call in flight
    size_t sample_count;
    uint64_t calls;
    int64_t usecs;
    int64_t cpu_usecs;          //  of the client, the server and the echo
} s_curve_tally_t;

//  CPU time (user and system, all threads) a process has used, in
//  microseconds, or -1.
static int64_t
s_proc_cpu_usecs (pid_t pid)
{
    char path [64];
    snprintf (path, sizeof (path), "/proc/%d/stat", (int) pid);
    FILE *file = fopen (path, "r");
    if (!file)
        return -1;
    char line [1024];
    bool got_line = fgets (line, sizeof (line), file) != NULL;
    fclose (file);
    //  Fields 14 and 15, counted after the command name, which may hold
    //  spaces and ends at the last ')'
    const char *end = got_line? strrchr (line, ')'): NULL;
    unsigned long user, system;
    if (!end || sscanf (end + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &user, &system) != 2)
        return -1;
    return (int64_t) (user + system) * 1000000 / sysconf (_SC_CLK_TCK);
}

//  CPU time the processes of a call have used: this one (the client; the
//  other layouts' sockets in it are idle meanwhile), layout's server and
//  echo. Microseconds, or -1.
static int64_t
s_curve_cpu_usecs (s_layout_t *layout)
{
    struct rusage usage;
    int64_t server = s_proc_cpu_usecs (dsh_testproc_pid (layout->server));
    int64_t echo = s_proc_cpu_usecs (dsh_testproc_pid (layout->echo));
    if (server < 0 || echo < 0 || getrusage (RUSAGE_SELF, &usage))
        return -1;
    return server + echo + (int64_t) usage.ru_utime.tv_sec * 1000000 + usage.ru_utime.tv_usec
         + (int64_t) usage.ru_stime.tv_sec * 1000000 + usage.ru_stime.tv_usec;
}

//  One round on one layout: inflight calls in flight for a round's share
//  of the plan (one call in flight: the latency plan, and p50 and p99 of
//  the round). Writes the round's figures and adds it to tally. Returns 0,
//  or -1 (and the run fails).
static int
s_curve_round (s_bench_t *self, s_layout_t *layout, int index, size_t payload, int inflight,
               s_curve_tally_t *tally, s_curve_figures_t *figures)
{
    s_target_t *target = layout->target;
    uint64_t replies_before = target->replies;
    size_t first_sample = tally->sample_count;
    int64_t cpu_before = s_curve_cpu_usecs (layout);
    int64_t started = zclock_usecs ();
    double rate = inflight == 1?
        s_run (target, payload, 1, self->plan.latency_calls / S_CURVE_ROUNDS,
               self->plan.latency_ms / S_CURVE_ROUNDS, tally->samples, &tally->sample_count):
        s_run (target, payload, inflight, self->plan.throughput_calls / S_CURVE_ROUNDS,
               self->plan.throughput_ms / S_CURVE_ROUNDS, NULL, NULL);
    tally->usecs += zclock_usecs () - started;
    int64_t cpu_after = s_curve_cpu_usecs (layout);
    uint64_t calls = target->replies - replies_before;
    tally->calls += calls;
    tally->cpu_usecs += cpu_after - cpu_before;
    size_t count = tally->sample_count - first_sample;
    if (cpu_before < 0 || cpu_after < 0) {
        s_fail (self, "%s: cannot read the processes' CPU time", s_curve_layout_names [index]);
        return -1;
    }
    if (rate <= 0 || (inflight == 1 && count == 0)) {
        s_fail (self, "%s: run with %d in flight, %zu B failed (%s)", s_curve_layout_names [index], inflight,
                s_payloads [payload], target->last_error [0]? target->last_error: "no reply");
        return -1;
    }
    figures->calls_per_s = rate;
    figures->cpu_us_per_call = calls? (double) (cpu_after - cpu_before) / (double) calls: 0;
    if (inflight == 1) {
        figures->latency_p50_us = (double) s_percentile (tally->samples + first_sample, count, 50);
        figures->latency_p99_us = (double) s_percentile (tally->samples + first_sample, count, 99);
    }
    return 0;
}

//  Widens a range of per-round ratios with one more.
static void
s_ratio_range (double *low, double *high, double ratio)
{
    if (*low == 0 || ratio < *low)
        *low = ratio;
    if (ratio > *high)
        *high = ratio;
}

//  Widens row's range of per-round ratios of pair (0 dsh, 1 raw).
static void
s_curve_ratio_range (s_curve_row_t *row, int pair, double plain, double curve)
{
    s_ratio_range (&row->ratio_low [pair], &row->ratio_high [pair], curve / plain);
}

//  One figure at payload with inflight calls in flight, on all layouts:
//  S_CURVE_ROUNDS rounds, in each the plain and the CURVE layout of a path
//  back to back, which goes first alternating. Latency is the pooled
//  rounds' p50/p99, calls/s all calls over all their time, CPU per call
//  all CPU time over all calls.
static void
s_curve_figure (s_bench_t *self, s_layout_t *layouts, int64_t **samples, size_t payload, int inflight)
{
    s_curve_tally_t tallies [S_CURVE_LAYOUTS];
    for (int index = 0; index < S_CURVE_LAYOUTS; index++)
        tallies [index] = (s_curve_tally_t) { samples [index], 0, 0, 0, 0 };
    s_curve_row_t *p50 = s_curve_row (self, "latency_p50_us", s_payloads [payload], 1);
    s_curve_row_t *p99 = s_curve_row (self, "latency_p99_us", s_payloads [payload], 1);
    s_curve_row_t *rate = s_curve_row (self, "calls_per_s", s_payloads [payload], inflight);
    s_curve_row_t *cpu = s_curve_row (self, "cpu_us_per_call", s_payloads [payload], inflight);
    for (int round = 0; round < S_CURVE_ROUNDS && !zsys_interrupted; round++)
        for (int plain = 0; plain < S_CURVE_LAYOUTS; plain += 2) {
            s_curve_figures_t figures [2];
            for (int turn = 0; turn < 2; turn++) {
                int which = (round + turn) % 2;
                if (s_curve_round (self, &layouts [plain + which], plain + which, payload, inflight,
                                   &tallies [plain + which], &figures [which]))
                    return;
            }
            s_curve_ratio_range (rate, plain / 2, figures [0].calls_per_s, figures [1].calls_per_s);
            //  A short round may use less than a clock tick of CPU
            if (figures [0].cpu_us_per_call > 0 && figures [1].cpu_us_per_call > 0)
                s_curve_ratio_range (cpu, plain / 2, figures [0].cpu_us_per_call, figures [1].cpu_us_per_call);
            if (inflight == 1) {
                s_curve_ratio_range (p50, plain / 2, figures [0].latency_p50_us, figures [1].latency_p50_us);
                s_curve_ratio_range (p99, plain / 2, figures [0].latency_p99_us, figures [1].latency_p99_us);
            }
        }
    for (int index = 0; index < S_CURVE_LAYOUTS && !zsys_interrupted; index++) {
        s_curve_tally_t *tally = &tallies [index];
        rate->value [index] = tally->usecs > 0? (double) tally->calls * 1e6 / (double) tally->usecs: 0;
        cpu->value [index] = tally->calls? (double) tally->cpu_usecs / (double) tally->calls: 0;
        if (inflight == 1) {
            p50->value [index] = (double) s_percentile (tally->samples, tally->sample_count, 50);
            p99->value [index] = (double) s_percentile (tally->samples, tally->sample_count, 99);
        }
    }
}

//  The part's rows, every figure not measured yet.
static void
s_curve_rows_init (s_bench_t *self)
{
    for (size_t payload = 0; payload < S_PAYLOADS; payload++)
        for (size_t figure = 0; figure < S_CURVE_FIGURES; figure++)
            self->curve_rows [payload * S_CURVE_FIGURES + figure] = (s_curve_row_t) {
                s_curve_figures [figure].figure, s_payloads [payload], s_curve_figures [figure].inflight, { 0 },
                { 0 }, { 0 }
            };
}

static void
s_bench_curve (s_bench_t *self)
{
    int64_t started = zclock_mono ();
    s_curve_keys_t keys;
    char error [512];
    if (s_curve_keys_make (&keys, error, sizeof (error))) {
        s_fail (self, "CURVE: %s", error);
        s_curve_keys_remove (&keys);
        return;
    }
    //  All four up at once: the machine is shared, so plain and CURVE are
    //  measured back to back in short rounds, and load that drifts over the
    //  minute falls on both alike
    s_layout_t layouts [S_CURVE_LAYOUTS] = { { NULL, NULL, NULL } };
    bool ready = true;
    for (int index = 0; index < S_CURVE_LAYOUTS && ready; index++)
        ready = s_curve_layout_start (self, &layouts [index], index, index % 2? &keys: NULL) == 0;
    for (int index = 0; index < S_CURVE_LAYOUTS && ready; index++)
        s_warm_up (self, layouts [index].target);
    int64_t *samples [S_CURVE_LAYOUTS];
    for (int index = 0; index < S_CURVE_LAYOUTS; index++) {
        samples [index] = (int64_t *) calloc ((size_t) self->plan.latency_calls, sizeof (int64_t));
        assert (samples [index]);
    }
    for (size_t payload = 0; payload < S_PAYLOADS && ready && !zsys_interrupted; payload++)
        for (size_t figure = 0; figure < S_CURVE_FIGURES; figure++)
            //  The latency rows come with the calls/s row of one in flight
            if (streq (s_curve_figures [figure].figure, "calls_per_s"))
                s_curve_figure (self, layouts, samples, payload, s_curve_figures [figure].inflight);
    for (int index = 0; index < S_CURVE_LAYOUTS; index++)
        free (samples [index]);
    for (int index = 0; index < S_CURVE_LAYOUTS; index++) {
        s_target_destroy (&layouts [index].target);
        s_stop (&layouts [index].echo);
        s_stop (&layouts [index].server);
    }
    s_curve_keys_remove (&keys);
    self->curve_seconds = (double) (zclock_mono () - started) / 1000.0;
}

//  ---------------------------------------------------------------------
//  Statistics: the same call path with the broker's statistics on and off

//  Runs inflight calls of 64 B on each layout in S_STATS_ROUNDS rounds,
//  the two back to back in each, which goes first alternating; sets the
//  figures of that many in flight: calls/s over all rounds' calls and
//  time, the broker's CPU time per call. Returns 0, or -1 (the run fails).
static int
s_stats_figure (s_bench_t *self, s_layout_t *layouts, int inflight, s_stats_row_t *rate, s_stats_row_t *cpu)
{
    int calls = (inflight == 1? self->plan.latency_calls: self->plan.throughput_calls) * 2 / S_STATS_ROUNDS;
    int ms = (inflight == 1? self->plan.latency_ms: self->plan.throughput_ms) * 2 / S_STATS_ROUNDS;
    uint64_t total_calls [2] = { 0, 0 };
    int64_t total_usecs [2] = { 0, 0 }, total_cpu [2] = { 0, 0 };
    for (int round = 0; round < S_STATS_ROUNDS && !zsys_interrupted; round++) {
        double round_rate [2], round_cpu [2];
        for (int turn = 0; turn < 2; turn++) {
            int which = (round + turn) % 2;
            s_target_t *target = layouts [which].target;
            uint64_t replies_before = target->replies;
            int64_t cpu_before = s_proc_cpu_usecs (dsh_testproc_pid (layouts [which].server));
            int64_t started = zclock_usecs ();
            round_rate [which] = s_run (target, 0, inflight, calls, ms, NULL, NULL);
            int64_t elapsed = zclock_usecs () - started;
            int64_t cpu_after = s_proc_cpu_usecs (dsh_testproc_pid (layouts [which].server));
            uint64_t done = target->replies - replies_before;
            if (round_rate [which] <= 0 || cpu_before < 0 || cpu_after < 0 || done == 0) {
                s_fail (self, "%s: run with %d in flight failed (%s)", s_stats_layout_names [which], inflight,
                        target->last_error [0]? target->last_error: "no reply, or no CPU time");
                return -1;
            }
            total_calls [which] += done;
            total_usecs [which] += elapsed;
            total_cpu [which] += cpu_after - cpu_before;
            round_cpu [which] = (double) (cpu_after - cpu_before) / (double) done;
        }
        s_ratio_range (&rate->ratio_low, &rate->ratio_high, round_rate [S_STATS_ON] / round_rate [S_STATS_OFF]);
        //  A short round may use less than a clock tick of CPU
        if (round_cpu [S_STATS_ON] > 0 && round_cpu [S_STATS_OFF] > 0)
            s_ratio_range (&cpu->ratio_low, &cpu->ratio_high, round_cpu [S_STATS_ON] / round_cpu [S_STATS_OFF]);
    }
    for (int which = 0; which < 2; which++) {
        rate->value [which] = total_usecs [which] > 0? (double) total_calls [which] * 1e6 / (double) total_usecs [which]: 0;
        cpu->value [which] = total_calls [which]? (double) total_cpu [which] / (double) total_calls [which]: 0;
    }
    return 0;
}

static s_stats_row_t *
s_stats_row (s_bench_t *self, const char *figure, int inflight)
{
    for (size_t index = 0; index < S_STATS_FIGURES; index++)
        if (streq (self->stats_rows [index].figure, figure) && self->stats_rows [index].inflight == inflight)
            return &self->stats_rows [index];
    assert (false);
    return NULL;
}

static void
s_bench_stats (s_bench_t *self)
{
    int64_t started = zclock_mono ();
    for (size_t index = 0; index < S_STATS_FIGURES; index++)
        self->stats_rows [index] = (s_stats_row_t) { s_stats_figures [index].figure, s_stats_figures [index].inflight,
                                                     { 0, 0 }, 0, 0 };
    //  Both up at once, measured in turns, so load that drifts falls on both
    s_layout_t layouts [2] = { { NULL, NULL, NULL }, { NULL, NULL, NULL } };
    bool ready = true;
    for (int which = 0; which < 2 && ready; which++) {
        const char *off [] = { "--no-stats", NULL };
        char endpoint [256];
        char id [32];
        snprintf (id, sizeof (id), "bench-stats-demo-%d", which);
        layouts [which].server = dsh_testkit_broker (1000, which == S_STATS_OFF? off: NULL, endpoint, sizeof (endpoint));
        layouts [which].echo = layouts [which].server?
            dsh_testkit_component ("components/demo/dsh-demo", endpoint, id, NULL): NULL;
        ready = layouts [which].echo && s_wait_providers (endpoint, 1, 10000) == 0;
        if (ready) {
            layouts [which].target = s_target_new (S_DSH, endpoint);
            //  Calls from an agent, so its row is counted too
            layouts [which].target->agent = S_CURVE_AGENT;
        }
        else
            s_fail (self, "%s: did not start", s_stats_layout_names [which]);
    }
    for (int which = 0; which < 2 && ready; which++)
        s_warm_up (self, layouts [which].target);
    for (size_t index = 0; index < S_STATS_FIGURES && ready && !zsys_interrupted; index++)
        if (streq (s_stats_figures [index].figure, "calls_per_s")) {
            int inflight = s_stats_figures [index].inflight;
            ready = s_stats_figure (self, layouts, inflight, s_stats_row (self, "calls_per_s", inflight),
                                    s_stats_row (self, "broker_cpu_us_per_call", inflight)) == 0;
        }
    for (int which = 0; which < 2; which++) {
        s_target_destroy (&layouts [which].target);
        s_stop (&layouts [which].echo);
        s_stop (&layouts [which].server);
    }
    self->stats_seconds = (double) (zclock_mono () - started) / 1000.0;
}

//  ---------------------------------------------------------------------
//  Scale

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
        //  Started at once: each probe is a change at run time
        dsh_provider_options_t options = { .broker = endpoint, .id = "bench-fanout", .workers = 1, .start_now = true };
        dsh_provider_t *provider = dsh_provider_new_options (&options);
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
//  Audit: the same call path with the audit trail off, on SQLite and on
//  PostgreSQL (issue 25)

//  The audit part's processes, and where its stores are.
typedef struct {
    s_layout_t layouts [S_AUDIT_LAYOUTS];
    dsh_client_t *stats [S_AUDIT_LAYOUTS];      //  each broker's STATS, beside its target's calls
    int active [S_AUDIT_LAYOUTS];               //  the layouts measured, off first
    int active_count;
    char dir [64];                              //  SQLite's state directory
    char postgres_dir [64];                     //  the scratch server's
    char *postgres_uri;
} s_audit_part_t;

//  One layout's figures, over a turn or all turns: calls_per_s over the
//  calls' time, recorded_calls_per_s over the time until the last was
//  recorded (its writer's queue empty again).
typedef struct {
    double calls_per_s;
    double recorded_calls_per_s;
    double broker_cpu_us_per_call;
    double latency_p50_us;
    double latency_p99_us;
} s_audit_turn_figures_t;

//  What one layout's turns of one figure add up to.
typedef struct {
    int64_t *samples;           //  round trips, with one call in flight
    size_t sample_count;
    uint64_t calls;
    int64_t usecs;              //  the calls' time
    int64_t recorded_usecs;     //  until each turn's last record was written
    int64_t cpu_usecs;          //  the broker's, until then
} s_audit_tally_t;

//  Asks client's broker for its audit counts. Returns 0, or -1 if STATS
//  had no answer.
static int
s_audit_counts (dsh_client_t *client, s_audit_counts_t *counts)
{
    memset (counts, 0, sizeof (*counts));
    char error [256];
    dsh_reply_t *reply = dsh_client_request (client, DSH_STATS, NULL, 5000, error, sizeof (error));
    //  nil when the broker's audit is off
    const msgpack_object *audit = reply? dsh_map_get (dsh_reply_body (reply), "audit"): NULL;
    if (audit && audit->type == MSGPACK_OBJECT_MAP) {
        const msgpack_object *healthy = dsh_map_get (audit, "healthy");
        counts->healthy = healthy && healthy->type == MSGPACK_OBJECT_BOOLEAN && healthy->via.boolean;
        counts->records = s_uint_field (audit, "records");
        counts->dropped = s_uint_field (audit, "dropped");
        counts->refused = s_uint_field (audit, "refused");
        counts->queue_bytes = s_uint_field (audit, "queueBytes");
        counts->batches = s_uint_field (audit, "batches");
        counts->write_us_total = s_uint_field (audit, "writeUsTotal");
        counts->write_us_max = s_uint_field (audit, "writeUsMax");
    }
    int rc = audit? 0: -1;
    dsh_reply_destroy (&reply);
    return rc;
}

//  Waits until the broker's audit queue is empty (at once with its audit
//  off); counts are those of the STATS that showed it so, backlog the
//  queue's bytes at the first look. Returns 0, or -1 if STATS did not
//  answer or the queue did not empty within 60 s.
static int
s_audit_drain (dsh_client_t *client, s_audit_counts_t *counts, uint64_t *backlog)
{
    int64_t give_up = zclock_mono () + 60000;
    int rc = s_audit_counts (client, counts);
    *backlog = counts->queue_bytes;
    while (rc == 0 && counts->queue_bytes > 0) {
        if (zclock_mono () >= give_up || zsys_interrupted)
            return -1;
        zclock_sleep (2);
        rc = s_audit_counts (client, counts);
    }
    return rc;
}

//  The SQLite file a broker made in dir (its only *.db). Returns 0, or -1.
static int
s_audit_sqlite_find (const char *dir, char *path, size_t size)
{
    DIR *handle = opendir (dir);
    struct dirent *entry;
    int rc = -1;
    while (handle && rc && (entry = readdir (handle))) {
        size_t length = strlen (entry->d_name);
        if (length > 3 && streq (entry->d_name + length - 3, ".db")) {
            snprintf (path, size, "%s/%s", dir, entry->d_name);
            rc = 0;
        }
    }
    if (handle)
        closedir (handle);
    return rc;
}

//  The size of a SQLite store in bytes, or -1: its file and its
//  write-ahead log, after a checkpoint that empties the log (TRUNCATE),
//  or as they are if that could not finish (checkpointed false).
static int64_t
s_audit_sqlite_bytes (const char *path, bool *checkpointed)
{
    sqlite3 *db = NULL;
    *checkpointed = false;
    if (sqlite3_open_v2 (path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout (db, 5000);
        sqlite3_stmt *statement = NULL;
        //  One row: busy, the log's frames, the frames checkpointed
        if (sqlite3_prepare_v2 (db, "PRAGMA wal_checkpoint(TRUNCATE)", -1, &statement, NULL) == SQLITE_OK
        &&  sqlite3_step (statement) == SQLITE_ROW)
            *checkpointed = sqlite3_column_int (statement, 0) == 0;
        sqlite3_finalize (statement);
    }
    sqlite3_close (db);
    struct stat file;
    if (stat (path, &file))
        return -1;
    int64_t bytes = (int64_t) file.st_size;
    char wal [512];
    snprintf (wal, sizeof (wal), "%s-wal", path);
    if (stat (wal, &file) == 0)
        bytes += (int64_t) file.st_size;
    return bytes;
}

//  The size of a PostgreSQL store's dsh_audit in bytes, with its indexes
//  and TOAST (pg_total_relation_size), or -1.
static int64_t
s_audit_postgres_bytes (const char *uri)
{
    PGconn *connection = PQconnectdb (uri);
    int64_t bytes = -1;
    if (PQstatus (connection) == CONNECTION_OK) {
        PGresult *result = PQexec (connection, "SELECT pg_total_relation_size('dsh_audit')");
        if (PQresultStatus (result) == PGRES_TUPLES_OK && PQntuples (result) == 1)
            bytes = strtoll (PQgetvalue (result, 0, 0), NULL, 10);
        PQclear (result);
    }
    PQfinish (connection);
    return bytes;
}

//  Reads each audited layout's counts (STATS) into its store and its
//  store's size into bytes (-1: not known). The records are counts'.
static void
s_audit_snapshot (s_bench_t *self, s_audit_part_t *part, int64_t bytes [S_AUDIT_LAYOUTS])
{
    for (int turn = 1; turn < part->active_count; turn++) {
        int which = part->active [turn];
        s_audit_store_t *store = &self->audit_stores [which];
        if (s_audit_counts (part->stats [which], &store->counts))
            bytes [which] = -1;
        else
        if (which == S_AUDIT_SQLITE) {
            bool checkpointed;
            bytes [which] = s_audit_sqlite_bytes (store->location, &checkpointed);
            //  Once as is, the sizes that follow are no better
            store->checkpointed = store->checkpointed && checkpointed;
        }
        else
            bytes [which] = s_audit_postgres_bytes (part->postgres_uri);
        store->bytes = bytes [which];
    }
}

//  Starts layout which: a broker with its audit off, on SQLite in the
//  part's directory, or on the part's PostgreSQL, and a dsh-demo; waits
//  until an audited one's store is healthy. Returns 0, or -1 (and the run
//  fails).
static int
s_audit_layout_start (s_bench_t *self, s_audit_part_t *part, int which)
{
    const char *off_flags [] = { "--audit", "off", NULL };
    const char *sqlite_flags [] = { "--audit", "required", "--state-dir", part->dir, NULL };
    const char *postgres_flags [] = { "--audit", "required", "--store", part->postgres_uri, NULL };
    const char *const *flags [S_AUDIT_LAYOUTS] = { off_flags, sqlite_flags, postgres_flags };
    s_layout_t *layout = &part->layouts [which];
    s_audit_store_t *store = &self->audit_stores [which];
    char endpoint [256], id [32];
    snprintf (id, sizeof (id), "bench-audit-demo-%d", which);
    layout->server = dsh_testkit_broker (1000, flags [which], endpoint, sizeof (endpoint));
    layout->echo = layout->server? dsh_testkit_component ("components/demo/dsh-demo", endpoint, id, NULL): NULL;
    if (!layout->echo || s_wait_providers (endpoint, 1, 10000)) {
        s_fail (self, "%s: did not start", s_audit_layout_names [which]);
        return -1;
    }
    part->stats [which] = dsh_client_new (endpoint);
    s_audit_counts_t counts;
    if (s_audit_counts (part->stats [which], &counts) || (which != S_AUDIT_OFF && !counts.healthy)) {
        s_fail (self, "%s: its audit store is not healthy (or STATS did not answer)", s_audit_layout_names [which]);
        return -1;
    }
    if (which == S_AUDIT_SQLITE && s_audit_sqlite_find (part->dir, store->location, sizeof (store->location))) {
        s_fail (self, "%s: no store file in %s", s_audit_layout_names [which], part->dir);
        return -1;
    }
    if (which == S_AUDIT_POSTGRES)
        snprintf (store->location, sizeof (store->location), "%s", part->postgres_uri);
    layout->target = s_target_new (S_DSH, endpoint);
    //  Calls from an agent, as an agent's would be recorded
    layout->target->agent = S_CURVE_AGENT;
    return 0;
}

//  One turn on layout which: inflight calls of payload for a round's share
//  of the plan, then a wait until its writer's queue is empty, whose CPU
//  time counts for the calls and whose time for the writer. Writes the
//  turn's figures, adds it to tally and, with more than one in flight, to
//  the store's writer figures. Returns 0, or -1 (and the run fails).
static int
s_audit_turn (s_bench_t *self, s_audit_part_t *part, int which, size_t payload, int inflight,
              s_audit_tally_t *tally, s_audit_turn_figures_t *figures)
{
    s_target_t *target = part->layouts [which].target;
    pid_t broker = dsh_testproc_pid (part->layouts [which].server);
    int calls = (inflight == 1? self->plan.latency_calls: self->plan.throughput_calls) * 2 / S_AUDIT_ROUNDS;
    int ms = (inflight == 1? self->plan.latency_ms: self->plan.throughput_ms) * 2 / S_AUDIT_ROUNDS;
    uint64_t replies_before = target->replies, backlog = 0;
    size_t first_sample = tally->sample_count;
    s_audit_counts_t before, after;
    int rc = s_audit_counts (part->stats [which], &before);
    int64_t cpu_before = s_proc_cpu_usecs (broker);
    int64_t started = zclock_usecs ();
    double rate = s_run (target, payload, inflight, calls, ms, inflight == 1? tally->samples: NULL,
                         &tally->sample_count);
    int64_t answered = zclock_usecs ();
    if (rc == 0)
        rc = s_audit_drain (part->stats [which], &after, &backlog);
    int64_t drained = zclock_usecs ();
    int64_t cpu_after = s_proc_cpu_usecs (broker);
    uint64_t done = target->replies - replies_before;
    size_t count = tally->sample_count - first_sample;
    if (rate <= 0 || done == 0 || (inflight == 1 && count == 0)) {
        s_fail (self, "%s: run with %d in flight, %zu B failed (%s)", s_audit_layout_names [which], inflight,
                s_payloads [payload], target->last_error [0]? target->last_error: "no reply");
        return -1;
    }
    if (rc || cpu_before < 0 || cpu_after < 0) {
        s_fail (self, "%s: STATS did not answer, the audit queue did not empty within 60 s, or no CPU time",
                s_audit_layout_names [which]);
        return -1;
    }
    //  The audit off has nothing to wait for but the STATS that says so
    if (which == S_AUDIT_OFF)
        drained = answered;
    tally->calls += done;
    tally->usecs += answered - started;
    tally->recorded_usecs += drained - started;
    tally->cpu_usecs += cpu_after - cpu_before;
    figures->calls_per_s = rate;
    figures->recorded_calls_per_s = (double) done * 1e6 / (double) (drained - started);
    figures->broker_cpu_us_per_call = (double) (cpu_after - cpu_before) / (double) done;
    if (inflight == 1) {
        figures->latency_p50_us = (double) s_percentile (tally->samples + first_sample, count, 50);
        figures->latency_p99_us = (double) s_percentile (tally->samples + first_sample, count, 99);
    }
    else
    if (which != S_AUDIT_OFF) {
        s_audit_writer_t *writer = &self->audit_stores [which].payloads [payload];
        writer->records += after.records - before.records;
        writer->usecs += drained - started;
        writer->write_us += after.write_us_total - before.write_us_total;
        writer->batches += after.batches - before.batches;
        if (backlog > writer->queue_bytes_max)
            writer->queue_bytes_max = backlog;
        if (drained - answered > writer->drain_us_max)
            writer->drain_us_max = drained - answered;
    }
    return 0;
}

static s_audit_row_t *
s_audit_row (s_bench_t *self, const char *figure, size_t payload)
{
    for (size_t index = 0; index < S_AUDIT_ROWS; index++)
        if (streq (self->audit_rows [index].figure, figure) && self->audit_rows [index].payload == payload)
            return &self->audit_rows [index];
    assert (false);
    return NULL;
}

//  An audited layout's figure of row held against off's: audited / off,
//  or audited - off; NAN if either is missing.
static double
s_audit_compare (const s_audit_row_t *row, double audited, double off)
{
    if (!(audited > 0) || !(off > 0))
        return NAN;
    return row->difference? audited - off: audited / off;
}

//  Widens row's range of the rounds' own comparisons of layout which.
static void
s_audit_compare_range (s_audit_row_t *row, int which, double audited, double off)
{
    double compared = s_audit_compare (row, audited, off);
    if (isnan (compared))
        return;
    if (compared < row->compare_low [which])
        row->compare_low [which] = compared;
    if (compared > row->compare_high [which])
        row->compare_high [which] = compared;
}

//  The figure of figures that a row names.
static double
s_audit_figure_of (const s_audit_turn_figures_t *figures, const char *figure)
{
    return streq (figure, "calls_per_s")? figures->calls_per_s:
           streq (figure, "recorded_calls_per_s")? figures->recorded_calls_per_s:
           streq (figure, "broker_cpu_us_per_call")? figures->broker_cpu_us_per_call:
           streq (figure, "latency_p50_us")? figures->latency_p50_us: figures->latency_p99_us;
}

//  The figures at payload with inflight calls in flight, on every layout:
//  S_AUDIT_ROUNDS rounds, in each the layouts in turns, which goes first
//  rotating. Latency is the pooled rounds' p50/p99, calls/s all calls over
//  all their time, CPU per call all CPU time over all calls. Returns 0, or
//  -1 (the run fails).
static int
s_audit_figure (s_bench_t *self, s_audit_part_t *part, int64_t **samples, size_t payload, int inflight)
{
    s_audit_tally_t tallies [S_AUDIT_LAYOUTS];
    for (int which = 0; which < S_AUDIT_LAYOUTS; which++)
        tallies [which] = (s_audit_tally_t) { samples [which], 0, 0, 0, 0, 0 };
    for (int round = 0; round < S_AUDIT_ROUNDS && !zsys_interrupted; round++) {
        s_audit_turn_figures_t figures [S_AUDIT_LAYOUTS];
        for (int turn = 0; turn < part->active_count; turn++) {
            int which = part->active [(round + turn) % part->active_count];
            if (s_audit_turn (self, part, which, payload, inflight, &tallies [which], &figures [which]))
                return -1;
        }
        for (size_t figure = 0; figure < S_AUDIT_FIGURES; figure++)
            for (int turn = 1; turn < part->active_count && s_audit_figures [figure].inflight == inflight; turn++) {
                const char *name = s_audit_figures [figure].figure;
                int which = part->active [turn];
                s_audit_compare_range (s_audit_row (self, name, s_payloads [payload]), which,
                                       s_audit_figure_of (&figures [which], name),
                                       s_audit_figure_of (&figures [S_AUDIT_OFF], name));
            }
    }
    for (int turn = 0; turn < part->active_count && !zsys_interrupted; turn++) {
        int which = part->active [turn];
        s_audit_tally_t *tally = &tallies [which];
        s_audit_turn_figures_t pooled = {
            tally->usecs > 0? (double) tally->calls * 1e6 / (double) tally->usecs: 0,
            tally->recorded_usecs > 0? (double) tally->calls * 1e6 / (double) tally->recorded_usecs: 0,
            tally->calls? (double) tally->cpu_usecs / (double) tally->calls: 0,
            (double) s_percentile (tally->samples, tally->sample_count, 50),
            (double) s_percentile (tally->samples, tally->sample_count, 99)
        };
        for (size_t figure = 0; figure < S_AUDIT_FIGURES; figure++)
            if (s_audit_figures [figure].inflight == inflight)
                s_audit_row (self, s_audit_figures [figure].figure, s_payloads [payload])->value [which]
                    = s_audit_figure_of (&pooled, s_audit_figures [figure].figure);
    }
    return 0;
}

//  The part's rows, every figure not measured yet, and its stores.
static void
s_audit_init (s_bench_t *self)
{
    for (size_t payload = 0; payload < S_PAYLOADS; payload++)
        for (size_t figure = 0; figure < S_AUDIT_FIGURES; figure++) {
            s_audit_row_t *row = &self->audit_rows [payload * S_AUDIT_FIGURES + figure];
            *row = (s_audit_row_t) { s_audit_figures [figure].figure, s_payloads [payload],
                                     s_audit_figures [figure].inflight, s_audit_figures [figure].difference,
                                     { 0 }, { 0 }, { 0 } };
            for (int which = 0; which < S_AUDIT_LAYOUTS; which++) {
                row->compare_low [which] = INFINITY;
                row->compare_high [which] = -INFINITY;
            }
        }
    for (int which = 0; which < S_AUDIT_LAYOUTS; which++) {
        s_audit_store_t *store = &self->audit_stores [which];
        memset (store, 0, sizeof (*store));
        store->bytes = -1;
        store->checkpointed = which == S_AUDIT_SQLITE;
        for (size_t payload = 0; payload < S_PAYLOADS; payload++)
            store->payloads [payload].store_bytes = -1;
    }
}

static void
s_bench_audit (s_bench_t *self)
{
    int64_t started = zclock_mono ();
    s_audit_part_t part_object, *part = &part_object;
    memset (part, 0, sizeof (*part));
    snprintf (part->dir, sizeof (part->dir), "/tmp/dsh-bench-audit-XXXXXX");
    snprintf (part->postgres_dir, sizeof (part->postgres_dir), "/tmp/dsh-bench-pg-XXXXXX");
    if (!mkdtemp (part->dir)) {
        s_fail (self, "audit: cannot make a state directory: %s", strerror (errno));
        return;
    }
    char reason [512] = "";
    if (mkdtemp (part->postgres_dir))
        part->postgres_uri = dsh_testkit_postgres_try (part->postgres_dir, reason, sizeof (reason));
    else {
        snprintf (reason, sizeof (reason), "cannot make a directory for it: %s", strerror (errno));
        part->postgres_dir [0] = 0;
    }
    //  PostgreSQL is a store dsh may write to, not the subject: when it
    //  cannot run here its column goes, with the reason
    part->active [part->active_count++] = S_AUDIT_OFF;
    part->active [part->active_count++] = S_AUDIT_SQLITE;
    if (part->postgres_uri)
        part->active [part->active_count++] = S_AUDIT_POSTGRES;
    else {
        fprintf (stderr, "dsh-bench: audit on PostgreSQL skipped: %s\n", reason);
        snprintf (self->audit_stores [S_AUDIT_POSTGRES].reason, sizeof (self->audit_stores [S_AUDIT_POSTGRES].reason),
                  "%s", reason);
    }
    //  All up at once, measured in turns, so load that drifts falls on all
    bool ready = true;
    for (int turn = 0; turn < part->active_count && ready; turn++) {
        self->audit_stores [part->active [turn]].measured = true;
        ready = s_audit_layout_start (self, part, part->active [turn]) == 0;
    }
    for (int turn = 0; turn < part->active_count && ready; turn++) {
        int which = part->active [turn];
        s_audit_counts_t counts;
        uint64_t backlog;
        s_warm_up (self, part->layouts [which].target);
        if (s_audit_drain (part->stats [which], &counts, &backlog)) {
            s_fail (self, "%s: its audit queue did not empty after the warm-up", s_audit_layout_names [which]);
            ready = false;
        }
    }
    int64_t *samples [S_AUDIT_LAYOUTS];
    for (int which = 0; which < S_AUDIT_LAYOUTS; which++) {
        samples [which] = (int64_t *) calloc ((size_t) self->plan.latency_calls * 2, sizeof (int64_t));
        assert (samples [which]);
    }
    int64_t bytes_before [S_AUDIT_LAYOUTS], bytes_after [S_AUDIT_LAYOUTS];
    uint64_t records_before [S_AUDIT_LAYOUTS];
    if (ready)
        s_audit_snapshot (self, part, bytes_before);
    for (size_t payload = 0; payload < S_PAYLOADS && ready && !zsys_interrupted; payload++) {
        for (int which = 0; which < S_AUDIT_LAYOUTS; which++)
            records_before [which] = self->audit_stores [which].counts.records;
        //  A pass for each in-flight count, at the first of its figures
        for (size_t figure = 0; figure < S_AUDIT_FIGURES && ready; figure++)
            if (figure == 0 || s_audit_figures [figure - 1].inflight != s_audit_figures [figure].inflight)
                ready = s_audit_figure (self, part, samples, payload, s_audit_figures [figure].inflight) == 0;
        s_audit_snapshot (self, part, bytes_after);
        for (int turn = 1; turn < part->active_count; turn++) {
            int which = part->active [turn];
            s_audit_writer_t *writer = &self->audit_stores [which].payloads [payload];
            writer->store_records = self->audit_stores [which].counts.records - records_before [which];
            writer->store_bytes = bytes_before [which] >= 0 && bytes_after [which] >= 0?
                bytes_after [which] - bytes_before [which]: -1;
            bytes_before [which] = bytes_after [which];
        }
    }
    for (int which = 0; which < S_AUDIT_LAYOUTS; which++) {
        free (samples [which]);
        s_target_destroy (&part->layouts [which].target);
        dsh_client_destroy (&part->stats [which]);
        s_stop (&part->layouts [which].echo);
        s_stop (&part->layouts [which].server);
    }
    //  A server that did not stop keeps its directory
    if (part->postgres_uri && dsh_testkit_postgres_stop (part->postgres_dir))
        fprintf (stderr, "dsh-bench: the scratch PostgreSQL in %s did not stop\n", part->postgres_dir);
    else
        s_dir_remove (part->postgres_dir);
    zstr_free (&part->postgres_uri);
    s_dir_remove (part->dir);
    self->audit_seconds = (double) (zclock_mono () - started) / 1000.0;
}

//  ---------------------------------------------------------------------
//  Pins: the call path with pinned definitions off and on, and through a
//  permission stage that allows or asks and finds a grant (issue 26)

//  The pins part's processes: a broker, a dsh-demo and a target per
//  layout, and a raw approver on the grant layout's stage.
typedef struct {
    s_layout_t layouts [S_PINS_LAYOUTS];
    char dir [64];              //  the chain configs
    char allow_config [96];
    char ask_config [96];
    dsh_client_t *control;      //  CONTROL to the grant layout's stage
    zsock_t *approver;          //  a DEALER on its approvals socket
} s_pins_part_t;

//  What calls on one layout add up to: one turn's, or all turns' of one
//  figure.
typedef struct {
    int64_t *samples;           //  round trips, with one call in flight
    size_t sample_count;
    uint64_t calls;
    int64_t usecs;              //  the calls' time
    int64_t cpu_usecs;          //  the broker's meanwhile
} s_pins_tally_t;

//  Writes text to path. Returns 0, or -1.
static int
s_pins_config_write (const char *path, const char *text)
{
    FILE *file = fopen (path, "w");
    bool written = file && fputs (text, file) >= 0;
    if (file && fclose (file))
        written = false;
    return written? 0: -1;
}

//  Sends command to the approver's stage, with body (borrowed), or an
//  empty map if body is NULL.
static void
s_pins_approver_send (zsock_t *approver, const char *command, msgpack_sbuffer *body)
{
    zmsg_t *msg = dsh_proto_message (NULL, command);
    if (body)
        zmsg_addmem (msg, body->data, body->size);
    else
        zmsg_addmem (msg, "\x80", 1);          //  {}
    zmsg_send (&msg, approver);
}

//  The next message to the approver within timeout_ms other than a
//  HEARTBEAT (each answered with APPROVER, which keeps it present), its
//  command in command; NULL on timeout. Caller destroys.
static dsh_doc_t *
s_pins_approver_next (zsock_t *approver, char *command, size_t size, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    dsh_doc_t *body = NULL;
    while (!body) {
        int64_t left = give_up - zclock_mono ();
        zmq_pollitem_t item = { zsock_resolve (approver), 0, ZMQ_POLLIN, 0 };
        if (zmq_poll (&item, 1, left > 0? (long) left: 0) <= 0)
            break;
        zmsg_t *msg = zmsg_recv (approver);
        zmsg_t *envelope = NULL;
        char error [256];
        if (msg && dsh_proto_split (msg, &envelope, command, size, error, sizeof (error)) == 0) {
            if (streq (command, "HEARTBEAT"))
                s_pins_approver_send (approver, "APPROVER", NULL);
            else
                body = dsh_proto_decode_body (zmsg_first (msg), error, sizeof (error));
        }
        zmsg_destroy (&envelope);
        zmsg_destroy (&msg);
    }
    return body;
}

//  The next message to the approver, if it is of command; NULL if another
//  or none came within timeout_ms.
static dsh_doc_t *
s_pins_approver_expect (zsock_t *approver, const char *command, int timeout_ms)
{
    char got [32] = "";
    dsh_doc_t *body = s_pins_approver_next (approver, got, sizeof (got), timeout_ms);
    if (body && !streq (got, command))
        dsh_doc_destroy (&body);
    return body;
}

//  Reads what waits for the approver, answering its heartbeats. Returns
//  the requests (PENDING) among it: calls the grant did not let by.
static uint64_t
s_pins_approver_drain (zsock_t *approver)
{
    uint64_t asked = 0;
    char command [32];
    dsh_doc_t *body;
    while ((body = s_pins_approver_next (approver, command, sizeof (command), 0))) {
        if (streq (command, "PENDING"))
            asked++;
        dsh_doc_destroy (&body);
    }
    return asked;
}

//  Connects the approver to the grant layout's stage (CONTROL approvals
//  says where) and waits until the stage counts it: HEARTBEAT goes only to
//  approvers it knows. Returns 0, or -1.
static int
s_pins_approver_open (s_pins_part_t *part)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_control (part->control, S_PINS_STAGE, "approvals", NULL, 5000, error,
                                             sizeof (error));
    json_t *body = reply? dsh_reply_json (reply): NULL;
    const char *endpoint = json_string_value (json_object_get (json_object_get (body, "data"), "endpoint"));
    part->approver = endpoint? zsock_new_dealer (endpoint): NULL;
    json_decref (body);
    dsh_reply_destroy (&reply);
    if (!part->approver)
        return -1;
    s_pins_approver_send (part->approver, "APPROVER", NULL);
    int64_t give_up = zclock_mono () + 10000;
    bool heard = false;
    while (!heard && zclock_mono () < give_up) {
        zmq_pollitem_t item = { zsock_resolve (part->approver), 0, ZMQ_POLLIN, 0 };
        if (zmq_poll (&item, 1, 1000) <= 0)
            continue;
        zmsg_t *msg = zmsg_recv (part->approver);
        zmsg_t *envelope = NULL;
        char command [32];
        if (msg && dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)) == 0)
            heard = streq (command, "HEARTBEAT");
        zmsg_destroy (&envelope);
        zmsg_destroy (&msg);
    }
    if (heard)
        s_pins_approver_send (part->approver, "APPROVER", NULL);
    return heard? 0: -1;
}

//  True if the grant layout's stage lists a live grant id for the bench's
//  agent and echo (CONTROL grants).
static bool
s_pins_grant_listed (s_pins_part_t *part, const char *id)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_control (part->control, S_PINS_STAGE, "grants", NULL, 5000, error,
                                             sizeof (error));
    json_t *body = reply? dsh_reply_json (reply): NULL;
    json_t *grants = json_object_get (body, "data");
    bool listed = false;
    size_t index;
    json_t *grant;
    json_array_foreach (grants, index, grant) {
        const char *grant_id = json_string_value (json_object_get (grant, "id"));
        const char *tool = json_string_value (json_object_get (grant, "tool"));
        const char *agent = json_string_value (json_object_get (grant, "agent"));
        if (grant_id && tool && agent && streq (grant_id, id) && streq (tool, "echo") && streq (agent, S_CURVE_AGENT))
            listed = true;
    }
    json_decref (body);
    dsh_reply_destroy (&reply);
    return listed;
}

//  Makes the grant the last layout runs under: one call asks, the approver
//  allows it for the agent and echo for an hour (DECIDE scope tool), and
//  RESOLVED names the grant. Returns 0, or -1 (and the run fails).
static int
s_pins_grant_make (s_bench_t *self, s_pins_part_t *part)
{
    s_pins_grant_t *grant = &self->pins_grant;
    const char *why = NULL;
    s_target_t *target = part->layouts [S_PINS_GRANT].target;
    if (s_pins_approver_open (part))
        why = "no approver could connect to the stage";
    dsh_doc_t *pending = why? NULL: s_target_send (target, 0)? NULL:
                         s_pins_approver_expect (part->approver, "PENDING", 10000);
    const msgpack_object *id = pending? dsh_map_get (dsh_doc_root (pending), "id"): NULL;
    if (!why && !(id && id->type == MSGPACK_OBJECT_STR))
        why = "the call that should ask was not put to the approver";
    if (!why) {
        msgpack_sbuffer decide;
        msgpack_sbuffer_init (&decide);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &decide, msgpack_sbuffer_write);
        msgpack_pack_map (&pk, 4);
        dsh_pack_cstr (&pk, "id");
        msgpack_pack_str (&pk, id->via.str.size);
        msgpack_pack_str_body (&pk, id->via.str.ptr, id->via.str.size);
        dsh_pack_cstr (&pk, "outcome");
        dsh_pack_cstr (&pk, "allow");
        dsh_pack_cstr (&pk, "scope");
        dsh_pack_cstr (&pk, "tool");
        dsh_pack_cstr (&pk, "minutes");
        msgpack_pack_int (&pk, 60);
        s_pins_approver_send (part->approver, "DECIDE", &decide);
        msgpack_sbuffer_destroy (&decide);
        uint64_t errors = target->errors;
        if (!s_target_recv (target) || target->errors != errors)
            why = "the call that asked did not pass once allowed";
    }
    dsh_doc_t *resolved = why? NULL: s_pins_approver_expect (part->approver, "RESOLVED", 5000);
    const msgpack_object *made = resolved? dsh_map_get (dsh_doc_root (resolved), "grant"): NULL;
    if (!why && made && made->type == MSGPACK_OBJECT_STR && made->via.str.size < sizeof (grant->id))
        snprintf (grant->id, sizeof (grant->id), "%.*s", (int) made->via.str.size, made->via.str.ptr);
    else
    if (!why)
        why = "RESOLVED named no grant";
    dsh_doc_destroy (&resolved);
    dsh_doc_destroy (&pending);
    if (!why && !(grant->listed_before = s_pins_grant_listed (part, grant->id)))
        why = "CONTROL grants does not list the grant";
    if (why) {
        s_fail (self, "%s: %s (%s)", s_pins_layout_names [S_PINS_GRANT], why,
                target->last_error [0]? target->last_error: "no error from the call");
        return -1;
    }
    return 0;
}

//  Starts layout which, a broker with the audit off (and the layout's pins
//  and chain) and a dsh-demo, and a target calling it as the bench's
//  agent. Returns 0, or -1 (and the run fails).
static int
s_pins_layout_start (s_bench_t *self, s_pins_part_t *part, int which)
{
    const char *off_flags [] = { "--audit", "off", "--pins", "off", NULL };
    const char *tofu_flags [] = { "--audit", "off", NULL };
    const char *allow_flags [] = { "--audit", "off", "-c", part->allow_config, NULL };
    const char *grant_flags [] = { "--audit", "off", "-c", part->ask_config, NULL };
    const char *const *flags [S_PINS_LAYOUTS] = { off_flags, tofu_flags, allow_flags, grant_flags };
    s_layout_t *layout = &part->layouts [which];
    char endpoint [256], id [32];
    snprintf (id, sizeof (id), "bench-pins-demo-%d", which);
    layout->server = dsh_testkit_broker (1000, flags [which], endpoint, sizeof (endpoint));
    layout->echo = layout->server? dsh_testkit_component ("components/demo/dsh-demo", endpoint, id, NULL): NULL;
    if (!layout->echo || s_wait_providers (endpoint, 1, 10000)) {
        s_fail (self, "%s: did not start", s_pins_layout_names [which]);
        return -1;
    }
    layout->target = s_target_new (S_DSH, endpoint);
    //  The agent a grant is for
    layout->target->agent = S_CURVE_AGENT;
    if (which == S_PINS_GRANT)
        part->control = dsh_client_new (endpoint);
    return 0;
}

//  One turn on layout which: inflight calls of payload for a round's share
//  of the plan. Writes the turn's tally into turn and adds it to tally; on
//  the grant layout, counts what was put to the approver meanwhile.
//  Returns 0, or -1 (and the run fails).
static int
s_pins_turn (s_bench_t *self, s_pins_part_t *part, int which, size_t payload, int inflight,
             s_pins_tally_t *tally, s_pins_tally_t *turn)
{
    s_target_t *target = part->layouts [which].target;
    pid_t broker = dsh_testproc_pid (part->layouts [which].server);
    int calls = (inflight == 1? self->plan.latency_calls: self->plan.throughput_calls) * 2 / S_PINS_ROUNDS;
    int ms = (inflight == 1? self->plan.latency_ms: self->plan.throughput_ms) * 2 / S_PINS_ROUNDS;
    uint64_t replies_before = target->replies;
    size_t first_sample = tally->sample_count;
    int64_t cpu_before = s_proc_cpu_usecs (broker);
    int64_t started = zclock_usecs ();
    double rate = s_run (target, payload, inflight, calls, ms, inflight == 1? tally->samples: NULL,
                         &tally->sample_count);
    int64_t elapsed = zclock_usecs () - started;
    int64_t cpu_after = s_proc_cpu_usecs (broker);
    uint64_t done = target->replies - replies_before;
    if (which == S_PINS_GRANT)
        self->pins_grant.asked += s_pins_approver_drain (part->approver);
    *turn = (s_pins_tally_t) { tally->samples + first_sample, tally->sample_count - first_sample, done, elapsed,
                               cpu_after - cpu_before };
    if (rate <= 0 || done == 0 || (inflight == 1 && turn->sample_count == 0) || cpu_before < 0 || cpu_after < 0) {
        s_fail (self, "%s: run with %d in flight, %zu B failed (%s)", s_pins_layout_names [which], inflight,
                s_payloads [payload], target->last_error [0]? target->last_error: "no reply, or no CPU time");
        return -1;
    }
    tally->calls += done;
    tally->usecs += elapsed;
    tally->cpu_usecs += turn->cpu_usecs;
    return 0;
}

//  The figure of a tally that a row names; 0 if it has nothing to say.
//  Sorts the tally's samples.
static double
s_pins_figure_of (s_pins_tally_t *tally, const char *figure)
{
    if (streq (figure, "calls_per_s"))
        return tally->usecs > 0? (double) tally->calls * 1e6 / (double) tally->usecs: 0;
    if (streq (figure, "broker_cpu_us_per_call"))
        return tally->calls? (double) tally->cpu_usecs / (double) tally->calls: 0;
    return (double) s_percentile (tally->samples, tally->sample_count, streq (figure, "latency_p50_us")? 50: 99);
}

static s_pins_row_t *
s_pins_row (s_bench_t *self, const char *figure, size_t payload)
{
    for (size_t index = 0; index < S_PINS_ROWS; index++)
        if (streq (self->pins_rows [index].figure, figure) && self->pins_rows [index].payload == payload)
            return &self->pins_rows [index];
    assert (false);
    return NULL;
}

//  The figures at payload with inflight calls in flight, on every layout:
//  S_PINS_ROUNDS rounds, in each the layouts in turns, which goes first
//  rotating. Latency is the pooled rounds' p50/p99, calls/s all calls over
//  all their time, CPU per call all CPU time over all calls; each
//  comparison's range is over the rounds' own. Returns 0, or -1 (the run
//  fails).
static int
s_pins_figure (s_bench_t *self, s_pins_part_t *part, int64_t **samples, size_t payload, int inflight)
{
    s_pins_tally_t tallies [S_PINS_LAYOUTS];
    for (int which = 0; which < S_PINS_LAYOUTS; which++)
        tallies [which] = (s_pins_tally_t) { samples [which], 0, 0, 0, 0 };
    for (int round = 0; round < S_PINS_ROUNDS && !zsys_interrupted; round++) {
        s_pins_tally_t turns [S_PINS_LAYOUTS];
        for (int turn = 0; turn < S_PINS_LAYOUTS; turn++) {
            int which = (round + turn) % S_PINS_LAYOUTS;
            if (s_pins_turn (self, part, which, payload, inflight, &tallies [which], &turns [which]))
                return -1;
        }
        for (size_t figure = 0; figure < S_PINS_FIGURES; figure++) {
            if (s_pins_figures [figure].inflight != inflight)
                continue;
            s_pins_row_t *row = s_pins_row (self, s_pins_figures [figure].figure, s_payloads [payload]);
            for (int compared = 0; compared < S_PINS_COMPARISONS; compared++) {
                double layout = s_pins_figure_of (&turns [s_pins_comparisons [compared].layout], row->figure);
                double reference = s_pins_figure_of (&turns [s_pins_comparisons [compared].reference], row->figure);
                //  A short turn may use less than a clock tick of CPU
                if (layout > 0 && reference > 0)
                    s_ratio_range (&row->ratio_low [compared], &row->ratio_high [compared], layout / reference);
            }
        }
    }
    for (size_t figure = 0; figure < S_PINS_FIGURES && !zsys_interrupted; figure++)
        if (s_pins_figures [figure].inflight == inflight)
            for (int which = 0; which < S_PINS_LAYOUTS; which++)
                s_pins_row (self, s_pins_figures [figure].figure, s_payloads [payload])->value [which]
                    = s_pins_figure_of (&tallies [which], s_pins_figures [figure].figure);
    return 0;
}

//  A layout's figure of row over its reference's in comparison compared;
//  0 if either is missing.
static double
s_pins_compare (const s_pins_row_t *row, int compared)
{
    double layout = row->value [s_pins_comparisons [compared].layout];
    double reference = row->value [s_pins_comparisons [compared].reference];
    return layout > 0 && reference > 0? layout / reference: 0;
}

//  The part's rows, every figure not measured yet.
static void
s_pins_init (s_bench_t *self)
{
    for (size_t payload = 0; payload < S_PAYLOADS; payload++)
        for (size_t figure = 0; figure < S_PINS_FIGURES; figure++)
            self->pins_rows [payload * S_PINS_FIGURES + figure] = (s_pins_row_t) {
                s_pins_figures [figure].figure, s_payloads [payload], s_pins_figures [figure].inflight, { 0 },
                { 0 }, { 0 }
            };
    memset (&self->pins_grant, 0, sizeof (self->pins_grant));
}

static void
s_bench_pins (s_bench_t *self)
{
    int64_t started = zclock_mono ();
    s_pins_part_t part_object, *part = &part_object;
    memset (part, 0, sizeof (*part));
    snprintf (part->dir, sizeof (part->dir), "/tmp/dsh-bench-pins-XXXXXX");
    if (!mkdtemp (part->dir)) {
        s_fail (self, "pins: cannot make a directory for its configs: %s", strerror (errno));
        return;
    }
    snprintf (part->allow_config, sizeof (part->allow_config), "%.63s/allow.cfg", part->dir);
    snprintf (part->ask_config, sizeof (part->ask_config), "%.63s/ask.cfg", part->dir);
    //  A stray ask closes in 2 s, before the bench gives up on its reply,
    //  so it fails the turn with the stage's own reason
    bool ready = s_pins_config_write (part->allow_config,
        "#   dsh-bench, pins part: one permission stage that allows every call\n"
        "chain\n"
        "    stage\n"
        "        name = \"" S_PINS_STAGE "\"\n"
        "        kind = \"permission\"\n"
        "        rule\n"
        "            action = \"allow\"\n") == 0
              && s_pins_config_write (part->ask_config,
        "#   dsh-bench, pins part: one permission stage that asks for echo\n"
        "chain\n"
        "    stage\n"
        "        name = \"" S_PINS_STAGE "\"\n"
        "        kind = \"permission\"\n"
        "        approval_timeout_ms = 2000\n"
        "        rule\n"
        "            tool = \"echo\"\n"
        "            action = \"ask\"\n") == 0;
    if (!ready)
        s_fail (self, "pins: cannot write its configs in %s", part->dir);
    //  All up at once, measured in turns, so load that drifts falls on all
    for (int which = 0; which < S_PINS_LAYOUTS && ready; which++)
        ready = s_pins_layout_start (self, part, which) == 0;
    if (ready)
        ready = s_pins_grant_make (self, part) == 0;
    for (int which = 0; which < S_PINS_LAYOUTS && ready; which++)
        s_warm_up (self, part->layouts [which].target);
    if (ready)
        self->pins_grant.asked += s_pins_approver_drain (part->approver);
    int64_t *samples [S_PINS_LAYOUTS];
    for (int which = 0; which < S_PINS_LAYOUTS; which++) {
        samples [which] = (int64_t *) calloc ((size_t) self->plan.latency_calls * 2, sizeof (int64_t));
        assert (samples [which]);
    }
    for (size_t payload = 0; payload < S_PAYLOADS && ready && !zsys_interrupted; payload++)
        //  A pass for each in-flight count, at the first of its figures
        for (size_t figure = 0; figure < S_PINS_FIGURES && ready; figure++)
            if (figure == 0 || s_pins_figures [figure - 1].inflight != s_pins_figures [figure].inflight)
                ready = s_pins_figure (self, part, samples, payload, s_pins_figures [figure].inflight) == 0;
    if (ready)
        self->pins_grant.listed_after = s_pins_grant_listed (part, self->pins_grant.id);
    for (int which = 0; which < S_PINS_LAYOUTS; which++) {
        free (samples [which]);
        s_target_destroy (&part->layouts [which].target);
        s_stop (&part->layouts [which].echo);
        s_stop (&part->layouts [which].server);
    }
    zsock_destroy (&part->approver);
    dsh_client_destroy (&part->control);
    s_dir_remove (part->dir);
    self->pins_seconds = (double) (zclock_mono () - started) / 1000.0;
}

//  ---------------------------------------------------------------------
//  Turns: the trace and limit parts' layouts measured as the pins part's,
//  in turns over rounds, at 64 B (issue 28)

//  Sets up part's rows, every figure not measured yet.
static void
s_turns_init (s_turns_t *part, const char *name, int layouts, const char *const *layout_names,
              const char *const *layout_keys, int comparisons, const s_versus_t *versus, int rounds)
{
    assert (layouts <= S_TURNS_LAYOUTS_MAX && comparisons <= S_TURNS_COMPARISONS_MAX);
    *part = (s_turns_t) { name, layouts, layout_names, layout_keys, comparisons, versus, rounds, { false }, { { 0 } },
                          0 };
    for (size_t figure = 0; figure < S_PINS_FIGURES; figure++) {
        part->rows [figure].figure = s_pins_figures [figure].figure;
        part->rows [figure].inflight = s_pins_figures [figure].inflight;
    }
}

static s_turns_row_t *
s_turns_row (s_turns_t *part, const char *figure)
{
    for (size_t index = 0; index < S_PINS_FIGURES; index++)
        if (streq (part->rows [index].figure, figure))
            return &part->rows [index];
    assert (false);
    return NULL;
}

//  A layout's figure of row over its reference's in comparison compared;
//  0 if either is missing.
static double
s_turns_compare (const s_turns_t *part, const s_turns_row_t *row, int compared)
{
    double layout = row->value [part->versus [compared].layout];
    double reference = row->value [part->versus [compared].reference];
    return layout > 0 && reference > 0? layout / reference: 0;
}

//  One turn on layout which: inflight calls of 64 B for a round's share of
//  the plan. Writes the turn's tally into turn and adds it to tally.
//  Returns 0, or -1 (and the run fails).
static int
s_turns_turn (s_bench_t *self, s_turns_t *part, s_layout_t *layout, int which, int inflight, s_pins_tally_t *tally,
              s_pins_tally_t *turn)
{
    s_target_t *target = layout->target;
    pid_t broker = dsh_testproc_pid (layout->server);
    int calls = (inflight == 1? self->plan.latency_calls: self->plan.throughput_calls) * 2 / part->rounds;
    int ms = (inflight == 1? self->plan.latency_ms: self->plan.throughput_ms) * 2 / part->rounds;
    uint64_t replies_before = target->replies;
    size_t first_sample = tally->sample_count;
    int64_t cpu_before = s_proc_cpu_usecs (broker);
    int64_t started = zclock_usecs ();
    double rate = s_run (target, 0, inflight, calls, ms, inflight == 1? tally->samples: NULL, &tally->sample_count);
    int64_t elapsed = zclock_usecs () - started;
    int64_t cpu_after = s_proc_cpu_usecs (broker);
    uint64_t done = target->replies - replies_before;
    *turn = (s_pins_tally_t) { tally->samples + first_sample, tally->sample_count - first_sample, done, elapsed,
                               cpu_after - cpu_before };
    if (rate <= 0 || done == 0 || (inflight == 1 && turn->sample_count == 0) || cpu_before < 0 || cpu_after < 0) {
        s_fail (self, "%s: run with %d in flight, 64 B failed (%s)", part->layout_names [which], inflight,
                target->last_error [0]? target->last_error: "no reply, or no CPU time");
        return -1;
    }
    tally->calls += done;
    tally->usecs += elapsed;
    tally->cpu_usecs += turn->cpu_usecs;
    return 0;
}

//  The figures with inflight calls in flight on every layout that runs:
//  the part's rounds, in each the layouts in turns, which goes first
//  rotating. Latency is the pooled rounds' p50/p99, calls/s all calls over
//  all their time, CPU per call all CPU time over all calls; each
//  comparison's range is over the rounds' own. Returns 0, or -1 (the run
//  fails).
static int
s_turns_figure (s_bench_t *self, s_turns_t *part, s_layout_t *layouts, int64_t **samples, int inflight)
{
    int order [S_TURNS_LAYOUTS_MAX], running = 0;
    for (int which = 0; which < part->layouts; which++)
        if (part->measured [which])
            order [running++] = which;
    s_pins_tally_t tallies [S_TURNS_LAYOUTS_MAX];
    for (int which = 0; which < part->layouts; which++)
        tallies [which] = (s_pins_tally_t) { samples [which], 0, 0, 0, 0 };
    for (int round = 0; round < part->rounds && !zsys_interrupted; round++) {
        s_pins_tally_t turns [S_TURNS_LAYOUTS_MAX];
        memset (turns, 0, sizeof (turns));
        for (int turn = 0; turn < running; turn++) {
            int which = order [(round + turn) % running];
            if (s_turns_turn (self, part, &layouts [which], which, inflight, &tallies [which], &turns [which]))
                return -1;
        }
        for (size_t figure = 0; figure < S_PINS_FIGURES; figure++) {
            s_turns_row_t *row = &part->rows [figure];
            if (row->inflight != inflight)
                continue;
            for (int compared = 0; compared < part->comparisons; compared++) {
                const s_versus_t *versus = &part->versus [compared];
                if (!part->measured [versus->layout] || !part->measured [versus->reference])
                    continue;
                double layout = s_pins_figure_of (&turns [versus->layout], row->figure);
                double reference = s_pins_figure_of (&turns [versus->reference], row->figure);
                //  A short turn may use less than a clock tick of CPU
                if (layout > 0 && reference > 0)
                    s_ratio_range (&row->ratio_low [compared], &row->ratio_high [compared], layout / reference);
            }
        }
    }
    for (size_t figure = 0; figure < S_PINS_FIGURES && !zsys_interrupted; figure++)
        if (part->rows [figure].inflight == inflight)
            for (int which = 0; which < part->layouts; which++)
                if (part->measured [which])
                    part->rows [figure].value [which] = s_pins_figure_of (&tallies [which], part->rows [figure].figure);
    return 0;
}

//  Warms up every layout that runs, then measures 64 in flight and one in
//  flight. Returns 0, or -1 (the run fails).
static int
s_turns_measure (s_bench_t *self, s_turns_t *part, s_layout_t *layouts)
{
    for (int which = 0; which < part->layouts; which++)
        if (part->measured [which])
            s_warm_up (self, layouts [which].target);
    int64_t *samples [S_TURNS_LAYOUTS_MAX];
    for (int which = 0; which < part->layouts; which++) {
        samples [which] = (int64_t *) calloc ((size_t) self->plan.latency_calls * 2, sizeof (int64_t));
        assert (samples [which]);
    }
    int rc = 0;
    for (size_t figure = 0; figure < S_PINS_FIGURES && rc == 0 && !zsys_interrupted; figure++)
        if (figure == 0 || s_pins_figures [figure - 1].inflight != s_pins_figures [figure].inflight)
            rc = s_turns_figure (self, part, layouts, samples, s_pins_figures [figure].inflight);
    for (int which = 0; which < part->layouts; which++)
        free (samples [which]);
    return rc;
}

//  Starts a dsh-demo on the broker at endpoint and a target calling it as
//  the bench's agent. Returns 0, or -1 (and the run fails).
static int
s_turns_echo_start (s_bench_t *self, s_turns_t *part, s_layout_t *layout, int which, const char *endpoint)
{
    char id [48];
    snprintf (id, sizeof (id), "bench-%s-demo-%d", part->name, which);
    layout->echo = dsh_testkit_component ("components/demo/dsh-demo", endpoint, id, NULL);
    if (!layout->echo || s_wait_providers (endpoint, 1, 10000)) {
        s_fail (self, "%s: did not start", part->layout_names [which]);
        return -1;
    }
    layout->target = s_target_new (S_DSH, endpoint);
    //  Calls from an agent, as an agent's are: the limit stage keys on it
    layout->target->agent = S_CURVE_AGENT;
    part->measured [which] = true;
    return 0;
}

static void
s_turns_stop (s_turns_t *part, s_layout_t *layouts)
{
    for (int which = 0; which < part->layouts; which++) {
        s_target_destroy (&layouts [which].target);
        s_stop (&layouts [which].echo);
        s_stop (&layouts [which].server);
    }
}

//  ---------------------------------------------------------------------
//  Trace: the broker's tracing off, and on at 1 % and 100 % sampled

//  An OTLP/HTTP receiver that accepts everything: every POST /v1/traces
//  is answered 200 with an empty ExportTraceServiceResponse (no bytes in
//  protobuf, {} in JSON), unread, only counted, so that the receiver
//  costs the machine as little as it can. Its thread is libmicrohttpd's.
typedef struct {
    struct MHD_Daemon *daemon;
    int port;
    atomic_uint_fast64_t requests;      //  POST /v1/traces answered
    atomic_uint_fast64_t bytes;         //  their bodies
    atomic_uint_fast64_t others;        //  anything else (404)
} s_sink_t;

//  What a request's connection state points at once its headers are read
static int s_sink_started;

static enum MHD_Result
s_sink_access (void *cls, struct MHD_Connection *connection, const char *url, const char *method,
               const char *version, const char *upload_data, size_t *upload_data_size, void **request)
{
    (void) version;
    (void) upload_data;
    s_sink_t *self = (s_sink_t *) cls;
    if (!*request) {
        *request = &s_sink_started;
        return MHD_YES;
    }
    if (*upload_data_size) {
        atomic_fetch_add (&self->bytes, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    bool traces = streq (method, "POST") && streq (url, "/v1/traces");
    const char *type = MHD_lookup_connection_value (connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    bool json = type && strncmp (type, "application/json", 16) == 0;
    struct MHD_Response *response = MHD_create_response_from_buffer (json? 2: 0, (void *) (json? "{}": ""),
                                                                     MHD_RESPMEM_PERSISTENT);
    if (!response)
        return MHD_NO;
    MHD_add_response_header (response, MHD_HTTP_HEADER_CONTENT_TYPE, json? "application/json": "application/x-protobuf");
    enum MHD_Result rc = MHD_queue_response (connection, traces? MHD_HTTP_OK: MHD_HTTP_NOT_FOUND, response);
    MHD_destroy_response (response);
    atomic_fetch_add (traces? &self->requests: &self->others, 1);
    return rc;
}

//  Starts a sink on a free loopback port. NULL if it cannot.
static s_sink_t *
s_sink_new (void)
{
    s_sink_t *self = (s_sink_t *) zmalloc (sizeof (s_sink_t));
    assert (self);
    struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = 0 };
    address.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    self->daemon = MHD_start_daemon (MHD_USE_AUTO_INTERNAL_THREAD, 0, NULL, NULL, s_sink_access, self,
                                     MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &address, MHD_OPTION_END);
    const union MHD_DaemonInfo *info = self->daemon? MHD_get_daemon_info (self->daemon, MHD_DAEMON_INFO_BIND_PORT):
                                                     NULL;
    self->port = info? info->port: 0;
    if (!self->port) {
        if (self->daemon)
            MHD_stop_daemon (self->daemon);
        free (self);
        return NULL;
    }
    return self;
}

static void
s_sink_destroy (s_sink_t **self_p)
{
    if (*self_p) {
        s_sink_t *self = *self_p;
        MHD_stop_daemon (self->daemon);
        free (self);
        *self_p = NULL;
    }
}

//  The standard variables that configure a process's tracing
static const char *s_otel_variables [] = {
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"
};
#define S_OTEL_VARIABLES (sizeof (s_otel_variables) / sizeof (s_otel_variables [0]))

//  Removes every OTEL_* variable from this process's environment, so that
//  no broker, component or client the bench starts traces unless the
//  trace part says so.
static void
s_otel_clear (void)
{
    extern char **environ;
    bool removed = true;
    while (removed) {
        removed = false;
        for (char **variable = environ; variable && *variable && !removed; variable++)
            if (strncmp (*variable, "OTEL_", 5) == 0) {
                char name [256];
                snprintf (name, sizeof (name), "%.*s", (int) strcspn (*variable, "="), *variable);
                unsetenv (name);
                removed = true;
            }
    }
}

//  The broker's tracing counters (STATS tracing or trace, as dsh_trace
//  keeps them), into export. counted false if STATS has none.
static void
s_trace_counts (dsh_client_t *client, s_trace_export_t *export)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_request (client, DSH_STATS, NULL, 5000, error, sizeof (error));
    const msgpack_object *body = reply? dsh_reply_body (reply): NULL;
    const msgpack_object *counters = body? dsh_map_get (body, "tracing"): NULL;
    if (!(counters && counters->type == MSGPACK_OBJECT_MAP))
        counters = body? dsh_map_get (body, "trace"): NULL;
    export->counted = counters && counters->type == MSGPACK_OBJECT_MAP
                   && (dsh_map_get (counters, "spansExported") || dsh_map_get (counters, "spansDropped"));
    if (export->counted) {
        export->spans_ended = s_uint_field (counters, "spansEnded");
        export->spans_exported = s_uint_field (counters, "spansExported");
        export->spans_dropped = s_uint_field (counters, "spansDropped");
        export->export_failures = s_uint_field (counters, "exportFailures");
    }
    dsh_reply_destroy (&reply);
}

//  Starts layout which: a broker with the audit off, traced to sink (NULL:
//  off) at 1 % or 100 % sampled, or the previous build's; a dsh-demo and
//  a target. Returns 0; -1 if it did not start (the run fails), 1 if it is
//  not measured (the previous build: none given).
static int
s_trace_layout_start (s_bench_t *self, s_layout_t *layout, int which, s_sink_t *sink)
{
    const char *flags [] = { "--audit", "off", NULL };
    char endpoint [256];
    if (sink) {
        char value [64];
        snprintf (value, sizeof (value), "http://127.0.0.1:%d", sink->port);
        setenv ("OTEL_EXPORTER_OTLP_ENDPOINT", value, 1);
        setenv ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", 1);
        setenv ("OTEL_TRACES_SAMPLER", which == S_TRACE_RATIO? "traceidratio": "always_on", 1);
        if (which == S_TRACE_RATIO)
            setenv ("OTEL_TRACES_SAMPLER_ARG", "0.01", 1);
    }
    if (which == S_TRACE_PREVIOUS) {
        //  The testkit starts broker/dsh-broker under $DSH_BUILD_DIR
        const char *previous = getenv ("DSH_BENCH_PREVIOUS_BUILD");
        char *program = previous && *previous? zsys_sprintf ("%s/broker/dsh-broker", previous): NULL;
        if (!program || access (program, X_OK)) {
            snprintf (self->trace_previous, sizeof (self->trace_previous), "not measured: %s",
                      program? "no broker/dsh-broker in $DSH_BENCH_PREVIOUS_BUILD":
                               "$DSH_BENCH_PREVIOUS_BUILD names no build directory");
            zstr_free (&program);
            return 1;
        }
        zstr_free (&program);
        char *build = strdup (getenv ("DSH_BUILD_DIR"));
        setenv ("DSH_BUILD_DIR", previous, 1);
        layout->server = dsh_testkit_broker (1000, flags, endpoint, sizeof (endpoint));
        setenv ("DSH_BUILD_DIR", build, 1);
        free (build);
        snprintf (self->trace_previous, sizeof (self->trace_previous), "%s", previous);
    }
    else
        layout->server = dsh_testkit_broker (1000, flags, endpoint, sizeof (endpoint));
    //  The broker's only: its component and the bench stay untraced
    for (size_t index = 0; index < S_OTEL_VARIABLES; index++)
        unsetenv (s_otel_variables [index]);
    if (!layout->server) {
        s_fail (self, "%s: the broker did not start", s_trace_layout_names [which]);
        return -1;
    }
    return s_turns_echo_start (self, &self->trace, layout, which, endpoint);
}

static void
s_bench_trace (s_bench_t *self)
{
    int64_t started = zclock_mono ();
    s_layout_t layouts [S_TRACE_LAYOUTS];
    memset (layouts, 0, sizeof (layouts));
    s_sink_t *sinks [S_TRACE_LAYOUTS] = { NULL };
    sinks [S_TRACE_RATIO] = s_sink_new ();
    sinks [S_TRACE_ALWAYS] = s_sink_new ();
    bool ready = sinks [S_TRACE_RATIO] && sinks [S_TRACE_ALWAYS];
    if (!ready)
        s_fail (self, "trace: the OTLP/HTTP sink did not start");
    //  All up at once, measured in turns, so load that drifts falls on all
    for (int which = 0; which < S_TRACE_LAYOUTS && ready; which++)
        ready = s_trace_layout_start (self, &layouts [which], which, sinks [which]) >= 0;
    if (ready)
        ready = s_turns_measure (self, &self->trace, layouts) == 0;
    for (int which = 0; which < S_TRACE_LAYOUTS; which++) {
        s_trace_export_t *export = &self->trace_export [which];
        if (layouts [which].target) {
            export->calls = layouts [which].target->replies;
            s_trace_counts (layouts [which].target->client, export);
        }
    }
    //  What was queued when the calls ended has until the broker's stop to
    //  go out (it flushes then); the sink's count is read after
    s_turns_stop (&self->trace, layouts);
    for (int which = 0; which < S_TRACE_LAYOUTS; which++)
        if (sinks [which]) {
            self->trace_export [which].requests = atomic_load (&sinks [which]->requests);
            self->trace_export [which].bytes = atomic_load (&sinks [which]->bytes);
            s_sink_destroy (&sinks [which]);
        }
    self->trace.seconds = (double) (zclock_mono () - started) / 1000.0;
}

//  ---------------------------------------------------------------------
//  Limit: a limit stage, and the main job's chain

//  True if rule (a limit stage's) applies to the bench's calls: its agent
//  and tool globs take the bench's agent and echo.
static bool
s_limit_rule_meets (zconfig_t *rule)
{
    const char *agent = zconfig_get (rule, "agent", "*");
    const char *tool = zconfig_get (rule, "tool", "*");
    return fnmatch (agent, S_CURVE_AGENT, 0) == 0 && fnmatch (tool, "echo", 0) == 0;
}

//  Raises every rule of the limit stages in chain that the bench's calls
//  meet, so that none refuses them; the rest stay as they are.
static void
s_limit_raise (zconfig_t *chain)
{
    for (zconfig_t *stage = zconfig_child (chain); stage; stage = zconfig_next (stage)) {
        if (!streq (zconfig_name (stage), "stage") || !streq (zconfig_get (stage, "kind", ""), "limit"))
            continue;
        for (zconfig_t *rule = zconfig_child (stage); rule; rule = zconfig_next (rule))
            if (streq (zconfig_name (rule), "rule") && s_limit_rule_meets (rule)) {
                if (zconfig_locate (rule, "rate") || zconfig_locate (rule, "burst")) {
                    zconfig_put (rule, "rate", S_LIMIT_RAISED);
                    zconfig_put (rule, "burst", S_LIMIT_RAISED);
                }
                if (zconfig_locate (rule, "in_flight"))
                    zconfig_put (rule, "in_flight", S_LIMIT_RAISED);
            }
    }
}

//  Copies source and everything under it, as the last child of parent.
static void
s_config_copy (zconfig_t *source, zconfig_t *parent)
{
    zconfig_t *copy = zconfig_new (zconfig_name (source), parent);
    if (zconfig_value (source))
        zconfig_set_value (copy, "%s", zconfig_value (source));
    for (zconfig_t *child = zconfig_child (source); child; child = zconfig_next (child))
        s_config_copy (child, copy);
}

//  Writes the part's configs into dir: pass.cfg, one pass stage;
//  limit.cfg, a chain of the main job's limit stage alone (or, if it has
//  none, one whose one rule is raised); and main.cfg, the main job's
//  chain, both raised. Returns 0, or -1 with a reason.
static int
s_limit_configs (s_bench_t *self, const char *dir, char *error, size_t error_size)
{
    char *text = dsh_testkit_main_config ();
    zconfig_t *main_config = text? zconfig_str_load (text): NULL;
    zstr_free (&text);
    zconfig_t *chain = main_config? zconfig_locate (main_config, "chain"): NULL;
    if (!chain) {
        snprintf (error, error_size, "no chain in deploy/dsh-broker.cfg (DSH_SOURCE_DIR: %s)",
                  getenv ("DSH_SOURCE_DIR")? getenv ("DSH_SOURCE_DIR"): "unset, the working directory");
        zconfig_destroy (&main_config);
        return -1;
    }
    s_limit_raise (chain);
    zconfig_t *stage = zconfig_child (chain);
    while (stage && !(streq (zconfig_name (stage), "stage") && streq (zconfig_get (stage, "kind", ""), "limit")))
        stage = zconfig_next (stage);
    zconfig_t *limit_root = zconfig_new ("root", NULL);
    zconfig_t *limit_chain = zconfig_new ("chain", limit_root);
    if (stage) {
        s_config_copy (stage, limit_chain);
        snprintf (self->limit_source, sizeof (self->limit_source),
                  "deploy/dsh-broker.cfg, each limit rule the bench's calls meet raised to " S_LIMIT_RAISED);
    }
    else {
        zconfig_t *own = zconfig_new ("stage", limit_chain);
        zconfig_put (own, "name", "limit");
        zconfig_put (own, "kind", "limit");
        zconfig_t *rule = zconfig_new ("rule", own);
        zconfig_put (rule, "rate", S_LIMIT_RAISED);
        zconfig_put (rule, "burst", S_LIMIT_RAISED);
        snprintf (self->limit_source, sizeof (self->limit_source),
                  "deploy/dsh-broker.cfg has no limit stage: the bench's own (one rule, rate " S_LIMIT_RAISED ")"
                  ", and the main job's chain");
    }
    zconfig_t *main_root = zconfig_new ("root", NULL);
    s_config_copy (chain, main_root);
    zconfig_t *pass_root = zconfig_new ("root", NULL);
    zconfig_t *pass_stage = zconfig_new ("stage", zconfig_new ("chain", pass_root));
    zconfig_put (pass_stage, "name", "pass");
    zconfig_put (pass_stage, "kind", "pass");
    char pass_path [96], limit_path [96], main_path [96];
    snprintf (pass_path, sizeof (pass_path), "%.63s/pass.cfg", dir);
    snprintf (limit_path, sizeof (limit_path), "%.63s/limit.cfg", dir);
    snprintf (main_path, sizeof (main_path), "%.63s/main.cfg", dir);
    int rc = zconfig_save (pass_root, pass_path) || zconfig_save (limit_root, limit_path)
          || zconfig_save (main_root, main_path)? -1: 0;
    if (rc)
        snprintf (error, error_size, "cannot write its configs in %s", dir);
    zconfig_destroy (&pass_root);
    zconfig_destroy (&limit_root);
    zconfig_destroy (&main_root);
    zconfig_destroy (&main_config);
    return rc;
}

static void
s_bench_limit (s_bench_t *self)
{
    int64_t started = zclock_mono ();
    char dir [64] = "/tmp/dsh-bench-limit-XXXXXX";
    if (!mkdtemp (dir)) {
        s_fail (self, "limit: cannot make a directory for its configs: %s", strerror (errno));
        return;
    }
    char error [512];
    bool ready = s_limit_configs (self, dir, error, sizeof (error)) == 0;
    if (!ready)
        s_fail (self, "limit: %s", error);
    s_layout_t layouts [S_LIMIT_LAYOUTS];
    memset (layouts, 0, sizeof (layouts));
    //  All up at once, measured in turns, so load that drifts falls on all
    for (int which = 0; which < S_LIMIT_LAYOUTS && ready; which++) {
        char config [96];
        snprintf (config, sizeof (config), "%.63s/%s", dir,
                  which == S_LIMIT_PASS? "pass.cfg": which == S_LIMIT_STAGE? "limit.cfg": "main.cfg");
        const char *chain_flags [] = { "--audit", "off", "-c", config, NULL };
        const char *empty_flags [] = { "--audit", "off", NULL };
        char endpoint [256];
        layouts [which].server = dsh_testkit_broker (1000, which == S_LIMIT_NONE? empty_flags: chain_flags, endpoint,
                                                     sizeof (endpoint));
        if (!layouts [which].server) {
            s_fail (self, "%s: the broker did not start", s_limit_layout_names [which]);
            ready = false;
        }
        else
            ready = s_turns_echo_start (self, &self->limit, &layouts [which], which, endpoint) == 0;
    }
    if (ready)
        s_turns_measure (self, &self->limit, layouts);
    s_turns_stop (&self->limit, layouts);
    s_dir_remove (dir);
    self->limit.seconds = (double) (zclock_mono () - started) / 1000.0;
}

//  ---------------------------------------------------------------------
//  Swarm: components, watchers, churn and calls at once (issue 24)

//  The processes of one setting, and what they measured.
typedef struct {
    const s_swarm_setting_t *setting;
    const s_swarm_plan_t *plan;
    dsh_testproc_t *brokers [S_SWARM_BROKERS_MAX];
    char fronts [S_SWARM_BROKERS_MAX][128];
    char logs [S_SWARM_BROKERS_MAX][64];    //  each broker's stderr, its log
    char front_list [S_SWARM_BROKERS_MAX * 130];
    dsh_testproc_t *swarm;
    dsh_testproc_t *demo;
    dsh_testproc_t *watchers;
    json_t *figures;            //  flat: name -> number (or bool)
    json_t *findings;           //  what looks like a broker defect, in words
} s_swarm_run_t;

//  Sleeps ms, or less if the run is interrupted.
static void
s_swarm_sleep (int ms)
{
    int64_t until = zclock_mono () + ms;
    while (!zsys_interrupted && zclock_mono () < until)
        zclock_sleep (until - zclock_mono () < 100? (int) (until - zclock_mono ()): 100);
}

//  The CPU time all the brokers have used, in microseconds, or -1.
static int64_t
s_swarm_cpu (s_swarm_run_t *run)
{
    int64_t total = 0;
    for (int index = 0; index < run->setting->brokers; index++) {
        int64_t used = s_proc_cpu_usecs (dsh_testproc_pid (run->brokers [index]));
        if (used < 0)
            return -1;
        total += used;
    }
    return total;
}

//  A /proc/PID/status field of the largest broker, in KiB.
static long
s_swarm_kib (s_swarm_run_t *run, const char *field)
{
    long largest = -1;
    for (int index = 0; index < run->setting->brokers; index++) {
        long value = s_proc_status_kib (dsh_testproc_pid (run->brokers [index]), field);
        if (value > largest)
            largest = value;
    }
    return largest;
}

static void
s_swarm_set (s_swarm_run_t *run, const char *key, double value)
{
    json_object_set_new (run->figures, key, json_real (value));
}

//  The CPU time of each thread of a process, to tell the registry's thread
//  (one, whatever the machine) from libzmq's I/O threads (one per core).
#define S_THREADS_MAX   64
typedef struct {
    size_t count;
    pid_t tid [S_THREADS_MAX];
    bool io [S_THREADS_MAX];            //  a libzmq I/O thread ("ZMQbg/IO/N")
    int64_t usecs [S_THREADS_MAX];
} s_threads_t;

static void
s_threads_read (pid_t pid, s_threads_t *threads)
{
    threads->count = 0;
    char path [64];
    snprintf (path, sizeof (path), "/proc/%d/task", (int) pid);
    DIR *dir = opendir (path);
    struct dirent *entry;
    while (dir && (entry = readdir (dir)) && threads->count < S_THREADS_MAX) {
        if (entry->d_name [0] == '.')
            continue;
        char stat_path [128], line [1024];
        snprintf (stat_path, sizeof (stat_path), "%s/%.32s/stat", path, entry->d_name);
        FILE *file = fopen (stat_path, "r");
        bool got_line = file && fgets (line, sizeof (line), file);
        if (file)
            fclose (file);
        //  TID (COMM) STATE ... utime stime, COMM ending at the last ')'
        const char *name = got_line? strchr (line, '('): NULL;
        const char *end = got_line? strrchr (line, ')'): NULL;
        unsigned long user, system;
        if (!name || !end || sscanf (end + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &user,
                                     &system) != 2)
            continue;
        size_t index = threads->count++;
        threads->tid [index] = (pid_t) atoi (entry->d_name);
        threads->io [index] = strncmp (name + 1, "ZMQbg/IO/", 9) == 0;
        threads->usecs [index] = (int64_t) (user + system) * 1000000 / sysconf (_SC_CLK_TCK);
    }
    if (dir)
        closedir (dir);
}

//  Records where the first broker's CPU time went between two readings,
//  as prefix_busiest_thread_pct (the busiest thread not libzmq's: the
//  registry's) and prefix_io_threads_pct (all libzmq I/O threads), in %
//  of a core over seconds.
static void
s_threads_figures (s_swarm_run_t *run, const s_threads_t *before, const s_threads_t *after, double seconds,
                   const char *prefix)
{
    int64_t busiest = 0, io = 0;
    for (size_t index = 0; index < after->count; index++) {
        int64_t used = after->usecs [index];
        for (size_t old = 0; old < before->count; old++)
            if (before->tid [old] == after->tid [index])
                used -= before->usecs [old];
        if (after->io [index])
            io += used;
        else
        if (used > busiest)
            busiest = used;
    }
    char key [64];
    snprintf (key, sizeof (key), "%s_busiest_thread_pct", prefix);
    s_swarm_set (run, key, (double) busiest / seconds / 1e4);
    snprintf (key, sizeof (key), "%s_io_threads_pct", prefix);
    s_swarm_set (run, key, (double) io / seconds / 1e4);
}

static void
s_swarm_finding (s_swarm_run_t *run, const char *format, ...) __attribute__ ((format (printf, 2, 3)));

static void
s_swarm_finding (s_swarm_run_t *run, const char *format, ...)
{
    char text [256];
    va_list args;
    va_start (args, format);
    vsnprintf (text, sizeof (text), format, args);
    va_end (args);
    json_array_append_new (run->findings, json_string (text));
}

//  Starts the brokers, each with its log in a file of its own, and the
//  flags of $DSH_BENCH_SWARM_BROKER (e.g. "--events-queue-bytes 268435456")
//  for trying a change by hand. Returns 0 or -1.
static int
s_swarm_brokers_start (s_swarm_run_t *run)
{
    char *flags = getenv ("DSH_BENCH_SWARM_BROKER")? strdup (getenv ("DSH_BENCH_SWARM_BROKER")): NULL;
    const char *extra [16] = { NULL };
    size_t count = 0;
    char *cursor = flags, *word;
    while (cursor && count < 15 && (word = strsep (&cursor, " ")))
        if (*word)
            extra [count++] = word;
    int rc = 0;
    for (int index = 0; index < run->setting->brokers && rc == 0; index++) {
        snprintf (run->logs [index], sizeof (run->logs [index]), "/tmp/dsh-bench-swarm-XXXXXX");
        int fd = mkstemp (run->logs [index]);
        if (fd < 0)
            run->logs [index][0] = 0;
        run->brokers [index] = fd >= 0? dsh_testkit_broker_stderr (1000, extra, fd, run->fronts [index],
                                                                   sizeof (run->fronts [index])): NULL;
        if (fd >= 0)
            close (fd);
        if (!run->brokers [index])
            rc = -1;
        size_t used = strlen (run->front_list);
        snprintf (run->front_list + used, sizeof (run->front_list) - used, "%s%s", index? ",": "",
                  run->fronts [index]);
    }
    free (flags);
    return rc;
}

//  How many "component X expired" lines the broker's log has, counting
//  the lines its limiter suppressed ("(N similar messages suppressed)").
static long
s_swarm_log_expired (const char *path)
{
    FILE *file = path [0]? fopen (path, "r"): NULL;
    if (!file)
        return -1;
    long count = 0;
    char line [1024];
    while (fgets (line, sizeof (line), file)) {
        if (!strstr (line, "dsh-broker: component ") || !strstr (line, " expired"))
            continue;
        const char *similar = strrchr (line, '(');
        unsigned long suppressed;
        if (similar && sscanf (similar, "(%lu similar messages suppressed)", &suppressed) == 1)
            count += (long) suppressed;
        else
            count++;
    }
    fclose (file);
    return count;
}

//  Waits until every broker has the swarm's tools and components. Returns
//  0, or -1 after timeout_ms.
static int
s_swarm_wait_joined (s_swarm_run_t *run, int timeout_ms)
{
    uint64_t tools = (uint64_t) run->setting->components * (uint64_t) run->setting->tools;
    int64_t give_up = zclock_mono () + timeout_ms;
    for (int index = 0; index < run->setting->brokers; index++) {
        dsh_client_t *client = dsh_client_new (run->fronts [index]);
        bool joined = false;
        while (!joined && !zsys_interrupted && zclock_mono () < give_up) {
            char error [256];
            dsh_reply_t *pong = dsh_client_request (client, DSH_PING, NULL, 2000, error, sizeof (error));
            const msgpack_object *body = pong? dsh_reply_body (pong): NULL;
            joined = s_uint_field (body, "tools") >= tools
                  && s_uint_field (body, "components") >= (uint64_t) run->setting->components;
            dsh_reply_destroy (&pong);
            if (!joined)
                zclock_sleep (20);
        }
        dsh_client_destroy (&client);
        if (!joined)
            return -1;
    }
    return 0;
}

//  Starts 64 calls in flight on the first broker's echo for seconds.
static dsh_testproc_t *
s_swarm_drive_start (s_swarm_run_t *run, int seconds)
{
    char text [16];
    snprintf (text, sizeof (text), "%d", seconds);
    const char *argv [] = { "tests/bench/dsh-bench", "--drive", run->fronts [0], "--inflight", "64", "--seconds",
                            text, NULL };
    return dsh_testproc_start (argv);
}

//  Waits for a drive to end and records its figures as prefix_calls_per_s
//  (every reply, errors too, over the drive's time), prefix_p50_ms and
//  prefix_p99_ms, prefix_broker_gone, prefix_errors and prefix_stalled.
//  Returns the replies it had, 0 if it printed nothing.
static uint64_t
s_swarm_drive_finish (s_swarm_run_t *run, dsh_testproc_t **drive_p, int seconds, const char *prefix)
{
    const char *output = *drive_p? dsh_testproc_output (*drive_p, (seconds + 60) * 1000): "";
    uint64_t replies = 0, broker_gone = 0, errors = 0;
    double elapsed = 0;
    long p50 = 0, p99 = 0;
    //  drive: N replies in S s, G BROKER_GONE, E other errors, [not ]stalled
    const char *line = strstr (output, " replies in ");
    while (line && line > output && line [-1] != '\n')
        line--;
    bool parsed = line && sscanf (line, "drive: %" SCNu64 " replies in %lf s, %" SCNu64 " BROKER_GONE, %" SCNu64,
                                  &replies, &elapsed, &broker_gone, &errors) == 4;
    const char *latency = strstr (output, "drive: latency p50 ");
    if (latency)
        sscanf (latency, "drive: latency p50 %ld us, p99 %ld us", &p50, &p99);
    dsh_testproc_wait (*drive_p, 5000);
    dsh_testproc_destroy (drive_p);
    if (!parsed)
        return 0;
    char key [64];
    snprintf (key, sizeof (key), "%s_calls_per_s", prefix);
    s_swarm_set (run, key, elapsed > 0? (double) replies / elapsed: 0);
    snprintf (key, sizeof (key), "%s_p50_ms", prefix);
    s_swarm_set (run, key, (double) p50 / 1000.0);
    snprintf (key, sizeof (key), "%s_p99_ms", prefix);
    s_swarm_set (run, key, (double) p99 / 1000.0);
    snprintf (key, sizeof (key), "%s_broker_gone", prefix);
    s_swarm_set (run, key, (double) broker_gone);
    snprintf (key, sizeof (key), "%s_errors", prefix);
    s_swarm_set (run, key, (double) errors);
    snprintf (key, sizeof (key), "%s_stalled", prefix);
    json_object_set_new (run->figures, key, json_boolean (strstr (line, ", stalled") != NULL));
    if (broker_gone)
        s_swarm_finding (run, "%" PRIu64 " calls got BROKER_GONE (%s)", broker_gone, prefix);
    if (strstr (line, ", stalled"))
        s_swarm_finding (run, "calls stalled: a reply took over %d s (%s)", S_REPLY_WAIT_MS / 1000, prefix);
    return replies;
}

//  The calls run of a window without churn: 64 in flight for the plan's
//  seconds, and the brokers' CPU per call above idle_us_per_s (their CPU
//  time a second without calls; 0: not known yet).
static uint64_t
s_swarm_calls (s_swarm_run_t *run, const char *prefix, double idle_us_per_s)
{
    int64_t cpu_before = s_swarm_cpu (run), started = zclock_usecs ();
    dsh_testproc_t *drive = s_swarm_drive_start (run, run->plan->drive_s);
    uint64_t replies = s_swarm_drive_finish (run, &drive, run->plan->drive_s, prefix);
    int64_t cpu = s_swarm_cpu (run) - cpu_before, elapsed = zclock_usecs () - started;
    char key [64];
    snprintf (key, sizeof (key), "%s_broker_cpu_us_per_call", prefix);
    if (replies && cpu_before >= 0)
        s_swarm_set (run, key, ((double) cpu - idle_us_per_s * (double) elapsed / 1e6) / (double) replies);
    return replies;
}

//  A quiet window of the plan's length, after a second to settle: records
//  prefix_broker_cpu_pct, prefix_us_per_connection_s (over connections),
//  prefix_seconds and, once the watchers run, prefix_watchers_cpu_pct and
//  prefix_swarm_cpu_pct. Returns the brokers' CPU time a second, in
//  microseconds (0 if it cannot be read).
static double
s_swarm_quiet (s_swarm_run_t *run, const char *prefix, double connections)
{
    s_swarm_sleep (1000);
    int64_t cpu_before = s_swarm_cpu (run), started = zclock_usecs ();
    int64_t watchers_before = run->watchers? s_proc_cpu_usecs (dsh_testproc_pid (run->watchers)): -1;
    int64_t swarm_before = s_proc_cpu_usecs (dsh_testproc_pid (run->swarm));
    s_threads_t threads_before, threads_after;
    s_threads_read (dsh_testproc_pid (run->brokers [0]), &threads_before);
    s_swarm_sleep (run->plan->idle_s * 1000);
    int64_t cpu = s_swarm_cpu (run) - cpu_before;
    double quiet = (double) (zclock_usecs () - started) / 1e6;
    s_threads_read (dsh_testproc_pid (run->brokers [0]), &threads_after);
    s_threads_figures (run, &threads_before, &threads_after, quiet, prefix);
    double us_per_s = cpu_before >= 0? (double) cpu / quiet: 0;
    char key [64];
    if (watchers_before >= 0) {
        snprintf (key, sizeof (key), "%s_watchers_cpu_pct", prefix);
        s_swarm_set (run, key, (double) (s_proc_cpu_usecs (dsh_testproc_pid (run->watchers)) - watchers_before)
                               / quiet / 1e4);
    }
    snprintf (key, sizeof (key), "%s_swarm_cpu_pct", prefix);
    s_swarm_set (run, key, (double) (s_proc_cpu_usecs (dsh_testproc_pid (run->swarm)) - swarm_before) / quiet / 1e4);
    snprintf (key, sizeof (key), "%s_seconds", prefix);
    s_swarm_set (run, key, quiet);
    snprintf (key, sizeof (key), "%s_broker_cpu_pct", prefix);
    s_swarm_set (run, key, us_per_s / 1e4);
    snprintf (key, sizeof (key), "%s_us_per_connection_s", prefix);
    s_swarm_set (run, key, us_per_s / connections);
    return us_per_s;
}

//  Asks the watchers for their report and keeps it; NULL if none came.
static json_t *
s_swarm_watch_report (s_swarm_run_t *run)
{
    dsh_testproc_signal (run->watchers, SIGUSR1);
    //  The report waits up to 10 s for every view to catch up
    char *line = dsh_testproc_wait_line (run->watchers, "{\"watchers\"", 60000);
    json_t *report = line? json_loads (line, 0, NULL): NULL;
    free (line);
    return report;
}

//  The watchers' figures of interest, and what looks wrong in them.
static void
s_swarm_watch_figures (s_swarm_run_t *run, json_t *report)
{
    const char *keys [] = { "published", "delivered", "gaps", "watchers_with_gaps", "resyncs", "watchers_resynced",
                            "restarts", "silences", "reconnects", "snapshots", "snapshot_resends", "snapshot_overloaded", "snapshot_p50_ms",
                            "snapshot_p99_ms", "snapshot_max_ms", "spread_p50_ms", "spread_p99_ms", "expired" };
    bool snapshots = json_integer_value (json_object_get (report, "snapshots")) > 0;
    bool spreads = json_integer_value (json_object_get (report, "spread_events")) > 0;
    for (size_t index = 0; index < sizeof (keys) / sizeof (keys [0]); index++) {
        json_t *value = json_object_get (report, keys [index]);
        //  A percentile of no samples is not a figure
        if ((!snapshots && strncmp (keys [index], "snapshot_p", 10) == 0)
        ||  (!snapshots && streq (keys [index], "snapshot_max_ms"))
        ||  (!spreads && strncmp (keys [index], "spread_", 7) == 0))
            continue;
        if (json_is_number (value))
            s_swarm_set (run, keys [index], json_number_value (value));
    }
    json_t *view = json_object_get (report, "view");
    long checked = (long) json_integer_value (json_object_get (view, "checked"));
    long matched = (long) json_integer_value (json_object_get (view, "matched"));
    s_swarm_set (run, "view_checked", (double) checked);
    s_swarm_set (run, "view_matched", (double) matched);
    json_object_set_new (run->figures, "watchers_report", json_incref (report));
    if (matched < checked)
        s_swarm_finding (run, "%ld of %ld watchers did not end with the broker's view (%lld unsynced, %lld behind,"
                         " %lld wrong)%s", checked - matched, checked,
                         (long long) json_integer_value (json_object_get (view, "unsynced")),
                         (long long) json_integer_value (json_object_get (view, "behind")),
                         (long long) json_integer_value (json_object_get (view, "wrong")),
                         json_is_true (json_object_get (view, "settled"))? "": " after 10 s");
    if (json_integer_value (json_object_get (report, "expired")))
        s_swarm_finding (run, "%lld live components expired (component.left \"expired\")",
                         (long long) json_integer_value (json_object_get (report, "expired")));
    if (json_integer_value (json_object_get (report, "restarts")) || json_integer_value (json_object_get (report, "silences")))
        s_swarm_finding (run, "watchers started again: %lld silences (no PONG for 3 s), %lld restarts",
                         (long long) json_integer_value (json_object_get (report, "silences")),
                         (long long) json_integer_value (json_object_get (report, "restarts")));
    if (json_integer_value (json_object_get (report, "gaps")))
        s_swarm_finding (run, "%lld seq gaps (events dropped for watchers), %lld re-syncs",
                         (long long) json_integer_value (json_object_get (report, "gaps")),
                         (long long) json_integer_value (json_object_get (report, "resyncs")));
}

//  The sum of the brokers' latest seq (PONG), or -1.
static int64_t
s_swarm_seq (s_swarm_run_t *run)
{
    int64_t total = 0;
    for (int index = 0; index < run->setting->brokers && total >= 0; index++) {
        dsh_client_t *client = dsh_client_new (run->fronts [index]);
        char error [256];
        dsh_reply_t *pong = dsh_client_request (client, DSH_PING, NULL, 10000, error, sizeof (error));
        const msgpack_object *seq = pong? dsh_map_get (dsh_reply_body (pong), "seq"): NULL;
        if (seq && seq->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            total += (int64_t) seq->via.u64;
        else
            total = -1;
        dsh_reply_destroy (&pong);
        dsh_client_destroy (&client);
    }
    return total;
}

//  Churns the plan's cycles (SIGUSR1, then SIGUSR2 once the last has
//  begun), waits until the swarm has paused and the cycles' periods are
//  over. Returns the seconds it took.
static double
s_swarm_churn_cycles (s_swarm_run_t *run)
{
    int64_t started = zclock_usecs ();
    int64_t periods_end = zclock_mono () + (int64_t) run->plan->cycles * run->setting->churn_every_s * 1000;
    dsh_testproc_signal (run->swarm, SIGUSR1);
    s_swarm_sleep ((run->plan->cycles - 1) * run->setting->churn_every_s * 1000 + 500);
    dsh_testproc_signal (run->swarm, SIGUSR2);
    char *paused = dsh_testproc_wait_line (run->swarm, "churn: paused", (run->setting->churn_every_s + 120) * 1000);
    if (!paused)
        s_swarm_finding (run, "the swarm did not pause its churn");
    free (paused);
    //  The last cycle's events are published a moment after it is done
    if (zclock_mono () < periods_end)
        s_swarm_sleep ((int) (periods_end - zclock_mono ()));
    return (double) (zclock_usecs () - started) / 1e6;
}

//  Churn, twice: first alone, for the brokers' CPU per event above idle
//  (idle_us_per_s: their CPU time a second when quiet) over the events
//  they published; then with calls at 64 in flight beside it. The
//  watchers count both.
static void
s_swarm_churn (s_swarm_run_t *run, double idle_us_per_s)
{
    int64_t cpu_before = s_swarm_cpu (run), seq_before = s_swarm_seq (run);
    int64_t watchers_before = s_proc_cpu_usecs (dsh_testproc_pid (run->watchers));
    int64_t swarm_before = s_proc_cpu_usecs (dsh_testproc_pid (run->swarm));
    s_threads_t threads_before, threads_after;
    s_threads_read (dsh_testproc_pid (run->brokers [0]), &threads_before);
    double elapsed = s_swarm_churn_cycles (run);
    int64_t cpu = s_swarm_cpu (run) - cpu_before, seq_after = s_swarm_seq (run);
    s_threads_read (dsh_testproc_pid (run->brokers [0]), &threads_after);
    s_threads_figures (run, &threads_before, &threads_after, elapsed, "churn");
    //  The watchers are one thread: at 100 % of a core, the fan-out spread
    //  is theirs, not the broker's
    s_swarm_set (run, "churn_watchers_cpu_pct",
                 (double) (s_proc_cpu_usecs (dsh_testproc_pid (run->watchers)) - watchers_before) / elapsed / 1e4);
    s_swarm_set (run, "churn_swarm_cpu_pct",
                 (double) (s_proc_cpu_usecs (dsh_testproc_pid (run->swarm)) - swarm_before) / elapsed / 1e4);
    double published = seq_before >= 0 && seq_after >= 0? (double) (seq_after - seq_before): 0;
    s_swarm_set (run, "churn_seconds", elapsed);
    s_swarm_set (run, "churn_events", published);
    s_swarm_set (run, "churn_events_per_s", published / elapsed);
    if (cpu_before >= 0) {
        s_swarm_set (run, "churn_broker_cpu_pct", (double) cpu / elapsed / 1e4);
        //  Below the clock tick (10 ms) of CPU time there is no figure
        double above_idle = (double) cpu - idle_us_per_s * elapsed;
        if (published > 0 && above_idle > 0)
            s_swarm_set (run, "churn_us_per_event", above_idle / published);
    }
    int seconds = run->plan->cycles * run->setting->churn_every_s;
    dsh_testproc_t *drive = s_swarm_drive_start (run, seconds);
    s_swarm_churn_cycles (run);
    s_swarm_drive_finish (run, &drive, seconds, "churn");
}

//  Runs one setting: brokers, the swarm's join, calls alone, the watchers'
//  join, a quiet window, calls beside idle watchers, churn with calls, the
//  watchers' report; then stops everything. Returns its figures.
static json_t *
s_swarm_setting (s_bench_t *self, const s_swarm_setting_t *setting)
{
    s_swarm_run_t run_object, *run = &run_object;
    memset (run, 0, sizeof (*run));
    run->setting = setting;
    run->plan = &self->swarm_plan;
    run->findings = json_array ();
    run->figures = json_pack ("{s:i, s:i, s:i, s:i, s:i, s:i}", "components", setting->components, "tools",
                              setting->tools, "watchers", setting->watchers, "churn_percent", setting->churn_percent,
                              "churn_every_s", setting->churn_every_s, "brokers", setting->brokers);
    char label [96];
    snprintf (label, sizeof (label), "swarm %dx%d, %d watchers, churn %d %%/%d s, %d broker(s)", setting->components,
              setting->tools, setting->watchers, setting->churn_percent, setting->churn_every_s, setting->brokers);
    fprintf (stderr, "dsh-bench: %s\n", label);
    json_t *report = NULL;
    if (s_swarm_brokers_start (run)) {
        s_fail (self, "%s: a broker did not start", label);
        goto done;
    }
    //  The join: from the swarm's start until every broker has it all
    char components [16], tools [16], percent [16], every [16], watchers [16];
    snprintf (components, sizeof (components), "%d", setting->components);
    snprintf (tools, sizeof (tools), "%d", setting->tools);
    snprintf (percent, sizeof (percent), "%d", setting->churn_percent);
    snprintf (every, sizeof (every), "%d", setting->churn_every_s);
    snprintf (watchers, sizeof (watchers), "%d", setting->watchers);
    const char *swarm_argv [] = { "tests/bench/dsh-bench-swarm", run->front_list, components, tools, "--churn", percent,
                                  "--every", every, "--paused", NULL };
    int64_t started = zclock_usecs ();
    run->swarm = dsh_testproc_start (swarm_argv);
    char *line = run->swarm? dsh_testproc_wait_line (run->swarm, "swarm:", 300000): NULL;
    const char *added = line? strstr (line, "added in "): NULL;
    if (added)
        s_swarm_set (run, "swarm_setup_ms", strtod (added + strlen ("added in "), NULL));
    free (line);
    if (!added || s_swarm_wait_joined (run, 120000)) {
        s_fail (self, "%s: the swarm never joined", label);
        goto done;
    }
    s_swarm_set (run, "join_ms", (double) (zclock_usecs () - started) / 1000.0);
    s_swarm_set (run, "broker_rss_joined_kib", (double) s_swarm_kib (run, "VmRSS"));
    s_swarm_set (run, "broker_hwm_joined_kib", (double) s_swarm_kib (run, "VmHWM"));
    run->demo = dsh_testkit_component ("components/demo/dsh-demo", run->front_list, "bench-swarm-demo", NULL);
    if (!run->demo || s_wait_providers (run->fronts [0], 1, 20000)) {
        s_fail (self, "%s: dsh-demo did not start", label);
        goto done;
    }
    //  Quiet with no watcher yet (the join's last heartbeats and
    //  announcements settle), then calls
    double alone_us_per_s = s_swarm_quiet (run, "alone_idle", (double) setting->brokers * (setting->components + 1));
    if (!s_swarm_calls (run, "alone", alone_us_per_s))
        s_fail (self, "%s: the calls without watchers had no figures", label);

    //  The watchers join (the program also keeps a PING/SNAPSHOT DEALER and
    //  a component.left SUB per broker: two connections more each)
    const char *watchers_argv [] = { "tests/bench/dsh-bench-watchers", run->front_list, watchers, NULL };
    int null_fd = open ("/dev/null", O_RDONLY);
    run->watchers = dsh_testproc_start_input (watchers_argv, null_fd);
    if (null_fd >= 0)
        close (null_fd);
    line = run->watchers? dsh_testproc_wait_line (run->watchers, "watchers:", 240000): NULL;
    unsigned long synced = 0, total = 0;
    double sync_ms = 0, sync_p50 = 0, sync_p99 = 0;
    if (!line || sscanf (strstr (line, "watchers:"), "watchers: %lu of %lu synced in %lf ms, first SNAPSHOT p50 %lf ms "
                         "p99 %lf ms", &synced, &total, &sync_ms, &sync_p50, &sync_p99) != 5) {
        s_fail (self, "%s: the watchers did not start", label);
        free (line);
        goto done;
    }
    free (line);
    if (setting->watchers) {
        s_swarm_set (run, "sync_ms", sync_ms);
        s_swarm_set (run, "sync_synced", (double) synced);
        s_swarm_set (run, "sync_snapshot_p50_ms", sync_p50);
        s_swarm_set (run, "sync_snapshot_p99_ms", sync_p99);
    }
    if (synced < total)
        s_swarm_finding (run, "only %lu of %lu watchers had a view within 120 s", synced, total);

    //  Quiet: idle CPU, memory and open files with everything connected
    double connections = (double) setting->brokers * (setting->components + 1 + 2) + setting->watchers;
    s_swarm_set (run, "connections", connections);
    dsh_testproc_signal (run->watchers, SIGUSR2);
    double idle_us_per_s = s_swarm_quiet (run, "idle", connections);
    s_swarm_set (run, "broker_rss_idle_kib", (double) s_swarm_kib (run, "VmRSS"));
    s_swarm_set (run, "fds_broker", (double) dsh_bench_fds_open (dsh_testproc_pid (run->brokers [0])));
    s_swarm_set (run, "fds_swarm", (double) dsh_bench_fds_open (dsh_testproc_pid (run->swarm)));
    s_swarm_set (run, "fds_watchers", (double) dsh_bench_fds_open (dsh_testproc_pid (run->watchers)));

    //  Calls beside idle watchers, and their ratio to the calls alone
    if (!s_swarm_calls (run, "watched", idle_us_per_s))
        s_fail (self, "%s: the calls beside the watchers had no figures", label);
    double alone = json_number_value (json_object_get (run->figures, "alone_calls_per_s"));
    double watched = json_number_value (json_object_get (run->figures, "watched_calls_per_s"));
    if (alone > 0 && watched > 0)
        s_swarm_set (run, "calls_ratio", watched / alone);

    if (setting->churn_percent > 0)
        s_swarm_churn (run, idle_us_per_s);
    report = s_swarm_watch_report (run);
    if (report)
        s_swarm_watch_figures (run, report);
    else
        s_fail (self, "%s: the watchers gave no report", label);
    s_swarm_set (run, "broker_rss_end_kib", (double) s_swarm_kib (run, "VmRSS"));
    s_swarm_set (run, "broker_hwm_kib", (double) s_swarm_kib (run, "VmHWM"));

done:
    json_decref (report);
    s_stop (&run->watchers);
    s_stop (&run->demo);
    //  A thousand providers take a while to withdraw one by one; nothing
    //  is measured any more
    dsh_testproc_destroy (&run->swarm);
    long expired_logged = 0;
    for (int index = 0; index < setting->brokers; index++) {
        s_stop (&run->brokers [index]);
        long expired = s_swarm_log_expired (run->logs [index]);
        if (expired > 0)
            expired_logged += expired;
        if (run->logs [index][0])
            unlink (run->logs [index]);
    }
    //  The log counts the whole run, the swarm's join and the calls too
    s_swarm_set (run, "expired_logged", (double) expired_logged);
    if (expired_logged)
        s_swarm_finding (run, "the broker log has %ld components expired", expired_logged);
    json_object_set_new (run->figures, "findings", run->findings);
    return run->figures;
}

//  Parses --settings: a comma list of COMPONENTSxTOOLS:WATCHERS, each
//  optionally followed by :PERCENT/SECONDS (churn) and :BROKERS, e.g.
//  100x100:1000:10/10:2. Returns 0, or -1 if one is malformed.
static int
s_swarm_parse (const char *text, s_swarm_setting_t *settings, size_t *count)
{
    char *list = strdup (text), *cursor = list, *item;
    int rc = 0;
    *count = 0;
    while (rc == 0 && (item = strsep (&cursor, ","))) {
        s_swarm_setting_t setting = { 0, 0, 0, 0, 10, 1 };
        int used = 0, more = 0;
        rc = sscanf (item, "%dx%d:%d%n", &setting.components, &setting.tools, &setting.watchers, &used) == 3? 0: -1;
        if (rc == 0 && item [used] == ':' && strchr (item + used + 1, '/')) {
            rc = sscanf (item + used, ":%d/%d%n", &setting.churn_percent, &setting.churn_every_s, &more) == 2? 0: -1;
            used += more;
        }
        if (rc == 0 && item [used] == ':') {
            rc = sscanf (item + used, ":%d%n", &setting.brokers, &more) == 1? 0: -1;
            used += more;
        }
        if (rc || item [used] || setting.components < 1 || setting.components > 1000 || setting.tools < 1
        ||  setting.tools > 1000 || setting.watchers < 0 || setting.watchers > 10000 || setting.churn_percent < 0
        ||  setting.churn_percent > 100 || setting.churn_every_s < 1 || setting.brokers < 1
        ||  setting.brokers > S_SWARM_BROKERS_MAX || *count == S_SWARM_SETTINGS_MAX)
            rc = -1;
        else
            settings [(*count)++] = setting;
    }
    free (list);
    return rc;
}

static void
s_bench_swarm (s_bench_t *self)
{
    int64_t started = zclock_mono ();
    //  The open files the largest setting needs in one process: the swarm's
    //  (three sockets and their mailboxes per component per broker, its
    //  own few), the watchers' (two sockets, two connections and a monitor
    //  each) or a broker's (a connection per component socket and watcher)
    long needed = 0;
    for (size_t index = 0; index < self->swarm_count; index++) {
        const s_swarm_setting_t *setting = &self->swarm_settings [index];
        long swarm = (long) setting->components * (6 * setting->brokers + 8) + 64;
        long watchers = (long) setting->watchers * 6 + 64;
        long broker = (long) setting->components * 3 + setting->watchers * 2 + 256;
        long largest = swarm > watchers? swarm: watchers;
        if (broker > largest)
            largest = broker;
        if (largest > needed)
            needed = largest;
    }
    long limit = dsh_bench_fds_raise ("dsh-bench", needed);
    self->swarm_files = json_pack ("{s:i, s:i, s:b}", "limit", (json_int_t) limit, "needed", (json_int_t) needed,
                                   "enough", limit >= needed);
    for (size_t index = 0; index < self->swarm_count && !zsys_interrupted; index++)
        json_array_append_new (self->swarm, s_swarm_setting (self, &self->swarm_settings [index]));
    self->swarm_seconds = (double) (zclock_mono () - started) / 1000.0;
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

//  How a target's value is held against its limit.
typedef enum { S_AT_MOST, S_BELOW, S_AT_LEAST } s_comparison_t;

//  Adds one target; "not measured" when value is not a positive number (a
//  figure it needs is missing, or NATS was skipped).
static void
s_target_add (json_t *targets, const char *text, double value, double limit, s_comparison_t comparison)
{
    static const char *operators [] = { "<=", "<", ">=" };
    bool measured = value > 0 && isfinite (value);
    bool met = comparison == S_AT_MOST? value <= limit: comparison == S_BELOW? value < limit: value >= limit;
    json_array_append_new (targets, json_pack ("{s:s, s:o, s:s, s:f, s:o, s:s}", "target", text,
                                               "value", measured? json_real (value): json_null (),
                                               "comparison", operators [comparison], "limit", limit,
                                               "met", measured? json_boolean (met): json_null (),
                                               "verdict", !measured? "not measured": met? "met": "missed"));
}

//  Adds one target on a count that must stay at limit or under (0 is a
//  value here); "not measured" when measured is false.
static void
s_target_count (json_t *targets, const char *text, double count, double limit, bool measured)
{
    bool met = count <= limit;
    json_array_append_new (targets, json_pack ("{s:s, s:o, s:s, s:f, s:o, s:s}", "target", text,
                                               "value", measured? json_real (count): json_null (),
                                               "comparison", "<=", "limit", limit,
                                               "met", measured? json_boolean (met): json_null (),
                                               "verdict", !measured? "not measured": met? "met": "missed"));
}

//  A figure of a swarm setting, or NAN if it was not measured.
static double
s_swarm_number (json_t *figures, const char *key)
{
    json_t *value = json_object_get (figures, key);
    return json_is_number (value)? json_number_value (value): NAN;
}

//  The targets of issue 24 for the swarm settings that measure them.
static void
s_swarm_targets (s_bench_t *self, json_t *targets)
{
    char text [160];
    size_t index;
    json_t *figures;
    json_array_foreach (self->swarm, index, figures) {
        double components = s_swarm_number (figures, "components"), watchers = s_swarm_number (figures, "watchers");
        double tools = s_swarm_number (figures, "tools"), churn = s_swarm_number (figures, "churn_percent");
        int brokers = (int) s_swarm_number (figures, "brokers");
        char setting [64];
        snprintf (setting, sizeof (setting), "%.0fx%.0f, %.0f watchers%s%s", components, tools, watchers,
                  churn > 0? ", churn": "", brokers > 1? ", 2 brokers": "");
        if (components >= 1000 && watchers >= 1000) {
            snprintf (text, sizeof (text), "%s: idle broker us per connection-s <= 50", setting);
            s_target_add (targets, text, s_swarm_number (figures, "idle_us_per_connection_s"), 50, S_AT_MOST);
        }
        if (watchers >= 1000) {
            snprintf (text, sizeof (text), "%s: calls/s beside idle watchers >= 0.8x without", setting);
            s_target_add (targets, text, s_swarm_number (figures, "calls_ratio"), 0.8, S_AT_LEAST);
        }
        if (watchers >= 1000 && churn > 0 && components * tools >= 10000) {
            double expired = s_swarm_number (figures, "expired_logged");
            snprintf (text, sizeof (text), "%s: live components expired == 0", setting);
            s_target_count (targets, text, expired, 0, isfinite (expired));
            double gone = s_swarm_number (figures, "churn_broker_gone");
            snprintf (text, sizeof (text), "%s: BROKER_GONE for callers == 0", setting);
            s_target_count (targets, text, gone, 0, isfinite (gone));
            double wrong = s_swarm_number (figures, "view_checked") - s_swarm_number (figures, "view_matched");
            snprintf (text, sizeof (text), "%s: watchers with a wrong view == 0", setting);
            s_target_count (targets, text, wrong, 0, isfinite (wrong));
        }
    }
}

//  SQLite-audited calls/s at 64 in flight over NATS's (1 responder) in
//  this run, at payload; 0 if either is missing (NATS did not run, or
//  failed).
static double
s_audit_vs_nats (s_bench_t *self, size_t payload)
{
    const s_row_t *nats = s_find_row (self, "calls_per_s", s_payloads [payload], 1, 64);
    double audited = s_audit_row (self, "calls_per_s", s_payloads [payload])->value [S_AUDIT_SQLITE];
    return !self->nats_dropped && nats && nats->value [S_NATS] > 0 && audited > 0? audited / nats->value [S_NATS]: 0;
}

//  The targets of issue 25: what the audit trail may cost, and that it
//  refuses and drops nothing.
static void
s_audit_targets (s_bench_t *self, json_t *targets)
{
    char text [160];
    for (size_t payload = 0; payload < S_PAYLOADS; payload++) {
        const s_audit_row_t *rate = s_audit_row (self, "calls_per_s", s_payloads [payload]);
        const s_audit_row_t *p50 = s_audit_row (self, "latency_p50_us", s_payloads [payload]);
        snprintf (text, sizeof (text), "audit on SQLite, calls/s, 64 in flight, %zu B: >= 0.9x off", s_payloads [payload]);
        s_target_add (targets, text, s_audit_compare (rate, rate->value [S_AUDIT_SQLITE], rate->value [S_AUDIT_OFF]),
                      0.9, S_AT_LEAST);
        snprintf (text, sizeof (text), "audit on SQLite, p50, %zu B: <= off's + 20 us (us)", s_payloads [payload]);
        double difference = s_audit_compare (p50, p50->value [S_AUDIT_SQLITE], p50->value [S_AUDIT_OFF]);
        //  A difference may be 0 or below, so whether it was measured is said apart
        s_target_count (targets, text, difference, 20, !isnan (difference));
        snprintf (text, sizeof (text), "audit on PostgreSQL, calls/s, 64 in flight, %zu B: >= 0.8x off",
                  s_payloads [payload]);
        s_target_add (targets, text, s_audit_compare (rate, rate->value [S_AUDIT_POSTGRES], rate->value [S_AUDIT_OFF]),
                      0.8, S_AT_LEAST);
        snprintf (text, sizeof (text), "audit on SQLite, calls/s, 64 in flight, %zu B: >= 1x NATS", s_payloads [payload]);
        s_target_add (targets, text, s_audit_vs_nats (self, payload), 1, S_AT_LEAST);
    }
    for (int which = S_AUDIT_SQLITE; which < S_AUDIT_LAYOUTS; which++) {
        const s_audit_store_t *store = &self->audit_stores [which];
        snprintf (text, sizeof (text), "audit on %s: calls refused + records dropped == 0",
                  which == S_AUDIT_SQLITE? "SQLite": "PostgreSQL");
        s_target_count (targets, text, (double) (store->counts.refused + store->counts.dropped), 0, store->measured);
    }
}

//  NATS's calls/s at 64 in flight (1 responder) in this run, at payload;
//  0 if it did not run or failed.
static double
s_pins_nats (s_bench_t *self, size_t payload)
{
    const s_row_t *nats = s_find_row (self, "calls_per_s", s_payloads [payload], 1, 64);
    return !self->nats_dropped && nats? nats->value [S_NATS]: 0;
}

//  The targets of issue 26: pins, and a grant, cost under 3 % of calls/s;
//  every measured call passed by the grant without asking.
static void
s_pins_targets (s_bench_t *self, json_t *targets)
{
    char text [160];
    for (size_t payload = 0; payload < S_PAYLOADS; payload++) {
        const s_pins_row_t *rate = s_pins_row (self, "calls_per_s", s_payloads [payload]);
        snprintf (text, sizeof (text), "pins tofu, calls/s, 64 in flight, %zu B: > 0.97x pins off (cost < 3 %%)",
                  s_payloads [payload]);
        s_target_add (targets, text, s_pins_compare (rate, 0), 0.97, S_AT_LEAST);
        snprintf (text, sizeof (text), "a grant, calls/s, 64 in flight, %zu B: > 0.97x an allow (cost < 3 %%)",
                  s_payloads [payload]);
        s_target_add (targets, text, s_pins_compare (rate, 1), 0.97, S_AT_LEAST);
    }
    s_target_count (targets, "a grant: measured calls put to the approver == 0", (double) self->pins_grant.asked, 0,
                    self->pins_grant.id [0] != 0);
}

//  The raw floor's (peer S_RAW) or NATS's (S_NATS) calls/s at 64 in
//  flight, 64 B, 1 replica in this run; 0 if it did not run or failed.
static double
s_turns_peer (s_bench_t *self, int peer)
{
    const s_row_t *row = s_find_row (self, "calls_per_s", 64, 1, 64);
    if (!row || (peer == S_NATS && self->nats_dropped))
        return 0;
    return row->value [peer];
}

//  Layout which's calls/s at 64 in flight over peer's of this run; 0 if
//  either is missing.
static double
s_turns_vs_peer (s_bench_t *self, s_turns_t *part, int which, int peer)
{
    double peer_rate = s_turns_peer (self, peer);
    double rate = s_turns_row (part, "calls_per_s")->value [which];
    return peer_rate > 0 && rate > 0? rate / peer_rate: 0;
}

//  True if the 100 % layout's broker exported anything: the sink answered
//  a POST, or STATS counted a span.
static bool
s_trace_exported (s_bench_t *self)
{
    const s_trace_export_t *always = &self->trace_export [S_TRACE_ALWAYS];
    return always->requests > 0 || always->spans_ended > 0 || always->spans_exported > 0;
}

//  The targets of issue 28: tracing off costs nothing measurable (against
//  the previous build's broker), tracing 100 % sampled at most 10 % of
//  calls/s, a limit stage under 3 %, and dsh with the main job's chain
//  ahead of NATS.
static void
s_issue28_targets (s_bench_t *self, json_t *targets)
{
    if (self->run [S_PART_TRACE]) {
        s_turns_t *part = &self->trace;
        s_turns_row_t *rate = s_turns_row (part, "calls_per_s");
        s_turns_row_t *cpu = s_turns_row (part, "broker_cpu_us_per_call");
        s_target_add (targets, "tracing off, calls/s, 64 in flight, 64 B: >= 0.97x the previous build's",
                      s_turns_compare (part, rate, 1), 0.97, S_AT_LEAST);
        s_target_add (targets, "tracing off, broker CPU us/call, 64 in flight: <= 1.03x the previous build's",
                      s_turns_compare (part, cpu, 1), 1.03, S_AT_MOST);
        //  Not measured when no span left the broker: then it does not trace
        s_target_add (targets, "tracing 100 % sampled, calls/s, 64 in flight, 64 B: >= 0.9x off (cost <= 10 %)",
                      s_trace_exported (self)? s_turns_compare (part, rate, 3): 0, 0.9, S_AT_LEAST);
    }
    if (self->run [S_PART_LIMIT]) {
        s_turns_t *part = &self->limit;
        s_target_add (targets, "a limit stage, calls/s, 64 in flight, 64 B: > 0.97x none (cost < 3 %)",
                      s_turns_compare (part, s_turns_row (part, "calls_per_s"), 0), 0.97, S_AT_LEAST);
        s_target_add (targets, "a limit stage, calls/s, 64 in flight, 64 B: > 0.97x a pass stage",
                      s_turns_compare (part, s_turns_row (part, "calls_per_s"), 1), 0.97, S_AT_LEAST);
        s_target_add (targets, "the main job's chain, calls/s, 64 in flight, 64 B: >= 1x NATS",
                      s_turns_vs_peer (self, part, S_LIMIT_MAIN, S_NATS), 1, S_AT_LEAST);
    }
}

//  variant's figure over reference's in row, or 0 if either is missing.
static double
s_ratio (const s_row_t *row, int variant, int reference)
{
    return row && row->value [variant] > 0 && row->value [reference] > 0?
        row->value [variant] / row->value [reference]: 0;
}

//  The targets of issues 10, 14, 24, 25, 26 and 28, evaluated, never asserted. A target is listed
//  when the parts it needs were asked for (--only).
static json_t *
s_targets (s_bench_t *self)
{
    json_t *targets = json_array ();
    char text [160];
    bool raw = self->run [S_RAW], nats = self->run [S_NATS], dsh = self->run [S_DSH];
    bool pass3 = self->run [S_PASS3];
    for (size_t payload = 0; payload < S_PAYLOADS; payload++)
        for (int replicas = 1; replicas <= 4; replicas += 3) {
            const s_row_t *row = s_find_row (self, "calls_per_s", s_payloads [payload], replicas, 64);
            snprintf (text, sizeof (text), "empty chain calls/s, 64 in flight, %zu B, %d repl: >= 1.5x NATS",
                      s_payloads [payload], replicas);
            if (dsh && nats)
                s_target_add (targets, text, s_ratio (row, S_DSH, S_NATS), 1.5, S_AT_LEAST);
            snprintf (text, sizeof (text), "empty chain calls/s, 64 in flight, %zu B, %d repl: >= 0.7x floor",
                      s_payloads [payload], replicas);
            if (dsh && raw)
                s_target_add (targets, text, s_ratio (row, S_DSH, S_RAW), 0.7, S_AT_LEAST);
        }
    for (size_t payload = 0; payload < S_PAYLOADS && dsh && raw; payload++) {
        const s_row_t *p50 = s_find_row (self, "latency_p50_us", s_payloads [payload], 1, 1);
        const s_row_t *p99 = s_find_row (self, "latency_p99_us", s_payloads [payload], 1, 1);
        snprintf (text, sizeof (text), "empty chain p50, %zu B: <= 1.25x floor's p50", s_payloads [payload]);
        s_target_add (targets, text, s_ratio (p50, S_DSH, S_RAW), 1.25, S_AT_MOST);
        snprintf (text, sizeof (text), "empty chain p99, %zu B: <= 2x floor's p99", s_payloads [payload]);
        s_target_add (targets, text, s_ratio (p99, S_DSH, S_RAW), 2, S_AT_MOST);
    }
    for (size_t payload = 0; payload < S_PAYLOADS && pass3 && raw; payload++) {
        const s_row_t *p50 = s_find_row (self, "latency_p50_us", s_payloads [payload], 1, 1);
        snprintf (text, sizeof (text), "3 pass stages p50, %zu B: <= 1.5x floor's p50", s_payloads [payload]);
        s_target_add (targets, text, s_ratio (p50, S_PASS3, S_RAW), 1.5, S_AT_MOST);
    }
    for (size_t payload = 0; payload < S_PAYLOADS && pass3 && dsh; payload++)
        for (int replicas = 1; replicas <= 4; replicas += 3) {
            const s_row_t *row = s_find_row (self, "calls_per_s", s_payloads [payload], replicas, 64);
            snprintf (text, sizeof (text), "3 pass stages calls/s, 64 in flight, %zu B, %d repl: >= 0.6x empty",
                      s_payloads [payload], replicas);
            s_target_add (targets, text, s_ratio (row, S_PASS3, S_DSH), 0.6, S_AT_LEAST);
        }
    for (size_t index = 0; index < S_STATS_FIGURES && self->run [S_PART_STATS]; index++) {
        //  Issue 14: statistics on cost under 3 % of throughput
        const s_stats_row_t *row = &self->stats_rows [index];
        if (!streq (row->figure, "calls_per_s"))
            continue;
        snprintf (text, sizeof (text), "statistics on, calls/s, %d in flight, 64 B: > 0.97x off (cost < 3 %%)",
                  row->inflight);
        s_target_add (targets, text, row->value [S_STATS_OFF] > 0? row->value [S_STATS_ON] / row->value [S_STATS_OFF]: 0,
                      0.97, S_AT_LEAST);
    }
    if (self->run [S_PART_AUDIT])
        s_audit_targets (self, targets);
    if (self->run [S_PART_PINS])
        s_pins_targets (self, targets);
    s_issue28_targets (self, targets);
    if (self->run [S_PART_SCALE]) {
        //  The broker's peak over the first start, whichever sample saw it
        double peak_kib = 0;
        const char *keys [] = { "broker_rss_kib", "broker_rss_final_kib", "broker_hwm_kib" };
        for (size_t index = 0; index < sizeof (keys) / sizeof (keys [0]); index++) {
            double value = s_scale_number (self, keys [index]);
            if (value > peak_kib)
                peak_kib = value;
        }
        snprintf (text, sizeof (text), "%d x %d tools: broker peak RSS < 64 MiB (MiB)", self->plan.components,
                  self->plan.tools);
        s_target_add (targets, text, peak_kib / 1024, 64, S_BELOW);
        //  Two of the earlier benchmark issue's, which still hold
        snprintf (text, sizeof (text), "%d x %d tools: SNAPSHOT p50 (SDK) < 50 ms", self->plan.components,
                  self->plan.tools);
        s_target_add (targets, text, s_scale_number (self, "snapshot_p50_ms"), 50, S_BELOW);
        snprintf (text, sizeof (text), "%d x %d tools: all listed within 2 heartbeat intervals",
                  self->plan.components, self->plan.tools);
        s_target_add (targets, text, s_scale_number (self, "listed_heartbeats"), 2, S_BELOW);
    }
    if (self->run [S_PART_SWARM])
        s_swarm_targets (self, targets);
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

//  A figure of the table, or "-" where it is missing.
static void
s_print_value (double value, const char *format)
{
    if (value > 0)
        printf (format, value);
    else
        printf ("%*s", (int) strlen ("1234567.9"), "-");
}

//  The CURVE part's table: each path plain and with CURVE, and the ratio.
static void
s_print_curve (s_bench_t *self)
{
    printf ("\nCURVE, 1 replica: each figure in %d rounds, plain and CURVE back to back in each; \"rounds\"\n"
            "is the range of the rounds' own ratios. The client's calls carry its key's agent id, so the\n"
            "broker checks it and splices nothing. calls/s at 1 in flight is the latency runs'. %.0f s:\n",
            S_CURVE_ROUNDS, self->curve_seconds);
    printf ("%-36s %9s %9s %6s %-11s %9s %9s %6s %s\n", "figure", "dsh", "+CURVE", "ratio", "rounds", "floor",
            "+CURVE", "ratio", "rounds");
    for (size_t index = 0; index < S_CURVE_ROWS; index++) {
        const s_curve_row_t *row = &self->curve_rows [index];
        char label [80];
        if (streq (row->figure, "calls_per_s"))
            snprintf (label, sizeof (label), "calls/s         %2d in flight %4zu B", row->inflight, row->payload);
        else
        if (streq (row->figure, "cpu_us_per_call"))
            snprintf (label, sizeof (label), "CPU us per call %2d in flight %4zu B", row->inflight, row->payload);
        else
            snprintf (label, sizeof (label), "latency %s us          %4zu B",
                      streq (row->figure, "latency_p50_us")? "p50": "p99", row->payload);
        printf ("%-36s", label);
        for (int plain = 0; plain < S_CURVE_LAYOUTS; plain += 2) {
            printf (" ");
            s_print_value (row->value [plain], "%9.1f");
            printf (" ");
            s_print_value (row->value [plain + 1], "%9.1f");
            char range [32] = "";
            if (row->value [plain] > 0 && row->value [plain + 1] > 0) {
                snprintf (range, sizeof (range), "%.2f-%.2f", row->ratio_low [plain / 2], row->ratio_high [plain / 2]);
                printf (" %5.2fx", row->value [plain + 1] / row->value [plain]);
            }
            else
                printf (" %6s", "-");
            //  Padded but at the end of the line
            printf (" %-*s", plain + 2 < S_CURVE_LAYOUTS? 11: 0, range);
        }
        printf ("\n");
    }
}

//  The statistics part's table: on, off, and the ratio.
static void
s_print_stats (s_bench_t *self)
{
    printf ("\nstatistics, dsh (empty chain), 1 replica, 64 B: on and off (--no-stats) back to back in %d rounds;\n"
            "\"rounds\" is the range of the rounds' own on/off ratios. %.0f s:\n", S_STATS_ROUNDS, self->stats_seconds);
    printf ("%-36s %9s %9s %6s %s\n", "figure", "on", "off", "ratio", "rounds");
    for (size_t index = 0; index < S_STATS_FIGURES; index++) {
        const s_stats_row_t *row = &self->stats_rows [index];
        char label [80];
        snprintf (label, sizeof (label), "%-18s %2d in flight 64 B",
                  streq (row->figure, "calls_per_s")? "calls/s": "broker CPU us/call", row->inflight);
        printf ("%-36s ", label);
        s_print_value (row->value [S_STATS_ON], "%9.1f");
        printf (" ");
        s_print_value (row->value [S_STATS_OFF], "%9.1f");
        if (row->value [S_STATS_ON] > 0 && row->value [S_STATS_OFF] > 0)
            printf (" %5.3fx %.3f-%.3f\n", row->value [S_STATS_ON] / row->value [S_STATS_OFF], row->ratio_low,
                    row->ratio_high);
        else
            printf (" %6s\n", "-");
    }
}

//  An audited layout's writer and store figures for one payload, by name;
//  a figure with nothing to divide by is left out.
static json_t *
s_audit_writer_json (const s_audit_writer_t *writer)
{
    json_t *figures = json_pack ("{s:I, s:f, s:f, s:I}", "records_written", (json_int_t) writer->records,
                                 "queue_kib_after_calls_max", (double) writer->queue_bytes_max / 1024.0,
                                 "drain_ms_max", (double) writer->drain_us_max / 1000.0,
                                 "store_records", (json_int_t) writer->store_records);
    double records = (double) writer->records;
    if (writer->records && writer->usecs > 0)
        json_object_set_new (figures, "sustained_records_per_s", json_real (records * 1e6 / (double) writer->usecs));
    if (writer->records && writer->write_us > 0) {
        json_object_set_new (figures, "append_records_per_s", json_real (records * 1e6 / (double) writer->write_us));
        json_object_set_new (figures, "append_us_per_record", json_real ((double) writer->write_us / records));
    }
    if (writer->batches)
        json_object_set_new (figures, "records_per_batch", json_real (records / (double) writer->batches));
    if (writer->store_bytes >= 0) {
        json_object_set_new (figures, "store_bytes", json_integer (writer->store_bytes));
        if (writer->store_records)
            json_object_set_new (figures, "store_bytes_per_million_calls",
                                 json_real ((double) writer->store_bytes * 1e6 / (double) writer->store_records));
    }
    return figures;
}

//  The writer table's rows: a figure of each audited layout's writer, for
//  each payload, times scale.
static const struct {
    const char *label;
    const char *key;
    double scale;
    const char *format;
} s_audit_writer_rows [] = {
    { "records written at 64 in flight", "records_written", 1, "%.0f" },
    { "records/s, turn start to queue empty", "sustained_records_per_s", 1, "%.0f" },
    { "records/s of append time alone", "append_records_per_s", 1, "%.0f" },
    { "  us per record in appends", "append_us_per_record", 1, "%.2f" },
    { "  records per transaction", "records_per_batch", 1, "%.1f" },
    { "queue as a turn's calls end, most (KiB)", "queue_kib_after_calls_max", 1, "%.0f" },
    { "  until it is empty, most (ms)", "drain_ms_max", 1, "%.1f" },
    { "store growth, every turn (MiB)", "store_bytes", 1.0 / 1048576, "%.2f" },
    { "  per million calls (MiB)", "store_bytes_per_million_calls", 1.0 / 1048576, "%.1f" }
};
#define S_AUDIT_WRITER_ROWS (sizeof (s_audit_writer_rows) / sizeof (s_audit_writer_rows [0]))

//  The audit part's tables: each layout's figures and each audited one
//  against off, SQLite's calls/s against NATS's, the writers and the
//  stores.
static void
s_print_audit (s_bench_t *self)
{
    const s_audit_store_t *stores = self->audit_stores;
    printf ("\naudit (issue 25), dsh (empty chain), 1 replica: the audit off, on SQLite and on PostgreSQL, in turns\n"
            "in %d rounds, which goes first rotating. After each turn an audited broker's queue is let empty, and\n"
            "its CPU time meanwhile counts for the calls; \"until recorded\" is calls/s over the time until then.\n"
            "\"vs off\": calls/s as a ratio, us as a difference; \"rounds\": its range over the rounds' own. %.0f s:\n",
            S_AUDIT_ROUNDS, self->audit_seconds);
    if (!stores [S_AUDIT_POSTGRES].measured)
        printf ("PostgreSQL dropped: %s\n", stores [S_AUDIT_POSTGRES].reason);
    printf ("%-36s %9s %9s %7s %-17s %9s %7s %s\n", "figure", "off", "SQLite", "vs off", "rounds", "Postgres",
            "vs off", "rounds");
    for (size_t index = 0; index < S_AUDIT_ROWS; index++) {
        const s_audit_row_t *row = &self->audit_rows [index];
        char label [80];
        if (row->inflight > 1)
            snprintf (label, sizeof (label), "%-18s %2d in flight %4zu B",
                      streq (row->figure, "calls_per_s")? "calls/s":
                      streq (row->figure, "recorded_calls_per_s")? "  until recorded": "broker CPU us/call",
                      row->inflight, row->payload);
        else
            snprintf (label, sizeof (label), "latency %s us          %4zu B",
                      streq (row->figure, "latency_p50_us")? "p50": "p99", row->payload);
        printf ("%-36s ", label);
        s_print_value (row->value [S_AUDIT_OFF], "%9.1f");
        for (int which = S_AUDIT_SQLITE; which < S_AUDIT_LAYOUTS; which++) {
            printf (" ");
            s_print_value (row->value [which], "%9.1f");
            double compared = s_audit_compare (row, row->value [which], row->value [S_AUDIT_OFF]);
            char range [32] = "";
            if (isnan (compared))
                printf (" %7s", "-");
            else
            if (row->difference)
                printf (" %+7.1f", compared);
            else
                printf (" %6.3fx", compared);
            if (!isnan (compared) && row->compare_low [which] <= row->compare_high [which])
                snprintf (range, sizeof (range), row->difference? "%+.1f..%+.1f": "%.3f-%.3f",
                          row->compare_low [which], row->compare_high [which]);
            //  Padded but at the end of the line
            printf (" %-*s", which + 1 < S_AUDIT_LAYOUTS? 17: 0, range);
        }
        printf ("\n");
    }
    printf ("SQLite audit's calls/s at 64 in flight over NATS's (1 responder, this run):");
    for (size_t payload = 0; payload < S_PAYLOADS; payload++) {
        double ratio = s_audit_vs_nats (self, payload);
        if (ratio > 0)
            printf (" %.2fx at %zu B%s", ratio, s_payloads [payload], payload + 1 < S_PAYLOADS? ",": "\n");
        else
            printf (" not measured at %zu B%s", s_payloads [payload], payload + 1 < S_PAYLOADS? ",": "\n");
    }

    printf ("\nthe writers (STATS audit), over each payload's turns of 64 in flight; the store's growth over all\n"
            "of its turns:\n%-40s", "");
    for (int which = S_AUDIT_SQLITE; which < S_AUDIT_LAYOUTS; which++)
        for (size_t payload = 0; payload < S_PAYLOADS; payload++) {
            char text [32];
            snprintf (text, sizeof (text), "%s %zu B", which == S_AUDIT_SQLITE? "SQLite": "Postgres", s_payloads [payload]);
            printf (" %14s", text);
        }
    printf ("\n");
    json_t *writers [S_AUDIT_LAYOUTS][S_PAYLOADS] = { { NULL } };
    for (int which = S_AUDIT_SQLITE; which < S_AUDIT_LAYOUTS; which++)
        for (size_t payload = 0; payload < S_PAYLOADS; payload++)
            writers [which][payload] = stores [which].measured? s_audit_writer_json (&stores [which].payloads [payload])
                                                               : json_object ();
    for (size_t row = 0; row < S_AUDIT_WRITER_ROWS; row++) {
        printf ("%-40s", s_audit_writer_rows [row].label);
        for (int which = S_AUDIT_SQLITE; which < S_AUDIT_LAYOUTS; which++)
            for (size_t payload = 0; payload < S_PAYLOADS; payload++) {
                double value = s_swarm_number (writers [which][payload], s_audit_writer_rows [row].key);
                char text [32] = "-";
                if (isfinite (value))
                    snprintf (text, sizeof (text), s_audit_writer_rows [row].format,
                              value * s_audit_writer_rows [row].scale);
                printf (" %14s", text);
            }
        printf ("\n");
    }
    for (int which = S_AUDIT_SQLITE; which < S_AUDIT_LAYOUTS; which++)
        for (size_t payload = 0; payload < S_PAYLOADS; payload++)
            json_decref (writers [which][payload]);
    for (int which = S_AUDIT_SQLITE; which < S_AUDIT_LAYOUTS; which++) {
        const s_audit_store_t *store = &stores [which];
        if (!store->measured)
            continue;
        printf ("%s: %s\n  %" PRIu64 " records, %" PRIu64 " calls refused, %" PRIu64 " records dropped, longest"
                " append %.1f ms; ", which == S_AUDIT_SQLITE? "SQLite": "PostgreSQL", store->location,
                store->counts.records, store->counts.refused, store->counts.dropped,
                (double) store->counts.write_us_max / 1000.0);
        if (store->bytes < 0)
            printf ("size not known\n");
        else
            printf ("%.2f MiB (%s), %.1f MiB per million calls\n", (double) store->bytes / 1048576,
                    which == S_AUDIT_POSTGRES? "dsh_audit with its indexes and TOAST":
                    store->checkpointed? "the file and its -wal after a checkpoint": "the file and its -wal as is",
                    store->counts.records? (double) store->bytes / 1048576 * 1e6 / (double) store->counts.records: 0);
    }
}

//  The pins part's table: each layout's figures, the two comparisons with
//  their ranges over the rounds, NATS's calls/s of this run, the grant.
static void
s_print_pins (s_bench_t *self)
{
    const s_pins_grant_t *grant = &self->pins_grant;
    printf ("\npins (issue 26), dsh -> dsh-demo, 1 replica, the audit off in all: pins off; pins tofu (the default);\n"
            "tofu and a permission stage that allows; the same stage asking for echo, every call let through by a\n"
            "grant (the bench's agent, echo, an hour). In turns in %d rounds, which goes first rotating; \"rounds\" is\n"
            "the range of the rounds' own ratios; \"/off\" is tofu over pins off, \"/allow\" granted over allow. %.0f s:\n",
            S_PINS_ROUNDS, self->pins_seconds);
    printf ("%-36s %9s %9s %9s %9s %8s %-13s %8s %s\n", "figure", "pins off", "tofu", "allow", "granted", "/off",
            "rounds", "/allow", "rounds");
    for (size_t index = 0; index < S_PINS_ROWS; index++) {
        const s_pins_row_t *row = &self->pins_rows [index];
        char label [80];
        if (row->inflight > 1)
            snprintf (label, sizeof (label), "%-18s %2d in flight %4zu B",
                      streq (row->figure, "calls_per_s")? "calls/s": "broker CPU us/call", row->inflight, row->payload);
        else
            snprintf (label, sizeof (label), "latency %s us          %4zu B",
                      streq (row->figure, "latency_p50_us")? "p50": "p99", row->payload);
        printf ("%-36s", label);
        for (int which = 0; which < S_PINS_LAYOUTS; which++) {
            printf (" ");
            s_print_value (row->value [which], "%9.1f");
        }
        for (int compared = 0; compared < S_PINS_COMPARISONS; compared++) {
            double ratio = s_pins_compare (row, compared);
            char range [32] = "";
            if (ratio > 0 && row->ratio_low [compared] > 0)
                snprintf (range, sizeof (range), "%.3f-%.3f", row->ratio_low [compared], row->ratio_high [compared]);
            if (ratio > 0)
                printf (" %7.3fx", ratio);
            else
                printf (" %8s", "-");
            //  Padded but at the end of the line
            printf (" %-*s", compared + 1 < S_PINS_COMPARISONS? 13: 0, range);
        }
        printf ("\n");
    }
    printf ("NATS's calls/s at 64 in flight (1 responder, this run):");
    for (size_t payload = 0; payload < S_PAYLOADS; payload++) {
        double nats = s_pins_nats (self, payload);
        double tofu = s_pins_row (self, "calls_per_s", s_payloads [payload])->value [S_PINS_TOFU];
        if (nats > 0 && tofu > 0)
            printf (" %.1f at %zu B (pins tofu %.2fx)", nats, s_payloads [payload], tofu / nats);
        else
            printf (" not measured at %zu B", s_payloads [payload]);
        printf ("%s", payload + 1 < S_PAYLOADS? ",": "\n");
    }
    if (grant->id [0])
        printf ("grant %s: %s by CONTROL grants before the measured calls, %s after; %" PRIu64 " of them put to the"
                " approver\n", grant->id, grant->listed_before? "listed": "NOT listed",
                grant->listed_after? "listed": "NOT listed", grant->asked);
    else
        printf ("no grant was made\n");
}

//  The trace or limit part's tables: each layout's figures, each
//  comparison with its range over the rounds, calls/s against the raw
//  floor's and NATS's of this run.
static void
s_print_turns (s_bench_t *self, s_turns_t *part)
{
    printf ("%-36s", "figure");
    for (int which = 0; which < part->layouts; which++)
        printf (" %14s", part->layout_keys [which]);
    printf ("\n");
    for (size_t index = 0; index < S_PINS_FIGURES; index++) {
        const s_turns_row_t *row = &part->rows [index];
        char label [80];
        if (row->inflight > 1)
            snprintf (label, sizeof (label), "%-18s %2d in flight   64 B",
                      streq (row->figure, "calls_per_s")? "calls/s": "broker CPU us/call", row->inflight);
        else
            snprintf (label, sizeof (label), "latency %s us            64 B",
                      streq (row->figure, "latency_p50_us")? "p50": "p99");
        printf ("%-36s", label);
        for (int which = 0; which < part->layouts; which++) {
            printf ("      ");
            s_print_value (row->value [which], "%9.1f");
        }
        printf ("\n");
    }
    printf ("%-36s", "ratio (rounds)");
    for (int compared = 0; compared < part->comparisons; compared++)
        printf (" %-22s", part->versus [compared].key);
    printf ("\n");
    for (size_t index = 0; index < S_PINS_FIGURES; index++) {
        const s_turns_row_t *row = &part->rows [index];
        printf ("%-36s", row->figure);
        for (int compared = 0; compared < part->comparisons; compared++) {
            double ratio = s_turns_compare (part, row, compared);
            char text [48] = "-";
            if (ratio > 0 && row->ratio_low [compared] > 0)
                snprintf (text, sizeof (text), "%.3fx %.3f-%.3f", ratio, row->ratio_low [compared],
                          row->ratio_high [compared]);
            else
            if (ratio > 0)
                snprintf (text, sizeof (text), "%.3fx", ratio);
            printf (" %-22s", text);
        }
        printf ("\n");
    }
    double floor = s_turns_peer (self, S_RAW), nats = s_turns_peer (self, S_NATS);
    printf ("calls/s at 64 in flight against this run's raw floor (");
    s_print_value (floor, "%.1f");
    printf (") and NATS (");
    s_print_value (nats, "%.1f");
    printf ("):");
    for (int which = 0; which < part->layouts; which++) {
        double to_floor = s_turns_vs_peer (self, part, which, S_RAW);
        double to_nats = s_turns_vs_peer (self, part, which, S_NATS);
        printf ("%s %s ", which? ",": "", part->layout_keys [which]);
        s_print_value (to_floor, "%.2fx");
        printf ("/");
        s_print_value (to_nats, "%.2fx");
    }
    printf ("\n");
}

static void
s_print_trace (s_bench_t *self)
{
    printf ("\ntrace (issue 28), dsh -> dsh-demo, 1 replica, the audit off in all: the broker's tracing off; a second\n"
            "broker with it off (off against off: the noise floor); the previous build's broker; tracing on, 1 %%\n"
            "sampled (traceidratio) and 100 %% (always_on), over OTLP/HTTP (http/protobuf) to a sink in the bench\n"
            "that answers every POST 200 unread. In turns in %d rounds, which goes first rotating. %.0f s:\n",
            self->trace.rounds, self->trace.seconds);
    s_print_turns (self, &self->trace);
    printf ("previous build: %s\n", self->trace_previous [0]? self->trace_previous: "not measured");
    for (int which = S_TRACE_RATIO; which <= S_TRACE_ALWAYS; which++) {
        const s_trace_export_t *export = &self->trace_export [which];
        printf ("%s: %" PRIu64 " calls; the sink had %" PRIu64 " POSTs, %" PRIu64 " bytes (%.1f a call)",
                self->trace.layout_keys [which], export->calls, export->requests, export->bytes,
                export->calls? (double) export->bytes / (double) export->calls: 0);
        if (export->counted)
            printf ("; STATS: spans ended %" PRIu64 " (%.4f a call), exported %" PRIu64 ", dropped %" PRIu64
                    ", failed POSTs %" PRIu64 "\n", export->spans_ended,
                    export->calls? (double) export->spans_ended / (double) export->calls: 0, export->spans_exported,
                    export->spans_dropped, export->export_failures);
        else
            printf ("; STATS carries no tracing counters\n");
    }
    if (!s_trace_exported (self))
        printf ("NOTHING reached the sink from the 100 %% broker: this broker does not trace, and all its layouts\n"
                "measured the same thing\n");
}

static void
s_print_limit (s_bench_t *self)
{
    printf ("\nlimit (issue 28), dsh -> dsh-demo, 1 replica, the audit off in all: an empty chain; one pass stage;\n"
            "a limit stage; the main job's chain. From %s.\nIn turns in %d rounds, which goes first rotating. %.0f s:\n",
            self->limit_source, self->limit.rounds, self->limit.seconds);
    s_print_turns (self, &self->limit);
}

//  The trace or limit part's figures: each row with every layout's figure
//  and each comparison with its range over the rounds, and calls/s against
//  the raw floor's and NATS's of this run.
static json_t *
s_turns_json (s_bench_t *self, s_turns_t *part)
{
    json_t *calls = json_array ();
    for (size_t index = 0; index < S_PINS_FIGURES; index++) {
        const s_turns_row_t *row = &part->rows [index];
        json_t *item = json_pack ("{s:s, s:i, s:i, s:i}", "figure", row->figure, "payload", 64, "replicas", 1,
                                  "inflight", row->inflight);
        for (int which = 0; which < part->layouts; which++)
            json_object_set_new (item, part->layout_keys [which],
                                 row->value [which] > 0? json_real (row->value [which]): json_null ());
        for (int compared = 0; compared < part->comparisons; compared++) {
            double ratio = s_turns_compare (part, row, compared);
            char key [48];
            json_object_set_new (item, part->versus [compared].key, ratio > 0? json_real (ratio): json_null ());
            snprintf (key, sizeof (key), "%s_rounds", part->versus [compared].key);
            json_object_set_new (item, key, ratio > 0 && row->ratio_low [compared] > 0?
                json_pack ("[f, f]", row->ratio_low [compared], row->ratio_high [compared]): json_null ());
        }
        json_array_append_new (calls, item);
    }
    json_t *layouts = json_object ();
    json_t *peers = json_object ();
    for (int which = 0; which < part->layouts; which++) {
        json_object_set_new (layouts, part->layout_keys [which], json_string (part->layout_names [which]));
        double to_floor = s_turns_vs_peer (self, part, which, S_RAW);
        double to_nats = s_turns_vs_peer (self, part, which, S_NATS);
        json_object_set_new (peers, part->layout_keys [which],
                             json_pack ("{s:o, s:o}", "vs_floor", to_floor > 0? json_real (to_floor): json_null (),
                                        "vs_nats", to_nats > 0? json_real (to_nats): json_null ()));
    }
    double floor = s_turns_peer (self, S_RAW), nats = s_turns_peer (self, S_NATS);
    return json_pack ("{s:i, s:f, s:o, s:o, s:{s:o, s:o, s:o}}", "rounds", part->rounds, "seconds", part->seconds,
                      "layouts", layouts, "calls", calls, "calls_per_s_64_in_flight", "floor",
                      floor > 0? json_real (floor): json_null (), "nats", nats > 0? json_real (nats): json_null (),
                      "layouts", peers);
}

static json_t *
s_trace_json (s_bench_t *self)
{
    if (!self->run [S_PART_TRACE])
        return json_null ();
    json_t *part = s_turns_json (self, &self->trace);
    json_t *exports = json_object ();
    for (int which = S_TRACE_RATIO; which <= S_TRACE_ALWAYS; which++) {
        const s_trace_export_t *export = &self->trace_export [which];
        json_t *item = json_pack ("{s:I, s:I, s:I}", "calls", (json_int_t) export->calls, "sink_posts",
                                  (json_int_t) export->requests, "sink_bytes", (json_int_t) export->bytes);
        json_object_set_new (item, "stats", export->counted?
            json_pack ("{s:I, s:f, s:I, s:I, s:I}", "spans_ended", (json_int_t) export->spans_ended,
                       "spans_ended_per_call", export->calls? (double) export->spans_ended / (double) export->calls: 0,
                       "spans_exported", (json_int_t) export->spans_exported, "spans_dropped",
                       (json_int_t) export->spans_dropped, "export_failures", (json_int_t) export->export_failures):
            json_null ());
        json_object_set_new (exports, self->trace.layout_keys [which], item);
    }
    json_object_set_new (part, "exports", exports);
    json_object_set_new (part, "broker_exported", json_boolean (s_trace_exported (self)));
    json_object_set_new (part, "previous_build", self->trace_previous [0] && self->trace.measured [S_TRACE_PREVIOUS]?
                         json_string (self->trace_previous): json_null ());
    return part;
}

static json_t *
s_limit_json (s_bench_t *self)
{
    if (!self->run [S_PART_LIMIT])
        return json_null ();
    json_t *part = s_turns_json (self, &self->limit);
    json_object_set_new (part, "source", json_string (self->limit_source));
    return part;
}

//  The swarm part's rows: a figure of each setting, times scale.
static const struct {
    const char *label;
    const char *key;
    double scale;
    const char *format;
} s_swarm_rows [] = {
    { "join: all tools on every broker (ms)", "join_ms", 1, "%.0f" },
    { "broker RSS after the join (MiB)", "broker_rss_joined_kib", 1.0 / 1024, "%.1f" },
    { "watchers synced in (ms)", "sync_ms", 1, "%.0f" },
    { "  their first SNAPSHOT p50 (ms)", "sync_snapshot_p50_ms", 1, "%.1f" },
    { "  their first SNAPSHOT p99 (ms)", "sync_snapshot_p99_ms", 1, "%.1f" },
    { "no watchers: broker CPU (%)", "alone_idle_broker_cpu_pct", 1, "%.1f" },
    { "no watchers: us per connection-s", "alone_idle_us_per_connection_s", 1, "%.1f" },
    { "connections (all brokers)", "connections", 1, "%.0f" },
    { "idle: broker CPU (% of a core)", "idle_broker_cpu_pct", 1, "%.1f" },
    { "idle: broker us per connection-s", "idle_us_per_connection_s", 1, "%.1f" },
    { "  registry thread (%)", "idle_busiest_thread_pct", 1, "%.1f" },
    { "  libzmq I/O threads (%)", "idle_io_threads_pct", 1, "%.1f" },
    { "idle: broker RSS (MiB)", "broker_rss_idle_kib", 1.0 / 1024, "%.1f" },
    { "idle: swarm CPU (%)", "idle_swarm_cpu_pct", 1, "%.1f" },
    { "idle: watchers CPU (%)", "idle_watchers_cpu_pct", 1, "%.1f" },
    { "open files: broker", "fds_broker", 1, "%.0f" },
    { "open files: swarm", "fds_swarm", 1, "%.0f" },
    { "open files: watchers", "fds_watchers", 1, "%.0f" },
    { "calls/s, 64 in flight, no watchers", "alone_calls_per_s", 1, "%.0f" },
    { "  p99 (ms)", "alone_p99_ms", 1, "%.2f" },
    { "calls/s beside idle watchers", "watched_calls_per_s", 1, "%.0f" },
    { "  p99 (ms)", "watched_p99_ms", 1, "%.2f" },
    { "  ratio to no watchers", "calls_ratio", 1, "%.2f" },
    { "churn: events/s (all brokers)", "churn_events_per_s", 1, "%.1f" },
    { "churn: broker CPU (% of a core)", "churn_broker_cpu_pct", 1, "%.1f" },
    { "  registry thread (%)", "churn_busiest_thread_pct", 1, "%.1f" },
    { "  libzmq I/O threads (%)", "churn_io_threads_pct", 1, "%.1f" },
    { "churn: broker us per event", "churn_us_per_event", 1, "%.1f" },
    { "churn: swarm CPU (%)", "churn_swarm_cpu_pct", 1, "%.1f" },
    { "churn: watchers CPU (%, one thread)", "churn_watchers_cpu_pct", 1, "%.1f" },
    { "churn: calls/s beside it", "churn_calls_per_s", 1, "%.0f" },
    { "  p99 (ms)", "churn_p99_ms", 1, "%.2f" },
    { "  BROKER_GONE", "churn_broker_gone", 1, "%.0f" },
    { "events delivered (fraction)", "delivered", 1, "%.3f" },
    { "seq gaps (all watchers)", "gaps", 1, "%.0f" },
    { "re-syncs (views lost)", "resyncs", 1, "%.0f" },
    { "  watchers that re-synced", "watchers_resynced", 1, "%.0f" },
    { "  silences (no PONG in 3 s)", "silences", 1, "%.0f" },
    { "SNAPSHOT p50 (ms)", "snapshot_p50_ms", 1, "%.1f" },
    { "SNAPSHOT p99 (ms)", "snapshot_p99_ms", 1, "%.1f" },
    { "  SNAPSHOTs sent again (no reply)", "snapshot_resends", 1, "%.0f" },
    { "  SNAPSHOTs refused (OVERLOADED)", "snapshot_overloaded", 1, "%.0f" },
    { "fan-out spread p50 (ms)", "spread_p50_ms", 1, "%.2f" },
    { "fan-out spread p99 (ms)", "spread_p99_ms", 1, "%.2f" },
    { "expired (component.left seen)", "expired", 1, "%.0f" },
    { "expired (broker log, whole run)", "expired_logged", 1, "%.0f" },
    { "views matching the final SNAPSHOT", "view_matched", 1, "%.0f" },
    { "  of watchers", "view_checked", 1, "%.0f" },
    { "broker peak RSS (MiB)", "broker_hwm_kib", 1.0 / 1024, "%.1f" }
};
#define S_SWARM_ROWS    (sizeof (s_swarm_rows) / sizeof (s_swarm_rows [0]))
#define S_SWARM_COLUMNS 6

//  The swarm part's table: a column per setting, six to a block, then
//  what looked like a broker defect.
static void
s_print_swarm (s_bench_t *self)
{
    const s_swarm_plan_t *plan = &self->swarm_plan;
    printf ("\nswarm (issue 24): each setting a fresh broker (or two), dsh-bench-swarm, dsh-bench-watchers and\n"
            "dsh-demo; calls are dsh-bench --drive, 64 in flight, %d s without churn; quiet window %d s; churn\n"
            "%d cycle(s) alone (CPU per event), then as many with calls. Open files: limit %lld, the largest\n"
            "setting needs about %lld. %.0f s:\n",
            plan->drive_s, plan->idle_s, plan->cycles,
            (long long) json_integer_value (json_object_get (self->swarm_files, "limit")),
            (long long) json_integer_value (json_object_get (self->swarm_files, "needed")), self->swarm_seconds);
    size_t count = json_array_size (self->swarm);
    for (size_t first = 0; first < count; first += S_SWARM_COLUMNS) {
        size_t last = first + S_SWARM_COLUMNS < count? first + S_SWARM_COLUMNS: count;
        for (int header = 0; header < 4; header++) {
            printf ("\n%-36s", "");
            for (size_t column = first; column < last; column++) {
                json_t *figures = json_array_get (self->swarm, column);
                char text [32];
                if (header == 0)
                    snprintf (text, sizeof (text), "%.0fx%.0f", s_swarm_number (figures, "components"),
                              s_swarm_number (figures, "tools"));
                else
                if (header == 1)
                    snprintf (text, sizeof (text), "%.0f watchers", s_swarm_number (figures, "watchers"));
                else
                if (header == 2 && s_swarm_number (figures, "churn_percent") > 0)
                    snprintf (text, sizeof (text), "%.0f%%/%.0fs", s_swarm_number (figures, "churn_percent"),
                              s_swarm_number (figures, "churn_every_s"));
                else
                if (header == 2)
                    snprintf (text, sizeof (text), "no churn");
                else
                    snprintf (text, sizeof (text), "%.0f broker%s", s_swarm_number (figures, "brokers"),
                              s_swarm_number (figures, "brokers") > 1? "s": "");
                printf (" %13s", text);
            }
        }
        printf ("\n");
        for (size_t row = 0; row < S_SWARM_ROWS; row++) {
            printf ("%-36s", s_swarm_rows [row].label);
            for (size_t column = first; column < last; column++) {
                double value = s_swarm_number (json_array_get (self->swarm, column), s_swarm_rows [row].key);
                char text [32] = "-";
                if (isfinite (value))
                    snprintf (text, sizeof (text), s_swarm_rows [row].format, value * s_swarm_rows [row].scale);
                printf (" %13s", text);
            }
            printf ("\n");
        }
    }
    bool told = false;
    size_t index;
    json_t *figures;
    json_array_foreach (self->swarm, index, figures) {
        json_t *findings = json_object_get (figures, "findings");
        size_t item;
        json_t *finding;
        json_array_foreach (findings, item, finding) {
            if (!told)
                printf ("\nwhat looks like a broker defect (reported, never asserted):\n");
            told = true;
            printf ("  %.0fx%.0f, %.0f watchers, churn %.0f%%, %.0f broker(s): %s\n", s_swarm_number (figures, "components"),
                    s_swarm_number (figures, "tools"), s_swarm_number (figures, "watchers"),
                    s_swarm_number (figures, "churn_percent"), s_swarm_number (figures, "brokers"),
                    json_string_value (finding));
        }
    }
}

static void
s_print_table (s_bench_t *self, json_t *machine, json_t *targets)
{
    printf ("dsh-bench (%s): %s, %lld cpus, loopback tcp\n", self->plan.quick? "quick": "full",
            json_string_value (json_object_get (machine, "model")),
            (long long) json_integer_value (json_object_get (machine, "nproc")));
    if (self->nats_dropped)
        printf ("NATS %s: %s\n", json_string_value (json_object_get (self->nats, "status")),
                json_string_value (json_object_get (self->nats, "reason")));
    else
        printf ("NATS: nats-server %s, nats.c %s; 1 and 4 responders in a queue group, SendAsap on both sides\n",
                json_string_value (json_object_get (self->nats, "server_version")),
                json_string_value (json_object_get (self->nats, "client_version")));
    if (self->row_count)
        printf ("\n%-36s %9s %9s %6s %9s %6s %6s %9s %6s\n", "figure", "floor", "NATS", "/floor", "dsh", "/floor",
                "/NATS", "dsh+3pass", "/floor");
    for (size_t index = 0; index < self->row_count; index++) {
        const s_row_t *row = &self->rows [index];
        char label [80];
        printf ("%-36s", s_figure_label (row, label, sizeof (label)));
        const double columns [] = {
            row->value [S_RAW], row->value [S_NATS], s_ratio (row, S_NATS, S_RAW),
            row->value [S_DSH], s_ratio (row, S_DSH, S_RAW), s_ratio (row, S_DSH, S_NATS),
            row->value [S_PASS3], s_ratio (row, S_PASS3, S_RAW)
        };
        const bool ratio [] = { false, false, true, false, true, true, false, true };
        for (size_t column = 0; column < sizeof (columns) / sizeof (columns [0]); column++) {
            if (ratio [column] && columns [column] > 0)
                printf (" %5.2fx", columns [column]);
            else
            if (ratio [column])
                printf (" %6s", "-");
            else {
                printf (" ");
                s_print_value (columns [column], "%9.1f");
            }
        }
        printf ("\n");
    }
    if (!self->nats_dropped)
        printf ("nats-server RSS: %lld KiB idle, %lld KiB at its peak\n",
                (long long) json_integer_value (json_object_get (self->nats, "server_rss_idle_kib")),
                (long long) json_integer_value (json_object_get (self->nats, "server_hwm_kib")));
    if (self->run [S_PART_CURVE])
        s_print_curve (self);
    if (self->run [S_PART_STATS])
        s_print_stats (self);
    if (self->run [S_PART_AUDIT])
        s_print_audit (self);
    if (self->run [S_PART_PINS])
        s_print_pins (self);
    if (self->run [S_PART_TRACE])
        s_print_trace (self);
    if (self->run [S_PART_LIMIT])
        s_print_limit (self);
    if (self->run [S_PART_SCALE])
        printf ("\nscale (%d components x %d tools, %d subscribers):\n", self->plan.components, self->plan.tools,
                S_SUBSCRIBERS);
    const char *key;
    json_t *value;
    json_object_foreach (self->scale, key, value)
        if (json_is_integer (value))
            printf ("  %-26s %12lld\n", key, (long long) json_integer_value (value));
        else
            printf ("  %-26s %12.2f\n", key, json_number_value (value));
    if (self->run [S_PART_SWARM])
        s_print_swarm (self);
    if (json_array_size (targets))
        printf ("\ntargets of issues 10, 14, 24, 25, 26 and 28 (reported, never asserted):\n");
    size_t index;
    json_array_foreach (targets, index, value) {
        const char *verdict = json_string_value (json_object_get (value, "verdict"));
        printf ("  [%-6s] %-66s", streq (verdict, "missed")? "MISSED": streq (verdict, "met")? "met": "--",
                json_string_value (json_object_get (value, "target")));
        if (json_is_null (json_object_get (value, "value")))
            printf (" not measured\n");
        else
            printf (" %9.2f (%s %.2f)\n", json_real_value (json_object_get (value, "value")),
                    json_string_value (json_object_get (value, "comparison")),
                    json_real_value (json_object_get (value, "limit")));
    }
    if (!self->sane)
        printf ("\nFAILED: %s\n", self->failures);
}

//  The CURVE part: each row with every layout's figure and the two ratios
//  (CURVE over plain), or null where not run.
static json_t *
s_curve_json (s_bench_t *self)
{
    if (!self->run [S_PART_CURVE])
        return json_null ();
    json_t *calls = json_array ();
    for (size_t index = 0; index < S_CURVE_ROWS; index++) {
        const s_curve_row_t *row = &self->curve_rows [index];
        json_t *item = json_pack ("{s:s, s:i, s:i, s:i}", "figure", row->figure, "payload", (json_int_t) row->payload,
                                  "replicas", 1, "inflight", row->inflight);
        for (int layout = 0; layout < S_CURVE_LAYOUTS; layout++)
            json_object_set_new (item, s_curve_layout_keys [layout], json_real (row->value [layout]));
        for (int plain = 0; plain < S_CURVE_LAYOUTS; plain += 2) {
            char key [32];
            snprintf (key, sizeof (key), "%s_ratio", s_curve_layout_keys [plain + 1]);
            bool measured = row->value [plain] > 0 && row->value [plain + 1] > 0;
            json_object_set_new (item, key, measured? json_real (row->value [plain + 1] / row->value [plain])
                                                    : json_null ());
            snprintf (key, sizeof (key), "%s_ratio_rounds", s_curve_layout_keys [plain + 1]);
            json_object_set_new (item, key, measured? json_pack ("[f, f]", row->ratio_low [plain / 2],
                                                                 row->ratio_high [plain / 2]): json_null ());
        }
        json_array_append_new (calls, item);
    }
    return json_pack ("{s:s, s:i, s:f, s:o}", "agent_sent", S_CURVE_AGENT, "rounds", S_CURVE_ROUNDS,
                      "seconds", self->curve_seconds, "calls", calls);
}

static json_t *
s_stats_json (s_bench_t *self)
{
    if (!self->run [S_PART_STATS])
        return json_null ();
    json_t *figures = json_array ();
    for (size_t index = 0; index < S_STATS_FIGURES; index++) {
        const s_stats_row_t *row = &self->stats_rows [index];
        bool measured = row->value [S_STATS_ON] > 0 && row->value [S_STATS_OFF] > 0;
        json_array_append_new (figures, json_pack ("{s:s, s:i, s:i, s:f, s:f, s:o, s:o}", "figure", row->figure,
                                                   "payload", 64, "inflight", row->inflight,
                                                   "stats_on", row->value [S_STATS_ON],
                                                   "stats_off", row->value [S_STATS_OFF],
                                                   "ratio", measured? json_real (row->value [S_STATS_ON]
                                                                                 / row->value [S_STATS_OFF])
                                                                    : json_null (),
                                                   "ratio_rounds", measured? json_pack ("[f, f]", row->ratio_low,
                                                                                        row->ratio_high)
                                                                           : json_null ()));
    }
    return json_pack ("{s:i, s:f, s:o}", "rounds", S_STATS_ROUNDS, "seconds", self->stats_seconds, "calls", figures);
}

//  The audit part: each row with every layout's figure and each audited
//  one against off, SQLite's calls/s against NATS's, and each store's
//  writer and size; null where not run.
static json_t *
s_audit_json (s_bench_t *self)
{
    if (!self->run [S_PART_AUDIT])
        return json_null ();
    const s_audit_store_t *stores = self->audit_stores;
    json_t *calls = json_array ();
    for (size_t index = 0; index < S_AUDIT_ROWS; index++) {
        const s_audit_row_t *row = &self->audit_rows [index];
        json_t *item = json_pack ("{s:s, s:i, s:i, s:i, s:s}", "figure", row->figure, "payload", (json_int_t) row->payload,
                                  "replicas", 1, "inflight", row->inflight,
                                  "vs_off", row->difference? "difference": "ratio");
        for (int which = 0; which < S_AUDIT_LAYOUTS; which++) {
            bool measured = stores [which].measured && row->value [which] > 0;
            json_object_set_new (item, s_audit_layout_keys [which], measured? json_real (row->value [which]): json_null ());
        }
        for (int which = S_AUDIT_SQLITE; which < S_AUDIT_LAYOUTS; which++) {
            double compared = s_audit_compare (row, row->value [which], row->value [S_AUDIT_OFF]);
            bool ranged = !isnan (compared) && row->compare_low [which] <= row->compare_high [which];
            char key [48];
            snprintf (key, sizeof (key), "%s_vs_off", s_audit_layout_keys [which]);
            json_object_set_new (item, key, isnan (compared)? json_null (): json_real (compared));
            snprintf (key, sizeof (key), "%s_vs_off_rounds", s_audit_layout_keys [which]);
            json_object_set_new (item, key, ranged? json_pack ("[f, f]", row->compare_low [which],
                                                               row->compare_high [which]): json_null ());
        }
        json_array_append_new (calls, item);
    }
    json_t *vs_nats = json_array ();
    for (size_t payload = 0; payload < S_PAYLOADS; payload++) {
        double ratio = s_audit_vs_nats (self, payload);
        json_array_append_new (vs_nats, json_pack ("{s:i, s:i, s:o}", "payload", (json_int_t) s_payloads [payload],
                                                   "inflight", 64, "sqlite_vs_nats",
                                                   ratio > 0? json_real (ratio): json_null ()));
    }
    json_t *json_stores = json_object ();
    for (int which = S_AUDIT_SQLITE; which < S_AUDIT_LAYOUTS; which++) {
        const s_audit_store_t *store = &stores [which];
        json_t *item;
        if (!store->measured)
            item = json_pack ("{s:s, s:s}", "status", "skipped", "reason", store->reason);
        else {
            item = json_pack ("{s:s, s:s, s:I, s:I, s:I, s:b, s:I}", "status", "measured", "location", store->location,
                              "records", (json_int_t) store->counts.records,
                              "refused", (json_int_t) store->counts.refused,
                              "dropped", (json_int_t) store->counts.dropped, "healthy", store->counts.healthy,
                              "write_us_max", (json_int_t) store->counts.write_us_max);
            json_object_set_new (item, "bytes", store->bytes >= 0? json_integer (store->bytes): json_null ());
            json_object_set_new (item, "bytes_are", json_string (
                which == S_AUDIT_POSTGRES? "pg_total_relation_size of dsh_audit (its indexes and TOAST)":
                store->checkpointed? "the file and its -wal after PRAGMA wal_checkpoint(TRUNCATE)":
                                     "the file and its -wal as is (a checkpoint could not finish)"));
            json_object_set_new (item, "bytes_per_million_calls", store->bytes >= 0 && store->counts.records?
                json_real ((double) store->bytes * 1e6 / (double) store->counts.records): json_null ());
            json_t *payloads = json_array ();
            for (size_t payload = 0; payload < S_PAYLOADS; payload++) {
                json_t *figures = s_audit_writer_json (&store->payloads [payload]);
                json_object_set_new (figures, "payload", json_integer ((json_int_t) s_payloads [payload]));
                json_array_append_new (payloads, figures);
            }
            json_object_set_new (item, "payloads", payloads);
        }
        json_object_set_new (json_stores, s_audit_layout_keys [which], item);
    }
    return json_pack ("{s:i, s:f, s:o, s:o, s:o}", "rounds", S_AUDIT_ROUNDS, "seconds", self->audit_seconds,
                      "calls", calls, "vs_nats", vs_nats, "stores", json_stores);
}

//  The pins part: each row with every layout's figure and the two
//  comparisons with their ranges over the rounds, NATS's calls/s of this
//  run, and the grant; null where not run.
static json_t *
s_pins_json (s_bench_t *self)
{
    if (!self->run [S_PART_PINS])
        return json_null ();
    json_t *calls = json_array ();
    for (size_t index = 0; index < S_PINS_ROWS; index++) {
        const s_pins_row_t *row = &self->pins_rows [index];
        json_t *item = json_pack ("{s:s, s:i, s:i, s:i}", "figure", row->figure, "payload", (json_int_t) row->payload,
                                  "replicas", 1, "inflight", row->inflight);
        for (int which = 0; which < S_PINS_LAYOUTS; which++)
            json_object_set_new (item, s_pins_layout_keys [which],
                                 row->value [which] > 0? json_real (row->value [which]): json_null ());
        for (int compared = 0; compared < S_PINS_COMPARISONS; compared++) {
            double ratio = s_pins_compare (row, compared);
            char key [48];
            json_object_set_new (item, s_pins_comparisons [compared].key, ratio > 0? json_real (ratio): json_null ());
            snprintf (key, sizeof (key), "%s_rounds", s_pins_comparisons [compared].key);
            json_object_set_new (item, key, ratio > 0 && row->ratio_low [compared] > 0?
                json_pack ("[f, f]", row->ratio_low [compared], row->ratio_high [compared]): json_null ());
        }
        json_array_append_new (calls, item);
    }
    json_t *nats = json_array ();
    for (size_t payload = 0; payload < S_PAYLOADS; payload++) {
        double rate = s_pins_nats (self, payload);
        double tofu = s_pins_row (self, "calls_per_s", s_payloads [payload])->value [S_PINS_TOFU];
        json_array_append_new (nats, json_pack ("{s:i, s:i, s:o, s:o}", "payload", (json_int_t) s_payloads [payload],
                                                "inflight", 64, "nats_calls_per_s",
                                                rate > 0? json_real (rate): json_null (), "tofu_vs_nats",
                                                rate > 0 && tofu > 0? json_real (tofu / rate): json_null ()));
    }
    const s_pins_grant_t *grant = &self->pins_grant;
    json_t *json_grant = json_pack ("{s:o, s:s, s:s, s:s, s:i, s:b, s:b, s:I}", "id",
                                    grant->id [0]? json_string (grant->id): json_null (), "stage", S_PINS_STAGE,
                                    "agent", S_CURVE_AGENT, "tool", "echo", "minutes", 60,
                                    "listed_before", grant->listed_before, "listed_after", grant->listed_after,
                                    "asked_during_run", (json_int_t) grant->asked);
    return json_pack ("{s:i, s:f, s:o, s:o, s:o}", "rounds", S_PINS_ROUNDS, "seconds", self->pins_seconds,
                      "calls", calls, "nats", nats, "grant", json_grant);
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
            bool absent = variant == S_NATS && self->nats_dropped;
            json_object_set_new (item, s_variant_keys [variant], absent? json_null (): json_real (row->value [variant]));
            if (variant != S_RAW) {
                char key [32];
                snprintf (key, sizeof (key), "%s_ratio", s_variant_keys [variant]);
                json_object_set_new (item, key, absent? json_null (): json_real (s_ratio (row, variant, S_RAW)));
            }
        }
        json_object_set_new (item, "dsh_vs_nats", self->nats_dropped? json_null ():
                                                  json_real (s_ratio (row, S_DSH, S_NATS)));
        json_array_append_new (calls, item);
    }
    json_t *swarm = self->run [S_PART_SWARM]?
        json_pack ("{s:f, s:O, s:{s:i, s:i, s:i}, s:O}", "seconds", self->swarm_seconds, "files", self->swarm_files,
                   "plan", "drive_s", self->swarm_plan.drive_s, "idle_s", self->swarm_plan.idle_s,
                   "cycles", self->swarm_plan.cycles, "settings", self->swarm): json_null ();
    return json_pack ("{s:o, s:s, s:o, s:O, s:o, s:o, s:o, s:o, s:o, s:o, s:O, s:o, s:O, s:b, s:s}", "machine",
                      json_incref (machine), "mode", self->plan.quick? "quick": "full", "calls", calls, "nats", self->nats,
                      "curve", s_curve_json (self), "stats", s_stats_json (self), "audit", s_audit_json (self),
                      "pins", s_pins_json (self), "trace", s_trace_json (self),
                      "limit", s_limit_json (self), "scale", self->scale, "swarm", swarm, "targets", targets, "sane", self->sane,
                      "failures", self->failures);
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
    target->stamp = inflight > 1;
    s_run (target, payload, inflight < 8? inflight: 8, S_DRIVE_WARMUP, 2000, NULL, NULL);
    target->errors = 0;
    target->broker_gone = 0;
    target->replies = 0;
    target->sent = 0;
    target->round_trip_count = 0;
    int64_t started = zclock_usecs ();
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
    double elapsed = (double) (zclock_usecs () - started) / 1e6;
    //  tests/mcp/bench.mjs reads the line up to "errors"
    printf ("drive: %.1f calls/s, %d in flight, %zu B, %" PRIu64 " errors, %" PRIu64 " calls after %d to warm up"
            "%s%s\n", rate, inflight, s_payloads [payload], target->errors, target->replies, S_DRIVE_WARMUP,
            target->errors? ": ": "", target->last_error);
    if (samples && rate > 0)
        printf ("drive: latency p50 %" PRId64 " us, p99 %" PRId64 " us, %zu calls\n",
                s_percentile (samples, sample_count, 50), s_percentile (samples, sample_count, 99), sample_count);
    if (target->round_trip_count)
        printf ("drive: latency p50 %" PRId64 " us, p99 %" PRId64 " us, %zu calls\n",
                s_percentile (target->round_trips, target->round_trip_count, 50),
                s_percentile (target->round_trips, target->round_trip_count, 99), target->round_trip_count);
    //  Every reply, errors too, and whether calls were left unanswered (a
    //  reply took so long that the run stopped; calls/s above is then 0):
    //  what dsh-bench's swarm part reads beside a loaded broker
    printf ("drive: %" PRIu64 " replies in %.3f s, %" PRIu64 " BROKER_GONE, %" PRIu64 " other errors, %s\n",
            target->replies, elapsed, target->broker_gone, target->errors - target->broker_gone,
            target->replies < target->sent? "stalled": "not stalled");
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
        "usage: dsh-bench [--quick] [--json] [--only PARTS] [--full] [--settings LIST]\n"
        "       dsh-bench --drive ENDPOINT [--inflight N] [--payload BYTES] [--seconds S] [--calls N]\n"
        "       dsh-bench --limit-configs DIR\n"
        "  --quick        small counts, scale 10 x 100 tools (a few seconds)\n"
        "  --json         print the results as JSON instead of a table\n"
        "  --only PARTS   run only these, comma-separated: raw, nats, dsh, pass3, scale, curve, stats, audit,\n"
        "                 pins, trace, limit, swarm (audit: the audit trail off, on SQLite and on PostgreSQL;\n"
        "                 pins: pins off and tofu, a permission stage allowing and one asking that a grant\n"
        "                 answers; trace: the broker's tracing off, 1 %% and 100 %% sampled, to an OTLP sink;\n"
        "                 limit: a limit stage, the main job's chain; with raw and nats, against the floor\n"
        "                 and NATS)\n"
        "  DSH_BENCH_PREVIOUS_BUILD=DIR  the trace part also runs DIR/broker/dsh-broker (an earlier build)\n"
        "  --full         the swarm part's whole matrix (also DSH_BENCH_SWARM_FULL=1; 25-30 min)\n"
        "  --settings L   the swarm part's settings, a comma list of CxT:WATCHERS[:PCT/SECONDS][:BROKERS],\n"
        "                 e.g. 100x100:1000:10/10 (100 components of 100 tools, 1000 watchers, 10 %% of\n"
        "                 the components leaving and rejoining every 10 s); DSH_BENCH_SWARM_BROKER adds\n"
        "                 flags to its brokers, e.g. \"--events-queue-bytes 268435456\"\n"
        "  --drive EP     only load EP's echo tool (for profiling a broker or component);\n"
        "                 with --inflight 1 also print latency p50/p99\n"
        "  --calls N      with --drive: stop after N calls (default: only --seconds)\n"
        "  --limit-configs DIR  only write the limit part's chains (pass.cfg, limit.cfg, main.cfg) into DIR\n");
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
        { "full", no_argument, NULL, 'F' }, { "settings", required_argument, NULL, 'S' },
        { "limit-configs", required_argument, NULL, 'L' },
        { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }
    };
    bool full = getenv ("DSH_BENCH_SWARM_FULL") && streq (getenv ("DSH_BENCH_SWARM_FULL"), "1");
    const char *settings = NULL;
    const char *limit_configs = NULL;
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
            case 'F': full = true; break;
            case 'S': settings = optarg; break;
            case 'L': limit_configs = optarg; break;
            case 'h': s_usage (stdout); return 0;
            default: s_usage (stderr); return 2;
        }
    bool run [S_PARTS];
    s_swarm_setting_t swarm_settings [S_SWARM_SETTINGS_MAX];
    size_t swarm_count = 0;
    if (optind < argc || inflight < 1 || inflight > 10000 || seconds < 1 || payload < 1
    ||  calls < 0 || s_parse_only (only, run)
    ||  (settings && s_swarm_parse (settings, swarm_settings, &swarm_count))) {
        s_usage (stderr);
        return 2;
    }
    if (!settings) {
        const s_swarm_setting_t *chosen = quick? s_swarm_quick: full? s_swarm_full: s_swarm_default;
        swarm_count = quick? sizeof (s_swarm_quick) / sizeof (s_swarm_quick [0]):
                      full? sizeof (s_swarm_full) / sizeof (s_swarm_full [0]):
                            sizeof (s_swarm_default) / sizeof (s_swarm_default [0]);
        memcpy (swarm_settings, chosen, swarm_count * sizeof (s_swarm_setting_t));
    }
    zsys_init ();
    zsys_set_logstream (stderr);
    //  A child's pipe may close under us while we stop it
    signal (SIGPIPE, SIG_IGN);
    s_find_build_dir ();
    //  The limit part reads the main job's config from the source tree:
    //  the build directory's parent, unless meson or the caller said
    if (!getenv ("DSH_SOURCE_DIR") && getenv ("DSH_BUILD_DIR")) {
        char *source = zsys_sprintf ("%s/..", getenv ("DSH_BUILD_DIR"));
        char *config = zsys_sprintf ("%s/deploy/dsh-broker.cfg", source);
        if (access (config, R_OK) == 0)
            setenv ("DSH_SOURCE_DIR", source, 1);
        zstr_free (&config);
        zstr_free (&source);
    }
    if (drive)
        return s_drive (drive, inflight, (size_t) payload, seconds, calls);
    if (limit_configs) {
        //  The limit part's chains, for tests/bench/profile_limit_trace.sh
        s_bench_t bench = { .sane = true };
        char error [512];
        if (s_limit_configs (&bench, limit_configs, error, sizeof (error))) {
            fprintf (stderr, "dsh-bench: %s\n", error);
            return 1;
        }
        printf ("%s\n", bench.limit_source);
        return 0;
    }
    //  The bench decides where CURVE is on: keys in the environment would
    //  turn it on in every broker, component and client it starts
    unsetenv ("DSH_CERT");
    unsetenv ("DSH_BROKER_CERT");
    //  and where tracing is on: only in the trace part's brokers
    s_otel_clear ();
    //  Every broker's audit store in a directory of the run's own, unless
    //  the caller chose one, so a run does not grow ~/.local/state
    char state_dir [64] = "";
    if (!getenv ("DSH_STATE_DIR") || !*getenv ("DSH_STATE_DIR")) {
        snprintf (state_dir, sizeof (state_dir), "/tmp/dsh-bench-state-XXXXXX");
        if (mkdtemp (state_dir))
            setenv ("DSH_STATE_DIR", state_dir, 1);
        else {
            fprintf (stderr, "dsh-bench: cannot make a state directory (%s): the brokers keep their audit in the "
                     "default one\n", strerror (errno));
            state_dir [0] = 0;
        }
    }

    s_bench_t *self = (s_bench_t *) zmalloc (sizeof (s_bench_t));
    assert (self);
    self->sane = true;
    self->scale = json_object ();
    memcpy (self->run, run, sizeof (run));
    memcpy (self->swarm_settings, swarm_settings, sizeof (swarm_settings));
    self->swarm_count = swarm_count;
    self->swarm_plan = quick? (s_swarm_plan_t) { 1, 1, 1 }: full? (s_swarm_plan_t) { 5, 10, 2 }:
                                                   (s_swarm_plan_t) { 3, 5, 1 };
    self->swarm = json_array ();
    self->swarm_files = json_object ();
    s_curve_rows_init (self);
    s_audit_init (self);
    s_pins_init (self);
    s_turns_init (&self->trace, "trace", S_TRACE_LAYOUTS, s_trace_layout_names, s_trace_layout_keys,
                  S_TRACE_COMPARISONS, s_trace_comparisons, S_TRACE_ROUNDS);
    s_turns_init (&self->limit, "limit", S_LIMIT_LAYOUTS, s_limit_layout_names, s_limit_layout_keys,
                  S_LIMIT_COMPARISONS, s_limit_comparisons, S_LIMIT_ROUNDS);
    self->nats = json_pack ("{s:s, s:s}", "status", "not run", "reason",
                            run [S_NATS]? "interrupted before it ran": "not among --only's parts");
    self->nats_dropped = true;
    self->plan = quick?
        (s_plan_t) { true, 100, 300, 300, 3000, 120, 10, 100, 5, 3 }:
        (s_plan_t) { false, 2000, 5000, 3000, 300000, 2000, 100, 100, 20, 15 };
    for (int variant = 0; variant < S_VARIANTS && !zsys_interrupted; variant++) {
        if (!self->run [variant])
            continue;
        if (variant == S_RAW)
            s_bench_raw (self);
        else
        if (variant == S_NATS)
            s_bench_nats (self);
        else
            s_bench_dsh (self, variant);
    }
    if (self->run [S_PART_CURVE] && !zsys_interrupted)
        s_bench_curve (self);
    if (self->run [S_PART_STATS] && !zsys_interrupted)
        s_bench_stats (self);
    if (self->run [S_PART_AUDIT] && !zsys_interrupted)
        s_bench_audit (self);
    if (self->run [S_PART_PINS] && !zsys_interrupted)
        s_bench_pins (self);
    if (self->run [S_PART_TRACE] && !zsys_interrupted)
        s_bench_trace (self);
    if (self->run [S_PART_LIMIT] && !zsys_interrupted)
        s_bench_limit (self);
    if (self->run [S_PART_SCALE] && !zsys_interrupted)
        s_bench_scale (self);
    if (self->run [S_PART_SWARM] && !zsys_interrupted)
        s_bench_swarm (self);

    //  Sanity: every figure of what ran there and positive; a NATS figure
    //  missing drops the NATS column instead
    bool rows_expected = !self->nats_dropped;
    for (int variant = 0; variant < S_VARIANTS; variant++)
        if (variant != S_NATS && self->run [variant])
            rows_expected = true;
    for (size_t index = 0; index < self->row_count; index++)
        for (int variant = 0; variant < S_VARIANTS; variant++) {
            double value = self->rows [index].value [variant];
            if (!self->run [variant] || (variant == S_NATS && self->nats_dropped) || (value > 0 && isfinite (value)))
                continue;
            char label [80];
            s_figure_label (&self->rows [index], label, sizeof (label));
            if (variant == S_NATS)
                s_nats_skip (self, "%s missing", label);
            else
                s_fail (self, "%s: %s missing", s_variant_names [variant], label);
        }
    for (size_t index = 0; self->run [S_PART_CURVE] && index < S_CURVE_ROWS; index++)
        for (int layout = 0; layout < S_CURVE_LAYOUTS; layout++) {
            const s_curve_row_t *row = &self->curve_rows [index];
            if (!(row->value [layout] > 0 && isfinite (row->value [layout]))) {
                s_fail (self, "%s: %s, %d in flight, %zu B missing", s_curve_layout_names [layout], row->figure,
                        row->inflight, row->payload);
                break;
            }
        }
    for (size_t index = 0; self->run [S_PART_STATS] && index < S_STATS_FIGURES; index++)
        for (int which = 0; which < 2; which++) {
            const s_stats_row_t *row = &self->stats_rows [index];
            if (!(row->value [which] > 0 && isfinite (row->value [which]))) {
                s_fail (self, "%s: %s, %d in flight missing", s_stats_layout_names [which], row->figure,
                        row->inflight);
                break;
            }
        }
    for (size_t index = 0; self->run [S_PART_AUDIT] && index < S_AUDIT_ROWS; index++)
        for (int which = 0; which < S_AUDIT_LAYOUTS; which++) {
            const s_audit_row_t *row = &self->audit_rows [index];
            //  PostgreSQL's column is there only if its server started
            if (!self->audit_stores [which].measured && which == S_AUDIT_POSTGRES)
                continue;
            if (!(row->value [which] > 0 && isfinite (row->value [which]))) {
                s_fail (self, "%s: %s, %d in flight, %zu B missing", s_audit_layout_names [which], row->figure,
                        row->inflight, row->payload);
                break;
            }
        }
    for (size_t index = 0; self->run [S_PART_PINS] && index < S_PINS_ROWS; index++)
        for (int which = 0; which < S_PINS_LAYOUTS; which++) {
            const s_pins_row_t *row = &self->pins_rows [index];
            if (!(row->value [which] > 0 && isfinite (row->value [which]))) {
                s_fail (self, "%s: %s, %d in flight, %zu B missing", s_pins_layout_names [which], row->figure,
                        row->inflight, row->payload);
                break;
            }
        }
    s_turns_t *turned [] = { self->run [S_PART_TRACE]? &self->trace: NULL, self->run [S_PART_LIMIT]? &self->limit: NULL };
    for (size_t part = 0; part < sizeof (turned) / sizeof (turned [0]); part++)
        for (size_t index = 0; turned [part] && index < S_PINS_FIGURES; index++)
            for (int which = 0; which < turned [part]->layouts; which++) {
                const s_turns_row_t *row = &turned [part]->rows [index];
                //  The previous build's column is there only if one was given
                if (turned [part] == &self->trace && which == S_TRACE_PREVIOUS && !self->trace.measured [which])
                    continue;
                if (!(row->value [which] > 0 && isfinite (row->value [which]))) {
                    s_fail (self, "%s: %s, %d in flight, 64 B missing", turned [part]->layout_names [which],
                            row->figure, row->inflight);
                    break;
                }
            }
    size_t expected_rows = S_PAYLOADS * 2 + S_PAYLOADS * S_INFLIGHTS * 2;
    if (rows_expected && self->row_count != expected_rows)
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
    json_decref (self->swarm);
    json_decref (self->swarm_files);
    json_decref (self->nats);
    free (self);
    s_dir_remove (state_dir);
    return rc;
}
