/*  =========================================================================
    dsh_bench_fds - the file descriptors a swarm bench may open
    =========================================================================
*/

#include "dsh_bench_fds.h"

#include <dirent.h>
#include <stdio.h>
#include <sys/resource.h>

long
dsh_bench_fds_raise (const char *program, long needed)
{
    struct rlimit limit;
    if (getrlimit (RLIMIT_NOFILE, &limit))
        return -1;
    if (limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        if (setrlimit (RLIMIT_NOFILE, &limit))
            getrlimit (RLIMIT_NOFILE, &limit);
    }
    long in_force = limit.rlim_cur == RLIM_INFINITY? (long) 1 << 30: (long) limit.rlim_cur;
    if (in_force < needed)
        fprintf (stderr, "%s: at most %ld open files (ulimit -Hn), about %ld needed: connections will fail\n",
                 program, in_force, needed);
    return in_force;
}

long
dsh_bench_fds_open (pid_t pid)
{
    char path [64];
    snprintf (path, sizeof (path), "/proc/%d/fd", (int) pid);
    DIR *dir = opendir (path);
    if (!dir)
        return -1;
    long count = 0;
    struct dirent *entry;
    while ((entry = readdir (dir)))
        if (entry->d_name [0] != '.')
            count++;
    closedir (dir);
    return count;
}
