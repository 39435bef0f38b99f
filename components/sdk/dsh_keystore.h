/*  =========================================================================
    dsh_keystore - the ZAP handler that checks CURVE keys against an
    allow-list directory

    One actor per process (ZeroMQ's ZAP endpoint, inproc://zeromq.zap.01,
    is one per context) answers every handshake of the process's CURVE
    servers (dsh_curve_server, domain DSH_CURVE_DOMAIN) from an in-memory
    table of the allow-list directory's certificates, keyed by public key:
    a handshake costs one lookup, whatever the directory holds. The reply
    carries the client's public key (Z85) as User-Id and the certificate's
    metadata as ZAP metadata, as czmq's zauth does, so dsh_identity_read
    reads them off every message of the connection.

    The directory is read once when the store starts, then checked every
    DSH_KEYSTORE_CHECK_MS (a stat of each file; nothing is read unless a
    file changed): a certificate added is accepted, and one removed is
    refused, on the first connection after that check. Only regular files
    directly in the directory are read, each at most DSH_KEYSTORE_FILE_MAX
    bytes; symbolic links (not followed), directories (not descended),
    other non-regular files, oversize files, files that are not
    certificates and a second file with a key already loaded (the first by
    file name keeps it) are refused, each with one warning naming it when
    it is first seen or changes; the other files are served. Hidden files
    and NAME_secret files are skipped. If the directory cannot be read,
    the keys last loaded stay in force.

    Commands on the actor's pipe (each answered with a signal unless
    said otherwise):

        VERBOSE             log every ZAP request and reply
        CURVE dir           serve the allow-list dir (read it now): the
                            signal is 0, or 1 if the ZAP endpoint is taken
                            (another handler in this process) or dir
                            cannot be read
        INTERVAL ms         check the directory every ms instead
        KEYS                reply the number of keys served (a string)
        $TERM               end (no signal: the actor ends)

    A CURVE handshake in another ZAP domain than DSH_CURVE_DOMAIN is
    refused. The NULL mechanism (a plain socket with a ZAP domain) is
    allowed, as zauth allows it; PLAIN and GSSAPI are refused.
    =========================================================================
*/

#ifndef DSH_KEYSTORE_H_INCLUDED
#define DSH_KEYSTORE_H_INCLUDED

#include <czmq.h>

#ifdef __cplusplus
extern "C" {
#endif

//  How often the allow-list directory is checked for changes, by default:
//  the longest a removed certificate is still accepted
#define DSH_KEYSTORE_CHECK_MS   1000

//  The largest file the store reads as a certificate
#define DSH_KEYSTORE_FILE_MAX   65536

//  The store's actor: zactor_new (dsh_keystore_actor, NULL), then CURVE dir.
void
    dsh_keystore_actor (zsock_t *pipe, void *args);

#ifdef __cplusplus
}
#endif

#endif
