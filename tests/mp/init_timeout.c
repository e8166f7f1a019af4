/*
 * A start-up that never completes (issue 39): one rank never starts, and every other rank's
 * chorus_comm_init_env must return CHORUS_ERR_TIMEOUT once CHORUS_TIMEOUT has passed,
 * naming the rank that never came.
 *
 *   CHORUS_TIMEOUT=S chorusrun -n N mp_init_timeout --absent K [--env]
 *
 * CHORUS_TIMEOUT is set for chorusrun too: its root gives up at the same deadline as the
 * ranks, and tells them who never came. Rank K exits at once, as if never started. Without
 * --env the ranks meet at chorusrun's root (CHORUS_UNIQUE_ID); with --env they use
 * CHORUS_ROOT on a loopback port derived from chorusrun's pid (the same for every rank),
 * which rank 0 serves: then an absent rank 0 leaves nobody to listen, and the others must
 * say that rank 0 never came.
 */
#include "mp_common.h"

#include <time.h>

static int g_rank, g_fail;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int absent = -1, env = 0;
    double timeout, t0, took;
    char want[64], buf[64];
    chorus_comm_t comm = NULL;
    chorus_status_t st;
    const char *rank_text = getenv("CHORUS_RANK");

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--absent") == 0 && i + 1 < argc) absent = atoi(argv[++i]);
        else if (strcmp(argv[i], "--env") == 0) env = 1;
        else {
            fprintf(stderr, "usage: CHORUS_TIMEOUT=S mp_init_timeout --absent K [--env]\n");
            return 2;
        }
    }
    if (absent < 0 || rank_text == NULL || getenv("CHORUS_TIMEOUT") == NULL ||
        (timeout = atof(getenv("CHORUS_TIMEOUT"))) <= 0) {
        fprintf(stderr, "mp_init_timeout: --absent K, CHORUS_TIMEOUT > 0, under chorusrun\n");
        return 2;
    }
    g_rank = atoi(rank_text);
    if (g_rank == absent) return 0; /* never started */
    if (env) {
        /* Every rank derives the same port from its parent, chorusrun. */
        snprintf(buf, sizeof(buf), "127.0.0.1:%d", 20000 + (int)(getppid() % 20000));
        unsetenv("CHORUS_UNIQUE_ID");
        setenv("CHORUS_ROOT", buf, 1);
        setenv("CHORUS_SECRET", "00112233445566778899aabbccddeeff", 1);
    }
    t0 = now_s();
    st = chorus_comm_init_env(&comm);
    took = now_s() - t0;
    CHECK(st == CHORUS_ERR_TIMEOUT, "chorus_comm_init_env with rank %d absent: %s (%s)", absent,
          chorus_status_string(st), st == CHORUS_SUCCESS ? "a communicator" : chorus_last_error());
    if (env && absent == 0)
        snprintf(want, sizeof(want), "rank 0, which serves the rendezvous, never came");
    else snprintf(want, sizeof(want), "never came: rank %d", absent);
    CHECK(strstr(chorus_last_error(), want) != NULL, "the error names the absent rank (\"%s\"): %s",
          want, chorus_last_error());
    /* Not at once (the root's deadline counts from its own start, a little before the
     * ranks': half the timeout is the bound); and no hang: the root's verdict comes at its
     * deadline, and a rank waits CHORUS_BS_VERDICT_GRACE_S (2 s) past its own at most
     * (slack for a busy VM). */
    CHECK(took >= timeout / 2, "returned after %.2f s, long before the %.2f s timeout", took,
          timeout);
    CHECK(took <= timeout + 2.0 + 10.0, "returned after %.2f s (timeout %.2f s)", took, timeout);
    if (comm != NULL) chorus_comm_destroy(comm);
    printf("rank %d: %s after %.2f s: %s\n", g_rank, g_fail ? "FAIL" : "ok", took,
           chorus_last_error());
    return g_fail;
}
