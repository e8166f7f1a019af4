/*
 * Status and error messages. Every internal function that can fail returns a
 * chorus_status_t; the place that first sees an error records a detail message with
 * chorus__error(), which is what chorus_last_error() returns on this thread.
 */
#ifndef CHORUS_UTIL_STATUS_H
#define CHORUS_UTIL_STATUS_H

#include "chorus.h"

#include <stdarg.h>

#if defined(__GNUC__)
#define CHORUS_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define CHORUS_PRINTF(fmt_idx, arg_idx)
#endif

/* Records a detail message for this thread and returns status, so that error paths read
 * `return chorus__error(CHORUS_ERR_REMOTE, "rank %d: peer %d closed", r, p);`.
 * The message is also logged at WARN level. */
chorus_status_t chorus__error(chorus_status_t status, const char *fmt, ...) CHORUS_PRINTF(2, 3);

/* Like chorus__error, appending ": strerror(err)". */
chorus_status_t chorus__error_errno(chorus_status_t status, int err, const char *fmt, ...)
    CHORUS_PRINTF(3, 4);

/* Prefixes the current detail message with "prefix: " (e.g. the rank and the collective)
 * and returns status unchanged. Used by outer layers to add context. */
chorus_status_t chorus__error_context(chorus_status_t status, const char *fmt, ...)
    CHORUS_PRINTF(2, 3);

/* Clears this thread's detail message (public entry points do this on entry). */
void chorus__error_clear(void);
/* Puts back a message saved from chorus_last_error (after calls that cleared it), without
 * logging it a second time. */
void chorus__error_restore(const char *msg);

/* The one macro for error flow: evaluates expr into the local `status` and jumps to the
 * named label when it is not CHORUS_SUCCESS. It never hides a return. */
#define CHORUS_CHECK_GOTO(expr, label)          \
    do {                                        \
        status = (expr);                        \
        if (status != CHORUS_SUCCESS) goto label; \
    } while (0)

#endif
