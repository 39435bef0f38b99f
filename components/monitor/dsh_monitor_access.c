/*  =========================================================================
    dsh_monitor_access - who may act on the monitor's page, and how a
    request proves it
    =========================================================================
*/

#include "dsh_monitor_access.h"
#include "dsh_http.h"

#include <czmq.h>
#include <sys/random.h>

typedef struct {
    char *name;
    char *token;
} s_token_t;

struct _dsh_monitor_tokens_t {
    s_token_t tokens [DSH_MONITOR_TOKENS_MAX];
    size_t size;
};

typedef struct {
    char csrf [65];
    char *actor;
    int64_t seen_ms;
} s_session_t;

struct _dsh_monitor_sessions_t {
    s_session_t sessions [DSH_MONITOR_SESSIONS_MAX];
    size_t size;
};

//  ---------------------------------------------------------------------
//  Tokens

void
dsh_monitor_tokens_destroy (dsh_monitor_tokens_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_monitor_tokens_t *self = *self_p;
        for (size_t index = 0; index < self->size; index++) {
            free (self->tokens [index].name);
            free (self->tokens [index].token);
        }
        free (self);
        *self_p = NULL;
    }
}

static bool
s_name_char (char c)
{
    return isalnum ((unsigned char) c) || strchr ("._@+-", c);
}

//  Takes one line (words separated by blanks) into self; 0, or -1 with why.
static int
s_tokens_take_line (dsh_monitor_tokens_t *self, char *line, size_t number, char *error, size_t error_size)
{
    char *words [3] = { NULL, NULL, NULL };
    size_t count = 0;
    char *saved = NULL;
    for (char *cursor = strtok_r (line, " \t\r", &saved); cursor; cursor = strtok_r (NULL, " \t\r", &saved))
        if (count < 3)
            words [count++] = cursor;
    if (count == 0)
        return 0;
    if (count == 3) {
        snprintf (error, error_size, "line %zu: one \"NAME TOKEN\" or \"TOKEN\" a line, not more words", number);
        return -1;
    }
    const char *name = count == 2? words [0]: DSH_MONITOR_TOKEN_DEFAULT_NAME;
    const char *token = words [count - 1];
    bool name_ok = strlen (name) <= DSH_MONITOR_TOKEN_NAME_MAX;
    for (const char *next = name; name_ok && *next; next++)
        name_ok = s_name_char (*next);
    if (!name_ok) {
        snprintf (error, error_size, "line %zu: a token's name is 1 to %d letters, digits or ._@+-",
                  number, DSH_MONITOR_TOKEN_NAME_MAX);
        return -1;
    }
    bool token_ok = strlen (token) <= DSH_HTTP_TOKEN_MAX;
    for (const char *next = token; token_ok && *next; next++)
        token_ok = *next >= 0x21 && *next <= 0x7e;
    if (!token_ok) {
        snprintf (error, error_size, "line %zu: a token is 1 to %d visible ASCII characters", number,
                  DSH_HTTP_TOKEN_MAX);
        return -1;
    }
    for (size_t index = 0; index < self->size; index++) {
        if (streq (self->tokens [index].name, name)) {
            snprintf (error, error_size, "line %zu: the name \"%s\" is given twice", number, name);
            return -1;
        }
        if (streq (self->tokens [index].token, token)) {
            snprintf (error, error_size, "line %zu: the token of \"%s\" is \"%s\"'s too", number, name,
                      self->tokens [index].name);
            return -1;
        }
    }
    if (self->size == DSH_MONITOR_TOKENS_MAX) {
        snprintf (error, error_size, "line %zu: at most %d tokens", number, DSH_MONITOR_TOKENS_MAX);
        return -1;
    }
    self->tokens [self->size].name = strdup (name);
    self->tokens [self->size].token = strdup (token);
    self->size++;
    return 0;
}

dsh_monitor_tokens_t *
dsh_monitor_tokens_parse (const char *text, char *error, size_t error_size)
{
    assert (text);
    dsh_monitor_tokens_t *self = (dsh_monitor_tokens_t *) zmalloc (sizeof (dsh_monitor_tokens_t));
    assert (self);
    char *copy = strdup (text);
    assert (copy);
    size_t number = 0;
    int rc = 0;
    char *rest = copy;
    while (rc == 0 && rest) {
        char *line = rest;
        rest = strchr (rest, '\n');
        if (rest)
            *rest++ = 0;
        number++;
        rc = s_tokens_take_line (self, line, number, error, error_size);
    }
    free (copy);
    if (rc == 0 && self->size == 0) {
        snprintf (error, error_size, "no token in it (a line \"TOKEN\" or \"NAME TOKEN\")");
        rc = -1;
    }
    if (rc)
        dsh_monitor_tokens_destroy (&self);
    return self;
}

dsh_monitor_tokens_t *
dsh_monitor_tokens_read (const char *path, char *error, size_t error_size)
{
    assert (path);
    //  Room for every token with its name, and a little: a larger file is
    //  not a token file
    size_t limit = DSH_MONITOR_TOKENS_MAX * (DSH_HTTP_TOKEN_MAX + DSH_MONITOR_TOKEN_NAME_MAX + 4);
    FILE *file = fopen (path, "r");
    if (!file) {
        snprintf (error, error_size, "cannot read the token file %s: %s", path, strerror (errno));
        return NULL;
    }
    char *text = (char *) malloc (limit + 1);
    assert (text);
    size_t size = fread (text, 1, limit + 1, file);
    bool failed = ferror (file);
    fclose (file);
    dsh_monitor_tokens_t *self = NULL;
    char reason [256] = "";
    if (failed)
        snprintf (reason, sizeof reason, "cannot be read");
    else
    if (size > limit)
        snprintf (reason, sizeof reason, "is larger than %zu bytes", limit);
    else
    if (memchr (text, 0, size))
        snprintf (reason, sizeof reason, "holds a NUL byte");
    else {
        text [size] = 0;
        self = dsh_monitor_tokens_parse (text, reason, sizeof reason);
    }
    free (text);
    if (!self)
        snprintf (error, error_size, "the token file %s: %s", path, reason);
    return self;
}

size_t
dsh_monitor_tokens_size (dsh_monitor_tokens_t *self)
{
    assert (self);
    return self->size;
}

const char *
dsh_monitor_tokens_name (dsh_monitor_tokens_t *self, size_t index)
{
    assert (self);
    assert (index < self->size);
    return self->tokens [index].name;
}

int
dsh_monitor_tokens_match (dsh_monitor_tokens_t *self, const char *given, size_t given_size)
{
    assert (self);
    int found = -1;
    //  Every token is compared, so that the time says nothing of which matched
    for (size_t index = 0; index < self->size; index++)
        if (dsh_http_token_equal (given, given_size, self->tokens [index].token))
            found = (int) index;
    return found;
}

//  ---------------------------------------------------------------------
//  The page's own origin

//  The authority of an origin or a URL ("scheme://authority[/...]"), if
//  its scheme is http or https: where it starts, its size.
static const char *
s_authority (const char *url, size_t *size_p)
{
    const char *start = NULL;
    if (strncasecmp (url, "http://", 7) == 0)
        start = url + 7;
    else
    if (strncasecmp (url, "https://", 8) == 0)
        start = url + 8;
    if (!start)
        return NULL;
    *size_p = strcspn (start, "/?#");
    return *size_p? start: NULL;
}

bool
dsh_monitor_access_same_origin (const char *host, const char *origin, const char *referer,
                                char *why, size_t why_size)
{
    if (!host || !*host) {
        snprintf (why, why_size, "the request has no Host header");
        return false;
    }
    const char *given = origin? origin: referer;
    if (!given) {
        snprintf (why, why_size, "an action needs an Origin or Referer header naming this page (http://%s)", host);
        return false;
    }
    size_t size = 0;
    const char *authority = s_authority (given, &size);
    if (!authority || size != strlen (host) || strncasecmp (authority, host, size)) {
        snprintf (why, why_size, "the %s \"%.200s\" is not this page's origin (http://%s)",
                  origin? "Origin": "Referer", given, host);
        return false;
    }
    return true;
}

//  ---------------------------------------------------------------------
//  Page sessions

dsh_monitor_sessions_t *
dsh_monitor_sessions_new (void)
{
    dsh_monitor_sessions_t *self = (dsh_monitor_sessions_t *) zmalloc (sizeof (dsh_monitor_sessions_t));
    assert (self);
    return self;
}

void
dsh_monitor_sessions_destroy (dsh_monitor_sessions_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_monitor_sessions_t *self = *self_p;
        for (size_t index = 0; index < self->size; index++)
            free (self->sessions [index].actor);
        free (self);
        *self_p = NULL;
    }
}

static void
s_sessions_remove (dsh_monitor_sessions_t *self, size_t index)
{
    free (self->sessions [index].actor);
    self->sessions [index] = self->sessions [--self->size];
}

static void
s_sessions_expire (dsh_monitor_sessions_t *self, int64_t now_ms)
{
    for (size_t index = 0; index < self->size; )
        if (now_ms - self->sessions [index].seen_ms > DSH_MONITOR_SESSION_IDLE_MS)
            s_sessions_remove (self, index);
        else
            index++;
}

int
dsh_monitor_sessions_open (dsh_monitor_sessions_t *self, const char *actor, int64_t now_ms, char csrf [65])
{
    assert (self);
    assert (actor);
    unsigned char bytes [32];
    if (getrandom (bytes, sizeof bytes, 0) != (ssize_t) sizeof bytes)
        return -1;
    s_sessions_expire (self, now_ms);
    if (self->size == DSH_MONITOR_SESSIONS_MAX) {
        size_t oldest = 0;
        for (size_t index = 1; index < self->size; index++)
            if (self->sessions [index].seen_ms < self->sessions [oldest].seen_ms)
                oldest = index;
        s_sessions_remove (self, oldest);
    }
    s_session_t *session = &self->sessions [self->size++];
    for (size_t index = 0; index < sizeof bytes; index++)
        snprintf (session->csrf + 2 * index, 3, "%02x", bytes [index]);
    session->actor = strdup (actor);
    session->seen_ms = now_ms;
    memcpy (csrf, session->csrf, sizeof session->csrf);
    return 0;
}

bool
dsh_monitor_sessions_check (dsh_monitor_sessions_t *self, const char *csrf, const char *actor,
                            int64_t now_ms, char *why, size_t why_size)
{
    assert (self);
    assert (actor);
    if (!csrf || !*csrf) {
        snprintf (why, why_size, "no CSRF token (" DSH_MONITOR_CSRF_HEADER "): the page's session gives one");
        return false;
    }
    s_sessions_expire (self, now_ms);
    s_session_t *found = NULL;
    for (size_t index = 0; index < self->size; index++)
        if (dsh_http_token_equal (csrf, strlen (csrf), self->sessions [index].csrf))
            found = &self->sessions [index];
    if (!found) {
        snprintf (why, why_size, "the CSRF token is not a live session's: reload the page");
        return false;
    }
    //  A session is its token's: another token cannot use it
    if (!streq (found->actor, actor)) {
        snprintf (why, why_size, "the CSRF token is another token's session");
        return false;
    }
    found->seen_ms = now_ms;
    return true;
}

size_t
dsh_monitor_sessions_size (dsh_monitor_sessions_t *self)
{
    assert (self);
    return self->size;
}
