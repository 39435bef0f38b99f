/*  =========================================================================
    dsh_link - following a broker: one broker-session state machine

    The table in PROTOCOL.md ("Client liveness"), as code. Each input first
    records what it says (heard, reached, the broker's heartbeat), then
    moves the state and queues events; only dsh_link_tick looks at the
    clock's progress, so an input never gives a broker up.
    =========================================================================
*/

#include "dsh_link.h"
#include "dsh_proto.h"

//  An input makes three events at most (DOWN or RESTARTED, CONNECT,
//  SEND_PING or SEND_HELLO); the owner takes them after each input, so
//  this leaves room for an owner that takes them after a few.
#define S_EVENTS_MAX 16

struct _dsh_link_t {
    dsh_link_profile_t profile;
    zlistx_t *brokers;          //  char *, endpoints, in the order given
    const char *endpoint;       //  the one in use, an item of brokers
    dsh_link_state_t state;
    int heartbeat_ms;           //  the broker's, else the default
    int liveness;
    int64_t heard_ms;           //  silence counts from this: the later of the
                                //  connect, the connection seen, the last
                                //  message and the start of a watch
    int64_t pinged_ms;          //  client: when it last sent PING, or 0
    int64_t ping_due_ms;        //  component, watcher: the next PING
    int64_t hello_due_ms;       //  in HELLO: the next HELLO
    bool watching;              //  a client awaits something; others always
    bool asked;                 //  client: a PING went on this connection
    bool reached;               //  a connection or a message seen on it
    char *instance;             //  the first instance id on this connection
    dsh_link_event_t events [S_EVENTS_MAX];
    size_t event_first;
    size_t event_count;
};

dsh_link_t *
dsh_link_new (dsh_link_profile_t profile)
{
    assert (profile >= DSH_LINK_CLIENT && profile <= DSH_LINK_WATCHER);
    dsh_link_t *self = (dsh_link_t *) zmalloc (sizeof (dsh_link_t));
    assert (self);
    self->profile = profile;
    self->brokers = zlistx_new ();
    assert (self->brokers);
    zlistx_set_destructor (self->brokers, (zlistx_destructor_fn *) zstr_free);
    zlistx_set_duplicator (self->brokers, (zlistx_duplicator_fn *) strdup);
    self->heartbeat_ms = DSH_DEFAULT_HEARTBEAT_MS;
    self->liveness = DSH_DEFAULT_LIVENESS;
    self->watching = profile != DSH_LINK_CLIENT;
    return self;
}

void
dsh_link_destroy (dsh_link_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_link_t *self = *self_p;
        zlistx_destroy (&self->brokers);
        zstr_free (&self->instance);
        free (self);
        *self_p = NULL;
    }
}

void
dsh_link_add (dsh_link_t *self, const char *endpoint)
{
    assert (self);
    assert (endpoint);
    zlistx_add_end (self->brokers, (void *) endpoint);
}

//  Queues an event of type about the endpoint in use; returns it to fill.
static dsh_link_event_t *
s_emit (dsh_link_t *self, dsh_link_event_type_t type)
{
    //  An owner that does not take its events is a programmer error
    assert (self->event_count < S_EVENTS_MAX);
    dsh_link_event_t *event = &self->events [(self->event_first + self->event_count++) % S_EVENTS_MAX];
    memset (event, 0, sizeof (*event));
    event->type = type;
    event->endpoint = self->endpoint;
    return event;
}

static void
s_set_defaults (dsh_link_t *self, int heartbeat_ms, int liveness)
{
    if (heartbeat_ms > 0)
        self->heartbeat_ms = heartbeat_ms;
    if (liveness > 0)
        self->liveness = liveness;
}

//  Connects (afresh) to endpoint: a new connection knows nothing yet. The
//  broker's heartbeat and liveness stay those last known until the new
//  one gives its own.
static void
s_connect (dsh_link_t *self, int64_t now, const char *endpoint)
{
    self->endpoint = endpoint;
    self->heard_ms = now;
    self->pinged_ms = 0;
    self->reached = false;
    zstr_free (&self->instance);
    s_emit (self, DSH_LINK_CONNECT);
    if (self->profile == DSH_LINK_CLIENT)
        self->state = DSH_LINK_CONNECTING;
    else {
        self->state = DSH_LINK_HELLO;
        self->hello_due_ms = now + DSH_LINK_HELLO_RETRY_MS;
        s_emit (self, DSH_LINK_SEND_HELLO);
    }
}

//  The next broker in the list, round and round; the same one if alone.
static void
s_connect_next (dsh_link_t *self, int64_t now)
{
    const char *next = NULL;
    for (const char *entry = zlistx_first (self->brokers); entry; entry = zlistx_next (self->brokers))
        if (entry == self->endpoint) {
            next = zlistx_next (self->brokers);
            break;
        }
    s_connect (self, now, next? next: zlistx_first (self->brokers));
    if (self->profile == DSH_LINK_CLIENT) {
        //  A client moves while it awaits something: it learns the new
        //  broker's heartbeat at once
        self->asked = true;
        s_emit (self, DSH_LINK_SEND_PING);
    }
}

void
dsh_link_start (dsh_link_t *self, int64_t now)
{
    assert (self);
    assert (zlistx_size (self->brokers) > 0);
    self->asked = false;
    s_connect (self, now, zlistx_first (self->brokers));
}

//  The broker is reached: a client's connection is up.
static void
s_reached (dsh_link_t *self, int64_t now)
{
    self->reached = true;
    self->heard_ms = now;
    if (self->state == DSH_LINK_CONNECTING) {
        self->state = DSH_LINK_LIVE;
        s_emit (self, DSH_LINK_UP);
    }
}

void
dsh_link_connected (dsh_link_t *self, int64_t now)
{
    assert (self);
    if (!self->reached)
        s_reached (self, now);
}

void
dsh_link_heard (dsh_link_t *self, int64_t now)
{
    assert (self);
    if (self->reached)
        self->heard_ms = now;
    else
        s_reached (self, now);
}

void
dsh_link_welcome (dsh_link_t *self, int64_t now, const char *instance, int heartbeat_ms, int liveness)
{
    assert (self);
    dsh_link_heard (self, now);
    if (self->state != DSH_LINK_HELLO)
        return;                 //  a client's, or an answer to a HELLO sent again
    s_set_defaults (self, heartbeat_ms, liveness);
    zstr_free (&self->instance);
    self->instance = instance? strdup (instance): NULL;
    self->state = DSH_LINK_LIVE;
    self->ping_due_ms = now + self->heartbeat_ms;
    s_emit (self, DSH_LINK_UP);
}

void
dsh_link_pong (dsh_link_t *self, int64_t now, const char *instance, int heartbeat_ms, int liveness)
{
    assert (self);
    dsh_link_heard (self, now);
    if (self->state == DSH_LINK_HELLO)
        return;                 //  the WELCOME to come names the instance
    s_set_defaults (self, heartbeat_ms, liveness);
    if (!instance)
        return;
    if (!self->instance) {
        self->instance = strdup (instance);
        return;
    }
    if (streq (instance, self->instance))
        return;
    dsh_link_event_t *event = s_emit (self, DSH_LINK_RESTARTED);
    snprintf (event->instance, sizeof (event->instance), "%s", instance);
    snprintf (event->was, sizeof (event->was), "%s", self->instance);
    if (self->profile == DSH_LINK_CLIENT)
        //  The calls open at the instance that went get no answer: as for
        //  a broker gone, the client starts afresh at the next broker
        s_connect_next (self, now);
    else {
        //  Its endpoints may have moved: ask again, on this connection
        zstr_free (&self->instance);
        self->state = DSH_LINK_HELLO;
        self->hello_due_ms = now + DSH_LINK_HELLO_RETRY_MS;
        s_emit (self, DSH_LINK_SEND_HELLO);
    }
}

void
dsh_link_watch (dsh_link_t *self, int64_t now, bool on)
{
    assert (self);
    if (self->profile != DSH_LINK_CLIENT)
        return;
    if (on && !self->watching) {
        self->heard_ms = now;
        self->pinged_ms = 0;
    }
    self->watching = on;
    //  The broker's heartbeat and liveness come in its PONG: asked once,
    //  so the first silence is judged by its window, not the default
    if (on && !self->asked) {
        self->asked = true;
        s_emit (self, DSH_LINK_SEND_PING);
    }
}

void
dsh_link_move (dsh_link_t *self, int64_t now)
{
    assert (self);
    assert (self->endpoint);
    s_connect_next (self, now);
}

//  How much silence the state allows, or 0 for any.
static int64_t
s_silence_limit (dsh_link_t *self)
{
    if (self->state == DSH_LINK_LIVE)
        return (int64_t) self->heartbeat_ms * self->liveness;
    if (self->state == DSH_LINK_CONNECTING)
        //  A broker never reached holds none of the client's calls: with
        //  another to go to it is left after a heartbeat (the connect
        //  timeout); alone it is waited for, there being nowhere else
        return zlistx_size (self->brokers) > 1? self->heartbeat_ms: 0;
    return self->profile == DSH_LINK_WATCHER? (int64_t) self->heartbeat_ms * self->liveness: 0;
}

//  When the next PING is due; INT64_MAX if none is.
static int64_t
s_ping_due (dsh_link_t *self)
{
    if (self->profile == DSH_LINK_CLIENT)
        //  Any message counts: a busy broker is never pinged
        return (self->pinged_ms > self->heard_ms? self->pinged_ms: self->heard_ms) + self->heartbeat_ms;
    return self->state == DSH_LINK_LIVE? self->ping_due_ms: INT64_MAX;
}

int64_t
dsh_link_tick (dsh_link_t *self, int64_t now)
{
    assert (self);
    if (!self->endpoint || !self->watching)
        return INT64_MAX;
    int64_t limit = s_silence_limit (self);
    if (limit && now - self->heard_ms > limit) {
        dsh_link_event_t *event = s_emit (self, DSH_LINK_DOWN);
        event->reached = self->reached;
        event->silence_ms = now - self->heard_ms;
        s_connect_next (self, now);
        limit = s_silence_limit (self);
    }
    if (self->state == DSH_LINK_HELLO && now >= self->hello_due_ms) {
        s_emit (self, DSH_LINK_SEND_HELLO);
        //  On the beat, not from now: an owner's repeating timer that
        //  fires on it finds each HELLO due
        while (self->hello_due_ms <= now)
            self->hello_due_ms += DSH_LINK_HELLO_RETRY_MS;
    }
    if (now >= s_ping_due (self)) {
        s_emit (self, DSH_LINK_SEND_PING);
        self->pinged_ms = now;
        if (self->profile != DSH_LINK_CLIENT)
            while (self->ping_due_ms <= now)
                self->ping_due_ms += self->heartbeat_ms;
    }
    int64_t due = s_ping_due (self);
    if (self->state == DSH_LINK_HELLO && self->hello_due_ms < due)
        due = self->hello_due_ms;
    if (limit && self->heard_ms + limit + 1 < due)
        due = self->heard_ms + limit + 1;
    return due;
}

int
dsh_link_next (dsh_link_t *self, dsh_link_event_t *event)
{
    assert (self);
    assert (event);
    if (!self->event_count)
        return -1;
    *event = self->events [self->event_first];
    self->event_first = (self->event_first + 1) % S_EVENTS_MAX;
    self->event_count--;
    return 0;
}

dsh_link_state_t
dsh_link_state (dsh_link_t *self)
{
    assert (self);
    return self->state;
}

const char *
dsh_link_endpoint (dsh_link_t *self)
{
    assert (self);
    return self->endpoint;
}

size_t
dsh_link_size (dsh_link_t *self)
{
    assert (self);
    return zlistx_size (self->brokers);
}

bool
dsh_link_reached (dsh_link_t *self)
{
    assert (self);
    return self->reached;
}

int
dsh_link_heartbeat_ms (dsh_link_t *self)
{
    assert (self);
    return self->heartbeat_ms;
}

int
dsh_link_liveness (dsh_link_t *self)
{
    assert (self);
    return self->liveness;
}

const char *
dsh_link_instance (dsh_link_t *self)
{
    assert (self);
    return self->instance;
}

const char *
dsh_link_state_name (dsh_link_state_t state)
{
    return state == DSH_LINK_CONNECTING? "connecting":
           state == DSH_LINK_HELLO?      "hello":
           state == DSH_LINK_LIVE?       "live": "none";
}

const char *
dsh_link_event_name (dsh_link_event_type_t type)
{
    static const char *names [] = { "", "CONNECT", "SEND_HELLO", "SEND_PING", "UP", "DOWN", "RESTARTED" };
    return type >= DSH_LINK_CONNECT && type <= DSH_LINK_RESTARTED? names [type]: "";
}
