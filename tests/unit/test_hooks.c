/*  =========================================================================
    test_hooks - the hooks middleware: matching, reading a hook's answer,
    merging answers, the event on stdin; and the stage itself, run against
    a fake hub (a DEALER feed and a ROUTER drain) with real hook processes
    written to a scratch directory.
    =========================================================================
*/

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dsh_doc.h"
#include "dsh_hooks.h"
#include "dsh_json.h"
#include "dsh_proto.h"

//  ---------------------------------------------------------------------
//  Pure functions

static void
test_match (void **state)
{
    (void) state;
    assert_true (dsh_hooks_match ("*", "anything"));
    assert_true (dsh_hooks_match ("", "anything"));
    assert_true (dsh_hooks_match (NULL, "anything"));
    assert_true (dsh_hooks_match ("Edit", "Edit"));
    assert_false (dsh_hooks_match ("Edit", "Write"));
    assert_true (dsh_hooks_match ("Edit|Write", "Edit"));
    assert_true (dsh_hooks_match ("Edit|Write", "Write"));
    assert_false (dsh_hooks_match ("Edit|Write", "NotEdit"));
    assert_false (dsh_hooks_match ("Edit|Write", "EditX"));
    assert_true (dsh_hooks_match ("read_.*", "read_file"));
    assert_false (dsh_hooks_match ("read_.*", "write_file"));
    assert_true (dsh_hooks_match ("mcp__.*__write", "mcp__fs__write"));
    assert_false (dsh_hooks_match ("Edit", NULL));
    //  A bad regex matches only by its exact text
    assert_false (dsh_hooks_matcher_valid ("(unclosed"));
    assert_false (dsh_hooks_match ("(unclosed", "unclosed"));
    assert_true (dsh_hooks_matcher_valid ("Edit|Write"));
    assert_true (dsh_hooks_matcher_valid ("*"));
}

static void
test_event_names (void **state)
{
    (void) state;
    dsh_hooks_event_t event;
    assert_int_equal (dsh_hooks_event_parse ("PreToolUse", &event), 0);
    assert_int_equal (event, DSH_HOOKS_PRE_TOOL_USE);
    assert_int_equal (dsh_hooks_event_parse ("PostToolUse", &event), 0);
    assert_int_equal (event, DSH_HOOKS_POST_TOOL_USE);
    assert_int_equal (dsh_hooks_event_parse ("pretooluse", &event), -1);
    assert_int_equal (dsh_hooks_event_parse (NULL, &event), -1);
    assert_string_equal (dsh_hooks_event_name (DSH_HOOKS_PRE_TOOL_USE), "PreToolUse");
    assert_string_equal (dsh_hooks_event_name (DSH_HOOKS_POST_TOOL_USE), "PostToolUse");
}

static dsh_hooks_decision_t *
s_parse (dsh_hooks_event_t event, int exit_code, const char *output, const char *errors)
{
    return dsh_hooks_decision_parse (event, exit_code, output, output? strlen (output): 0,
                                     errors, errors? strlen (errors): 0);
}

static void
test_parse_specific_output (void **state)
{
    (void) state;
    dsh_hooks_decision_t *decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0,
        "{\"hookSpecificOutput\": {\"hookEventName\": \"PreToolUse\", \"permissionDecision\": \"deny\","
        " \"permissionDecisionReason\": \"no writes today\"}}\n", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_DENY);
    assert_string_equal (decision->reason, "no writes today");
    assert_null (decision->updated_input);
    assert_null (decision->problem);
    dsh_hooks_decision_destroy (&decision);
    assert_null (decision);
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0,
        "{\"hookSpecificOutput\": {\"permissionDecision\": \"allow\", \"updatedInput\": {\"a\": 1},"
        " \"additionalContext\": \"be careful\"}}", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_ALLOW);
    assert_non_null (decision->updated_input);
    assert_int_equal (json_integer_value (json_object_get (decision->updated_input, "a")), 1);
    assert_string_equal (decision->additional_context, "be careful");
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0,
        "{\"hookSpecificOutput\": {\"permissionDecision\": \"ask\", \"permissionDecisionReason\": \"sure?\"}}", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_ASK);
    assert_string_equal (decision->reason, "sure?");
    dsh_hooks_decision_destroy (&decision);

    //  An updatedInput that is not an object is ignored
    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0,
        "{\"hookSpecificOutput\": {\"permissionDecision\": \"allow\", \"updatedInput\": [1]}}", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_ALLOW);
    assert_null (decision->updated_input);
    dsh_hooks_decision_destroy (&decision);
}

static void
test_parse_top_level_and_legacy (void **state)
{
    (void) state;
    dsh_hooks_decision_t *decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0,
        "{\"permissionDecision\": \"deny\", \"permissionDecisionReason\": \"top\"}", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_DENY);
    assert_string_equal (decision->reason, "top");
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0, "{\"decision\": \"block\", \"reason\": \"legacy\"}", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_DENY);
    assert_string_equal (decision->reason, "legacy");
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0, "{\"decision\": \"approve\", \"reason\": \"fine\"}", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_ALLOW);
    assert_string_equal (decision->reason, "fine");
    dsh_hooks_decision_destroy (&decision);

    //  hookSpecificOutput wins over the legacy field
    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0,
        "{\"decision\": \"approve\", \"hookSpecificOutput\": {\"permissionDecision\": \"deny\"}}", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_DENY);
    assert_null (decision->reason);
    dsh_hooks_decision_destroy (&decision);

    //  PostToolUse: block and additionalContext; permission fields mean nothing there
    decision = s_parse (DSH_HOOKS_POST_TOOL_USE, 0, "{\"decision\": \"block\", \"reason\": \"bad output\"}", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_DENY);
    assert_string_equal (decision->reason, "bad output");
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_POST_TOOL_USE, 0,
        "{\"hookSpecificOutput\": {\"hookEventName\": \"PostToolUse\", \"additionalContext\": \"checked\"}}", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_NO_DECISION);
    assert_string_equal (decision->additional_context, "checked");
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_POST_TOOL_USE, 0, "{\"permissionDecision\": \"deny\"}", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_NO_DECISION);
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_POST_TOOL_USE, 0, "{\"decision\": \"approve\"}", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_NO_DECISION);
    dsh_hooks_decision_destroy (&decision);
}

static void
test_parse_no_or_bad_output (void **state)
{
    (void) state;
    dsh_hooks_decision_t *decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0, "", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_NO_DECISION);
    assert_null (decision->problem);
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0, " \n\t\n", "some log");
    assert_int_equal (decision->verdict, DSH_HOOKS_NO_DECISION);
    assert_null (decision->problem);
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0, NULL, NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_NO_DECISION);
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0, "{\"permissionDecision\": \"deny\"", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_NO_DECISION);
    assert_non_null (decision->problem);
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0, "[\"deny\"]", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_NO_DECISION);
    assert_non_null (decision->problem);
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 0, "{\"permissionDecision\": \"maybe\"}", NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_NO_DECISION);
    assert_non_null (strstr (decision->problem, "maybe"));
    dsh_hooks_decision_destroy (&decision);

    //  A NUL byte in the output ends it
    decision = dsh_hooks_decision_parse (DSH_HOOKS_PRE_TOOL_USE, 0, "{}\0garbage", 10, NULL, 0);
    assert_int_equal (decision->verdict, DSH_HOOKS_NO_DECISION);
    assert_null (decision->problem);
    dsh_hooks_decision_destroy (&decision);
}

static void
test_parse_exit_codes (void **state)
{
    (void) state;
    dsh_hooks_decision_t *decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 2,
        "{\"permissionDecision\": \"allow\"}", "  blocked by exit code\n");
    assert_int_equal (decision->verdict, DSH_HOOKS_DENY);
    assert_string_equal (decision->reason, "blocked by exit code");
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 2, NULL, "");
    assert_int_equal (decision->verdict, DSH_HOOKS_DENY);
    assert_non_null (decision->reason);
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_POST_TOOL_USE, 2, NULL, "nope");
    assert_int_equal (decision->verdict, DSH_HOOKS_DENY);
    assert_string_equal (decision->reason, "nope");
    dsh_hooks_decision_destroy (&decision);

    //  Any other code: a non-blocking error, whatever stdout says
    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 1, "{\"permissionDecision\": \"deny\"}", "oops");
    assert_int_equal (decision->verdict, DSH_HOOKS_NO_DECISION);
    assert_non_null (strstr (decision->problem, "exited with code 1"));
    assert_non_null (strstr (decision->problem, "oops"));
    dsh_hooks_decision_destroy (&decision);

    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 128 + 9, NULL, NULL);
    assert_int_equal (decision->verdict, DSH_HOOKS_NO_DECISION);
    assert_non_null (decision->problem);
    dsh_hooks_decision_destroy (&decision);

    //  Reasons become valid UTF-8
    decision = s_parse (DSH_HOOKS_PRE_TOOL_USE, 2, NULL, "bad \xff byte");
    assert_string_equal (decision->reason, "bad ? byte");
    dsh_hooks_decision_destroy (&decision);
}

static dsh_hooks_decision_t *
s_decision (dsh_hooks_verdict_t verdict, const char *reason, const char *updated, const char *context)
{
    dsh_hooks_decision_t *decision = dsh_hooks_decision_new ();
    decision->verdict = verdict;
    decision->reason = reason? strdup (reason): NULL;
    decision->updated_input = updated? json_loads (updated, 0, NULL): NULL;
    decision->additional_context = context? strdup (context): NULL;
    return decision;
}

static void
s_destroy_all (dsh_hooks_decision_t **decisions, size_t count)
{
    for (size_t index = 0; index < count; index++)
        dsh_hooks_decision_destroy (&decisions [index]);
}

static void
test_merge (void **state)
{
    (void) state;
    dsh_hooks_decision_t *merged = dsh_hooks_decision_merge (NULL, 0);
    assert_int_equal (merged->verdict, DSH_HOOKS_NO_DECISION);
    dsh_hooks_decision_destroy (&merged);

    //  deny > ask > allow, with every denying reason
    dsh_hooks_decision_t *three [] = {
        s_decision (DSH_HOOKS_ALLOW, "ok", "{\"x\": 1}", "one"),
        s_decision (DSH_HOOKS_DENY, "first", NULL, NULL),
        s_decision (DSH_HOOKS_ASK, "hmm", NULL, "two"),
    };
    merged = dsh_hooks_decision_merge (three, 3);
    assert_int_equal (merged->verdict, DSH_HOOKS_DENY);
    assert_string_equal (merged->reason, "first");
    assert_null (merged->updated_input);
    assert_string_equal (merged->additional_context, "one\ntwo");
    dsh_hooks_decision_destroy (&merged);
    dsh_hooks_decision_destroy (&three [1]);
    three [1] = s_decision (DSH_HOOKS_DENY, "second", NULL, NULL);
    dsh_hooks_decision_t *deny_twice [] = { s_decision (DSH_HOOKS_DENY, "first", NULL, NULL), three [1] };
    merged = dsh_hooks_decision_merge (deny_twice, 2);
    assert_string_equal (merged->reason, "first; second");
    dsh_hooks_decision_destroy (&merged);
    dsh_hooks_decision_destroy (&deny_twice [0]);

    //  ask > allow
    dsh_hooks_decision_destroy (&three [1]);
    merged = dsh_hooks_decision_merge (three, 3);
    assert_int_equal (merged->verdict, DSH_HOOKS_ASK);
    assert_string_equal (merged->reason, "hmm");
    assert_null (merged->updated_input);
    dsh_hooks_decision_destroy (&merged);
    s_destroy_all (three, 3);

    //  Allow: the last updatedInput in config order wins; a hook with no
    //  opinion counts as allowing
    dsh_hooks_decision_t *allow [] = {
        s_decision (DSH_HOOKS_ALLOW, NULL, "{\"v\": \"first\"}", NULL),
        s_decision (DSH_HOOKS_NO_DECISION, NULL, NULL, "ctx"),
        s_decision (DSH_HOOKS_ALLOW, NULL, "{\"v\": \"last\"}", NULL),
        s_decision (DSH_HOOKS_ALLOW, NULL, NULL, NULL),
    };
    merged = dsh_hooks_decision_merge (allow, 4);
    assert_int_equal (merged->verdict, DSH_HOOKS_ALLOW);
    assert_non_null (merged->updated_input);
    assert_string_equal (json_string_value (json_object_get (merged->updated_input, "v")), "last");
    assert_string_equal (merged->additional_context, "ctx");
    dsh_hooks_decision_destroy (&merged);
    s_destroy_all (allow, 4);

    dsh_hooks_decision_t *silent [] = { s_decision (DSH_HOOKS_NO_DECISION, NULL, "{\"v\": 2}", NULL), NULL };
    merged = dsh_hooks_decision_merge (silent, 2);
    assert_int_equal (merged->verdict, DSH_HOOKS_NO_DECISION);
    assert_int_equal (json_integer_value (json_object_get (merged->updated_input, "v")), 2);
    dsh_hooks_decision_destroy (&merged);
    s_destroy_all (silent, 1);
}

static void
test_event_json (void **state)
{
    (void) state;
    json_t *input = json_pack ("{s:s}", "path", "a.txt");
    json_t *event = dsh_hooks_event_json (DSH_HOOKS_PRE_TOOL_USE, "agent-1", "/srv", "read_file", input, NULL);
    assert_string_equal (json_string_value (json_object_get (event, "hook_event_name")), "PreToolUse");
    assert_string_equal (json_string_value (json_object_get (event, "session_id")), "agent-1");
    assert_string_equal (json_string_value (json_object_get (event, "cwd")), "/srv");
    assert_string_equal (json_string_value (json_object_get (event, "tool_name")), "read_file");
    assert_true (json_equal (json_object_get (event, "tool_input"), input));
    assert_null (json_object_get (event, "tool_response"));
    json_decref (event);

    json_t *response = json_pack ("{s:[], s:b}", "content", "isError", 0);
    event = dsh_hooks_event_json (DSH_HOOKS_POST_TOOL_USE, NULL, NULL, "read_file", NULL, response);
    assert_string_equal (json_string_value (json_object_get (event, "hook_event_name")), "PostToolUse");
    assert_string_equal (json_string_value (json_object_get (event, "session_id")), "");
    assert_true (json_is_object (json_object_get (event, "tool_input")));
    assert_int_equal (json_object_size (json_object_get (event, "tool_input")), 0);
    assert_true (json_equal (json_object_get (event, "tool_response"), response));
    json_decref (event);

    event = dsh_hooks_event_json (DSH_HOOKS_POST_TOOL_USE, "", "", "x", NULL, NULL);
    assert_true (json_is_null (json_object_get (event, "tool_response")));
    json_decref (event);
    json_decref (response);
    json_decref (input);
}

static void
test_setup_settings (void **state)
{
    (void) state;
    const char *bad [] = {
        "stage\n    hook\n        event = \"Sometimes\"\n        command = \"true\"\n",
        "stage\n    hook\n        event = \"PreToolUse\"\n",
        "stage\n    hook\n        event = \"PreToolUse\"\n        command = \"true\"\n        matcher = \"(\"\n",
        "stage\n    hook\n        event = \"PreToolUse\"\n        command = \"true\"\n        timeout_ms = \"0\"\n",
        "stage\n    hook\n        event = \"PreToolUse\"\n        command = \"true\"\n        timeout_ms = \"x\"\n",
        "stage\n    hook\n        event = \"PreToolUse\"\n        command = \"true\"\n        comand = \"x\"\n",
    };
    for (size_t index = 0; index < sizeof bad / sizeof bad [0]; index++) {
        zconfig_t *settings = zconfig_str_load (bad [index]);
        assert_non_null (settings);
        dsh_stage_callbacks_t callbacks;
        void *arg = NULL;
        char error [256] = "";
        assert_int_equal (dsh_hooks_setup (zconfig_locate (settings, "stage"), NULL, &callbacks, &arg,
                                           error, sizeof error), -1);
        assert_non_null (strstr (error, "hook 1"));
        assert_null (arg);
        zconfig_destroy (&settings);
    }
    //  The stage's own settings
    const char *bad_stage [][2] = {
        { "stage\n    max_processes = \"0\"\n", "max_processes" },
        { "stage\n    queue_calls = \"many\"\n", "queue_calls" },
        { "stage\n    queue_bytes = \"-1\"\n", "queue_bytes" },
        { "stage\n    typed_input = \"ignore\"\n", "typed_input: \"ignore\" is not render or refuse" },
        { "stage\n    max_procs = \"4\"\n", "unknown setting \"max_procs\"" },
    };
    for (size_t index = 0; index < sizeof bad_stage / sizeof bad_stage [0]; index++) {
        zconfig_t *settings = zconfig_str_load (bad_stage [index][0]);
        assert_non_null (settings);
        dsh_stage_callbacks_t callbacks;
        void *arg = NULL;
        char error [256] = "";
        assert_int_equal (dsh_hooks_setup (zconfig_locate (settings, "stage"), NULL, &callbacks, &arg,
                                           error, sizeof error), -1);
        assert_non_null (strstr (error, bad_stage [index][1]));
        assert_null (arg);
        zconfig_destroy (&settings);
    }
    zconfig_t *settings = zconfig_str_load ("stage\n    name = \"hooks\"\n    kind = \"hooks\"\n"
                                            "    timeout_ms = 5000\n    max_processes = 2\n    queue_calls = 0\n"
                                            "    queue_calls_per_caller = 1\n    queue_bytes = 1024\n"
                                            "    typed_input = \"refuse\"\n");
    dsh_stage_callbacks_t callbacks;
    void *arg = NULL;
    char error [256];
    assert_int_equal (dsh_hooks_setup (zconfig_locate (settings, "stage"), NULL, &callbacks, &arg,
                                       error, sizeof error), 0);
    assert_non_null (callbacks.on_cancel);
    callbacks.on_destroy (arg);
    zconfig_destroy (&settings);
    assert_int_equal (dsh_hooks_setup (NULL, NULL, &callbacks, &arg, error, sizeof error), 0);
    assert_non_null (callbacks.on_request);
    assert_non_null (callbacks.on_result);
    callbacks.on_destroy (arg);
}

//  ---------------------------------------------------------------------
//  The stage against a fake hub

typedef struct {
    char dir [64];
    zsock_t *feed;              //  DEALER: calls go down, answers come up
    zsock_t *drain;             //  ROUTER: passed calls arrive, results go up
    dsh_stage_t *stage;
} hub_t;

static int
s_remove_entry (const char *path, const struct stat *info, int type, struct FTW *walk)
{
    (void) info; (void) type; (void) walk;
    return remove (path);
}

static void
s_script (hub_t *hub, const char *name, const char *body)
{
    char path [128];
    snprintf (path, sizeof path, "%s/%s", hub->dir, name);
    FILE *file = fopen (path, "w");
    assert_non_null (file);
    fprintf (file, "#!/bin/sh\n%s\n", body);
    assert_int_equal (fclose (file), 0);
    assert_int_equal (chmod (path, 0700), 0);
}

//  Starts a hooks stage with the ZPL hook sections in hooks ("%s" is the
//  scratch directory).
static void
s_hub_start (hub_t *hub, const char *hooks)
{
    static int counter = 0;
    char feed [64], drain [64];
    snprintf (feed, sizeof feed, "inproc://test-hooks-feed-%d", counter);
    snprintf (drain, sizeof drain, "inproc://test-hooks-drain-%d", counter++);
    hub->feed = zsock_new (ZMQ_DEALER);
    hub->drain = zsock_new (ZMQ_ROUTER);
    assert_int_equal (zsock_bind (hub->feed, "%s", feed), 0);
    assert_int_equal (zsock_bind (hub->drain, "%s", drain), 0);
    char *text = zsys_sprintf (hooks, hub->dir, hub->dir, hub->dir);
    char *zpl = zsys_sprintf ("stage\n%s", text);
    zconfig_t *settings = zconfig_str_load (zpl);
    assert_non_null (settings);
    dsh_stage_callbacks_t callbacks;
    void *arg = NULL;
    char error [256] = "";
    dsh_middleware_context_t context = { "hooks", NULL, NULL };
    int rc = dsh_hooks_setup (zconfig_locate (settings, "stage"), &context, &callbacks, &arg, error, sizeof error);
    if (rc)
        fprintf (stderr, "setup: %s\n", error);
    assert_int_equal (rc, 0);
    hub->stage = dsh_stage_new ("hooks", &callbacks, arg);
    assert_non_null (hub->stage);
    assert_int_equal (dsh_stage_connect (hub->stage, feed, drain), 0);
    zconfig_destroy (&settings);
    zstr_free (&zpl);
    zstr_free (&text);
}

static int
s_hub_setup (void **state)
{
    hub_t *hub = (hub_t *) calloc (1, sizeof (hub_t));
    assert_non_null (hub);
    strcpy (hub->dir, "/tmp/test_hooks.XXXXXX");
    assert_non_null (mkdtemp (hub->dir));
    s_script (hub, "block.sh", "cat > /dev/null\necho \"blocked by exit code\" >&2\nexit 2");
    s_script (hub, "rewrite.sh", "cat > /dev/null\nprintf '%s\\n' '{\"hookSpecificOutput\":{\"permissionDecision\":"
              "\"allow\",\"updatedInput\":{\"message\":\"rewritten by hook\"},\"additionalContext\":\"noted\"}}'");
    s_script (hub, "ask.sh", "cat > /dev/null\necho '{\"permissionDecision\":\"ask\",\"permissionDecisionReason\":\"really?\"}'");
    s_script (hub, "fail.sh", "cat > /dev/null\necho broken >&2\nexit 1");
    s_script (hub, "slow.sh", "sleep 30");
    s_script (hub, "record.sh", "cat > \"$(dirname \"$0\")/event.json\"");
    s_script (hub, "post-context.sh", "cat > /dev/null\necho '{\"hookSpecificOutput\":{\"hookEventName\":"
              "\"PostToolUse\",\"additionalContext\":\"checked by post hook\"}}'");
    s_script (hub, "post-block.sh", "cat > /dev/null\necho '{\"decision\":\"block\",\"reason\":\"leaks a secret\"}'");
    //  Holds every hook at a gate the test opens (the file "release"); each
    //  one writes how many run at once as it starts
    s_script (hub, "gate.sh", "d=$(dirname \"$0\")\ncat > /dev/null\ntouch \"$d/running/$$\"\n"
              "ls \"$d/running\" | wc -l >> \"$d/counts\"\n"
              "while [ ! -e \"$d/release\" ]; do sleep 0.02; done\nrm -f \"$d/running/$$\"");
    //  A guard that allows only a plain path under scratch/, and records
    //  what it was shown
    s_script (hub, "guard.sh", "d=$(dirname \"$0\")\nevent=$(cat)\nprintf '%s' \"$event\" > \"$d/event.json\"\n"
              "case \"$event\" in\n    *'\"tool_input\":{\"path\":\"scratch/'*) exit 0 ;;\nesac\n"
              "echo 'only scratch/ may be touched' >&2\nexit 2");
    //  Allows, giving back as updatedInput the tool_input it was shown
    s_script (hub, "echo-input.sh", "input=$(sed 's/.*\"tool_input\":\\(.*\\)}$/\\1/')\n"
              "printf '{\"hookSpecificOutput\":{\"permissionDecision\":\"allow\",\"additionalContext\":\"echoed\","
              "\"updatedInput\":%s}}\\n' \"$input\"");
    s_script (hub, "map-rewrite.sh", "cat > /dev/null\necho '{\"permissionDecision\":\"allow\","
              "\"updatedInput\":{\"$map\":[[\"path\",\"scratch/d\"]]}}'");
    s_script (hub, "bin-rewrite.sh", "cat > /dev/null\necho '{\"permissionDecision\":\"allow\","
              "\"updatedInput\":{\"path\":\"scratch/e\",\"data\":{\"$bin\":\"AAE=\"}}}'");
    char running [96];
    snprintf (running, sizeof running, "%s/running", hub->dir);
    assert_int_equal (mkdir (running, 0700), 0);
    *state = hub;
    return 0;
}

static int
s_hub_teardown (void **state)
{
    hub_t *hub = (hub_t *) *state;
    dsh_stage_destroy (&hub->stage);
    zsock_destroy (&hub->feed);
    zsock_destroy (&hub->drain);
    int rc = nftw (hub->dir, s_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free (hub);
    return rc;
}

static zframe_t *
s_msgpack_frame (const char *json_text)
{
    msgpack_sbuffer sbuf;
    char error [128];
    assert_int_equal (dsh_json_text_to_msgpack (json_text, &sbuf, error, sizeof error), 0);
    zframe_t *frame = zframe_new (sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    return frame;
}

//  The frame's msgpack in Typed JSON (plain JSON for a plain value).
static json_t *
s_frame_json (zframe_t *frame)
{
    char error [128];
    dsh_doc_t *doc = dsh_doc_new (zframe_data (frame), zframe_size (frame), error, sizeof error);
    assert_non_null (doc);
    json_t *json = dsh_json_view (dsh_doc_root (doc));
    dsh_doc_destroy (&doc);
    return json;
}

//  A chain token is 8 bytes: the test's names, padded with '_'.
static void
s_token8 (const char *token, char padded [9])
{
    snprintf (padded, 9, "%-8.8s", token);
    for (size_t index = 0; index < 8; index++)
        if (padded [index] == ' ')
            padded [index] = '_';
}

//  Sends a call for tool from agent down the feed, with chain token token
//  and budget_ms to its deadline (0: none).
static void
s_call_as (hub_t *hub, const char *token, const char *tool, const char *arguments, const char *agent,
           uint64_t budget_ms)
{
    char padded [9];
    s_token8 (token, padded);
    char *body = zsys_sprintf ("{\"callId\": \"%s\", \"name\": \"%s\", \"arguments\": %s, \"agent\": \"%s\"}",
                               token, tool, arguments, agent);
    zmsg_t *msg = zmsg_new ();
    zmsg_addmem (msg, padded, 8);
    zmsg_addstr (msg, "");
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, DSH_CALL);
    zframe_t *frame = s_msgpack_frame (body);
    zmsg_append (msg, &frame);
    zmsg_addmem (msg, NULL, 0);
    if (budget_ms) {
        byte budget [8];
        for (size_t index = 0; index < 8; index++)
            budget [index] = (byte) (budget_ms >> (8 * (7 - index)));
        zmsg_addmem (msg, budget, 8);
    }
    assert_int_equal (zmsg_send (&msg, hub->feed), 0);
    zstr_free (&body);
}

//  Sends a call for tool from agent-7 whose arguments are size bytes of
//  msgpack, any value msgpack can hold.
static void
s_call_packed (hub_t *hub, const char *token, const char *tool, const char *arguments, size_t size)
{
    char padded [9];
    s_token8 (token, padded);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    const char *fields [] = { "callId", token, "name", tool, "agent", "agent-7" };
    msgpack_pack_map (&pk, 4);
    for (size_t index = 0; index < 6; index++) {
        msgpack_pack_str (&pk, strlen (fields [index]));
        msgpack_pack_str_body (&pk, fields [index], strlen (fields [index]));
    }
    msgpack_pack_str (&pk, 9);
    msgpack_pack_str_body (&pk, "arguments", 9);
    msgpack_sbuffer_write (&sbuf, arguments, size);
    zmsg_t *msg = zmsg_new ();
    zmsg_addmem (msg, padded, 8);
    zmsg_addstr (msg, "");
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, DSH_CALL);
    zmsg_addmem (msg, sbuf.data, sbuf.size);
    zmsg_addmem (msg, NULL, 0);
    assert_int_equal (zmsg_send (&msg, hub->feed), 0);
    msgpack_sbuffer_destroy (&sbuf);
}

//  Sends a call for tool down the feed, with chain token token.
static void
s_call (hub_t *hub, const char *token, const char *tool, const char *arguments)
{
    s_call_as (hub, token, tool, arguments, "agent-7", 0);
}

//  The caller cancels the call with chain token token.
static void
s_cancel (hub_t *hub, const char *token)
{
    char padded [9];
    s_token8 (token, padded);
    zmsg_t *msg = zmsg_new ();
    zmsg_addmem (msg, padded, 8);
    zmsg_addstr (msg, "");
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, DSH_CANCEL);
    assert_int_equal (zmsg_send (&msg, hub->feed), 0);
}

static zmsg_t *
s_recv (zsock_t *sock, int timeout_ms)
{
    zpoller_t *poller = zpoller_new (sock, NULL);
    void *ready = zpoller_wait (poller, timeout_ms);
    zpoller_destroy (&poller);
    return ready? zmsg_recv (sock): NULL;
}

//  An answer that came up the feed: [token] "" DSH1 RESULT BODY.
static json_t *
s_answer (hub_t *hub, const char *token, int timeout_ms)
{
    zmsg_t *msg = s_recv (hub->feed, timeout_ms);
    assert_non_null (msg);
    assert_int_equal (zmsg_size (msg), 5);
    char padded [9];
    s_token8 (token, padded);
    char *first = zmsg_popstr (msg);
    assert_string_equal (first, padded);
    zstr_free (&first);
    zframe_t *body = zmsg_last (msg);
    json_t *result = s_frame_json (body);
    zmsg_destroy (&msg);
    return result;
}

//  The next answer that came up the feed, whichever call it is for: its
//  result; token gets the call's chain token (trailing '_' removed).
static json_t *
s_answer_any (hub_t *hub, char token [9], int timeout_ms)
{
    zmsg_t *msg = s_recv (hub->feed, timeout_ms);
    assert_non_null (msg);
    assert_int_equal (zmsg_size (msg), 5);
    zframe_t *first = zmsg_first (msg);
    assert_int_equal (zframe_size (first), 8);
    memcpy (token, zframe_data (first), 8);
    token [8] = '\0';
    for (char *end = token + 7; end >= token && *end == '_'; end--)
        *end = '\0';
    json_t *result = s_frame_json (zmsg_last (msg));
    zmsg_destroy (&msg);
    return result;
}

//  A call that was passed down: its body; *envelope_p gets the frames to
//  route a result back.
static json_t *
s_passed (hub_t *hub, zmsg_t **envelope_p)
{
    zmsg_t *msg = s_recv (hub->drain, 5000);
    assert_non_null (msg);
    zmsg_t *envelope = zmsg_new ();
    while (zmsg_size (msg)) {
        zframe_t *frame = zmsg_pop (msg);
        bool empty = zframe_size (frame) == 0;
        zmsg_append (envelope, &frame);
        if (empty)
            break;
    }
    char *protocol = zmsg_popstr (msg);
    char *command = zmsg_popstr (msg);
    assert_string_equal (protocol, DSH_PROTOCOL);
    assert_string_equal (command, DSH_CALL);
    zstr_free (&protocol);
    zstr_free (&command);
    zframe_t *body = zmsg_pop (msg);
    assert_non_null (body);
    json_t *json = s_frame_json (body);
    zframe_destroy (&body);
    zmsg_destroy (&msg);
    *envelope_p = envelope;
    return json;
}

static void
s_reply (hub_t *hub, zmsg_t **envelope_p, const char *result)
{
    zmsg_t *msg = *envelope_p;
    *envelope_p = NULL;
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, DSH_RESULT);
    zframe_t *frame = s_msgpack_frame (result);
    zmsg_append (msg, &frame);
    assert_int_equal (zmsg_send (&msg, hub->drain), 0);
}

static const char *
s_text (json_t *result, size_t index)
{
    return json_string_value (json_object_get (json_array_get (json_object_get (result, "content"), index), "text"));
}

static void
test_stage_exit2_blocks (void **state)
{
    hub_t *hub = (hub_t *) *state;
    s_hub_start (hub,
        "    hook\n        event = \"PreToolUse\"\n        matcher = \"write_file|edit\"\n"
        "        command = \"%s/block.sh\"\n");
    s_call (hub, "t1", "write_file", "{\"path\": \"a\"}");
    json_t *result = s_answer (hub, "t1", 5000);
    assert_true (json_is_true (json_object_get (result, "isError")));
    assert_string_equal (s_text (result, 0),
                         "Error: tool \"write_file\" was blocked by a PreToolUse hook: blocked by exit code");
    assert_string_equal (json_string_value (json_object_get (json_object_get (result, "error"), "code")), DSH_E_DENIED);
    assert_string_equal (json_string_value (json_object_get (result, "callId")), "t1");
    json_decref (result);

    //  Not matched: passed on untouched
    s_call (hub, "t2", "read_file", "{\"path\": \"a\"}");
    zmsg_t *envelope = NULL;
    json_t *body = s_passed (hub, &envelope);
    assert_string_equal (json_string_value (json_object_get (body, "name")), "read_file");
    json_decref (body);
    zmsg_destroy (&envelope);
}

static void
test_stage_rewrites_and_records (void **state)
{
    hub_t *hub = (hub_t *) *state;
    s_hub_start (hub,
        "    hook\n        event = \"PreToolUse\"\n        command = \"%s/record.sh\"\n"
        "    hook\n        event = \"PreToolUse\"\n        matcher = \"echo\"\n        command = \"%s/rewrite.sh\"\n"
        "    hook\n        event = \"PreToolUse\"\n        command = \"%s/fail.sh\"\n");
    s_call (hub, "t1", "echo", "{\"message\": \"hello\"}");
    zmsg_t *envelope = NULL;
    json_t *body = s_passed (hub, &envelope);
    json_t *arguments = json_object_get (body, "arguments");
    assert_string_equal (json_string_value (json_object_get (arguments, "message")), "rewritten by hook");
    assert_string_equal (json_string_value (json_object_get (json_object_get (body, "meta"), "additionalContext")),
                         "noted");
    json_decref (body);
    zmsg_destroy (&envelope);

    char path [128];
    snprintf (path, sizeof path, "%s/event.json", hub->dir);
    json_t *event = json_load_file (path, 0, NULL);
    assert_non_null (event);
    assert_string_equal (json_string_value (json_object_get (event, "hook_event_name")), "PreToolUse");
    assert_string_equal (json_string_value (json_object_get (event, "session_id")), "agent-7");
    assert_string_equal (json_string_value (json_object_get (event, "tool_name")), "echo");
    assert_string_equal (json_string_value (json_object_get (json_object_get (event, "tool_input"), "message")),
                         "hello");
    assert_non_null (json_object_get (event, "cwd"));
    json_decref (event);
}

static void
test_stage_ask_is_denied (void **state)
{
    hub_t *hub = (hub_t *) *state;
    s_hub_start (hub, "    hook\n        event = \"PreToolUse\"\n        command = \"%s/ask.sh\"\n");
    s_call (hub, "t1", "echo", "{}");
    json_t *result = s_answer (hub, "t1", 5000);
    assert_string_equal (s_text (result, 0),
        "Error: tool \"echo\" was blocked by a PreToolUse hook: really? (the hook asked for confirmation, "
        "which needs an approver: use the permission stage)");
    json_decref (result);
}

static void
test_stage_timeout_fails_closed (void **state)
{
    hub_t *hub = (hub_t *) *state;
    s_hub_start (hub,
        "    hook\n        event = \"PreToolUse\"\n        matcher = \"slow\"\n        command = \"%s/slow.sh\"\n"
        "        timeout_ms = 3000\n"
        "    hook\n        event = \"PreToolUse\"\n        matcher = \"fast\"\n        command = \"%s/rewrite.sh\"\n");
    int64_t start = zclock_mono ();
    s_call (hub, "slow1", "slow", "{}");
    //  A slow hook holds only its own call: the fast one passes before the
    //  slow one is answered. Told by order, not by a clock, so that it holds
    //  under valgrind on a busy machine: had the fast call waited for the
    //  slow hook, the slow call's answer would be up the feed already
    s_call (hub, "fast1", "fast", "{}");
    zmsg_t *envelope = NULL;
    json_t *body = s_passed (hub, &envelope);
    assert_string_equal (json_string_value (json_object_get (body, "name")), "fast");
    zmsg_t *early = s_recv (hub->feed, 0);
    assert_null (early);
    json_decref (body);
    zmsg_destroy (&envelope);

    //  Not before its timeout; and at it, not when the hook would end (it
    //  sleeps 30 s): the upper bound is far from both, for a loaded machine
    json_t *result = s_answer (hub, "slow1", 25000);
    int64_t elapsed = zclock_mono () - start;
    assert_true (elapsed >= 3000 && elapsed < 20000);
    char *expected = zsys_sprintf ("Error: hook \"%s/slow.sh\" timed out after 3000 ms", hub->dir);
    assert_string_equal (s_text (result, 0), expected);
    assert_string_equal (json_string_value (json_object_get (json_object_get (result, "error"), "code")),
                         DSH_E_MIDDLEWARE_FAILED);
    zstr_free (&expected);
    json_decref (result);
}

static void
test_stage_post_hooks (void **state)
{
    hub_t *hub = (hub_t *) *state;
    s_hub_start (hub,
        "    hook\n        event = \"PostToolUse\"\n        matcher = \"echo\"\n        command = \"%s/post-context.sh\"\n"
        "    hook\n        event = \"PostToolUse\"\n        matcher = \"secret\"\n        command = \"%s/post-block.sh\"\n");
    s_call (hub, "t1", "echo", "{\"message\": \"hi\"}");
    zmsg_t *envelope = NULL;
    json_t *body = s_passed (hub, &envelope);
    json_decref (body);
    s_reply (hub, &envelope, "{\"callId\": \"t1\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}], \"isError\": false}");
    json_t *result = s_answer (hub, "t1", 5000);
    assert_string_equal (s_text (result, 0), "hi");
    assert_string_equal (s_text (result, 1), "checked by post hook");
    assert_true (json_is_false (json_object_get (result, "isError")));
    json_decref (result);

    s_call (hub, "t2", "secret", "{}");
    body = s_passed (hub, &envelope);
    json_decref (body);
    s_reply (hub, &envelope, "{\"callId\": \"t2\", \"content\": [{\"type\": \"text\", \"text\": \"pw\"}], \"isError\": false}");
    result = s_answer (hub, "t2", 5000);
    assert_true (json_is_true (json_object_get (result, "isError")));
    assert_string_equal (s_text (result, 0),
                         "Error: tool \"secret\" result was blocked by a PostToolUse hook: leaks a secret");
    assert_int_equal (json_array_size (json_object_get (result, "content")), 1);
    assert_string_equal (json_string_value (json_object_get (json_object_get (result, "error"), "code")), DSH_E_DENIED);
    json_decref (result);
}

//  ---------------------------------------------------------------------
//  The cap on hook processes and its wait queue

static const char *
s_code (json_t *result)
{
    return json_string_value (json_object_get (json_object_get (result, "error"), "code"));
}

//  Entries in a directory (without . and ..), or -1.
static int
s_entries (const char *path)
{
    DIR *dir = opendir (path);
    if (!dir)
        return -1;
    int count = 0;
    for (struct dirent *entry = readdir (dir); entry; entry = readdir (dir))
        if (!streq (entry->d_name, ".") && !streq (entry->d_name, ".."))
            count++;
    closedir (dir);
    return count;
}

//  The descriptors this process has open (the stage runs in it).
static int
s_descriptors (void)
{
    return s_entries ("/proc/self/fd");
}

//  Lines in the gate's counts file: how many hooks came to the gate.
static int
s_gate_starts (hub_t *hub)
{
    char path [96];
    snprintf (path, sizeof path, "%s/counts", hub->dir);
    FILE *file = fopen (path, "r");
    int lines = 0;
    if (file) {
        for (int c = fgetc (file); c != EOF; c = fgetc (file))
            lines += c == '\n';
        fclose (file);
    }
    return lines;
}

//  Waits until count hooks are held at the gate, each having written what
//  it saw there; false at the deadline.
static bool
s_wait_gate (hub_t *hub, int count, int timeout_ms)
{
    char path [96];
    snprintf (path, sizeof path, "%s/running", hub->dir);
    int64_t deadline = zclock_mono () + timeout_ms;
    while (s_entries (path) != count || s_gate_starts (hub) != count) {
        if (zclock_mono () > deadline)
            return false;
        zclock_sleep (10);          //  the poll's interval
    }
    return true;
}

//  Opens the gate: every hook held there, and every later one, goes on.
static void
s_release (hub_t *hub)
{
    char path [96];
    snprintf (path, sizeof path, "%s/release", hub->dir);
    FILE *file = fopen (path, "w");
    assert_non_null (file);
    fclose (file);
}

//  The most hooks the gate saw at once, and how many passed it.
static int
s_gate_peak (hub_t *hub, int *starts_p)
{
    char path [96];
    snprintf (path, sizeof path, "%s/counts", hub->dir);
    FILE *file = fopen (path, "r");
    assert_non_null (file);
    int peak = 0, starts = 0, count;
    while (fscanf (file, "%d", &count) == 1) {
        if (count > peak)
            peak = count;
        starts++;
    }
    fclose (file);
    *starts_p = starts;
    return peak;
}

//  The tag argument of a passed call.
static const char *
s_tag (json_t *body)
{
    return json_string_value (json_object_get (json_object_get (body, "arguments"), "tag"));
}

//  Receives count passed calls, and checks that each is one of the tags
//  (a space-separated list); returns the tags in the order they came.
static char *
s_passed_tags (hub_t *hub, int count, const char *tags)
{
    char *order = strdup ("");
    for (int index = 0; index < count; index++) {
        zmsg_t *envelope = NULL;
        json_t *body = s_passed (hub, &envelope);
        const char *tag = s_tag (body);
        assert_non_null (tag);
        char *word = zsys_sprintf (" %s ", tag);
        char *list = zsys_sprintf (" %s ", tags);
        assert_non_null (strstr (list, word));
        zstr_free (&word);
        zstr_free (&list);
        char *longer = zsys_sprintf ("%s%s%s", order, *order? " ": "", tag);
        zstr_free (&order);
        order = longer;
        json_decref (body);
        zmsg_destroy (&envelope);
    }
    return order;
}

static void
test_stage_cap_and_queue_bounds (void **state)
{
    hub_t *hub = (hub_t *) *state;
    s_hub_start (hub,
        "    max_processes = 4\n    queue_calls = 8\n    queue_calls_per_caller = 6\n"
        "    hook\n        event = \"PreToolUse\"\n        command = \"%s/gate.sh\"\n");
    int baseline = s_descriptors ();
    //  Agent a floods: 4 run, 6 wait (its share of the queue), 4 are refused;
    //  b and c queue next, until c's second call finds the queue full
    for (int index = 1; index <= 14; index++) {
        char token [8], arguments [32];
        snprintf (token, sizeof token, "a%d", index);
        snprintf (arguments, sizeof arguments, "{\"tag\": \"a%d\"}", index);
        s_call_as (hub, token, "echo", arguments, "agent-a", 0);
    }
    s_call_as (hub, "b1", "echo", "{\"tag\": \"b1\"}", "agent-b", 0);
    s_call_as (hub, "c1", "echo", "{\"tag\": \"c1\"}", "agent-c", 0);
    s_call_as (hub, "c2", "echo", "{\"tag\": \"c2\"}", "agent-c", 0);

    //  The refusals come at once: every hook is still held at the gate
    const char *refused [] = { "a11", "a12", "a13", "a14", "c2" };
    for (size_t index = 0; index < sizeof refused / sizeof refused [0]; index++) {
        char token [9];
        json_t *result = s_answer_any (hub, token, 5000);
        assert_string_equal (token, refused [index]);
        assert_true (json_is_true (json_object_get (result, "isError")));
        assert_string_equal (s_code (result), DSH_E_OVERLOADED);
        const char *text = s_text (result, 0);
        assert_non_null (strstr (text, "Error: hooks stage \"hooks\" is overloaded: its hook processes are all "
                                       "busy (max_processes 4) and its queue is full ("));
        assert_non_null (strstr (text, streq (token, "c2")? "(8 calls wait: queue_calls 8)"
                                                          : "(6 calls of caller \"agent-a\" wait: "
                                                            "queue_calls_per_caller 6)"));
        json_decref (result);
    }
    assert_true (s_wait_gate (hub, 4, 10000));
    //  Four hooks run, eight calls wait: three descriptors a hook, and a
    //  waiting call holds none
    assert_true (s_descriptors () <= baseline + 3 * 4 + 4);
    assert_null (s_recv (hub->drain, 0));

    s_release (hub);
    char *order = s_passed_tags (hub, 12, "a1 a2 a3 a4 a5 a6 a7 a8 a9 a10 b1 c1");
    zstr_free (&order);
    int starts = 0;
    assert_int_equal (s_gate_peak (hub, &starts), 4);
    assert_int_equal (starts, 12);
    assert_null (s_recv (hub->feed, 0));
}

static void
test_stage_turns_by_caller (void **state)
{
    hub_t *hub = (hub_t *) *state;
    s_hub_start (hub,
        "    max_processes = 1\n    queue_calls_per_caller = 5\n"
        "    hook\n        event = \"PreToolUse\"\n        command = \"%s/gate.sh\"\n");
    for (int index = 1; index <= 6; index++) {
        char token [8], arguments [32];
        snprintf (token, sizeof token, "a%d", index);
        snprintf (arguments, sizeof arguments, "{\"tag\": \"a%d\"}", index);
        s_call_as (hub, token, "echo", arguments, "agent-a", 0);
    }
    s_call_as (hub, "b1", "echo", "{\"tag\": \"b1\"}", "agent-b", 0);
    //  Refused (a's share is full): once it is answered, the stage has read
    //  every call before it
    s_call_as (hub, "a7", "echo", "{\"tag\": \"a7\"}", "agent-a", 0);
    char token [9];
    json_t *result = s_answer_any (hub, token, 5000);
    assert_string_equal (token, "a7");
    assert_string_equal (s_code (result), DSH_E_OVERLOADED);
    json_decref (result);

    //  One hook at a time, in turns: b's one call waits one turn of a's
    s_release (hub);
    char *order = s_passed_tags (hub, 7, "a1 a2 a3 a4 a5 a6 b1");
    assert_string_equal (order, "a1 a2 b1 a3 a4 a5 a6");
    zstr_free (&order);
    int starts = 0;
    assert_int_equal (s_gate_peak (hub, &starts), 1);
    assert_int_equal (starts, 7);
}

static void
test_stage_queue_cancel_deadline_bytes (void **state)
{
    hub_t *hub = (hub_t *) *state;
    s_hub_start (hub,
        "    max_processes = 1\n    queue_calls_per_caller = 2\n    queue_bytes = 2000\n"
        "    hook\n        event = \"PreToolUse\"\n        command = \"%s/gate.sh\"\n");
    s_call_as (hub, "a1", "echo", "{\"tag\": \"a1\"}", "agent-a", 0);
    s_call_as (hub, "a2", "echo", "{\"tag\": \"a2\"}", "agent-a", 500);
    s_call_as (hub, "a3", "echo", "{\"tag\": \"a3\"}", "agent-a", 0);
    s_call_as (hub, "a4", "echo", "{\"tag\": \"a4\"}", "agent-a", 0);
    char token [9];
    json_t *result = s_answer_any (hub, token, 5000);
    assert_string_equal (token, "a4");
    assert_string_equal (s_code (result), DSH_E_OVERLOADED);
    json_decref (result);

    //  An event bigger than the bytes the queue has left
    char *big = zsys_sprintf ("{\"tag\": \"big\", \"text\": \"%03000d\"}", 0);
    s_call_as (hub, "big", "echo", big, "agent-big", 0);
    zstr_free (&big);
    result = s_answer_any (hub, token, 5000);
    assert_string_equal (token, "big");
    assert_string_equal (s_code (result), DSH_E_OVERLOADED);
    assert_non_null (strstr (s_text (result, 0), ": queue_bytes 2000)"));
    json_decref (result);

    //  Past its deadline while it waits: answered, and out of the queue
    result = s_answer_any (hub, token, 10000);
    assert_string_equal (token, "a2");
    assert_string_equal (s_code (result), DSH_E_TIMEOUT);
    assert_non_null (strstr (s_text (result, 0), "deadline waiting for a hook process (max_processes 1)"));
    json_decref (result);

    //  Cancelled while it waits: out of the queue, with no answer from the
    //  stage (the caller's is the broker's). a's share has room for two again.
    s_cancel (hub, "a3");
    s_call_as (hub, "a5", "echo", "{\"tag\": \"a5\"}", "agent-a", 0);
    s_call_as (hub, "a6", "echo", "{\"tag\": \"a6\"}", "agent-a", 0);
    s_call_as (hub, "a7", "echo", "{\"tag\": \"a7\"}", "agent-a", 0);
    result = s_answer_any (hub, token, 5000);
    assert_string_equal (token, "a7");
    assert_string_equal (s_code (result), DSH_E_OVERLOADED);
    json_decref (result);

    s_release (hub);
    char *order = s_passed_tags (hub, 3, "a1 a5 a6");
    assert_string_equal (order, "a1 a5 a6");
    zstr_free (&order);
    int starts = 0;
    assert_int_equal (s_gate_peak (hub, &starts), 1);
    assert_int_equal (starts, 3);
    assert_null (s_recv (hub->feed, 0));
}

static void
test_stage_post_overloaded (void **state)
{
    hub_t *hub = (hub_t *) *state;
    s_hub_start (hub,
        "    max_processes = 1\n    queue_calls = 0\n"
        "    hook\n        event = \"PostToolUse\"\n        command = \"%s/gate.sh\"\n");
    s_call (hub, "p1", "echo", "{\"tag\": \"p1\"}");
    s_call (hub, "p2", "echo", "{\"tag\": \"p2\"}");
    zmsg_t *first = NULL, *second = NULL;
    json_t *body = s_passed (hub, &first);
    json_decref (body);
    body = s_passed (hub, &second);
    json_decref (body);
    s_reply (hub, &first, "{\"callId\": \"p1\", \"content\": [{\"type\": \"text\", \"text\": \"one\"}], \"isError\": false}");
    assert_true (s_wait_gate (hub, 1, 10000));
    //  No room and no queue: the tool ran, and its result is withheld at once
    s_reply (hub, &second, "{\"callId\": \"p2\", \"content\": [{\"type\": \"text\", \"text\": \"two\"}], \"isError\": false}");
    json_t *result = s_answer (hub, "p2", 5000);
    assert_string_equal (s_code (result), DSH_E_OVERLOADED);
    assert_non_null (strstr (s_text (result, 0), "Error: tool \"echo\" ran, but its result was withheld: "
                                                 "hooks stage \"hooks\" is overloaded"));
    json_decref (result);
    s_release (hub);
    result = s_answer (hub, "p1", 10000);
    assert_string_equal (s_text (result, 0), "one");
    json_decref (result);
}

//  ---------------------------------------------------------------------
//  What hooks are shown: the arguments that run, in Typed JSON

//  Packs {"path": path (size bytes, maybe not UTF-8)} into sbuf, with an
//  integer key 1 -> "scratch/a" too if int_key.
static void
s_pack_path (msgpack_sbuffer *sbuf, const char *path, size_t size, bool int_key)
{
    msgpack_sbuffer_init (sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, int_key? 2: 1);
    msgpack_pack_str (&pk, 4);
    msgpack_pack_str_body (&pk, "path", 4);
    msgpack_pack_str (&pk, size);
    msgpack_pack_str_body (&pk, path, size);
    if (int_key) {
        msgpack_pack_int (&pk, 1);
        msgpack_pack_str (&pk, 9);
        msgpack_pack_str_body (&pk, "scratch/a", 9);
    }
}

//  The tool_input the guard was last shown (the recorded event's).
static json_t *
s_shown (hub_t *hub)
{
    char path [128];
    snprintf (path, sizeof path, "%s/event.json", hub->dir);
    json_t *event = json_load_file (path, 0, NULL);
    assert_non_null (event);
    json_t *input = json_incref (json_object_get (event, "tool_input"));
    json_decref (event);
    remove (path);
    return input;
}

static void
test_stage_typed_view (void **state)
{
    hub_t *hub = (hub_t *) *state;
    s_hub_start (hub, "    hook\n        event = \"PreToolUse\"\n        command = \"%s/guard.sh\"\n");
    msgpack_sbuffer sbuf;
    s_pack_path (&sbuf, "scratch/a", 9, false);
    s_call_packed (hub, "plain", "write_file", sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    zmsg_t *envelope = NULL;
    json_t *body = s_passed (hub, &envelope);
    assert_string_equal (json_string_value (json_object_get (json_object_get (body, "arguments"), "path")),
                         "scratch/a");
    json_decref (body);
    zmsg_destroy (&envelope);
    json_t *shown = s_shown (hub);
    json_t *expected = json_pack ("{s:s}", "path", "scratch/a");
    assert_true (json_equal (shown, expected));
    json_decref (expected);
    json_decref (shown);

    //  An integer key: the map is shown as the pairs it holds, and the path
    //  the guard sees is the one that would run
    s_pack_path (&sbuf, "/etc/passwd", 11, true);
    s_call_packed (hub, "intkey", "write_file", sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    json_t *result = s_answer (hub, "intkey", 5000);
    assert_string_equal (s_code (result), DSH_E_DENIED);
    assert_non_null (strstr (s_text (result, 0), "only scratch/ may be touched"));
    json_decref (result);
    shown = s_shown (hub);
    expected = json_pack ("{s:[[s,s],[i,s]]}", "$map", "path", "/etc/passwd", 1, "scratch/a");
    assert_true (json_equal (shown, expected));
    json_decref (expected);
    json_decref (shown);

    //  A str that is not UTF-8: shown as its exact bytes, in base64
    const char bytes [] = "scratch/\xff/../../etc/passwd";
    s_pack_path (&sbuf, bytes, sizeof bytes - 1, false);
    s_call_packed (hub, "notutf8", "write_file", sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    result = s_answer (hub, "notutf8", 5000);
    assert_string_equal (s_code (result), DSH_E_DENIED);
    json_decref (result);
    shown = s_shown (hub);
    const char *base64 = json_string_value (json_object_get (json_object_get (shown, "path"), "$str"));
    assert_non_null (base64);
    zarmour_t *armour = zarmour_new ();
    zchunk_t *decoded = zarmour_decode (armour, base64);
    assert_non_null (decoded);
    assert_true (zchunk_size (decoded) >= sizeof bytes - 1);
    assert_memory_equal (zchunk_data (decoded), bytes, sizeof bytes - 1);
    zchunk_destroy (&decoded);
    zarmour_destroy (&armour);
    json_decref (shown);
}

static void
test_stage_typed_refuse (void **state)
{
    hub_t *hub = (hub_t *) *state;
    s_hub_start (hub, "    typed_input = \"refuse\"\n"
                      "    hook\n        event = \"PreToolUse\"\n        command = \"%s/guard.sh\"\n");
    const char bytes [] = "scratch/\xff";
    msgpack_sbuffer sbuf;
    s_pack_path (&sbuf, bytes, sizeof bytes - 1, false);
    s_call_packed (hub, "notutf8", "write_file", sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    json_t *result = s_answer (hub, "notutf8", 5000);
    assert_string_equal (s_code (result), DSH_E_DENIED);
    assert_non_null (strstr (s_text (result, 0), "Error: tool \"write_file\" was refused by hooks stage \"hooks\": "
                                                 "its arguments hold values plain JSON cannot show its hooks"));
    assert_non_null (strstr (s_text (result, 0), "typed_input is \"refuse\""));
    json_decref (result);
    //  Refused before any hook ran
    char path [128];
    snprintf (path, sizeof path, "%s/event.json", hub->dir);
    assert_false (zsys_file_exists (path));

    s_pack_path (&sbuf, "scratch/b", 9, true);
    s_call_packed (hub, "intkey", "write_file", sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    result = s_answer (hub, "intkey", 5000);
    assert_string_equal (s_code (result), DSH_E_DENIED);
    json_decref (result);

    //  Plain arguments still go to the hooks
    s_call (hub, "plain", "write_file", "{\"path\": \"scratch/b\"}");
    zmsg_t *envelope = NULL;
    json_t *body = s_passed (hub, &envelope);
    json_decref (body);
    zmsg_destroy (&envelope);
}

static void
test_stage_typed_updated_input (void **state)
{
    hub_t *hub = (hub_t *) *state;
    s_hub_start (hub,
        "    hook\n        event = \"PreToolUse\"\n        matcher = \"same\"\n        command = \"%s/echo-input.sh\"\n"
        "    hook\n        event = \"PreToolUse\"\n        matcher = \"map\"\n        command = \"%s/map-rewrite.sh\"\n"
        "    hook\n        event = \"PreToolUse\"\n        matcher = \"bin\"\n        command = \"%s/bin-rewrite.sh\"\n");
    //  Given back as shown: the arguments go on as they came, typed values
    //  and all
    msgpack_sbuffer sbuf;
    s_pack_path (&sbuf, "scratch/\xff", 9, true);
    s_call_packed (hub, "same", "same", sbuf.data, sbuf.size);
    zmsg_t *envelope = NULL;
    zmsg_t *msg = s_recv (hub->drain, 5000);
    assert_non_null (msg);
    zframe_t *frame = zmsg_first (msg);
    while (frame && zframe_size (frame))
        frame = zmsg_next (msg);
    zmsg_next (msg);
    zmsg_next (msg);
    frame = zmsg_next (msg);
    assert_non_null (frame);
    char error [128];
    dsh_doc_t *doc = dsh_doc_new (zframe_data (frame), zframe_size (frame), error, sizeof error);
    assert_non_null (doc);
    //  The hook's answer was used (its context is in meta)
    const msgpack_object *context = dsh_map_get (dsh_map_get (dsh_doc_root (doc), "meta"), "additionalContext");
    assert_non_null (context);
    assert_int_equal (context->type, MSGPACK_OBJECT_STR);
    assert_memory_equal (context->via.str.ptr, "echoed", 6);
    const msgpack_object *arguments = dsh_map_get (dsh_doc_root (doc), "arguments");
    assert_non_null (arguments);
    msgpack_sbuffer passed;
    msgpack_sbuffer_init (&passed);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &passed, msgpack_sbuffer_write);
    msgpack_pack_object (&pk, *arguments);
    assert_int_equal (passed.size, sbuf.size);
    assert_memory_equal (passed.data, sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&passed);
    msgpack_sbuffer_destroy (&sbuf);
    dsh_doc_destroy (&doc);
    zmsg_destroy (&msg);

    //  Typed forms are read back as the values they stand for
    s_call (hub, "map", "map", "{\"path\": \"scratch/c\"}");
    json_t *body = s_passed (hub, &envelope);
    json_t *expected = json_pack ("{s:s}", "path", "scratch/d");
    assert_true (json_equal (json_object_get (body, "arguments"), expected));
    json_decref (expected);
    json_decref (body);
    zmsg_destroy (&envelope);

    //  A rewrite to values plain JSON cannot hold cannot go on: it fails
    //  closed
    s_call (hub, "bin", "bin", "{\"path\": \"scratch/c\"}");
    json_t *result = s_answer (hub, "bin", 5000);
    assert_string_equal (s_code (result), DSH_E_MIDDLEWARE_FAILED);
    assert_non_null (strstr (s_text (result, 0), "a PreToolUse hook's updatedInput cannot be used"));
    json_decref (result);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_match),
        cmocka_unit_test (test_event_names),
        cmocka_unit_test (test_parse_specific_output),
        cmocka_unit_test (test_parse_top_level_and_legacy),
        cmocka_unit_test (test_parse_no_or_bad_output),
        cmocka_unit_test (test_parse_exit_codes),
        cmocka_unit_test (test_merge),
        cmocka_unit_test (test_event_json),
        cmocka_unit_test (test_setup_settings),
        cmocka_unit_test_setup_teardown (test_stage_exit2_blocks, s_hub_setup, s_hub_teardown),
        cmocka_unit_test_setup_teardown (test_stage_rewrites_and_records, s_hub_setup, s_hub_teardown),
        cmocka_unit_test_setup_teardown (test_stage_ask_is_denied, s_hub_setup, s_hub_teardown),
        cmocka_unit_test_setup_teardown (test_stage_timeout_fails_closed, s_hub_setup, s_hub_teardown),
        cmocka_unit_test_setup_teardown (test_stage_post_hooks, s_hub_setup, s_hub_teardown),
        cmocka_unit_test_setup_teardown (test_stage_cap_and_queue_bounds, s_hub_setup, s_hub_teardown),
        cmocka_unit_test_setup_teardown (test_stage_turns_by_caller, s_hub_setup, s_hub_teardown),
        cmocka_unit_test_setup_teardown (test_stage_queue_cancel_deadline_bytes, s_hub_setup, s_hub_teardown),
        cmocka_unit_test_setup_teardown (test_stage_post_overloaded, s_hub_setup, s_hub_teardown),
        cmocka_unit_test_setup_teardown (test_stage_typed_view, s_hub_setup, s_hub_teardown),
        cmocka_unit_test_setup_teardown (test_stage_typed_refuse, s_hub_setup, s_hub_teardown),
        cmocka_unit_test_setup_teardown (test_stage_typed_updated_input, s_hub_setup, s_hub_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
