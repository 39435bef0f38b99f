/*  =========================================================================
    dsh-bench-memory - the peers of the broker's memory measurements

        dsh-bench-memory churn ENDPOINT SECONDS BYTES [PAUSE_MS]
        dsh-bench-memory sleeper ENDPOINT SECONDS
        dsh-bench-memory storm ENDPOINT COUNT

    churn: a raw PUB on the announce channel announces, over and over,
    component "churn" with one tool whose description is BYTES long and
    different every time, so every ANNOUNCE is a tool.updated event of
    about BYTES; it pauses PAUSE_MS (default 1) between two, 0 for none.
    sleeper: a SUB on the events socket that never reads. storm: COUNT
    DEALERs connect to the front, a hundred at a time, each PINGs and waits
    for its PONG; 3 s after all are open, all close. Each prints one line
    when done. By hand, with tests/bench/memory.sh, which reads the
    broker's RSS around them.
    =========================================================================
*/

#include "dsh_client.h"
#include "dsh_proto.h"

//  The endpoint (announce, events) the broker's WELCOME names, or NULL.
static char *
s_welcome_endpoint (const char *front, const char *key)
{
    dsh_client_t *client = dsh_client_new (front);
    char error [256];
    dsh_reply_t *reply = client? dsh_client_request (client, DSH_HELLO, NULL, 5000, error, sizeof (error)): NULL;
    char *endpoint = NULL;
    const msgpack_object *value = reply? dsh_map_get (dsh_reply_body (reply), key): NULL;
    if (value && value->type == MSGPACK_OBJECT_STR)
        endpoint = zsys_sprintf ("%.*s", (int) value->via.str.size, value->via.str.ptr);
    else
        fprintf (stderr, "dsh-bench-memory: no WELCOME from %s\n", front);
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
    return endpoint;
}

static int
s_churn (const char *front, int seconds, size_t bytes, int pause_ms)
{
    char *announce = s_welcome_endpoint (front, "announce");
    if (!announce)
        return 1;
    zsock_t *pub = zsock_new (ZMQ_PUB);
    zsock_set_sndhwm (pub, 100000);
    zsock_connect (pub, "%s", announce);
    zclock_sleep (300);
    char *description = (char *) malloc (bytes + 1);
    memset (description, 'x', bytes);
    description [bytes] = 0;
    int64_t until = zclock_mono () + seconds * 1000;
    uint64_t sent = 0;
    while (zclock_mono () < until && !zsys_interrupted) {
        //  A different entry each time: the counter at the front of the text
        char counter [24];
        int length = snprintf (counter, sizeof (counter), "%" PRIu64 " ", sent);
        memcpy (description, counter, (size_t) length < bytes? (size_t) length: bytes);
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        msgpack_pack_map (&packer.pk, 3);
        dsh_packer_kv_str (&packer, "component", "churn");
        dsh_pack_cstr (&packer.pk, "generation");
        msgpack_pack_uint64 (&packer.pk, 1);
        dsh_pack_cstr (&packer.pk, "tools");
        msgpack_pack_array (&packer.pk, 1);
        msgpack_pack_map (&packer.pk, 3);
        dsh_packer_kv_str (&packer, "name", "churned");
        dsh_packer_kv_str (&packer, "description", description);
        dsh_pack_cstr (&packer.pk, "parameters");
        msgpack_pack_map (&packer.pk, 1);
        dsh_packer_kv_str (&packer, "type", "object");
        zframe_t *body = dsh_packer_frame (&packer);
        dsh_packer_release (&packer);
        zmsg_t *msg = dsh_proto_pub_message (DSH_ANNOUNCE, &body);
        zmsg_send (&msg, pub);
        sent++;
        //  Paced, the broker keeps up and the queue that grows is the
        //  subscriber's; unpaced, the announce socket's grows too
        if (pause_ms)
            zclock_sleep (pause_ms);
    }
    printf ("churn: %" PRIu64 " announcements of %zu bytes\n", sent, bytes);
    free (description);
    zsock_destroy (&pub);
    zstr_free (&announce);
    return 0;
}

static int
s_sleeper (const char *front, int seconds)
{
    char *events = s_welcome_endpoint (front, "events");
    if (!events)
        return 1;
    zsock_t *sub = zsock_new (ZMQ_SUB);
    zsock_set_subscribe (sub, "");
    zsock_connect (sub, "%s", events);
    printf ("sleeper: subscribed, not reading\n");
    fflush (stdout);
    zclock_sleep (seconds * 1000);
    zsock_set_linger (sub, 0);
    zsock_destroy (&sub);
    printf ("sleeper: gone\n");
    zstr_free (&events);
    return 0;
}

//  PINGs on a new DEALER to front, added to poller; NULL if it cannot.
static zsock_t *
s_storm_dealer (const char *front, zpoller_t *poller)
{
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    if (!dealer || zsock_connect (dealer, "%s", front)) {
        fprintf (stderr, "storm: %s\n", zmq_strerror (zmq_errno ()));
        zsock_destroy (&dealer);
        return NULL;
    }
    zpoller_add (poller, dealer);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 0);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    zmsg_t *msg = zmsg_new ();
    zmsg_addmem (msg, "", 0);
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, DSH_PING);
    zmsg_append (msg, &body);
    zmsg_send (&msg, dealer);
    return dealer;
}

static int
s_storm (const char *front, int count)
{
    zsys_set_max_sockets ((size_t) count + 64);
    zsock_t **dealers = (zsock_t **) zmalloc (sizeof (zsock_t *) * (size_t) count);
    zpoller_t *poller = zpoller_new (NULL);
    int opened = 0, answered = 0;
    //  A hundred at a time, each batch answered before the next opens: all
    //  at once overflow the listen backlog, and the kernel's SYN retries
    //  back off for a minute; all stay open until the end
    while (opened < count) {
        int batch_end = opened + 100 < count? opened + 100: count;
        for (; opened < batch_end; opened++)
            if (!(dealers [opened] = s_storm_dealer (front, poller)))
                break;
        if (opened < batch_end)
            break;
        int64_t until = zclock_mono () + 10000;
        while (answered < opened && zclock_mono () < until) {
            zsock_t *which = (zsock_t *) zpoller_wait (poller, 1000);
            if (!which)
                continue;
            zmsg_t *msg = zmsg_recv (which);
            zmsg_destroy (&msg);
            answered++;
        }
    }
    printf ("storm: %d of %d connections answered\n", answered, count);
    fflush (stdout);
    //  Long enough for the broker's RSS to be read with all of them open
    zclock_sleep (3000);
    zpoller_destroy (&poller);
    for (int index = 0; index < opened; index++) {
        zsock_set_linger (dealers [index], 0);
        zsock_destroy (&dealers [index]);
    }
    free (dealers);
    return answered == count? 0: 1;
}

int
main (int argc, char *argv [])
{
    zsys_init ();
    if ((argc == 5 || argc == 6) && streq (argv [1], "churn"))
        return s_churn (argv [2], atoi (argv [3]), (size_t) atol (argv [4]), argc == 6? atoi (argv [5]): 1);
    if (argc == 4 && streq (argv [1], "sleeper"))
        return s_sleeper (argv [2], atoi (argv [3]));
    if (argc == 4 && streq (argv [1], "storm"))
        return s_storm (argv [2], atoi (argv [3]));
    fprintf (stderr, "usage: dsh-bench-memory churn ENDPOINT SECONDS BYTES [PAUSE_MS]\n"
                     "       dsh-bench-memory sleeper ENDPOINT SECONDS\n"
                     "       dsh-bench-memory storm ENDPOINT COUNT\n");
    return 2;
}
