/* Monotonic time and deadlines. */
#ifndef CHORUS_UTIL_CLOCK_H
#define CHORUS_UTIL_CLOCK_H

#include <stdint.h>

/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t chorus__now_ns(void);

/* Nanoseconds of CLOCK_MONOTONIC_COARSE: a few milliseconds behind, five times cheaper to
 * read (6 ns against 28 here). For time stamps taken on every call that only reports read,
 * in milliseconds. */
uint64_t chorus__now_coarse_ns(void);

/* A deadline seconds from now; seconds <= 0 means no deadline (UINT64_MAX). */
uint64_t chorus__deadline_after(double seconds);

/* Nonzero once the deadline has passed. */
int chorus__deadline_passed(uint64_t deadline_ns);

/* Milliseconds left before the deadline, clamped to [0, max_ms]; for poll(). */
int chorus__deadline_ms_left(uint64_t deadline_ns, int max_ms);

#endif
