/* Monotonic time and deadlines. */
#include "util/clock.h"

#include <time.h>

uint64_t chorus__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t chorus__now_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t chorus__deadline_after(double seconds)
{
    if (!(seconds > 0)) return UINT64_MAX;
    /* Beyond ~290 years the arithmetic would overflow; that is "no deadline" anyway. */
    if (seconds > 9e9) return UINT64_MAX;
    return chorus__now_ns() + (uint64_t)(seconds * 1e9);
}

int chorus__deadline_passed(uint64_t deadline_ns)
{
    return deadline_ns != UINT64_MAX && chorus__now_ns() >= deadline_ns;
}

int chorus__deadline_ms_left(uint64_t deadline_ns, int max_ms)
{
    if (deadline_ns == UINT64_MAX) return max_ms;
    uint64_t now = chorus__now_ns();
    if (now >= deadline_ns) return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > (uint64_t)max_ms ? max_ms : (int)ms;
}
