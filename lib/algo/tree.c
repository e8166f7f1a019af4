/*
 * Tree algorithms. Allreduce uses NCCL's double binary tree: the vector is cut in two
 * halves, each reduced up one tree to its root and broadcast back down it. The second
 * tree is the first mirrored (even nranks) or shifted by one (odd nranks), so that most
 * ranks are a leaf in one of the trees and the work of interior nodes is shared.
 * Broadcast and reduce use one binary tree whose labels are the ranks relative to root.
 *
 * With a topology order (args->ring_order, lib/topo's ring) the labels are positions in
 * that order, not ranks: a host's ranks are contiguous there, and contiguous labels form
 * subtrees, so only a few tree edges cross hosts (2 hosts x 4 interleaved ranks: 2 per
 * tree instead of 4; tests/unit/test_algo.c counts them).
 *
 * Both phases are chunked: chunk c of a half goes up (or down) while chunk c + 1 follows.
 * Loops emit the up phase of chunk c of both trees, then the down phase of chunk
 * c - TREE_DOWN_LAG of both trees: every rank enumerates the same (chunk, tree, phase)
 * groups in the same order, each group has at most one message per peer and direction,
 * so the per-peer message order matches and each group only waits on earlier groups.
 *
 * Each allreduce element is reduced at one root and copied everywhere else, so results
 * are bitwise identical on all ranks.
 */
#include "algo/algo.h"

#include "topo/topo.h"
#include "util/status.h"

#include <stdlib.h>

#define TREE_DEFAULT_CHUNK (128u * 1024u)
#define TREE_SLOTS 4 /* receive slots per child */

/* The binary tree over labels 0..n-1 rooted at 0 (NCCL's ncclGetBtree): a label with
 * lowest set bit b hangs under (x ^ b) | 2b, or under x ^ b when that is past the end;
 * its children are x - b/2 and the largest x + b/2^i that exists. 0 has one child. A label
 * x with lowest bit b roots the labels (x - b, x + b) that exist, so contiguous positions
 * make subtrees. */
static void tree_btree(int n, int x, int *parent_p, int *c0_p, int *c1_p)
{
    int bit, low;

    for (bit = 1; bit < n; bit <<= 1)
        if (bit & x) break;
    if (x == 0) {
        *parent_p = -1;
        *c0_p = -1;
        *c1_p = n > 1 ? bit >> 1 : -1;
        return;
    }
    *parent_p = (x ^ bit) | (bit << 1);
    if (*parent_p >= n) *parent_p = x ^ bit;
    low = bit >> 1;
    *c0_p = low == 0 ? -1 : x - low;
    while (low != 0 && x + low >= n) low >>= 1;
    *c1_p = low == 0 ? -1 : x + low;
}

/* Labels of positions: (pos * sign + shift) mod n, then labels 0 and swap trade places
 * (so that a root other than the first of its stretch gets label 0). */
typedef struct {
    int n, sign, shift, swap;
} tree_labels_t;

static int tree_mod(int x, int n)
{
    return ((x % n) + n) % n;
}

static int tree_label(const tree_labels_t *l, int pos)
{
    int x = tree_mod(pos * l->sign + l->shift, l->n);

    return x == 0 ? l->swap : x == l->swap ? 0 : x;
}

/* The inverse: sign is +1 or -1, so pos = (label - shift) * sign. */
static int tree_unlabel(const tree_labels_t *l, int label)
{
    int x = label == 0 ? l->swap : label == l->swap ? 0 : label;

    return tree_mod((x - l->shift) * l->sign, l->n);
}

static int tree_pos(int n, const int *order, int rank)
{
    int i;

    if (order == NULL) return rank;
    for (i = 0; i < n; i++)
        if (order[i] == rank) return i;
    return rank; /* not reached for a permutation */
}

chorus_tree_node_t chorus__algo_tree_node(int n, const int *ring_order, const int *host_of,
                                          int tree, int root, int rank)
{
    tree_labels_t l = {n, 1, 0, 0};
    int lab[3], i;
    chorus_tree_node_t t;

    if (tree == 1) {
        /* Mirrored (even n) or shifted by one (odd n): most leaves of one tree are
         * interior nodes of the other. */
        l.sign = n % 2 ? 1 : -1;
        l.shift = n - 1;
    } else if (tree == 2) {
        int p0 = tree_pos(n, ring_order, root), b = p0;

        /* Rotating at the start of the root's host keeps every host's stretch contiguous
         * in labels; the root then trades labels with the first rank of its stretch. */
        if (ring_order != NULL && host_of != NULL)
            while (b > 0 && host_of[ring_order[b - 1]] == host_of[root]) b--;
        l.shift = tree_mod(n - b, n);
        l.swap = p0 - b;
    }
    tree_btree(n, tree_label(&l, tree_pos(n, ring_order, rank)), &lab[0], &lab[1], &lab[2]);
    for (i = 0; i < 3; i++)
        if (lab[i] >= 0) {
            lab[i] = tree_unlabel(&l, lab[i]);
            if (ring_order != NULL) lab[i] = ring_order[lab[i]];
        }
    t.parent = lab[0];
    t.child[0] = lab[1];
    t.child[1] = lab[2];
    return t;
}

static uint64_t tree_chunk_len(const chorus_coll_args_t *a, uint64_t maxlen)
{
    uint64_t chunk = a->chunk_count ? a->chunk_count : TREE_DEFAULT_CHUNK;

    if (chunk > maxlen) chunk = maxlen;
    return chunk ? chunk : 1;
}

/* The up phase of one chunk [off, off + len) of an allreduce over tree t: reduce the
 * children's partial results into RECV and pass the sum to the parent. slots: this
 * tree's scratch (TREE_SLOTS per child). */
static void tree_up_chunk(chorus_sched_t *s, const chorus_tree_node_t *t, uint64_t off,
                          uint64_t len, uint64_t slots, uint64_t chunk, uint64_t c)
{
    int j, first = 1;

    for (j = 0; j < 2; j++) {
        uint64_t slot = slots + ((uint64_t)j * TREE_SLOTS + c % TREE_SLOTS) * chunk;

        if (t->child[j] < 0) continue;
        chorus__sched_recv(s, t->child[j], SCRATCH_AT(slot), len);
        chorus__sched_reduce(s, RECV_AT(off), first ? SEND_AT(off) : RECV_AT(off),
                             SCRATCH_AT(slot), len);
        first = 0;
    }
    /* A leaf sends its own data; in place, the result overwrites it only after the root
     * has received (and reduced) it. */
    if (t->parent >= 0) chorus__sched_send(s, t->parent, first ? SEND_AT(off) : RECV_AT(off), len);
}

/* The down phase of one chunk: receive the result from the parent, pass it on. */
static void tree_down_chunk(chorus_sched_t *s, const chorus_tree_node_t *t, uint64_t off,
                            uint64_t len)
{
    int j;

    if (t->parent >= 0) chorus__sched_recv(s, t->parent, RECV_AT(off), len);
    for (j = 0; j < 2; j++)
        if (t->child[j] >= 0) chorus__sched_send(s, t->child[j], RECV_AT(off), len);
}

/* Messages between two ranks are matched in order, and with two trees the same pair
 * carries one tree's reductions and the other's results in the same direction. Emitting
 * chunk c's up and down phases together would make each up message wait behind a down
 * message that needs a round trip to the root first, and the link would idle half the
 * time. So the up phase runs TREE_DOWN_LAG chunks ahead of the down phase. */
#define TREE_DOWN_LAG 2

static void tree_allreduce(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    int n = a->nranks, r = a->rank, t;
    uint64_t half[2], chunk, nch, c, slots[2];
    chorus_tree_node_t node[2];

    half[0] = (a->count + 1) / 2;
    half[1] = a->count - half[0];
    chunk = tree_chunk_len(a, half[0]);
    nch = (half[0] + chunk - 1) / chunk;
    node[0] = chorus__algo_tree_node(n, a->ring_order, a->host_of, 0, 0, r);
    node[1] = chorus__algo_tree_node(n, a->ring_order, a->host_of, 1, 0, r);
    for (t = 0; t < 2; t++) {
        int nchild = (node[t].child[0] >= 0) + (node[t].child[1] >= 0);
        slots[t] = nchild ? chorus__sched_scratch(s, 2 * TREE_SLOTS * chunk) : 0;
    }
    for (c = 0; c < nch + TREE_DOWN_LAG; c++) {
        for (t = 0; t < 2; t++) {
            uint64_t start = c * chunk, base = t == 0 ? 0 : half[0];

            if (c >= nch || start >= half[t]) continue;
            tree_up_chunk(s, &node[t], base + start,
                          half[t] - start < chunk ? half[t] - start : chunk, slots[t], chunk, c);
        }
        if (c < TREE_DOWN_LAG) continue;
        for (t = 0; t < 2; t++) {
            uint64_t start = (c - TREE_DOWN_LAG) * chunk, base = t == 0 ? 0 : half[0];

            if (start >= half[t]) continue;
            tree_down_chunk(s, &node[t], base + start,
                            half[t] - start < chunk ? half[t] - start : chunk);
        }
    }
}

static void tree_broadcast(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    chorus_tree_node_t t =
        chorus__algo_tree_node(a->nranks, a->ring_order, a->host_of, 2, a->root, a->rank);
    uint64_t chunk = tree_chunk_len(a, a->count), off;
    int j;

    for (off = 0; off < a->count; off += chunk) {
        uint64_t len = a->count - off < chunk ? a->count - off : chunk;
        chorus_ref_t from = t.parent < 0 ? SEND_AT(off) : RECV_AT(off);

        if (t.parent >= 0) chorus__sched_recv(s, t.parent, RECV_AT(off), len);
        for (j = 0; j < 2; j++)
            if (t.child[j] >= 0) chorus__sched_send(s, t.child[j], from, len);
    }
    if (t.parent < 0) chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), a->count);
}

/* Partials live in scratch (only the root may touch RECV): child 0's slot receives and
 * then accumulates, and is sent up; a slot is refilled only after that send is done. */
static void tree_reduce(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    chorus_tree_node_t t =
        chorus__algo_tree_node(a->nranks, a->ring_order, a->host_of, 2, a->root, a->rank);
    uint64_t chunk = tree_chunk_len(a, a->count), off, c = 0, slots = 0;
    int j, nchild = (t.child[0] >= 0) + (t.child[1] >= 0);

    if (nchild == 0 && t.parent < 0) {
        chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), a->count);
        return;
    }
    if (nchild) slots = chorus__sched_scratch(s, 2 * TREE_SLOTS * chunk);
    for (off = 0; off < a->count; off += chunk, c++) {
        uint64_t len = a->count - off < chunk ? a->count - off : chunk;
        chorus_ref_t acc = t.parent < 0 ? RECV_AT(off) : SCRATCH_AT(0);
        chorus_ref_t cur = SEND_AT(off);

        if (nchild == 0) {
            chorus__sched_send(s, t.parent, SEND_AT(off), len);
            continue;
        }
        for (j = 0; j < 2; j++) {
            uint64_t slot = slots + ((uint64_t)j * TREE_SLOTS + c % TREE_SLOTS) * chunk;

            if (t.child[j] < 0) continue;
            chorus__sched_recv(s, t.child[j], SCRATCH_AT(slot), len);
            if (t.parent >= 0 && cur.buf == CHORUS_BUF_SEND) acc = SCRATCH_AT(slot);
            chorus__sched_reduce(s, acc, cur, SCRATCH_AT(slot), len);
            cur = acc;
        }
        if (t.parent >= 0) chorus__sched_send(s, t.parent, acc, len);
    }
}

/* A bad order would make ranks disagree on who talks to whom, a hang: refuse it. */
static chorus_status_t tree_check_order(const chorus_coll_args_t *a)
{
    chorus_status_t status;
    int *pos;

    if (a->ring_order == NULL) return CHORUS_SUCCESS;
    pos = malloc((size_t)a->nranks * sizeof *pos);
    if (pos == NULL)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: tree: no memory for the order",
                             a->rank);
    status = chorus__topo_order_invert(a->nranks, a->ring_order, pos);
    free(pos);
    if (status != CHORUS_SUCCESS) chorus__error_context(status, "rank %d: tree", a->rank);
    return status;
}

chorus_status_t chorus__algo_tree(const chorus_coll_args_t *a, chorus_sched_t *s)
{
    chorus_status_t status;

    if (a->count == 0) return chorus__sched_finalize(s);
    status = tree_check_order(a);
    if (status != CHORUS_SUCCESS) return status;
    switch (a->coll) {
    case CHORUS_COLL_ALLREDUCE:
        if (a->nranks == 1)
            chorus__sched_copy(s, RECV_AT(0), SEND_AT(0), a->count);
        else
            tree_allreduce(a, s);
        break;
    case CHORUS_COLL_BROADCAST:
        tree_broadcast(a, s);
        break;
    case CHORUS_COLL_REDUCE:
        tree_reduce(a, s);
        break;
    default:
        return chorus__error(CHORUS_ERR_UNSUPPORTED, "rank %d: tree does not implement %s",
                             a->rank, chorus__coll_name(a->coll));
    }
    return chorus__sched_finalize(s);
}
