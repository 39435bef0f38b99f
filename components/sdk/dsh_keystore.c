/*  =========================================================================
    dsh_keystore - the ZAP handler that checks CURVE keys against an
    allow-list directory

    Two tables: files (what each directory entry was when last looked at,
    by name: its stat, and the key and encoded metadata it gave, or why it
    was refused) and keys (public key text to the file that gives it, the
    first by name). A check stats every entry; an entry whose stat did not
    change keeps its record, so a file is read, and a refusal logged, once
    per change. When anything changed the keys table is built again from
    the records and replaces the old one. Handshakes only read keys.
    =========================================================================
*/

#include "dsh_keystore.h"
#include "dsh_curve.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#define ZAP_ENDPOINT    "inproc://zeromq.zap.01"

//  Certificate metadata names libzmq gives a meaning of its own: a
//  certificate may not set them on its connections
static const char *s_reserved [] = {
    "User-Id", "Socket-Type", "Identity", "Routing-Id", "Peer-Address"
};

//  One directory entry, as the last check saw it
typedef struct {
    char *name;
    struct stat stat;           //  when it was read: a change reads it again
    char public_key [41];       //  Z85; "" when refused
    byte *metadata;             //  ZAP metadata frame (zauth's encoding)
    size_t metadata_size;
    char *refusal;              //  why it is not served, or NULL
    char *duplicate_of;         //  the file that has its key, if any
} s_file_t;

static void
s_file_destroy (s_file_t **self_p)
{
    if (*self_p) {
        s_file_t *self = *self_p;
        zstr_free (&self->name);
        free (self->metadata);
        zstr_free (&self->refusal);
        zstr_free (&self->duplicate_of);
        free (self);
        *self_p = NULL;
    }
}

//  The files table owns its records, but has no destructor: a check moves
//  the records that did not change to the next table.
static zhashx_t *
s_files_new (void)
{
    zhashx_t *files = zhashx_new ();
    assert (files);
    return files;
}

static void
s_files_destroy (zhashx_t **files_p)
{
    if (*files_p) {
        for (s_file_t *file = (s_file_t *) zhashx_first (*files_p); file; file = (s_file_t *) zhashx_next (*files_p))
            s_file_destroy (&file);
        zhashx_destroy (files_p);
    }
}

typedef struct {
    zsock_t *pipe;              //  actor command pipe
    zsock_t *handler;           //  REP on the ZAP endpoint, NULL if taken
    zloop_t *loop;
    int timer_id;               //  the directory check, -1 when none
    int interval_ms;
    char *directory;            //  the allow-list, NULL until CURVE
    bool directory_failed;      //  its failure was logged
    bool verbose;
    bool terminated;            //  $TERM came
    zhashx_t *files;            //  name -> s_file_t
    zhashx_t *keys;             //  public key -> s_file_t (in files)
} self_t;

static void
s_self_destroy (self_t **self_p)
{
    if (*self_p) {
        self_t *self = *self_p;
        zhashx_destroy (&self->keys);
        s_files_destroy (&self->files);
        zloop_destroy (&self->loop);
        if (self->handler)
            zsock_unbind (self->handler, ZAP_ENDPOINT);
        zsock_destroy (&self->handler);
        zstr_free (&self->directory);
        free (self);
        *self_p = NULL;
    }
}

//  ---------------------------------------------------------------------
//  Reading one certificate

//  Refuses file, with a reason.
static void
s_refuse (s_file_t *file, const char *format, ...)
{
    va_list argptr;
    va_start (argptr, format);
    zstr_free (&file->refusal);
    file->refusal = zsys_vprintf (format, argptr);
    va_end (argptr);
}

//  Appends one property to the ZAP metadata, as zauth (and libzmq's
//  mechanism_t::add_property) encode it: a name length byte, the name,
//  a 4-byte big-endian value length, the value.
static byte *
s_put_property (byte *cursor, const char *name, const char *value)
{
    size_t name_size = strlen (name), value_size = strlen (value);
    *cursor++ = (byte) name_size;
    memcpy (cursor, name, name_size);
    cursor += name_size;
    *cursor++ = (byte) (value_size >> 24);
    *cursor++ = (byte) (value_size >> 16);
    *cursor++ = (byte) (value_size >> 8);
    *cursor++ = (byte) value_size;
    memcpy (cursor, value, value_size);
    return cursor + value_size;
}

//  The metadata section's properties, checked, into file's ZAP metadata;
//  or a refusal.
static void
s_file_metadata (s_file_t *file, zconfig_t *root)
{
    zconfig_t *section = zconfig_locate (root, "/metadata");
    size_t size = 0;
    zhashx_t *names = zhashx_new ();
    assert (names);
    for (zconfig_t *item = section? zconfig_child (section): NULL; item && !file->refusal;
         item = zconfig_next (item)) {
        const char *name = zconfig_name (item);
        const char *value = zconfig_value (item)? zconfig_value (item): "";
        size_t name_size = strlen (name);
        if (name_size == 0 || name_size > 255)
            s_refuse (file, "metadata name \"%.40s\" is not 1-255 characters", name);
        else
        if (zhashx_insert (names, name, (void *) name))
            s_refuse (file, "metadata \"%s\" is given twice", name);
        for (size_t index = 0; index < sizeof (s_reserved) / sizeof (s_reserved [0]); index++)
            if (!file->refusal && strcasecmp (name, s_reserved [index]) == 0)
                s_refuse (file, "metadata \"%s\" is reserved by ZeroMQ", name);
        size += 1 + name_size + 4 + strlen (value);
    }
    zhashx_destroy (&names);
    if (file->refusal || size == 0)
        return;
    file->metadata = (byte *) malloc (size);
    assert (file->metadata);
    file->metadata_size = size;
    byte *cursor = file->metadata;
    for (zconfig_t *item = zconfig_child (section); item; item = zconfig_next (item))
        cursor = s_put_property (cursor, zconfig_name (item), zconfig_value (item)? zconfig_value (item): "");
}

//  The certificate in text (size bytes, ZPL as zcert_save writes it) into
//  file, or a refusal.
static void
s_file_parse (s_file_t *file, const char *text, size_t size)
{
    //  Binary is refused before zconfig, which would say so on stdout
    for (size_t index = 0; index < size; index++)
        if ((byte) text [index] < ' ' && text [index] != '\n' && text [index] != '\r' && text [index] != '\t') {
            s_refuse (file, "is not a certificate (not text)");
            return;
        }
    zchunk_t *chunk = zchunk_new (text, size);
    assert (chunk);
    //  zconfig_chunk_load frees all it made on a failure (zconfig_load,
    //  which zcert_load calls, does not)
    zconfig_t *root = zconfig_chunk_load (chunk);
    zchunk_destroy (&chunk);
    const char *public_text = root? zconfig_get (root, "/curve/public-key", NULL): NULL;
    byte public_key [32];
    if (!root)
        s_refuse (file, "is not a certificate (not ZPL)");
    else
    if (!public_text || strlen (public_text) != 40 || !zmq_z85_decode (public_key, public_text))
        s_refuse (file, "is not a certificate (no curve/public-key of 40 Z85 characters)");
    else {
        //  Handshakes look up the canonical encoding of the client's key
        zmq_z85_encode (file->public_key, public_key, 32);
        if (!streq (file->public_key, public_text))
            s_refuse (file, "is not a certificate (its public key is not canonical Z85)");
        else
            s_file_metadata (file, root);
    }
    if (file->refusal)
        file->public_key [0] = 0;
    zconfig_destroy (&root);
}

//  Reads entry name of the directory (dir_fd), whose lstat is entry, into
//  a new record; NULL if it cannot be read now for want of resources (the
//  next check tries again).
static s_file_t *
s_file_read (int dir_fd, const char *name, const struct stat *entry)
{
    s_file_t *file = (s_file_t *) zmalloc (sizeof (s_file_t));
    assert (file);
    file->name = strdup (name);
    file->stat = *entry;
    if (S_ISLNK (entry->st_mode))
        s_refuse (file, "is a symbolic link (not followed)");
    else
    if (S_ISDIR (entry->st_mode))
        s_refuse (file, "is a directory (not descended)");
    else
    if (!S_ISREG (entry->st_mode))
        s_refuse (file, "is not a regular file");
    else
    if (entry->st_size > DSH_KEYSTORE_FILE_MAX)
        s_refuse (file, "is %jd bytes, over the limit of %d", (intmax_t) entry->st_size, DSH_KEYSTORE_FILE_MAX);
    if (file->refusal)
        return file;

    //  The entry may have been replaced since its lstat: O_NOFOLLOW and
    //  O_NONBLOCK (a FIFO) make that harmless, and fstat checks again
    int fd = openat (dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd == -1 && (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == EINTR)) {
        s_file_destroy (&file);
        return NULL;
    }
    if (fd == -1)
        s_refuse (file, "cannot be opened: %s", strerror (errno));
    else
    if (fstat (fd, &file->stat))
        s_refuse (file, "cannot be read: %s", strerror (errno));
    else
    if (!S_ISREG (file->stat.st_mode) || file->stat.st_size > DSH_KEYSTORE_FILE_MAX)
        s_refuse (file, "changed while read");
    else {
        char *text = (char *) malloc ((size_t) file->stat.st_size + 1);
        assert (text);
        size_t size = 0;
        ssize_t got;
        //  One byte more than fstat said: a file that grew is refused
        while (size <= (size_t) file->stat.st_size
           && (got = read (fd, text + size, (size_t) file->stat.st_size + 1 - size)) > 0)
            size += (size_t) got;
        if (size != (size_t) file->stat.st_size)
            s_refuse (file, "changed while read");
        else
            s_file_parse (file, text, size);
        free (text);
    }
    if (fd != -1)
        close (fd);
    return file;
}

//  True if entry is what record was when it was read.
static bool
s_file_same (const s_file_t *file, const struct stat *entry)
{
    return file->stat.st_dev == entry->st_dev && file->stat.st_ino == entry->st_ino
        && file->stat.st_mode == entry->st_mode && file->stat.st_size == entry->st_size
        && file->stat.st_mtim.tv_sec == entry->st_mtim.tv_sec
        && file->stat.st_mtim.tv_nsec == entry->st_mtim.tv_nsec
        && file->stat.st_ctim.tv_sec == entry->st_ctim.tv_sec
        && file->stat.st_ctim.tv_nsec == entry->st_ctim.tv_nsec;
}

//  ---------------------------------------------------------------------
//  Checking the directory

static int
s_by_name (const void *left, const void *right)
{
    return strcmp ((*(s_file_t * const *) left)->name, (*(s_file_t * const *) right)->name);
}

//  Builds the keys table from the file records: the first file by name
//  has a key; a later one is refused (logged when that is new).
static void
s_self_build_keys (self_t *self)
{
    size_t count = zhashx_size (self->files), index = 0;
    s_file_t **sorted = (s_file_t **) malloc ((count? count: 1) * sizeof (s_file_t *));
    assert (sorted);
    for (s_file_t *file = (s_file_t *) zhashx_first (self->files); file;
         file = (s_file_t *) zhashx_next (self->files))
        sorted [index++] = file;
    qsort (sorted, count, sizeof (s_file_t *), s_by_name);
    zhashx_t *keys = zhashx_new ();
    assert (keys);
    for (index = 0; index < count; index++) {
        s_file_t *file = sorted [index];
        if (file->refusal)
            continue;
        s_file_t *first = (s_file_t *) zhashx_lookup (keys, file->public_key);
        if (!first) {
            zhashx_insert (keys, file->public_key, file);
            zstr_free (&file->duplicate_of);
        }
        else
        if (!file->duplicate_of || !streq (file->duplicate_of, first->name)) {
            zstr_free (&file->duplicate_of);
            file->duplicate_of = strdup (first->name);
            zsys_warning ("dsh-keystore: %s/%s refused: its key is %s's, already loaded", self->directory,
                          file->name, first->name);
        }
    }
    free (sorted);
    zhashx_destroy (&self->keys);
    self->keys = keys;
}

//  Stats every entry of the directory, reads what changed, and rebuilds
//  the keys if anything did. Returns 0, or -1 if the directory cannot be
//  read (the keys stay as they were).
static int
s_self_check (self_t *self)
{
    if (!self->directory)
        return 0;
    int dir_fd = open (self->directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = dir_fd == -1? NULL: fdopendir (dir_fd);
    if (!dir) {
        if (!self->directory_failed)
            zsys_warning ("dsh-keystore: cannot read the allow-list %s: %s; %zu keys stay in force",
                          self->directory, strerror (errno), zhashx_size (self->keys));
        self->directory_failed = true;
        if (dir_fd != -1)
            close (dir_fd);
        return -1;
    }
    if (self->directory_failed)
        zsys_info ("dsh-keystore: the allow-list %s can be read again", self->directory);
    self->directory_failed = false;

    zhashx_t *files = s_files_new ();
    bool changed = false;
    struct dirent *entry;
    while ((entry = readdir (dir))) {
        const char *name = entry->d_name;
        size_t length = strlen (name);
        //  Hidden files (and . and ..) and secret keys, as zcertstore
        if (name [0] == '.' || (length >= 7 && streq (name + length - 7, "_secret")))
            continue;
        struct stat status;
        if (fstatat (dir_fd, name, &status, AT_SYMLINK_NOFOLLOW))
            continue;               //  gone since readdir
        s_file_t *file = (s_file_t *) zhashx_lookup (self->files, name);
        zhashx_delete (self->files, name);
        if (!file || !s_file_same (file, &status)) {
            s_file_t *read = s_file_read (dir_fd, name, &status);
            //  Not read for want of resources: keep the old record (if
            //  any), and try again next time
            if (read) {
                s_file_destroy (&file);
                file = read;
                changed = true;
                if (file->refusal)
                    zsys_warning ("dsh-keystore: %s/%s refused: %s", self->directory, name, file->refusal);
            }
        }
        if (file)
            zhashx_insert (files, name, file);
    }
    closedir (dir);
    //  What is left of the old records was removed
    changed = changed || zhashx_size (self->files) > 0;
    s_files_destroy (&self->files);
    self->files = files;
    if (changed) {
        size_t before = zhashx_size (self->keys);
        s_self_build_keys (self);
        zsys_info ("dsh-keystore: allow-list %s: %zu keys (were %zu)", self->directory,
                   zhashx_size (self->keys), before);
    }
    return 0;
}

static int
s_self_handle_timer (zloop_t *loop, int timer_id, void *argument)
{
    (void) loop;
    (void) timer_id;
    s_self_check ((self_t *) argument);
    return 0;
}

static void
s_self_set_timer (self_t *self)
{
    if (self->timer_id != -1)
        zloop_timer_end (self->loop, self->timer_id);
    self->timer_id = self->directory? zloop_timer (self->loop, (size_t) self->interval_ms, 0,
                                                   s_self_handle_timer, self): -1;
}

//  ---------------------------------------------------------------------
//  ZAP (RFC 27)

//  Sends a ZAP reply to request: status, text, user_id and metadata.
static void
s_zap_reply (self_t *self, const char *sequence, const char *status, const char *text, const char *user_id,
             const byte *metadata, size_t metadata_size)
{
    if (self->verbose)
        zsys_info ("dsh-keystore: ZAP reply %s %s%s%s", status, text, *user_id? " user ": "", user_id);
    zmsg_t *reply = zmsg_new ();
    zmsg_addstr (reply, "1.0");
    zmsg_addstr (reply, sequence);
    zmsg_addstr (reply, status);
    zmsg_addstr (reply, text);
    zmsg_addstr (reply, user_id);
    zmsg_addmem (reply, metadata, metadata_size);
    if (zmsg_send (&reply, self->handler))
        zmsg_destroy (&reply);
}

//  The frame of request at index as a string, or "" (caller frees).
static char *
s_zap_string (zmsg_t *request, size_t index)
{
    zframe_t *frame = zmsg_first (request);
    for (size_t skip = 0; frame && skip < index; skip++)
        frame = zmsg_next (request);
    return frame? zframe_strdup (frame): strdup ("");
}

//  Answers one ZAP request: version, sequence, domain, address, routing
//  id, mechanism, credentials.
static int
s_self_handle_zap (zloop_t *loop, zsock_t *handler, void *argument)
{
    (void) loop;
    self_t *self = (self_t *) argument;
    zmsg_t *request = zmsg_recv (handler);
    if (!request)
        return 0;
    char *version = s_zap_string (request, 0);
    char *sequence = s_zap_string (request, 1);
    char *domain = s_zap_string (request, 2);
    char *address = s_zap_string (request, 3);
    char *mechanism = s_zap_string (request, 5);
    zframe_t *credential = zmsg_size (request) > 6? zmsg_last (request): NULL;
    if (self->verbose)
        zsys_info ("dsh-keystore: ZAP request mechanism=%s domain=%s address=%s", mechanism, domain, address);
    if (!streq (version, "1.0") || zmsg_size (request) < 6)
        s_zap_reply (self, sequence, "500", "Malformed ZAP request", "", NULL, 0);
    else
    if (streq (mechanism, "NULL"))
        s_zap_reply (self, sequence, "200", "OK", "", NULL, 0);
    else
    if (streq (mechanism, "CURVE") && credential && zframe_size (credential) == 32) {
        char client_key [41];
        zmq_z85_encode (client_key, zframe_data (credential), 32);
        s_file_t *file = streq (domain, DSH_CURVE_DOMAIN)? (s_file_t *) zhashx_lookup (self->keys, client_key): NULL;
        if (file)
            s_zap_reply (self, sequence, "200", "OK", client_key, file->metadata, file->metadata_size);
        else
            s_zap_reply (self, sequence, "400", "No access", "", NULL, 0);
    }
    else
        s_zap_reply (self, sequence, "400", "No access", "", NULL, 0);
    zstr_free (&version);
    zstr_free (&sequence);
    zstr_free (&domain);
    zstr_free (&address);
    zstr_free (&mechanism);
    zmsg_destroy (&request);
    return 0;
}

//  ---------------------------------------------------------------------
//  Commands

static int
s_self_handle_pipe (zloop_t *loop, zsock_t *pipe, void *argument)
{
    (void) loop;
    self_t *self = (self_t *) argument;
    zmsg_t *request = zmsg_recv (pipe);
    if (!request)
        return -1;
    char *command = zmsg_popstr (request);
    int rc = 0;
    if (command && streq (command, "$TERM")) {
        self->terminated = true;
        rc = -1;
    }
    else
    if (command && streq (command, "VERBOSE")) {
        self->verbose = true;
        zsock_signal (pipe, 0);
    }
    else
    if (command && streq (command, "CURVE")) {
        char *directory = zmsg_popstr (request);
        zstr_free (&self->directory);
        self->directory = directory;
        self->directory_failed = false;
        zhashx_purge (self->keys);
        s_files_destroy (&self->files);
        self->files = s_files_new ();
        int status = directory && self->handler? s_self_check (self): -1;
        s_self_set_timer (self);
        zsock_signal (pipe, status? 1: 0);
    }
    else
    if (command && streq (command, "INTERVAL")) {
        char *interval = zmsg_popstr (request);
        int interval_ms = interval? atoi (interval): 0;
        if (interval_ms > 0) {
            self->interval_ms = interval_ms;
            s_self_set_timer (self);
        }
        zstr_free (&interval);
        zsock_signal (pipe, 0);
    }
    else
    if (command && streq (command, "KEYS"))
        zstr_sendf (pipe, "%zu", zhashx_size (self->keys));
    else
        zsys_error ("dsh-keystore: invalid command %s", command? command: "(none)");
    zstr_free (&command);
    zmsg_destroy (&request);
    return rc;
}

void
dsh_keystore_actor (zsock_t *pipe, void *args)
{
    (void) args;
    self_t *self = (self_t *) zmalloc (sizeof (self_t));
    assert (self);
    self->pipe = pipe;
    self->interval_ms = DSH_KEYSTORE_CHECK_MS;
    self->timer_id = -1;
    self->files = s_files_new ();
    self->keys = zhashx_new ();
    assert (self->keys);
    self->loop = zloop_new ();
    assert (self->loop);
    //  The owner ends the store ($TERM), not a signal: handshakes go on
    //  being answered while the process stops
    zloop_set_nonstop (self->loop, true);
    zloop_reader (self->loop, pipe, s_self_handle_pipe, self);
    self->handler = zsock_new (ZMQ_REP);
    assert (self->handler);
    if (zsock_bind (self->handler, ZAP_ENDPOINT)) {
        zsys_error ("dsh-keystore: cannot bind %s: %s (another ZAP handler in this process?)", ZAP_ENDPOINT,
                    zmq_strerror (zmq_errno ()));
        zsock_destroy (&self->handler);
    }
    else
        zloop_reader (self->loop, self->handler, s_self_handle_zap, self);
    zsock_signal (pipe, 0);
    //  zloop ends on a signal delivered to this thread (EINTR): go on
    while (!self->terminated) {
        errno = 0;
        if (zloop_start (self->loop) != 0 || errno != EINTR)
            break;
    }
    s_self_destroy (&self);
}
