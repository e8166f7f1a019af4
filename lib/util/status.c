/* Status names and the per-thread detail message behind chorus_last_error(). */
#include "util/status.h"

#include "util/log.h"

#include <stdio.h>
#include <string.h>

#define CHORUS_ERROR_MAX 1024

static _Thread_local char error_msg[CHORUS_ERROR_MAX];

const char *chorus_status_string(chorus_status_t status)
{
    switch (status) {
    case CHORUS_SUCCESS: return "success";
    case CHORUS_ERR_INVALID_ARGUMENT: return "invalid argument";
    case CHORUS_ERR_SYSTEM: return "system error";
    case CHORUS_ERR_REMOTE: return "remote peer failure";
    case CHORUS_ERR_TIMEOUT: return "timeout";
    case CHORUS_ERR_MISMATCH: return "collective mismatch";
    case CHORUS_ERR_ABORTED: return "aborted";
    case CHORUS_ERR_UNSUPPORTED: return "unsupported";
    case CHORUS_ERR_AUTH: return "authentication failure";
    case CHORUS_ERR_NO_MEMORY: return "out of memory";
    case CHORUS_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *chorus_last_error(void)
{
    return error_msg;
}

int chorus_version(void)
{
    return CHORUS_VERSION_CODE;
}

/* Each part as the library was compiled (tools/configure.sh decides), not as the caller's
 * headers or the machine have it now. */
#ifdef CHORUS_HAVE_UCX
#define BUILD_UCX "yes"
#else
#define BUILD_UCX "no (stub: built without libucx-dev)"
#endif
#ifdef CHORUS_HAVE_IBV
#define BUILD_IBV "yes"
#else
#define BUILD_IBV "no (stub: built without libibverbs-dev)"
#endif
#ifdef CHORUS_HAVE_HWLOC
#define BUILD_HWLOC "yes"
#else
#define BUILD_HWLOC "no (built without libhwloc-dev)"
#endif
#ifdef CHORUS_HAVE_PMIX
#define BUILD_PMIX "yes"
#else
#define BUILD_PMIX "no (built without libpmix-dev)"
#endif
#define BUILD_STR2(x) #x
#define BUILD_STR(x) BUILD_STR2(x)

const char *chorus_build_info(void)
{
    return "chorus " BUILD_STR(CHORUS_VERSION_MAJOR) "." BUILD_STR(CHORUS_VERSION_MINOR) "." BUILD_STR(
        CHORUS_VERSION_PATCH) ": ucx " BUILD_UCX ", ib verbs " BUILD_IBV ", hwloc " BUILD_HWLOC ", pmix " BUILD_PMIX;
}

void chorus__error_clear(void)
{
    error_msg[0] = '\0';
}

void chorus__error_restore(const char *msg)
{
    snprintf(error_msg, sizeof(error_msg), "%s", msg);
}

static chorus_status_t record(chorus_status_t status, int err, const char *fmt, va_list ap)
{
    int n = vsnprintf(error_msg, sizeof(error_msg), fmt, ap);
    if (n < 0) {
        error_msg[0] = '\0';
        n = 0;
    }
    if (err != 0 && (size_t)n < sizeof(error_msg)) {
        snprintf(error_msg + n, sizeof(error_msg) - (size_t)n, ": %s", strerror(err));
    }
    CHORUS_WARN("error", "%s (%s)", error_msg, chorus_status_string(status));
    return status;
}

chorus_status_t chorus__error(chorus_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(status, 0, fmt, ap);
    va_end(ap);
    return status;
}

chorus_status_t chorus__error_errno(chorus_status_t status, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(status, err, fmt, ap);
    va_end(ap);
    return status;
}

chorus_status_t chorus__error_context(chorus_status_t status, const char *fmt, ...)
{
    char prefix[256];
    char old[CHORUS_ERROR_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    /* Do not stack the same prefix twice when errors travel through several layers. */
    if (strncmp(error_msg, prefix, strlen(prefix)) == 0) return status;
    memcpy(old, error_msg, sizeof(old));
    const char *rest = old[0] != '\0' ? old : chorus_status_string(status);
    /* Truncation is acceptable here: the message is for people. */
    size_t plen = strlen(prefix);
    if (plen + 2 >= sizeof(error_msg)) plen = sizeof(error_msg) - 3;
    memcpy(error_msg, prefix, plen);
    memcpy(error_msg + plen, ": ", 2);
    size_t room = sizeof(error_msg) - plen - 3;
    size_t rlen = strlen(rest);
    if (rlen > room) rlen = room;
    memcpy(error_msg + plen + 2, rest, rlen);
    error_msg[plen + 2 + rlen] = '\0';
    return status;
}
