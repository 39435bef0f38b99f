/*  =========================================================================
    dsh_settings - read a middleware's settings from its ZPL stage section

    Every built-in middleware takes its settings as the children of its
    stage section in the broker's chain config (or the root of a dsh-stage
    --config file). The same section also holds the keys the chain itself
    reads (name, kind, timeout_ms, ...): a middleware skips those and
    refuses any other key it does not know, so a typing error in a policy
    is an error at startup, never a rule silently ignored.
    =========================================================================
*/

#ifndef DSH_SETTINGS_H_INCLUDED
#define DSH_SETTINGS_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

//  True if key belongs to the chain's part of a stage section, not to the
//  middleware: name, kind, timeout_ms, fail_open, feed, drain.
bool
    dsh_settings_chain_key (const char *key);

//  Parse value as a whole number from min to max into *target. Returns 0,
//  or -1 with a reason naming key.
int
    dsh_settings_int (const char *key, const char *value, long min, long max, int *target,
                      char *error, size_t error_size);

//  Split a comma-separated list into a new list of trimmed, non-empty
//  names (a zlistx of strings that owns them).
zlistx_t *
    dsh_settings_names (const char *value);

#ifdef __cplusplus
}
#endif

#endif
