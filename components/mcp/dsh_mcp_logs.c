/*  =========================================================================
    dsh_mcp_logs - bridged MCP servers' log messages, for one MCP session
    =========================================================================
*/

#include "dsh_mcp_logs.h"
#include "dsh_mcp_gateway.h"

#include <czmq.h>

//  MCP's levels (RFC 5424's), least severe first.
static const char *s_levels [] = { "debug", "info", "notice", "warning", "error", "critical", "alert",
                                   "emergency", NULL };

//  One gateway followed: its cursor, and whether a poll is out.
typedef struct {
    json_int_t after;
    bool in_flight;
} s_follow_t;

struct _dsh_mcp_logs_t {
    int wait_ms;
    int level;                  //  index in s_levels, or -1 before set_level
    zhashx_t *follows;          //  gateway tool name -> s_follow_t
};

int
dsh_mcp_logs_level (const char *name)
{
    for (int index = 0; name && s_levels [index]; index++)
        if (streq (name, s_levels [index]))
            return index;
    return -1;
}

dsh_mcp_logs_t *
dsh_mcp_logs_new (int wait_ms)
{
    dsh_mcp_logs_t *self = (dsh_mcp_logs_t *) zmalloc (sizeof (dsh_mcp_logs_t));
    assert (self);
    self->wait_ms = wait_ms;
    self->level = -1;
    self->follows = zhashx_new ();
    zhashx_set_destructor (self->follows, (zhashx_destructor_fn *) zstr_free);
    return self;
}

void
dsh_mcp_logs_destroy (dsh_mcp_logs_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        zhashx_destroy (&(*self_p)->follows);
        free (*self_p);
        *self_p = NULL;
    }
}

bool
dsh_mcp_logs_following (dsh_mcp_logs_t *self)
{
    assert (self);
    return self->level >= 0;
}

int
dsh_mcp_logs_set_level (dsh_mcp_logs_t *self, const char *level)
{
    assert (self);
    int index = dsh_mcp_logs_level (level);
    if (index < 0)
        return -1;
    self->level = index;
    return 0;
}

static json_t *
s_poll (dsh_mcp_logs_t *self, const char *tool, s_follow_t *follow)
{
    follow->in_flight = true;
    return json_pack ("{s:s, s:{s:s, s:{s:I, s:i}}}", "tool", tool, "arguments", "method", DSH_MCP_LOGS_POLL,
                      "params", "after", follow->after, "waitMs", self->wait_ms);
}

json_t *
dsh_mcp_logs_polls (dsh_mcp_logs_t *self, const json_t *entries)
{
    assert (self);
    json_t *polls = json_array ();
    if (self->level < 0)
        return polls;
    size_t index;
    const json_t *entry;
    json_array_foreach (entries, index, entry) {
        const char *tool = json_string_value (json_object_get (entry, "name"));
        const json_t *capabilities = json_object_get (json_object_get (entry, DSH_MCP_GATEWAY_KEY), "capabilities");
        if (!dsh_mcp_gateway_named (tool) || !json_object_get (capabilities, "logging"))
            continue;
        s_follow_t *follow = (s_follow_t *) zhashx_lookup (self->follows, tool);
        if (!follow) {
            follow = (s_follow_t *) zmalloc (sizeof (s_follow_t));
            assert (follow);
            zhashx_insert (self->follows, tool, follow);
        }
        if (!follow->in_flight)
            json_array_append_new (polls, s_poll (self, tool, follow));
    }
    return polls;
}

json_t *
dsh_mcp_logs_answer (dsh_mcp_logs_t *self, const char *tool, const json_t *body)
{
    assert (self);
    json_t *answer = json_pack ("{s:[]}", "notifications");
    s_follow_t *follow = tool? (s_follow_t *) zhashx_lookup (self->follows, tool): NULL;
    if (!follow)
        return answer;
    const json_t *structured = json_object_get (body, "structuredContent");
    const json_t *next = json_object_get (structured, "next");
    if (json_is_true (json_object_get (body, "isError")) || !json_is_integer (next)) {
        //  The gateway went (or cannot poll): forget it until it is back
        zhashx_delete (self->follows, tool);
        return answer;
    }
    follow->after = json_integer_value (next);
    json_t *notifications = json_object_get (answer, "notifications");
    size_t index;
    const json_t *message;
    json_array_foreach (json_object_get (structured, "messages"), index, message) {
        const json_t *params = json_object_get (message, "params");
        int level = dsh_mcp_logs_level (json_string_value (json_object_get (params, "level")));
        if (json_is_object (params) && level >= self->level)
            json_array_append (notifications, (json_t *) params);
    }
    json_object_set_new (answer, "poll", s_poll (self, tool, follow));
    return answer;
}
