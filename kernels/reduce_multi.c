/*
 * Reduction of several sources at once (the arena's slice owners reduce every local rank's
 * contribution). First version: chained two-source passes in blocks small enough to stay
 * in L1, so each source is read from memory once and dst written once per block.
 */
#include "kernels.h"

#include <string.h>

#define MULTI_BLOCK_BYTES 8192

chorus_status_t chorus_kernel_reduce_multi(void *dst, const void *const *src, int nsrc,
                                           size_t count, chorus_dtype_t dtype, chorus_op_t op)
{
    chorus_reduce_fn_t fn = chorus_kernel_reduce_fn(dtype, op);
    size_t esize = chorus_dtype_size(dtype), block, done;

    if (fn == NULL || esize == 0 || nsrc < 1 || dst == NULL || src == NULL)
        return CHORUS_ERR_INVALID_ARGUMENT;
    block = MULTI_BLOCK_BYTES / esize;
    for (done = 0; done < count; done += block) {
        size_t n = count - done < block ? count - done : block, off = done * esize;
        char *d = (char *)dst + off;

        if (nsrc == 1) {
            if (d != (const char *)src[0] + off) memcpy(d, (const char *)src[0] + off, n * esize);
            continue;
        }
        fn(d, (const char *)src[0] + off, (const char *)src[1] + off, n);
        for (int s = 2; s < nsrc; s++) fn(d, d, (const char *)src[s] + off, n);
    }
    return CHORUS_SUCCESS;
}
