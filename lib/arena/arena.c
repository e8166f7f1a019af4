/* Placeholder until the arena lands: it never applies. */
#include "arena/arena.h"

chorus_status_t chorus__arena_create(const chorus_arena_params_t *params,
                                     chorus_arena_t **arena_p)
{
    (void)params;
    *arena_p = NULL;
    return CHORUS_SUCCESS;
}

void chorus__arena_destroy(chorus_arena_t *arena)
{
    (void)arena;
}

int chorus__arena_supports(const chorus_arena_t *arena, chorus_coll_t coll)
{
    (void)arena;
    (void)coll;
    return 0;
}

chorus_status_t chorus__arena_allreduce(chorus_arena_t *arena, const void *sendbuf,
                                        void *recvbuf, size_t count, chorus_dtype_t dtype,
                                        chorus_op_t op, const char *what)
{
    (void)arena, (void)sendbuf, (void)recvbuf, (void)count, (void)dtype, (void)op, (void)what;
    return CHORUS_ERR_UNSUPPORTED;
}

size_t chorus__arena_flat_max(const chorus_arena_t *arena)
{
    (void)arena;
    return 0;
}

size_t chorus__arena_chunk_bytes(const chorus_arena_t *arena)
{
    (void)arena;
    return 0;
}
