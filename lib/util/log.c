/* Logging to stderr or CHORUS_DEBUG_FILE, one whole line per write so that the lines of
 * several threads and processes do not interleave. */
#include "util/log.h"

#include "util/config.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static chorus_log_level_t log_level = CHORUS_LOG_NONE;
static FILE *log_file;
static char log_host[64];
static _Thread_local int log_rank = -1;

/* Expands %h (host) and %p (pid) in the file name. */
static void expand_path(const char *pattern, char *out, size_t len)
{
    size_t o = 0;
    for (const char *p = pattern; *p && o + 1 < len; p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            int n = p[1] == 'h' ? snprintf(out + o, len - o, "%s", log_host)
                                : snprintf(out + o, len - o, "%d", (int)getpid());
            if (n > 0) o += (size_t)n < len - o ? (size_t)n : len - o - 1;
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

static void log_init(void)
{
    const char *level = chorus__config_str("CHORUS_DEBUG");
    if (gethostname(log_host, sizeof(log_host)) != 0) strcpy(log_host, "?");
    log_host[sizeof(log_host) - 1] = '\0';
    if (level == NULL) level = "none";
    if (strcasecmp(level, "warn") == 0) log_level = CHORUS_LOG_WARN;
    else if (strcasecmp(level, "info") == 0) log_level = CHORUS_LOG_INFO;
    else if (strcasecmp(level, "trace") == 0) log_level = CHORUS_LOG_TRACE;
    else log_level = CHORUS_LOG_NONE;

    log_file = stderr;
    const char *path = chorus__config_str("CHORUS_DEBUG_FILE");
    if (log_level != CHORUS_LOG_NONE && path != NULL) {
        char name[512];
        expand_path(path, name, sizeof(name));
        FILE *f = fopen(name, "a");
        if (f != NULL) log_file = f;
    }
}

chorus_log_level_t chorus__log_level(void)
{
    pthread_once(&log_once, log_init);
    return log_level;
}

void chorus__log_set_rank(int rank)
{
    log_rank = rank;
}

int chorus__log_get_rank(void)
{
    return log_rank;
}

void chorus__log_report(const char *line)
{
    char buf[2048];

    (void)chorus__log_level();
    /* One write for the whole line: a SIGUSR1 report (write(2) in a handler) may land
     * between two writes, never inside one. */
    snprintf(buf, sizeof buf, "%s\n", line);
    fputs(buf, log_file);
    fflush(log_file);
}

void chorus__log(chorus_log_level_t level, const char *subsys, const char *fmt, ...)
{
    if (chorus__log_level() < level || level == CHORUS_LOG_NONE) return;

    char line[2048];
    int n;
    if (log_rank >= 0) {
        n = snprintf(line, sizeof(line), "[%s:%d rank %d] %s: ", log_host, (int)getpid(),
                     log_rank, subsys);
    } else {
        n = snprintf(line, sizeof(line), "[%s:%d] %s: ", log_host, (int)getpid(), subsys);
    }
    if (n < 0) return;
    if ((size_t)n < sizeof(line)) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0) n += m;
    }
    if ((size_t)n >= sizeof(line) - 1) n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    line[n] = '\0';
    fputs(line, log_file);
    fflush(log_file);
}
