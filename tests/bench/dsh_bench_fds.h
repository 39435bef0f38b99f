/*  =========================================================================
    dsh_bench_fds - the file descriptors a swarm bench may open

    A swarm of 1 000 components and 1 000 watchers is some 10 000 open
    files (a socket, its mailbox, its connections) in one process, far past
    the usual soft limit of 1 024. Each bench program raises its own soft
    limit to the hard one and says when even that is too low; the
    processes it starts (the broker among them) inherit the raised limit.
    =========================================================================
*/

#ifndef DSH_BENCH_FDS_H_INCLUDED
#define DSH_BENCH_FDS_H_INCLUDED

#include <sys/types.h>

//  Raise the soft limit on open files (RLIMIT_NOFILE) to the hard limit.
//  Returns the limit now in force, or -1 if it cannot be read; if it is
//  below needed, says so on stderr as program.
long
    dsh_bench_fds_raise (const char *program, long needed);

//  How many files process pid has open now (/proc/PID/fd), or -1.
long
    dsh_bench_fds_open (pid_t pid);

#endif
