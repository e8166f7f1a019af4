#include "util/hugemem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

void *chorus__huge_calloc(size_t bytes)
{
    size_t size;
    void *p;

    if (bytes < HUGE_PAGE) return calloc(1, bytes ? bytes : 1);
    if (bytes > SIZE_MAX - HUGE_PAGE) return NULL;
    size = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE; /* aligned_alloc wants a multiple */
    p = aligned_alloc(HUGE_PAGE, size);
    if (p == NULL) return NULL;
#ifdef MADV_HUGEPAGE
    /* Advice only: an error (THP not built in) leaves ordinary pages. */
    (void)madvise(p, size, MADV_HUGEPAGE);
#endif
    memset(p, 0, size); /* after the advice, so that the first touch takes huge pages */
    return p;
}
