/*  =========================================================================
    dsh_trace - W3C trace context, spans, and their export over OTLP/HTTP
    =========================================================================
*/

#include "dsh_trace.h"
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/random.h>
#include "trace_service.pb-c.h"

#ifndef DSH_VERSION
#   define DSH_VERSION "0"
#endif

//  The OpenTelemetry SDK's span limits (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT,
//  OTEL_SPAN_EVENT_COUNT_LIMIT) at their defaults, and a value length
//  limit so that one careless attribute cannot fill the queue
#define S_MAX_ATTRIBUTES            128
#define S_MAX_EVENTS                128
#define S_MAX_VALUE_BYTES           4096
//  The batch span processor's defaults (the SDK specification's), and the
//  byte bound dsh adds: spans count alike but weigh very differently
#define S_MAX_QUEUE_SPANS           2048
#define S_MAX_QUEUE_BYTES           (8 * 1024 * 1024)
#define S_SCHEDULE_DELAY_MS         5000
#define S_MAX_BATCH_SPANS           512
#define S_EXPORT_TIMEOUT_MS         10000

typedef enum { S_ALWAYS_ON, S_ALWAYS_OFF, S_RATIO } s_sampler_t;
typedef enum { S_ATTR_STRING, S_ATTR_INT, S_ATTR_BOOL } s_attr_type_t;

typedef struct {
    char *key;
    s_attr_type_t type;
    char *string;               //  S_ATTR_STRING
    int64_t number;             //  S_ATTR_INT, and S_ATTR_BOOL as 0 or 1
} s_attr_t;

typedef struct {
    char *name;
    int64_t time_ns;
    s_attr_t attr;              //  attr.key NULL: none
} s_event_t;

struct _dsh_span_t {
    dsh_span_t *next;           //  in the export queue
    size_t bytes;               //  what it weighs in the queue, roughly
    byte trace_id [16];
    byte span_id [8];
    byte parent_id [8];
    bool has_parent;
    byte flags;
    char *tracestate;           //  NULL: none
    char *name;
    int kind;
    int64_t start_ns;
    int64_t end_ns;
    s_attr_t *attrs;
    size_t attr_count;
    size_t attr_max;
    uint32_t dropped_attrs;
    s_event_t *events;
    size_t event_count;
    size_t event_max;
    uint32_t dropped_events;
    bool error;
    char *status_message;
};

//  What the environment said, fixed from dsh_trace_start to dsh_trace_stop
typedef struct {
    s_sampler_t sampler;
    bool parent_based;
    double ratio;
    char *url;
    bool json;
    struct curl_slist *headers;
    int timeout_ms;
    size_t max_queue_spans;
    size_t max_queue_bytes;
    int schedule_delay_ms;
    size_t max_batch_spans;
    s_attr_t *resource;
    size_t resource_count;
} s_config_t;

//  The process's one tracer. The mutex guards the queue, the stop request
//  and the counters; the configuration is written only while no exporter
//  runs, and the hot path reads just `enabled` and the sampler.
static struct {
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    bool started;
    atomic_bool enabled;
    s_config_t config;
    pthread_t thread;
    dsh_span_t *head;
    dsh_span_t *tail;
    size_t count;
    size_t bytes;
    bool stopping;
    int64_t stop_deadline_ms;
    dsh_trace_stats_t stats;
} s_tracer = { .mutex = PTHREAD_MUTEX_INITIALIZER };


//  ---------------------------------------------------------------------
//  W3C trace context

static int
s_hex_value (char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;                  //  upper case hex is invalid in traceparent
}

//  size bytes from 2 * size lower hex digits, refusing all zeros
static int
s_hex_decode (const char *hex, byte *out, size_t size, bool zero_ok)
{
    bool zero = true;
    for (size_t index = 0; index < size; index++) {
        int high = s_hex_value (hex [2 * index]);
        int low = s_hex_value (hex [2 * index + 1]);
        if (high < 0 || low < 0)
            return -1;
        out [index] = (byte) (high << 4 | low);
        if (out [index])
            zero = false;
    }
    return zero && !zero_ok? -1: 0;
}

int
dsh_trace_parse (dsh_trace_ctx_t *ctx, const char *traceparent, size_t size)
{
    assert (ctx);
    if (!traceparent || size < DSH_TRACEPARENT_SIZE)
        return -1;
    byte version;
    if (s_hex_decode (traceparent, &version, 1, true) || version == 0xff)
        return -1;
    //  Version 00 is exactly 55 bytes; a later version may append fields
    //  after a '-', and is read by the fields version 00 defines
    if (version == 0 && size != DSH_TRACEPARENT_SIZE)
        return -1;
    if (version > 0 && size > DSH_TRACEPARENT_SIZE && traceparent [DSH_TRACEPARENT_SIZE] != '-')
        return -1;
    if (traceparent [2] != '-' || traceparent [35] != '-' || traceparent [52] != '-')
        return -1;
    dsh_trace_ctx_t parsed;
    if (s_hex_decode (traceparent + 3, parsed.trace_id, 16, false)
    ||  s_hex_decode (traceparent + 36, parsed.span_id, 8, false)
    ||  s_hex_decode (traceparent + 53, &parsed.flags, 1, true))
        return -1;
    parsed.tracestate [0] = 0;
    *ctx = parsed;
    return 0;
}

int
dsh_trace_parse_meta (dsh_trace_ctx_t *ctx, const char *traceparent, size_t size,
                      const char *tracestate, size_t tracestate_size)
{
    assert (ctx);
    dsh_trace_ctx_t parsed;
    if (dsh_trace_parse (&parsed, traceparent, size))
        return -1;
    if (tracestate && tracestate_size <= DSH_TRACESTATE_MAX
    &&  !memchr (tracestate, 0, tracestate_size)) {
        memcpy (parsed.tracestate, tracestate, tracestate_size);
        parsed.tracestate [tracestate_size] = 0;
    }
    *ctx = parsed;
    return 0;
}

void
dsh_trace_id_hex (const byte *id, size_t size, char *out)
{
    assert (id);
    assert (out);
    static const char digits [] = "0123456789abcdef";
    for (size_t index = 0; index < size; index++) {
        out [2 * index] = digits [id [index] >> 4];
        out [2 * index + 1] = digits [id [index] & 15];
    }
    out [2 * size] = 0;
}

void
dsh_trace_format (const dsh_trace_ctx_t *ctx, char *out)
{
    assert (ctx);
    assert (out);
    memcpy (out, "00-", 3);
    dsh_trace_id_hex (ctx->trace_id, 16, out + 3);
    out [35] = '-';
    dsh_trace_id_hex (ctx->span_id, 8, out + 36);
    out [52] = '-';
    dsh_trace_id_hex (&ctx->flags, 1, out + 53);
}

bool
dsh_trace_sampled (const dsh_trace_ctx_t *ctx)
{
    return ctx && (ctx->flags & 1);
}

//  Random ids from the kernel's CSPRNG (getrandom), drawn a block at a
//  time per thread: one system call per 21 spans, not two per span. A
//  forked child starts a fresh block, so it never repeats its parent's ids.
#define S_RANDOM_BLOCK 512
static __thread byte s_random_block [S_RANDOM_BLOCK];
static __thread size_t s_random_left;
static pthread_once_t s_random_once = PTHREAD_ONCE_INIT;

static void
s_random_forget (void)
{
    s_random_left = 0;
}

static void
s_random_at_fork (void)
{
    pthread_atfork (NULL, NULL, s_random_forget);
}

static void
s_random_fill (byte *out, size_t size)
{
    pthread_once (&s_random_once, s_random_at_fork);
    if (s_random_left < size) {
        size_t filled = 0;
        while (filled < S_RANDOM_BLOCK) {
            ssize_t rc = getrandom (s_random_block + filled, S_RANDOM_BLOCK - filled, 0);
            if (rc > 0)
                filled += (size_t) rc;
            else
                assert (errno == EINTR);
        }
        s_random_left = S_RANDOM_BLOCK;
    }
    byte *from = s_random_block + S_RANDOM_BLOCK - s_random_left;
    memcpy (out, from, size);
    //  a block's bytes are used once
    memset (from, 0, size);
    s_random_left -= size;
}

//  An all-zero id is invalid and drawn again
static void
s_random_id (byte *id, size_t size)
{
    while (true) {
        s_random_fill (id, size);
        for (size_t index = 0; index < size; index++)
            if (id [index])
                return;
    }
}

void
dsh_trace_new_root (dsh_trace_ctx_t *ctx)
{
    assert (ctx);
    s_random_id (ctx->trace_id, 16);
    s_random_id (ctx->span_id, 8);
    ctx->flags = 0;
    ctx->tracestate [0] = 0;
}

int64_t
dsh_trace_now_ns (void)
{
    struct timespec now;
    clock_gettime (CLOCK_REALTIME, &now);
    return (int64_t) now.tv_sec * 1000000000 + now.tv_nsec;
}


//  ---------------------------------------------------------------------
//  Strings that go out: valid UTF-8 (protobuf's string and JSON both
//  require it), at most max_bytes, cut on a character boundary. An invalid
//  byte becomes U+FFFD.

static char *
s_utf8_copy (const char *text, size_t max_bytes)
{
    size_t size = strlen (text);
    const byte *in = (const byte *) text;
    //  The usual case, names and ids: ASCII that fits, copied as it is
    size_t ascii = 0;
    while (ascii < size && in [ascii] < 0x80)
        ascii++;
    if (ascii == size && size <= max_bytes) {
        char *copy = (char *) malloc (size + 1);
        assert (copy);
        memcpy (copy, text, size + 1);
        return copy;
    }
    char *copy = (char *) malloc (3 * size + 1);
    assert (copy);
    size_t used = 0;
    size_t index = 0;
    while (index < size) {
        byte lead = in [index];
        size_t length = lead < 0x80? 1: (lead & 0xe0) == 0xc0? 2: (lead & 0xf0) == 0xe0? 3: (lead & 0xf8) == 0xf0? 4: 0;
        bool valid = length > 0 && index + length <= size;
        for (size_t next = 1; valid && next < length; next++)
            valid = (in [index + next] & 0xc0) == 0x80;
        if (valid && length > 1) {
            //  no overlong forms, surrogates or code points past U+10FFFF
            uint32_t point = lead & (0xff >> (length + 1));
            for (size_t next = 1; next < length; next++)
                point = point << 6 | (in [index + next] & 0x3f);
            uint32_t least = length == 2? 0x80: length == 3? 0x800: 0x10000;
            valid = point >= least && point <= 0x10ffff && (point < 0xd800 || point > 0xdfff);
        }
        const char *piece = valid? text + index: "\xef\xbf\xbd";
        size_t piece_size = valid? length: 3;
        if (used + piece_size > max_bytes)
            break;
        memcpy (copy + used, piece, piece_size);
        used += piece_size;
        index += valid? length: 1;
    }
    copy [used] = 0;
    return copy;
}


//  ---------------------------------------------------------------------
//  The environment

//  An empty variable counts as unset, as the SDK specification says
static const char *
s_env (const char *name)
{
    const char *value = getenv (name);
    return value && *value? value: NULL;
}

static const char *
s_env2 (const char *specific, const char *general)
{
    const char *value = s_env (specific);
    return value? value: s_env (general);
}

static int
s_env_int (const char *name, long fallback, long least, long most, long *value,
           char *error, size_t error_size)
{
    const char *text = s_env (name);
    *value = fallback;
    if (!text)
        return 0;
    char *end;
    errno = 0;
    long parsed = strtol (text, &end, 10);
    if (errno || *end || end == text || parsed < least || parsed > most) {
        snprintf (error, error_size, "%s=%s: not a whole number from %ld to %ld", name, text, least, most);
        return -1;
    }
    *value = parsed;
    return 0;
}

//  Percent-decodes [text, text + size) into a new string; NULL when a '%'
//  is not followed by two hex digits or the result holds a NUL
static char *
s_percent_decode (const char *text, size_t size)
{
    char *decoded = (char *) malloc (size + 1);
    assert (decoded);
    size_t used = 0;
    for (size_t index = 0; index < size; index++) {
        if (text [index] != '%') {
            decoded [used++] = text [index];
            continue;
        }
        byte value;
        char pair [2];
        if (index + 2 >= size) {
            free (decoded);
            return NULL;
        }
        pair [0] = (char) tolower ((byte) text [index + 1]);
        pair [1] = (char) tolower ((byte) text [index + 2]);
        if (s_hex_decode (pair, &value, 1, false)) {
            free (decoded);
            return NULL;
        }
        decoded [used++] = (char) value;
        index += 2;
    }
    decoded [used] = 0;
    return decoded;
}

static void
s_trim (const char **start, const char **end)
{
    while (*start < *end && isspace ((byte) **start))
        (*start)++;
    while (*end > *start && isspace ((byte) (*end) [-1]))
        (*end)--;
}

//  A W3C-baggage-like list "key1=value1,key2=value2" (values
//  percent-encoded), as OTEL_EXPORTER_OTLP_HEADERS and
//  OTEL_RESOURCE_ATTRIBUTES hold, into map (a later key replaces)
static int
s_kv_parse (const char *name, const char *text, zhashx_t *map, char *error, size_t error_size)
{
    const char *cursor = text;
    while (*cursor) {
        const char *end = strchr (cursor, ',');
        if (!end)
            end = cursor + strlen (cursor);
        const char *equals = memchr (cursor, '=', (size_t) (end - cursor));
        const char *key_start = cursor, *key_end = equals? equals: end;
        s_trim (&key_start, &key_end);
        if (!equals && key_start == key_end)
            ;                   //  an empty entry, as after a trailing comma
        else
        if (!equals || key_start == key_end) {
            snprintf (error, error_size, "%s: '%.*s' is not key=value", name, (int) (end - cursor), cursor);
            return -1;
        }
        else {
            const char *value_start = equals + 1, *value_end = end;
            s_trim (&value_start, &value_end);
            char *key = s_percent_decode (key_start, (size_t) (key_end - key_start));
            char *value = s_percent_decode (value_start, (size_t) (value_end - value_start));
            if (!key || !value) {
                snprintf (error, error_size, "%s: '%.*s' has a bad %% escape", name, (int) (end - cursor), cursor);
                free (key);
                free (value);
                return -1;
            }
            zhashx_update (map, key, value);
            free (key);
            free (value);
        }
        cursor = *end? end + 1: end;
    }
    return 0;
}

static zhashx_t *
s_kv_map_new (void)
{
    zhashx_t *map = zhashx_new ();
    assert (map);
    zhashx_set_destructor (map, (zhashx_destructor_fn *) zstr_free);
    zhashx_set_duplicator (map, (zhashx_duplicator_fn *) strdup);
    return map;
}

//  An HTTP header name is a token; a value must not break the request
static bool
s_header_ok (const char *key, const char *value)
{
    for (const char *c = key; *c; c++)
        if (!isalnum ((byte) *c) && !strchr ("!#$%&'*+-.^_`|~", *c))
            return false;
    return !strpbrk (value, "\r\n");
}

static int
s_config_headers (s_config_t *config, char *error, size_t error_size)
{
    zhashx_t *map = s_kv_map_new ();
    const char *general = s_env ("OTEL_EXPORTER_OTLP_HEADERS");
    const char *specific = s_env ("OTEL_EXPORTER_OTLP_TRACES_HEADERS");
    int rc = 0;
    if (general)
        rc = s_kv_parse ("OTEL_EXPORTER_OTLP_HEADERS", general, map, error, error_size);
    if (rc == 0 && specific)
        rc = s_kv_parse ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", specific, map, error, error_size);
    const char *content_type = config->json? "Content-Type: application/json": "Content-Type: application/x-protobuf";
    config->headers = curl_slist_append (NULL, content_type);
    //  No "Expect: 100-continue" round trip before a large batch
    config->headers = curl_slist_append (config->headers, "Expect:");
    for (const char *value = (const char *) zhashx_first (map); rc == 0 && value;
         value = (const char *) zhashx_next (map)) {
        const char *key = (const char *) zhashx_cursor (map);
        if (!s_header_ok (key, value) || streq (key, "") || strcasecmp (key, "content-type") == 0) {
            snprintf (error, error_size, "OTLP header '%s' is not a header dsh can send", key);
            rc = -1;
            break;
        }
        char *line = zsys_sprintf ("%s: %s", key, value);
        config->headers = curl_slist_append (config->headers, line);
        zstr_free (&line);
    }
    zhashx_destroy (&map);
    return rc;
}

static void
s_attr_set (s_attr_t *attr, const char *key, s_attr_type_t type, const char *string, int64_t number)
{
    free (attr->key);
    free (attr->string);
    attr->key = s_utf8_copy (key, S_MAX_VALUE_BYTES);
    attr->type = type;
    attr->string = string? s_utf8_copy (string, S_MAX_VALUE_BYTES): NULL;
    attr->number = number;
}

static void
s_attr_clear (s_attr_t *attr)
{
    free (attr->key);
    free (attr->string);
    attr->key = NULL;
    attr->string = NULL;
}

static void
s_resource_set (s_config_t *config, const char *key, s_attr_type_t type, const char *string, int64_t number)
{
    size_t index;
    for (index = 0; index < config->resource_count; index++)
        if (streq (config->resource [index].key, key))
            break;
    if (index == config->resource_count) {
        config->resource = (s_attr_t *) realloc (config->resource, (index + 1) * sizeof (s_attr_t));
        assert (config->resource);
        memset (&config->resource [index], 0, sizeof (s_attr_t));
        config->resource_count++;
    }
    s_attr_set (&config->resource [index], key, type, string, number);
}

//  The resource every span of this process shares: the SDK's own
//  attributes, OTEL_RESOURCE_ATTRIBUTES over them, OTEL_SERVICE_NAME over
//  service.name, else the caller's name
static int
s_config_resource (s_config_t *config, const char *service_name, char *error, size_t error_size)
{
    zhashx_t *map = s_kv_map_new ();
    const char *attributes = s_env ("OTEL_RESOURCE_ATTRIBUTES");
    if (attributes && s_kv_parse ("OTEL_RESOURCE_ATTRIBUTES", attributes, map, error, error_size)) {
        zhashx_destroy (&map);
        return -1;
    }
    const char *name = s_env ("OTEL_SERVICE_NAME");
    if (!name)
        name = (const char *) zhashx_lookup (map, "service.name");
    if (!name)
        name = service_name && *service_name? service_name: "unknown_service";
    s_resource_set (config, "service.name", S_ATTR_STRING, name, 0);
    zuuid_t *instance = zuuid_new ();
    s_resource_set (config, "service.instance.id", S_ATTR_STRING, zuuid_str_canonical (instance), 0);
    zuuid_destroy (&instance);
    char host [256] = "";
    gethostname (host, sizeof host - 1);
    s_resource_set (config, "host.name", S_ATTR_STRING, host, 0);
    s_resource_set (config, "process.pid", S_ATTR_INT, NULL, getpid ());
    s_resource_set (config, "telemetry.sdk.name", S_ATTR_STRING, "dsh", 0);
    s_resource_set (config, "telemetry.sdk.language", S_ATTR_STRING, "c", 0);
    s_resource_set (config, "telemetry.sdk.version", S_ATTR_STRING, DSH_VERSION, 0);
    for (const char *value = (const char *) zhashx_first (map); value; value = (const char *) zhashx_next (map)) {
        const char *key = (const char *) zhashx_cursor (map);
        if (!streq (key, "service.name"))
            s_resource_set (config, key, S_ATTR_STRING, value, 0);
    }
    zhashx_destroy (&map);
    return 0;
}

static int
s_config_sampler (s_config_t *config, char *error, size_t error_size)
{
    const char *name = s_env ("OTEL_TRACES_SAMPLER");
    if (!name)
        name = "parentbased_always_on";
    const char *root = name;
    config->parent_based = strncmp (name, "parentbased_", 12) == 0;
    if (config->parent_based)
        root = name + 12;
    if (streq (root, "always_on"))
        config->sampler = S_ALWAYS_ON;
    else
    if (streq (root, "always_off"))
        config->sampler = S_ALWAYS_OFF;
    else
    if (streq (root, "traceidratio"))
        config->sampler = S_RATIO;
    else {
        snprintf (error, error_size, "OTEL_TRACES_SAMPLER=%s: dsh knows always_on, always_off, traceidratio, "
                  "parentbased_always_on, parentbased_always_off and parentbased_traceidratio", name);
        return -1;
    }
    config->ratio = 1.0;
    const char *argument = s_env ("OTEL_TRACES_SAMPLER_ARG");
    if (config->sampler == S_RATIO && argument) {
        char *end;
        errno = 0;
        double ratio = strtod (argument, &end);
        if (errno || *end || end == argument || !(ratio >= 0.0 && ratio <= 1.0)) {
            snprintf (error, error_size, "OTEL_TRACES_SAMPLER_ARG=%s: not a probability from 0 to 1", argument);
            return -1;
        }
        config->ratio = ratio;
    }
    return 0;
}

static void
s_config_free (s_config_t *config)
{
    free (config->url);
    curl_slist_free_all (config->headers);
    for (size_t index = 0; index < config->resource_count; index++)
        s_attr_clear (&config->resource [index]);
    free (config->resource);
    memset (config, 0, sizeof (s_config_t));
}

//  Reads the environment into config. Returns 1 when tracing is on, 0 when
//  off, -1 with error on a bad value.
static int
s_config_load (s_config_t *config, const char *service_name, char *error, size_t error_size)
{
    memset (config, 0, sizeof (s_config_t));
    const char *disabled = s_env ("OTEL_SDK_DISABLED");
    if (disabled && strcasecmp (disabled, "true") == 0)
        return 0;
    const char *exporter = s_env ("OTEL_TRACES_EXPORTER");
    if (exporter && streq (exporter, "none"))
        return 0;
    if (exporter && !streq (exporter, "otlp")) {
        snprintf (error, error_size, "OTEL_TRACES_EXPORTER=%s: dsh exports otlp (or none)", exporter);
        return -1;
    }
    const char *traces_endpoint = s_env ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    const char *endpoint = s_env ("OTEL_EXPORTER_OTLP_ENDPOINT");
    if (!traces_endpoint && !endpoint)
        return 0;

    //  The signal's own endpoint is the whole URL; the general one is a
    //  base that the signal's path is appended to
    const char *given = traces_endpoint? traces_endpoint: endpoint;
    if (strncmp (given, "http://", 7) && strncmp (given, "https://", 8)) {
        snprintf (error, error_size, "%s=%s: an http:// or https:// URL is needed",
                  traces_endpoint? "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "OTEL_EXPORTER_OTLP_ENDPOINT", given);
        return -1;
    }
    if (traces_endpoint)
        config->url = strdup (traces_endpoint);
    else
        config->url = zsys_sprintf ("%s%sv1/traces", endpoint, endpoint [strlen (endpoint) - 1] == '/'? "": "/");

    const char *protocol = s_env2 ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL");
    if (protocol && streq (protocol, "http/json"))
        config->json = true;
    else
    if (protocol && !streq (protocol, "http/protobuf")) {
        snprintf (error, error_size, "OTLP protocol %s: dsh exports http/protobuf or http/json", protocol);
        return -1;
    }
    long number;
    const char *timeout_name = s_env ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")?
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "OTEL_EXPORTER_OTLP_TIMEOUT";
    if (s_env_int (timeout_name, S_EXPORT_TIMEOUT_MS, 1, 3600000, &number, error, error_size))
        return -1;
    config->timeout_ms = (int) number;
    if (s_env_int ("OTEL_BSP_MAX_QUEUE_SIZE", S_MAX_QUEUE_SPANS, 1, 10000000, &number, error, error_size))
        return -1;
    config->max_queue_spans = (size_t) number;
    if (s_env_int ("DSH_OTEL_BSP_MAX_QUEUE_BYTES", S_MAX_QUEUE_BYTES, 4096, 1L << 34, &number, error, error_size))
        return -1;
    config->max_queue_bytes = (size_t) number;
    if (s_env_int ("OTEL_BSP_SCHEDULE_DELAY", S_SCHEDULE_DELAY_MS, 1, 3600000, &number, error, error_size))
        return -1;
    config->schedule_delay_ms = (int) number;
    if (s_env_int ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", S_MAX_BATCH_SPANS, 1, 10000000, &number, error, error_size))
        return -1;
    //  The specification: a batch is never larger than the queue
    config->max_batch_spans = (size_t) number < config->max_queue_spans? (size_t) number: config->max_queue_spans;
    if (s_config_sampler (config, error, error_size)
    ||  s_config_headers (config, error, error_size)
    ||  s_config_resource (config, service_name, error, error_size))
        return -1;
    return 1;
}


//  ---------------------------------------------------------------------
//  The encoders: one batch of spans into one ExportTraceServiceRequest

typedef Opentelemetry__Proto__Common__V1__KeyValue s_pb_kv_t;
typedef Opentelemetry__Proto__Common__V1__AnyValue s_pb_any_t;
typedef Opentelemetry__Proto__Trace__V1__Span s_pb_span_t;
typedef Opentelemetry__Proto__Trace__V1__Span__Event s_pb_event_t;
typedef Opentelemetry__Proto__Trace__V1__Status s_pb_status_t;

//  Where the attributes of one request are written, one after another
typedef struct {
    s_pb_kv_t *kvs;
    s_pb_any_t *anys;
    s_pb_kv_t **pointers;
    size_t used;
} s_pb_attrs_t;

static s_pb_kv_t **
s_pb_attrs (s_pb_attrs_t *pool, const s_attr_t *attrs, size_t count)
{
    s_pb_kv_t **first = pool->pointers + pool->used;
    for (size_t index = 0; index < count; index++) {
        s_pb_kv_t *kv = &pool->kvs [pool->used];
        s_pb_any_t *any = &pool->anys [pool->used];
        opentelemetry__proto__common__v1__key_value__init (kv);
        opentelemetry__proto__common__v1__any_value__init (any);
        kv->key = attrs [index].key;
        kv->value = any;
        if (attrs [index].type == S_ATTR_STRING) {
            any->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
            any->string_value = attrs [index].string;
        }
        else
        if (attrs [index].type == S_ATTR_INT) {
            any->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE;
            any->int_value = attrs [index].number;
        }
        else {
            any->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE;
            any->bool_value = attrs [index].number != 0;
        }
        pool->pointers [pool->used++] = kv;
    }
    return first;
}

static byte *
s_encode_protobuf (const s_config_t *config, dsh_span_t **spans, size_t count, size_t *size)
{
    size_t attr_total = config->resource_count;
    size_t event_total = 0;
    for (size_t index = 0; index < count; index++) {
        attr_total += spans [index]->attr_count + spans [index]->event_count;
        event_total += spans [index]->event_count;
    }
    s_pb_attrs_t pool = {
        .kvs = (s_pb_kv_t *) calloc (attr_total + 1, sizeof (s_pb_kv_t)),
        .anys = (s_pb_any_t *) calloc (attr_total + 1, sizeof (s_pb_any_t)),
        .pointers = (s_pb_kv_t **) calloc (attr_total + 1, sizeof (s_pb_kv_t *))
    };
    s_pb_span_t *pb_spans = (s_pb_span_t *) calloc (count, sizeof (s_pb_span_t));
    s_pb_span_t **span_pointers = (s_pb_span_t **) calloc (count, sizeof (s_pb_span_t *));
    s_pb_status_t *statuses = (s_pb_status_t *) calloc (count, sizeof (s_pb_status_t));
    s_pb_event_t *events = (s_pb_event_t *) calloc (event_total + 1, sizeof (s_pb_event_t));
    s_pb_event_t **event_pointers = (s_pb_event_t **) calloc (event_total + 1, sizeof (s_pb_event_t *));
    assert (pool.kvs && pool.anys && pool.pointers && pb_spans && span_pointers && statuses && events && event_pointers);

    size_t events_used = 0;
    for (size_t index = 0; index < count; index++) {
        dsh_span_t *span = spans [index];
        s_pb_span_t *pb = &pb_spans [index];
        opentelemetry__proto__trace__v1__span__init (pb);
        pb->trace_id.data = span->trace_id;
        pb->trace_id.len = 16;
        pb->span_id.data = span->span_id;
        pb->span_id.len = 8;
        if (span->has_parent) {
            pb->parent_span_id.data = span->parent_id;
            pb->parent_span_id.len = 8;
        }
        if (span->tracestate)
            pb->trace_state = span->tracestate;
        pb->flags = span->flags;
        pb->name = span->name;
        pb->kind = (Opentelemetry__Proto__Trace__V1__Span__SpanKind) span->kind;
        pb->start_time_unix_nano = (uint64_t) span->start_ns;
        pb->end_time_unix_nano = (uint64_t) span->end_ns;
        pb->n_attributes = span->attr_count;
        pb->attributes = s_pb_attrs (&pool, span->attrs, span->attr_count);
        pb->dropped_attributes_count = span->dropped_attrs;
        pb->n_events = span->event_count;
        pb->events = event_pointers + events_used;
        for (size_t event_index = 0; event_index < span->event_count; event_index++) {
            s_event_t *event = &span->events [event_index];
            s_pb_event_t *pb_event = &events [events_used];
            opentelemetry__proto__trace__v1__span__event__init (pb_event);
            pb_event->time_unix_nano = (uint64_t) event->time_ns;
            pb_event->name = event->name;
            if (event->attr.key) {
                pb_event->n_attributes = 1;
                pb_event->attributes = s_pb_attrs (&pool, &event->attr, 1);
            }
            event_pointers [events_used++] = pb_event;
        }
        pb->dropped_events_count = span->dropped_events;
        if (span->error) {
            opentelemetry__proto__trace__v1__status__init (&statuses [index]);
            statuses [index].code = OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_ERROR;
            if (span->status_message)
                statuses [index].message = span->status_message;
            pb->status = &statuses [index];
        }
        span_pointers [index] = pb;
    }
    Opentelemetry__Proto__Resource__V1__Resource resource = OPENTELEMETRY__PROTO__RESOURCE__V1__RESOURCE__INIT;
    resource.n_attributes = config->resource_count;
    resource.attributes = s_pb_attrs (&pool, config->resource, config->resource_count);
    Opentelemetry__Proto__Common__V1__InstrumentationScope scope =
        OPENTELEMETRY__PROTO__COMMON__V1__INSTRUMENTATION_SCOPE__INIT;
    scope.name = (char *) "dsh";
    scope.version = (char *) DSH_VERSION;
    Opentelemetry__Proto__Trace__V1__ScopeSpans scope_spans = OPENTELEMETRY__PROTO__TRACE__V1__SCOPE_SPANS__INIT;
    scope_spans.scope = &scope;
    scope_spans.n_spans = count;
    scope_spans.spans = span_pointers;
    Opentelemetry__Proto__Trace__V1__ScopeSpans *scope_spans_pointer = &scope_spans;
    Opentelemetry__Proto__Trace__V1__ResourceSpans resource_spans = OPENTELEMETRY__PROTO__TRACE__V1__RESOURCE_SPANS__INIT;
    resource_spans.resource = &resource;
    resource_spans.n_scope_spans = 1;
    resource_spans.scope_spans = &scope_spans_pointer;
    Opentelemetry__Proto__Trace__V1__ResourceSpans *resource_spans_pointer = &resource_spans;
    Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest request =
        OPENTELEMETRY__PROTO__COLLECTOR__TRACE__V1__EXPORT_TRACE_SERVICE_REQUEST__INIT;
    request.n_resource_spans = 1;
    request.resource_spans = &resource_spans_pointer;

    *size = opentelemetry__proto__collector__trace__v1__export_trace_service_request__get_packed_size (&request);
    byte *buffer = (byte *) malloc (*size + 1);
    assert (buffer);
    size_t packed = opentelemetry__proto__collector__trace__v1__export_trace_service_request__pack (&request, buffer);
    assert (packed == *size);

    free (pool.kvs);
    free (pool.anys);
    free (pool.pointers);
    free (pb_spans);
    free (span_pointers);
    free (statuses);
    free (events);
    free (event_pointers);
    return buffer;
}

//  OTLP/JSON, as the specification maps protobuf to JSON: lowerCamelCase
//  names, trace and span ids as lower hex (not base64), 64-bit integers as
//  decimal strings, enums as integers, default values left out

static json_t *
s_json_string (const char *text)
{
    json_t *string = json_string (text);
    return string? string: json_string ("");
}

static json_t *
s_json_u64 (uint64_t value)
{
    char text [24];
    snprintf (text, sizeof text, "%" PRIu64, value);
    return json_string (text);
}

static json_t *
s_json_attrs (const s_attr_t *attrs, size_t count)
{
    json_t *array = json_array ();
    for (size_t index = 0; index < count; index++) {
        json_t *value;
        if (attrs [index].type == S_ATTR_STRING)
            value = json_pack ("{s:o}", "stringValue", s_json_string (attrs [index].string));
        else
        if (attrs [index].type == S_ATTR_INT) {
            char text [24];
            snprintf (text, sizeof text, "%" PRId64, attrs [index].number);
            value = json_pack ("{s:s}", "intValue", text);
        }
        else
            value = json_pack ("{s:b}", "boolValue", attrs [index].number != 0);
        json_array_append_new (array, json_pack ("{s:o,s:o}", "key", s_json_string (attrs [index].key), "value", value));
    }
    return array;
}

static json_t *
s_json_span (dsh_span_t *span)
{
    char trace_id [33], span_id [17], parent_id [17];
    dsh_trace_id_hex (span->trace_id, 16, trace_id);
    dsh_trace_id_hex (span->span_id, 8, span_id);
    json_t *object = json_pack ("{s:s,s:s,s:o,s:i,s:o,s:o,s:i}",
        "traceId", trace_id, "spanId", span_id, "name", s_json_string (span->name), "kind", span->kind,
        "startTimeUnixNano", s_json_u64 ((uint64_t) span->start_ns),
        "endTimeUnixNano", s_json_u64 ((uint64_t) span->end_ns), "flags", (int) span->flags);
    if (span->has_parent) {
        dsh_trace_id_hex (span->parent_id, 8, parent_id);
        json_object_set_new (object, "parentSpanId", json_string (parent_id));
    }
    if (span->tracestate)
        json_object_set_new (object, "traceState", s_json_string (span->tracestate));
    json_object_set_new (object, "attributes", s_json_attrs (span->attrs, span->attr_count));
    if (span->dropped_attrs)
        json_object_set_new (object, "droppedAttributesCount", json_integer (span->dropped_attrs));
    json_t *events = json_array ();
    for (size_t index = 0; index < span->event_count; index++) {
        s_event_t *event = &span->events [index];
        json_t *json_event = json_pack ("{s:o,s:o}", "timeUnixNano", s_json_u64 ((uint64_t) event->time_ns),
                                        "name", s_json_string (event->name));
        if (event->attr.key)
            json_object_set_new (json_event, "attributes", s_json_attrs (&event->attr, 1));
        json_array_append_new (events, json_event);
    }
    json_object_set_new (object, "events", events);
    if (span->dropped_events)
        json_object_set_new (object, "droppedEventsCount", json_integer (span->dropped_events));
    if (span->error) {
        json_t *status = json_pack ("{s:i}", "code", 2);
        if (span->status_message)
            json_object_set_new (status, "message", s_json_string (span->status_message));
        json_object_set_new (object, "status", status);
    }
    return object;
}

static byte *
s_encode_json (const s_config_t *config, dsh_span_t **spans, size_t count, size_t *size)
{
    json_t *json_spans = json_array ();
    for (size_t index = 0; index < count; index++)
        json_array_append_new (json_spans, s_json_span (spans [index]));
    json_t *request = json_pack ("{s:[{s:{s:o},s:[{s:{s:s,s:s},s:o}]}]}",
        "resourceSpans",
            "resource", "attributes", s_json_attrs (config->resource, config->resource_count),
            "scopeSpans",
                "scope", "name", "dsh", "version", DSH_VERSION,
                "spans", json_spans);
    assert (request);
    char *text = json_dumps (request, JSON_COMPACT);
    assert (text);
    json_decref (request);
    *size = strlen (text);
    return (byte *) text;
}


//  ---------------------------------------------------------------------
//  The exporter thread

//  A collector's answer, kept up to a size that any ExportTraceServiceResponse
//  fits in (the rest is ignored)
#define S_ANSWER_MAX 65536
typedef struct {
    char data [S_ANSWER_MAX];
    size_t size;
} s_answer_t;

static size_t
s_answer_write (char *data, size_t size, size_t count, void *argument)
{
    s_answer_t *answer = (s_answer_t *) argument;
    size_t length = size * count;
    size_t room = S_ANSWER_MAX - answer->size;
    memcpy (answer->data + answer->size, data, length < room? length: room);
    answer->size += length < room? length: room;
    return length;
}

//  The spans a 2xx answer says were rejected (its partial_success), 0 when
//  it says none or cannot be read
static int64_t
s_answer_rejected (const s_answer_t *answer, bool json)
{
    int64_t rejected = 0;
    if (json) {
        json_t *root = json_loadb (answer->data, answer->size, 0, NULL);
        json_t *value = json_object_get (json_object_get (root, "partialSuccess"), "rejectedSpans");
        if (json_is_string (value))
            rejected = strtoll (json_string_value (value), NULL, 10);
        else
        if (json_is_integer (value))
            rejected = json_integer_value (value);
        json_decref (root);
    }
    else {
        Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceResponse *response =
            opentelemetry__proto__collector__trace__v1__export_trace_service_response__unpack (
                NULL, answer->size, (const uint8_t *) answer->data);
        if (response && response->partial_success)
            rejected = response->partial_success->rejected_spans;
        if (response)
            opentelemetry__proto__collector__trace__v1__export_trace_service_response__free_unpacked (response, NULL);
    }
    return rejected;
}

static int64_t
s_monotonic_ms (void)
{
    struct timespec now;
    clock_gettime (CLOCK_MONOTONIC, &now);
    return (int64_t) now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

//  A POST still running when dsh_trace_stop's time is up is abandoned
//  (its spans dropped), so that a stuck collector cannot hold up an exit
static int
s_post_progress (void *argument, curl_off_t down_total, curl_off_t down_now, curl_off_t up_total,
                 curl_off_t up_now)
{
    (void) argument;
    (void) down_total;
    (void) down_now;
    (void) up_total;
    (void) up_now;
    pthread_mutex_lock (&s_tracer.mutex);
    bool abandon = s_tracer.stopping && s_monotonic_ms () >= s_tracer.stop_deadline_ms;
    pthread_mutex_unlock (&s_tracer.mutex);
    return abandon? 1: 0;
}

//  POSTs one batch. Returns the spans the collector rejected (0 to count)
//  when it answered 2xx, -1 when the export failed.
static int64_t
s_post (CURL *curl, const s_config_t *config, dsh_span_t **spans, size_t count, long timeout_ms)
{
    size_t size;
    byte *body = config->json? s_encode_json (config, spans, count, &size):
                               s_encode_protobuf (config, spans, count, &size);
    s_answer_t *answer = (s_answer_t *) malloc (sizeof (s_answer_t));
    assert (answer);
    answer->size = 0;
    curl_easy_setopt (curl, CURLOPT_URL, config->url);
    curl_easy_setopt (curl, CURLOPT_HTTPHEADER, config->headers);
    curl_easy_setopt (curl, CURLOPT_POSTFIELDS, (char *) body);
    curl_easy_setopt (curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) size);
    curl_easy_setopt (curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt (curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt (curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt (curl, CURLOPT_WRITEFUNCTION, s_answer_write);
    curl_easy_setopt (curl, CURLOPT_WRITEDATA, answer);
    curl_easy_setopt (curl, CURLOPT_XFERINFOFUNCTION, s_post_progress);
    curl_easy_setopt (curl, CURLOPT_NOPROGRESS, 0L);
    long status = 0;
    CURLcode rc = curl_easy_perform (curl);
    if (rc == CURLE_OK)
        curl_easy_getinfo (curl, CURLINFO_RESPONSE_CODE, &status);
    int64_t rejected = -1;
    if (rc == CURLE_OK && status >= 200 && status < 300) {
        rejected = s_answer_rejected (answer, config->json);
        rejected = rejected < 0? 0: rejected > (int64_t) count? (int64_t) count: rejected;
    }
    free (answer);
    free (body);
    return rejected;
}

static void
s_span_free (dsh_span_t **span_p)
{
    dsh_span_t *span = *span_p;
    if (!span)
        return;
    free (span->tracestate);
    free (span->name);
    for (size_t index = 0; index < span->attr_count; index++)
        s_attr_clear (&span->attrs [index]);
    free (span->attrs);
    for (size_t index = 0; index < span->event_count; index++) {
        free (span->events [index].name);
        s_attr_clear (&span->events [index].attr);
    }
    free (span->events);
    free (span->status_message);
    free (span);
    *span_p = NULL;
}

//  Waits on the tracer's condition until deadline_ms (CLOCK_MONOTONIC);
//  false once it has passed
static bool
s_wait_until (int64_t deadline_ms)
{
    struct timespec until = { .tv_sec = deadline_ms / 1000, .tv_nsec = (deadline_ms % 1000) * 1000000 };
    return pthread_cond_timedwait (&s_tracer.wake, &s_tracer.mutex, &until) == 0;
}

static void *
s_exporter (void *argument)
{
    (void) argument;
    const s_config_t *config = &s_tracer.config;
    CURL *curl = curl_easy_init ();
    dsh_span_t **batch = (dsh_span_t **) calloc (config->max_batch_spans, sizeof (dsh_span_t *));
    assert (batch);
    pthread_mutex_lock (&s_tracer.mutex);
    while (true) {
        //  A batch leaves when it is full, when the schedule delay has
        //  passed, or at once on stop
        int64_t deadline_ms = s_monotonic_ms () + config->schedule_delay_ms;
        while (!s_tracer.stopping && s_tracer.count < config->max_batch_spans)
            if (!s_wait_until (deadline_ms) && s_monotonic_ms () >= deadline_ms)
                break;
        if (s_tracer.stopping && s_tracer.count == 0)
            break;
        size_t count = 0;
        while (s_tracer.head && count < config->max_batch_spans) {
            dsh_span_t *span = s_tracer.head;
            s_tracer.head = span->next;
            s_tracer.count--;
            s_tracer.bytes -= span->bytes;
            batch [count++] = span;
        }
        if (!s_tracer.head)
            s_tracer.tail = NULL;
        long timeout_ms = config->timeout_ms;
        if (s_tracer.stopping) {
            int64_t left_ms = s_tracer.stop_deadline_ms - s_monotonic_ms ();
            timeout_ms = left_ms < timeout_ms? (long) left_ms: timeout_ms;
        }
        pthread_mutex_unlock (&s_tracer.mutex);

        int64_t rejected = -1;
        if (count > 0 && timeout_ms > 0 && curl)
            rejected = s_post (curl, config, batch, count, timeout_ms);
        for (size_t index = 0; index < count; index++)
            s_span_free (&batch [index]);

        //  A partial success is not retried (the specification says so):
        //  what the collector rejected counts as dropped
        pthread_mutex_lock (&s_tracer.mutex);
        if (count > 0 && rejected >= 0) {
            s_tracer.stats.spans_exported += count - (size_t) rejected;
            s_tracer.stats.spans_dropped += (size_t) rejected;
        }
        else
        if (count > 0) {
            s_tracer.stats.spans_dropped += count;
            if (timeout_ms > 0)
                s_tracer.stats.export_failures++;
        }
    }
    pthread_mutex_unlock (&s_tracer.mutex);
    free (batch);
    curl_easy_cleanup (curl);
    return NULL;
}


//  ---------------------------------------------------------------------
//  The tracer

//  A fork keeps only the thread that called it: the child has no
//  exporter, so there the tracer is off, its queue and configuration
//  let go (the parent exports its own), and dsh_trace_stop does not wait
//  for a thread that is not there. The mutex is held across the fork so
//  that the child's copy is in a known state.
static pthread_once_t s_fork_once = PTHREAD_ONCE_INIT;

static void
s_fork_prepare (void)
{
    pthread_mutex_lock (&s_tracer.mutex);
}

static void
s_fork_parent (void)
{
    pthread_mutex_unlock (&s_tracer.mutex);
}

static void
s_fork_child (void)
{
    pthread_mutex_init (&s_tracer.mutex, NULL);
    if (!s_tracer.started)
        return;
    atomic_store (&s_tracer.enabled, false);
    while (s_tracer.head) {
        dsh_span_t *span = s_tracer.head;
        s_tracer.head = span->next;
        s_span_free (&span);
    }
    s_tracer.tail = NULL;
    s_tracer.count = 0;
    s_tracer.bytes = 0;
    s_config_free (&s_tracer.config);
    s_tracer.started = false;
    s_tracer.stopping = false;
}

static void
s_fork_handlers (void)
{
    pthread_atfork (s_fork_prepare, s_fork_parent, s_fork_child);
}

int
dsh_trace_start (const char *service_name, char *error, size_t error_size)
{
    pthread_once (&s_fork_once, s_fork_handlers);
    pthread_mutex_lock (&s_tracer.mutex);
    if (s_tracer.started) {
        pthread_mutex_unlock (&s_tracer.mutex);
        return 0;
    }
    memset (&s_tracer.stats, 0, sizeof s_tracer.stats);
    int on = s_config_load (&s_tracer.config, service_name, error, error_size);
    if (on == 1 && curl_global_init (CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf (error, error_size, "cannot start libcurl for the OTLP exporter");
        on = -1;
    }
    if (on == 1) {
        pthread_condattr_t attributes;
        pthread_condattr_init (&attributes);
        pthread_condattr_setclock (&attributes, CLOCK_MONOTONIC);
        pthread_cond_init (&s_tracer.wake, &attributes);
        pthread_condattr_destroy (&attributes);
        s_tracer.stopping = false;
        if (pthread_create (&s_tracer.thread, NULL, s_exporter, NULL)) {
            snprintf (error, error_size, "cannot start the OTLP exporter thread");
            pthread_cond_destroy (&s_tracer.wake);
            curl_global_cleanup ();
            on = -1;
        }
    }
    if (on == 1)
        atomic_store (&s_tracer.enabled, true);
    else
        s_config_free (&s_tracer.config);
    //  A refused configuration is reported again on the next try
    s_tracer.started = on >= 0;
    pthread_mutex_unlock (&s_tracer.mutex);
    return on < 0? -1: 0;
}

void
dsh_trace_stop (int timeout_ms)
{
    pthread_mutex_lock (&s_tracer.mutex);
    if (!s_tracer.started) {
        pthread_mutex_unlock (&s_tracer.mutex);
        return;
    }
    bool running = atomic_load (&s_tracer.enabled);
    atomic_store (&s_tracer.enabled, false);
    s_tracer.stopping = true;
    s_tracer.stop_deadline_ms = s_monotonic_ms () + (timeout_ms > 0? timeout_ms: 0);
    if (running)
        pthread_cond_signal (&s_tracer.wake);
    pthread_mutex_unlock (&s_tracer.mutex);
    if (running) {
        pthread_join (s_tracer.thread, NULL);
        pthread_cond_destroy (&s_tracer.wake);
        curl_global_cleanup ();
    }
    pthread_mutex_lock (&s_tracer.mutex);
    s_config_free (&s_tracer.config);
    s_tracer.started = false;
    s_tracer.stopping = false;
    pthread_mutex_unlock (&s_tracer.mutex);
}

bool
dsh_trace_enabled (void)
{
    return atomic_load_explicit (&s_tracer.enabled, memory_order_relaxed);
}

//  TraceIdRatioBased as the SDKs compute it (Go's, which the Java, .NET
//  and Python ones agree with on the bytes used): the trace id's low 8
//  bytes, big-endian, shifted right one bit, under ratio * 2^63. A trace
//  id decides the same way in every process.
static bool
s_ratio_samples (double ratio, const byte *trace_id)
{
    if (ratio >= 1.0)
        return true;
    uint64_t bound = (uint64_t) (ratio * 9223372036854775808.0);
    uint64_t low = 0;
    for (int index = 8; index < 16; index++)
        low = low << 8 | trace_id [index];
    return (low >> 1) < bound;
}

bool
dsh_trace_should_sample (const dsh_trace_ctx_t *parent, const byte *trace_id)
{
    if (!dsh_trace_enabled ())
        return false;
    const s_config_t *config = &s_tracer.config;
    if (parent && config->parent_based)
        return dsh_trace_sampled (parent);
    if (config->sampler == S_ALWAYS_ON)
        return true;
    if (config->sampler == S_ALWAYS_OFF)
        return false;
    assert (trace_id);
    return s_ratio_samples (config->ratio, trace_id);
}

void
dsh_trace_stats (dsh_trace_stats_t *stats)
{
    assert (stats);
    pthread_mutex_lock (&s_tracer.mutex);
    *stats = s_tracer.stats;
    stats->queue_bytes = s_tracer.bytes;
    pthread_mutex_unlock (&s_tracer.mutex);
}


//  ---------------------------------------------------------------------
//  Spans

//  A sampled span in trace_id, child of parent (NULL: the root)
static dsh_span_t *
s_span_new (const char *name, int kind, const byte *trace_id, const dsh_trace_ctx_t *parent, int64_t start_ns)
{
    dsh_span_t *self = (dsh_span_t *) calloc (1, sizeof (dsh_span_t));
    assert (self);
    memcpy (self->trace_id, trace_id, 16);
    s_random_id (self->span_id, 8);
    self->flags = 1;
    if (parent) {
        memcpy (self->parent_id, parent->span_id, 8);
        self->has_parent = true;
        self->flags = parent->flags | 1;
        if (parent->tracestate [0])
            self->tracestate = s_utf8_copy (parent->tracestate, DSH_TRACESTATE_MAX);
    }
    self->name = s_utf8_copy (name? name: "", S_MAX_VALUE_BYTES);
    self->kind = kind >= DSH_SPAN_INTERNAL && kind <= DSH_SPAN_CONSUMER? kind: DSH_SPAN_INTERNAL;
    self->start_ns = start_ns? start_ns: dsh_trace_now_ns ();
    self->bytes = sizeof (dsh_span_t) + strlen (self->name) + (self->tracestate? strlen (self->tracestate): 0);
    return self;
}

dsh_span_t *
dsh_span_start (const char *name, int kind, const dsh_trace_ctx_t *parent, int64_t start_ns)
{
    if (!dsh_trace_enabled ())
        return NULL;
    byte trace_id [16];
    if (parent)
        memcpy (trace_id, parent->trace_id, 16);
    else
        s_random_id (trace_id, 16);
    if (!dsh_trace_should_sample (parent, trace_id))
        return NULL;
    return s_span_new (name, kind, trace_id, parent, start_ns);
}

dsh_span_t *
dsh_span_start_root (const char *name, int kind, const byte *trace_id, int64_t start_ns)
{
    assert (trace_id);
    if (!dsh_trace_enabled ())
        return NULL;
    return s_span_new (name, kind, trace_id, NULL, start_ns);
}

int
dsh_span_context (dsh_span_t *self, dsh_trace_ctx_t *ctx)
{
    assert (ctx);
    if (!self)
        return -1;
    memcpy (ctx->trace_id, self->trace_id, 16);
    memcpy (ctx->span_id, self->span_id, 8);
    ctx->flags = self->flags;
    snprintf (ctx->tracestate, sizeof ctx->tracestate, "%s", self->tracestate? self->tracestate: "");
    return 0;
}

//  Sets key, replacing an attribute of the same key as OTel does; past
//  the limit a new key is dropped and counted
static void
s_span_set (dsh_span_t *self, const char *key, s_attr_type_t type, const char *string, int64_t number)
{
    if (!self || !key)
        return;
    size_t index;
    for (index = 0; index < self->attr_count; index++)
        if (streq (self->attrs [index].key, key))
            break;
    if (index == S_MAX_ATTRIBUTES) {
        self->dropped_attrs++;
        return;
    }
    if (index == self->attr_max) {
        self->attr_max = self->attr_max? 2 * self->attr_max: 8;
        self->attrs = (s_attr_t *) realloc (self->attrs, self->attr_max * sizeof (s_attr_t));
        assert (self->attrs);
        self->bytes += (self->attr_max - index) * sizeof (s_attr_t);
    }
    s_attr_t *attr = &self->attrs [index];
    if (index == self->attr_count) {
        memset (attr, 0, sizeof (s_attr_t));
        self->attr_count++;
    }
    else
        self->bytes -= strlen (attr->key) + (attr->string? strlen (attr->string): 0);
    s_attr_set (attr, key, type, string, number);
    self->bytes += strlen (attr->key) + (attr->string? strlen (attr->string): 0);
}

void
dsh_span_set_str (dsh_span_t *self, const char *key, const char *value)
{
    s_span_set (self, key, S_ATTR_STRING, value? value: "", 0);
}

void
dsh_span_set_int (dsh_span_t *self, const char *key, int64_t value)
{
    s_span_set (self, key, S_ATTR_INT, NULL, value);
}

void
dsh_span_set_bool (dsh_span_t *self, const char *key, bool value)
{
    s_span_set (self, key, S_ATTR_BOOL, NULL, value);
}

void
dsh_span_add_event (dsh_span_t *self, const char *name, int64_t time_ns, const char *key, const char *value)
{
    if (!self)
        return;
    if (self->event_count == S_MAX_EVENTS) {
        self->dropped_events++;
        return;
    }
    if (self->event_count == self->event_max) {
        self->event_max = self->event_max? 2 * self->event_max: 4;
        self->events = (s_event_t *) realloc (self->events, self->event_max * sizeof (s_event_t));
        assert (self->events);
        self->bytes += (self->event_max - self->event_count) * sizeof (s_event_t);
    }
    s_event_t *event = &self->events [self->event_count++];
    memset (event, 0, sizeof (s_event_t));
    event->name = s_utf8_copy (name? name: "", S_MAX_VALUE_BYTES);
    event->time_ns = time_ns? time_ns: dsh_trace_now_ns ();
    self->bytes += strlen (event->name);
    if (key) {
        s_attr_set (&event->attr, key, S_ATTR_STRING, value? value: "", 0);
        self->bytes += strlen (event->attr.key) + strlen (event->attr.string);
    }
}

void
dsh_span_set_error (dsh_span_t *self, const char *error_type, const char *message)
{
    if (!self)
        return;
    self->error = true;
    free (self->status_message);
    self->status_message = message? s_utf8_copy (message, S_MAX_VALUE_BYTES): NULL;
    if (self->status_message)
        self->bytes += strlen (self->status_message);
    if (error_type)
        dsh_span_set_str (self, "error.type", error_type);
}

void
dsh_span_set_name (dsh_span_t *self, const char *name)
{
    if (!self || !name)
        return;
    self->bytes -= strlen (self->name);
    free (self->name);
    self->name = s_utf8_copy (name, S_MAX_VALUE_BYTES);
    self->bytes += strlen (self->name);
}

void
dsh_span_end (dsh_span_t **span_p, int64_t end_ns)
{
    assert (span_p);
    dsh_span_t *self = *span_p;
    if (!self)
        return;
    *span_p = NULL;
    self->end_ns = end_ns? end_ns: dsh_trace_now_ns ();
    if (self->end_ns < self->start_ns)
        self->end_ns = self->start_ns;
    pthread_mutex_lock (&s_tracer.mutex);
    s_tracer.stats.spans_ended++;
    bool taken = atomic_load (&s_tracer.enabled) && !s_tracer.stopping
              && s_tracer.count < s_tracer.config.max_queue_spans
              && s_tracer.bytes + self->bytes <= s_tracer.config.max_queue_bytes;
    if (taken) {
        if (s_tracer.tail)
            s_tracer.tail->next = self;
        else
            s_tracer.head = self;
        s_tracer.tail = self;
        s_tracer.count++;
        s_tracer.bytes += self->bytes;
        if (s_tracer.count == s_tracer.config.max_batch_spans)
            pthread_cond_signal (&s_tracer.wake);
    }
    else
        s_tracer.stats.spans_dropped++;
    pthread_mutex_unlock (&s_tracer.mutex);
    if (!taken)
        s_span_free (&self);
}


//  ---------------------------------------------------------------------
//  Self test: the context codec (tests/unit/test_trace.c tests the rest)

void
dsh_trace_test (bool verbose)
{
    if (verbose)
        printf (" * dsh_trace: ");
    const char *given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    dsh_trace_ctx_t ctx;
    int rc = dsh_trace_parse (&ctx, given, strlen (given));
    assert (rc == 0);
    assert (dsh_trace_sampled (&ctx));
    char formatted [DSH_TRACEPARENT_SIZE + 1];
    dsh_trace_format (&ctx, formatted);
    assert (streq (formatted, given));
    rc = dsh_trace_parse (&ctx, "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", DSH_TRACEPARENT_SIZE);
    assert (rc == -1);
    if (verbose)
        printf ("OK\n");
}
