/*  =========================================================================
    test_protocol_def - the C side of dsh/1's one definition

    dsh_protocol_def.h is generated from schemas/dsh_protocol.json. This
    test builds a FRONT command table from it the way the broker does (a
    handler per command, by name, so a command without one does not
    compile), checks that the rights it gives are those PROTOCOL.md states
    (What the broker enforces under CURVE), and that libdsh's codec agrees
    with the definition on error names and limits.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "dsh_curve.h"
#include "dsh_doc.h"
#include "dsh_json.h"
#include "dsh_proto.h"

//  One stub handler per FRONT request, named as the broker names its own:
//  the table below takes s_handle_##name of every command the definition
//  lists, so a command added to it without a handler fails to compile.
static const char *s_handled;
#define S_HANDLER(NAME, name, COMMAND, RIGHTS, NEED) \
    static void s_handle_##name (void) { s_handled = COMMAND; }
DSH_FRONT_REQUESTS (S_HANDLER)
#undef S_HANDLER

#define S_ENTRY(NAME, name, COMMAND, RIGHTS, NEED) { COMMAND, s_handle_##name, RIGHTS, NEED },
static const struct {
    const char *command;
    void (*handler) (void);
    unsigned rights;
    const char *need;
} s_front_commands [] = {
    DSH_FRONT_REQUESTS (S_ENTRY)
};
#undef S_ENTRY

#define S_RULE(NAME, COMMAND, FIELD, MATCH, VALUE, RIGHTS, NEED) { COMMAND, FIELD, MATCH, VALUE, RIGHTS, NEED },
static const struct {
    const char *command;
    const char *field;
    dsh_match_t match;
    const char *value;
    unsigned rights;
    const char *need;
} s_front_rights_when [] = {
    DSH_FRONT_RIGHTS_WHEN (S_RULE)
};
#undef S_RULE

#define S_COUNT(array) (sizeof (array) / sizeof ((array) [0]))

//  The rights a FRONT request needs, as the broker reads them off the
//  tables: the first rule of the command whose field matches, else the
//  command's own. Sets *need to the role a FORBIDDEN text names.
static unsigned
s_front_rights (const char *command, const msgpack_object *root, const char **need)
{
    for (size_t index = 0; index < S_COUNT (s_front_rights_when); index++) {
        if (!streq (s_front_rights_when [index].command, command))
            continue;
        const msgpack_object *value = dsh_map_get (root, s_front_rights_when [index].field);
        bool match = s_front_rights_when [index].match == DSH_MATCH_PRESENT? value != NULL:
                     s_front_rights_when [index].match == DSH_MATCH_ABSENT? value == NULL:
                     dsh_str_eq (value, s_front_rights_when [index].value);
        if (match) {
            *need = s_front_rights_when [index].need;
            return s_front_rights_when [index].rights;
        }
    }
    for (size_t index = 0; index < S_COUNT (s_front_commands); index++)
        if (streq (s_front_commands [index].command, command)) {
            *need = s_front_commands [index].need;
            return s_front_commands [index].rights;
        }
    fail_msg ("%s is no FRONT request", command);
    return 0;
}

//  May a key of role send this request (body as JSON)? Returns the need.
static bool
s_may (const char *command, const char *json, const char *role, const char **need)
{
    msgpack_sbuffer sbuf;
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack (json, &sbuf, error, sizeof (error)), 0);
    dsh_doc_t *doc = dsh_doc_new (sbuf.data, sbuf.size, error, sizeof (error));
    assert_non_null (doc);
    const char *ignored;
    unsigned rights = s_front_rights (command, dsh_doc_root (doc), need? need: &ignored);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&sbuf);
    return dsh_rights_allow (rights, role);
}

//  Every FRONT request has its handler, and the table dispatches by name
static void
test_front_table (void **state)
{
    (void) state;
    assert_int_equal (S_COUNT (s_front_commands), 12);
    for (size_t index = 0; index < S_COUNT (s_front_commands); index++) {
        s_handled = NULL;
        s_front_commands [index].handler ();
        assert_string_equal (s_handled, s_front_commands [index].command);
        assert_true (strlen (s_front_commands [index].command) <= DSH_COMMAND_MAX);
    }
}

//  The rights are PROTOCOL.md's table, What the broker enforces under CURVE
static void
test_front_rights (void **state)
{
    (void) state;
    const char *need = NULL;
    //  Any allowed key, even one without a role
    const char *open [] = { DSH_PING, DSH_LIST, DSH_GET, DSH_SNAPSHOT, DSH_CHAIN, DSH_STATS, DSH_HELLO };
    for (size_t index = 0; index < S_COUNT (open); index++) {
        assert_true (s_may (open [index], "{}", NULL, &need));
        assert_null (need);
    }
    //  CALL, CANCEL: an agent or admin key
    assert_true (s_may (DSH_CALL, "{}", DSH_ROLE_AGENT, &need));
    assert_string_equal (need, "agent");
    assert_true (s_may (DSH_CANCEL, "{}", DSH_ROLE_ADMIN, NULL));
    assert_false (s_may (DSH_CALL, "{}", DSH_ROLE_COMPONENT, NULL));
    assert_false (s_may (DSH_CALL, "{}", DSH_ROLE_APPROVER, NULL));
    assert_false (s_may (DSH_CALL, "{}", NULL, NULL));
    //  HELLO with stage: a stage or admin key
    assert_true (s_may (DSH_HELLO, "{\"stage\":\"audit\"}", DSH_ROLE_STAGE, &need));
    assert_string_equal (need, "stage");
    assert_true (s_may (DSH_HELLO, "{\"stage\":\"audit\"}", DSH_ROLE_ADMIN, NULL));
    assert_false (s_may (DSH_HELLO, "{\"stage\":\"audit\"}", DSH_ROLE_AGENT, NULL));
    //  AUDIT: an auditor or admin key
    assert_true (s_may (DSH_AUDIT, "{}", DSH_ROLE_AUDITOR, &need));
    assert_string_equal (need, "auditor");
    assert_false (s_may (DSH_AUDIT, "{}", DSH_ROLE_APPROVER, NULL));
    //  PINS: list and show for auditors and approvers, the rest an admin's
    assert_true (s_may (DSH_PINS, "{}", DSH_ROLE_APPROVER, &need));
    assert_string_equal (need, "auditor");
    assert_true (s_may (DSH_PINS, "{\"op\":\"show\"}", DSH_ROLE_AUDITOR, NULL));
    assert_false (s_may (DSH_PINS, "{\"op\":\"accept\"}", DSH_ROLE_AUDITOR, &need));
    assert_string_equal (need, "admin");
    assert_false (s_may (DSH_PINS, "{\"op\":1}", DSH_ROLE_APPROVER, NULL));
    assert_true (s_may (DSH_PINS, "{\"op\":\"forget\"}", DSH_ROLE_ADMIN, NULL));
    //  CONTROL: admin; approvals' commands an approver's; allowed and modes an agent's
    const char *approver [] = { "approve", "deny", "pending", "approvals", "grants", "revoke" };
    for (size_t index = 0; index < S_COUNT (approver); index++) {
        char body [128];
        snprintf (body, sizeof (body), "{\"stage\":\"p\",\"command\":\"%s\"}", approver [index]);
        assert_true (s_may (DSH_CONTROL, body, DSH_ROLE_APPROVER, &need));
        assert_string_equal (need, "approver");
        assert_false (s_may (DSH_CONTROL, body, DSH_ROLE_AGENT, NULL));
    }
    assert_true (s_may (DSH_CONTROL, "{\"stage\":\"p\",\"command\":\"modes\"}", DSH_ROLE_AGENT, NULL));
    assert_true (s_may (DSH_CONTROL, "{\"stage\":\"p\",\"command\":\"allowed\"}", DSH_ROLE_AGENT, NULL));
    assert_false (s_may (DSH_CONTROL, "{\"stage\":\"p\",\"command\":\"mode\"}", DSH_ROLE_AGENT, &need));
    assert_string_equal (need, "admin");
    assert_true (s_may (DSH_CONTROL, "{\"stage\":\"p\",\"command\":\"mode\"}", DSH_ROLE_ADMIN, NULL));
    //  An admin key has every role but component
    assert_false (dsh_rights_allow (DSH_RIGHT_COMPONENT, DSH_ROLE_ADMIN));
    assert_true (dsh_rights_allow (DSH_RIGHT_ANY, NULL));
    assert_false (dsh_rights_allow (DSH_RIGHT_NONE, DSH_ROLE_ADMIN));
}

//  The other sockets' lists: names, token frames, rights
#define S_WORK(NAME, name, COMMAND, RIGHTS, TOKEN) { COMMAND, RIGHTS, TOKEN },
#define S_WORK_OUT(NAME, COMMAND, TOKEN) { COMMAND, DSH_RIGHT_NONE, TOKEN },
#define S_ANNOUNCE(NAME, name, COMMAND, RIGHTS) { COMMAND, RIGHTS, false },
static const struct {
    const char *command;
    unsigned rights;
    bool token;
} s_work_in [] = { DSH_WORK_FROM_COMPONENT (S_WORK) },
  s_work_out [] = { DSH_WORK_FROM_BROKER (S_WORK_OUT) },
  s_announce [] = { DSH_ANNOUNCE_COMMANDS (S_ANNOUNCE) };

static void
test_other_sockets (void **state)
{
    (void) state;
    for (size_t index = 0; index < S_COUNT (s_work_in); index++) {
        assert_int_equal (s_work_in [index].rights, DSH_RIGHT_COMPONENT);
        assert_int_equal (s_work_in [index].token, !streq (s_work_in [index].command, DSH_HELLO));
    }
    for (size_t index = 0; index < S_COUNT (s_work_out); index++)
        assert_int_equal (s_work_out [index].token, streq (s_work_out [index].command, DSH_CALL)
                                                     || streq (s_work_out [index].command, DSH_CANCEL));
    assert_int_equal (S_COUNT (s_announce), 3);
    for (size_t index = 0; index < S_COUNT (s_announce); index++)
        assert_int_equal (s_announce [index].rights, DSH_RIGHT_COMPONENT);
}

//  libdsh's error names are the definition's
#define S_ERROR(CODE, code, name) { CODE, code, name },
static const struct {
    const char *define, *code, *name;
} s_errors [] = { DSH_ERROR_CODES (S_ERROR) };

static void
test_errors_and_limits (void **state)
{
    (void) state;
    for (size_t index = 0; index < S_COUNT (s_errors); index++) {
        assert_string_equal (s_errors [index].define, s_errors [index].code);
        assert_string_equal (dsh_proto_error_name (s_errors [index].code), s_errors [index].name);
    }
    assert_string_equal (dsh_proto_error_name ("NO_SUCH_CODE"), DSH_ERROR_NAME_UNKNOWN);
    assert_int_equal (DSH_BODY_DEPTH_MAX, DSH_DOC_MAX_DEPTH);
    assert_true (dsh_proto_valid_name ("a", 1));
    char name [DSH_NAME_MAX + 2];
    memset (name, 'a', sizeof (name));
    assert_true (dsh_proto_valid_name (name, DSH_NAME_MAX));
    assert_false (dsh_proto_valid_name (name, DSH_NAME_MAX + 1));
    assert_true (dsh_proto_valid_id (name, DSH_ID_MAX));
    assert_false (dsh_proto_valid_id (name, DSH_ID_MAX + 1));
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_front_table),
        cmocka_unit_test (test_front_rights),
        cmocka_unit_test (test_other_sockets),
        cmocka_unit_test (test_errors_and_limits),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
