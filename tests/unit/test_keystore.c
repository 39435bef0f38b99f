/*  =========================================================================
    test_keystore - dsh_keystore: a CURVE ROUTER on loopback served by the
    store, and clients with keys made here: an allowed key connects and the
    server reads its role off the message; an unknown key is refused; what
    an allow-list directory can hold against its broker (a duplicate key,
    links to itself, a 1 MB file, a nested directory, a FIFO, files that
    are not certificates, oversized and reserved metadata) leaves the store
    serving the rest; certificates added and removed while it runs are
    accepted and refused after its next check. Nothing waits on a clock:
    every wait polls for its condition up to a deadline.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsh_curve.h"
#include "dsh_keystore.h"

//  Long enough for a handshake under valgrind on a loaded machine
#define S_DEADLINE_MS   15000

static char s_dir [64];

//  s_dir/format... Caller frees.
static char *
s_path (const char *format, ...)
{
    va_list argptr;
    va_start (argptr, format);
    char *name = zsys_vprintf (format, argptr);
    va_end (argptr);
    char *path = zsys_sprintf ("%s/%s", s_dir, name);
    zstr_free (&name);
    return path;
}

static int
s_setup (void **state)
{
    (void) state;
    snprintf (s_dir, sizeof (s_dir), "/tmp/dsh-test-keystore-XXXXXX");
    assert_non_null (mkdtemp (s_dir));
    char *keys = s_path ("keys");
    char *allow = s_path ("allow");
    assert_int_equal (mkdir (keys, 0700), 0);
    assert_int_equal (mkdir (allow, 0700), 0);
    zstr_free (&keys);
    zstr_free (&allow);
    return 0;
}

static int
s_remove_entry (const char *path, const struct stat *status, int type, struct FTW *walk)
{
    (void) status;
    (void) type;
    (void) walk;
    remove (path);
    return 0;
}

//  Removes the tree at path, links and all, following none (zdir would
//  follow a link to the directory, for ever)
static void
s_remove_tree (const char *path)
{
    nftw (path, s_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int
s_teardown (void **state)
{
    (void) state;
    s_remove_tree (s_dir);
    return 0;
}

//  A new agent key "name" in keys/ (public and secret).
static void
s_keygen (const char *name)
{
    char *path = s_path ("keys/%s", name);
    char error [256];
    if (dsh_curve_keygen (path, DSH_ROLE_AGENT, NULL, NULL, name, name, error, sizeof (error)))
        fail_msg ("keygen %s: %s", name, error);
    zstr_free (&path);
}

static zcert_t *
s_load (const char *name)
{
    char *path = s_path ("keys/%s", name);
    zcert_t *cert = zcert_load (path);
    zstr_free (&path);
    assert_non_null (cert);
    return cert;
}

//  Key name with fresh metadata: agent, and extra = value if given
//  (zcert_set_meta does not replace what the file had)
static zcert_t *
s_load_as (const char *name, const char *agent, const char *extra, const char *value)
{
    zcert_t *loaded = s_load (name);
    zcert_t *cert = zcert_new_from (zcert_public_key (loaded), zcert_secret_key (loaded));
    zcert_destroy (&loaded);
    zcert_set_meta (cert, "role", "%s", DSH_ROLE_AGENT);
    zcert_set_meta (cert, "agent", "%s", agent);
    if (extra)
        zcert_set_meta (cert, extra, "%s", value);
    return cert;
}

//  Key name's public certificate into the allow-list as file (its path
//  under allow/).
static void
s_allow (const char *name, const char *file)
{
    zcert_t *cert = s_load (name);
    char *path = s_path ("allow/%s", file);
    assert_int_equal (zcert_save_public (cert, path), 0);
    zstr_free (&path);
    zcert_destroy (&cert);
}

//  Writes size bytes of text (repeated) to allow/file.
static void
s_write (const char *file, const char *text, size_t size)
{
    char *path = s_path ("allow/%s", file);
    FILE *handle = fopen (path, "w");
    assert_non_null (handle);
    for (size_t written = 0; written < size; written += strlen (text))
        fputs (text, handle);
    fclose (handle);
    zstr_free (&path);
}

static void
s_unlink (const char *file)
{
    char *path = s_path ("allow/%s", file);
    assert_int_equal (unlink (path), 0);
    zstr_free (&path);
}

//  ---------------------------------------------------------------------
//  A store and a CURVE server it checks

typedef struct {
    zactor_t *store;
    zcert_t *cert;
    zsock_t *server;
    int port;
} s_server_t;

//  Starts a store on allow/, checking every interval_ms, and a ROUTER.
static void
s_server_start (s_server_t *self, int interval_ms)
{
    self->store = zactor_new (dsh_keystore_actor, NULL);
    assert_non_null (self->store);
    char interval [16];
    snprintf (interval, sizeof (interval), "%d", interval_ms);
    zstr_sendx (self->store, "INTERVAL", interval, NULL);
    zsock_wait (self->store);
    char *allow = s_path ("allow");
    zstr_sendx (self->store, "CURVE", allow, NULL);
    assert_int_equal (zsock_wait (self->store), 0);
    zstr_free (&allow);
    self->cert = zcert_new ();
    self->server = zsock_new (ZMQ_ROUTER);
    dsh_curve_server (self->server, self->cert);
    self->port = zsock_bind (self->server, "tcp://127.0.0.1:*");
    assert_true (self->port > 0);
}

//  The test's server, stopped by s_test_teardown if the test fails
static s_server_t s_server;

static void
s_server_stop (s_server_t *self)
{
    zsock_destroy (&self->server);
    zcert_destroy (&self->cert);
    zactor_destroy (&self->store);
}

static int
s_test_teardown (void **state)
{
    (void) state;
    s_server_stop (&s_server);
    return 0;
}

//  How many keys the store serves.
static int
s_keys (s_server_t *self)
{
    zstr_sendx (self->store, "KEYS", NULL);
    char *count = zstr_recv (self->store);
    assert_non_null (count);
    int keys = atoi (count);
    zstr_free (&count);
    return keys;
}

//  A client with key name connects and sends "hi": 1 if the server got it
//  with the client's key (its role and agent into peer_role and
//  peer_agent if not NULL), 0 if the handshake was refused, -1 if neither
//  happened by the deadline.
static int
s_try (s_server_t *self, const char *name, char *peer_role, char *peer_agent)
{
    zcert_t *cert = s_load (name);
    zsock_t *client = zsock_new (ZMQ_DEALER);
    zsock_set_linger (client, 0);
    zsock_set_sndtimeo (client, 0);
    zcert_apply (cert, client);
    zsock_set_curve_serverkey (client, zcert_public_txt (self->cert));
    dsh_handshake_t *handshake = dsh_handshake_new (client);
    assert_int_equal (zsock_connect (client, "tcp://127.0.0.1:%d", self->port), 0);
    zstr_send (client, "hi");
    int result = -1;
    zpoller_t *poller = zpoller_new (self->server, NULL);
    int64_t give_up = zclock_mono () + S_DEADLINE_MS;
    while (result == -1 && zclock_mono () < give_up) {
        if (zpoller_wait (poller, 20)) {
            zmsg_t *msg = zmsg_recv (self->server);
            dsh_identity_t peer;
            dsh_identity_read_frame (&peer, zmsg_last (msg));
            //  An earlier client's message is not this one's
            if (peer.key && streq (peer.key, zcert_public_txt (cert))) {
                result = 1;
                if (peer_role)
                    snprintf (peer_role, 64, "%s", peer.role? peer.role: "");
                if (peer_agent)
                    snprintf (peer_agent, 64, "%s", peer.agent? peer.agent: "");
            }
            zmsg_destroy (&msg);
        }
        else
        if (dsh_handshake_failure (handshake))
            result = 0;
    }
    zpoller_destroy (&poller);
    dsh_handshake_destroy (&handshake);
    zsock_destroy (&client);
    zcert_destroy (&cert);
    return result;
}

//  Tries key name until the result is want or the deadline passes
//  (the store rereads the directory on its timer); returns the last.
static int
s_await (s_server_t *self, const char *name, int want)
{
    int64_t give_up = zclock_mono () + S_DEADLINE_MS;
    int result = s_try (self, name, NULL, NULL);
    while (result != want && zclock_mono () < give_up)
        result = s_try (self, name, NULL, NULL);
    return result;
}

//  ---------------------------------------------------------------------

//  An allowed key connects with its certificate's metadata; an unknown
//  key is refused
static void
test_allowed_and_unknown (void **state)
{
    (void) state;
    s_keygen ("alice");
    s_keygen ("eve");
    s_allow ("alice", "alice.cert");
    s_server_start (&s_server, 100);
    assert_int_equal (s_keys (&s_server), 1);
    char role [64], agent [64];
    assert_int_equal (s_try (&s_server, "alice", role, agent), 1);
    assert_string_equal (role, DSH_ROLE_AGENT);
    assert_string_equal (agent, "alice");
    assert_int_equal (s_try (&s_server, "eve", NULL, NULL), 0);
    s_server_stop (&s_server);
    s_unlink ("alice.cert");
}

//  Everything the directory may hold against the store: each bad entry
//  is refused, and the good certificates beside them are served
static void
test_bad_entries (void **state)
{
    (void) state;
    s_keygen ("alice");
    s_keygen ("bob");
    s_keygen ("carol");
    s_keygen ("dave");
    s_keygen ("erin");
    s_keygen ("frank");
    s_keygen ("eve");
    s_allow ("alice", "alice.cert");
    s_allow ("bob", "bob.cert");
    //  The same key again, claiming more: the first by name wins
    zcert_t *cert = s_load_as ("bob", "not-bob", NULL, NULL);
    char *path = s_path ("allow/zz-bob.cert");
    assert_int_equal (zcert_save_public (cert, path), 0);
    zstr_free (&path);
    zcert_destroy (&cert);
    //  An exact copy, as cp makes it
    s_allow ("alice", "alice.cert.copy");
    //  Links to the directory itself, a loop, a link to a certificate
    char *allow = s_path ("allow");
    char *link = s_path ("allow/self");
    assert_int_equal (symlink (".", link), 0);
    zstr_free (&link);
    link = s_path ("allow/self2");
    assert_int_equal (symlink (allow, link), 0);
    zstr_free (&link);
    link = s_path ("allow/loop-a");
    assert_int_equal (symlink ("loop-b", link), 0);
    zstr_free (&link);
    link = s_path ("allow/loop-b");
    assert_int_equal (symlink ("loop-a", link), 0);
    zstr_free (&link);
    link = s_path ("allow/dave.cert");
    char *target = s_path ("keys/dave");
    assert_int_equal (symlink (target, link), 0);
    zstr_free (&target);
    zstr_free (&link);
    //  A nested directory with a certificate in it
    char *nested = s_path ("allow/nested");
    assert_int_equal (mkdir (nested, 0700), 0);
    zstr_free (&nested);
    s_allow ("carol", "nested/carol.cert");
    //  A FIFO (opening it would block)
    char *fifo = s_path ("allow/fifo");
    assert_int_equal (mkfifo (fifo, 0600), 0);
    zstr_free (&fifo);
    //  A megabyte of garbage, a file that is ZPL but not a certificate,
    //  one that is not ZPL at all
    s_write ("garbage", "\x01\xff garbage \n", 1024 * 1024);
    s_write ("config.zpl", "curve\n    public-key = \"short\"\n", 1);
    s_write ("binary", "\x7f\x45\x4c\x46\x02\x01\x01\n  \x01", 1);
    //  Metadata ZeroMQ keeps for itself (User-Id would not win, but a
    //  Socket-Type would break every handshake of the key)
    cert = s_load_as ("erin", "erin", "Socket-Type", "PAIR");
    path = s_path ("allow/erin.cert");
    assert_int_equal (zcert_save_public (cert, path), 0);
    zstr_free (&path);
    zcert_destroy (&cert);
    //  A secret key alone is skipped
    cert = s_load ("frank");
    path = s_path ("allow/frank.cert");
    assert_int_equal (zcert_save (cert, path), 0);
    assert_int_equal (unlink (path), 0);
    zstr_free (&path);
    zcert_destroy (&cert);

    s_server_start (&s_server, 100);
    assert_int_equal (s_keys (&s_server), 2);
    char role [64], agent [64];
    assert_int_equal (s_try (&s_server, "alice", role, agent), 1);
    assert_string_equal (agent, "alice");
    assert_int_equal (s_try (&s_server, "bob", role, agent), 1);
    assert_string_equal (agent, "bob");
    assert_int_equal (s_try (&s_server, "carol", NULL, NULL), 0);
    assert_int_equal (s_try (&s_server, "dave", NULL, NULL), 0);
    assert_int_equal (s_try (&s_server, "erin", NULL, NULL), 0);
    assert_int_equal (s_try (&s_server, "frank", NULL, NULL), 0);
    assert_int_equal (s_try (&s_server, "eve", NULL, NULL), 0);
    //  Still serving after the checks that followed
    assert_int_equal (s_try (&s_server, "alice", NULL, NULL), 1);
    s_server_stop (&s_server);

    s_remove_tree (allow);
    assert_int_equal (mkdir (allow, 0700), 0);
    zstr_free (&allow);
}

//  Metadata larger than zauth's 512-byte buffer reaches the receiver whole
static void
test_large_metadata (void **state)
{
    (void) state;
    s_keygen ("grace");
    char agent [60];
    memset (agent, 'g', sizeof (agent) - 1);
    agent [sizeof (agent) - 1] = 0;
    char padding [4000];
    memset (padding, 'p', sizeof (padding) - 1);
    padding [sizeof (padding) - 1] = 0;
    zcert_t *cert = s_load_as ("grace", agent, "padding", padding);
    char *path = s_path ("allow/grace.cert");
    assert_int_equal (zcert_save_public (cert, path), 0);
    zstr_free (&path);
    zcert_destroy (&cert);
    s_server_start (&s_server, 100);
    char role [64], peer_agent [64];
    assert_int_equal (s_try (&s_server, "grace", role, peer_agent), 1);
    assert_string_equal (role, DSH_ROLE_AGENT);
    assert_string_equal (peer_agent, agent);
    s_server_stop (&s_server);
    s_unlink ("grace.cert");
}

//  A running store: a certificate added is accepted after the next check,
//  one removed refused; a duplicate, garbage and a self-link copied in
//  leave it serving
static void
test_reload (void **state)
{
    (void) state;
    s_keygen ("alice");
    s_keygen ("bob");
    s_allow ("alice", "alice.cert");
    s_server_start (&s_server, 100);
    assert_int_equal (s_try (&s_server, "alice", NULL, NULL), 1);
    assert_int_equal (s_try (&s_server, "bob", NULL, NULL), 0);

    s_allow ("bob", "bob.cert");
    assert_int_equal (s_await (&s_server, "bob", 1), 1);
    assert_int_equal (s_keys (&s_server), 2);

    s_allow ("alice", "alice-copy.cert");
    s_write ("garbage", "not a certificate\n", 1);
    char *link = s_path ("allow/self");
    assert_int_equal (symlink (".", link), 0);
    zstr_free (&link);
    //  Once the store has seen bob go it has read the new entries too (the
    //  garbage and the link refused, the copy a duplicate): alice stays
    s_unlink ("bob.cert");
    assert_int_equal (s_await (&s_server, "bob", 0), 0);
    assert_int_equal (s_keys (&s_server), 1);
    assert_int_equal (s_try (&s_server, "alice", NULL, NULL), 1);

    //  The copy keeps the key when the original goes: once bob, written
    //  after, is accepted, alice still is
    s_unlink ("alice.cert");
    s_allow ("bob", "bob.cert");
    assert_int_equal (s_await (&s_server, "bob", 1), 1);
    assert_int_equal (s_try (&s_server, "alice", NULL, NULL), 1);
    s_unlink ("alice-copy.cert");
    assert_int_equal (s_await (&s_server, "alice", 0), 0);
    assert_int_equal (s_keys (&s_server), 1);
    s_unlink ("bob.cert");

    //  A certificate rewritten in place with another key
    s_allow ("bob", "changing.cert");
    assert_int_equal (s_await (&s_server, "bob", 1), 1);
    s_allow ("alice", "changing.cert");
    assert_int_equal (s_await (&s_server, "alice", 1), 1);
    assert_int_equal (s_try (&s_server, "bob", NULL, NULL), 0);
    s_server_stop (&s_server);
    s_unlink ("changing.cert");
    s_unlink ("garbage");
    s_unlink ("self");
}

//  The directory gone: the keys loaded stay in force, and it is read
//  again when it comes back
static void
test_directory_gone (void **state)
{
    (void) state;
    s_keygen ("alice");
    s_keygen ("bob");
    s_allow ("alice", "alice.cert");
    s_server_start (&s_server, 100);
    char *allow = s_path ("allow");
    char *moved = s_path ("allow-moved");
    assert_int_equal (rename (allow, moved), 0);
    assert_int_equal (s_try (&s_server, "alice", NULL, NULL), 1);
    assert_int_equal (mkdir (allow, 0700), 0);
    s_allow ("bob", "bob.cert");
    assert_int_equal (s_await (&s_server, "bob", 1), 1);
    assert_int_equal (s_await (&s_server, "alice", 0), 0);
    s_server_stop (&s_server);
    s_unlink ("bob.cert");
    s_remove_tree (moved);
    zstr_free (&allow);
    zstr_free (&moved);
}

//  One ZAP handler per process: a second store says so
static void
test_one_per_process (void **state)
{
    (void) state;
    zactor_t *first = zactor_new (dsh_keystore_actor, NULL);
    zactor_t *second = zactor_new (dsh_keystore_actor, NULL);
    char *allow = s_path ("allow");
    zstr_sendx (first, "CURVE", allow, NULL);
    assert_int_equal (zsock_wait (first), 0);
    zstr_sendx (second, "CURVE", allow, NULL);
    assert_int_equal (zsock_wait (second), 1);
    char *missing = s_path ("missing");
    zstr_sendx (first, "CURVE", missing, NULL);
    assert_int_equal (zsock_wait (first), 1);
    zstr_free (&missing);
    zstr_free (&allow);
    zactor_destroy (&second);
    zactor_destroy (&first);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_teardown (test_allowed_and_unknown, s_test_teardown),
        cmocka_unit_test_teardown (test_bad_entries, s_test_teardown),
        cmocka_unit_test_teardown (test_large_metadata, s_test_teardown),
        cmocka_unit_test_teardown (test_reload, s_test_teardown),
        cmocka_unit_test_teardown (test_directory_gone, s_test_teardown),
        cmocka_unit_test_teardown (test_one_per_process, s_test_teardown),
    };
    return cmocka_run_group_tests (tests, s_setup, s_teardown);
}
