/*  =========================================================================
    dsh_trace - W3C trace context, spans, and their export over OTLP/HTTP

    One tracer per process. A call's context travels in CALL meta as a W3C
    traceparent (and tracestate, carried as given); every hop that takes
    part starts a span as the context's child, hands its own context on,
    and ends the span when its part is done. Ended spans go to an exporter
    thread of the tracer's own (never the caller's thread, never an actor
    loop) through a queue bounded in spans and in bytes: dsh_span_end only
    takes a mutex briefly and appends, and a full queue, or a collector that
    is down or slow, costs dropped spans (counted in dsh_trace_stats), never
    a slower caller. The thread sends batches as an OTLP
    ExportTraceServiceRequest, POSTed to <endpoint>/v1/traces with libcurl.

    Configured by the OpenTelemetry SDK's standard variables. Tracing is
    OFF unless OTEL_EXPORTER_OTLP_ENDPOINT or
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (OTEL_SDK_DISABLED=true or
    OTEL_TRACES_EXPORTER=none keep it off even then); off, dsh_span_start
    returns NULL at once, every span function takes NULL and does nothing,
    and no thread exists.

    The encoders. http/protobuf, the OTLP specification's default, is
    encoded by C that protoc-c (protobuf-c, in Debian as
    protobuf-c-compiler and libprotobuf-c-dev) generates at build time from
    the OFFICIAL opentelemetry-proto definitions vendored in schemas/otlp:
    the wire format is the definitions', not a copy of them written by
    hand, and the runtime it needs is one small C library. http/json
    (OTLP/JSON: lowerCamelCase names, ids as lower hex, 64-bit integers as
    decimal strings, enums as integers) is written with jansson, which
    libdsh already links.
    =========================================================================
*/

#ifndef DSH_TRACE_H_INCLUDED
#define DSH_TRACE_H_INCLUDED

#include <czmq.h>

#ifdef __cplusplus
extern "C" {
#endif

//  W3C trace context, level 1: traceparent is exactly
//  "00-<32 lower hex trace id>-<16 lower hex parent id>-<2 hex flags>" (55
//  bytes); an all-zero trace id or parent id is invalid. tracestate is
//  kept as given (at most 512 bytes, else dropped), never parsed.
#define DSH_TRACEPARENT_SIZE 55
#define DSH_TRACESTATE_MAX   512

typedef struct {
    byte trace_id [16];
    byte span_id [8];           //  the parent (in a received context) or this span's id
    byte flags;                 //  bit 0: sampled
    char tracestate [DSH_TRACESTATE_MAX + 1];   //  "" when none
} dsh_trace_ctx_t;

//  Parses a traceparent of size bytes (not NUL-terminated) strictly:
//  returns 0 and fills ctx (tracestate "") or -1 with ctx untouched. Version
//  00 only; a higher version is read by its first 55 bytes as the spec says.
int
    dsh_trace_parse (dsh_trace_ctx_t *ctx, const char *traceparent, size_t size);

//  Writes ctx as a traceparent into out (DSH_TRACEPARENT_SIZE + 1 bytes,
//  NUL-terminated).
void
    dsh_trace_format (const dsh_trace_ctx_t *ctx, char *out);

//  Lower hex of a trace id (33 bytes with NUL) or span id (17 bytes).
void
    dsh_trace_id_hex (const byte *id, size_t size, char *out);

bool
    dsh_trace_sampled (const dsh_trace_ctx_t *ctx);

//  ---------------------------------------------------------------------
//  The process's tracer: configured once from the standard variables
//  (OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER=otlp|none,
//  OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
//  OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf|http/json,
//  OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TRACES_HEADERS,
//  OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
//  OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_BSP_MAX_QUEUE_SIZE,
//  OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_EXPORT_BATCH_SIZE). Tracing is ON
//  only when an endpoint variable is set (off by default: then every call
//  below is a cheap no-op and no thread runs).

//  Starts the tracer from the environment; service_name is used when
//  OTEL_SERVICE_NAME is not set. Returns 0, or -1 with a clear message in
//  error (bad variable value) and tracing off. Safe to call once per process;
//  later calls return 0 and do nothing, until dsh_trace_stop: a start after
//  a stop reads the environment again (the tests do).
int
    dsh_trace_start (const char *service_name, char *error, size_t error_size);

//  Flushes what is queued (waiting at most timeout_ms; what is left then
//  is dropped and counted) and stops the export thread; tracing is off
//  after. Spans still open end as dropped. Call at exit.
void
    dsh_trace_stop (int timeout_ms);

//  True when spans are being exported (an endpoint is configured).
bool
    dsh_trace_enabled (void);

//  The sampler's decision for a new root trace (OTEL_TRACES_SAMPLER:
//  always_on, always_off, traceidratio, parentbased_always_on (default),
//  parentbased_always_off, parentbased_traceidratio), for a context with
//  parent (NULL: none) and the new trace_id. When tracing is off: false.
bool
    dsh_trace_should_sample (const dsh_trace_ctx_t *parent, const byte *trace_id);

//  Fills ctx with a new random trace id and span id (flags 0, tracestate "").
void
    dsh_trace_new_root (dsh_trace_ctx_t *ctx);

//  Exported counters, for STATS and /metrics.
typedef struct {
    uint64_t spans_ended;       //  handed to the exporter (queued or dropped)
    uint64_t spans_exported;    //  accepted by the collector
    uint64_t spans_dropped;     //  queue full, the collector failed/down, or it rejected them
    uint64_t queue_bytes;       //  now queued
    uint64_t export_failures;   //  POSTs that failed
} dsh_trace_stats_t;

void
    dsh_trace_stats (dsh_trace_stats_t *stats);

//  ---------------------------------------------------------------------
//  Spans. A span is owned by the thread that started it until it ends.

typedef struct _dsh_span_t dsh_span_t;

//  OTLP span kinds
#define DSH_SPAN_INTERNAL 1
#define DSH_SPAN_SERVER   2
#define DSH_SPAN_CLIENT   3
#define DSH_SPAN_PRODUCER 4
#define DSH_SPAN_CONSUMER 5

//  Starts a span named name, child of parent (NULL: a root with a new
//  trace id). Returns NULL when tracing is off or parent is not sampled
//  (every span function takes NULL and does nothing), so a caller never
//  tests dsh_trace_enabled itself. start_ns: the start time in ns since the
//  epoch (0: now).
dsh_span_t *
    dsh_span_start (const char *name, int kind, const dsh_trace_ctx_t *parent, int64_t start_ns);

//  Starts the root span of the trace whose id is trace_id (16 bytes), for a
//  caller that has already asked dsh_trace_should_sample about it (a
//  broker starting the trace of a call that came without one): no second
//  sampling decision, so a ratio is applied once. NULL when tracing is off.
dsh_span_t *
    dsh_span_start_root (const char *name, int kind, const byte *trace_id, int64_t start_ns);

//  This span's context (trace id, its own span id, flags, the parent's
//  tracestate): what a child is given. Safe with span NULL (ctx untouched,
//  returns -1).
int
    dsh_span_context (dsh_span_t *span, dsh_trace_ctx_t *ctx);

//  Attributes (key copied; value copied). Bounded: at most 128 attributes
//  and 4096 bytes per value (longer is truncated), as OTel limits do.
void
    dsh_span_set_str (dsh_span_t *span, const char *key, const char *value);
void
    dsh_span_set_int (dsh_span_t *span, const char *key, int64_t value);
void
    dsh_span_set_bool (dsh_span_t *span, const char *key, bool value);

//  An event at time_ns (0: now) with one optional string attribute
//  (key NULL: none).
void
    dsh_span_add_event (dsh_span_t *span, const char *name, int64_t time_ns, const char *key, const char *value);

//  Status ERROR with message, and attribute error.type = error_type
//  (the dsh error code, e.g. "TIMEOUT").
void
    dsh_span_set_error (dsh_span_t *span, const char *error_type, const char *message);

//  Renames the span (e.g. once the tool is known).
void
    dsh_span_set_name (dsh_span_t *span, const char *name);

//  Ends the span at end_ns (0: now) and hands it to the exporter; never
//  blocks (a full queue drops it and counts it). Nulls *span_p.
void
    dsh_span_end (dsh_span_t **span_p, int64_t end_ns);

//  Now, in ns since the epoch (for start/end times taken elsewhere).
int64_t
    dsh_trace_now_ns (void);

//  Fills ctx from CALL meta's two values: traceparent (size bytes, not
//  NUL-terminated) and tracestate (NULL: none; longer than
//  DSH_TRACESTATE_MAX: dropped, as the W3C spec allows). Returns 0, or -1
//  with ctx untouched when traceparent is not valid.
int
    dsh_trace_parse_meta (dsh_trace_ctx_t *ctx, const char *traceparent, size_t size,
                          const char *tracestate, size_t tracestate_size);

//  Self test
void
    dsh_trace_test (bool verbose);

#ifdef __cplusplus
}
#endif

#endif
