/*  =========================================================================
    dsh_jsonrpc - JSON-RPC 2.0 over a pair of file descriptors, one message a line

    Both directions keep one byte buffer with a consumed prefix: lines are
    taken from the front of the input, writes take bytes from the front of
    the output, and the prefix is reclaimed when it is half the buffer.
    =========================================================================
*/

#include "dsh_jsonrpc.h"
#include "dsh_json.h"

#include <czmq.h>
#include <errno.h>
#include <unistd.h>

//  How much one read takes from the fd.
#define READ_CHUNK  65536

typedef struct {
    char *data;
    size_t start;               //  bytes before start are consumed
    size_t size;                //  bytes in use, consumed ones included
    size_t capacity;
} s_buffer_t;

struct _dsh_jsonrpc_t {
    int read_fd;
    int write_fd;
    size_t max_line;
    s_buffer_t input;
    s_buffer_t output;
    bool skipping;              //  inside an overlong line, dropping to its end
};

static void
s_buffer_append (s_buffer_t *buffer, const char *data, size_t size)
{
    if (buffer->start > 0 && buffer->start * 2 >= buffer->size) {
        memmove (buffer->data, buffer->data + buffer->start, buffer->size - buffer->start);
        buffer->size -= buffer->start;
        buffer->start = 0;
    }
    if (buffer->size + size > buffer->capacity) {
        size_t capacity = buffer->capacity? buffer->capacity: 4096;
        while (capacity < buffer->size + size)
            capacity *= 2;
        buffer->data = (char *) realloc (buffer->data, capacity);
        assert (buffer->data);
        buffer->capacity = capacity;
    }
    memcpy (buffer->data + buffer->size, data, size);
    buffer->size += size;
}

dsh_jsonrpc_t *
dsh_jsonrpc_new (int read_fd, int write_fd, size_t max_line)
{
    dsh_jsonrpc_t *self = (dsh_jsonrpc_t *) zmalloc (sizeof (dsh_jsonrpc_t));
    assert (self);
    self->read_fd = read_fd;
    self->write_fd = write_fd;
    self->max_line = max_line;
    return self;
}

void
dsh_jsonrpc_destroy (dsh_jsonrpc_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_jsonrpc_t *self = *self_p;
        free (self->input.data);
        free (self->output.data);
        free (self);
        *self_p = NULL;
    }
}

int
dsh_jsonrpc_read (dsh_jsonrpc_t *self)
{
    assert (self);
    char chunk [READ_CHUNK];
    ssize_t got = read (self->read_fd, chunk, sizeof chunk);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (got <= 0)
        return -1;
    s_buffer_append (&self->input, chunk, (size_t) got);
    return 0;
}

char *
dsh_jsonrpc_line (dsh_jsonrpc_t *self)
{
    assert (self);
    s_buffer_t *input = &self->input;
    while (input->start < input->size) {
        char *begin = input->data + input->start;
        size_t waiting = input->size - input->start;
        char *newline = (char *) memchr (begin, '\n', waiting);
        if (!newline) {
            //  An overlong line is dropped as it comes, not held in memory
            if (waiting > self->max_line) {
                if (!self->skipping)
                    zsys_warning ("dsh_jsonrpc: dropping a line longer than %zu bytes", self->max_line);
                self->skipping = true;
                input->start = input->size;
            }
            return NULL;
        }
        size_t length = (size_t) (newline - begin);
        input->start += length + 1;
        if (self->skipping) {
            self->skipping = false;
            continue;
        }
        if (length > self->max_line) {
            zsys_warning ("dsh_jsonrpc: dropping a line longer than %zu bytes", self->max_line);
            continue;
        }
        if (length > 0 && begin [length - 1] == '\r')
            length--;
        char *line = (char *) malloc (length + 1);
        assert (line);
        memcpy (line, begin, length);
        line [length] = 0;
        return line;
    }
    return NULL;
}

//  Skips a JSON string starting at text [at] == '"'; returns the index
//  after its closing quote, or size if it is not closed.
static size_t
s_skip_string (const char *text, size_t size, size_t at)
{
    for (at++; at < size; at++) {
        if (text [at] == '\\')
            at++;
        else
        if (text [at] == '"')
            return at + 1;
    }
    return size;
}

json_t *
dsh_jsonrpc_find_id (const char *text, size_t size)
{
    assert (text);
    int depth = 0;
    size_t at = 0;
    while (at < size) {
        char c = text [at];
        if (c == '{' || c == '[')
            depth++;
        else
        if (c == '}' || c == ']')
            depth--;
        else
        if (c == '"') {
            size_t end = s_skip_string (text, size, at);
            bool is_id = depth == 1 && end - at == 4 && memcmp (text + at, "\"id\"", 4) == 0;
            at = end;
            if (!is_id)
                continue;
            while (at < size && isspace ((unsigned char) text [at]))
                at++;
            if (at >= size || text [at] != ':')
                continue;
            at++;
            while (at < size && isspace ((unsigned char) text [at]))
                at++;
            //  The value is a string, or a run of number characters
            size_t stop = at < size && text [at] == '"'? s_skip_string (text, size, at): at;
            while (stop < size && (isdigit ((unsigned char) text [stop]) || text [stop] == '-'))
                stop++;
            json_t *id = stop > at? dsh_json_parse (text + at, stop - at, JSON_DECODE_ANY, NULL): NULL;
            if (json_is_string (id) || json_is_integer (id))
                return id;
            json_decref (id);
            return NULL;
        }
        at++;
    }
    return NULL;
}

json_t *
dsh_jsonrpc_recv (dsh_jsonrpc_t *self, bool *bad, json_t **id_p, char *error, size_t error_size)
{
    assert (self);
    assert (bad);
    assert (id_p);
    *bad = false;
    *id_p = NULL;
    char *line;
    while ((line = dsh_jsonrpc_line (self))) {
        if (*line)
            break;
        zstr_free (&line);
    }
    if (!line)
        return NULL;
    json_error_t json_error;
    size_t length = strlen (line);
    json_t *message = dsh_json_parse (line, length, 0, &json_error);
    if (!message)
        snprintf (error, error_size, "not JSON: %s", json_error.text);
    else
    if (!json_is_object (message) && !json_is_array (message)) {
        snprintf (error, error_size, "not a JSON object");
        json_decref (message);
        message = NULL;
    }
    if (!message)
        *id_p = dsh_jsonrpc_find_id (line, length);
    zstr_free (&line);
    *bad = message == NULL;
    return message;
}

int
dsh_jsonrpc_flush (dsh_jsonrpc_t *self)
{
    assert (self);
    s_buffer_t *output = &self->output;
    while (output->start < output->size) {
        ssize_t sent = write (self->write_fd, output->data + output->start, output->size - output->start);
        if (sent < 0 && errno == EINTR)
            continue;
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (sent <= 0)
            return -1;
        output->start += (size_t) sent;
    }
    output->start = output->size = 0;
    return 0;
}

int
dsh_jsonrpc_queue (dsh_jsonrpc_t *self, const json_t *message)
{
    assert (self);
    assert (message);
    //  Compact JSON escapes every newline, so one message is one line
    char *text = json_dumps (message, JSON_COMPACT);
    if (!text)
        return -1;
    s_buffer_append (&self->output, text, strlen (text));
    s_buffer_append (&self->output, "\n", 1);
    free (text);
    return 0;
}

size_t
dsh_jsonrpc_backlog (dsh_jsonrpc_t *self)
{
    assert (self);
    return self->output.size - self->output.start;
}

int
dsh_jsonrpc_cursor (const json_t *params, size_t *start)
{
    assert (start);
    *start = 0;
    const json_t *cursor = json_object_get (params, "cursor");
    if (!cursor)
        return 0;
    const char *text = json_string_value (cursor);
    char *end = NULL;
    unsigned long long value = text? strtoull (text, &end, 10): 0;
    if (!text || !*text || *end || !isdigit ((unsigned char) *text) || value > SIZE_MAX)
        return -1;
    *start = (size_t) value;
    return 0;
}

json_t *
dsh_jsonrpc_request (json_int_t id, const char *method, json_t *params)
{
    json_t *message = json_pack ("{s:s, s:I, s:s}", "jsonrpc", "2.0", "id", id, "method", method);
    if (params)
        json_object_set_new (message, "params", params);
    return message;
}

json_t *
dsh_jsonrpc_notification (const char *method, json_t *params)
{
    json_t *message = json_pack ("{s:s, s:s}", "jsonrpc", "2.0", "method", method);
    if (params)
        json_object_set_new (message, "params", params);
    return message;
}

json_t *
dsh_jsonrpc_result (const json_t *id, json_t *result)
{
    json_t *message = json_pack ("{s:s}", "jsonrpc", "2.0");
    json_object_set_new (message, "id", id? json_deep_copy (id): json_null ());
    json_object_set_new (message, "result", result? result: json_object ());
    return message;
}

json_t *
dsh_jsonrpc_error (const json_t *id, int code, const char *message)
{
    json_t *response = json_pack ("{s:s, s:{s:i, s:s}}", "jsonrpc", "2.0",
                                  "error", "code", code, "message", message);
    json_object_set_new (response, "id", id? json_deep_copy (id): json_null ());
    return response;
}
