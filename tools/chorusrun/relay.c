/*
 * Output relay of chorusrun (see relay.h). chorusrun is single-threaded and writes each
 * batch of whole lines with one write loop before it reads from another pipe, which is
 * what keeps the lines of different ranks apart.
 */
#include "relay.h"

#include "hang.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Lines are gathered here, prefixes included, and written in batches. */
#define OUT_SIZE (2 * RELAY_BUF_SIZE)

typedef struct {
    int fd;
    size_t len;
    char data[OUT_SIZE];
} out_t;

static out_t out_buf;

/* A reader that went away (chorusrun ... | head) must not stop chorusrun from supervising
 * its ranks: SIGPIPE is ignored and the output is dropped. */
static void write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return;
        }
        data += n;
        len -= (size_t)n;
    }
}

static void out_flush(out_t *out)
{
    write_all(out->fd, out->data, out->len);
    out->len = 0;
}

static void out_append(out_t *out, const char *data, size_t len)
{
    if (out->len + len > OUT_SIZE) out_flush(out);
    if (len > OUT_SIZE) {
        write_all(out->fd, data, len);
        return;
    }
    memcpy(out->data + out->len, data, len);
    out->len += len;
}

/* Appends one line with its prefix; has_newline says whether data ends with one. */
static void emit(relay_t *relay, const char *data, size_t len, int has_newline)
{
    if (relay->rank >= 0) (void)hang_note_line(relay->rank, data, has_newline ? len - 1 : len);
    out_append(&out_buf, relay->prefix, relay->prefix_len);
    out_append(&out_buf, data, len);
    if (!has_newline) out_append(&out_buf, "\n", 1);
}

/* Writes every complete line of the buffer and keeps the rest at its start. A full
 * buffer without a newline is written as a line of its own, so that every line of the
 * output still says which rank wrote it. */
static void emit_lines(relay_t *relay)
{
    size_t start = 0;

    out_buf.fd = relay->dest_fd;
    out_buf.len = 0;
    for (;;) {
        char *nl = memchr(relay->buf + start, '\n', relay->len - start);
        if (nl == NULL) break;
        size_t end = (size_t)(nl - relay->buf) + 1;
        emit(relay, relay->buf + start, end - start, 1);
        start = end;
    }
    if (start == 0 && relay->len == RELAY_BUF_SIZE) {
        emit(relay, relay->buf, relay->len, 0);
        start = relay->len;
    }
    out_flush(&out_buf);
    memmove(relay->buf, relay->buf + start, relay->len - start);
    relay->len -= start;
}

static void flush_partial(relay_t *relay)
{
    if (relay->len == 0) return;
    out_buf.fd = relay->dest_fd;
    out_buf.len = 0;
    emit(relay, relay->buf, relay->len, 0);
    out_flush(&out_buf);
    relay->len = 0;
}

int relay_init(relay_t *relay, int fd, int dest_fd, const char *prefix)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return -1;
    relay->buf = malloc(RELAY_BUF_SIZE);
    if (relay->buf == NULL) return -1;
    relay->fd = fd;
    relay->dest_fd = dest_fd;
    relay->prefix_len = strlen(prefix);
    if (relay->prefix_len >= sizeof(relay->prefix)) relay->prefix_len = sizeof(relay->prefix) - 1;
    memcpy(relay->prefix, prefix, relay->prefix_len);
    relay->prefix[relay->prefix_len] = '\0';
    relay->len = 0;
    relay->rank = -1;
    return 0;
}

relay_result_t relay_read(relay_t *relay)
{
    ssize_t n;

    if (relay->fd < 0) return RELAY_CLOSED;
    do {
        n = read(relay->fd, relay->buf + relay->len, RELAY_BUF_SIZE - relay->len);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        relay->len += (size_t)n;
        emit_lines(relay);
        return RELAY_DATA;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return RELAY_AGAIN;
    /* End of the pipe, or an error that no retry will cure: finish the stream. */
    flush_partial(relay);
    close(relay->fd);
    relay->fd = -1;
    return RELAY_CLOSED;
}

void relay_drain(relay_t *relay)
{
    while (relay_read(relay) == RELAY_DATA) {
    }
}

void relay_fini(relay_t *relay)
{
    if (relay->buf == NULL) return;
    flush_partial(relay);
    if (relay->fd >= 0) close(relay->fd);
    relay->fd = -1;
    free(relay->buf);
    relay->buf = NULL;
}
