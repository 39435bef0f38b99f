/*  =========================================================================
    dsh_proto - the dsh/1 wire protocol: frames, commands, bodies, limits

    The one codec that the broker, the SDK and every component share. It
    knows frames and msgpack bodies, never sockets. The protocol itself is
    specified in schemas/PROTOCOL.md and defined for programs in
    schemas/dsh_protocol.json; this module is its C form.

    Every request/reply message on a ROUTER/DEALER socket is
        [envelope...] "" "DSH1" COMMAND [TOKEN] BODY
    where the envelope is whatever routing frames ROUTER hops pushed, the
    empty frame ends it, TOKEN is present only on the work socket's CALL,
    CANCEL and RESULT, and BODY is one msgpack map. PUB/SUB messages are
        "DSH1" COMMAND BODY            (component -> registry)
        KIND BODY                      (registry events)
    =========================================================================
*/

#ifndef DSH_PROTO_H_INCLUDED
#define DSH_PROTO_H_INCLUDED

#include <czmq.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "dsh_doc.h"

#ifdef __cplusplus
extern "C" {
#endif

//  The command names, event kinds, error codes, limits and defaults, and
//  the commands of each socket with the roles that may send them, are
//  generated from schemas/dsh_protocol.json (deploy/protocol_gen.py).
#include "dsh_protocol_def.h"

//  How many maps a packer can hold open at once (dsh_packer_map_begin).
#define DSH_PACKER_MAX_OPEN     8

//  A growable msgpack buffer with its packer, and the maps opened on it
//  whose entries it will count.
typedef struct {
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    size_t open [DSH_PACKER_MAX_OPEN];  //  offsets of the open maps' headers
    size_t open_count;
} dsh_packer_t;

//  Prepare an empty buffer and its packer.
void
    dsh_packer_init (dsh_packer_t *self);

//  Open a map whose entries are counted when it is closed: write its keys
//  and values by any means (pk, raw, nested maps), then call map_end.
//  Maps nest up to DSH_PACKER_MAX_OPEN deep.
void
    dsh_packer_map_begin (dsh_packer_t *self);

//  Close the innermost open map: count the objects written since it began
//  (two per entry) and give it the smallest header for that count, so the
//  bytes equal those of msgpack_pack_map with the right count. Returns 0,
//  or -1 if those bytes are not whole msgpack objects in pairs (only bad
//  raw bytes can do that); the map then keeps a map32 header of 0 entries,
//  which leaves the buffer malformed for any receiver to refuse.
int
    dsh_packer_map_end (dsh_packer_t *self);

//  Append bytes that are already msgpack.
void
    dsh_packer_raw (dsh_packer_t *self, const void *data, size_t size);

//  Pack a key that is a C string followed by a C string value.
void
    dsh_packer_kv_str (dsh_packer_t *self, const char *key, const char *value);

//  Copy the packed bytes into a new frame and empty the buffer for reuse.
//  No map may be open.
zframe_t *
    dsh_packer_frame (dsh_packer_t *self);

//  Free the buffer (after dsh_packer_frame there is nothing left to free).
void
    dsh_packer_release (dsh_packer_t *self);

//  True if text is a valid tool name: 1-128 of [A-Za-z0-9_.-].
bool
    dsh_proto_valid_name (const char *text, size_t size);

//  True if text is a valid component or agent id: 1-128 printable ASCII
//  bytes, no spaces, not starting with a zero byte.
bool
    dsh_proto_valid_id (const char *text, size_t size);

//  Split a received message: remove the envelope (every frame before the
//  first empty frame) into *envelope_p (a new message, possibly empty), check
//  the protocol frame and remove it, and copy the command into command.
//  The frames after the command stay in msg. Returns 0, or -1 with a reason
//  (the envelope, if found, is still handed back so a reply can be routed).
int
    dsh_proto_split (zmsg_t *msg, zmsg_t **envelope_p,
                     char *command, size_t command_size,
                     char *error, size_t error_size);

//  A new message [envelope...] "" "DSH1" command; takes the envelope (may
//  be NULL for a DEALER's own messages).
zmsg_t *
    dsh_proto_message (zmsg_t **envelope_p, const char *command);

//  Write size bytes of data as 2 * size lower-case hex digits and a NUL
//  into text (which holds 2 * size + 1 bytes). For hash keys on hot paths.
void
    dsh_proto_hex (const void *data, size_t size, char *text);

//  Make hash key on 64-bit tokens: each key is a pointer to a uint64_t the
//  item itself holds (so the table neither copies nor frees keys), hashed
//  and compared as the integer it is, not as a string.
void
    dsh_proto_token_keys (zhashx_t *hash);

//  A 64-bit value as the 8 big-endian bytes the wire carries it in (the
//  token and budget frames, a beacon's epoch), and back: the one place the
//  byte order is written.
void
    dsh_be64_put (uint64_t value, byte *bytes);
uint64_t
    dsh_be64_get (const byte *bytes);

//  The 16 hex digits of a 64-bit token and a NUL, into text [17].
void
    dsh_proto_token_hex (uint64_t token, char *text);

//  A key naming one caller's call: its envelope's frames in hex, "/",
//  and its callId. Caller frees it.
char *
    dsh_proto_caller_key (zmsg_t *envelope, const char *call_id);

//  A new PUB message "DSH1" command body; takes the body.
zmsg_t *
    dsh_proto_pub_message (const char *command, zframe_t **body_p);

//  Decode a body frame into a document whose root is a map. Returns NULL
//  with a reason on bad input.
dsh_doc_t *
    dsh_proto_decode_body (zframe_t *frame, char *error, size_t error_size);

//  A CALL body, decoded. Strings are owned by the document.
typedef struct {
    const char *call_id;
    const char *name;
    const char *agent;                  //  NULL when absent
    const msgpack_object *arguments;    //  NULL when absent (any type)
    const msgpack_object *meta;         //  NULL when absent, else a map
    uint64_t timeout_ms;                //  0 when absent
} dsh_call_head_t;

//  Decode and check a CALL body strictly: the head (the body's map) and meta
//  must have only str keys (dsh_doc refused any repeated key already), so
//  every reader sees the same call. call_id is filled as soon as it is known,
//  so that even a refused call can be answered by id. Returns 0 or -1.
int
    dsh_proto_decode_call (dsh_doc_t *doc, dsh_call_head_t *head,
                           char *error, size_t error_size);

//  The id by which to refuse a body that dsh_doc_new refused (a repeated
//  key, say), so that the sender is answered and not left to its deadline:
//  the value of a root map's one entry under key ("callId" of a CALL, "id"
//  of a query) if it is a str of 1 to text_size - 1 bytes, copied into
//  text; else NULL. Nothing else of such a body is ever read.
const char *
    dsh_proto_refused_str (const void *data, size_t size, const char *key, char *text, size_t text_size);

//  One change to a CALL's meta: set key to value, or remove it.
typedef struct {
    const char *key;
    const void *value;                  //  one msgpack object; NULL removes key
    size_t value_size;
} dsh_meta_stamp_t;

//  What dsh_proto_splice_call changes in a CALL body; all zero changes
//  nothing.
typedef struct {
    const void *arguments;              //  one msgpack object; NULL keeps them
    size_t arguments_size;
    const dsh_meta_stamp_t *stamps;     //  merged into meta, a later stamp of
    size_t stamp_count;                 //  the same key winning
    bool change_agent;                  //  set agent to the value below
    const char *agent;                  //  with change_agent; NULL removes it
} dsh_call_changes_t;

//  A new CALL body: body (as dsh_proto_decode_call accepts it) with changes
//  spliced in, every other entry of the head and of meta keeping its bytes
//  and place. arguments and agent are replaced where they are, or appended to
//  the head; a stamped meta entry gets the stamp's value where it is or is
//  removed; other stamps are appended to meta, which is appended to the head
//  if absent (a removal alone does not create it; removing every entry leaves
//  {}). A map header is rewritten only when its count changes. Returns NULL
//  with a reason if body is malformed, repeats a key it changes, a change is
//  not one msgpack object or agent is not 1-128 bytes, or if the new body
//  would exceed max_bytes ("the call with its stamps would be N bytes, over
//  the M-byte limit").
zframe_t *
    dsh_proto_splice_call (const void *body, size_t body_size,
                           const dsh_call_changes_t *changes, size_t max_bytes,
                           char *error, size_t error_size);

//  Pack a CALL body. args is msgpack (NULL = empty map); agent, meta may be
//  NULL; meta is msgpack of a map; timeout_ms 0 = none.
zframe_t *
    dsh_proto_encode_call (const char *call_id, const char *name,
                           const void *args, size_t args_size,
                           const char *agent,
                           const void *meta, size_t meta_size,
                           uint64_t timeout_ms);

//  An error RESULT body: {callId, content:[{type:"text", text}], isError:
//  true, error:{name, code}}. The error name is derived from the code.
zframe_t *
    dsh_proto_error_result (const char *call_id, const char *code,
                            const char *text);

//  An ERROR body {id?, code, message} for a request that could not be
//  understood. id is the request's id object, or NULL.
zframe_t *
    dsh_proto_error_body (const msgpack_object *id, const char *code,
                          const char *message);

//  The conventional error name for a code ("UNKNOWN_TOOL" -> "UnknownToolError").
const char *
    dsh_proto_error_name (const char *code);

//  Check a RESULT body: a map with a content array of valid content blocks
//  and a bool isError. Returns 0 or -1 with a reason.
int
    dsh_proto_check_result (const msgpack_object *body, char *error, size_t error_size);

//  Check one content block: text, image, audio, resource_link or resource,
//  with MCP's required fields. Returns 0 or -1 with a reason.
int
    dsh_proto_check_content (const msgpack_object *block, char *error, size_t error_size);

//  Check one tool entry of an ANNOUNCE: {name, description?, parameters
//  (an object schema), title?, annotations?, outputSchema?, strict?,
//  concurrencySafe?}. Returns 0 or -1 with a reason naming the tool.
int
    dsh_proto_check_tool (const msgpack_object *tool, char *error, size_t error_size);

//  An ANNOUNCE, HEARTBEAT or WITHDRAW body, decoded. tools, concurrency,
//  part and parts are set for ANNOUNCE only.
typedef struct {
    const char *component;
    uint64_t generation;
    const msgpack_object *tools;
    uint64_t concurrency;       //  calls it runs at once, 0 if it does not say
    uint64_t part;              //  of a set in parts: this one's index, from 0
    uint64_t parts;             //  ... and how many there are (2 or more);
                                //  0 when the ANNOUNCE is the whole set
    //  What an operator is shown of the component (all optional: NULL or
    //  0 when it does not say): where it runs, its process, its software
    //  and how long it had run when it sent the ANNOUNCE
    const char *host;           //  1 to DSH_PRESENCE_HOST_MAX bytes, no control character
    uint64_t pid;               //  1 to DSH_PRESENCE_PID_MAX
    const char *version;        //  1 to DSH_PRESENCE_VERSION_MAX bytes, no control character
    uint64_t uptime_ms;
    bool has_uptime;            //  uptimeMs was sent (0 is a value)
} dsh_presence_t;

//  The bounds of ANNOUNCE's details (PROTOCOL.md, ANNOUNCE).
#define DSH_PRESENCE_HOST_MAX       255
#define DSH_PRESENCE_VERSION_MAX    128
#define DSH_PRESENCE_PID_MAX        4294967295ULL
#define DSH_PRESENCE_UPTIME_MAX     9007199254740991ULL

//  Decode and check a presence body of the given command: an ANNOUNCE's
//  part and parts come both or neither, parts 2 or more, part below it
//  (the broker bounds parts by its max_tools). Returns 0 or -1.
int
    dsh_proto_decode_presence (dsh_doc_t *doc, const char *command,
                               dsh_presence_t *presence,
                               char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
