/*  =========================================================================
    test_permission - dsh_permission: rules from ZPL, deny > ask > allow,
    globs on tool and agent, the default action, when an ask closes (its
    timeout or the call's deadline), the stage's control commands that
    need no call (approvals, pending, approve/deny unknown, grants, revoke,
    grants.load), the grant settings, and a grant's binding: each part of
    it (stage, agent, tool, definition, chain version, arguments, expiry)
    changed alone ends it
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dsh_permission.h"
#include "dsh_doc.h"
#include "dsh_json.h"
#include "stage_control.h"

static void
s_assert_contains (const char *text, const char *part)
{
    if (!strstr (text, part))
        fail_msg ("\"%s\" does not contain \"%s\"", text, part);
}

//  The hints of a tool entry given as JSON.
static dsh_toolhints_t
s_hints (const json_t *entry)
{
    msgpack_sbuffer bytes;
    dsh_doc_t *doc = stage_control_doc (entry, &bytes);
    dsh_toolhints_t hints = dsh_toolhints_from_msgpack (dsh_doc_root (doc));
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&bytes);
    return hints;
}

//  A grant from its form as JSON (as the broker stores it).
static dsh_permission_grant_t *
s_grant_from_json (const json_t *json, char *error, size_t error_size)
{
    msgpack_sbuffer bytes;
    dsh_doc_t *doc = stage_control_doc (json, &bytes);
    dsh_permission_grant_t *grant = dsh_permission_grant_from_msgpack (dsh_doc_root (doc), error, error_size);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&bytes);
    return grant;
}


//  A policy from ZPL text; fails the test if it is refused.
static dsh_permission_policy_t *
s_policy (const char *text)
{
    zconfig_t *settings = zconfig_str_load (text);
    assert_non_null (settings);
    char error [256] = "";
    dsh_permission_policy_t *policy = dsh_permission_policy_new (settings, error, sizeof error);
    if (!policy)
        fail_msg ("policy refused: %s", error);
    zconfig_destroy (&settings);
    return policy;
}

//  The reason a policy from ZPL text is refused; fails if it is accepted.
static void
s_refused (const char *text, const char *reason)
{
    zconfig_t *settings = zconfig_str_load (text);
    assert_non_null (settings);
    char error [256] = "";
    dsh_permission_policy_t *policy = dsh_permission_policy_new (settings, error, sizeof error);
    if (policy)
        fail_msg ("policy accepted, expected \"%s\":\n%s", reason, text);
    s_assert_contains (error, reason);
    zconfig_destroy (&settings);
}

static void
test_defaults (void **state)
{
    (void) state;
    char error [256] = "";
    dsh_permission_policy_t *policy = dsh_permission_policy_new (NULL, error, sizeof error);
    assert_non_null (policy);
    assert_int_equal (dsh_permission_policy_rules (policy), 0);
    assert_int_equal (dsh_permission_policy_default (policy), DSH_PERMISSION_ALLOW);
    assert_string_equal (dsh_permission_policy_approvals (policy), "tcp://127.0.0.1:*");
    assert_int_equal (dsh_permission_policy_approval_timeout_ms (policy), 120000);
    assert_int_equal (dsh_permission_policy_decide (policy, "anything", NULL, NULL), DSH_PERMISSION_ALLOW);
    dsh_permission_policy_destroy (&policy);
    assert_null (policy);
    dsh_permission_policy_destroy (&policy);
}

static void
test_settings_parsed (void **state)
{
    (void) state;
    dsh_permission_policy_t *policy = s_policy (
        "default = \"deny\"\n"
        "approvals = \"tcp://127.0.0.1:7600\"\n"
        "approval_timeout_ms = 2500\n"
        "name = \"perm\"\n"
        "kind = \"permission\"\n"
        "timeout_ms = 9000\n"
        "rule\n"
        "    tool = \"read_*\"\n"
        "    action = \"allow\"\n"
        "rule\n"
        "    action = \"ask\"\n"
        "    agent = \"intern-*\"\n");
    assert_int_equal (dsh_permission_policy_rules (policy), 2);
    assert_int_equal (dsh_permission_policy_default (policy), DSH_PERMISSION_DENY);
    assert_string_equal (dsh_permission_policy_approvals (policy), "tcp://127.0.0.1:7600");
    assert_int_equal (dsh_permission_policy_approval_timeout_ms (policy), 2500);
    dsh_permission_policy_destroy (&policy);
}

static void
test_bad_settings (void **state)
{
    (void) state;
    s_refused ("rule\n    tool = \"x\"\n", "rule 1: action is required");
    s_refused ("rule\n    action = \"deny\"\nrule\n    tool = \"x\"\n    action = \"maybe\"\n",
               "rule 2: action \"maybe\" is not allow, deny or ask");
    s_refused ("rule\n    action = \"\"\n", "rule 1: action \"\" is not allow, deny or ask");
    s_refused ("rule\n    action = \"deny\"\n    tools = \"x\"\n", "rule 1: unknown setting \"tools\"");
    s_refused ("rule\n    action = \"deny\"\n    tool = \"\"\n", "rule 1: tool must not be empty");
    s_refused ("default = \"maybe\"\n", "default: \"maybe\" is not allow, deny or ask");
    s_refused ("defualt = \"deny\"\n", "unknown setting \"defualt\"");
    s_refused ("approvals = \"127.0.0.1:7600\"\n", "approvals: \"127.0.0.1:7600\" is not a tcp://");
    s_refused ("approval_timeout_ms = \"soon\"\n", "approval_timeout_ms: \"soon\" is not a whole number");
    s_refused ("approval_timeout_ms = 0\n", "approval_timeout_ms: \"0\" is not a whole number");
    s_refused ("approval_timeout_ms = -5\n", "approval_timeout_ms");
}

static void
test_deny_beats_ask_beats_allow (void **state)
{
    (void) state;
    //  Order in the file does not matter: the strongest matching action wins
    dsh_permission_policy_t *policy = s_policy (
        "rule\n    tool = \"*\"\n    action = \"allow\"\n"
        "rule\n    tool = \"write_*\"\n    action = \"ask\"\n"
        "rule\n    tool = \"write_secrets\"\n    action = \"deny\"\n"
        "rule\n    tool = \"write_*\"\n    action = \"allow\"\n");
    assert_int_equal (dsh_permission_policy_decide (policy, "read_file", NULL, NULL), DSH_PERMISSION_ALLOW);
    assert_int_equal (dsh_permission_policy_decide (policy, "write_file", NULL, NULL), DSH_PERMISSION_ASK);
    assert_int_equal (dsh_permission_policy_decide (policy, "write_secrets", NULL, NULL), DSH_PERMISSION_DENY);
    dsh_permission_policy_destroy (&policy);

    policy = s_policy (
        "rule\n    tool = \"rm\"\n    action = \"deny\"\n"
        "rule\n    tool = \"rm\"\n    action = \"ask\"\n"
        "rule\n    tool = \"rm\"\n    action = \"allow\"\n");
    assert_int_equal (dsh_permission_policy_decide (policy, "rm", NULL, "a"), DSH_PERMISSION_DENY);
    dsh_permission_policy_destroy (&policy);
}

static void
test_globs_on_tool_and_agent (void **state)
{
    (void) state;
    dsh_permission_policy_t *policy = s_policy (
        "default = \"allow\"\n"
        "rule\n    tool = \"write_*\"\n    agent = \"planner-*\"\n    action = \"deny\"\n"
        "rule\n    tool = \"exec\"\n    action = \"ask\"\n"
        "rule\n    agent = \"guest\"\n    action = \"deny\"\n"
        "rule\n    tool = \"fs.?ead\"\n    agent = \"[ab]*\"\n    action = \"ask\"\n");
    //  Both globs must match
    assert_int_equal (dsh_permission_policy_decide (policy, "write_file", NULL, "planner-1"), DSH_PERMISSION_DENY);
    assert_int_equal (dsh_permission_policy_decide (policy, "write_file", NULL, "coder-1"), DSH_PERMISSION_ALLOW);
    assert_int_equal (dsh_permission_policy_decide (policy, "read_file", NULL, "planner-1"), DSH_PERMISSION_ALLOW);
    //  An exact name is a glob without wildcards
    assert_int_equal (dsh_permission_policy_decide (policy, "exec", NULL, "anyone"), DSH_PERMISSION_ASK);
    assert_int_equal (dsh_permission_policy_decide (policy, "exec2", NULL, "anyone"), DSH_PERMISSION_ALLOW);
    assert_int_equal (dsh_permission_policy_decide (policy, "read_file", NULL, "guest"), DSH_PERMISSION_DENY);
    assert_int_equal (dsh_permission_policy_decide (policy, "read_file", NULL, "guest2"), DSH_PERMISSION_ALLOW);
    assert_int_equal (dsh_permission_policy_decide (policy, "fs.read", NULL, "alice"), DSH_PERMISSION_ASK);
    assert_int_equal (dsh_permission_policy_decide (policy, "fs.read", NULL, "carol"), DSH_PERMISSION_ALLOW);
    //  No agent is agent "": only "*"-agent rules apply
    assert_int_equal (dsh_permission_policy_decide (policy, "write_file", NULL, NULL), DSH_PERMISSION_ALLOW);
    assert_int_equal (dsh_permission_policy_decide (policy, "exec", NULL, NULL), DSH_PERMISSION_ASK);
    dsh_permission_policy_destroy (&policy);
}

static void
test_default_action (void **state)
{
    (void) state;
    dsh_permission_policy_t *policy = s_policy (
        "default = \"deny\"\n"
        "rule\n    tool = \"read_*\"\n    action = \"allow\"\n");
    assert_int_equal (dsh_permission_policy_decide (policy, "read_file", NULL, NULL), DSH_PERMISSION_ALLOW);
    assert_int_equal (dsh_permission_policy_decide (policy, "write_file", NULL, NULL), DSH_PERMISSION_DENY);
    dsh_permission_policy_destroy (&policy);

    //  A matching allow overrides a stricter default: the default is only
    //  for calls no rule speaks about
    policy = s_policy ("default = \"ask\"\nrule\n    tool = \"x\"\n    action = \"allow\"\n");
    assert_int_equal (dsh_permission_policy_decide (policy, "x", NULL, NULL), DSH_PERMISSION_ALLOW);
    assert_int_equal (dsh_permission_policy_decide (policy, "y", NULL, NULL), DSH_PERMISSION_ASK);
    dsh_permission_policy_destroy (&policy);
}

static void
test_names (void **state)
{
    (void) state;
    dsh_permission_action_t action = DSH_PERMISSION_DENY;
    assert_int_equal (dsh_permission_action_parse ("allow", &action), 0);
    assert_int_equal (action, DSH_PERMISSION_ALLOW);
    assert_int_equal (dsh_permission_action_parse ("ask", &action), 0);
    assert_int_equal (action, DSH_PERMISSION_ASK);
    assert_int_equal (dsh_permission_action_parse ("deny", &action), 0);
    assert_int_equal (action, DSH_PERMISSION_DENY);
    assert_int_equal (dsh_permission_action_parse ("Deny", &action), -1);
    assert_int_equal (dsh_permission_action_parse (NULL, &action), -1);
    assert_string_equal (dsh_permission_action_name (DSH_PERMISSION_ASK), "ask");
    assert_string_equal (dsh_approval_outcome_name (DSH_APPROVAL_ALLOWED), "allowed");
    assert_string_equal (dsh_approval_outcome_name (DSH_APPROVAL_REJECTED), "rejected");
    assert_string_equal (dsh_approval_outcome_name (DSH_APPROVAL_CANCELLED), "cancelled");
    assert_string_equal (dsh_approval_outcome_name (DSH_APPROVAL_UNAVAILABLE), "unavailable");
}

//  An ask closes within approval_timeout_ms, and a little before the
//  call's deadline when that comes first, so that the caller hears why
//  before the broker's TIMEOUT.
static void
test_ask_closes_before_deadline (void **state)
{
    (void) state;
    const int64_t now = 1000000;
    bool by_deadline = true;

    //  No deadline known: the stage's own timeout alone
    assert_int_equal (dsh_permission_ask_closes_at (now, 0, 120000, &by_deadline), now + 120000);
    assert_false (by_deadline);

    //  A deadline past the timeout changes nothing
    assert_int_equal (dsh_permission_ask_closes_at (now, now + 600000, 120000, &by_deadline), now + 120000);
    assert_false (by_deadline);

    //  A nearer deadline wins, with a margin before it: never at or after it
    int64_t closes = dsh_permission_ask_closes_at (now, now + 60000, 120000, &by_deadline);
    assert_true (by_deadline);
    assert_true (closes < now + 60000);
    assert_true (closes >= now + 60000 - 250);

    //  A short deadline keeps most of its time for the human
    closes = dsh_permission_ask_closes_at (now, now + 400, 120000, &by_deadline);
    assert_true (by_deadline);
    assert_true (closes < now + 400);
    assert_true (closes >= now + 300);

    //  Just past the timeout, the margin included: the timeout; just
    //  before: the deadline, never later than the timeout
    assert_int_equal (dsh_permission_ask_closes_at (now, now + 5300, 5000, &by_deadline), now + 5000);
    assert_false (by_deadline);
    closes = dsh_permission_ask_closes_at (now, now + 5100, 5000, &by_deadline);
    assert_true (by_deadline);
    assert_true (closes <= now + 5000 && closes < now + 5100);

    //  A deadline already here or gone leaves no time to ask
    assert_true (dsh_permission_ask_closes_at (now, now, 120000, &by_deadline) <= now);
    assert_true (by_deadline);
    assert_true (dsh_permission_ask_closes_at (now, now - 5000, 120000, &by_deadline) <= now);
    assert_true (by_deadline);
}

static void
test_setup_and_control (void **state)
{
    (void) state;
    zconfig_t *settings = zconfig_str_load ("approvals = \"inproc://test-permission-approvals\"\n");
    dsh_middleware_context_t context = { .name = "perm", .broker = "tcp://127.0.0.1:1" };
    dsh_stage_callbacks_t callbacks = { 0 };
    void *arg = NULL;
    char error [256] = "";
    assert_int_equal (dsh_permission_setup (settings, &context, &callbacks, &arg, error, sizeof error), 0);
    assert_non_null (callbacks.on_request);
    assert_non_null (callbacks.on_control);
    assert_non_null (callbacks.on_destroy);

    //  The endpoint is taken: a second stage cannot bind it, and says so
    dsh_stage_callbacks_t callbacks2 = { 0 };
    void *arg2 = NULL;
    assert_int_equal (dsh_permission_setup (settings, &context, &callbacks2, &arg2, error, sizeof error), -1);
    s_assert_contains (error, "approvals: cannot bind \"inproc://test-permission-approvals\"");
    zconfig_destroy (&settings);

    char *reason = NULL;
    json_t *reply = stage_control (&callbacks, "approvals", NULL, &reason, arg);
    assert_non_null (reply);
    assert_string_equal (json_string_value (json_object_get (reply, "endpoint")),
                         "inproc://test-permission-approvals");
    json_decref (reply);

    reply = stage_control (&callbacks, "pending", NULL, &reason, arg);
    assert_true (json_is_array (reply));
    assert_int_equal (json_array_size (reply), 0);
    json_decref (reply);

    json_t *args = json_pack ("{s:s}", "id", "deadbeef");
    reply = stage_control (&callbacks, "approve", args, &reason, arg);
    assert_null (reply);
    assert_non_null (reason);
    assert_string_equal (reason, "no pending request deadbeef");
    zstr_free (&reason);
    reply = stage_control (&callbacks, "deny", args, &reason, arg);
    assert_null (reply);
    assert_string_equal (reason, "no pending request deadbeef");
    zstr_free (&reason);
    json_decref (args);

    reply = stage_control (&callbacks, "approve", NULL, &reason, arg);
    assert_null (reply);
    s_assert_contains (reason, "approve needs");
    zstr_free (&reason);

    //  Unknown command: NULL and no error
    reply = stage_control (&callbacks, "frobnicate", NULL, &reason, arg);
    assert_null (reply);
    assert_null (reason);

    callbacks.on_destroy (arg);
}

static void
test_setup_refuses_bad_rules (void **state)
{
    (void) state;
    zconfig_t *settings = zconfig_str_load ("rule\n    tool = \"x\"\n");
    dsh_middleware_context_t context = { .name = "perm", .broker = NULL };
    dsh_stage_callbacks_t callbacks = { 0 };
    void *arg = NULL;
    char error [256] = "";
    assert_int_equal (dsh_permission_setup (settings, &context, &callbacks, &arg, error, sizeof error), -1);
    s_assert_contains (error, "rule 1: action is required");
    zconfig_destroy (&settings);
}

//  Rules on what a tool is: its hints, read with MCP's defaults when absent
static void
test_rules_on_hints (void **state)
{
    (void) state;
    dsh_permission_policy_t *policy = s_policy (
        "rule\n"
        "    read_only = false\n"
        "    action = \"ask\"\n"
        "rule\n"
        "    tool = \"mcp__*\"\n"
        "    destructive = true\n"
        "    open_world = true\n"
        "    agent = \"guest-*\"\n"
        "    action = \"deny\"\n");
    json_t *reader = json_pack ("{s:s, s:{s:b}}", "name", "read_file", "annotations", "readOnlyHint", 1);
    json_t *writer = json_pack ("{s:s, s:{s:b, s:b}}", "name", "write_file",
                                "annotations", "readOnlyHint", 0, "destructiveHint", 1);
    json_t *silent = json_pack ("{s:s}", "name", "mcp__fs__move_file");
    json_t *additive = json_pack ("{s:s, s:{s:b, s:b}}", "name", "mcp__fs__create_directory",
                                  "annotations", "destructiveHint", 0, "openWorldHint", 0);
    dsh_toolhints_t hints = s_hints (reader);
    assert_int_equal (dsh_permission_policy_decide (policy, "read_file", &hints, NULL), DSH_PERMISSION_ALLOW);
    hints = s_hints (writer);
    assert_int_equal (dsh_permission_policy_decide (policy, "write_file", &hints, NULL), DSH_PERMISSION_ASK);
    //  An entry that says nothing is not read-only, destructive, open-world
    hints = s_hints (silent);
    assert_false (hints.read_only);
    assert_true (hints.destructive);
    assert_true (hints.open_world);
    assert_false (hints.confined);
    assert_int_equal (dsh_permission_policy_decide (policy, "mcp__fs__move_file", &hints, "builder"),
                      DSH_PERMISSION_ASK);
    assert_int_equal (dsh_permission_policy_decide (policy, "mcp__fs__move_file", &hints, "guest-1"),
                      DSH_PERMISSION_DENY);
    //  Every condition of a rule must hold: not destructive, so only asked
    hints = s_hints (additive);
    assert_int_equal (dsh_permission_policy_decide (policy, "mcp__fs__create_directory", &hints, "guest-1"),
                      DSH_PERMISSION_ASK);
    //  An unknown tool (no entry) has every default
    assert_int_equal (dsh_permission_policy_decide (policy, "mcp__x", NULL, "guest-1"), DSH_PERMISSION_DENY);
    //  A hint that is not a boolean counts as absent
    json_t *odd = json_pack ("{s:s, s:{s:s}, s:s}", "name", "odd", "annotations", "readOnlyHint", "yes",
                             "confined", "yes");
    hints = s_hints (odd);
    assert_false (hints.read_only);
    assert_false (hints.confined);
    json_decref (odd);
    json_decref (reader);
    json_decref (writer);
    json_decref (silent);
    json_decref (additive);
    dsh_permission_policy_destroy (&policy);

    //  A policy of one hint rule: the rules on names still apply beside it
    policy = s_policy ("rule\n    read_only = true\n    action = \"deny\"\n"
                       "rule\n    tool = \"rm\"\n    action = \"deny\"\n"
                       "default = \"ask\"\n");
    dsh_toolhints_t read_only = { .read_only = true, .destructive = true, .open_world = true };
    dsh_toolhints_t writes = { .read_only = false, .destructive = true, .open_world = true };
    assert_int_equal (dsh_permission_policy_decide (policy, "cat", &read_only, NULL), DSH_PERMISSION_DENY);
    assert_int_equal (dsh_permission_policy_decide (policy, "rm", &writes, NULL), DSH_PERMISSION_DENY);
    assert_int_equal (dsh_permission_policy_decide (policy, "touch", &writes, NULL), DSH_PERMISSION_ASK);
    dsh_permission_policy_destroy (&policy);
}

static void
test_bad_hint_rules (void **state)
{
    (void) state;
    s_refused ("rule\n    read_only = \"yes\"\n    action = \"ask\"\n",
               "rule 1: read_only must be true or false, not \"yes\"");
    s_refused ("rule\n    tool = \"a\"\n    action = \"ask\"\n"
               "rule\n    destructive = \"\"\n    action = \"ask\"\n",
               "rule 2: destructive must be true or false, not \"\"");
    s_refused ("rule\n    open_world = 1\n    action = \"deny\"\n",
               "rule 1: open_world must be true or false, not \"1\"");
    s_refused ("rule\n    readOnly = true\n    action = \"deny\"\n",
               "rule 1: unknown setting \"readOnly\"");
    s_refused ("rule\n    read_only = false\n", "rule 1: action is required");
}

//  ---------------------------------------------------------------------
//  Grants

static void
test_grant_settings (void **state)
{
    (void) state;
    dsh_permission_policy_t *policy = s_policy ("");
    assert_true (dsh_permission_policy_grants (policy));
    assert_int_equal (dsh_permission_policy_grant_minutes (policy), 15);
    assert_int_equal (dsh_permission_policy_grant_max_minutes (policy), 1440);
    dsh_permission_policy_destroy (&policy);

    policy = s_policy ("grants = false\ngrant_minutes = 5\ngrant_max_minutes = 60\n");
    assert_false (dsh_permission_policy_grants (policy));
    assert_int_equal (dsh_permission_policy_grant_minutes (policy), 5);
    assert_int_equal (dsh_permission_policy_grant_max_minutes (policy), 60);
    dsh_permission_policy_destroy (&policy);

    //  A limit below the default length cuts the default to it
    policy = s_policy ("grant_max_minutes = 10\n");
    assert_int_equal (dsh_permission_policy_grant_minutes (policy), 10);
    dsh_permission_policy_destroy (&policy);

    s_refused ("grants = \"yes\"\n", "grants: \"yes\" is not true or false");
    s_refused ("grants = \"\"\n", "grants: \"\" is not true or false");
    s_refused ("grant_minutes = 0\n", "grant_minutes: \"0\" is not a whole number from 1 to 527040");
    s_refused ("grant_minutes = \"soon\"\n", "grant_minutes: \"soon\" is not a whole number");
    s_refused ("grant_max_minutes = -1\n", "grant_max_minutes: \"-1\" is not a whole number from 1 to 527040");
    s_refused ("grant_max_minutes = 600000\n", "grant_max_minutes: \"600000\" is not a whole number");
    s_refused ("grant_max_minutes = 20\ngrant_minutes = 30\n", "grant_minutes: 30 is more than grant_max_minutes (20)");
    s_refused ("grant_minute = 30\n", "unknown setting \"grant_minute\"");
}

static void
test_scope_names (void **state)
{
    (void) state;
    dsh_permission_scope_t scope = DSH_PERMISSION_SCOPE_ONCE;
    assert_int_equal (dsh_permission_scope_parse ("tool", &scope), 0);
    assert_int_equal (scope, DSH_PERMISSION_SCOPE_TOOL);
    assert_int_equal (dsh_permission_scope_parse ("arguments", &scope), 0);
    assert_int_equal (scope, DSH_PERMISSION_SCOPE_ARGUMENTS);
    assert_int_equal (dsh_permission_scope_parse ("once", &scope), 0);
    assert_int_equal (scope, DSH_PERMISSION_SCOPE_ONCE);
    assert_int_equal (dsh_permission_scope_parse ("forever", &scope), -1);
    assert_int_equal (dsh_permission_scope_parse (NULL, &scope), -1);
    assert_string_equal (dsh_permission_scope_name (DSH_PERMISSION_SCOPE_ARGUMENTS), "arguments");
}

#define S_DIGEST_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define S_DIGEST_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define S_DIGEST_C "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

static const dsh_permission_subject_t s_subject = {
    .stage = "perm", .agent = "coder", .tool = "write_file",
    .definition_digest = S_DIGEST_A, .arguments_digest = S_DIGEST_B, .chain_version = "0123456789abcdef"
};

//  A grant applies only to a call like the one it was made on, before it
//  expires: each part of the binding, changed alone, ends it.
static void
test_grant_applies (void **state)
{
    (void) state;
    const int64_t now = 1700000000000;
    dsh_permission_grant_t *tool = dsh_permission_grant_new ("0a1b2c3d", &s_subject, DSH_PERMISSION_SCOPE_TOOL,
                                                             now, now + 60000, "alice");
    dsh_permission_grant_t *arguments = dsh_permission_grant_new ("4e5f6a7b", &s_subject,
                                                                  DSH_PERMISSION_SCOPE_ARGUMENTS,
                                                                  now, now + 60000, "alice");
    assert_string_equal (dsh_permission_grant_id (tool), "0a1b2c3d");
    assert_string_equal (dsh_permission_grant_stage (tool), "perm");
    assert_string_equal (dsh_permission_grant_by (tool), "alice");
    assert_true (dsh_permission_grant_expires_ms (tool) == now + 60000);

    dsh_permission_subject_t call = s_subject;
    assert_true (dsh_permission_grant_applies (tool, &call, now));
    assert_true (dsh_permission_grant_applies (arguments, &call, now + 59999));

    //  Other arguments: the tool grant still applies, the arguments one not
    call.arguments_digest = S_DIGEST_C;
    assert_true (dsh_permission_grant_applies (tool, &call, now));
    assert_false (dsh_permission_grant_applies (arguments, &call, now));

    //  Every other part, changed alone, ends both
    const struct {
        size_t offset;
        const char *value;
    } changes [] = {
        { offsetof (dsh_permission_subject_t, stage), "perm2" },
        { offsetof (dsh_permission_subject_t, agent), "planner" },
        { offsetof (dsh_permission_subject_t, agent), "" },
        { offsetof (dsh_permission_subject_t, tool), "write_files" },
        { offsetof (dsh_permission_subject_t, definition_digest), S_DIGEST_C },
        { offsetof (dsh_permission_subject_t, chain_version), "fedcba9876543210" },
        { offsetof (dsh_permission_subject_t, chain_version), "" },
    };
    for (size_t index = 0; index < sizeof (changes) / sizeof (changes [0]); index++) {
        call = s_subject;
        *(const char **) ((char *) &call + changes [index].offset) = changes [index].value;
        if (dsh_permission_grant_applies (tool, &call, now) || dsh_permission_grant_applies (arguments, &call, now))
            fail_msg ("a grant applies with change %zu (\"%s\")", index, changes [index].value);
    }
    //  Expired: at its expiry and after
    call = s_subject;
    assert_false (dsh_permission_grant_applies (tool, &call, now + 60000));
    assert_false (dsh_permission_grant_applies (arguments, &call, now + 120000));

    //  A call with no agent matches a grant made for no agent
    dsh_permission_subject_t anonymous = s_subject;
    anonymous.agent = "";
    dsh_permission_grant_t *nobody = dsh_permission_grant_new ("00000000", &anonymous, DSH_PERMISSION_SCOPE_TOOL,
                                                               now, now + 1000, "bob");
    assert_true (dsh_permission_grant_applies (nobody, &anonymous, now));
    assert_false (dsh_permission_grant_applies (nobody, &s_subject, now));
    dsh_permission_grant_destroy (&nobody);
    dsh_permission_grant_destroy (&tool);
    dsh_permission_grant_destroy (&arguments);
    assert_null (tool);
    dsh_permission_grant_destroy (&tool);
}

//  The grant's map round-trips (shown as JSON); a bad one is refused with
//  a reason.
static void
test_grant_json (void **state)
{
    (void) state;
    dsh_permission_grant_t *grant = dsh_permission_grant_new ("0a1b2c3d", &s_subject,
                                                              DSH_PERMISSION_SCOPE_ARGUMENTS,
                                                              1000, 61000, "alice (by bob)");
    json_t *json = dsh_permission_grant_json (grant);
    json_t *expected = json_pack ("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:s}",
                                  "id", "0a1b2c3d", "stage", "perm", "agent", "coder", "tool", "write_file",
                                  "definitionDigest", S_DIGEST_A, "argumentsDigest", S_DIGEST_B,
                                  "chainVersion", "0123456789abcdef", "scope", "arguments",
                                  "createdMs", (json_int_t) 1000, "expiresMs", (json_int_t) 61000,
                                  "by", "alice (by bob)");
    assert_true (json_equal (json, expected));
    char error [256] = "";
    dsh_permission_grant_t *copy = s_grant_from_json (json, error, sizeof (error));
    assert_non_null (copy);
    json_t *again = dsh_permission_grant_json (copy);
    assert_true (json_equal (again, json));
    json_decref (again);
    dsh_permission_grant_t *dup = dsh_permission_grant_dup (copy);
    again = dsh_permission_grant_json (dup);
    assert_true (json_equal (again, json));
    json_decref (again);
    dsh_permission_grant_destroy (&dup);
    dsh_permission_grant_destroy (&copy);

    //  A tool grant has no argumentsDigest
    dsh_permission_grant_t *tool = dsh_permission_grant_new ("0a1b2c3e", &s_subject, DSH_PERMISSION_SCOPE_TOOL,
                                                             1000, 61000, "alice");
    json_t *tool_json = dsh_permission_grant_json (tool);
    assert_null (json_object_get (tool_json, "argumentsDigest"));
    assert_string_equal (json_string_value (json_object_get (tool_json, "scope")), "tool");
    json_decref (tool_json);
    dsh_permission_grant_destroy (&tool);

    const struct {
        const char *key;
        json_t *value;              //  NULL: removed
        const char *reason;
    } bad [] = {
        { "id", json_string ("0A1B2C3D"), "grant: id \"0A1B2C3D\" is not 8 hex digits" },
        { "id", NULL, "grant: id must be a non-empty string" },
        { "stage", json_string (""), "grant: stage must be a non-empty string" },
        { "agent", json_integer (1), "grant: agent must be a string" },
        { "scope", json_string ("once"), "grant 0a1b2c3d: scope \"once\" is not tool or arguments" },
        { "definitionDigest", json_string ("abc"), "grant 0a1b2c3d: definitionDigest is not 64 hex digits" },
        { "argumentsDigest", NULL, "grant 0a1b2c3d: argumentsDigest is not 64 hex digits" },
        { "expiresMs", json_integer (1000), "expiresMs the later" },
        { "createdMs", json_string ("1000"), "createdMs and expiresMs must be whole numbers" },
        { "by", NULL, "grant: by must be a string" },
    };
    for (size_t index = 0; index < sizeof (bad) / sizeof (bad [0]); index++) {
        json_t *broken = json_deep_copy (json);
        if (bad [index].value)
            json_object_set_new (broken, bad [index].key, bad [index].value);
        else
            json_object_del (broken, bad [index].key);
        *error = 0;
        assert_null (s_grant_from_json (broken, error, sizeof (error)));
        s_assert_contains (error, bad [index].reason);
        json_decref (broken);
    }
    json_t *tool_with_arguments = json_deep_copy (json);
    json_object_set_new (tool_with_arguments, "scope", json_string ("tool"));
    assert_null (s_grant_from_json (tool_with_arguments, error, sizeof (error)));
    s_assert_contains (error, "argumentsDigest is for scope arguments only");
    json_decref (tool_with_arguments);
    json_t *text = json_string ("x");
    assert_null (s_grant_from_json (text, error, sizeof (error)));
    assert_string_equal (error, "grant: must be an object");
    json_decref (text);
    json_decref (expected);
    json_decref (json);
    dsh_permission_grant_destroy (&grant);
}

//  The control commands on grants, with no call: grants, revoke, and
//  grants.load's merge (another stage's and expired grants left out, bad
//  entries skipped, a grant revoked a moment ago not brought back).
static void
test_grant_controls (void **state)
{
    (void) state;
    zconfig_t *settings = zconfig_str_load ("approvals = \"inproc://test-permission-grants\"\n");
    dsh_middleware_context_t context = { .name = "perm", .broker = NULL, .chain_version = "0123456789abcdef" };
    dsh_stage_callbacks_t callbacks = { 0 };
    void *arg = NULL;
    char error [256] = "";
    assert_int_equal (dsh_permission_setup (settings, &context, &callbacks, &arg, error, sizeof error), 0);
    zconfig_destroy (&settings);

    char *reason = NULL;
    json_t *reply = stage_control (&callbacks, "grants", NULL, &reason, arg);
    assert_true (json_is_array (reply));
    assert_int_equal (json_array_size (reply), 0);
    json_decref (reply);

    json_t *args = json_pack ("{s:s}", "id", "0a1b2c3d");
    assert_null (stage_control (&callbacks, "revoke", args, &reason, arg));
    assert_string_equal (reason, "no grant 0a1b2c3d");
    zstr_free (&reason);
    assert_null (stage_control (&callbacks, "revoke", NULL, &reason, arg));
    s_assert_contains (reason, "revoke needs");
    zstr_free (&reason);
    assert_null (stage_control (&callbacks, "grants.load", NULL, &reason, arg));
    s_assert_contains (reason, "grants.load needs");
    zstr_free (&reason);

    int64_t now = zclock_time ();
    dsh_permission_subject_t other = s_subject;
    other.stage = "perm2";
    dsh_permission_grant_t *live = dsh_permission_grant_new ("0a1b2c3d", &s_subject, DSH_PERMISSION_SCOPE_TOOL,
                                                             now, now + 600000, "alice");
    dsh_permission_grant_t *expired = dsh_permission_grant_new ("11111111", &s_subject, DSH_PERMISSION_SCOPE_TOOL,
                                                                now - 2000, now - 1000, "alice");
    dsh_permission_grant_t *elsewhere = dsh_permission_grant_new ("22222222", &other, DSH_PERMISSION_SCOPE_TOOL,
                                                                  now, now + 600000, "alice");
    json_t *load = json_pack ("{s:[o, o, o, s, {s:s}]}", "grants", dsh_permission_grant_json (live),
                              dsh_permission_grant_json (expired), dsh_permission_grant_json (elsewhere),
                              "not a grant", "id", "x");
    reply = stage_control (&callbacks, "grants.load", load, &reason, arg);
    assert_non_null (reply);
    assert_int_equal (json_integer_value (json_object_get (reply, "loaded")), 1);
    assert_int_equal (json_integer_value (json_object_get (reply, "skipped")), 2);
    json_decref (reply);

    reply = stage_control (&callbacks, "grants", NULL, &reason, arg);
    assert_int_equal (json_array_size (reply), 1);
    json_t *listed = dsh_permission_grant_json (live);
    assert_true (json_equal (json_array_get (reply, 0), listed));
    json_decref (listed);
    json_decref (reply);

    reply = stage_control (&callbacks, "revoke", args, &reason, arg);
    assert_non_null (reply);
    assert_string_equal (json_string_value (json_object_get (reply, "id")), "0a1b2c3d");
    assert_true (json_is_true (json_object_get (reply, "revoked")));
    json_decref (reply);

    //  A load that was on its way when the grant was revoked does not
    //  bring it back
    reply = stage_control (&callbacks, "grants.load", load, &reason, arg);
    assert_int_equal (json_integer_value (json_object_get (reply, "loaded")), 0);
    json_decref (reply);
    reply = stage_control (&callbacks, "grants", NULL, &reason, arg);
    assert_int_equal (json_array_size (reply), 0);
    json_decref (reply);
    assert_null (stage_control (&callbacks, "revoke", args, &reason, arg));
    assert_string_equal (reason, "no grant 0a1b2c3d");
    zstr_free (&reason);

    json_decref (load);
    json_decref (args);
    dsh_permission_grant_destroy (&live);
    dsh_permission_grant_destroy (&expired);
    dsh_permission_grant_destroy (&elsewhere);
    callbacks.on_destroy (arg);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_defaults),
        cmocka_unit_test (test_settings_parsed),
        cmocka_unit_test (test_bad_settings),
        cmocka_unit_test (test_deny_beats_ask_beats_allow),
        cmocka_unit_test (test_globs_on_tool_and_agent),
        cmocka_unit_test (test_default_action),
        cmocka_unit_test (test_names),
        cmocka_unit_test (test_ask_closes_before_deadline),
        cmocka_unit_test (test_setup_and_control),
        cmocka_unit_test (test_setup_refuses_bad_rules),
        cmocka_unit_test (test_rules_on_hints),
        cmocka_unit_test (test_bad_hint_rules),
        cmocka_unit_test (test_grant_settings),
        cmocka_unit_test (test_scope_names),
        cmocka_unit_test (test_grant_applies),
        cmocka_unit_test (test_grant_json),
        cmocka_unit_test (test_grant_controls),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
