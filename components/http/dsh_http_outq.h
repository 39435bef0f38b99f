/*  =========================================================================
    dsh_http_outq - the bytes waiting for one streamed HTTP response

    A response whose bytes come from another thread than libmicrohttpd's
    (a Server-Sent Events stream, a body written as answers arrive) reads
    them from here in its content reader. While there are none the reader
    suspends the connection, and the writer's next append, finish or break
    resumes it, so a waiting client costs no thread. A value the caller
    embeds in its request; the caller's lock guards every call, and the
    caller decides how much a client may leave unread.
    =========================================================================
*/

#ifndef DSH_HTTP_OUTQ_H_INCLUDED
#define DSH_HTTP_OUTQ_H_INCLUDED

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    struct MHD_Connection *connection;
    char *data;                 //  bytes for the client: data [start..size)
    size_t start;
    size_t size;
    size_t capacity;
    bool finished;              //  nothing follows what is queued: read only
    bool broken;                //  the connection is to be closed: read only
    bool suspended;
} dsh_http_outq_t;

//  An empty queue for connection's response.
void
    dsh_http_outq_init (dsh_http_outq_t *self, struct MHD_Connection *connection);

//  Free what is queued.
void
    dsh_http_outq_release (dsh_http_outq_t *self);

//  How many bytes wait for the client.
size_t
    dsh_http_outq_pending (const dsh_http_outq_t *self);

//  Queue size bytes (ignored once finished or broken) and wake the reader.
void
    dsh_http_outq_append (dsh_http_outq_t *self, const void *data, size_t size);

//  Nothing more will come: the response ends once the client has the rest.
void
    dsh_http_outq_finish (dsh_http_outq_t *self);

//  Drop what is queued and close the connection (at once, even if the
//  client reads nothing).
void
    dsh_http_outq_break (dsh_http_outq_t *self);

//  For the response's content reader (MHD_ContentReaderCallback): up to
//  max bytes into buf, MHD_CONTENT_READER_END_OF_STREAM once finished and
//  read, MHD_CONTENT_READER_END_WITH_ERROR once broken, or 0 after
//  suspending the connection until there is more.
ssize_t
    dsh_http_outq_read (dsh_http_outq_t *self, char *buf, size_t max);

#ifdef __cplusplus
}
#endif

#endif
