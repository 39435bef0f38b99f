/*  =========================================================================
    dsh - the component SDK: everything a tool, a client or a watcher needs

    #include <dsh.h> and link with `pkg-config --cflags --libs libdsh`.
    =========================================================================
*/

#ifndef DSH_H_INCLUDED
#define DSH_H_INCLUDED

#include "dsh_doc.h"
#include "dsh_json.h"
#include "dsh_proto.h"
#include "dsh_sock.h"
#include "dsh_beacon.h"
#include "dsh_curve.h"
#include "dsh_log.h"
#include "dsh_tooldef.h"
#include "dsh_render.h"
#include "dsh_call.h"
#include "dsh_provider.h"
#include "dsh_client.h"
#include "dsh_watcher.h"
#include "dsh_stage.h"
#include "dsh_component.h"

#endif
