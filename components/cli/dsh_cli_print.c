/*  =========================================================================
    dsh_cli_print - printing what a broker said: JSON, and text a terminal
    may show
    =========================================================================
*/

#include "dsh_cli.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void
dsh_cli_print (json_t *json, size_t flags)
{
    char *text = json_dumps (json, flags | JSON_ENCODE_ANY);
    if (text) {
        fputs (text, stdout);
        fputc ('\n', stdout);
        fflush (stdout);
    }
    free (text);
}

//  The string at key in object, or otherwise.
const char *
dsh_cli_string (json_t *object, const char *key, const char *otherwise)
{
    const char *value = json_string_value (json_object_get (object, key));
    return value? value: otherwise;
}

//  The local wall time of ms since 1970 in format (strftime's).
void
dsh_cli_local_time (int64_t ms, const char *format, char *text, size_t size)
{
    time_t seconds = (time_t) (ms / 1000);
    struct tm tm;
    localtime_r (&seconds, &tm);
    if (!strftime (text, size, format, &tm))
        snprintf (text, size, "?");
}

//  Text as a terminal may show it: whatever could move the cursor, recolour
//  the screen or reorder what is read (C0 and C1 controls, DEL, Unicode
//  bidirectional controls) becomes a visible \uXXXX, so a request cannot
//  disguise itself. keep_newlines lets a pretty-printed block keep its lines.
char *
dsh_cli_terminal_text (const char *text, bool keep_newlines)
{
    size_t size = strlen (text);
    char *safe = (char *) malloc (size * 6 + 1);
    assert (safe);
    char *out = safe;
    const unsigned char *in = (const unsigned char *) text;
    for (size_t index = 0; index < size; ) {
        unsigned int code = in [index];
        size_t length = 1;
        bool escape = code < 0x20 || code == 0x7f;
        if (code == 0xc2 && index + 1 < size && in [index + 1] >= 0x80 && in [index + 1] <= 0x9f) {
            code = in [index + 1];
            length = 2;
            escape = true;
        }
        else
        if (code == 0xe2 && index + 2 < size
        &&  (in [index + 1] & 0xc0) == 0x80 && (in [index + 2] & 0xc0) == 0x80) {
            unsigned int candidate = 0x2000u | ((in [index + 1] & 0x3fu) << 6) | (in [index + 2] & 0x3fu);
            if (candidate == 0x200e || candidate == 0x200f || (candidate >= 0x202a && candidate <= 0x202e)
            ||  (candidate >= 0x2066 && candidate <= 0x2069)) {
                code = candidate;
                length = 3;
                escape = true;
            }
        }
        if (keep_newlines && code == '\n')
            escape = false;
        if (escape)
            out += sprintf (out, "\\u%04x", code);
        else {
            memcpy (out, in + index, length);
            out += length;
        }
        index += length;
    }
    *out = 0;
    return safe;
}

//  One labelled line; value shown as the terminal may.
void
dsh_cli_terminal_field (const char *label, const char *value)
{
    char *safe = dsh_cli_terminal_text (value, false);
    printf ("  %-10s %s\n", label, safe);
    free (safe);
}

//  A column of names no wider than 40, nor narrower than its heading.
int
dsh_cli_column_width (json_t *rows, const char *key, const char *heading)
{
    size_t width = strlen (heading);
    for (size_t index = 0; index < json_array_size (rows); index++) {
        const char *text = json_string_value (json_object_get (json_array_get (rows, index), key));
        if (text && strlen (text) > width)
            width = strlen (text);
    }
    return (int) (width < 40? width: 40);
}

//  The first 12 hex digits of the digest at key, or "-".
void
dsh_cli_digest_short (json_t *object, const char *key, char *text, size_t size)
{
    snprintf (text, size, "%.12s", dsh_cli_string (object, key, "-"));
}
