#include "util/proc.h"

#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int chorus__pid_dead(uint32_t pid)
{
    char path[64], stat_text[256];
    const char *paren;
    FILE *f;
    size_t n;

    if (kill((pid_t)pid, 0) != 0) return errno == ESRCH;
    /* A zombie still answers kill(); its state in /proc tells. */
    snprintf(path, sizeof path, "/proc/%u/stat", pid);
    f = fopen(path, "re");
    if (f == NULL) return 0;
    n = fread(stat_text, 1, sizeof stat_text - 1, f);
    fclose(f);
    stat_text[n] = '\0';
    paren = strrchr(stat_text, ')');
    return paren != NULL && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

uint64_t chorus__pidns(void)
{
    struct stat st;

    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

int chorus__futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ns)
{
    struct timespec ts = {(time_t)(timeout_ns / 1000000000ULL),
                          (long)(timeout_ns % 1000000000ULL)};

    return (int)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

void chorus__futex_wake(_Atomic uint32_t *word, int nwaiters)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, nwaiters, NULL, NULL, 0);
}
