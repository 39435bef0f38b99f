/*  =========================================================================
    dsh_heap - gives the memory the broker has freed back to the system

    glibc's malloc keeps what is freed in its arenas for reuse, and returns
    it to the system only from the top of the main heap. The broker's
    big transient users (a subscriber's queue of large events, thousands of
    connections' buffers and pipes, freed by libzmq's I/O thread) leave it
    in the middle of a heap, or in another thread's arena: after a
    connection storm the RSS stayed at three times its baseline. malloc_trim
    gives free pages back from every arena. It walks the free chunks, so it
    is called only when the allocator holds some megabytes more free than
    the last time it looked: after a bulk of memory was freed, not on every
    tick. Elsewhere than glibc it does nothing.
    =========================================================================
*/

#ifndef DSH_HEAP_H_INCLUDED
#define DSH_HEAP_H_INCLUDED

#include <czmq.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_heap_t dsh_heap_t;

//  Watches the process's heap; trims when threshold_bytes more are free
//  than at the last look.
dsh_heap_t *
    dsh_heap_new (size_t threshold_bytes);

//  Destroy; safe twice.
void
    dsh_heap_destroy (dsh_heap_t **self_p);

//  Look at the free memory the allocator holds, and give it back to the
//  system if it grew by the threshold since the last look. Returns true if
//  it trimmed.
bool
    dsh_heap_trim (dsh_heap_t *self);

#ifdef __cplusplus
}
#endif

#endif
