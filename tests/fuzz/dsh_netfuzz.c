/*  =========================================================================
    dsh-netfuzz - a mutation fuzzer for a running broker's four sockets

    Usage: dsh-netfuzz ENDPOINT SECONDS [SEED]

    ENDPOINT is the broker's front (tcp://127.0.0.1:PORT); announce, work
    and events are PORT+1, +2, +3, as dsh-broker derives them. For SECONDS
    it sends valid dsh/1 messages (every command of FRONT, WORK and the
    announce channel) and mutations of them: bytes of the body flipped,
    cut, grown or replaced, frames dropped, doubled, emptied or made huge,
    the delimiter or the protocol frame missing or wrong. It speaks as
    clients (DEALERs on FRONT, some torn down mid-call), as a component
    (a PUB announcing a tool and a DEALER on WORK answering the calls it is
    sent, with good and bad tokens and bodies), as a watcher (a SUB on
    EVENTS), as a client that never reads its replies, as a rogue
    external stage if the broker's chain has one named "audit" (passing,
    answering, dropping and mangling calls and results on its slot), and
    as junk on raw TCP to all four ports. Every loop is bounded by the deadline; it only
    talks to the endpoint it is given, which must be a loopback address.
    Prints what it sent and exits 0.

    With $DSH_CERT and $DSH_BROKER_CERT set, every socket speaks CURVE as
    that key (an admin key reaches every FRONT command; the broker drops
    what the key's role may not send, which is fuzzed too).

    Run the sanitizer broker under it and stop the broker with SIGINT to
    read LeakSanitizer's report: deploy/fuzz.sh's header shows how.
    =========================================================================
*/

#include "dsh.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#define S_FRONT_CLIENTS 4
#define S_HUGE_MAX      (2 * 1024 * 1024)

typedef enum { S_FRONT, S_WORK, S_ANNOUNCE } s_where_t;

//  One valid message to start from: its command and its body as JSON.
typedef struct {
    s_where_t where;
    const char *command;
    const char *body;
} s_template_t;

//  The fuzzing component's id is "fz-1"; it serves "fz_tool". Calls to
//  "echo" and "sleep_ms" reach dsh-demo if one is attached.
static const s_template_t s_templates [] = {
    { S_FRONT, "HELLO", "{}" },
    { S_FRONT, "HELLO", "{\"id\": 7, \"stage\": \"permission\"}" },
    { S_FRONT, "PING", "{\"id\": \"p\"}" },
    { S_FRONT, "LIST", "{}" },
    { S_FRONT, "GET", "{\"name\": \"echo\", \"id\": [1, 2]}" },
    { S_FRONT, "SNAPSHOT", "{}" },
    { S_FRONT, "CALL", "{\"callId\": \"c1\", \"name\": \"echo\", \"arguments\": {\"message\": \"hi\"}}" },
    { S_FRONT, "CALL", "{\"callId\": \"c2\", \"name\": \"fz_tool\", \"arguments\": {\"x\": 1},"
                       " \"agent\": \"a\", \"meta\": {\"k\": \"v\"}, \"timeoutMs\": 500}" },
    { S_FRONT, "CALL", "{\"callId\": \"c3\", \"name\": \"sleep_ms\", \"arguments\": {\"ms\": 300},"
                       " \"timeoutMs\": 100}" },
    { S_FRONT, "CALL", "{\"callId\": \"c4\", \"name\": \"nobody\", \"arguments\": {}}" },
    { S_FRONT, "CANCEL", "{\"callId\": \"c3\"}" },
    { S_FRONT, "CANCEL", "{\"callId\": \"c2\"}" },
    { S_FRONT, "CHAIN", "{}" },
    { S_FRONT, "CONTROL", "{\"stage\": \"permission\", \"command\": \"pending\", \"id\": 3}" },
    { S_WORK, "HELLO", "{\"component\": \"fz-1\"}" },
    { S_WORK, "RESULT", "{\"callId\": \"c2\", \"content\": [{\"type\": \"text\", \"text\": \"ok\"}],"
                        " \"isError\": false}" },
    { S_WORK, "PROGRESS", "{\"callId\": \"c2\", \"progress\": 0.5, \"total\": 1, \"message\": \"m\"}" },
    { S_ANNOUNCE, "ANNOUNCE", "{\"component\": \"fz-1\", \"generation\": 1, \"tools\": [{\"name\": \"fz_tool\","
                              " \"description\": \"d\", \"parameters\": {\"type\": \"object\", \"properties\":"
                              " {\"x\": {\"type\": \"integer\"}}}, \"annotations\": {\"idempotentHint\": true}}]}" },
    { S_ANNOUNCE, "ANNOUNCE", "{\"component\": \"fz-2\", \"generation\": 2, \"tools\": [{\"name\": \"echo\","
                              " \"parameters\": {\"type\": \"object\"}}, {\"name\": \"bad name\"}]}" },
    { S_ANNOUNCE, "HEARTBEAT", "{\"component\": \"fz-1\", \"generation\": 1}" },
    { S_ANNOUNCE, "WITHDRAW", "{\"component\": \"fz-2\", \"generation\": 2}" },
};
#define S_TEMPLATES (sizeof (s_templates) / sizeof (s_templates [0]))

static const char *s_commands [] = {
    "HELLO", "PING", "LIST", "GET", "SNAPSHOT", "CALL", "CANCEL", "CHAIN", "CONTROL", "RESULT",
    "PROGRESS", "ANNOUNCE", "HEARTBEAT", "WITHDRAW", "SYNC", "REFUSED", "WELCOME", "call", "", "X"
};

typedef struct {
    zsock_t *front [S_FRONT_CLIENTS];
    zsock_t *work;
    zsock_t *announce;
    zsock_t *events;
    zsock_t *stage_up;          //  a rogue external stage: ROUTER on feed
    zsock_t *stage_down;        //  and DEALER on drain
    char *endpoints [4];
    int ports [4];
    zchunk_t *bodies [S_TEMPLATES];
    zframe_t *last_token;       //  the latest CALL token the component got
    size_t sent;
    size_t junk;
    size_t received;
    size_t calls_seen;
    size_t stage_calls;
} s_fuzz_t;

static uint32_t
s_random (uint32_t below)
{
    return below? (uint32_t) random () % below: 0;
}

static zsock_t *
s_connect (int type, const char *endpoint, const char *routing_id)
{
    zsock_t *sock = zsock_new (type);
    assert (sock);
    zsock_set_linger (sock, 0);
    zsock_set_sndhwm (sock, 1000);
    zsock_set_sndtimeo (sock, 0);
    if (routing_id)
        zsock_set_identity (sock, routing_id);
    if (type == ZMQ_SUB)
        zsock_set_subscribe (sock, "");
    //  Under CURVE, every socket as the key of $DSH_CERT
    dsh_curve_client (sock);
    int rc = zsock_connect (sock, "%s", endpoint);
    assert (rc == 0);
    return sock;
}

//  Mutates the bytes of body in place: a few flips, cuts, growths or a
//  whole replacement.
static void
s_mutate_bytes (zchunk_t **body_p)
{
    zchunk_t *body = *body_p;
    size_t size = zchunk_size (body);
    byte *data = zchunk_data (body);
    switch (s_random (6)) {
        case 0: {   //  flip bits
            for (uint32_t count = 1 + s_random (4); size && count; count--)
                data [s_random ((uint32_t) size)] ^= (byte) (1 << s_random (8));
            break;
        }
        case 1: {   //  set bytes to interesting values
            static const byte interesting [] = { 0x00, 0xff, 0x7f, 0x80, 0xc0, 0xc1, 0xd9, 0xdb,
                                                 0xdc, 0xdd, 0xde, 0xdf, 0x90, 0x80, 0xa0, 0xc4 };
            for (uint32_t count = 1 + s_random (3); size && count; count--)
                data [s_random ((uint32_t) size)] = interesting [s_random (sizeof (interesting))];
            break;
        }
        case 2:     //  cut
            zchunk_set (body, data, size? s_random ((uint32_t) size): 0);
            break;
        case 3: {   //  append junk
            byte junk [64];
            size_t count = 1 + s_random (sizeof (junk));
            for (size_t index = 0; index < count; index++)
                junk [index] = (byte) s_random (256);
            zchunk_extend (body, junk, count);
            break;
        }
        case 4: {   //  replace with random bytes
            size_t count = s_random (200);
            zchunk_t *fresh = zchunk_new (NULL, count);
            for (size_t index = 0; index < count; index++) {
                byte value = (byte) s_random (256);
                zchunk_extend (fresh, &value, 1);
            }
            zchunk_destroy (body_p);
            *body_p = fresh;
            break;
        }
        default: {  //  a map header claiming more than there is
            if (size)
                data [0] = (byte) (0x80 | s_random (16));
            break;
        }
    }
}

//  The frames of one message from a template, maybe mutated at the frame
//  level: returns a new zmsg (for a DEALER: "" DSH1 COMMAND [TOKEN] BODY).
static zmsg_t *
s_message (s_fuzz_t *self, size_t index, bool mutate)
{
    const s_template_t *template = &s_templates [index];
    zchunk_t *body = zchunk_dup (self->bodies [index]);
    if (mutate && s_random (2))
        s_mutate_bytes (&body);
    const char *command = template->command;
    if (mutate && s_random (8) == 0)
        command = s_commands [s_random (sizeof (s_commands) / sizeof (s_commands [0]))];

    zmsg_t *msg = zmsg_new ();
    if (template->where != S_ANNOUNCE)
        zmsg_addmem (msg, "", 0);
    zmsg_addstr (msg, mutate && s_random (16) == 0? "DSH2": DSH_PROTOCOL);
    zmsg_addstr (msg, command);
    bool tokened = template->where == S_WORK && !streq (template->command, "HELLO");
    if (tokened) {
        if (self->last_token && !(mutate && s_random (4) == 0))
            zmsg_append (msg, &(zframe_t *) { zframe_dup (self->last_token) });
        else
            zmsg_addmem (msg, "\x01\x02\x03\x04\x05\x06\x07\x08", mutate? s_random (10): 8);
    }
    zmsg_addmem (msg, zchunk_data (body), zchunk_size (body));
    zchunk_destroy (&body);
    if (!mutate || s_random (2))
        return msg;

    //  Frame-level damage
    switch (s_random (7)) {
        case 0: {   //  drop one frame
            zframe_t *frame = zmsg_first (msg);
            for (uint32_t skip = s_random ((uint32_t) zmsg_size (msg)); skip; skip--)
                frame = zmsg_next (msg);
            zmsg_remove (msg, frame);
            zframe_destroy (&frame);
            break;
        }
        case 1:     //  an extra body frame
            zmsg_addstr (msg, "\x80");
            break;
        case 2:     //  an empty frame at the end
            zmsg_addmem (msg, "", 0);
            break;
        case 3:     //  empty frames in front (envelope-like)
            zmsg_pushmem (msg, "", 0);
            zmsg_pushstr (msg, "route");
            break;
        case 4: {   //  a huge body
            size_t size = 4096 + s_random (S_HUGE_MAX);
            byte *data = (byte *) zmalloc (size);
            data [0] = 0xdf;        //  map32 of garbage
            zmsg_addmem (msg, data, size);
            free (data);
            break;
        }
        case 5: {   //  many frames
            for (uint32_t count = 10 + s_random (20); count; count--)
                zmsg_addmem (msg, "x", s_random (2));
            break;
        }
        default: {  //  an over-long command
            zmsg_t *fresh = zmsg_new ();
            if (template->where != S_ANNOUNCE)
                zmsg_addmem (fresh, "", 0);
            zmsg_addstr (fresh, DSH_PROTOCOL);
            zmsg_addstr (fresh, "AVERYLONGCOMMANDNAMEINDEED");
            zmsg_addstr (fresh, "\x80");
            zmsg_destroy (&msg);
            msg = fresh;
            break;
        }
    }
    return msg;
}

static void
s_send (s_fuzz_t *self, zsock_t *sock, zmsg_t **msg_p)
{
    //  zmsg_send with a zero send timeout drops what does not fit
    if (zmsg_send (msg_p, sock) == 0)
        self->sent++;
    zmsg_destroy (msg_p);
}

//  Reads everything waiting; the component remembers the latest CALL token.
static void
s_drain (s_fuzz_t *self, zsock_t *sock, bool component)
{
    while (zsock_events (sock) & ZMQ_POLLIN) {
        zmsg_t *msg = zmsg_recv (sock);
        if (!msg)
            break;
        self->received++;
        if (component && zmsg_size (msg) >= 5) {
            zframe_t *frame = zmsg_first (msg);
            frame = zmsg_next (msg);
            frame = zmsg_next (msg);
            if (zframe_streq (frame, DSH_CALL)) {
                zframe_destroy (&self->last_token);
                self->last_token = zframe_dup (zmsg_next (msg));
                self->calls_seen++;
            }
        }
        zmsg_destroy (&msg);
    }
}

//  Opens a TCP connection to a port and writes junk (sometimes after a
//  valid ZMTP greeting's start), then closes it.
static void
s_raw_junk (s_fuzz_t *self)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return;
    struct sockaddr_in address = { .sin_family = AF_INET };
    address.sin_port = htons ((uint16_t) self->ports [s_random (4)]);
    address.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    if (connect (fd, (struct sockaddr *) &address, sizeof (address)) == 0) {
        byte data [512];
        size_t size = 1 + s_random (sizeof (data));
        for (size_t index = 0; index < size; index++)
            data [index] = (byte) s_random (256);
        if (s_random (2)) {
            //  ZMTP 3 signature and version, then junk
            static const byte greeting [] = { 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0 };
            memcpy (data, greeting, size < sizeof (greeting)? size: sizeof (greeting));
        }
        if (send (fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT) > 0)
            self->junk++;
    }
    close (fd);
}

//  Asks the broker for the slot of the external stage "audit" (if its chain
//  has one) and attaches a rogue stage to it. Returns 0 or -1.
static int
s_stage_attach (s_fuzz_t *self)
{
    zsock_t *client = s_connect (ZMQ_DEALER, self->endpoints [0], NULL);
    zmsg_t *hello = zmsg_new ();
    zmsg_addmem (hello, "", 0);
    zmsg_addstr (hello, DSH_PROTOCOL);
    zmsg_addstr (hello, DSH_HELLO);
    zmsg_addmem (hello, "\x81\xa5stage\xa5" "audit", 13);
    zmsg_send (&hello, client);
    zsock_set_rcvtimeo (client, 2000);
    zmsg_t *welcome = zmsg_recv (client);
    zframe_t *body = welcome? zmsg_last (welcome): NULL;
    char error [256];
    dsh_doc_t *doc = body? dsh_proto_decode_body (body, error, sizeof (error)): NULL;
    const msgpack_object *stage = doc? dsh_map_get (dsh_doc_root (doc), "stage"): NULL;
    char *feed = doc? dsh_doc_strdup (doc, dsh_map_get (stage, "feed")): NULL;
    char *drain = doc? dsh_doc_strdup (doc, dsh_map_get (stage, "drain")): NULL;
    int rc = -1;
    if (feed && drain && strncmp (feed, "tcp://127.", 10) == 0 && strncmp (drain, "tcp://127.", 10) == 0) {
        self->stage_up = s_connect (ZMQ_ROUTER, feed, NULL);
        self->stage_down = s_connect (ZMQ_DEALER, drain, NULL);
        rc = 0;
    }
    dsh_doc_destroy (&doc);
    zmsg_destroy (&welcome);
    zsock_destroy (&client);
    return rc;
}

//  The rogue stage's turn: every call that comes down is passed on, answered,
//  or dropped (the broker times the stage out), every result coming up is
//  sent on or dropped, any of them mangled; now and then junk on both.
static void
s_stage_turn (s_fuzz_t *self)
{
    while (zsock_events (self->stage_up) & ZMQ_POLLIN) {
        zmsg_t *msg = zmsg_recv (self->stage_up);
        if (!msg)
            break;
        self->stage_calls++;
        //  [feed-id] [token] "" DSH1 CALL|CONTROL|CANCEL ...
        zframe_t *command = zmsg_size (msg) >= 5? zmsg_first (msg): NULL;
        for (int skip = 0; command && skip < 4; skip++)
            command = zmsg_next (msg);
        bool call = command && zframe_streq (command, DSH_CALL);
        bool control = command && zframe_streq (command, DSH_CONTROL);
        uint32_t choice = s_random (8);
        if (call && choice < 4) {
            if (choice == 0)
                zframe_reset (zmsg_last (msg), "\x80", 1);
            s_send (self, self->stage_down, &msg);
        }
        else
        if ((call || control) && choice < 7) {
            //  Answer: [feed-id] [token] "" DSH1 RESULT|CONTROL body
            zframe_t *frame = zmsg_first (msg);
            zmsg_t *answer = zmsg_new ();
            zmsg_append (answer, &(zframe_t *) { zframe_dup (frame) });
            zmsg_append (answer, &(zframe_t *) { zframe_dup (zmsg_next (msg)) });
            zmsg_addmem (answer, "", 0);
            zmsg_addstr (answer, DSH_PROTOCOL);
            zmsg_addstr (answer, call? DSH_RESULT: DSH_CONTROL);
            zchunk_t *body = zchunk_dup (self->bodies [S_TEMPLATES - 6]);
            if (choice > 4)
                s_mutate_bytes (&body);
            zmsg_addmem (answer, zchunk_data (body), zchunk_size (body));
            zchunk_destroy (&body);
            s_send (self, self->stage_up, &answer);
        }
        zmsg_destroy (&msg);
    }
    while (zsock_events (self->stage_down) & ZMQ_POLLIN) {
        //  A result on its way up: [feed-id] [token] "" DSH1 RESULT body
        zmsg_t *msg = zmsg_recv (self->stage_down);
        if (!msg)
            break;
        if (s_random (4)) {
            if (s_random (4) == 0)
                zframe_reset (zmsg_last (msg), "\x91\xc1", 2);
            s_send (self, self->stage_up, &msg);
        }
        zmsg_destroy (&msg);
    }
    if (s_random (50) == 0) {
        zmsg_t *junk = s_message (self, s_random (S_TEMPLATES), true);
        s_send (self, s_random (2)? self->stage_up: self->stage_down, &junk);
    }
}

int
main (int argc, char *argv [])
{
    if (argc < 3 || strncmp (argv [1], "tcp://127.", 10)) {
        fprintf (stderr, "usage: dsh-netfuzz tcp://127.0.0.1:PORT SECONDS [SEED]\n");
        return 2;
    }
    int seconds = atoi (argv [2]);
    char curve_error [256];
    if (dsh_curve_setup (NULL, NULL, curve_error, sizeof (curve_error))) {
        fprintf (stderr, "dsh-netfuzz: %s\n", curve_error);
        return 2;
    }
    srandom (argc > 3? (unsigned) atoi (argv [3]): (unsigned) time (NULL));
    zsys_set_linger (0);

    s_fuzz_t self = { 0 };
    const char *colon = strrchr (argv [1], ':');
    assert (colon);
    for (int index = 0; index < 4; index++) {
        self.ports [index] = atoi (colon + 1) + index;
        self.endpoints [index] = zsys_sprintf ("tcp://127.0.0.1:%d", self.ports [index]);
    }
    for (size_t index = 0; index < S_TEMPLATES; index++) {
        msgpack_sbuffer sbuf;
        char error [256];
        int rc = dsh_json_text_to_msgpack (s_templates [index].body, &sbuf, error, sizeof (error));
        assert (rc == 0);
        self.bodies [index] = zchunk_new (sbuf.data, sbuf.size);
        msgpack_sbuffer_destroy (&sbuf);
    }
    for (int index = 0; index < S_FRONT_CLIENTS; index++)
        self.front [index] = s_connect (ZMQ_DEALER, self.endpoints [0], NULL);
    //  The first client never reads: its queue fills and the broker's
    //  replies to it fail, the branch a slow or stuck client takes
    zsock_set_rcvhwm (self.front [0], 10);
    self.announce = s_connect (ZMQ_PUB, self.endpoints [1], NULL);
    self.work = s_connect (ZMQ_DEALER, self.endpoints [2], "fz-1");
    self.events = s_connect (ZMQ_SUB, self.endpoints [3], NULL);
    zclock_sleep (200);             //  let PUB/SUB join
    if (s_stage_attach (&self) == 0)
        printf ("dsh-netfuzz: attached to the chain's external stage \"audit\" as a rogue stage\n");

    int64_t deadline = zclock_mono () + (int64_t) seconds * 1000;
    size_t round = 0;
    while (zclock_mono () < deadline && !zsys_interrupted) {
        round++;
        size_t index = s_random (S_TEMPLATES);
        bool mutate = s_random (3) != 0;
        zmsg_t *msg = s_message (&self, index, mutate);
        switch (s_templates [index].where) {
            case S_FRONT: s_send (&self, self.front [s_random (S_FRONT_CLIENTS)], &msg); break;
            case S_WORK: s_send (&self, self.work, &msg); break;
            case S_ANNOUNCE: s_send (&self, self.announce, &msg); break;
        }
        //  Keep the component's tool registered and alive
        if (round % 50 == 0) {
            zmsg_t *announce = s_message (&self, S_TEMPLATES - 4, false);
            s_send (&self, self.announce, &announce);
            zmsg_t *hello = s_message (&self, S_TEMPLATES - 7, false);
            s_send (&self, self.work, &hello);
        }
        if (round % 200 == 0)
            s_raw_junk (&self);
        //  A client vanishes with calls in flight; a new one takes its place
        if (round % 500 == 0) {
            size_t which = 1 + s_random (S_FRONT_CLIENTS - 1);
            zsock_destroy (&self.front [which]);
            self.front [which] = s_connect (ZMQ_DEALER, self.endpoints [0], NULL);
        }
        for (int client = 1; client < S_FRONT_CLIENTS; client++)
            s_drain (&self, self.front [client], false);
        s_drain (&self, self.work, true);
        s_drain (&self, self.events, false);
        if (self.stage_up)
            s_stage_turn (&self);
        if (round % 20 == 0)
            zclock_sleep (1);       //  let the broker breathe; it is the one measured
    }
    printf ("dsh-netfuzz: %zu messages sent, %zu received, %zu calls to the fuzz component,"
            " %zu to the rogue stage, %zu raw TCP junk writes\n", self.sent, self.received, self.calls_seen,
            self.stage_calls, self.junk);

    for (int index = 0; index < S_FRONT_CLIENTS; index++)
        zsock_destroy (&self.front [index]);
    zsock_destroy (&self.work);
    zsock_destroy (&self.announce);
    zsock_destroy (&self.events);
    zsock_destroy (&self.stage_up);
    zsock_destroy (&self.stage_down);
    for (size_t index = 0; index < S_TEMPLATES; index++)
        zchunk_destroy (&self.bodies [index]);
    for (int index = 0; index < 4; index++)
        zstr_free (&self.endpoints [index]);
    zframe_destroy (&self.last_token);
    return 0;
}
