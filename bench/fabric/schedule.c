/*
 * Rounds of disjoint pairs by the circle method: endpoint n - 1 (for odd n, a phantom
 * endpoint n) stays put while the others turn around a circle one step per round; in each
 * round the fixed endpoint meets the one at position 0 and position k meets position
 * m - 1 - k (m even endpoints in the circle). Over m - 1 rounds every pair meets exactly
 * once, and nobody is in two pairs of one round, so no two tests share an endpoint's link.
 */
#include "fabric_int.h"

int fabric_schedule_nrounds(int n)
{
    if (n <= 1) return 0;
    return n % 2 == 0 ? n - 1 : n;
}

int fabric_schedule_round(int n, int round, int *partner)
{
    int m = n % 2 == 0 ? n : n + 1; /* with the phantom endpoint for odd n */
    int npairs = 0;

    if (n < 1 || partner == NULL || round < 0 || round >= fabric_schedule_nrounds(n)) return -1;
    for (int i = 0; i < n; i++) partner[i] = -1;
    for (int k = 0; k < m / 2; k++) {
        /* Positions k and m - 2 - k of the circle (m - 1 slots, endpoints 0 .. m - 2), turned
         * by `round`; k == 0 pairs slot 0's endpoint with the fixed endpoint m - 1. */
        int x = (round + k) % (m - 1);
        int y = k == 0 ? m - 1 : (round + m - 1 - k) % (m - 1);
        if (x >= n || y >= n) continue; /* the phantom: x or y idles */
        partner[x] = y;
        partner[y] = x;
        npairs++;
    }
    return npairs;
}
