/*  =========================================================================
    test_planmode - dsh_planmode: the per-agent mode table, the meta
    override rules, the allow list, the exact refusal, and the stage's
    control commands
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dsh_planmode.h"
#include "dsh_doc.h"
#include "dsh_json.h"
#include "stage_control.h"

static dsh_planmode_t *
s_planmode (const char *text)
{
    zconfig_t *settings = text? zconfig_str_load (text): NULL;
    char error [256] = "";
    dsh_planmode_t *planmode = dsh_planmode_new (settings, error, sizeof error);
    if (!planmode)
        fail_msg ("settings refused: %s", error);
    zconfig_destroy (&settings);
    return planmode;
}

static void
s_set_ok (dsh_planmode_t *planmode, const char *agent, const char *mode)
{
    char error [256] = "";
    if (dsh_planmode_set (planmode, agent, mode, error, sizeof error))
        fail_msg ("mode %s for \"%s\" refused: %s", mode, agent? agent: "(null)", error);
}

static void
test_mode_table (void **state)
{
    (void) state;
    dsh_planmode_t *planmode = s_planmode (NULL);
    assert_false (dsh_planmode_planning (planmode, "a"));
    assert_false (dsh_planmode_planning (planmode, NULL));
    s_set_ok (planmode, "a", "plan");
    s_set_ok (planmode, "b", "plan");
    assert_true (dsh_planmode_planning (planmode, "a"));
    assert_true (dsh_planmode_planning (planmode, "b"));
    assert_false (dsh_planmode_planning (planmode, "c"));
    assert_false (dsh_planmode_planning (planmode, NULL));
    //  Setting plan twice is harmless; normal lifts it
    s_set_ok (planmode, "a", "plan");
    s_set_ok (planmode, "a", "normal");
    assert_false (dsh_planmode_planning (planmode, "a"));
    s_set_ok (planmode, "nobody", "normal");

    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_planmode_modes (planmode, &packer.pk);
    char doc_error [256];
    dsh_doc_t *doc = dsh_doc_new (packer.sbuf.data, packer.sbuf.size, doc_error, sizeof (doc_error));
    assert_non_null (doc);
    json_t *modes = dsh_json_from_msgpack (dsh_doc_root (doc));
    dsh_doc_destroy (&doc);
    dsh_packer_release (&packer);
    assert_int_equal (json_object_size (modes), 1);
    assert_string_equal (json_string_value (json_object_get (modes, "b")), "plan");
    json_decref (modes);

    //  A call without agent is agent ""
    s_set_ok (planmode, "", "plan");
    assert_true (dsh_planmode_planning (planmode, NULL));
    assert_true (dsh_planmode_planning (planmode, ""));
    s_set_ok (planmode, NULL, "normal");
    assert_false (dsh_planmode_planning (planmode, ""));

    char error [256] = "";
    assert_int_equal (dsh_planmode_set (planmode, "a", "Plan", error, sizeof error), -1);
    assert_string_equal (error, "mode must be \"plan\" or \"normal\"");
    assert_int_equal (dsh_planmode_set (planmode, "a", NULL, error, sizeof error), -1);
    assert_int_equal (dsh_planmode_set (planmode, "two words", "plan", error, sizeof error), -1);
    assert_non_null (strstr (error, "is not a valid agent id"));
    assert_false (dsh_planmode_planning (planmode, "two words"));
    dsh_planmode_destroy (&planmode);
    assert_null (planmode);
    dsh_planmode_destroy (&planmode);
}

static void
test_meta_override (void **state)
{
    (void) state;
    dsh_planmode_t *planmode = s_planmode (NULL);
    //  meta "plan" plans this call of a normal agent
    assert_false (dsh_planmode_call_planning (planmode, "a", NULL));
    assert_true (dsh_planmode_call_planning (planmode, "a", "plan"));
    assert_true (dsh_planmode_call_planning (planmode, NULL, "plan"));
    //  ... and only this call
    assert_false (dsh_planmode_planning (planmode, "a"));
    assert_false (dsh_planmode_call_planning (planmode, "a", "normal"));
    //  meta "normal" never lifts a sticky plan
    s_set_ok (planmode, "a", "plan");
    assert_true (dsh_planmode_call_planning (planmode, "a", NULL));
    assert_true (dsh_planmode_call_planning (planmode, "a", "normal"));
    assert_true (dsh_planmode_call_planning (planmode, "a", "anything"));
    assert_false (dsh_planmode_call_planning (planmode, "b", "normal"));
    dsh_planmode_destroy (&planmode);
}

static void
test_allow_list (void **state)
{
    (void) state;
    dsh_planmode_t *planmode = s_planmode ("allow = \" read_file, list_directory,,grep \"\n");
    assert_int_equal (dsh_planmode_allow_size (planmode), 3);
    assert_true (dsh_planmode_allows (planmode, "read_file", false));
    assert_true (dsh_planmode_allows (planmode, "list_directory", false));
    assert_true (dsh_planmode_allows (planmode, "grep", false));
    //  Exact names, not prefixes or globs
    assert_false (dsh_planmode_allows (planmode, "read", false));
    assert_false (dsh_planmode_allows (planmode, "read_file2", false));
    assert_false (dsh_planmode_allows (planmode, "write_file", false));
    //  Read-only tools pass whatever the list says
    assert_true (dsh_planmode_allows (planmode, "write_file", true));
    //  Nothing serves exit_plan_mode: a tool of that name is no way around
    //  plan mode unless the list names it
    assert_false (dsh_planmode_allows (planmode, "exit_plan_mode", false));
    dsh_planmode_destroy (&planmode);

    planmode = s_planmode (NULL);
    assert_int_equal (dsh_planmode_allow_size (planmode), 0);
    assert_false (dsh_planmode_allows (planmode, "read_file", false));
    dsh_planmode_destroy (&planmode);

    planmode = s_planmode ("allow = \"\"\nkind = \"plan\"\n");
    assert_int_equal (dsh_planmode_allow_size (planmode), 0);
    dsh_planmode_destroy (&planmode);

    zconfig_t *settings = zconfig_str_load ("alow = \"read_file\"\n");
    char error [256] = "";
    assert_null (dsh_planmode_new (settings, error, sizeof error));
    assert_string_equal (error, "unknown setting \"alow\"");
    zconfig_destroy (&settings);
}

static void
test_refusal (void **state)
{
    (void) state;
    //  It names a way out that exists: the operator's command, for this agent
    char *refusal = dsh_planmode_refusal ("write_file", "planner-7", true);
    assert_string_equal (refusal,
        "tool \"write_file\" is not available in plan mode; continue planning and present your plan "
        "when ready (plan mode ends when the operator runs `dsh mode planner-7 normal`)");
    zstr_free (&refusal);
    //  The agent of calls that name none, as a shell line types it
    refusal = dsh_planmode_refusal ("write_file", NULL, true);
    assert_non_null (strstr (refusal, "`dsh mode \"\" normal`"));
    zstr_free (&refusal);
    //  Planned by the call's meta alone: the operator's command would not help
    refusal = dsh_planmode_refusal ("tick", "worker-1", false);
    assert_string_equal (refusal,
        "tool \"tick\" is not available in plan mode; continue planning and present your plan "
        "when ready (this call asked for plan mode: its meta says \"mode\": \"plan\")");
    zstr_free (&refusal);
}

static void
test_control (void **state)
{
    (void) state;
    dsh_middleware_context_t context = { .name = "plan", .broker = NULL };
    dsh_stage_callbacks_t callbacks = { 0 };
    void *arg = NULL;
    char error [256] = "";
    assert_int_equal (dsh_planmode_setup (NULL, &context, &callbacks, &arg, error, sizeof error), 0);
    assert_non_null (callbacks.on_request);
    assert_non_null (callbacks.on_control);

    char *reason = NULL;
    json_t *args = json_pack ("{s:s, s:s}", "agent", "planner-1", "mode", "plan");
    json_t *reply = stage_control (&callbacks, "mode", args, &reason, arg);
    json_decref (args);
    assert_non_null (reply);
    assert_string_equal (json_string_value (json_object_get (reply, "agent")), "planner-1");
    assert_string_equal (json_string_value (json_object_get (reply, "mode")), "plan");
    json_decref (reply);
    assert_true (dsh_planmode_planning ((dsh_planmode_t *) arg, "planner-1"));

    reply = stage_control (&callbacks, "modes", NULL, &reason, arg);
    assert_string_equal (json_string_value (json_object_get (reply, "planner-1")), "plan");
    json_decref (reply);

    args = json_pack ("{s:s, s:s}", "agent", "planner-1", "mode", "sleep");
    reply = stage_control (&callbacks, "mode", args, &reason, arg);
    json_decref (args);
    assert_null (reply);
    assert_string_equal (reason, "mode must be \"plan\" or \"normal\"");
    zstr_free (&reason);

    args = json_pack ("{s:i, s:s}", "agent", 7, "mode", "plan");
    reply = stage_control (&callbacks, "mode", args, &reason, arg);
    json_decref (args);
    assert_null (reply);
    assert_non_null (reason);
    zstr_free (&reason);

    reply = stage_control (&callbacks, "nonsense", NULL, &reason, arg);
    assert_null (reply);
    assert_null (reason);
    callbacks.on_destroy (arg);

    zconfig_t *settings = zconfig_str_load ("allow = \"x\"\nbogus = 1\n");
    assert_int_equal (dsh_planmode_setup (settings, &context, &callbacks, &arg, error, sizeof error), -1);
    assert_string_equal (error, "unknown setting \"bogus\"");
    zconfig_destroy (&settings);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_mode_table),
        cmocka_unit_test (test_meta_override),
        cmocka_unit_test (test_allow_list),
        cmocka_unit_test (test_refusal),
        cmocka_unit_test (test_control),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
