/*  =========================================================================
    dsh_cli_setup - setting a deployment up: keygen, brokers

    Neither talks to a broker through a client: keygen writes a CURVE
    keypair for the broker's allow-list, brokers listens for the brokers'
    UDP beacons.
    =========================================================================
*/

#ifndef DSH_CLI_SETUP_H_INCLUDED
#define DSH_CLI_SETUP_H_INCLUDED

#include "dsh_cli.h"

//  dsh keygen PATH --role ROLE.
int
    dsh_cli_keygen (dsh_cli_options_t *options);

//  dsh brokers [beacon[:PORT]].
int
    dsh_cli_brokers (dsh_cli_options_t *options);

#endif
