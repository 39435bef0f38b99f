/*  =========================================================================
    dsh_log - log lines a peer can trigger, at a bounded rate

    Keys sit in a fixed table (no allocation, so the process-wide limiter
    is a static): a key past its size shares the last slot with the others
    that came too late, so their lines are limited together.
    =========================================================================
*/

#include "dsh_log.h"

#include <ctype.h>
#include <time.h>

#include <pthread.h>

//  Keys a limiter tells apart
#define S_KEYS 128
//  A line is cut to this, and so is the copy kept of the last suppressed
#define S_LINE_MAX 1024

typedef struct {
    char *key;
    char level;
    int64_t window_start_ms;    //  when its current window began
    size_t lines;               //  written in the current window
    size_t suppressed;          //  not written since the last report
    char last [S_LINE_MAX];     //  the last line not written
} s_key_t;

struct _dsh_log_t {
    size_t burst;
    int64_t window_ms;
    dsh_log_sink_fn *sink;
    void *arg;
    pthread_mutex_t lock;
    size_t count;
    s_key_t keys [S_KEYS];
    bool is_static;             //  the process-wide one: its keys are borrowed
};

static dsh_log_t s_process = {
    .burst = 10, .window_ms = 1000, .lock = PTHREAD_MUTEX_INITIALIZER, .is_static = true
};

dsh_log_t *
dsh_log_new (size_t burst, int64_t window_ms, dsh_log_sink_fn *sink, void *arg)
{
    dsh_log_t *self = (dsh_log_t *) zmalloc (sizeof (dsh_log_t));
    assert (self);
    self->burst = burst;
    self->window_ms = window_ms;
    self->sink = sink;
    self->arg = arg;
    pthread_mutex_init (&self->lock, NULL);
    return self;
}

void
dsh_log_destroy (dsh_log_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_log_t *self = *self_p;
        for (size_t index = 0; index < self->count; index++)
            free (self->keys [index].key);
        pthread_mutex_destroy (&self->lock);
        free (self);
        *self_p = NULL;
    }
}

static void
s_write (dsh_log_t *self, char level, const char *line)
{
    if (self->sink)
        self->sink (level, line, self->arg);
    else
    if (level == 'E')
        zsys_error ("%s", line);
    else
    if (level == 'W')
        zsys_warning ("%s", line);
    else
        zsys_info ("%s", line);
}

//  Reports what a key suppressed, if anything, and starts counting again.
static void
s_report (dsh_log_t *self, s_key_t *entry)
{
    if (entry->suppressed == 0)
        return;
    char line [S_LINE_MAX + 64];
    snprintf (line, sizeof (line), "%s (%zu similar messages suppressed)", entry->last, entry->suppressed);
    s_write (self, entry->level, line);
    entry->suppressed = 0;
}

static s_key_t *
s_key (dsh_log_t *self, const char *key, char level)
{
    for (size_t index = 0; index < self->count; index++)
        if (streq (self->keys [index].key, key))
            return &self->keys [index];
    if (self->count == S_KEYS)
        return &self->keys [S_KEYS - 1];
    s_key_t *entry = &self->keys [self->count++];
    //  The process-wide limiter's keys are format strings, which live as
    //  long as the program; a test's limiter keeps copies
    entry->key = self->is_static? (char *) key: strdup (key);
    entry->level = level;
    entry->window_start_ms = INT64_MIN / 2;
    return entry;
}

bool
dsh_log_line (dsh_log_t *self, int64_t now_ms, char level, const char *key, const char *line)
{
    assert (self);
    assert (key);
    assert (line);
    pthread_mutex_lock (&self->lock);
    s_key_t *entry = s_key (self, key, level);
    if (now_ms - entry->window_start_ms >= self->window_ms) {
        s_report (self, entry);
        entry->window_start_ms = now_ms;
        entry->lines = 0;
    }
    bool written = entry->lines < self->burst;
    if (written) {
        entry->lines++;
        s_write (self, level, line);
    }
    else {
        entry->suppressed++;
        entry->level = level;
        snprintf (entry->last, sizeof (entry->last), "%s", line);
    }
    pthread_mutex_unlock (&self->lock);
    return written;
}

void
dsh_log_flush (dsh_log_t *self, int64_t now_ms)
{
    assert (self);
    pthread_mutex_lock (&self->lock);
    for (size_t index = 0; index < self->count; index++)
        if (now_ms - self->keys [index].window_start_ms >= self->window_ms)
            s_report (self, &self->keys [index]);
    pthread_mutex_unlock (&self->lock);
}

static void
s_process_line (char level, const char *format, va_list args)
{
    char line [S_LINE_MAX];
    vsnprintf (line, sizeof (line), format, args);
    dsh_log_line (&s_process, zclock_mono (), level, format, line);
}

void
dsh_log_warning (const char *format, ...)
{
    va_list args;
    va_start (args, format);
    s_process_line ('W', format, args);
    va_end (args);
}

void
dsh_log_error (const char *format, ...)
{
    va_list args;
    va_start (args, format);
    s_process_line ('E', format, args);
    va_end (args);
}

void
dsh_log_info (const char *format, ...)
{
    va_list args;
    va_start (args, format);
    s_process_line ('I', format, args);
    va_end (args);
}

//  The cookie stream of dsh_log_stream: each write is one line czmq made
//  (it prints a line and flushes), "L: [(ident) ]YY-MM-DD HH:MM:SS text".
static ssize_t
s_stream_write (void *cookie, const char *data, size_t size)
{
    FILE *target = (FILE *) cookie;
    size_t at = 0;
    if (size > 3 && data [1] == ':' && data [2] == ' ') {
        at = 3;
        if (data [at] == '(') {
            const char *close = (const char *) memchr (data + at, ')', size - at);
            at = close && (size_t) (close - data) + 2 < size && close [1] == ' '? (size_t) (close - data) + 2: 0;
        }
    }
    bool dated = at && size - at > 9 && isdigit ((unsigned char) data [at]) && isdigit ((unsigned char) data [at + 1])
              && data [at + 2] == '-' && isdigit ((unsigned char) data [at + 3]) && data [at + 5] == '-'
              && data [at + 8] == ' ';
    if (dated) {
        time_t now = time (NULL);
        struct tm local;
        localtime_r (&now, &local);
        fwrite (data, 1, at, target);
        fprintf (target, "%02d", (local.tm_year + 1900) / 100);
        fwrite (data + at, 1, size - at, target);
    }
    else
        fwrite (data, 1, size, target);
    fflush (target);
    return (ssize_t) size;
}

FILE *
dsh_log_stream (FILE *target)
{
    assert (target);
    //  One stream per target (a program may set its log stream twice)
    static FILE *s_target = NULL, *s_stream = NULL;
    static pthread_mutex_t s_streams = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock (&s_streams);
    if (s_target != target || !s_stream) {
        cookie_io_functions_t functions = { NULL, s_stream_write, NULL, NULL };
        FILE *stream = fopencookie (target, "w", functions);
        //  Line at a time: czmq's lines are under 1 KiB, so one write is one line
        if (stream) {
            setvbuf (stream, NULL, _IOLBF, 4096);
            s_target = target;
            s_stream = stream;
        }
    }
    FILE *stream = s_target == target? s_stream: NULL;
    pthread_mutex_unlock (&s_streams);
    return stream? stream: target;
}

void
dsh_log_tick (void)
{
    dsh_log_flush (&s_process, zclock_mono ());
}
