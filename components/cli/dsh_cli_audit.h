/*  =========================================================================
    dsh_cli_audit - dsh audit: the audit trail's records, and verify

    Asks every broker of the list for its records (AUDIT), merges them by
    time, and prints them as JSON lines or a table; --follow keeps asking.
    audit verify has every broker recompute its chains' hashes.
    =========================================================================
*/

#ifndef DSH_CLI_AUDIT_H_INCLUDED
#define DSH_CLI_AUDIT_H_INCLUDED

#include "dsh_cli.h"

//  dsh audit [verify].
int
    dsh_cli_audit (dsh_cli_options_t *options);

#endif
