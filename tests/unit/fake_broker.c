/*  =========================================================================
    fake_broker - a broker's FRONT and EVENTS, played by a test
    =========================================================================
*/

#include "fake_broker.h"

#include <string.h>

typedef enum { CALLS_ANSWER, CALLS_HOLD } calls_mode_t;

//  A CALL held: who sent it, and its callId.
typedef struct {
    zframe_t *routing;
    char *call_id;
} held_call_t;

typedef struct {
    zsock_t *pipe;
    zsock_t *front;
    zsock_t *events;
    char *instance;
    bool silent;
    calls_mode_t calls;
    zlistx_t *held;             //  held_call_t
    char *feed;                 //  SLOT: the stage slot WELCOME names
    char *drain;
    zlistx_t *tools;            //  TOOLS: names in the snapshot
    uint64_t seq;
    uint64_t epoch;
    zhashx_t *counts;           //  command -> requests had (a number, not a pointer)
    zhashx_t *last;             //  command -> the body of the last such request
    bool terminated;
} self_t;

//  --- msgpack helpers ---------------------------------------------------------

const msgpack_object *
fake_map_get (const msgpack_object *map, const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t index = 0; index < map->via.map.size; index++)
        if (fake_is_str (&map->via.map.ptr [index].key, key))
            return &map->via.map.ptr [index].val;
    return NULL;
}

bool
fake_is_str (const msgpack_object *object, const char *text)
{
    return object && object->type == MSGPACK_OBJECT_STR && object->via.str.size == strlen (text)
        && memcmp (object->via.str.ptr, text, object->via.str.size) == 0;
}

void
fake_pack_str (msgpack_packer *pk, const char *text)
{
    size_t size = strlen (text);
    msgpack_pack_str (pk, size);
    msgpack_pack_str_body (pk, text, size);
}

//  A NUL-terminated copy of a str (caller frees), or NULL.
static char *
s_strdup (const msgpack_object *object)
{
    if (!object || object->type != MSGPACK_OBJECT_STR)
        return NULL;
    char *copy = (char *) zmalloc (object->via.str.size + 1);
    memcpy (copy, object->via.str.ptr, object->via.str.size);
    return copy;
}

static void
s_pack_kv_str (msgpack_packer *pk, const char *key, const char *value)
{
    fake_pack_str (pk, key);
    fake_pack_str (pk, value);
}

static void
s_pack_kv_uint (msgpack_packer *pk, const char *key, uint64_t value)
{
    fake_pack_str (pk, key);
    msgpack_pack_uint64 (pk, value);
}

//  A tool entry for name.
static void
s_pack_tool (msgpack_packer *pk, const char *name)
{
    msgpack_pack_map (pk, 3);
    s_pack_kv_str (pk, "name", name);
    s_pack_kv_str (pk, "description", "a tool of the fake broker");
    fake_pack_str (pk, "parameters");
    msgpack_pack_map (pk, 1);
    s_pack_kv_str (pk, "type", "object");
}

//  A RESULT body for call_id: one text block; an error if code is set.
static void
s_pack_result (msgpack_packer *pk, const char *call_id, const char *text, const char *code)
{
    msgpack_pack_map (pk, code? 4: 3);
    s_pack_kv_str (pk, "callId", call_id);
    fake_pack_str (pk, "content");
    msgpack_pack_array (pk, 1);
    msgpack_pack_map (pk, 2);
    s_pack_kv_str (pk, "type", "text");
    s_pack_kv_str (pk, "text", text);
    fake_pack_str (pk, "isError");
    if (code)
        msgpack_pack_true (pk);
    else
        msgpack_pack_false (pk);
    if (code) {
        fake_pack_str (pk, "error");
        msgpack_pack_map (pk, 2);
        s_pack_kv_str (pk, "name", "CancelledError");
        s_pack_kv_str (pk, "code", code);
    }
}

//  --- FRONT -----------------------------------------------------------------

//  Sends [routing] "" "DSH1" command body on FRONT.
static void
s_reply (self_t *self, zframe_t *routing, const char *command, msgpack_sbuffer *body)
{
    zmsg_t *msg = zmsg_new ();
    zmsg_append (msg, &(zframe_t *) { zframe_dup (routing) });
    zmsg_addstr (msg, "");
    zmsg_addstr (msg, "DSH1");
    zmsg_addstr (msg, command);
    zmsg_addmem (msg, body->data, body->size);
    zmsg_send (&msg, self->front);
}

//  The reply's map header, with the request's id echoed if it had one:
//  pairs is the count of the other entries.
static void
s_reply_map (msgpack_packer *pk, const msgpack_object *request, uint32_t pairs)
{
    const msgpack_object *id = fake_map_get (request, "id");
    msgpack_pack_map (pk, pairs + (id? 1: 0));
    if (id) {
        fake_pack_str (pk, "id");
        msgpack_pack_object (pk, *id);
    }
}

static void
s_welcome (self_t *self, msgpack_packer *pk, const msgpack_object *request)
{
    bool slot = self->feed && fake_map_get (request, "stage");
    s_reply_map (pk, request, 9 + slot);
    s_pack_kv_uint (pk, "protocol", 1);
    s_pack_kv_str (pk, "broker", self->instance);
    s_pack_kv_uint (pk, "epoch", self->epoch);
    s_pack_kv_str (pk, "announce", "tcp://127.0.0.1:9");
    s_pack_kv_str (pk, "work", "tcp://127.0.0.1:9");
    s_pack_kv_str (pk, "events", zsock_endpoint (self->events));
    s_pack_kv_uint (pk, "heartbeatMs", FAKE_HEARTBEAT_MS);
    s_pack_kv_uint (pk, "liveness", FAKE_LIVENESS);
    s_pack_kv_uint (pk, "maxMessageBytes", 16 * 1024 * 1024);
    if (slot) {
        fake_pack_str (pk, "stage");
        msgpack_pack_map (pk, 3);
        s_pack_kv_str (pk, "feed", self->feed);
        s_pack_kv_str (pk, "drain", self->drain);
        s_pack_kv_str (pk, "chainVersion", FAKE_CHAIN_VERSION);
    }
}

static void
s_pong (self_t *self, msgpack_packer *pk, const msgpack_object *request)
{
    s_reply_map (pk, request, 9);
    s_pack_kv_str (pk, "broker", self->instance);
    s_pack_kv_uint (pk, "uptimeMs", 1000);
    s_pack_kv_uint (pk, "tools", zlistx_size (self->tools));
    s_pack_kv_uint (pk, "components", 1);
    s_pack_kv_uint (pk, "inFlight", zlistx_size (self->held));
    s_pack_kv_uint (pk, "seq", self->seq);
    s_pack_kv_uint (pk, "epoch", self->epoch);
    s_pack_kv_uint (pk, "heartbeatMs", FAKE_HEARTBEAT_MS);
    s_pack_kv_uint (pk, "liveness", FAKE_LIVENESS);
}

static void
s_snapshot (self_t *self, msgpack_packer *pk, const msgpack_object *request)
{
    s_reply_map (pk, request, 4);
    s_pack_kv_uint (pk, "seq", self->seq);
    s_pack_kv_uint (pk, "epoch", self->epoch);
    fake_pack_str (pk, "tools");
    msgpack_pack_array (pk, zlistx_size (self->tools));
    for (const char *name = zlistx_first (self->tools); name; name = zlistx_next (self->tools)) {
        msgpack_pack_map (pk, 2);
        fake_pack_str (pk, "tool");
        s_pack_tool (pk, name);
        fake_pack_str (pk, "providers");
        msgpack_pack_array (pk, 1);
        fake_pack_str (pk, "fake");
    }
    fake_pack_str (pk, "components");
    msgpack_pack_array (pk, 1);
    msgpack_pack_map (pk, 3);
    s_pack_kv_str (pk, "id", "fake");
    s_pack_kv_uint (pk, "generation", 1);
    fake_pack_str (pk, "tools");
    msgpack_pack_array (pk, zlistx_size (self->tools));
    for (const char *name = zlistx_first (self->tools); name; name = zlistx_next (self->tools))
        fake_pack_str (pk, name);
}

//  Handles one request on FRONT: [routing] "" "DSH1" command body.
static void
s_front (self_t *self)
{
    zmsg_t *msg = zmsg_recv (self->front);
    if (!msg)
        return;
    zframe_t *routing = zmsg_pop (msg);
    char *delimiter = zmsg_popstr (msg);
    char *protocol = zmsg_popstr (msg);
    char *command = zmsg_popstr (msg);
    zframe_t *body_frame = zmsg_pop (msg);
    msgpack_unpacked body;
    msgpack_unpacked_init (&body);
    bool valid = routing && delimiter && !*delimiter && protocol && streq (protocol, "DSH1") && command
              && body_frame && msgpack_unpack_next (&body, (const char *) zframe_data (body_frame),
                                                    zframe_size (body_frame), NULL) == MSGPACK_UNPACK_SUCCESS
              && body.data.type == MSGPACK_OBJECT_MAP;
    if (valid) {
        size_t count = (size_t) zhashx_lookup (self->counts, command);
        zhashx_update (self->counts, command, (void *) (count + 1));
        zhashx_update (self->last, command, zframe_dup (body_frame));
    }
    if (valid && !self->silent) {
        const msgpack_object *request = &body.data;
        msgpack_sbuffer reply;
        msgpack_sbuffer_init (&reply);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &reply, msgpack_sbuffer_write);
        char *call_id = s_strdup (fake_map_get (request, "callId"));
        const char *reply_command = NULL;
        if (streq (command, "HELLO")) {
            s_welcome (self, &pk, request);
            reply_command = "WELCOME";
        }
        else
        if (streq (command, "PING")) {
            s_pong (self, &pk, request);
            reply_command = "PONG";
        }
        else
        if (streq (command, "LIST")) {
            s_reply_map (&pk, request, 2);
            s_pack_kv_uint (&pk, "seq", self->seq);
            fake_pack_str (&pk, "tools");
            msgpack_pack_array (&pk, 0);
            reply_command = "TOOLS";
        }
        else
        if (streq (command, "SNAPSHOT")) {
            s_snapshot (self, &pk, request);
            reply_command = "SNAPSHOT";
        }
        else
        if (streq (command, "CALL") && call_id) {
            if (self->calls == CALLS_ANSWER) {
                s_pack_result (&pk, call_id, self->instance, NULL);
                reply_command = "RESULT";
            }
            else {
                held_call_t *held = (held_call_t *) zmalloc (sizeof (held_call_t));
                held->routing = zframe_dup (routing);
                held->call_id = strdup (call_id);
                zlistx_add_end (self->held, held);
            }
        }
        else
        if (streq (command, "CANCEL") && call_id) {
            //  As a broker does: the call is dropped, whatever comes for it later too
            for (held_call_t *held = zlistx_first (self->held); held; held = zlistx_next (self->held))
                if (streq (held->call_id, call_id)) {
                    zlistx_delete (self->held, zlistx_cursor (self->held));
                    break;
                }
            s_pack_result (&pk, call_id, "Error: the call was cancelled", "CANCELLED");
            reply_command = "RESULT";
        }
        else {
            s_reply_map (&pk, request, 2);
            s_pack_kv_str (&pk, "code", "BAD_REQUEST");
            s_pack_kv_str (&pk, "message", "the fake broker does not know this request");
            reply_command = "ERROR";
        }
        if (reply_command)
            s_reply (self, routing, reply_command, &reply);
        free (call_id);
        msgpack_sbuffer_destroy (&reply);
    }
    msgpack_unpacked_destroy (&body);
    zframe_destroy (&body_frame);
    zframe_destroy (&routing);
    zstr_free (&delimiter);
    zstr_free (&protocol);
    zstr_free (&command);
    zmsg_destroy (&msg);
}

//  Answers every held call, text "late".
static void
s_release (self_t *self)
{
    for (held_call_t *held = zlistx_first (self->held); held; held = zlistx_next (self->held)) {
        msgpack_sbuffer reply;
        msgpack_sbuffer_init (&reply);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &reply, msgpack_sbuffer_write);
        s_pack_result (&pk, held->call_id, "late", NULL);
        s_reply (self, held->routing, "RESULT", &reply);
        msgpack_sbuffer_destroy (&reply);
    }
    zlistx_purge (self->held);
}

//  Publishes kind {seq, epoch, kind, component, name, tool?} on EVENTS.
static void
s_publish (self_t *self, const char *kind, const char *name, uint64_t seq)
{
    bool entry = streq (kind, "tool.registered") || streq (kind, "tool.updated");
    msgpack_sbuffer body;
    msgpack_sbuffer_init (&body);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &body, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 5 + entry);
    s_pack_kv_uint (&pk, "seq", seq);
    s_pack_kv_uint (&pk, "epoch", self->epoch);
    s_pack_kv_str (&pk, "kind", kind);
    s_pack_kv_str (&pk, "component", "fake");
    s_pack_kv_str (&pk, "name", name);
    if (entry) {
        fake_pack_str (&pk, "tool");
        s_pack_tool (&pk, name);
    }
    zmsg_t *msg = zmsg_new ();
    zmsg_addstr (msg, kind);
    zmsg_addmem (msg, body.data, body.size);
    zmsg_send (&msg, self->events);
    msgpack_sbuffer_destroy (&body);
}

//  --- The pipe -----------------------------------------------------------------

static void
s_pipe (self_t *self)
{
    zmsg_t *msg = zmsg_recv (self->pipe);
    if (!msg) {
        self->terminated = true;
        return;
    }
    char *command = zmsg_popstr (msg);
    char *first = zmsg_popstr (msg);
    char *second = zmsg_popstr (msg);
    char *third = zmsg_popstr (msg);
    if (!command || streq (command, "$TERM"))
        self->terminated = true;
    else
    if (streq (command, "SILENT"))
        self->silent = true;
    else
    if (streq (command, "ANSWER"))
        self->silent = false;
    else
    if (streq (command, "INSTANCE") && first) {
        zstr_free (&self->instance);
        self->instance = strdup (first);
    }
    else
    if (streq (command, "CALLS") && first) {
        if (streq (first, "release"))
            s_release (self);
        self->calls = streq (first, "answer")? CALLS_ANSWER: CALLS_HOLD;
    }
    else
    if (streq (command, "SLOT") && first && second) {
        zstr_free (&self->feed);
        zstr_free (&self->drain);
        self->feed = strdup (first);
        self->drain = strdup (second);
    }
    else
    if (streq (command, "TOOLS") && first && second) {
        self->seq = strtoull (first, NULL, 10);
        zlistx_purge (self->tools);
        char *names = second;
        for (char *name = strtok (names, ","); name; name = strtok (NULL, ","))
            zlistx_add_end (self->tools, strdup (name));
    }
    else
    if (streq (command, "EPOCH") && first)
        self->epoch = strtoull (first, NULL, 10);
    else
    if (streq (command, "EVENT") && first && second && third)
        s_publish (self, first, second, strtoull (third, NULL, 10));
    else
    if (streq (command, "COUNT") && first)
        zstr_sendf (self->pipe, "%zu", (size_t) zhashx_lookup (self->counts, first));
    else
    if (streq (command, "LAST") && first) {
        zframe_t *last = (zframe_t *) zhashx_lookup (self->last, first);
        zframe_t *frame = last? zframe_dup (last): zframe_new_empty ();
        zframe_send (&frame, self->pipe, 0);
    }
    zstr_free (&command);
    zstr_free (&first);
    zstr_free (&second);
    zstr_free (&third);
    zmsg_destroy (&msg);
}

static void
s_held_destroy (void **item_p)
{
    held_call_t *held = (held_call_t *) *item_p;
    if (held) {
        zframe_destroy (&held->routing);
        zstr_free (&held->call_id);
        free (held);
        *item_p = NULL;
    }
}

static void
s_string_destroy (void **item_p)
{
    zstr_free ((char **) item_p);
}

static void
s_fake_broker_actor (zsock_t *pipe, void *args)
{
    self_t self = {
        .pipe = pipe,
        .front = zsock_new_router ("tcp://127.0.0.1:*"),
        .events = zsock_new_pub ("tcp://127.0.0.1:*"),
        .instance = strdup ((const char *) args),
        .held = zlistx_new (),
        .tools = zlistx_new (),
        .epoch = 1000,
        .counts = zhashx_new (),
        .last = zhashx_new ()
    };
    assert (self.front && self.events);
    zlistx_set_destructor (self.held, s_held_destroy);
    zlistx_set_destructor (self.tools, s_string_destroy);
    zhashx_set_destructor (self.last, (zhashx_destructor_fn *) zframe_destroy);
    zsock_set_linger (self.front, 0);
    zsock_set_linger (self.events, 0);
    zsock_signal (pipe, 0);
    zsock_send (pipe, "ss", zsock_endpoint (self.front), zsock_endpoint (self.events));
    zpoller_t *poller = zpoller_new (pipe, self.front, NULL);
    while (!self.terminated) {
        void *which = zpoller_wait (poller, 1000);
        if (which == pipe)
            s_pipe (&self);
        else
        if (which == self.front)
            s_front (&self);
        else
        if (zpoller_terminated (poller))
            break;
    }
    zpoller_destroy (&poller);
    zsock_destroy (&self.front);
    zsock_destroy (&self.events);
    zlistx_destroy (&self.held);
    zlistx_destroy (&self.tools);
    zhashx_destroy (&self.counts);
    zhashx_destroy (&self.last);
    zstr_free (&self.instance);
    zstr_free (&self.feed);
    zstr_free (&self.drain);
}

//  --- The test's side -------------------------------------------------------------

fake_broker_t *
fake_broker_new (const char *instance)
{
    fake_broker_t *self = (fake_broker_t *) zmalloc (sizeof (fake_broker_t));
    self->actor = zactor_new (s_fake_broker_actor, (void *) instance);
    assert (self->actor);
    zsock_set_rcvtimeo (self->actor, FAKE_WAIT_MS);
    int rc = zsock_recv (self->actor, "ss", &self->front, &self->events);
    assert (rc == 0);
    return self;
}

void
fake_broker_destroy (fake_broker_t **self_p)
{
    fake_broker_t *self = *self_p;
    if (self) {
        zactor_destroy (&self->actor);
        zstr_free (&self->front);
        zstr_free (&self->events);
        free (self);
        *self_p = NULL;
    }
}

//  Sends a command on the actor's pipe, without waiting.
static void
s_tell (fake_broker_t *self, const char *command, const char *first, const char *second, const char *third)
{
    zmsg_t *msg = zmsg_new ();
    zmsg_addstr (msg, command);
    const char *strings [] = { first, second, third };
    for (size_t index = 0; index < 3 && strings [index]; index++)
        zmsg_addstr (msg, strings [index]);
    zmsg_send (&msg, self->actor);
}

void
fake_broker_tell (fake_broker_t *self, const char *command, const char *first, const char *second,
                  const char *third)
{
    s_tell (self, command, first, second, third);
    //  The actor reads its pipe and its sockets in no set order: a command
    //  that changes what it answers (SLOT, TOOLS, ...) must be applied before
    //  the test goes on to send what it should be answered. A query behind it
    //  on the pipe is answered only once the command was applied
    if (strneq (command, "COUNT") && strneq (command, "LAST")) {
        s_tell (self, "COUNT", "-", NULL, NULL);
        char *count = zstr_recv (self->actor);
        assert (count);
        zstr_free (&count);
    }
}

int
fake_broker_count (fake_broker_t *self, const char *command)
{
    s_tell (self, "COUNT", command, NULL, NULL);
    char *count = zstr_recv (self->actor);
    assert (count);
    int value = atoi (count);
    zstr_free (&count);
    return value;
}

int
fake_broker_wait_count (fake_broker_t *self, const char *command, int count)
{
    int64_t give_up = zclock_mono () + FAKE_WAIT_MS;
    int seen = fake_broker_count (self, command);
    while (seen < count && zclock_mono () < give_up) {
        zclock_sleep (20);
        seen = fake_broker_count (self, command);
    }
    return seen;
}

zframe_t *
fake_broker_last (fake_broker_t *self, const char *command)
{
    s_tell (self, "LAST", command, NULL, NULL);
    zframe_t *frame = zframe_recv (self->actor);
    if (frame && zframe_size (frame) == 0)
        zframe_destroy (&frame);
    return frame;
}
