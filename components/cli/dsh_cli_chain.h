/*  =========================================================================
    dsh_cli_chain - steering the execution chain's stages: mode, approve,
    deny, pending

    Each sends one CONTROL command to a stage through the broker. A mode is
    state in each broker's stage, so mode goes to every broker of a list;
    the others go to the broker the client is connected to.
    =========================================================================
*/

#ifndef DSH_CLI_CHAIN_H_INCLUDED
#define DSH_CLI_CHAIN_H_INCLUDED

#include "dsh_cli.h"

//  dsh mode AGENT plan|normal.
int
    dsh_cli_mode (dsh_cli_options_t *options);

//  dsh approve ID, once or as a grant (--for, --args).
int
    dsh_cli_approve (dsh_cli_options_t *options);

//  dsh deny ID.
int
    dsh_cli_deny (dsh_cli_options_t *options);

//  dsh pending: the calls waiting for approval.
int
    dsh_cli_pending (dsh_cli_options_t *options);

//  A grant's length as typed: minutes (15), or 30s, 15m, 2h. Returns 0
//  with *seconds set, or -1.
int
    dsh_cli_grant_seconds (const char *text, int64_t *seconds);

//  Puts a grant's length into a decision: whole minutes as minutes, what
//  the stage takes by default, anything shorter as seconds.
void
    dsh_cli_grant_length_set (json_t *decision, int64_t seconds);

#endif
