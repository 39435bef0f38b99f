/*  =========================================================================
    dsh_log - log lines a peer can trigger, at a bounded rate

    A peer that sends garbage as fast as it can made the broker write one
    warning per message (158 000 lines, 18 MB, in three minutes). Here each
    message key (the format string: one per call site) may log at most
    `burst` lines per window; the lines after that are counted, not
    written. When the key logs again in a later window, or when the owner
    flushes (on a timer) after its window has ended, one line says how many
    were suppressed and repeats the last of them, so nothing is lost but the
    repetition.

    dsh_log_warning, _error and _info go through one process-wide limiter
    (10 lines a second per key) to czmq's zsys log; a dsh_log_t of one's own,
    with its own sink, is for tests. Thread-safe.
    =========================================================================
*/

#ifndef DSH_LOG_H_INCLUDED
#define DSH_LOG_H_INCLUDED

#include <czmq.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_log_t dsh_log_t;

//  A stream that writes czmq's log lines to target with the year in four
//  digits ("I: (dsh-broker) 2026-12-01 12:38:41 ..."; czmq 4.2 writes "26-"),
//  and anything else as it is. For zsys_set_logstream; one per target, kept
//  for the life of the process; target itself if it cannot be made.
FILE *
    dsh_log_stream (FILE *target);

//  Where a limiter's lines go: level is 'E', 'W' or 'I'.
typedef void (dsh_log_sink_fn) (char level, const char *line, void *arg);

//  A limiter that lets burst lines per key through in each window_ms,
//  to sink (NULL: czmq's zsys_error, zsys_warning, zsys_info).
dsh_log_t *
    dsh_log_new (size_t burst, int64_t window_ms, dsh_log_sink_fn *sink, void *arg);

//  Destroy; safe twice.
void
    dsh_log_destroy (dsh_log_t **self_p);

//  Log a line under key at time now_ms, unless key has logged burst lines
//  in this window already. Returns true if it was written.
bool
    dsh_log_line (dsh_log_t *self, int64_t now_ms, char level, const char *key, const char *line);

//  Write the suppressed counts of the keys whose window has ended by now_ms.
void
    dsh_log_flush (dsh_log_t *self, int64_t now_ms);

//  Log a warning through the process-wide limiter, keyed by format.
void
    dsh_log_warning (const char *format, ...) CHECK_PRINTF (1);

//  Log an error through the process-wide limiter, keyed by format.
void
    dsh_log_error (const char *format, ...) CHECK_PRINTF (1);

//  Log a notice through the process-wide limiter, keyed by format.
void
    dsh_log_info (const char *format, ...) CHECK_PRINTF (1);

//  Write the process-wide limiter's suppressed counts that are due; call
//  it from a timer, so a flood that stops is still reported.
void
    dsh_log_tick (void);

#ifdef __cplusplus
}
#endif

#endif
