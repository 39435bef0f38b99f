/*  =========================================================================
    fake_broker - a broker's FRONT and EVENTS, played by a test

    An actor with a ROUTER (FRONT) and a PUB (EVENTS) bound on
    tcp://127.0.0.1:*, written from PROTOCOL.md alone, for the unit tests
    of the classes that follow a broker (dsh_client, a socket-mode
    dsh_stage, dsh_watcher). It answers HELLO (WELCOME, with a stage's slot
    when told one), PING (PONG, with its instance id), LIST (no tools),
    SNAPSHOT (the tools it is told of) and CANCEL (CANCELLED, and the call
    is dropped), echoing every request's id; a CALL it answers at once, holds, or drops, as told. The
    test steers it with the commands below on the actor's pipe; every
    answer on the pipe comes at once.

        SILENT              answer nothing, PINGs included, until ANSWER
        ANSWER              answer again
        INSTANCE name       the broker id PONG and WELCOME name from now on
        CALLS mode          "answer" (default: a RESULT whose text is the
                            instance id), "hold" (no answer), or "release"
                            (answer every held call, text "late", then hold)
        SLOT feed drain     the external stage slot WELCOME names
        TOOLS seq names     the SNAPSHOT state: seq, and tool names "a,b"
        EPOCH epoch         the epoch of WELCOME, PONG, SNAPSHOT and events
        EVENT kind name seq publish an event (tool.registered: with an entry)
        COUNT command       -> how many requests of command came (a string)
        LAST command        -> the body of the last request of command (a
                            frame; empty if none came)
    =========================================================================
*/

#ifndef FAKE_BROKER_H_INCLUDED
#define FAKE_BROKER_H_INCLUDED

#include <czmq.h>
#include <msgpack.h>

//  Every wait of the tests that use the fake broker, in ms: more than the
//  liveness window, on a loaded machine under valgrind.
#define FAKE_WAIT_MS        10000
//  The heartbeat the fake broker gives in WELCOME and PONG, the protocol's
//  default: its window (x 3) is long enough for a test under valgrind on a
//  busy machine never to see a live broker as silent.
#define FAKE_HEARTBEAT_MS   1000
#define FAKE_LIVENESS       3
//  The chain version WELCOME gives with a stage's slot.
#define FAKE_CHAIN_VERSION  "0123456789abcdef"

typedef struct {
    zactor_t *actor;
    char *front;                //  the FRONT endpoint, tcp://127.0.0.1:PORT
    char *events;               //  the EVENTS endpoint
} fake_broker_t;

//  Start a fake broker whose instance id is instance.
fake_broker_t *
    fake_broker_new (const char *instance);

//  Stop it; safe twice.
void
    fake_broker_destroy (fake_broker_t **self_p);

//  Send a command of one to three strings (NULL for fewer); returns once the
//  broker has applied it.
void
    fake_broker_tell (fake_broker_t *self, const char *command, const char *first, const char *second,
                      const char *third);

//  How many requests of command the broker has had.
int
    fake_broker_count (fake_broker_t *self, const char *command);

//  Waits up to FAKE_WAIT_MS until the broker has had at least count
//  requests of command; returns how many it had.
int
    fake_broker_wait_count (fake_broker_t *self, const char *command, int count);

//  The body of the last request of command the broker had (caller
//  destroys), or NULL.
zframe_t *
    fake_broker_last (fake_broker_t *self, const char *command);

//  --- msgpack helpers for the tests ----------------------------------------

//  The value at key in map, or NULL.
const msgpack_object *
    fake_map_get (const msgpack_object *map, const char *key);

//  True if object is the str text.
bool
    fake_is_str (const msgpack_object *object, const char *text);

//  Packs a str.
void
    fake_pack_str (msgpack_packer *pk, const char *text);

#endif
