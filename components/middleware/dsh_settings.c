/*  =========================================================================
    dsh_settings - read a middleware's settings from its ZPL stage section
    =========================================================================
*/

#include "dsh_settings.h"

bool
dsh_settings_chain_key (const char *key)
{
    static const char *chain_keys [] = {
        "name", "kind", "timeout_ms", "fail_open", "feed", "drain"
    };
    if (!key)
        return false;
    for (size_t index = 0; index < sizeof chain_keys / sizeof chain_keys [0]; index++)
        if (streq (key, chain_keys [index]))
            return true;
    return false;
}

int
dsh_settings_int (const char *key, const char *value, long min, long max, int *target,
                  char *error, size_t error_size)
{
    assert (key);
    assert (target);
    if (!value)
        value = "";
    char *end = NULL;
    errno = 0;
    long number = strtol (value, &end, 10);
    if (errno || end == value || *end || number < min || number > max) {
        snprintf (error, error_size, "%s: \"%s\" is not a whole number from %ld to %ld",
                  key, value, min, max);
        return -1;
    }
    *target = (int) number;
    return 0;
}

zlistx_t *
dsh_settings_names (const char *value)
{
    zlistx_t *names = zlistx_new ();
    assert (names);
    zlistx_set_destructor (names, (czmq_destructor *) zstr_free);
    zlistx_set_duplicator (names, (czmq_duplicator *) strdup);
    zlistx_set_comparator (names, (czmq_comparator *) strcmp);
    const char *cursor = value? value: "";
    while (*cursor) {
        const char *comma = strchr (cursor, ',');
        const char *end = comma? comma: cursor + strlen (cursor);
        const char *start = cursor;
        while (start < end && isspace ((unsigned char) *start))
            start++;
        const char *stop = end;
        while (stop > start && isspace ((unsigned char) stop [-1]))
            stop--;
        if (stop > start) {
            char *name = zsys_sprintf ("%.*s", (int) (stop - start), start);
            zlistx_add_end (names, name);
            zstr_free (&name);
        }
        cursor = comma? comma + 1: end;
    }
    return names;
}
