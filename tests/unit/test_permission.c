/*  =========================================================================
    test_permission - dsh_permission: rules from ZPL, deny > ask > allow,
    globs on tool and agent, the default action, when an ask closes (its
    timeout or the call's deadline), and the stage's control commands that
    need no call (approvals, pending, approve/deny unknown)
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

static void
s_assert_contains (const char *text, const char *part)
{
    if (!strstr (text, part))
        fail_msg ("\"%s\" does not contain \"%s\"", text, part);
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
    json_t *reply = callbacks.on_control (NULL, "approvals", NULL, &reason, arg);
    assert_non_null (reply);
    assert_string_equal (json_string_value (json_object_get (reply, "endpoint")),
                         "inproc://test-permission-approvals");
    json_decref (reply);

    reply = callbacks.on_control (NULL, "pending", NULL, &reason, arg);
    assert_true (json_is_array (reply));
    assert_int_equal (json_array_size (reply), 0);
    json_decref (reply);

    json_t *args = json_pack ("{s:s}", "id", "deadbeef");
    reply = callbacks.on_control (NULL, "approve", args, &reason, arg);
    assert_null (reply);
    assert_non_null (reason);
    assert_string_equal (reason, "no pending request deadbeef");
    zstr_free (&reason);
    reply = callbacks.on_control (NULL, "deny", args, &reason, arg);
    assert_null (reply);
    assert_string_equal (reason, "no pending request deadbeef");
    zstr_free (&reason);
    json_decref (args);

    reply = callbacks.on_control (NULL, "approve", NULL, &reason, arg);
    assert_null (reply);
    s_assert_contains (reason, "approve needs");
    zstr_free (&reason);

    //  Unknown command: NULL and no error
    reply = callbacks.on_control (NULL, "frobnicate", NULL, &reason, arg);
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
    dsh_toolhints_t hints = dsh_toolhints_from_json (reader);
    assert_int_equal (dsh_permission_policy_decide (policy, "read_file", &hints, NULL), DSH_PERMISSION_ALLOW);
    hints = dsh_toolhints_from_json (writer);
    assert_int_equal (dsh_permission_policy_decide (policy, "write_file", &hints, NULL), DSH_PERMISSION_ASK);
    //  An entry that says nothing is not read-only, destructive, open-world
    hints = dsh_toolhints_from_json (silent);
    assert_false (hints.read_only);
    assert_true (hints.destructive);
    assert_true (hints.open_world);
    assert_false (hints.confined);
    assert_int_equal (dsh_permission_policy_decide (policy, "mcp__fs__move_file", &hints, "builder"),
                      DSH_PERMISSION_ASK);
    assert_int_equal (dsh_permission_policy_decide (policy, "mcp__fs__move_file", &hints, "guest-1"),
                      DSH_PERMISSION_DENY);
    //  Every condition of a rule must hold: not destructive, so only asked
    hints = dsh_toolhints_from_json (additive);
    assert_int_equal (dsh_permission_policy_decide (policy, "mcp__fs__create_directory", &hints, "guest-1"),
                      DSH_PERMISSION_ASK);
    //  An unknown tool (no entry) has every default
    assert_int_equal (dsh_permission_policy_decide (policy, "mcp__x", NULL, "guest-1"), DSH_PERMISSION_DENY);
    //  A hint that is not a boolean counts as absent
    json_t *odd = json_pack ("{s:s, s:{s:s}, s:s}", "name", "odd", "annotations", "readOnlyHint", "yes",
                             "confined", "yes");
    hints = dsh_toolhints_from_json (odd);
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
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
