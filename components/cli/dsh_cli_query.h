/*  =========================================================================
    dsh_cli_query - the registry's answers: ping, tools, get, schemas,
    chain, stats, watch

    Each asks the broker the client is connected to (with a list, the
    first that answers) and prints its answer as JSON; stats prints a table
    on a terminal. watch follows the registry with a watcher instead.
    =========================================================================
*/

#ifndef DSH_CLI_QUERY_H_INCLUDED
#define DSH_CLI_QUERY_H_INCLUDED

#include "dsh_cli.h"

//  dsh ping: the broker's PONG.
int
    dsh_cli_ping (dsh_cli_options_t *options);

//  dsh tools: the registered tools.
int
    dsh_cli_tools (dsh_cli_options_t *options);

//  dsh get NAME: one tool and its providers.
int
    dsh_cli_get (dsh_cli_options_t *options);

//  dsh schemas: the tool list rendered for a model provider.
int
    dsh_cli_schemas (dsh_cli_options_t *options);

//  dsh chain: the execution chain's stages and counters.
int
    dsh_cli_chain (dsh_cli_options_t *options);

//  dsh stats: the broker's call statistics.
int
    dsh_cli_stats (dsh_cli_options_t *options);

//  dsh watch: a snapshot, then every change.
int
    dsh_cli_watch (dsh_cli_options_t *options);

#endif
