/*  =========================================================================
    dsh_cli_limit - dsh limit: the quotas of a limit stage, read and changed
    at run time
    =========================================================================
*/

#ifndef DSH_CLI_LIMIT_H_INCLUDED
#define DSH_CLI_LIMIT_H_INCLUDED

#include "dsh_cli.h"

//  dsh limit [STAGE] [list | set AGENT TOOL --rate R --burst B --in-flight N
//  | reset [AGENT]].
int
    dsh_cli_limit (dsh_cli_options_t *options);

#endif
