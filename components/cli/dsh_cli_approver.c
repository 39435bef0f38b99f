/*  =========================================================================
    dsh_cli_approver - dsh approver: deciding what permission stages ask
    =========================================================================
*/

#include "dsh_cli.h"
#include "dsh_cli_approver.h"
#include "dsh_cli_chain.h"
#include "dsh_curve.h"
#include "dsh_doc.h"
#include "dsh_json.h"
#include "dsh_proto.h"
#include "dsh_sock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define APPROVER_HELLO_MS   1000        //  the stage forgets an approver silent for 3 s
#define APPROVER_POLL_MS    250
#define APPROVER_STAGE_SILENT_MS 3000   //  the stage heartbeats every 0.5 s
//  A PENDING carries the call's arguments whole, so it is as large as a
//  call (the broker's max_message_bytes, 16 MiB by default): a smaller
//  limit would cut the link on every large request and hide it for good
#define APPROVER_MAX_MESSAGE (4 * DSH_MAX_MESSAGE_DEFAULT)
#define STDIN_LINE_MAX      1024
#define GRANT_MINUTES_DEFAULT 15        //  the permission stage's grant_minutes default

static void
s_json_release (json_t **json_p)
{
    json_decref (*json_p);
    *json_p = NULL;
}

typedef struct {
    //  One DEALER per approvals socket: one broker's built-in permission
    //  stage each, or one for a stage process that serves several brokers
    zsock_t *dealers [DSH_BROKERS_MAX];
    char *endpoints [DSH_BROKERS_MAX];
    size_t dealer_count;
    zhashx_t *routes;           //  open request id -> the index of its dealer, plus 1
    const char *auto_outcome;   //  "allow", "deny", or NULL: decisions come from stdin
    int64_t grant_minutes;      //  --grant-minutes: how long t and a grant; 0 = the request's
    bool terminal;              //  readable requests and a y/N prompt
    zlistx_t *open;             //  PENDING bodies (json_t) not yet resolved, oldest first
    char *decided;              //  terminal: the id just decided, until its RESOLVED comes
    char *shown;                //  terminal: the id whose details are on screen
    bool prompting;             //  terminal: a prompt is on screen, its answer not yet typed
    int64_t stage_heard;        //  last HEARTBEAT from the stage; 0 = none yet
    bool stage_silent;          //  said so on stderr
    char line [STDIN_LINE_MAX]; //  stdin read so far, not yet a whole line
    size_t line_size;
    bool line_too_long;         //  dropping the rest of an overlong line
    bool stdin_done;
} approver_t;

//  Sends COMMAND body on approvals socket index; returns 0 or -1.
static int
s_approver_send (approver_t *self, size_t index, const char *command, json_t *body)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    int rc = dsh_json_to_msgpack (&packer.pk, body);
    if (rc == 0) {
        zmsg_t *msg = dsh_proto_message (NULL, command);
        zframe_t *frame = dsh_packer_frame (&packer);
        zmsg_append (msg, &frame);
        rc = dsh_sock_send (self->dealers [index], &msg);
    }
    dsh_packer_release (&packer);
    if (rc)
        fprintf (stderr, "dsh: cannot send %s to the approvals socket at %s\n", command, self->endpoints [index]);
    return rc;
}

//  Sends COMMAND body on every approvals socket.
static void
s_approver_send_all (approver_t *self, const char *command, json_t *body)
{
    for (size_t index = 0; index < self->dealer_count; index++)
        s_approver_send (self, index, command, body);
}

//  Sends the DECIDE body; on a terminal, waits for its outcome before
//  showing the next request (unless it could not be sent: then there is
//  none to wait for). Takes body.
static void
s_approver_send_decision (approver_t *self, const char *id, json_t *body)
{
    char *decided = strdup (id);
    //  To the stage that asked; an id no stage asked for goes to the first,
    //  which says there is no such request
    size_t route = (size_t) zhashx_lookup (self->routes, id);
    size_t index = route? route - 1: 0;
    if (s_approver_send (self, index, "DECIDE", body) == 0 && self->terminal) {
        zstr_free (&self->decided);
        self->decided = decided;
        decided = NULL;
    }
    zstr_free (&decided);
    json_decref (body);
}

//  Decides request id once: outcome "allow" or "deny".
static void
s_approver_decide (approver_t *self, const char *id, const char *outcome)
{
    s_approver_send_decision (self, id, json_pack ("{s:s, s:s}", "id", id, "outcome", outcome));
}

static json_t *s_approver_find (approver_t *self, const char *id);

//  Allows request id and grants the like of it for seconds: scope "tool"
//  (this agent, this tool, any arguments) or "arguments" (these exact
//  ones). Bound to the digests the request showed, when it is known.
static void
s_approver_grant (approver_t *self, const char *id, const char *scope, int64_t seconds)
{
    json_t *body = json_pack ("{s:s, s:s, s:s}", "id", id, "outcome", "allow", "scope", scope);
    dsh_cli_grant_length_set (body, seconds);
    json_t *request = s_approver_find (self, id);
    const char *keys [] = { "argumentsDigest", "definitionDigest" };
    for (size_t index = 0; request && index < sizeof (keys) / sizeof (keys [0]); index++)
        if (json_is_string (json_object_get (request, keys [index])))
            json_object_set (body, keys [index], json_object_get (request, keys [index]));
    s_approver_send_decision (self, id, body);
}

//  Prints {"event": event, ...body} as one line.
static void
s_approver_print (const char *event, json_t *body)
{
    json_t *line = json_pack ("{s:s}", "event", event);
    json_object_update_missing (line, body);
    dsh_cli_print (line, JSON_LINE);
    json_decref (line);
}

static const char *
s_request_id (json_t *request)
{
    return json_string_value (json_object_get (request, "id"));
}

//  The open request with this id, made the list's cursor; NULL if none.
static json_t *
s_approver_find (approver_t *self, const char *id)
{
    for (json_t *request = (json_t *) zlistx_first (self->open); request;
         request = (json_t *) zlistx_next (self->open))
        if (streq (s_request_id (request), id))
            return request;
    return NULL;
}

//  --- The terminal view ---------------------------------------------------

#define TERMINAL_STRING_MAX 1000    //  longer argument strings are shortened on screen

//  A copy of value with every string longer than TERMINAL_STRING_MAX bytes
//  cut (at a character boundary) and marked. Sets *shortened if any was.
static json_t *
s_terminal_shorten (json_t *value, bool *shortened)
{
    if (json_is_string (value) && json_string_length (value) > TERMINAL_STRING_MAX) {
        const char *text = json_string_value (value);
        size_t cut = TERMINAL_STRING_MAX;
        while (cut > 0 && ((unsigned char) text [cut] & 0xc0) == 0x80)
            cut--;
        char *head = zsys_sprintf ("%.*s... [%zu more bytes]", (int) cut, text, json_string_length (value) - cut);
        json_t *copy = json_string (head);
        zstr_free (&head);
        *shortened = true;
        return copy;
    }
    if (json_is_object (value)) {
        json_t *copy = json_object ();
        const char *key;
        json_t *member;
        json_object_foreach (value, key, member)
            json_object_set_new (copy, key, s_terminal_shorten (member, shortened));
        return copy;
    }
    if (json_is_array (value)) {
        json_t *copy = json_array ();
        size_t index;
        json_t *member;
        json_array_foreach (value, index, member)
            json_array_append_new (copy, s_terminal_shorten (member, shortened));
        return copy;
    }
    return json_incref (value);
}

//  Whether the request's stage gives grants (its PENDING says so).
static bool
s_request_grants (json_t *request)
{
    return json_is_true (json_object_get (request, "grants"));
}

//  How long a t or an a answer grants, in minutes: --grant-minutes, else
//  the stage's default, never more than the stage's longest.
static int64_t
s_approver_grant_minutes (approver_t *self, json_t *request)
{
    int64_t minutes = self->grant_minutes? self->grant_minutes
                                         : (int64_t) json_integer_value (json_object_get (request, "grantMinutes"));
    if (minutes <= 0)
        minutes = GRANT_MINUTES_DEFAULT;
    int64_t longest = (int64_t) json_integer_value (json_object_get (request, "grantMaxMinutes"));
    return longest > 0 && minutes > longest? longest: minutes;
}

//  What a t or an a answer would grant, said before either is asked for.
static void
s_terminal_grants (approver_t *self, json_t *request)
{
    const char *agent = dsh_cli_string (request, "agent", "");
    int64_t minutes = s_approver_grant_minutes (self, request);
    char until [16];
    dsh_cli_local_time (zclock_time () + minutes * 60000, "%H:%M", until, sizeof (until));
    char *tool = dsh_cli_terminal_text (dsh_cli_string (request, "tool", "?"), false);
    char *caller = *agent? dsh_cli_terminal_text (agent, false): NULL;
    char *who = caller? zsys_sprintf ("agent %s", caller): strdup ("calls with no agent");
    printf ("  t          allow %s for %s, any arguments, until %s (%ld min)\n", tool, who, until, (long) minutes);
    printf ("  a          allow %s for %s, these exact arguments only, until %s\n", tool, who, until);
    printf ("             either ends early if the tool's definition or the chain changes\n");
    free (tool);
    free (caller);
    zstr_free (&who);
}

//  Starts a line of our own even if a prompt is waiting for its answer.
static void
s_terminal_break (approver_t *self)
{
    if (self->prompting)
        putchar ('\n');
    self->prompting = false;
}

//  Shows the oldest open request (once) and asks for it; nothing while a
//  decision awaits its outcome, or nothing is open.
static void
s_terminal_prompt (approver_t *self)
{
    json_t *request = (json_t *) zlistx_first (self->open);
    if (self->decided || !request || self->prompting)
        return;
    const char *id = s_request_id (request);
    const char *tool = json_string_value (json_object_get (request, "tool"));
    const char *agent = json_string_value (json_object_get (request, "agent"));
    char *safe_tool = dsh_cli_terminal_text (tool? tool: "?", false);
    if (!self->shown || !streq (self->shown, id)) {
        zstr_free (&self->shown);
        self->shown = strdup (id);
        printf ("\nrequest %s\n", id);
        dsh_cli_terminal_field ("tool", tool? tool: "?");
        if (agent)
            dsh_cli_terminal_field ("agent", agent);
        const char *call_id = json_string_value (json_object_get (request, "callId"));
        if (call_id)
            dsh_cli_terminal_field ("call", call_id);
        bool shortened = false;
        json_t *arguments = s_terminal_shorten (json_object_get (request, "arguments"), &shortened);
        char *pretty = json_dumps (arguments, JSON_INDENT (2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
        json_decref (arguments);
        char *safe = dsh_cli_terminal_text (pretty? pretty: "null", true);
        printf ("  arguments\n");
        for (char *line = safe, *next; line; line = next) {
            next = strchr (line, '\n');
            if (next)
                *next++ = 0;
            printf ("    %s\n", line);
        }
        if (shortened)
            printf ("  (long strings shortened here; `dsh pending` shows them whole)\n");
        free (safe);
        free (pretty);
        if (!self->auto_outcome && s_request_grants (request))
            s_terminal_grants (self, request);
    }
    size_t waiting = zlistx_size (self->open) - 1;
    if (self->auto_outcome) {
        printf ("-> %s (--auto %s)\n", streq (self->auto_outcome, "allow")? "allowing": "denying",
                self->auto_outcome);
        fflush (stdout);
        free (safe_tool);
        s_approver_decide (self, id, self->auto_outcome);
        return;
    }
    if (waiting)
        printf ("(%zu more waiting) ", waiting);
    const char *choices = s_request_grants (request)? "[y/N/t/a]": "[y/N]";
    if (agent) {
        char *safe_agent = dsh_cli_terminal_text (agent, false);
        printf ("Allow %s for %s? %s ", safe_tool, safe_agent, choices);
        free (safe_agent);
    }
    else
        printf ("Allow %s? %s ", safe_tool, choices);
    fflush (stdout);
    free (safe_tool);
    self->prompting = true;
}

static const char *
s_terminal_outcome (const char *outcome)
{
    if (streq (outcome, "allowed"))
        return "allowed";
    if (streq (outcome, "rejected"))
        return "rejected";
    if (streq (outcome, "cancelled"))
        return "cancelled by the caller";
    if (streq (outcome, "unavailable"))
        return "closed: nobody decided in time";
    return outcome;
}

//  --- Messages and input ----------------------------------------------------

//  A request closed, by us or anyone: say so on a terminal if we showed it
//  or decided it, and show the next.
static void
s_terminal_resolved (approver_t *self, const char *id, const char *outcome, const char *grant)
{
    bool ours = self->decided && streq (self->decided, id);
    bool on_screen = self->shown && streq (self->shown, id);
    if (ours || on_screen) {
        //  Only a decision is made elsewhere: a request that timed out or
        //  was cancelled was decided by nobody
        bool decision = outcome && (streq (outcome, "allowed") || streq (outcome, "rejected"));
        s_terminal_break (self);
        char *safe_grant = grant? dsh_cli_terminal_text (grant, false): NULL;
        printf ("-> %s %s%s%s%s%s\n", id, s_terminal_outcome (outcome? outcome: "?"),
                decision && !ours? " (decided elsewhere)": "", safe_grant? " with grant ": "",
                safe_grant? safe_grant: "", safe_grant? " (`dsh grants` lists it)": "");
        free (safe_grant);
    }
    if (ours)
        zstr_free (&self->decided);
    if (on_screen)
        zstr_free (&self->shown);
    s_terminal_prompt (self);
}

//  Handles one message from the stage.
static void
s_approver_receive (approver_t *self, size_t index)
{
    zmsg_t *msg = zmsg_recv (self->dealers [index]);
    if (!msg)
        return;
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    json_t *body = NULL;
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)) == 0
    &&  zmsg_size (msg) == 1) {
        dsh_doc_t *doc = dsh_proto_decode_body (zmsg_first (msg), error, sizeof (error));
        body = doc? dsh_json_from_msgpack (dsh_doc_root (doc)): NULL;
        dsh_doc_destroy (&doc);
    }
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    if (!json_is_object (body)) {
        fprintf (stderr, "dsh: malformed message from the stage ignored\n");
        json_decref (body);
        return;
    }
    const char *id = json_string_value (json_object_get (body, "id"));
    if (streq (command, "HEARTBEAT")) {
        if (self->stage_silent)
            fprintf (stderr, "dsh: the stage is back\n");
        self->stage_heard = zclock_mono ();
        self->stage_silent = false;
    }
    else
    if (streq (command, "PENDING") && id) {
        bool known = s_approver_find (self, id) != NULL;
        zhashx_update (self->routes, id, (void *) (index + 1));
        if (!known)
            zlistx_add_end (self->open, json_incref (body));
        if (!self->terminal) {
            s_approver_print ("pending", body);
            if (self->auto_outcome)
                s_approver_decide (self, id, self->auto_outcome);
        }
        else {
            if (!known && self->prompting) {
                //  Another request while one is asked for: say so, ask again
                s_terminal_break (self);
                const char *tool = json_string_value (json_object_get (body, "tool"));
                char *safe_tool = dsh_cli_terminal_text (tool? tool: "?", false);
                printf ("(request %s for %s is waiting too)\n", id, safe_tool);
                free (safe_tool);
            }
            s_terminal_prompt (self);
        }
    }
    else
    if (streq (command, "RESOLVED") && id) {
        if (!self->terminal)
            s_approver_print ("resolved", body);
        if (s_approver_find (self, id))
            zlistx_delete (self->open, zlistx_cursor (self->open));
        zhashx_delete (self->routes, id);
        if (self->terminal)
            s_terminal_resolved (self, id, json_string_value (json_object_get (body, "outcome")),
                                 json_string_value (json_object_get (body, "grant")));
    }
    else
    if (streq (command, DSH_ERROR)) {
        const char *message = json_string_value (json_object_get (body, "message"));
        if (self->terminal)
            s_terminal_break (self);
        fprintf (stderr, "dsh: the stage says: %s\n", message? message: "error");
        //  A decision the stage refused leaves nothing to wait for
        zstr_free (&self->decided);
        if (self->terminal)
            s_terminal_prompt (self);
    }
    json_decref (body);
}

//  Says what a line may be, and asks again on a terminal.
static void
s_approver_command_usage (approver_t *self)
{
    json_t *shown = (json_t *) zlistx_first (self->open);
    if (self->terminal && !shown)
        fprintf (stderr, "dsh: no request is pending\n");
    else
    if (self->terminal)
        fprintf (stderr, s_request_grants (shown)? "dsh: answer y, n, t or a (or \"allow ID\", \"deny ID\")\n"
                                                 : "dsh: answer y or n (or \"allow ID\", \"deny ID\")\n");
    else
        fprintf (stderr, "dsh: say \"allow ID\", \"deny ID\", \"allow ID for N\", \"allow ID args for N\", "
                         "\"y\" or \"n\"\n");
    if (self->terminal)
        s_terminal_prompt (self);
}

//  Acts on one line from stdin: "allow ID", "deny ID", "allow ID for N",
//  "allow ID args for N" (a grant for N minutes, or 30s, 2h), "y", "n"; on
//  a terminal also "yes", "no" and an empty line (no), and "t" or "a" (a
//  grant, --grant-minutes long) for the request shown.
static void
s_approver_command (approver_t *self, char *line)
{
    self->prompting = false;
    char *words [5];
    size_t count = 0;
    for (char *word = strtok (line, " \t\r"); word; word = strtok (NULL, " \t\r"))
        if (count++ < sizeof (words) / sizeof (words [0]))
            words [count - 1] = word;
    const char *verb = count? words [0]: NULL;
    const char *id = count > 1? words [1]: NULL;
    bool yes = verb && (streq (verb, "y") || streq (verb, "Y") || (self->terminal && streq (verb, "yes")));
    bool no = !verb? self->terminal: streq (verb, "n") || streq (verb, "N") || (self->terminal && streq (verb, "no"));
    const char *key_scope = !self->terminal || !verb? NULL
                          : streq (verb, "t") || streq (verb, "T")? "tool"
                          : streq (verb, "a") || streq (verb, "A")? "arguments": NULL;
    bool named = verb && (streq (verb, "allow") || streq (verb, "deny"));
    if (!verb && !no)
        return;                         //  an empty line
    //  allow ID for N, allow ID args for N
    const char *named_scope = NULL;
    const char *length = NULL;
    if (named && streq (verb, "allow") && count == 4 && streq (words [2], "for")) {
        named_scope = "tool";
        length = words [3];
    }
    else
    if (named && streq (verb, "allow") && count == 5 && streq (words [2], "args") && streq (words [3], "for")) {
        named_scope = "arguments";
        length = words [4];
    }
    bool keyed = yes || no || key_scope;
    if ((keyed && count > 1) || (named && count != 2 && !named_scope) || (!keyed && !named)) {
        s_approver_command_usage (self);
        return;
    }
    int64_t seconds = 0;
    if (length && dsh_cli_grant_seconds (length, &seconds)) {
        fprintf (stderr, "dsh: \"for\" takes minutes (15) or a length (30s, 15m, 2h), not \"%s\"\n", length);
        if (self->terminal)
            s_terminal_prompt (self);
        return;
    }
    json_t *request = NULL;
    if (keyed) {
        //  On a terminal the answer is for the request shown; in a pipe,
        //  for the latest
        request = (json_t *) (self->terminal? zlistx_first (self->open): zlistx_last (self->open));
        if (!request || (self->terminal && self->decided)) {
            if (!request && verb)
                fprintf (stderr, "dsh: no request is pending\n");
            return;
        }
        id = s_request_id (request);
    }
    else
        request = s_approver_find (self, id);
    const char *scope = key_scope? key_scope: named_scope;
    if (scope && request && !s_request_grants (request)) {
        fprintf (stderr, "dsh: the stage of request %s gives no grants: allow it once or deny it\n", id);
        if (self->terminal)
            s_terminal_prompt (self);
        return;
    }
    if (key_scope)
        seconds = s_approver_grant_minutes (self, request) * 60;
    if (scope)
        s_approver_grant (self, id, scope, seconds);
    else
        s_approver_decide (self, id, yes || (named && streq (verb, "allow"))? "allow": "deny");
}

//  Reads what stdin has and acts on every whole line in it.
static void
s_approver_stdin (approver_t *self)
{
    char chunk [512];
    ssize_t got = read (STDIN_FILENO, chunk, sizeof (chunk));
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (got <= 0) {
        self->stdin_done = true;
        return;
    }
    for (ssize_t index = 0; index < got; index++) {
        if (chunk [index] == '\n') {
            self->line [self->line_size] = 0;
            if (self->line_too_long)
                fprintf (stderr, "dsh: line too long, ignored\n");
            else
                s_approver_command (self, self->line);
            self->line_size = 0;
            self->line_too_long = false;
        }
        else
        if (self->line_size + 1 < sizeof (self->line))
            self->line [self->line_size++] = chunk [index];
        else
            self->line_too_long = true;
    }
}

//  The stage heartbeats; say on stderr when it falls silent (a broker
//  restarted binds a new approvals port: this approver reaches nobody).
static void
s_approver_check_stage (approver_t *self)
{
    if (self->stage_heard && !self->stage_silent
    &&  zclock_mono () - self->stage_heard > APPROVER_STAGE_SILENT_MS) {
        self->stage_silent = true;
        if (self->terminal)
            s_terminal_break (self);
        fprintf (stderr, "dsh: the stage has been silent for %d s; is the broker still running?\n",
                 APPROVER_STAGE_SILENT_MS / 1000);
    }
}

//  Asks the stage through the broker at broker for its approvals socket
//  and connects a DEALER to it, unless one is connected there already (a
//  stage process that serves several brokers has one socket). Returns 0,
//  or -1 after saying why, with *exit_code set.
static int
s_approver_connect (approver_t *self, dsh_cli_options_t *options, const char *broker, const char *stage, int *exit_code)
{
    char error [512];
    json_t *body = dsh_cli_control_at (options, broker, stage, "approvals", NULL, exit_code, error, sizeof (error));
    if (!body) {
        fprintf (stderr, "dsh: broker %s: %s\n", broker, error);
        return -1;
    }
    const char *advertised = json_string_value (json_object_get (json_object_get (body, "data"), "endpoint"));
    const char *server_key = json_string_value (json_object_get (json_object_get (body, "data"), "serverKey"));
    char *endpoint = advertised? dsh_sock_resolve (advertised, broker): NULL;
    char *approvals_key = server_key && strlen (server_key) == 40? strdup (server_key): NULL;
    json_decref (body);
    int rc = 0;
    if (!endpoint) {
        fprintf (stderr, "dsh: broker %s: stage \"%s\" has no approvals endpoint\n", broker, stage);
        *exit_code = EXIT_TOOL_ERROR;
        rc = -1;
    }
    for (size_t index = 0; rc == 0 && index < self->dealer_count; index++)
        if (streq (self->endpoints [index], endpoint)) {
            zstr_free (&endpoint);
            zstr_free (&approvals_key);
            return 0;
        }
    zsock_t *dealer = rc == 0? zsock_new (ZMQ_DEALER): NULL;
    if (dealer) {
        dsh_sock_limit (dealer, APPROVER_MAX_MESSAGE, 1000);
        dsh_sock_heal (dealer, 0, 0);
        //  Give a decision made just before stdin ends, and the goodbye, the
        //  time to leave
        zsock_set_linger (dealer, 1000);
        dsh_curve_client (dealer);
        //  An external stage serves approvals with its own key, which the
        //  broker relayed with the endpoint
        if (approvals_key && dsh_curve_on ())
            zsock_set_curve_serverkey (dealer, approvals_key);
        if (zsock_connect (dealer, "%s", endpoint)) {
            fprintf (stderr, "dsh: cannot connect to the approvals socket at %s\n", endpoint);
            zsock_destroy (&dealer);
            *exit_code = EXIT_NO_BROKER;
            rc = -1;
        }
    }
    if (dealer) {
        self->dealers [self->dealer_count] = dealer;
        self->endpoints [self->dealer_count] = endpoint;
        self->dealer_count++;
        endpoint = NULL;
    }
    zstr_free (&endpoint);
    zstr_free (&approvals_key);
    return rc;
}

//  With a list of brokers, the approver serves the stage of every one that
//  answers; the others are named on stderr.
int
dsh_cli_approver (dsh_cli_options_t *options)
{
    const char *stage = options->stage? options->stage: "permission";
    int exit_code = 0;
    approver_t self = {
        .auto_outcome = options->auto_outcome,
        .grant_minutes = options->grant_minutes,
        .terminal = isatty (STDIN_FILENO) && isatty (STDOUT_FILENO)
    };
    char error [512];
    zlistx_t *brokers = dsh_sock_brokers (dsh_cli_endpoint (options), error, sizeof (error));
    assert (brokers);           //  main checked the list
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers))
        s_approver_connect (&self, options, broker, stage, &exit_code);
    zlistx_destroy (&brokers);
    if (self.dealer_count == 0)
        return exit_code;
    exit_code = 0;
    self.routes = zhashx_new ();
    self.open = zlistx_new ();
    zlistx_set_destructor (self.open, (czmq_destructor *) s_json_release);
    if (self.terminal)
        printf ("Waiting for requests to approve (stage \"%s\"); Ctrl-C or Ctrl-D ends.\n", stage);

    //  zpoller takes no file descriptors, so stdin needs zmq_poll
    zmq_pollitem_t items [DSH_BROKERS_MAX + 1];
    for (size_t index = 0; index < self.dealer_count; index++)
        items [index] = (zmq_pollitem_t) { zsock_resolve (self.dealers [index]), 0, ZMQ_POLLIN, 0 };
    items [self.dealer_count] = (zmq_pollitem_t) { NULL, STDIN_FILENO, ZMQ_POLLIN, 0 };
    int item_count = (int) self.dealer_count + (self.auto_outcome? 0: 1);
    json_t *hello = json_object ();
    int64_t next_hello = zclock_mono ();
    while (!zsys_interrupted && !self.stdin_done) {
        int64_t now = zclock_mono ();
        if (now >= next_hello) {
            s_approver_send_all (&self, "APPROVER", hello);
            next_hello = now + APPROVER_HELLO_MS;
        }
        s_approver_check_stage (&self);
        int64_t wait_ms = next_hello - now;
        if (wait_ms > APPROVER_POLL_MS)
            wait_ms = APPROVER_POLL_MS;
        int rc = zmq_poll (items, item_count, (long) wait_ms);
        if (rc < 0 && zmq_errno () != EINTR) {
            fprintf (stderr, "dsh: poll failed: %s\n", zmq_strerror (zmq_errno ()));
            exit_code = EXIT_NO_BROKER;
            break;
        }
        for (size_t index = 0; rc > 0 && index < self.dealer_count; index++)
            if (items [index].revents & ZMQ_POLLIN)
                s_approver_receive (&self, index);
        if (rc > 0 && !self.auto_outcome && (items [self.dealer_count].revents & (ZMQ_POLLIN | ZMQ_POLLERR)))
            s_approver_stdin (&self);
    }
    //  Leaving on purpose: the stage stops counting on us now, not 3 s later
    s_approver_send_all (&self, "GOODBYE", hello);
    if (self.terminal)
        s_terminal_break (&self);
    json_decref (hello);
    zlistx_destroy (&self.open);
    zhashx_destroy (&self.routes);
    zstr_free (&self.decided);
    zstr_free (&self.shown);
    for (size_t index = 0; index < self.dealer_count; index++) {
        zsock_destroy (&self.dealers [index]);
        zstr_free (&self.endpoints [index]);
    }
    return exit_code;
}
