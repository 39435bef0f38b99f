/*  =========================================================================
    dsh_heap - gives the memory the broker has freed back to the system
    =========================================================================
*/

#include "dsh_heap.h"

#if defined (__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#   include <malloc.h>
#   define S_HAVE_TRIM
#endif

struct _dsh_heap_t {
    size_t threshold;           //  growth of free memory that calls for a trim
    size_t free_seen;           //  free bytes in the arenas at the last look, or
                                //  the fewest since the last trim
};

dsh_heap_t *
dsh_heap_new (size_t threshold_bytes)
{
    dsh_heap_t *self = (dsh_heap_t *) zmalloc (sizeof (dsh_heap_t));
    assert (self);
    self->threshold = threshold_bytes;
    return self;
}

void
dsh_heap_destroy (dsh_heap_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        free (*self_p);
        *self_p = NULL;
    }
}

bool
dsh_heap_trim (dsh_heap_t *self)
{
    assert (self);
#ifdef S_HAVE_TRIM
    //  Trimmed pages still count as free, so what calls for the next trim
    //  is free memory growing again past the low point since this one
    size_t free_now = mallinfo2 ().fordblks;
    if (free_now < self->free_seen)
        self->free_seen = free_now;
    if (free_now - self->free_seen < self->threshold)
        return false;
    malloc_trim (0);
    self->free_seen = free_now;
    return true;
#else
    return false;
#endif
}
