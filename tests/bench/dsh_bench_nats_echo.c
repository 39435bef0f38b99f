/*  =========================================================================
    dsh-bench-nats-echo - a NATS responder for dsh-bench's NATS column

        dsh-bench-nats-echo URL

    Joins the queue group of dsh-bench's echo subject on the nats-server at
    URL and answers every request with its own bytes, as dsh-bench-echo
    does for the raw floor and dsh-demo's echo for dsh. The server shares
    requests among the group's members, so several of these are replicas.
    SendAsap, or every reply would wait for the library's flusher thread.
    Prints one line once the server has its subscription; runs until
    SIGINT or SIGTERM.
    =========================================================================
*/

#include "dsh_bench_nats.h"

#include <nats/nats.h>

#include <signal.h>
#include <stdio.h>

static void
s_on_request (natsConnection *connection, natsSubscription *subscription, natsMsg *request, void *arg)
{
    (void) subscription;
    (void) arg;
    //  A reply that cannot go out is the requester's timeout to notice
    natsConnection_Publish (connection, natsMsg_GetReply (request), natsMsg_GetData (request),
                            natsMsg_GetDataLength (request));
    natsMsg_Destroy (request);
}

int
main (int argc, char *argv [])
{
    if (argc != 2) {
        fprintf (stderr, "usage: dsh-bench-nats-echo URL\n");
        return 2;
    }
    //  Blocked before the library starts its threads, so that only
    //  sigwait below takes them
    sigset_t stop;
    sigemptyset (&stop);
    sigaddset (&stop, SIGINT);
    sigaddset (&stop, SIGTERM);
    pthread_sigmask (SIG_BLOCK, &stop, NULL);

    natsOptions *options = NULL;
    natsConnection *connection = NULL;
    natsSubscription *subscription = NULL;
    natsStatus status = natsOptions_Create (&options);
    if (status == NATS_OK)
        status = natsOptions_SetURL (options, argv [1]);
    if (status == NATS_OK)
        status = natsOptions_SetName (options, "dsh-bench responder");
    if (status == NATS_OK)
        status = natsOptions_SetSendAsap (options, true);
    if (status == NATS_OK)
        status = natsOptions_SetAllowReconnect (options, false);
    if (status == NATS_OK)
        status = natsConnection_Connect (&connection, options);
    if (status == NATS_OK)
        status = natsConnection_QueueSubscribe (&subscription, connection, DSH_BENCH_NATS_SUBJECT,
                                                DSH_BENCH_NATS_QUEUE, s_on_request, NULL);
    //  After the flush the server has the subscription: requests reach us
    if (status == NATS_OK)
        status = natsConnection_FlushTimeout (connection, 5000);
    int rc = 0;
    if (status == NATS_OK) {
        printf ("responding on %s\n", argv [1]);
        fflush (stdout);
        int signal_number;
        sigwait (&stop, &signal_number);
    }
    else {
        fprintf (stderr, "dsh-bench-nats-echo: %s: %s\n", argv [1], natsStatus_GetText (status));
        rc = 1;
    }
    natsSubscription_Destroy (subscription);
    natsConnection_Destroy (connection);
    natsOptions_Destroy (options);
    nats_Close ();
    return rc;
}
