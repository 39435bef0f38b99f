/*  =========================================================================
    dsh_cli_call - dsh call: one tool call, or a batch of them

    A call shows its progress on stderr (a bar on a terminal), is
    cancelled by Ctrl-C, and gives a broker that cannot be reached up as
    ping does, not at the call's deadline. --batch runs one model turn's
    calls as coding agents do.
    =========================================================================
*/

#ifndef DSH_CLI_CALL_H_INCLUDED
#define DSH_CLI_CALL_H_INCLUDED

#include "dsh_cli.h"

//  dsh call NAME [JSON], or dsh call --batch FILE.
int
    dsh_cli_call (dsh_cli_options_t *options);

#endif
