/*  =========================================================================
    dsh_config - the broker's settings: built-in defaults, a ZPL file, flags
    =========================================================================
*/

#include "dsh_config.h"
#include "dsh_proto.h"

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
    self->max_queued = 50000;
    self->max_queued_bytes = 256 * 1024 * 1024;
    self->max_queued_per_caller = 10000;
    self->max_queued_bytes_per_caller = 64 * 1024 * 1024;
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
    if (streq (key, "verbose")) {
        if (streq (value, "1") || streq (value, "true"))
            self->verbose = true;
        else
        if (streq (value, "0") || streq (value, "false"))
            self->verbose = false;
        else {
            snprintf (error, error_size, "verbose: \"%s\" is not true or false", value);
            return -1;
        }
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
        if (!streq (zconfig_name (section), "broker")) {
            snprintf (error, error_size, "%s: unknown section \"%s\"", path, zconfig_name (section));
            rc = -1;
            break;
        }
        for (zconfig_t *item = zconfig_child (section); item; item = zconfig_next (item)) {
            char reason [256];
            if (dsh_config_set (self, zconfig_name (item), zconfig_value (item), reason, sizeof (reason))) {
                snprintf (error, error_size, "%s: broker/%s", path, reason);
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
