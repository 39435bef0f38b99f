/*  =========================================================================
    dsh_curve - CURVE keys, and the identities they carry

    A dsh swarm off loopback runs ZeroMQ's CURVE on every socket: the broker
    has a keypair, every other party has its own, and the broker's allow-list
    (a directory of public certificates, czmq's zcert format, checked by
    the process's dsh_keystore) says which keys may connect and, in each
    certificate's metadata, what each key is:

        role        component | agent | approver | stage | admin
        components  for a component key: the ids it may serve, comma-
                    separated, each a pattern (fnmatch: "fs-*")
        tools       for a component key, optional: the tool names it may
                    announce, patterns likewise (absent: any)
        agent       for an agent key: the agent id it is

    libzmq attaches that metadata to every message from the connection, so
    a receiver reads who sent a message off the message itself
    (dsh_identity_read), and no body field can claim otherwise.

    Client side, one process-wide setting applies to every socket the SDK
    connects to a broker: the party's certificate (public and secret) and
    the broker's public certificate, from --cert / --broker-cert or
    $DSH_CERT / $DSH_BROKER_CERT. With neither, sockets are plain.
    =========================================================================
*/

#ifndef DSH_CURVE_H_INCLUDED
#define DSH_CURVE_H_INCLUDED

#include <czmq.h>

#ifdef __cplusplus
extern "C" {
#endif

//  The ZAP domain of every dsh socket that serves CURVE
#define DSH_CURVE_DOMAIN        "dsh"

//  The roles a key may have (certificate metadata "role")
#define DSH_ROLE_COMPONENT      "component"
#define DSH_ROLE_AGENT          "agent"
#define DSH_ROLE_APPROVER       "approver"
#define DSH_ROLE_STAGE          "stage"
#define DSH_ROLE_ADMIN          "admin"
#define DSH_ROLE_AUDITOR        "auditor"

//  True if role is one of the five roles.
bool
    dsh_curve_valid_role (const char *role);

//  Set the process's client keys (call it from main, before any thread
//  makes a socket): cert_path is the party's certificate as
//  zcert_save writes it (the public file; the secret is cert_path +
//  "_secret"), broker_cert_path the broker's public certificate. NULL for
//  either reads $DSH_CERT / $DSH_BROKER_CERT. Neither given: CURVE off.
//  Returns 0, or -1 with a reason (one given without the other, a file
//  that is missing or not a certificate, a certificate with no secret key).
int
    dsh_curve_setup (const char *cert_path, const char *broker_cert_path,
                     char *error, size_t error_size);

//  True if the process's client sockets use CURVE (after dsh_curve_setup,
//  or, if nothing called it, from the environment on first use).
bool
    dsh_curve_on (void);

//  The process's public key (Z85, 40 characters), or NULL when off.
const char *
    dsh_curve_public_key (void);

//  Make sock a CURVE client of the broker if the process has keys; call
//  before connecting. A bad $DSH_CERT is logged once and leaves sock plain
//  (the broker then refuses it, and the party reports the handshake).
void
    dsh_curve_client (zsock_t *sock);

//  Make sock a CURVE server with cert (public and secret), authenticated by
//  the process's ZAP handler (dsh_keystore) in domain DSH_CURVE_DOMAIN; call
//  before binding. cert NULL: the process's server certificate if one was
//  set (dsh_curve_set_server), else sock stays plain.
void
    dsh_curve_server (zsock_t *sock, zcert_t *cert);

//  Set the certificate every dsh_curve_server (sock, NULL) uses in this
//  process (the broker's, for the sockets its built-in stages bind). Not
//  taken: the caller keeps it alive while sockets are made.
void
    dsh_curve_set_server (zcert_t *cert);

//  Load a certificate (path, and path + "_secret" if it exists), or NULL
//  if it is missing or is not one. Unlike zcert_load, costs nothing on a
//  file that does not parse.
zcert_t *
    dsh_curve_load (const char *path);

//  The public key (Z85) of the process's server certificate, or NULL.
const char *
    dsh_curve_server_key (void);

//  The process's own client certificate (with its secret), or NULL when
//  CURVE is off. Not given: the process keeps it.
zcert_t *
    dsh_curve_cert (void);

//  Write a new certificate pair to path and path + "_secret", with role and
//  the optional components and tools (patterns) and agent id in its
//  metadata, and name if given. Returns 0, or -1 with a reason.
int
    dsh_curve_keygen (const char *path, const char *role, const char *components, const char *tools,
                      const char *agent, const char *name, char *error, size_t error_size);

//  Who sent a message, as the broker's allow-list says. Strings point into
//  the message's metadata and live as long as the message.
typedef struct {
    const char *key;            //  public key (Z85), NULL on a plain connection
    const char *role;           //  NULL when the certificate has none
    const char *agent;
    const char *components;
    const char *tools;
    const char *name;           //  the certificate's name, if it has one
} dsh_identity_t;

//  Read the identity of the connection msg came from.
void
    dsh_identity_read (dsh_identity_t *self, zmq_msg_t *msg);

//  The same, from a czmq frame received on the connection.
void
    dsh_identity_read_frame (dsh_identity_t *self, zframe_t *frame);

//  True if the connection was authenticated (CURVE).
bool
    dsh_identity_known (const dsh_identity_t *self);

//  True if the identity has role (an admin key has every role but
//  component: it cannot serve tools).
bool
    dsh_identity_is (const dsh_identity_t *self, const char *role);

//  True if the identity is a component key allowed to serve component.
bool
    dsh_identity_serves (const dsh_identity_t *self, const char *component);

//  True if the identity may announce a tool of that name (a component key
//  whose certificate has no tools list may announce any).
bool
    dsh_identity_offers (const dsh_identity_t *self, const char *tool);

//  Watches a connecting socket's handshakes (a libzmq socket monitor) to
//  tell why a broker does not answer: its key was refused, or it does not
//  speak the same mechanism (libzmq says so only when the broker's greeting
//  arrived before the broker closed; else the watch reads the greeting
//  itself).
typedef struct _dsh_handshake_t dsh_handshake_t;

//  Watch sock's handshakes. Call before connecting.
dsh_handshake_t *
    dsh_handshake_new (zsock_t *sock);

//  Stop watching and destroy; call before destroying the socket. Safe twice.
void
    dsh_handshake_destroy (dsh_handshake_t **self_p);

//  Why the last handshake failed, in words, when the handshake said why
//  (the key was refused, the mechanisms differ, a protocol error), or NULL
//  if none did since the last success. A connection closed or silent in
//  the handshake is no failure (see dsh_handshake_progress), unless the
//  peer's greeting, which the watch then reads on a TCP connection of its
//  own, names another mechanism than this side's. Does not block.
const char *
    dsh_handshake_failure (dsh_handshake_t *self);

//  What became of the connection attempts since the last handshake that
//  succeeded, in words for a timeout's message (no connection made; one
//  made whose handshake got no answer; handshakes ended with no reason
//  given, as while a broker starts), or NULL if the last attempt
//  succeeded. None of it is a verdict: libzmq keeps trying. Does not block.
const char *
    dsh_handshake_progress (dsh_handshake_t *self);

//  How many handshakes have succeeded since the watch began: a number that
//  grows after the first means the connection was made again. Does not
//  block.
size_t
    dsh_handshake_successes (dsh_handshake_t *self);

#ifdef __cplusplus
}
#endif

#endif
