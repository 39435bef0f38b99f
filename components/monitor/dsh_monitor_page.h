/*  =========================================================================
    dsh_monitor_page - the monitor's one page, built into the binary

    dsh_monitor_page.html (HTML, CSS and plain JavaScript: no build step,
    nothing fetched from elsewhere) as bytes, made by the build.
    =========================================================================
*/

#ifndef DSH_MONITOR_PAGE_H_INCLUDED
#define DSH_MONITOR_PAGE_H_INCLUDED

#include <stddef.h>

//  The page, NUL-terminated, and its size without the NUL.
extern const char dsh_monitor_page [];
extern const size_t dsh_monitor_page_size;

#endif
