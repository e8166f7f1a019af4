/*
 * Text built without stdio or allocation, for what a signal handler writes (the hang report,
 * the flight recorder's dump): a fixed buffer that silently stops growing when full, and
 * numbers spelled by hand; and the call of the handler a program had before ours. Everything
 * here is async-signal-safe.
 */
#ifndef CHORUS_UTIL_SIGFMT_H
#define CHORUS_UTIL_SIGFMT_H

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

typedef struct {
    char *buf;
    size_t cap; /* one byte is kept back, for a closing newline */
    size_t len;
} chorus_sigfmt_t;

static inline void chorus__sigfmt_str(chorus_sigfmt_t *f, const char *s)
{
    while (s != NULL && *s != '\0' && f->len + 1 < f->cap) f->buf[f->len++] = *s++;
}

static inline void chorus__sigfmt_u64(chorus_sigfmt_t *f, uint64_t v)
{
    char digits[24];
    int n = 0;

    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    while (n > 0 && f->len + 1 < f->cap) f->buf[f->len++] = digits[--n];
}

static inline void chorus__sigfmt_i64(chorus_sigfmt_t *f, int64_t v)
{
    if (v < 0) {
        chorus__sigfmt_str(f, "-");
        chorus__sigfmt_u64(f, (uint64_t)0 - (uint64_t)v);
    } else {
        chorus__sigfmt_u64(f, (uint64_t)v);
    }
}

static inline void chorus__sigfmt_hex64(chorus_sigfmt_t *f, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";

    for (int shift = 60; shift >= 0 && f->len + 1 < f->cap; shift -= 4)
        f->buf[f->len++] = hex[(v >> shift) & 15];
}

/* A JSON string: quotes, and anything but plain printable ASCII as \u00XX. */
static inline void chorus__sigfmt_json_str(chorus_sigfmt_t *f, const char *s)
{
    static const char hex[] = "0123456789abcdef";

    chorus__sigfmt_str(f, "\"");
    for (; s != NULL && *s != '\0' && f->len + 7 < f->cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            f->buf[f->len++] = (char)c;
        } else {
            char esc[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], '\0'};
            chorus__sigfmt_str(f, esc);
        }
    }
    chorus__sigfmt_str(f, "\"");
}

/* Writes all of it (retrying short writes); 0 on success, -1 when a write failed. */
static inline int chorus__sigfmt_write(int fd, const chorus_sigfmt_t *f)
{
    for (size_t off = 0; off < f->len;) {
        ssize_t n = write(fd, f->buf + off, f->len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        off += (size_t)n;
    }
    return 0;
}

/* Runs old, the handler installed before ours, as the kernel would have: the program's own
 * handler (or another of ours) still sees the signal; default and ignore do nothing here. */
static inline void chorus__sig_chain(const struct sigaction *old, int sig, siginfo_t *info,
                                     void *ctx)
{
    if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction != NULL)
        old->sa_sigaction(sig, info, ctx);
    else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN && old->sa_handler != NULL)
        old->sa_handler(sig);
}

#endif
