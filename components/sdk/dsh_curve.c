/*  =========================================================================
    dsh_curve - CURVE keys, and the identities they carry

    Keys are czmq's: zcert loads and saves them, dsh_keystore (started by
    whoever binds: dsh-broker's main, dsh-stage's) checks them against the
    allow-list directory. This file only applies them to sockets and reads
    what the keystore attached.
    =========================================================================
*/

#include "dsh_curve.h"
#include "dsh_proto.h"

#include <fnmatch.h>
#include <pthread.h>

//  The process's client keys. Set once at start by a program's flags or
//  the environment; read by every SDK socket before it connects.
static struct {
    bool decided;               //  setup ran (or the environment was read)
    zcert_t *cert;              //  ours, with its secret key
    char *broker_key;           //  the broker's public key, Z85
    zcert_t *server;            //  the certificate local servers use
} s_curve;

static const char *s_roles [] = {
    DSH_ROLE_COMPONENT, DSH_ROLE_AGENT, DSH_ROLE_APPROVER, DSH_ROLE_STAGE, DSH_ROLE_ADMIN, DSH_ROLE_AUDITOR
};

bool
dsh_curve_valid_role (const char *role)
{
    for (size_t index = 0; role && index < sizeof (s_roles) / sizeof (s_roles [0]); index++)
        if (streq (role, s_roles [index]))
            return true;
    return false;
}

//  True if the file at path reads as ZPL, or cannot be read at all (it
//  does not exist, or is not ours to read): zcert_load then does without
//  it, as it should for a public certificate next to a secret only its
//  owner may read (a broker's, under /etc/dsh).
static bool
s_parses (const char *path)
{
    if (!zsys_file_exists (path) || access (path, R_OK))
        return true;
    zchunk_t *chunk = zchunk_slurp (path, 0);
    zconfig_t *root = chunk? zconfig_chunk_load (chunk): NULL;
    zchunk_destroy (&chunk);
    bool parses = root != NULL;
    zconfig_destroy (&root);
    return parses;
}

zcert_t *
dsh_curve_load (const char *path)
{
    assert (path);
    //  zcert_load (czmq 4.2's zconfig_load) leaks when a file does not
    //  parse, and a bad certificate is input to expect: check first
    char *secret = zsys_sprintf ("%s_secret", path);
    bool parses = s_parses (path) && s_parses (secret);
    zstr_free (&secret);
    return parses && zsys_file_exists (path)? zcert_load (path): NULL;
}

//  Loads a certificate; NULL with a reason. zcert_load reads path, and
//  path_secret if it exists.
static zcert_t *
s_load (const char *path, bool secret, char *error, size_t error_size)
{
    if (!zsys_file_exists (path)) {
        snprintf (error, error_size, "%s: no such certificate", path);
        return NULL;
    }
    zcert_t *cert = dsh_curve_load (path);
    if (!cert) {
        snprintf (error, error_size, "%s: not a CURVE certificate (want the files `dsh keygen` writes)", path);
        return NULL;
    }
    if (secret && streq (zcert_secret_txt (cert), "0000000000000000000000000000000000000000")) {
        char *secret_path = zsys_sprintf ("%s_secret", path);
        if (zsys_file_exists (secret_path))
            snprintf (error, error_size, "%s: cannot read its secret key %s (%s)", path, secret_path,
                      strerror (access (secret_path, R_OK)? errno: EISDIR));
        else
            snprintf (error, error_size, "%s: no secret key (want %s_secret beside it)", path, path);
        zstr_free (&secret_path);
        zcert_destroy (&cert);
        return NULL;
    }
    return cert;
}

int
dsh_curve_setup (const char *cert_path, const char *broker_cert_path, char *error, size_t error_size)
{
    if (!cert_path || !*cert_path)
        cert_path = getenv ("DSH_CERT");
    if (!broker_cert_path || !*broker_cert_path)
        broker_cert_path = getenv ("DSH_BROKER_CERT");
    if (cert_path && !*cert_path)
        cert_path = NULL;
    if (broker_cert_path && !*broker_cert_path)
        broker_cert_path = NULL;

    zcert_destroy (&s_curve.cert);
    zstr_free (&s_curve.broker_key);
    s_curve.decided = true;
    if (!cert_path && !broker_cert_path)
        return 0;
    if (!cert_path || !broker_cert_path) {
        snprintf (error, error_size, "CURVE needs both keys: %s",
                  cert_path? "the broker's public certificate (--broker-cert or $DSH_BROKER_CERT)"
                           : "this party's certificate (--cert or $DSH_CERT)");
        return -1;
    }
    zcert_t *broker = s_load (broker_cert_path, false, error, error_size);
    if (!broker)
        return -1;
    s_curve.cert = s_load (cert_path, true, error, error_size);
    if (s_curve.cert)
        s_curve.broker_key = strdup (zcert_public_txt (broker));
    zcert_destroy (&broker);
    return s_curve.cert? 0: -1;
}

//  Reads the environment the first time a socket asks, for programs that
//  never called setup (embedders, tests).
static void
s_decide (void)
{
    //  Actors' threads may make their first sockets at once
    static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock (&mutex);
    if (!s_curve.decided) {
        char error [512];
        if (dsh_curve_setup (NULL, NULL, error, sizeof (error)))
            zsys_error ("dsh: %s; connecting without CURVE", error);
    }
    pthread_mutex_unlock (&mutex);
}

bool
dsh_curve_on (void)
{
    s_decide ();
    return s_curve.cert != NULL;
}

const char *
dsh_curve_public_key (void)
{
    return dsh_curve_on ()? zcert_public_txt (s_curve.cert): NULL;
}

void
dsh_curve_client (zsock_t *sock)
{
    assert (sock);
    if (dsh_curve_on ()) {
        zcert_apply (s_curve.cert, sock);
        zsock_set_curve_serverkey (sock, s_curve.broker_key);
    }
}

void
dsh_curve_server (zsock_t *sock, zcert_t *cert)
{
    assert (sock);
    if (!cert)
        cert = s_curve.server;
    if (cert) {
        zcert_apply (cert, sock);
        zsock_set_curve_server (sock, 1);
        zsock_set_zap_domain (sock, DSH_CURVE_DOMAIN);
    }
}

void
dsh_curve_set_server (zcert_t *cert)
{
    s_curve.server = cert;
}

const char *
dsh_curve_server_key (void)
{
    return s_curve.server? zcert_public_txt (s_curve.server): NULL;
}

zcert_t *
dsh_curve_cert (void)
{
    return dsh_curve_on ()? s_curve.cert: NULL;
}

int
dsh_curve_keygen (const char *path, const char *role, const char *components, const char *tools,
                  const char *agent, const char *name, char *error, size_t error_size)
{
    assert (path);
    if (!dsh_curve_valid_role (role)) {
        snprintf (error, error_size, "role \"%s\" is not one of component, agent, approver, stage, admin",
                  role? role: "");
        return -1;
    }
    if (streq (role, DSH_ROLE_COMPONENT) && (!components || !*components)) {
        snprintf (error, error_size, "a component key needs --components (the ids it may serve, e.g. \"fs-*\")");
        return -1;
    }
    if (!streq (role, DSH_ROLE_COMPONENT) && (components || tools)) {
        snprintf (error, error_size, "--components and --tools are for component keys only");
        return -1;
    }
    if (streq (role, DSH_ROLE_AGENT) && (!agent || !*agent)) {
        snprintf (error, error_size, "an agent key needs --agent (the agent id it is)");
        return -1;
    }
    if (agent && !dsh_proto_valid_id (agent, strlen (agent))) {
        snprintf (error, error_size, "agent id \"%s\" is not 1-128 printable characters", agent);
        return -1;
    }
    if (agent && !streq (role, DSH_ROLE_AGENT) && !streq (role, DSH_ROLE_ADMIN)) {
        snprintf (error, error_size, "--agent is for agent and admin keys only");
        return -1;
    }
    zcert_t *cert = zcert_new ();
    if (!cert) {
        snprintf (error, error_size, "cannot make a keypair: %s", zmq_strerror (zmq_errno ()));
        return -1;
    }
    zcert_set_meta (cert, "role", "%s", role);
    if (components)
        zcert_set_meta (cert, "components", "%s", components);
    if (tools)
        zcert_set_meta (cert, "tools", "%s", tools);
    if (agent)
        zcert_set_meta (cert, "agent", "%s", agent);
    if (name)
        zcert_set_meta (cert, "name", "%s", name);
    int rc = zcert_save (cert, path);
    if (rc)
        snprintf (error, error_size, "cannot write %s: %s", path, strerror (errno));
    zcert_destroy (&cert);
    return rc;
}

//  ---------------------------------------------------------------------
//  Identities

//  Fills self from a connection's metadata, as get reads it off a message
static void
s_identity_fill (dsh_identity_t *self, const char *(*get) (void *, const char *), void *message)
{
    assert (self);
    //  The keystore makes a CURVE client's User-Id its public key; a plain
    //  connection has none
    self->key = get (message, "User-Id");
    bool curve = self->key != NULL;
    self->role = curve? get (message, "role"): NULL;
    self->agent = curve? get (message, "agent"): NULL;
    self->components = curve? get (message, "components"): NULL;
    self->tools = curve? get (message, "tools"): NULL;
    self->name = curve? get (message, "name"): NULL;
}

static const char *
s_msg_gets (void *message, const char *property)
{
    return zmq_msg_gets ((zmq_msg_t *) message, property);
}

static const char *
s_frame_meta (void *message, const char *property)
{
    return zframe_meta ((zframe_t *) message, property);
}

void
dsh_identity_read (dsh_identity_t *self, zmq_msg_t *msg)
{
    s_identity_fill (self, s_msg_gets, msg);
}

void
dsh_identity_read_frame (dsh_identity_t *self, zframe_t *frame)
{
    s_identity_fill (self, s_frame_meta, frame);
}

bool
dsh_identity_known (const dsh_identity_t *self)
{
    assert (self);
    return self->key != NULL;
}

bool
dsh_identity_is (const dsh_identity_t *self, const char *role)
{
    assert (self);
    if (!self->role)
        return false;
    if (streq (self->role, DSH_ROLE_ADMIN))
        return !streq (role, DSH_ROLE_COMPONENT);
    return streq (self->role, role);
}

//  True if text matches one of list's comma-separated patterns (fnmatch),
//  each trimmed of blanks.
static bool
s_matches (const char *list, const char *text)
{
    const char *cursor = list;
    while (*cursor) {
        while (*cursor == ' ' || *cursor == ',')
            cursor++;
        size_t length = strcspn (cursor, ",");
        while (length && cursor [length - 1] == ' ')
            length--;
        if (length && length <= DSH_NAME_MAX) {
            char pattern [DSH_NAME_MAX + 1];
            memcpy (pattern, cursor, length);
            pattern [length] = 0;
            if (fnmatch (pattern, text, 0) == 0)
                return true;
        }
        cursor += strcspn (cursor, ",");
    }
    return false;
}

bool
dsh_identity_serves (const dsh_identity_t *self, const char *component)
{
    assert (self);
    if (!self->role || !streq (self->role, DSH_ROLE_COMPONENT) || !self->components)
        return false;
    return s_matches (self->components, component);
}

bool
dsh_identity_offers (const dsh_identity_t *self, const char *tool)
{
    assert (self);
    return !self->tools || s_matches (self->tools, tool);
}

//  ---------------------------------------------------------------------
//  Handshake watch

struct _dsh_handshake_t {
    void *watched;              //  the socket watched (its libzmq handle)
    zsock_t *monitor;           //  PAIR: libzmq's events for the socket
    char failure [256];
    bool failed;
    size_t successes;           //  handshakes that succeeded, in all
    //  Since the last success: what the connection attempts came to, for
    //  a timeout's message (none of it is a verdict)
    size_t connections;         //  TCP connections made
    size_t closed;              //  handshakes the peer closed, or that timed out
    int closed_errno;           //  why the last of them ended
    char progress [256];
    //  The greeting probe (s_probe_start): at most one in flight, at most
    //  one started a second
    char probe_endpoint [256];  //  where the last handshake closed unexplained
    bool probe_due;             //  one is wanted there
    zsock_t *probe;             //  STREAM, connected to probe_endpoint
    bool probe_connected;       //  its connection was made
    byte probe_greeting [32];   //  the peer's greeting, up to its mechanism
    size_t probe_read;
    int64_t probe_started;      //  zclock_mono time the last one started
};

//  The probe's timings: how often one may start, how long one may take
#define S_PROBE_INTERVAL_MS     1000
#define S_PROBE_DEADLINE_MS     2000

//  ZMTP 3's greeting (RFC 23): the signature, the major and minor
//  versions, then the mechanism, a name null-padded to 20 bytes
#define S_GREETING_SIGNATURE    10
#define S_GREETING_MAJOR        10
#define S_GREETING_MECHANISM    12
#define S_GREETING_NAME_MAX     20

dsh_handshake_t *
dsh_handshake_new (zsock_t *sock)
{
    assert (sock);
    static int sequence = 0;
    dsh_handshake_t *self = (dsh_handshake_t *) zmalloc (sizeof (dsh_handshake_t));
    assert (self);
    char endpoint [64];
    snprintf (endpoint, sizeof (endpoint), "inproc://dsh-handshake-%p-%d", (void *) self, ++sequence);
    int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
               | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    self->watched = zsock_resolve (sock);
    if (zmq_socket_monitor (self->watched, endpoint, events) == 0) {
        self->monitor = zsock_new (ZMQ_PAIR);
        if (self->monitor && zsock_connect (self->monitor, "%s", endpoint)) {
            zsock_destroy (&self->monitor);
            zmq_socket_monitor (self->watched, NULL, 0);
        }
    }
    return self;
}

void
dsh_handshake_destroy (dsh_handshake_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_handshake_t *self = *self_p;
        //  libzmq sends each event with a blocking send, from its I/O
        //  thread: an event for a PAIR that has gone would stall every
        //  socket of the process. So the monitor is stopped first (this
        //  waits for an event being sent, which the PAIR still takes)
        if (self->monitor)
            zmq_socket_monitor (self->watched, NULL, 0);
        zsock_destroy (&self->monitor);
        zsock_destroy (&self->probe);
        free (self);
        *self_p = NULL;
    }
}

//  The verdict of a mechanism mismatch, whichever way it was seen.
static void
s_handshake_mismatch (dsh_handshake_t *self)
{
    self->failed = true;
    snprintf (self->failure, sizeof (self->failure), "%s",
              dsh_curve_on ()? "the broker does not speak CURVE, and this party does (drop --cert)"
                             : "the broker requires CURVE: give --cert and --broker-cert "
                               "(or $DSH_CERT and $DSH_BROKER_CERT)");
}

static void
s_probe_end (dsh_handshake_t *self)
{
    zsock_destroy (&self->probe);
    self->probe_connected = false;
    self->probe_read = 0;
}

//  A handshake the peer closed giving no reason may be a mechanism
//  mismatch that libzmq could not tell: the server side sees it in this
//  side's greeting and closes, and its own greeting, which names its
//  mechanism, may not have gone out first (libzmq then reports EPIPE, the
//  end of the stream in the greeting). Whether it did is a race, lost on
//  a loaded machine. So the watch asks the peer itself: a connection of
//  its own (a STREAM socket: raw TCP, through libzmq) sends the greeting
//  only up to its major version, which is what makes a ZMTP 3 peer send
//  the rest of its own, mechanism included; never having this side's
//  mechanism, the peer cannot find a mismatch and close first. The probe
//  is driven from the drain, a step at a time, and never blocks.
static void
s_probe_start (dsh_handshake_t *self)
{
    self->probe_due = false;
    self->probe_started = zclock_mono ();
    self->probe = zsock_new (ZMQ_STREAM);
    if (!self->probe)
        return;
    zsock_set_linger (self->probe, 0);
    //  One connection: a probe whose connection fails or closes is done
    zsock_set_reconnect_ivl (self->probe, -1);
    if (strncmp (self->probe_endpoint, "tcp://[", 7) == 0)
        zsock_set_ipv6 (self->probe, 1);
    if (zsock_connect (self->probe, "%s", self->probe_endpoint))
        s_probe_end (self);
}

//  Reads the peer's greeting so far: a verdict once it names a mechanism
//  that is not this side's. Returns true when the probe is done.
static bool
s_probe_judge (dsh_handshake_t *self)
{
    const byte *greeting = self->probe_greeting;
    size_t read = self->probe_read;
    //  Not ZMTP 3 (no signature, or an older version): it names no mechanism
    if ((read >= 1 && greeting [0] != 0xFF)
    ||  (read >= S_GREETING_SIGNATURE && !(greeting [S_GREETING_SIGNATURE - 1] & 0x01))
    ||  (read > S_GREETING_MAJOR && greeting [S_GREETING_MAJOR] < 3))
        return true;
    if (read < S_GREETING_MECHANISM + S_GREETING_NAME_MAX)
        return false;
    char ours [S_GREETING_NAME_MAX] = { 0 };
    memcpy (ours, dsh_curve_on ()? "CURVE": "NULL", dsh_curve_on ()? 5: 4);
    if (memcmp (greeting + S_GREETING_MECHANISM, ours, S_GREETING_NAME_MAX))
        s_handshake_mismatch (self);
    return true;
}

//  Takes what the probe's connection has for it, without blocking: the
//  connection's notice (an empty frame; then the greeting goes out), the
//  peer's greeting, or the notice that the connection closed.
static void
s_probe_step (dsh_handshake_t *self)
{
    void *probe = zsock_resolve (self->probe);
    bool done = zclock_mono () - self->probe_started > S_PROBE_DEADLINE_MS;
    while (!done) {
        byte peer [256];
        int peer_size = zmq_recv (probe, peer, sizeof (peer), ZMQ_DONTWAIT);
        if (peer_size < 0)
            break;
        byte data [64];
        int size = zsock_rcvmore (self->probe)? zmq_recv (probe, data, sizeof (data), ZMQ_DONTWAIT): -1;
        if (size < 0 || (size_t) peer_size > sizeof (peer))
            done = true;
        else
        if (size == 0 && !self->probe_connected) {
            //  Connected: the signature and the major version, no more
            static const byte opening [S_GREETING_MAJOR + 1] = { 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3 };
            self->probe_connected = true;
            done = zmq_send (probe, peer, (size_t) peer_size, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0
                || zmq_send (probe, opening, sizeof (opening), ZMQ_DONTWAIT) < 0;
        }
        else
        if (size == 0)
            done = true;        //  the peer closed the connection
        else {
            size_t take = (size_t) size < sizeof (data)? (size_t) size: sizeof (data);
            if (take > sizeof (self->probe_greeting) - self->probe_read)
                take = sizeof (self->probe_greeting) - self->probe_read;
            memcpy (self->probe_greeting + self->probe_read, data, take);
            self->probe_read += take;
            done = s_probe_judge (self);
        }
    }
    if (done)
        s_probe_end (self);
}

static void
s_handshake_event (dsh_handshake_t *self, uint16_t event, uint32_t value, zframe_t *endpoint)
{
    if (event == ZMQ_EVENT_CONNECTED)
        self->connections++;
    else
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        self->failed = false;
        self->successes++;
        self->connections = 0;
        self->closed = 0;
        self->probe_due = false;
        s_probe_end (self);
    }
    else
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
        //  The connection closed, or its handshake timed out, before the
        //  handshake said anything: a broker starting, stopped or
        //  restarting does that, so it is no verdict and libzmq connects
        //  again. A mechanism mismatch may show as one (s_probe_step
        //  tells it apart), on TCP
        self->closed++;
        self->closed_errno = (int) value;
        size_t size = endpoint? zframe_size (endpoint): 0;
        if (size > 6 && size < sizeof (self->probe_endpoint)
        &&  memcmp (zframe_data (endpoint), "tcp://", 6) == 0) {
            memcpy (self->probe_endpoint, zframe_data (endpoint), size);
            self->probe_endpoint [size] = 0;
            self->probe_due = true;
        }
    }
    else
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        s_handshake_mismatch (self);
    else {
        self->failed = true;
        if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
            snprintf (self->failure, sizeof (self->failure),
                      "the broker refused this party's key (ZAP status %u): it is not in the broker's allow-list",
                      value);
        else
            snprintf (self->failure, sizeof (self->failure), "%s",
                      "the handshake with the broker failed (protocol error; is --broker-cert the broker's key?)");
    }
}

//  Takes every event waiting, and moves the greeting probe on.
static void
s_handshake_drain (dsh_handshake_t *self)
{
    while (self->monitor && zsock_events (self->monitor) & ZMQ_POLLIN) {
        zmsg_t *msg = zmsg_recv (self->monitor);
        zframe_t *frame = msg? zmsg_first (msg): NULL;
        if (frame && zframe_size (frame) == 6) {
            const byte *data = zframe_data (frame);
            uint16_t event;
            uint32_t value;
            memcpy (&event, data, 2);
            memcpy (&value, data + 2, 4);
            s_handshake_event (self, event, value, zmsg_next (msg));
        }
        zmsg_destroy (&msg);
    }
    if (self->probe)
        s_probe_step (self);
    if (!self->probe && self->probe_due && !self->failed
    &&  zclock_mono () - self->probe_started >= S_PROBE_INTERVAL_MS)
        s_probe_start (self);
}

const char *
dsh_handshake_failure (dsh_handshake_t *self)
{
    assert (self);
    s_handshake_drain (self);
    return self->failed? self->failure: NULL;
}

size_t
dsh_handshake_successes (dsh_handshake_t *self)
{
    assert (self);
    s_handshake_drain (self);
    return self->successes;
}

const char *
dsh_handshake_progress (dsh_handshake_t *self)
{
    assert (self);
    s_handshake_drain (self);
    if (self->successes && !self->connections && !self->closed)
        return NULL;
    if (!self->connections)
        snprintf (self->progress, sizeof (self->progress), "%s",
                  "no connection could be made (nothing listens there, or it cannot be reached)");
    else
    if (!self->closed)
        snprintf (self->progress, sizeof (self->progress), "%s",
                  "a connection was made but the handshake got no answer (is the broker stopped or overloaded?)");
    else {
        char why [96] = "";
        if (self->closed_errno)
            snprintf (why, sizeof (why), " (%s)", strerror (self->closed_errno));
        //  A wrong server key looks like this too: the broker cannot read
        //  this side's HELLO and closes
        snprintf (self->progress, sizeof (self->progress),
                  "the broker closed the connection in the handshake %zu time(s), giving no reason%s: %s",
                  self->closed, why, dsh_curve_on ()? "is --broker-cert the broker's key? is it still starting?"
                                                    : "is it still starting? is it a dsh broker?");
    }
    return self->progress;
}
