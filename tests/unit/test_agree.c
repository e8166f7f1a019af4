/*
 * Unit test of the survivors' agreement (lib/core/agree.c): every rank of a job runs in
 * this thread over a simulated network with TCP's guarantees (messages of one connection
 * arrive in order, a dead rank's connections end after the messages it sent, a message to
 * a dead rank is refused), in an order drawn from a seed. A rank is killed before each of
 * its messages in turn (every rank, every message), with and without a rank that was dead
 * before the agreement began, for 2 to 8 ranks and many delivery orders. Every run must
 * end with all survivors decided on the same dead set and the same decision blob (or, where
 * a test suspects a live rank on purpose, that rank excluded and told so): never two
 * decisions, never a survivor still waiting.
 *
 * Each sweep runs twice: with decided ranks that stay (and answer), and with decided ranks
 * that return at once (chorus__agree_leave, then their connections end), as chorus_comm_shrink
 * does with its last decision. A rank that left is alive: to take it for dead and decide
 * without it is the split the second mode looks for.
 *
 * The communicator's virtual transport is not used: it is built for schedules (a send
 * completes only when the matching receive is posted), while the agreement's messages are
 * unsolicited and its failure detector is the end of a connection, which this network
 * models directly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/agree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 8
#define MAX_ITEMS 4096
#define MSG_MAX 512

typedef enum { ITEM_MSG, ITEM_DEAD, ITEM_START } item_kind_t;

typedef struct {
    item_kind_t kind;
    int from, to; /* ITEM_DEAD: from died, to learns it; ITEM_START: to starts */
    size_t len;
    uint8_t bytes[MSG_MAX];
} item_t;

typedef struct {
    int n;
    uint64_t rng;
    chorus_agree_t *ag[MAX_RANKS];
    int alive[MAX_RANKS];
    int started[MAX_RANKS];
    int gone[MAX_RANKS]; /* killed, or left after its exclusion or decision */
    int left[MAX_RANKS]; /* returned with its decision: alive, but its connections end */
    int leave;           /* decided ranks return at once */
    int linked[MAX_RANKS][MAX_RANKS];
    int sends[MAX_RANKS];
    int victim, victim_at; /* kill victim before its victim_at-th send (-1: nobody) */
    int dead_from_start;   /* -1: none */
    uint8_t initial[MAX_RANKS][MAX_RANKS];
    item_t *items;
    int nitems;
    int steps;
    int trace; /* AGREE_TRACE="n seed victim at dead leave" prints that run's deliveries */
} sim_t;

static uint64_t next_rand(sim_t *s)
{
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return s->rng;
}

static item_t *push(sim_t *s, item_kind_t kind, int from, int to)
{
    item_t *it;

    assert_true(s->nitems < MAX_ITEMS);
    it = &s->items[s->nitems++];
    it->kind = kind;
    it->from = from;
    it->to = to;
    it->len = 0;
    return it;
}

/* The rank dies (or leaves): its peers' connections to it end after what it sent. */
static void kill_rank(sim_t *s, int r)
{
    s->alive[r] = 0;
    s->gone[r] = 1;
    for (int q = 0; q < s->n; q++) {
        if (q != r && s->linked[r][q]) push(s, ITEM_DEAD, r, q);
    }
}

static void flush(sim_t *s, int r)
{
    uint8_t buf[MSG_MAX];
    size_t len;
    int to;

    assert_true(chorus__agree_msg_max(s->n) <= MSG_MAX);
    if (chorus__agree_decided_here(s->ag[r])) {
        char blob[32];
        snprintf(blob, sizeof blob, "decided by %d", r);
        if (chorus__agree_blob(s->ag[r], &len) != NULL && len == 0)
            assert_int_equal(chorus__agree_set_blob(s->ag[r], blob, strlen(blob)), CHORUS_SUCCESS);
    }
    while (s->alive[r] && chorus__agree_next_out(s->ag[r], &to, buf, &len)) {
        item_t *it;
        assert_true(to >= 0 && to < s->n && to != r);
        if (r == s->victim && s->sends[r] == s->victim_at) {
            kill_rank(s, r);
            return;
        }
        s->sends[r]++;
        s->linked[r][to] = s->linked[to][r] = 1;
        if (s->gone[to]) { /* refused: the sender learns at once */
            push(s, ITEM_DEAD, to, r);
            continue;
        }
        it = push(s, ITEM_MSG, r, to);
        memcpy(it->bytes, buf, len);
        it->len = len;
    }
    /* An excluded rank returns from the call and closes its connections; so does a decided
     * one in the leave mode, once it sent its decision to every survivor. */
    if (s->alive[r] && chorus__agree_state(s->ag[r]) == CHORUS_AGREE_EXCLUDED) kill_rank(s, r);
    if (s->leave && s->alive[r] && !s->left[r] &&
        chorus__agree_state(s->ag[r]) == CHORUS_AGREE_DECIDED) {
        s->left[r] = 1;
        chorus__agree_leave(s->ag[r]);
        flush(s, r);
        if (s->alive[r]) { /* not killed while it sent them */
            kill_rank(s, r);
            s->alive[r] = 1;
        }
    }
}

/* Index of the item to deliver: a random one, but the oldest of its connection (TCP's
 * order), and nothing for a rank that has not started (its listener's backlog). */
static int pick(sim_t *s)
{
    int i = (int)(next_rand(s) % (uint64_t)s->nitems);

    for (int tries = 0; tries < s->nitems; tries++, i = (i + 1) % s->nitems) {
        item_t *it = &s->items[i];
        if (it->kind != ITEM_START && !s->started[it->to]) continue;
        for (int j = 0; j < i; j++) {
            item_t *e = &s->items[j];
            if (e->kind != ITEM_START && e->from == it->from && e->to == it->to) return j;
        }
        return i;
    }
    return -1;
}

static void deliver(sim_t *s, int i)
{
    item_t it = s->items[i];
    int r = it.to;

    memmove(&s->items[i], &s->items[i + 1], (size_t)(s->nitems - i - 1) * sizeof(item_t));
    s->nitems--;
    if (s->trace)
        fprintf(stderr, "  %s %d -> %d (type %d)%s\n",
                it.kind == ITEM_START ? "start" : it.kind == ITEM_DEAD ? "dead" : "msg", it.from,
                r, it.kind == ITEM_MSG ? it.bytes[4] : 0, s->alive[r] ? "" : " (to the dead)");
    if (!s->alive[r] || s->gone[r]) return;
    if (it.kind == ITEM_START) {
        assert_int_equal(chorus__agree_create(r, s->n, 7, CHORUS_AGREE_NO_VOTE, s->initial[r],
                                              &s->ag[r]),
                         CHORUS_SUCCESS);
        s->started[r] = 1;
    } else if (it.kind == ITEM_DEAD) {
        chorus__agree_on_dead(s->ag[r], it.from);
    } else {
        assert_int_equal(chorus__agree_on_msg(s->ag[r], it.from, it.bytes, it.len, NULL),
                         CHORUS_SUCCESS);
    }
    flush(s, r);
}

/* Runs one job to quiescence; returns the number of deliveries. */
static void run(sim_t *s, int n, uint64_t seed, int victim, int victim_at, int dead_from_start)
{
    memset(s->left, 0, sizeof s->left);
    memset(s->ag, 0, sizeof s->ag);
    s->n = n;
    s->rng = seed * 0x9e3779b97f4a7c15ull + 1;
    s->victim = victim;
    s->victim_at = victim_at;
    s->dead_from_start = dead_from_start;
    s->nitems = 0;
    s->steps = 0;
    {
        char want[64];
        const char *t = getenv("AGREE_TRACE");
        snprintf(want, sizeof want, "%d %llu %d %d %d %d", n, (unsigned long long)seed, victim,
                 victim_at, dead_from_start, s->leave);
        s->trace = t != NULL && strcmp(t, want) == 0;
    }
    memset(s->linked, 0, sizeof s->linked);
    memset(s->sends, 0, sizeof s->sends);
    for (int r = 0; r < n; r++) {
        s->alive[r] = r != dead_from_start;
        s->gone[r] = !s->alive[r];
        s->started[r] = 0;
        if (s->alive[r]) push(s, ITEM_START, -1, r);
    }
    while (s->nitems > 0) {
        int i = pick(s);
        if (i < 0) break;
        deliver(s, i);
        assert_true(++s->steps < 100000);
    }
}

/* Every survivor decided, all on one dead set and blob that the coordinator made, which
 * spares every survivor; none excluded unless `excluded` (a live rank suspected on
 * purpose) is that rank. */
static void check(sim_t *s, int excluded, const char *label)
{
    const uint8_t *dead0 = NULL;
    const void *blob0 = NULL;
    size_t len0 = 0;

    for (int r = 0; r < s->n; r++) {
        chorus_agree_state_t st;
        if (s->ag[r] == NULL) continue;
        st = chorus__agree_state(s->ag[r]);
        if (s->alive[r] && st == CHORUS_AGREE_RUNNING) fail_msg("%s: rank %d still waits", label, r);
        if (chorus__agree_conflict(s->ag[r])) fail_msg("%s: rank %d saw two decisions", label, r);
        if (r == excluded) {
            if (st != CHORUS_AGREE_EXCLUDED) fail_msg("%s: suspected rank %d not excluded", label, r);
            continue;
        }
        if (!s->alive[r]) continue; /* the dead may have decided too: nobody heeds them */
        if (st != CHORUS_AGREE_DECIDED)
            fail_msg("%s: survivor %d ended in state %d", label, r, (int)st);
        if (dead0 == NULL) {
            dead0 = chorus__agree_dead(s->ag[r]);
            blob0 = chorus__agree_blob(s->ag[r], &len0);
            if (len0 == 0) fail_msg("%s: rank %d decided without a blob", label, r);
            continue;
        }
        size_t len;
        const void *blob = chorus__agree_blob(s->ag[r], &len);
        if (memcmp(dead0, chorus__agree_dead(s->ag[r]), (size_t)s->n) != 0 || len != len0 ||
            memcmp(blob, blob0, len) != 0)
            fail_msg("%s: rank %d decided differently", label, r);
    }
    for (int r = 0; dead0 != NULL && r < s->n; r++) {
        if (s->alive[r] && r != excluded && dead0[r])
            fail_msg("%s: survivor %d is in the dead set", label, r);
        if (r == s->dead_from_start && !dead0[r])
            fail_msg("%s: rank %d, dead from the start, is a survivor", label, r);
    }
    for (int r = 0; r < s->n; r++) chorus__agree_destroy(s->ag[r]);
}

static sim_t *new_sim(void)
{
    sim_t *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->items = calloc(MAX_ITEMS, sizeof(item_t));
    assert_non_null(s->items);
    return s;
}

static void free_sim(sim_t *s)
{
    free(s->items);
    free(s);
}

/* Which survivors already know of the rank dead from the start: a subset drawn from seed. */
static void set_initial(sim_t *s, int n, int dead, uint64_t seed)
{
    memset(s->initial, 0, sizeof s->initial);
    for (int r = 0; dead >= 0 && r < n; r++) s->initial[r][dead] = (seed >> r & 1) != 0;
}

/* Kills each rank before each of its messages in turn, for n ranks, `seeds` orders. */
static void sweep(int n, int dead_from_start, int seeds)
{
    sim_t *s = new_sim();
    char label[128];
    int runs = 0;
    const char *more = getenv("AGREE_SEEDS"); /* a longer hunt than the default */

    if (more != NULL && atoi(more) > seeds) seeds = atoi(more);

    for (uint64_t seed = 1; seed <= (uint64_t)seeds * 2; seed++) {
        int base[MAX_RANKS];
        s->leave = (int)(seed & 1);
        set_initial(s, n, dead_from_start, (seed + 1) / 2);
        run(s, n, (seed + 1) / 2, -1, -1, dead_from_start);
        snprintf(label, sizeof label, "n=%d seed=%llu leave=%d no death", n,
                 (unsigned long long)(seed + 1) / 2, s->leave);
        memcpy(base, s->sends, sizeof base);
        check(s, -1, label);
        for (int v = 0; v < n; v++) {
            if (v == dead_from_start) continue;
            for (int k = 0; k <= base[v]; k++) {
                run(s, n, (seed + 1) / 2, v, k, dead_from_start);
                snprintf(label, sizeof label, "n=%d seed=%llu leave=%d dead=%d: rank %d killed "
                         "before message %d", n, (unsigned long long)(seed + 1) / 2, s->leave,
                         dead_from_start, v, k);
                check(s, -1, label);
                runs++;
            }
        }
    }
    print_message("n=%d, dead from the start %d: %d runs with a death injected\n", n,
                  dead_from_start, runs);
    free_sim(s);
}

static void test_one_death_everywhere(void **state)
{
    (void)state;
    for (int n = 2; n <= MAX_RANKS; n++) sweep(n, -1, 40);
}

/* The acceptance scenario: one rank is dead when the agreement begins (known to some
 * survivors only), and a second dies at every step of it. */
static void test_second_death_during_agreement(void **state)
{
    (void)state;
    for (int n = 3; n <= MAX_RANKS; n++) {
        sweep(n, 0, 24);     /* the first coordinator is the dead one */
        sweep(n, n / 2, 24); /* a rank in the middle */
    }
}

/* A live rank suspected by one survivor from the start is told it is excluded, and the
 * others decide without it; nobody waits. */
static void test_wrongly_suspected(void **state)
{
    sim_t *s = new_sim();
    char label[96];

    (void)state;
    for (int n = 2; n <= MAX_RANKS; n++) {
        for (int wrong = 0; wrong < n; wrong++) {
            for (uint64_t seed = 1; seed <= 16; seed++) {
                int accuser = (wrong + 1 + (int)(seed % (uint64_t)(n - 1))) % n;
                memset(s->initial, 0, sizeof s->initial);
                s->initial[accuser][wrong] = 1;
                run(s, n, seed, -1, -1, -1);
                snprintf(label, sizeof label, "n=%d seed=%llu: rank %d suspects live rank %d",
                         n, (unsigned long long)seed, accuser, wrong);
                assert_true(s->ag[wrong] != NULL);
                check(s, wrong, label);
            }
        }
    }
    free_sim(s);
}

/* Bytes from a peer are checked before use: wrong sizes, magic, sender, epoch, bits past
 * the rank count and oversized blobs are refused, and change nothing. */
static void test_malformed_refused(void **state)
{
    chorus_agree_t *a, *b;
    uint8_t buf[MSG_MAX], bad[MSG_MAX];
    size_t len;
    uint32_t epoch = 0;
    int to;

    (void)state;
    assert_int_equal(chorus__agree_create(0, 3, 1, 5, NULL, &a), CHORUS_SUCCESS);
    assert_int_equal(chorus__agree_create(1, 3, 1, 5, NULL, &b), CHORUS_SUCCESS);
    assert_true(chorus__agree_next_out(b, &to, buf, &len)); /* b's state, to its target 0 */
    assert_int_equal(to, 0);

    assert_int_equal(chorus__agree_on_msg(a, 1, buf, len - 1, NULL), CHORUS_ERR_REMOTE);
    memcpy(bad, buf, len);
    bad[0] ^= 1;
    assert_int_equal(chorus__agree_on_msg(a, 1, bad, len, NULL), CHORUS_ERR_REMOTE);
    assert_int_equal(chorus__agree_on_msg(a, 2, buf, len, NULL), CHORUS_ERR_REMOTE); /* sender */
    memcpy(bad, buf, len);
    bad[CHORUS_AGREE_HEADER_BYTES] |= 0x80; /* rank 7 of 3 */
    assert_int_equal(chorus__agree_on_msg(a, 1, bad, len, NULL), CHORUS_ERR_REMOTE);
    memcpy(bad, buf, len);
    bad[4] = 9; /* no such type */
    assert_int_equal(chorus__agree_on_msg(a, 1, bad, len, NULL), CHORUS_ERR_REMOTE);
    memcpy(bad, buf, len);
    bad[11] = 2; /* epoch 2 */
    assert_int_equal(chorus__agree_on_msg(a, 1, bad, len, &epoch), CHORUS_ERR_MISMATCH);
    assert_int_equal(epoch, 2);
    memcpy(bad, buf, len);
    bad[4] = CHORUS_AGREE_MSG_DECIDE; /* a decision with no blob length */
    assert_int_equal(chorus__agree_on_msg(a, 1, bad, len, NULL), CHORUS_ERR_REMOTE);
    bad[len] = 0xff; /* a blob length of 4 GiB */
    bad[len + 1] = bad[len + 2] = bad[len + 3] = 0xff;
    assert_int_equal(chorus__agree_on_msg(a, 1, bad, len + 4, NULL), CHORUS_ERR_REMOTE);
    assert_int_equal(chorus__agree_state(a), CHORUS_AGREE_RUNNING);

    /* The good one counts: rank 0 then waits for rank 2 only. */
    assert_int_equal(chorus__agree_on_msg(a, 1, buf, len, NULL), CHORUS_SUCCESS);
    assert_int_equal(chorus__agree_state(a), CHORUS_AGREE_RUNNING);
    chorus__agree_on_dead(a, 2);
    assert_int_equal(chorus__agree_state(a), CHORUS_AGREE_DECIDED);
    assert_true(chorus__agree_decided_here(a));
    assert_int_equal(chorus__agree_dead(a)[2], 1);
    assert_true(chorus__agree_unanimous(a, 5)); /* both survivors voted 5 */
    assert_false(chorus__agree_unanimous(a, 4));
    chorus__agree_destroy(a);
    chorus__agree_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_refused),
        cmocka_unit_test(test_one_death_everywhere),
        cmocka_unit_test(test_second_death_during_agreement),
        cmocka_unit_test(test_wrongly_suspected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
