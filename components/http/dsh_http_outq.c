/*  =========================================================================
    dsh_http_outq - the bytes waiting for one streamed HTTP response
    =========================================================================
*/

#include "dsh_http_outq.h"

#include <czmq.h>
#include <sys/socket.h>

void
dsh_http_outq_init (dsh_http_outq_t *self, struct MHD_Connection *connection)
{
    assert (self);
    *self = (dsh_http_outq_t) { .connection = connection };
}

void
dsh_http_outq_release (dsh_http_outq_t *self)
{
    assert (self);
    zstr_free (&self->data);
    self->start = self->size = self->capacity = 0;
}

size_t
dsh_http_outq_pending (const dsh_http_outq_t *self)
{
    assert (self);
    return self->size - self->start;
}

//  Lets MHD call the content reader again.
static void
s_wake (dsh_http_outq_t *self)
{
    if (self->suspended && self->connection) {
        self->suspended = false;
        MHD_resume_connection (self->connection);
    }
}

void
dsh_http_outq_append (dsh_http_outq_t *self, const void *data, size_t size)
{
    assert (self);
    if (self->finished || self->broken)
        return;
    size_t pending = self->size - self->start;
    //  The consumed prefix is reclaimed once it is half the buffer
    if (self->start > 0 && self->start * 2 >= self->size) {
        memmove (self->data, self->data + self->start, pending);
        self->size = pending;
        self->start = 0;
    }
    if (self->size + size > self->capacity) {
        size_t capacity = self->capacity? self->capacity: 4096;
        while (capacity < self->size + size)
            capacity *= 2;
        self->data = (char *) realloc (self->data, capacity);
        assert (self->data);
        self->capacity = capacity;
    }
    memcpy (self->data + self->size, data, size);
    self->size += size;
    s_wake (self);
}

void
dsh_http_outq_finish (dsh_http_outq_t *self)
{
    assert (self);
    self->finished = true;
    s_wake (self);
}

void
dsh_http_outq_break (dsh_http_outq_t *self)
{
    assert (self);
    self->broken = true;
    dsh_http_outq_release (self);
    s_wake (self);
    //  A client that reads nothing never lets MHD call the reader again to
    //  hear that the response is over: its socket is shut down, so that
    //  MHD's next write fails and it closes the connection now, not at its
    //  timeout. MHD still owns and closes the descriptor
    const union MHD_ConnectionInfo *info = self->connection?
        MHD_get_connection_info (self->connection, MHD_CONNECTION_INFO_CONNECTION_FD): NULL;
    if (info)
        shutdown (info->connect_fd, SHUT_RDWR);
}

ssize_t
dsh_http_outq_read (dsh_http_outq_t *self, char *buf, size_t max)
{
    assert (self);
    if (self->broken)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (self->size > self->start) {
        size_t pending = self->size - self->start;
        size_t size = pending < max? pending: max;
        memcpy (buf, self->data + self->start, size);
        self->start += size;
        if (self->start == self->size)
            self->start = self->size = 0;
        return (ssize_t) size;
    }
    if (self->finished)
        return MHD_CONTENT_READER_END_OF_STREAM;
    self->suspended = true;
    MHD_suspend_connection (self->connection);
    return 0;
}
