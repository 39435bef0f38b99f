/*  =========================================================================
    dsh_cli_approver - dsh approver: deciding what permission stages ask

    A DEALER on each permission stage's approvals socket (one per broker of
    the list, or one for a stage process that serves several): it says
    APPROVER every second, gets a PENDING for every call that waits for a
    person and a RESOLVED when it is decided, and sends DECIDE (PROTOCOL.md,
    "Approvals"). Not on a terminal it prints requests and outcomes as JSON
    lines and takes decisions from stdin (or --auto); on one it shows each
    request readably and asks for it.
    =========================================================================
*/

#ifndef DSH_CLI_APPROVER_H_INCLUDED
#define DSH_CLI_APPROVER_H_INCLUDED

#include "dsh_cli.h"

//  dsh approver: runs until interrupted or stdin ends.
int
    dsh_cli_approver (dsh_cli_options_t *options);

#endif
