/*  =========================================================================
    dsh_toolhints - what a tool entry says the tool is, as policies read it

    MCP's behaviour hints (annotations.readOnlyHint, destructiveHint,
    openWorldHint) with MCP's defaults for an absent or non-boolean hint
    (false, true, true: a tool that says nothing may do anything), and
    dsh's own entry key "confined": true when the component enforces the
    call's sandbox stamp itself. An unknown tool (no entry) has every
    default: it may be registered before its call is dispatched, so it is
    judged as the least safe tool it could be. The permission stage (rules
    on annotations), plan mode and the sandbox all read tools through this.
    =========================================================================
*/

#ifndef DSH_TOOLHINTS_H_INCLUDED
#define DSH_TOOLHINTS_H_INCLUDED

#include <msgpack.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

//  The tool entry key a component sets to say it enforces meta "sandbox".
#define DSH_TOOLHINTS_CONFINED "confined"

typedef struct {
    bool read_only;             //  annotations.readOnlyHint, default false
    bool destructive;           //  annotations.destructiveHint, default true
    bool open_world;            //  annotations.openWorldHint, default true
    bool confined;              //  "confined": true, default false
} dsh_toolhints_t;

//  The hints of a tool entry as msgpack (NULL: an unknown tool).
dsh_toolhints_t
    dsh_toolhints_from_msgpack (const msgpack_object *entry);

//  Whether a policy lets a tool (its name and hints) be called.
typedef bool (dsh_toolhints_judge_fn) (const char *name, const dsh_toolhints_t *hints, void *arg);

//  Answer a stage's control command "allowed" {agent, tools}: pack into pk
//  the array of the names of the tools judge lets through, in their order.
//  Each of tools is a tool entry {name, annotations?, ...} or a bare name
//  (judged as an unknown tool: MCP's defaults). Returns 0, or -1 (nothing
//  packed) if tools is not an array.
int
    dsh_toolhints_allowed (const msgpack_object *tools, dsh_toolhints_judge_fn *judge, void *arg,
                           msgpack_packer *pk);


#ifdef __cplusplus
}
#endif

#endif
