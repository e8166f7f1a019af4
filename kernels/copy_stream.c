/*
 * Copy into a destination that will not be read again soon (the arena's copy-out of a
 * large result into the caller's buffer). Above the last-level cache a cached store first
 * reads every destination line from memory (read for ownership) and then evicts lines the
 * copy still needs; non-temporal stores write whole lines without reading them, which
 * saves a third of the memory traffic of the copy.
 */
#include "kernels.h"
#include "reduce_ops.h"

#include <string.h>

void chorus_kernel_copy_stream(void *dst, const void *src, size_t bytes, size_t traffic)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    size_t head, body;

    if (bytes == 0 || dst == src) return;
    if (bytes < 256 || !chorus__kernel_use_stream(traffic)) {
        memcpy(dst, src, bytes);
        return;
    }
    head = chorus__stream_head(d, 1);
    body = (bytes - head) & ~(size_t)15;
    memcpy(d, s, head);
    chorus__kernel_stream(d + head, s + head, body);
    memcpy(d + head + body, s + head + body, bytes - head - body);
    chorus__kernel_stream_fence();
}
