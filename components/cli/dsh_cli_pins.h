/*  =========================================================================
    dsh_cli_pins - dsh pins and dsh grants: what each broker keeps

    pins: the tool definitions each broker has pinned, and those it holds
    back (quarantined) because they differ from their pin (PINS). grants:
    what approvers allowed for a while, kept by each permission stage of
    each broker (CONTROL grants and revoke). Both read from one broker of
    the list and change every one.
    =========================================================================
*/

#ifndef DSH_CLI_PINS_H_INCLUDED
#define DSH_CLI_PINS_H_INCLUDED

#include "dsh_cli.h"

//  dsh pins [list | show | accept | reject | forget].
int
    dsh_cli_pins (dsh_cli_options_t *options);

//  dsh grants [list | revoke ID].
int
    dsh_cli_grants (dsh_cli_options_t *options);

#endif
