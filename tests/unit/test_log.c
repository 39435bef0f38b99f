/*  =========================================================================
    test_log - dsh_log: a burst of lines per key per window, the rest
    counted and reported with the last of them when the key logs again or
    the owner flushes; keys limited apart; the table's overflow shared
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dsh_log.h"

//  What a limiter wrote, one string per line, level first.
static void
s_sink (char level, const char *line, void *arg)
{
    zlistx_t *lines = (zlistx_t *) arg;
    zlistx_add_end (lines, zsys_sprintf ("%c %s", level, line));
}

static zlistx_t *
s_lines (void)
{
    zlistx_t *lines = zlistx_new ();
    zlistx_set_destructor (lines, (zlistx_destructor_fn *) zstr_free);
    return lines;
}

static void
test_burst_then_count (void **state)
{
    (void) state;
    zlistx_t *lines = s_lines ();
    dsh_log_t *log = dsh_log_new (3, 1000, s_sink, lines);
    char line [64];
    for (int index = 0; index < 1000; index++) {
        snprintf (line, sizeof (line), "bad message %d", index);
        assert_int_equal (dsh_log_line (log, 5000, 'W', "bad message %d", line), index < 3);
    }
    assert_int_equal (zlistx_size (lines), 3);
    assert_string_equal (zlistx_first (lines), "W bad message 0");
    //  Still in the window: nothing due
    dsh_log_flush (log, 5999);
    assert_int_equal (zlistx_size (lines), 3);
    //  The window is over: the count, with the last suppressed line
    dsh_log_flush (log, 6000);
    assert_int_equal (zlistx_size (lines), 4);
    assert_string_equal (zlistx_last (lines), "W bad message 999 (997 similar messages suppressed)");
    //  Reported once
    dsh_log_flush (log, 9000);
    assert_int_equal (zlistx_size (lines), 4);
    //  A new window lets a new burst through
    assert_true (dsh_log_line (log, 9000, 'W', "bad message %d", "bad message again"));
    assert_int_equal (zlistx_size (lines), 5);
    dsh_log_destroy (&log);
    dsh_log_destroy (&log);
    zlistx_destroy (&lines);
}

static void
test_report_before_next_line (void **state)
{
    (void) state;
    zlistx_t *lines = s_lines ();
    dsh_log_t *log = dsh_log_new (1, 100, s_sink, lines);
    assert_true (dsh_log_line (log, 0, 'E', "k", "first"));
    assert_false (dsh_log_line (log, 10, 'E', "k", "second"));
    assert_false (dsh_log_line (log, 20, 'E', "k", "third"));
    //  No flush: the next line in a new window brings the count first
    assert_true (dsh_log_line (log, 150, 'E', "k", "fourth"));
    assert_int_equal (zlistx_size (lines), 3);
    assert_string_equal (zlistx_first (lines), "E first");
    assert_string_equal (zlistx_next (lines), "E third (2 similar messages suppressed)");
    assert_string_equal (zlistx_next (lines), "E fourth");
    dsh_log_destroy (&log);
    zlistx_destroy (&lines);
}

static void
test_keys_apart (void **state)
{
    (void) state;
    zlistx_t *lines = s_lines ();
    dsh_log_t *log = dsh_log_new (2, 1000, s_sink, lines);
    for (int index = 0; index < 10; index++) {
        dsh_log_line (log, 0, 'W', "one", "from one");
        dsh_log_line (log, 0, 'I', "two", "from two");
    }
    //  Each key has its own burst, and its own count at its own level
    assert_int_equal (zlistx_size (lines), 4);
    dsh_log_flush (log, 1000);
    assert_int_equal (zlistx_size (lines), 6);
    assert_string_equal (zlistx_last (lines), "I from two (8 similar messages suppressed)");
    assert_string_equal (zlistx_prev (lines), "W from one (8 similar messages suppressed)");
    dsh_log_destroy (&log);
    zlistx_destroy (&lines);
}

static void
test_many_keys (void **state)
{
    (void) state;
    zlistx_t *lines = s_lines ();
    dsh_log_t *log = dsh_log_new (1, 1000, s_sink, lines);
    //  More keys than the table holds: the late ones share one slot, so a
    //  peer that varies the key still cannot flood
    char key [32];
    for (int index = 0; index < 10000; index++) {
        snprintf (key, sizeof (key), "key %d", index);
        dsh_log_line (log, 0, 'W', key, key);
    }
    assert_true (zlistx_size (lines) <= 128);
    dsh_log_flush (log, 1000);
    assert_string_equal (zlistx_last (lines), "W key 9999 (9872 similar messages suppressed)");
    dsh_log_destroy (&log);
    zlistx_destroy (&lines);
}

static void
test_process_wide (void **state)
{
    (void) state;
    //  The process-wide limiter takes formats, 10 lines a second each; it
    //  writes to czmq's log
    FILE *log = tmpfile ();
    assert_non_null (log);
    zsys_set_logstream (log);
    for (int index = 0; index < 100; index++)
        dsh_log_warning ("test_log: flood %d", index);
    dsh_log_info ("test_log: %s", "other");
    dsh_log_error ("test_log: %s", "error");
    //  Within the window: nothing to report yet
    dsh_log_tick ();
    zsys_set_logstream (NULL);
    rewind (log);
    char line [1024];
    size_t floods = 0, others = 0, errors = 0, lines = 0;
    while (fgets (line, sizeof (line), log)) {
        lines++;
        floods += strstr (line, "test_log: flood ") != NULL;
        others += strstr (line, "test_log: other") != NULL;
        errors += strstr (line, "test_log: error") != NULL;
    }
    fclose (log);
    //  10 of the flood, or a few more if a slow run (valgrind) let a window
    //  end in the loop; never the 100
    assert_true (floods >= 10 && floods <= 30);
    assert_int_equal (others, 1);
    assert_int_equal (errors, 1);
    assert_int_equal (lines, floods + 2);
}

//  czmq's lines through dsh_log_stream carry a four-digit year; other
//  text goes through as it is.
static void
test_stream_year (void **state)
{
    (void) state;
    FILE *file = tmpfile ();
    assert_non_null (file);
    FILE *stream = dsh_log_stream (file);
    assert_true (stream != file);
    assert_ptr_equal (dsh_log_stream (file), stream);
    time_t now = time (NULL);
    struct tm local;
    localtime_r (&now, &local);
    char year [16];
    snprintf (year, sizeof (year), "%04d-", local.tm_year + 1900);
    zsys_set_logstream (stream);
    zsys_set_logident ("test_log");
    zsys_info ("a line with %s", "a date");
    zsys_set_logstream (NULL);
    //  The form czmq writes without an ident
    fprintf (stream, "W: %s12-01 13:00:00 no ident\n", year + 2);
    fputs ("plain text\n", stream);
    fflush (stream);
    rewind (file);
    char line [1024];
    assert_non_null (fgets (line, sizeof (line), file));
    assert_true (strncmp (line, "I: (test_log) ", 14) == 0);
    assert_true (strncmp (line + 14, year, 5) == 0);
    assert_non_null (strstr (line, " a line with a date\n"));
    assert_non_null (fgets (line, sizeof (line), file));
    assert_true (strncmp (line, "W: ", 3) == 0);
    assert_true (strncmp (line + 3, year, 5) == 0);
    assert_non_null (fgets (line, sizeof (line), file));
    assert_string_equal (line, "plain text\n");
    fclose (file);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_burst_then_count),
        cmocka_unit_test (test_report_before_next_line),
        cmocka_unit_test (test_keys_apart),
        cmocka_unit_test (test_many_keys),
        cmocka_unit_test (test_process_wide),
        cmocka_unit_test (test_stream_year),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
