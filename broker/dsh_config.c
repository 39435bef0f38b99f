/*  =========================================================================
    dsh_config - the broker's settings: built-in defaults, a ZPL file, flags
    =========================================================================
*/

#include "dsh_config.h"
#include "dsh_beacon.h"
#include "dsh_curve.h"
#include "dsh_proto.h"
#include "dsh_audit.h"
#include "dsh_pins.h"

#include <sys/stat.h>

dsh_config_t *
dsh_config_new (void)
{
    dsh_config_t *self = (dsh_config_t *) zmalloc (sizeof (dsh_config_t));
    assert (self);
    self->endpoint = strdup (DSH_DEFAULT_ENDPOINT);
    self->heartbeat_ms = DSH_DEFAULT_HEARTBEAT_MS;
    self->liveness = DSH_DEFAULT_LIVENESS;
    self->call_timeout_ms = DSH_DEFAULT_CALL_TIMEOUT_MS;
    self->max_call_timeout_ms = 10 * 60 * 1000;
    self->max_message_bytes = DSH_MAX_MESSAGE_DEFAULT;
    self->queue_limit = 10000;
    self->max_in_flight = 100000;
    self->max_tool_bytes = 64 * 1024;
    self->max_tools = 1024;
    self->max_announce_parts_bytes = 256 * 1024 * 1024;
    self->events_queue_bytes = 32 * 1024 * 1024;
    self->snapshot_bytes_per_second = 256 * 1024 * 1024;
    self->max_queued = 50000;
    self->max_queued_bytes = 256 * 1024 * 1024;
    self->max_queued_per_caller = 10000;
    self->max_queued_bytes_per_caller = 64 * 1024 * 1024;
    self->stats = true;
    self->beacon_port = DSH_DEFAULT_BEACON_PORT;
    self->beacon_interval_ms = DSH_BEACON_INTERVAL_MS;
    self->audit = DSH_AUDIT_REQUIRED;
    self->audit_arguments = DSH_AUDIT_ARGS_FULL;
    self->audit_arguments_max_bytes = 1024;
    self->audit_queue_bytes = 64 * 1024 * 1024;
    self->audit_retain_days = 90;
    self->pins = DSH_PINS_TOFU;
    return self;
}

void
dsh_config_destroy (dsh_config_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_config_t *self = *self_p;
        zstr_free (&self->endpoint);
        zstr_free (&self->announce);
        zstr_free (&self->work);
        zstr_free (&self->events);
        zstr_free (&self->certificate);
        zstr_free (&self->allow);
        zstr_free (&self->beacon_interface);
        zstr_free (&self->name);
        zstr_free (&self->state_dir);
        zstr_free (&self->store);
        zstr_free (&self->audit_digest_tools);
        zcert_destroy (&self->cert);
        zconfig_destroy (&self->file);
        free (self);
        *self_p = NULL;
    }
}

static int
s_set_int (int *target, const char *key, const char *value, long min, long max,
           char *error, size_t error_size)
{
    char *end = NULL;
    errno = 0;
    long number = strtol (value, &end, 10);
    if (errno || end == value || *end || number < min || number > max) {
        snprintf (error, error_size, "%s: \"%s\" is not a whole number from %ld to %ld",
                  key, value, min, max);
        return -1;
    }
    *target = (int) number;
    return 0;
}

static int
s_set_bool (bool *target, const char *key, const char *value, char *error, size_t error_size)
{
    if (streq (value, "1") || streq (value, "true"))
        *target = true;
    else
    if (streq (value, "0") || streq (value, "false"))
        *target = false;
    else {
        snprintf (error, error_size, "%s: \"%s\" is not true or false", key, value);
        return -1;
    }
    return 0;
}

static int
s_set_path (char **target, const char *key, const char *value, char *error, size_t error_size)
{
    if (!*value) {
        snprintf (error, error_size, "%s: wants a path", key);
        return -1;
    }
    zstr_free (target);
    *target = strdup (value);
    return 0;
}

static int
s_set_endpoint (char **target, const char *key, const char *value, char *error, size_t error_size)
{
    if (strncmp (value, "tcp://", 6) && strncmp (value, "ipc://", 6) && strncmp (value, "inproc://", 9)) {
        snprintf (error, error_size, "%s: \"%s\" is not a tcp://, ipc:// or inproc:// endpoint", key, value);
        return -1;
    }
    zstr_free (target);
    *target = strdup (value);
    return 0;
}

int
dsh_config_set (dsh_config_t *self, const char *key, const char *value, char *error, size_t error_size)
{
    assert (self);
    assert (key);
    if (!value)
        value = "";
    if (streq (key, "endpoint"))
        return s_set_endpoint (&self->endpoint, key, value, error, error_size);
    if (streq (key, "announce"))
        return s_set_endpoint (&self->announce, key, value, error, error_size);
    if (streq (key, "work"))
        return s_set_endpoint (&self->work, key, value, error, error_size);
    if (streq (key, "events"))
        return s_set_endpoint (&self->events, key, value, error, error_size);
    if (streq (key, "heartbeat_ms"))
        return s_set_int (&self->heartbeat_ms, key, value, 10, 3600000, error, error_size);
    if (streq (key, "liveness"))
        return s_set_int (&self->liveness, key, value, 1, 100, error, error_size);
    if (streq (key, "call_timeout_ms"))
        return s_set_int (&self->call_timeout_ms, key, value, 1, INT_MAX, error, error_size);
    if (streq (key, "max_call_timeout_ms"))
        return s_set_int (&self->max_call_timeout_ms, key, value, 1, INT_MAX, error, error_size);
    if (streq (key, "max_message_bytes"))
        return s_set_int (&self->max_message_bytes, key, value, 1024, INT_MAX, error, error_size);
    if (streq (key, "max_in_flight"))
        return s_set_int (&self->max_in_flight, key, value, 1, 10000000, error, error_size);
    if (streq (key, "max_tool_bytes"))
        return s_set_int (&self->max_tool_bytes, key, value, 256, INT_MAX, error, error_size);
    if (streq (key, "max_tools"))
        return s_set_int (&self->max_tools, key, value, 1, 1000000, error, error_size);
    if (streq (key, "max_announce_parts_bytes"))
        return s_set_int (&self->max_announce_parts_bytes, key, value, 1024, INT_MAX, error, error_size);
    if (streq (key, "events_queue_bytes"))
        return s_set_int (&self->events_queue_bytes, key, value, 1024, INT_MAX, error, error_size);
    if (streq (key, "snapshot_bytes_per_second"))
        return s_set_int (&self->snapshot_bytes_per_second, key, value, 65536, INT_MAX, error, error_size);
    if (streq (key, "io_threads"))
        return s_set_int (&self->io_threads, key, value, 0, 64, error, error_size);
    if (streq (key, "max_queued"))
        return s_set_int (&self->max_queued, key, value, 1, 10000000, error, error_size);
    if (streq (key, "max_queued_bytes"))
        return s_set_int (&self->max_queued_bytes, key, value, 1024, INT_MAX, error, error_size);
    if (streq (key, "max_queued_per_caller"))
        return s_set_int (&self->max_queued_per_caller, key, value, 1, 10000000, error, error_size);
    if (streq (key, "max_queued_bytes_per_caller"))
        return s_set_int (&self->max_queued_bytes_per_caller, key, value, 1024, INT_MAX, error, error_size);
    if (streq (key, "queue_limit"))
        return s_set_int (&self->queue_limit, key, value, 1, 10000000, error, error_size);
    if (streq (key, "verbose"))
        return s_set_bool (&self->verbose, key, value, error, error_size);
    if (streq (key, "stats"))
        return s_set_bool (&self->stats, key, value, error, error_size);
    if (streq (key, "curve"))
        return s_set_bool (&self->curve, key, value, error, error_size);
    if (streq (key, "certificate"))
        return s_set_path (&self->certificate, key, value, error, error_size);
    if (streq (key, "allow"))
        return s_set_path (&self->allow, key, value, error, error_size);
    if (streq (key, "insecure"))
        return s_set_bool (&self->insecure, key, value, error, error_size);
    if (streq (key, "name")) {
        if (!*value || strlen (value) > 255 || strpbrk (value, " \t\r\n")) {
            snprintf (error, error_size, "%s: wants 1 to 255 characters with no white space", key);
            return -1;
        }
        zstr_free (&self->name);
        self->name = strdup (value);
        return 0;
    }
    if (streq (key, "state_dir"))
        return s_set_path (&self->state_dir, key, value, error, error_size);
    if (streq (key, "store"))
        return s_set_path (&self->store, key, value, error, error_size);
    if (streq (key, "audit") || streq (key, "audit/policy")) {
        const char *names [] = { "off", "required", "best-effort" };
        for (int index = 0; index < 3; index++)
            if (streq (value, names [index])) {
                self->audit = index;
                return 0;
            }
        snprintf (error, error_size, "%s: \"%s\" is not required, best-effort or off", key, value);
        return -1;
    }
    if (streq (key, "pins") || streq (key, "pins/policy")) {
        dsh_pins_policy_t policy;
        if (dsh_pins_policy_parse (value, &policy)) {
            snprintf (error, error_size, "%s: \"%s\" is not off, tofu or strict", key, value);
            return -1;
        }
        self->pins = (int) policy;
        return 0;
    }
    if (streq (key, "audit/arguments")) {
        const char *names [] = { "full", "digest", "none" };
        for (int index = 0; index < 3; index++)
            if (streq (value, names [index])) {
                self->audit_arguments = index;
                return 0;
            }
        snprintf (error, error_size, "%s: \"%s\" is not full, digest or none", key, value);
        return -1;
    }
    if (streq (key, "audit/arguments_max_bytes"))
        return s_set_int (&self->audit_arguments_max_bytes, key, value, 0, INT_MAX, error, error_size);
    if (streq (key, "audit/digest_tools"))
        return s_set_path (&self->audit_digest_tools, key, value, error, error_size);
    if (streq (key, "audit/queue_bytes"))
        return s_set_int (&self->audit_queue_bytes, key, value, 65536, INT_MAX, error, error_size);
    if (streq (key, "audit/retain_days"))
        return s_set_int (&self->audit_retain_days, key, value, 0, 36500, error, error_size);
    if (streq (key, "audit/max_bytes"))
        return s_set_int (&self->audit_max_bytes, key, value, 0, INT_MAX, error, error_size);
    if (streq (key, "beacon/port"))
        return s_set_int (&self->beacon_port, key, value, 1, 65535, error, error_size);
    if (streq (key, "beacon/interval_ms"))
        return s_set_int (&self->beacon_interval_ms, key, value, 100, 3600000, error, error_size);
    if (streq (key, "beacon/interface")) {
        //  zbeacon takes a name, an address, "*" or an index; it says at
        //  start whether one matches, so only the shape is checked here
        if (!*value || strlen (value) > 255) {
            snprintf (error, error_size, "%s: wants an interface name, an address or \"*\"", key);
            return -1;
        }
        zstr_free (&self->beacon_interface);
        self->beacon_interface = strdup (value);
        return 0;
    }
    snprintf (error, error_size, "unknown setting \"%s\"", key);
    return -1;
}

int
dsh_config_load (dsh_config_t *self, const char *path, char *error, size_t error_size)
{
    assert (self);
    assert (path);
    if (!zsys_file_exists (path)) {
        snprintf (error, error_size, "%s: no such file", path);
        return -1;
    }
    //  Not zconfig_load: czmq 4.2 leaks its zfile when the text does not
    //  parse, and bad files are exactly the input to expect here
    zchunk_t *chunk = zchunk_slurp (path, 0);
    zconfig_t *root = chunk? zconfig_chunk_load (chunk): NULL;
    zchunk_destroy (&chunk);
    if (!root) {
        snprintf (error, error_size, "%s: not a valid ZPL file", path);
        return -1;
    }
    int rc = 0;
    for (zconfig_t *section = zconfig_child (root); section && rc == 0; section = zconfig_next (section)) {
        if (streq (zconfig_name (section), "chain")) {
            self->chain = section;
            continue;
        }
        if (streq (zconfig_name (section), "beacon")) {
            if (zconfig_value (section) && *zconfig_value (section)) {
                snprintf (error, error_size, "%s: beacon is a section, not a value: give its keys (port, "
                          "interval_ms, interface) under it, or leave it out for no beacons", path);
                rc = -1;
                break;
            }
            self->beacon = true;
            for (zconfig_t *item = zconfig_child (section); item && rc == 0; item = zconfig_next (item)) {
                char key [300], reason [512];
                snprintf (key, sizeof (key), "beacon/%.200s", zconfig_name (item));
                if (dsh_config_set (self, key, zconfig_value (item), reason, sizeof (reason))) {
                    snprintf (error, error_size, "%s: %s", path, reason);
                    rc = -1;
                }
            }
            continue;
        }
        if (streq (zconfig_name (section), "audit") || streq (zconfig_name (section), "pins")) {
            //  audit = POLICY, and its keys under it; pins the same
            const char *prefix = zconfig_name (section);
            char reason [512];
            if (zconfig_value (section) && *zconfig_value (section)
            &&  dsh_config_set (self, prefix, zconfig_value (section), reason, sizeof (reason))) {
                snprintf (error, error_size, "%s: %s", path, reason);
                rc = -1;
                break;
            }
            for (zconfig_t *item = zconfig_child (section); item && rc == 0; item = zconfig_next (item)) {
                char key [300];
                snprintf (key, sizeof (key), "%s/%.200s", prefix, zconfig_name (item));
                if (dsh_config_set (self, key, zconfig_value (item), reason, sizeof (reason))) {
                    snprintf (error, error_size, "%s: %s", path, reason);
                    rc = -1;
                }
            }
            continue;
        }
        if (!streq (zconfig_name (section), "broker") && !streq (zconfig_name (section), "security")) {
            snprintf (error, error_size, "%s: unknown section \"%s\"", path, zconfig_name (section));
            rc = -1;
            break;
        }
        for (zconfig_t *item = zconfig_child (section); item; item = zconfig_next (item)) {
            char reason [256];
            //  Each key lives in its section: no security key under broker
            bool security_key = streq (zconfig_name (item), "curve") || streq (zconfig_name (item), "certificate")
                             || streq (zconfig_name (item), "allow") || streq (zconfig_name (item), "insecure");
            if (security_key != streq (zconfig_name (section), "security"))
                snprintf (reason, sizeof (reason), "unknown setting \"%s\"", zconfig_name (item));
            if ((security_key != streq (zconfig_name (section), "security"))
            ||  dsh_config_set (self, zconfig_name (item), zconfig_value (item), reason, sizeof (reason))) {
                snprintf (error, error_size, "%s: %s/%s", path, zconfig_name (section), reason);
                rc = -1;
                break;
            }
        }
    }
    if (rc == 0) {
        //  The chain section points into the file: keep the file
        zconfig_destroy (&self->file);
        self->file = root;
    }
    else {
        self->chain = NULL;
        zconfig_destroy (&root);
    }
    return rc;
}

char *
dsh_config_default_state_dir (void)
{
    const char *dir = getenv ("DSH_STATE_DIR");
    if (dir && *dir)
        return strdup (dir);
    dir = getenv ("XDG_STATE_HOME");
    if (dir && *dir)
        return zsys_sprintf ("%s/dsh", dir);
    dir = getenv ("HOME");
    if (dir && *dir)
        return zsys_sprintf ("%s/.local/state/dsh", dir);
    return strdup ("/var/lib/dsh");
}

int
dsh_config_state (dsh_config_t *self, const char *front, char *error, size_t error_size)
{
    assert (self);
    assert (front);
    //  The front's port, or its ipc path's last part, names this broker
    //  among those of its host
    const char *colon = strrchr (front, ':');
    const char *slash = strrchr (front, '/');
    char place [128];
    if (strncmp (front, "tcp://", 6) == 0 && colon)
        snprintf (place, sizeof (place), "%s", colon + 1);
    else
        snprintf (place, sizeof (place), "%s", slash? slash + 1: front);
    for (char *cursor = place; *cursor; cursor++)
        if (!isalnum ((unsigned char) *cursor) && *cursor != '-' && *cursor != '.' && *cursor != '_')
            *cursor = '_';
    if (!self->name) {
        char host [256] = "localhost";
        gethostname (host, sizeof (host) - 1);
        self->name = zsys_sprintf ("%s:%s", host, place);
    }
    if ((self->audit == DSH_AUDIT_OFF && self->pins == DSH_PINS_OFF) || self->store)
        return 0;
    if (!self->state_dir)
        self->state_dir = dsh_config_default_state_dir ();
    if (zsys_dir_create ("%s", self->state_dir) || zsys_file_mode (self->state_dir) == -1
    ||  !S_ISDIR ((mode_t) zsys_file_mode (self->state_dir))) {
        snprintf (error, error_size, "state_dir: cannot make the directory \"%s\" (%s); set --state-dir, or "
                  "store, or --audit off and --pins off", self->state_dir, strerror (errno));
        return -1;
    }
    self->store = zsys_sprintf ("%s/broker-%s.db", self->state_dir, place);
    return 0;
}

//  The event size the events queue is sized on
#define S_EVENT_TYPICAL 4096

int
dsh_config_events_hwm (dsh_config_t *self)
{
    assert (self);
    int hwm = self->events_queue_bytes / S_EVENT_TYPICAL;
    if (hwm > self->queue_limit)
        hwm = self->queue_limit;
    return hwm > 0? hwm: 1;
}

//  The endpoint offset places from the front one.
static char *
s_derive (const char *front, int offset, const char *suffix)
{
    if (strncmp (front, "tcp://", 6) == 0) {
        const char *colon = strrchr (front, ':');
        if (colon && colon > front + 5) {
            if (streq (colon + 1, "*"))
                return strdup (front);
            int port = atoi (colon + 1);
            if (port > 0 && port + offset < 65536)
                return zsys_sprintf ("%.*s:%d", (int) (colon - front), front, port + offset);
        }
    }
    return zsys_sprintf ("%s-%s", front, suffix);
}

void
dsh_config_derive (dsh_config_t *self)
{
    assert (self);
    if (!self->announce)
        self->announce = s_derive (self->endpoint, 1, "announce");
    if (!self->work)
        self->work = s_derive (self->endpoint, 2, "work");
    if (!self->events)
        self->events = s_derive (self->endpoint, 3, "events");
}

bool
dsh_config_loopback (const char *endpoint)
{
    assert (endpoint);
    if (strncmp (endpoint, "ipc://", 6) == 0 || strncmp (endpoint, "inproc://", 9) == 0)
        return true;
    if (strncmp (endpoint, "tcp://", 6))
        return false;
    const char *host = endpoint + 6;
    //  An interface name or a source address ("eth0;...") is not loopback
    if (strchr (host, ';'))
        return false;
    return strncmp (host, "127.", 4) == 0 || strncmp (host, "localhost:", 10) == 0
        || strncmp (host, "[::1]:", 6) == 0 || strncmp (host, "lo:", 3) == 0;
}

int
dsh_config_beacon_port (dsh_config_t *self, const char *front, char *error, size_t error_size)
{
    assert (self);
    assert (front);
    const char *colon = strrchr (front, ':');
    int port = colon? atoi (colon + 1): 0;
    if (strncmp (front, "tcp://", 6) || port <= 0 || port > 65535) {
        snprintf (error, error_size, "beacon: the front endpoint %s is not tcp://HOST:PORT; beacons "
                  "name a TCP port", front);
        return -1;
    }
    if (dsh_config_loopback (front)) {
        snprintf (error, error_size, "beacon: the front endpoint %s is loopback: no host that hears the "
                  "beacons could connect. Bind the front to an interface or * (with CURVE, or --insecure)",
                  front);
        return -1;
    }
    return port;
}

int
dsh_config_secure (dsh_config_t *self, char *error, size_t error_size)
{
    assert (self);
    if (self->certificate)
        self->curve = true;
    if (!self->curve) {
        const char *endpoints [] = { self->endpoint, self->announce, self->work, self->events };
        for (size_t index = 0; index < 4 && !self->insecure; index++)
            if (endpoints [index] && !dsh_config_loopback (endpoints [index])) {
                snprintf (error, error_size, "%s is not loopback and CURVE is off: anyone who reaches it owns "
                          "the swarm. Set security/curve with a certificate and an allow-list (README, "
                          "\"Securing a swarm\"), or pass --insecure", endpoints [index]);
                return -1;
            }
        return 0;
    }
    if (!self->certificate) {
        snprintf (error, error_size, "security/curve needs the broker's certificate (security/certificate or --cert; "
                  "make one with `dsh keygen FILE --role admin`)");
        return -1;
    }
    if (!self->allow) {
        snprintf (error, error_size, "security/curve needs an allow-list directory of public certificates "
                  "(security/allow or --allow)");
        return -1;
    }
    int mode = zsys_file_mode (self->allow);
    if (mode == -1 || !S_ISDIR ((mode_t) mode)) {
        snprintf (error, error_size, "security/allow: \"%s\" is not a directory", self->allow);
        return -1;
    }
    zcert_destroy (&self->cert);
    self->cert = dsh_curve_load (self->certificate);
    if (!self->cert) {
        snprintf (error, error_size, "security/certificate: \"%s\" is not a certificate `dsh keygen` wrote",
                  self->certificate);
        return -1;
    }
    if (streq (zcert_secret_txt (self->cert), "0000000000000000000000000000000000000000")) {
        snprintf (error, error_size, "security/certificate: \"%s\" has no secret key (want %s_secret beside it)",
                  self->certificate, self->certificate);
        zcert_destroy (&self->cert);
        return -1;
    }
    return 0;
}
