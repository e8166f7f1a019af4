/*
 * Output relay of chorusrun: copies what a rank writes to one of its pipes (stdout or
 * stderr) to chorusrun's own stream of the same kind, with "[rank] " in front of every
 * line. Lines are written whole, so the lines of different ranks never mix; a partial
 * line waits until its newline or the end of the pipe. A line longer than the buffer is
 * cut into lines of RELAY_BUF_SIZE bytes, each with the prefix.
 */
#ifndef CHORUSRUN_RELAY_H
#define CHORUSRUN_RELAY_H

#include <stddef.h>

#define RELAY_BUF_SIZE (64 * 1024)

typedef struct {
    int fd;          /* read end of the pipe (non-blocking); -1 once closed */
    int dest_fd;     /* 1 or 2 */
    char prefix[24]; /* "[3] " */
    size_t prefix_len;
    char *buf; /* RELAY_BUF_SIZE bytes: the start of a line not yet complete */
    size_t len;
    int rank; /* whose lines these are, for the hang summary (hang.h); -1: nobody's */
} relay_t;

/* Sets up a relay of fd (made non-blocking here) to dest_fd. prefix may be "" (no prefix).
 * Returns 0, or -1 with errno set. */
int relay_init(relay_t *relay, int fd, int dest_fd, const char *prefix);

typedef enum {
    RELAY_DATA,   /* read something; the pipe is still open */
    RELAY_AGAIN,  /* nothing to read now */
    RELAY_CLOSED, /* the pipe ended (or was already closed) */
} relay_result_t;

/* Reads what is available once (at most one buffer) and writes the complete lines.
 * At the end of the pipe, writes the last partial line with a newline and closes fd. */
relay_result_t relay_read(relay_t *relay);

/* Reads until the pipe would block or ends. */
void relay_drain(relay_t *relay);

/* Writes any partial line (with a newline), closes the pipe and frees the buffer. */
void relay_fini(relay_t *relay);

#endif
