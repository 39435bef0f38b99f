/*  =========================================================================
    test_sandbox - the sandbox middleware: settings, the policy per agent,
    and which tools read-only refuses
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

#include <string.h>

#include "dsh_sandbox.h"

static dsh_sandbox_t *
s_load (const char *text, char *error, size_t error_size)
{
    zconfig_t *config = zconfig_str_load (text);
    assert_non_null (config);
    dsh_sandbox_t *sandbox = dsh_sandbox_new (zconfig_locate (config, "stage"), error, error_size);
    zconfig_destroy (&config);
    return sandbox;
}

static void
test_policy_names (void **state)
{
    (void) state;
    dsh_sandbox_policy_t policy;
    assert_int_equal (dsh_sandbox_policy_parse ("read-only", &policy), 0);
    assert_int_equal (policy, DSH_SANDBOX_READ_ONLY);
    assert_int_equal (dsh_sandbox_policy_parse ("workspace-write", &policy), 0);
    assert_int_equal (policy, DSH_SANDBOX_WORKSPACE_WRITE);
    assert_int_equal (dsh_sandbox_policy_parse ("danger-full-access", &policy), 0);
    assert_int_equal (policy, DSH_SANDBOX_DANGER_FULL_ACCESS);
    assert_int_equal (dsh_sandbox_policy_parse ("full", &policy), -1);
    assert_int_equal (dsh_sandbox_policy_parse (NULL, &policy), -1);
    assert_string_equal (dsh_sandbox_policy_name (DSH_SANDBOX_WORKSPACE_WRITE), "workspace-write");
    assert_string_equal (dsh_sandbox_policy_name (DSH_SANDBOX_READ_ONLY), "read-only");
    assert_string_equal (dsh_sandbox_policy_name (DSH_SANDBOX_DANGER_FULL_ACCESS), "danger-full-access");
}

static void
test_defaults (void **state)
{
    (void) state;
    char error [256];
    dsh_sandbox_t *sandbox = dsh_sandbox_new (NULL, error, sizeof error);
    assert_non_null (sandbox);
    const char *workspace = "unset";
    assert_int_equal (dsh_sandbox_policy_for (sandbox, "anyone", &workspace), DSH_SANDBOX_READ_ONLY);
    assert_null (workspace);
    assert_int_equal (dsh_sandbox_policy_for (sandbox, NULL, NULL), DSH_SANDBOX_READ_ONLY);
    dsh_sandbox_destroy (&sandbox);
    assert_null (sandbox);
    dsh_sandbox_destroy (&sandbox);
}

static void
test_agents (void **state)
{
    (void) state;
    char error [256] = "";
    dsh_sandbox_t *sandbox = s_load (
        "stage\n"
        "    default = \"workspace-write\"\n"
        "    workspace = \"/srv/ws\"\n"
        "    kind = \"sandbox\"\n"
        "    agent\n"
        "        id = \"planner-*\"\n"
        "        policy = \"read-only\"\n"
        "    agent\n"
        "        id = \"builder\"\n"
        "        policy = \"workspace-write\"\n"
        "        workspace = \"/srv/build\"\n"
        "    agent\n"
        "        id = \"*\"\n"
        "        policy = \"danger-full-access\"\n"
        "    agent\n"
        "        id = \"never\"\n"
        "        policy = \"read-only\"\n", error, sizeof error);
    assert_non_null (sandbox);
    const char *workspace = NULL;
    assert_int_equal (dsh_sandbox_policy_for (sandbox, "planner-1", &workspace), DSH_SANDBOX_READ_ONLY);
    assert_string_equal (workspace, "/srv/ws");
    assert_int_equal (dsh_sandbox_policy_for (sandbox, "builder", &workspace), DSH_SANDBOX_WORKSPACE_WRITE);
    assert_string_equal (workspace, "/srv/build");
    //  First match wins: "*" hides the later "never"
    assert_int_equal (dsh_sandbox_policy_for (sandbox, "never", &workspace), DSH_SANDBOX_DANGER_FULL_ACCESS);
    assert_int_equal (dsh_sandbox_policy_for (sandbox, NULL, &workspace), DSH_SANDBOX_DANGER_FULL_ACCESS);
    dsh_sandbox_destroy (&sandbox);

    sandbox = s_load ("stage\n    default = \"workspace-write\"\n    workspace = \"/w\"\n", error, sizeof error);
    assert_int_equal (dsh_sandbox_policy_for (sandbox, "x", &workspace), DSH_SANDBOX_WORKSPACE_WRITE);
    assert_string_equal (workspace, "/w");
    dsh_sandbox_destroy (&sandbox);
}

static void
test_bad_settings (void **state)
{
    (void) state;
    const struct { const char *text, *reason; } cases [] = {
        { "stage\n    default = \"everything\"\n", "default" },
        { "stage\n    default = \"workspace-write\"\n", "workspace" },
        { "stage\n    agent\n        policy = \"read-only\"\n", "agent 1: id" },
        { "stage\n    agent\n        id = \"a\"\n        policy = \"rw\"\n", "agent 1: policy" },
        { "stage\n    agent\n        id = \"a\"\n        policy = \"workspace-write\"\n", "agent 1: workspace" },
        { "stage\n    agent\n        id = \"a\"\n        policy = \"read-only\"\n"
          "    agent\n        id = \"b\"\n        polcy = \"read-only\"\n", "agent 2: unknown" },
    };
    for (size_t index = 0; index < sizeof cases / sizeof cases [0]; index++) {
        char error [256] = "";
        dsh_sandbox_t *sandbox = s_load (cases [index].text, error, sizeof error);
        assert_null (sandbox);
        assert_non_null (strstr (error, cases [index].reason));
    }
    //  Setup fails the same way, and leaves nothing behind
    zconfig_t *config = zconfig_str_load (cases [0].text);
    dsh_stage_callbacks_t callbacks;
    void *arg = NULL;
    char error [256];
    assert_int_equal (dsh_sandbox_setup (zconfig_locate (config, "stage"), NULL, &callbacks, &arg,
                                         error, sizeof error), -1);
    assert_null (arg);
    zconfig_destroy (&config);
    assert_int_equal (dsh_sandbox_setup (NULL, NULL, &callbacks, &arg, error, sizeof error), 0);
    assert_non_null (callbacks.on_request);
    assert_null (callbacks.on_result);
    callbacks.on_destroy (arg);
}

static void
test_refuses (void **state)
{
    (void) state;
    //  Annotations as read with MCP's defaults: readOnlyHint false,
    //  destructiveHint true when absent
    assert_true (dsh_sandbox_refuses (DSH_SANDBOX_READ_ONLY, false, true));     //  none, or write_file
    assert_false (dsh_sandbox_refuses (DSH_SANDBOX_READ_ONLY, true, true));     //  readOnlyHint wins
    assert_false (dsh_sandbox_refuses (DSH_SANDBOX_READ_ONLY, true, false));
    assert_false (dsh_sandbox_refuses (DSH_SANDBOX_READ_ONLY, false, false));   //  additive only
    for (int read_only = 0; read_only < 2; read_only++)
        for (int destructive = 0; destructive < 2; destructive++) {
            assert_false (dsh_sandbox_refuses (DSH_SANDBOX_WORKSPACE_WRITE, read_only, destructive));
            assert_false (dsh_sandbox_refuses (DSH_SANDBOX_DANGER_FULL_ACCESS, read_only, destructive));
        }
}

//  Under a policy that confines writes, a tool that may write and does not
//  enforce the policy runs only when approved
static void
test_unconfined_needs_approval (void **state)
{
    (void) state;
    dsh_toolhints_t reader = { .read_only = true, .destructive = true, .open_world = true };
    dsh_toolhints_t writer = { .read_only = false, .destructive = true, .open_world = true };
    dsh_toolhints_t additive = { .read_only = false, .destructive = false, .open_world = true };
    dsh_toolhints_t confined = { .read_only = false, .destructive = true, .confined = true };
    dsh_toolhints_t confined_additive = { .read_only = false, .destructive = false, .confined = true };
    dsh_sandbox_policy_t confining [] = { DSH_SANDBOX_WORKSPACE_WRITE, DSH_SANDBOX_READ_ONLY };
    for (size_t index = 0; index < 2; index++) {
        dsh_sandbox_policy_t policy = confining [index];
        for (int approved = 0; approved < 2; approved++)
            assert_int_equal (dsh_sandbox_check (policy, &reader, approved), DSH_SANDBOX_PASSED);
        assert_int_equal (dsh_sandbox_check (policy, &additive, false), DSH_SANDBOX_UNCONFINED);
        assert_int_equal (dsh_sandbox_check (policy, &additive, true), DSH_SANDBOX_PASSED);
        assert_int_equal (dsh_sandbox_check (policy, &confined_additive, false), DSH_SANDBOX_PASSED);
    }
    assert_int_equal (dsh_sandbox_check (DSH_SANDBOX_WORKSPACE_WRITE, &writer, false), DSH_SANDBOX_UNCONFINED);
    assert_int_equal (dsh_sandbox_check (DSH_SANDBOX_WORKSPACE_WRITE, &writer, true), DSH_SANDBOX_PASSED);
    assert_int_equal (dsh_sandbox_check (DSH_SANDBOX_WORKSPACE_WRITE, &confined, false), DSH_SANDBOX_PASSED);
    //  Read-only refuses a destructive tool whatever a human said, confined or not
    assert_int_equal (dsh_sandbox_check (DSH_SANDBOX_READ_ONLY, &writer, true), DSH_SANDBOX_REFUSED);
    assert_int_equal (dsh_sandbox_check (DSH_SANDBOX_READ_ONLY, &confined, false), DSH_SANDBOX_REFUSED);
    //  Full access: the component's own limits only
    assert_int_equal (dsh_sandbox_check (DSH_SANDBOX_DANGER_FULL_ACCESS, &writer, false), DSH_SANDBOX_PASSED);
}

//  The approval stamp counts only from the stage named, which must come
//  before the sandbox in the chain
static void
test_approval_setting (void **state)
{
    (void) state;
    zconfig_t *config = zconfig_str_load (
        "chain\n"
        "    stage\n        name = \"ask\"\n        kind = \"permission\"\n"
        "    stage\n        name = \"box\"\n        kind = \"sandbox\"\n"
        "        default = \"read-only\"\n        approval = \"ask\"\n"
        "    stage\n        name = \"late\"\n        kind = \"permission\"\n");
    assert_non_null (config);
    zconfig_t *box = zconfig_next (zconfig_child (zconfig_locate (config, "chain")));
    char error [256] = "";
    dsh_sandbox_t *sandbox = dsh_sandbox_new (box, error, sizeof error);
    assert_non_null (sandbox);
    assert_string_equal (dsh_sandbox_approval (sandbox), "ask");

    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 1);
    msgpack_pack_str_with_body (&pk, "approval", 8);
    msgpack_pack_map (&pk, 1);
    msgpack_pack_str_with_body (&pk, "stage", 5);
    msgpack_pack_str_with_body (&pk, "ask", 3);
    msgpack_zone zone;
    msgpack_zone_init (&zone, 256);
    msgpack_object meta;
    assert_int_equal (msgpack_unpack (sbuf.data, sbuf.size, NULL, &zone, &meta), MSGPACK_UNPACK_SUCCESS);
    assert_true (dsh_sandbox_approved (sandbox, &meta));
    assert_false (dsh_sandbox_approved (sandbox, NULL));
    dsh_sandbox_destroy (&sandbox);

    //  Another stage's stamp does not count
    zconfig_set_value (zconfig_locate (box, "approval"), "%s", "other");
    sandbox = dsh_sandbox_new (box, error, sizeof error);
    assert_non_null (sandbox);
    assert_false (dsh_sandbox_approved (sandbox, &meta));
    dsh_sandbox_destroy (&sandbox);

    //  A stage after the sandbox, or the sandbox itself, cannot be trusted
    const char *untrusted [] = { "late", "box" };
    for (size_t index = 0; index < 2; index++) {
        zconfig_set_value (zconfig_locate (box, "approval"), "%s", untrusted [index]);
        sandbox = dsh_sandbox_new (box, error, sizeof error);
        assert_null (sandbox);
        assert_non_null (strstr (error, "must come before this stage in the chain"));
    }
    zconfig_set_value (zconfig_locate (box, "approval"), "%s", "");
    assert_null (dsh_sandbox_new (box, error, sizeof error));
    assert_non_null (strstr (error, "approval: a stage name is required"));

    msgpack_zone_destroy (&zone);
    msgpack_sbuffer_destroy (&sbuf);
    zconfig_destroy (&config);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_policy_names),
        cmocka_unit_test (test_defaults),
        cmocka_unit_test (test_agents),
        cmocka_unit_test (test_bad_settings),
        cmocka_unit_test (test_refuses),
        cmocka_unit_test (test_unconfined_needs_approval),
        cmocka_unit_test (test_approval_setting),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
