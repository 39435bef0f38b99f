/*  =========================================================================
    test_stage_brokers - the chain's outside parts on several brokers

    One `dsh-stage --broker A,B` process serves the external stage of both
    brokers' chains: calls through either broker, many at once on both,
    pass it and come back on the broker they came from. A broker that was
    down when the stage started gets the stage once it is up, and again
    after it restarts on other ports. `dsh --broker A,B mode AGENT plan` sets the mode in both
    brokers' plan stages, and says which broker did not take it when one
    is down. `dsh --broker A,B approver` answers the asks of both brokers'
    permission stages, each on the socket it came from. Bad broker lists are usage errors (exit 2), with the entry
    named, in dsh, dsh-stage and dsh-mcp.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <unistd.h>

#include "dsh.h"
#include "dsh_testkit.h"

#define DEMO        "components/demo/dsh-demo"
#define CALLS       20          //  in flight at once on each broker

typedef struct {
    dsh_testproc_t *broker;
    dsh_testproc_t *demo;
    dsh_client_t *client;
    char endpoint [256];
} site_t;

static void
s_site_start (site_t *self, const char *config)
{
    self->broker = dsh_testkit_broker_config (200, config, self->endpoint, sizeof (self->endpoint));
    assert_non_null (self->broker);
    self->demo = dsh_testkit_component (DEMO, self->endpoint, "demo", NULL);
    assert_non_null (self->demo);
    assert_int_equal (dsh_testkit_wait_tools (self->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    self->client = dsh_client_new (self->endpoint);
    assert_non_null (self->client);
}

static void
s_site_stop (site_t *self)
{
    dsh_client_destroy (&self->client);
    dsh_testproc_destroy (&self->demo);
    dsh_testproc_destroy (&self->broker);
}

//  The text of a call of echo through the site, as agent (NULL: none).
static char *
s_echo (site_t *self, const char *message, const char *agent, char **code)
{
    char args [128], error [256];
    snprintf (args, sizeof (args), "{\"message\":\"%s\"}", message);
    dsh_reply_t *reply = dsh_client_call (self->client, "echo", args, agent, 10000, error, sizeof (error));
    if (!reply)
        fail_msg ("echo through %s: %s", self->endpoint, error);
    char *text = strdup (dsh_reply_text (reply)? dsh_reply_text (reply): "");
    if (code)
        *code = dsh_reply_error_code (reply)? strdup (dsh_reply_error_code (reply)): NULL;
    dsh_reply_destroy (&reply);
    return text;
}

//  tick {ms: 1} (a tool that is not read-only) through self as agent: its
//  error code (caller frees), or NULL if it ran.
static char *
s_tick_code (site_t *self, const char *agent)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_call (self->client, "tick", "{\"ms\":1}", agent, 10000, error, sizeof (error));
    if (!reply)
        fail_msg ("tick through %s: %s", self->endpoint, error);
    char *code = dsh_reply_error_code (reply)? strdup (dsh_reply_error_code (reply)): NULL;
    dsh_reply_destroy (&reply);
    return code;
}

static const char *s_external_chain =
    "chain\n"
    "    stage\n"
    "        name = \"remote\"\n"
    "        kind = \"external\"\n"
    "        timeout_ms = 3000\n";

static void
test_one_stage_two_brokers (void **state)
{
    (void) state;
    site_t a = { NULL }, b = { NULL };
    s_site_start (&a, s_external_chain);
    s_site_start (&b, s_external_chain);
    char list [600];
    snprintf (list, sizeof (list), "%s,%s", a.endpoint, b.endpoint);
    const char *argv [] = { "components/middleware/dsh-stage", "--broker", list, "--name", "remote",
                            "--kind", "trace", NULL };
    dsh_testproc_t *stage = dsh_testproc_start (argv);
    assert_non_null (stage);
    char *line = dsh_testproc_wait_line (stage, "attached", 10000);
    assert_non_null (line);
    free (line);

    //  Through either broker, the one process is in the chain
    site_t *sites [] = { &a, &b };
    for (size_t index = 0; index < 2; index++) {
        int64_t give_up = zclock_mono () + 5000;
        char *text = NULL;
        while (zclock_mono () < give_up) {
            zstr_free (&text);
            text = s_echo (sites [index], "m", NULL, NULL);
            if (!strstr (text, "not connected"))
                break;
            zclock_sleep (50);
        }
        assert_string_equal (text, "m remote:before remote:after");
        zstr_free (&text);
    }

    //  Many calls at once through both: every result (watched by the stage
    //  on its way up) goes back on the link its call came down, to the
    //  broker and caller it belongs to
    char error [256];
    for (size_t index = 0; index < 2; index++)
        for (int call = 0; call < CALLS; call++) {
            char call_id [32], args [96];
            snprintf (call_id, sizeof (call_id), "%c%d", index? 'b': 'a', call);
            snprintf (args, sizeof (args), "{\"message\":\"%s\"}", call_id);
            assert_non_null (dsh_testkit_send_json (sites [index]->client, call_id, "echo", args, 10000));
        }
    for (size_t index = 0; index < 2; index++) {
        int seen [CALLS] = { 0 };
        for (int call = 0; call < CALLS; call++) {
            dsh_reply_t *reply = dsh_client_recv (sites [index]->client, 10000);
            assert_non_null (reply);
            const char *call_id = dsh_reply_call_id (reply);
            assert_int_equal (call_id [0], index? 'b': 'a');
            int number = atoi (call_id + 1);
            assert_true (number >= 0 && number < CALLS);
            seen [number]++;
            char expected [96];
            snprintf (expected, sizeof (expected), "%s remote:before remote:after", call_id);
            assert_string_equal (dsh_reply_text (reply), expected);
            dsh_reply_destroy (&reply);
        }
        for (int call = 0; call < CALLS; call++)
            assert_int_equal (seen [call], 1);
    }

    //  A control command through either broker is answered on its link
    for (size_t index = 0; index < 2; index++) {
        dsh_reply_t *reply = dsh_client_control (sites [index]->client, "remote", "no-such-command", NULL, 5000,
                                                 error, sizeof (error));
        assert_non_null (reply);
        assert_string_equal (dsh_reply_command (reply), DSH_CONTROL);
        dsh_reply_destroy (&reply);
    }
    dsh_testproc_destroy (&stage);
    s_site_stop (&a);
    s_site_stop (&b);
}

static void
test_stage_on_a_broker_without_it (void **state)
{
    (void) state;
    //  B has no such stage: a mistake in the list or the config, said so
    site_t a = { NULL }, b = { NULL };
    s_site_start (&a, s_external_chain);
    s_site_start (&b, "chain\n");
    char list [600];
    snprintf (list, sizeof (list), "%s,%s", a.endpoint, b.endpoint);
    const char *argv [] = { "components/middleware/dsh-stage", "--broker", list, "--name", "remote",
                            "--kind", "trace", NULL };
    dsh_testproc_t *stage = dsh_testproc_start_merged (argv);
    assert_non_null (stage);
    assert_int_equal (dsh_testproc_wait (stage, 15000), 2);
    const char *output = dsh_testproc_output (stage, 1000);
    assert_non_null (strstr (output, b.endpoint));
    assert_non_null (strstr (output, "no external stage"));
    dsh_testproc_destroy (&stage);
    s_site_stop (&a);
    s_site_stop (&b);
}

//  dsh-broker on front (its other sockets on any free port) with config;
//  its front endpoint into endpoint.
static dsh_testproc_t *
s_broker_at (const char *front, const char *config, char *endpoint, size_t size)
{
    char path [] = "/tmp/dsh-config-XXXXXX";
    int fd = mkstemp (path);
    assert_true (fd >= 0);
    assert_int_equal (write (fd, config, strlen (config)), (ssize_t) strlen (config));
    close (fd);
    const char *argv [] = { "broker/dsh-broker", "-c", path, "--endpoint", front,
                            "--announce", "tcp://127.0.0.1:!", "--work", "tcp://127.0.0.1:!",
                            "--events", "tcp://127.0.0.1:!", "--heartbeat-ms", "200", NULL };
    dsh_testproc_t *broker = dsh_testproc_start (argv);
    assert_non_null (broker);
    char *line = dsh_testproc_wait_line (broker, "listening on ", 10000);
    unlink (path);
    assert_non_null (line);
    const char *start = strstr (line, "listening on ") + strlen ("listening on ");
    snprintf (endpoint, size, "%.*s", (int) strcspn (start, " "), start);
    free (line);
    return broker;
}

//  Calls echo through site until the stage is there; its text.
static char *
s_echo_staged (site_t *self)
{
    int64_t give_up = zclock_mono () + 15000;
    char *text = NULL;
    while (zclock_mono () < give_up) {
        zstr_free (&text);
        text = s_echo (self, "m", NULL, NULL);
        if (!strstr (text, "not connected"))
            break;
        zclock_sleep (100);
    }
    return text;
}

//  An external stage whose slot is on random ports: a broker restarted
//  with it binds others
static const char *s_moving_chain =
    "chain\n"
    "    stage\n"
    "        name = \"remote\"\n"
    "        kind = \"external\"\n"
    "        timeout_ms = 3000\n"
    "        feed = \"tcp://127.0.0.1:!\"\n"
    "        drain = \"tcp://127.0.0.1:!\"\n";

//  Where the stage "remote" of the broker at site has its feed (CHAIN).
static char *
s_feed (site_t *self)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_request (self->client, DSH_CHAIN, NULL, 5000, error, sizeof (error));
    assert_non_null (reply);
    json_t *body = dsh_reply_json (reply);
    dsh_reply_destroy (&reply);
    json_t *stage = json_array_get (json_object_get (body, "stages"), 0);
    assert_non_null (stage);
    char *where = strdup (json_string_value (json_object_get (stage, "where")));
    json_decref (body);
    return where;
}

static void
test_stage_follows_a_broker_back (void **state)
{
    (void) state;
    site_t a = { NULL }, b = { NULL };
    s_site_start (&a, s_external_chain);
    //  B's front, free now: B is down when the stage starts
    b.broker = s_broker_at ("tcp://127.0.0.1:!", s_moving_chain, b.endpoint, sizeof (b.endpoint));
    dsh_testproc_signal (b.broker, SIGKILL);
    dsh_testproc_wait (b.broker, 5000);
    dsh_testproc_destroy (&b.broker);

    char list [600];
    snprintf (list, sizeof (list), "%s,%s", a.endpoint, b.endpoint);
    const char *argv [] = { "components/middleware/dsh-stage", "--broker", list, "--name", "remote",
                            "--kind", "trace", NULL };
    dsh_testproc_t *stage = dsh_testproc_start (argv);
    assert_non_null (stage);
    char *line = dsh_testproc_wait_line (stage, "attached", 10000);
    assert_non_null (line);
    free (line);
    char *text = s_echo_staged (&a);
    assert_string_equal (text, "m remote:before remote:after");
    zstr_free (&text);

    //  B comes up, then restarts with its slot on new ports: each time the
    //  stage finds the slot, and calls through B pass it
    char *feeds [2] = { NULL, NULL };
    for (int round = 0; round < 2; round++) {
        char endpoint [256];
        b.broker = s_broker_at (b.endpoint, s_moving_chain, endpoint, sizeof (endpoint));
        assert_string_equal (endpoint, b.endpoint);
        b.demo = dsh_testkit_component (DEMO, b.endpoint, "demo", NULL);
        assert_non_null (b.demo);
        assert_int_equal (dsh_testkit_wait_tools (b.endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
        b.client = dsh_client_new (b.endpoint);
        feeds [round] = s_feed (&b);
        text = s_echo_staged (&b);
        assert_string_equal (text, "m remote:before remote:after");
        zstr_free (&text);
        dsh_testproc_signal (b.broker, SIGKILL);
        dsh_testproc_wait (b.broker, 5000);
        s_site_stop (&b);
    }
    assert_string_not_equal (feeds [0], feeds [1]);
    zstr_free (&feeds [0]);
    zstr_free (&feeds [1]);
    //  A was served throughout
    text = s_echo_staged (&a);
    assert_string_equal (text, "m remote:before remote:after");
    zstr_free (&text);
    dsh_testproc_destroy (&stage);
    s_site_stop (&a);
}

static const char *s_plan_chain =
    "chain\n"
    "    stage\n"
    "        name = \"plan\"\n"
    "        kind = \"plan\"\n";

static void
test_mode_on_every_broker (void **state)
{
    (void) state;
    site_t a = { NULL }, b = { NULL };
    s_site_start (&a, s_plan_chain);
    s_site_start (&b, s_plan_chain);
    char list [600];
    snprintf (list, sizeof (list), "%s,%s", a.endpoint, b.endpoint);

    char *output = NULL;
    const char *plan [] = { "mode", "planner", "plan", NULL };
    assert_int_equal (dsh_testkit_cli (list, plan, 10000, &output), 0);
    json_t *answers = json_loads (output, 0, NULL);
    assert_non_null (answers);
    assert_int_equal (json_array_size (answers), 2);
    assert_string_equal (json_string_value (json_object_get (json_array_get (answers, 0), "broker")), a.endpoint);
    assert_string_equal (json_string_value (json_object_get (json_array_get (answers, 1), "broker")), b.endpoint);
    assert_true (json_is_true (json_object_get (json_array_get (answers, 0), "ok")));
    assert_true (json_is_true (json_object_get (json_array_get (answers, 1), "ok")));
    json_decref (answers);
    zstr_free (&output);

    //  Whichever broker the agent's calls go through, it is planning
    site_t *sites [] = { &a, &b };
    for (size_t index = 0; index < 2; index++) {
        char *code = s_tick_code (sites [index], "planner");
        assert_non_null (code);
        assert_string_equal (code, DSH_E_DENIED);
        zstr_free (&code);
    }

    //  B is gone: A takes the change, and the command fails, naming B
    s_site_stop (&b);
    const char *normal [] = { "--timeout-ms", "1500", "mode", "planner", "normal", NULL };
    int status = dsh_testkit_cli_merged (list, normal, 20000, &output);
    assert_int_equal (status, 3);
    assert_non_null (strstr (output, "dsh: broker "));
    char *named = strstr (output, "dsh: broker ");
    assert_memory_equal (named + strlen ("dsh: broker "), b.endpoint, strlen (b.endpoint));
    zstr_free (&output);
    char *code = s_tick_code (&a, "planner");
    assert_null (code);
    s_site_stop (&a);
}

static const char *s_ask_chain =
    "chain\n"
    "    stage\n"
    "        name = \"permission\"\n"
    "        kind = \"permission\"\n"
    "        default = \"allow\"\n"
    "        rule\n"
    "            tool = \"echo\"\n"
    "            action = \"ask\"\n";

static void
test_approver_on_every_broker (void **state)
{
    (void) state;
    site_t a = { NULL }, b = { NULL };
    s_site_start (&a, s_ask_chain);
    s_site_start (&b, s_ask_chain);
    char list [600];
    snprintf (list, sizeof (list), "%s,%s", a.endpoint, b.endpoint);
    const char *argv [] = { "components/cli/dsh", "--broker", list, "approver", "--auto", "allow", NULL };
    dsh_testproc_t *approver = dsh_testproc_start (argv);
    assert_non_null (approver);

    //  Until the approver has said hello to both stages, an ask is refused
    //  at once; then calls through either broker are asked and allowed
    site_t *sites [] = { &a, &b };
    for (size_t index = 0; index < 2; index++) {
        int64_t give_up = zclock_mono () + 10000;
        char *text = NULL, *code = NULL;
        while (zclock_mono () < give_up) {
            zstr_free (&text);
            zstr_free (&code);
            text = s_echo (sites [index], "asked", NULL, &code);
            if (!code)
                break;
            zclock_sleep (100);
        }
        assert_null (code);
        assert_string_equal (text, "asked");
        zstr_free (&text);
    }
    //  Each request was shown once, and resolved
    dsh_testproc_signal (approver, SIGTERM);
    assert_int_equal (dsh_testproc_wait (approver, 10000), 0);
    const char *output = dsh_testproc_output (approver, 1000);
    size_t pending = 0, allowed = 0;
    for (const char *cursor = output; (cursor = strstr (cursor, "\"event\":\"pending\"")); cursor++)
        pending++;
    for (const char *cursor = output; (cursor = strstr (cursor, "\"outcome\":\"allowed\"")); cursor++)
        allowed++;
    assert_int_equal (pending, 2);
    assert_int_equal (allowed, 2);
    dsh_testproc_destroy (&approver);
    s_site_stop (&a);
    s_site_stop (&b);
}

static void
test_bad_lists (void **state)
{
    (void) state;
    const char *lists [] = { "tcp://127.0.0.1:7570,", "tcp://127.0.0.1:7570,,tcp://127.0.0.1:7571",
                             "tcp://127.0.0.1:7570,nonsense", NULL };
    for (size_t index = 0; lists [index]; index++) {
        char *output = NULL;
        const char *tools [] = { "tools", NULL };
        assert_int_equal (dsh_testkit_cli_merged (lists [index], tools, 10000, &output), 2);
        assert_non_null (strstr (output, "broker list"));
        zstr_free (&output);
        const char *mode [] = { "mode", "x", "plan", NULL };
        assert_int_equal (dsh_testkit_cli_merged (lists [index], mode, 10000, &output), 2);
        zstr_free (&output);

        const char *stage_argv [] = { "components/middleware/dsh-stage", "--broker", lists [index], "--name", "s",
                                      "--kind", "trace", NULL };
        dsh_testproc_t *stage = dsh_testproc_start_merged (stage_argv);
        assert_non_null (stage);
        assert_int_equal (dsh_testproc_wait (stage, 10000), 2);
        assert_non_null (strstr (dsh_testproc_output (stage, 1000), "broker list"));
        dsh_testproc_destroy (&stage);

        const char *mcp_argv [] = { "components/mcp/dsh-mcp", "--broker", lists [index], NULL };
        dsh_testproc_t *mcp = dsh_testproc_start_merged (mcp_argv);
        assert_non_null (mcp);
        assert_int_equal (dsh_testproc_wait (mcp, 10000), 2);
        assert_non_null (strstr (dsh_testproc_output (mcp, 1000), "broker list"));
        dsh_testproc_destroy (&mcp);
    }
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_bad_lists),
        cmocka_unit_test (test_one_stage_two_brokers),
        cmocka_unit_test (test_stage_on_a_broker_without_it),
        cmocka_unit_test (test_stage_follows_a_broker_back),
        cmocka_unit_test (test_mode_on_every_broker),
        cmocka_unit_test (test_approver_on_every_broker),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
