/*
 * Logging: CHORUS_DEBUG=warn|info|trace selects the level (default: none), and
 * CHORUS_DEBUG_FILE a file instead of stderr ("%h" becomes the host name, "%p" the pid).
 * Each line reads "[host:pid rank r] subsystem: message".
 */
#ifndef CHORUS_UTIL_LOG_H
#define CHORUS_UTIL_LOG_H

#include "util/status.h"

typedef enum {
    CHORUS_LOG_NONE = 0,
    CHORUS_LOG_WARN = 1,
    CHORUS_LOG_INFO = 2,
    CHORUS_LOG_TRACE = 3,
} chorus_log_level_t;

/* The level in force (read once from CHORUS_DEBUG). */
chorus_log_level_t chorus__log_level(void);

/* Writes one line if level <= the level in force. Thread-safe. */
void chorus__log(chorus_log_level_t level, const char *subsys, const char *fmt, ...)
    CHORUS_PRINTF(3, 4);

/* Writes one line that the user asked for by a setting of its own (the hang report of
 * CHORUS_HANG_REPORT), whatever CHORUS_DEBUG says: to CHORUS_DEBUG_FILE when logging goes
 * there, else to stderr. Thread-safe. */
void chorus__log_report(const char *line);

/* The rank printed in this thread's log lines (-1: none). Entry points set it. */
void chorus__log_set_rank(int rank);
int chorus__log_get_rank(void);

#define CHORUS_LOG_ENABLED(level) (chorus__log_level() >= (level))
#define CHORUS_WARN(subsys, ...) chorus__log(CHORUS_LOG_WARN, subsys, __VA_ARGS__)
#define CHORUS_INFO(subsys, ...) chorus__log(CHORUS_LOG_INFO, subsys, __VA_ARGS__)
#define CHORUS_TRACE(subsys, ...) chorus__log(CHORUS_LOG_TRACE, subsys, __VA_ARGS__)

#endif
