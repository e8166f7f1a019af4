/*
 * Slurm's host list expressions, as SLURM_JOB_NODELIST and SLURM_STEP_NODELIST write them:
 * names separated by commas, each with any number of bracketed groups of numbers and
 * ranges, "node[01-04,07]" or "rack[1-2]-gpu[0-3],login1". A name with several groups
 * stands for every combination, the last group varying fastest (as `scontrol show
 * hostnames` lists them); a range keeps the width of its low bound, so node[08-10] is
 * node08 node09 node10 and node[8-10] is node8 node9 node10.
 *
 * Only the n-th name is ever needed (the first, for the root), so nothing is expanded:
 * the n-th name is found by counting.
 */
#include "bootstrap/launch.h"

#include "util/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bounds that keep the counting in a long and the names short. */
#define HL_MAX_HOSTS (1L << 30)
#define HL_MAX_DIGITS 9

/* One "a-b" or "a" inside brackets. */
typedef struct {
    long lo, hi;
    int width;
} hl_range_t;

static chorus_status_t hl_bad(const char *list, const char *why)
{
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "slurm host list '%.200s': %s", list, why);
}

/* A number of 1..HL_MAX_DIGITS digits at *p; advances *p. */
static int hl_number(const char **p, long *v_p, int *width_p)
{
    const char *s = *p;
    long v = 0;
    int n = 0;

    while (*s >= '0' && *s <= '9') {
        if (++n > HL_MAX_DIGITS) return -1;
        v = v * 10 + (*s++ - '0');
    }
    if (n == 0) return -1;
    *p = s;
    *v_p = v;
    *width_p = n;
    return 0;
}

/* The range at *p (up to ',' or ']'); advances *p past it. */
static int hl_range(const char **p, hl_range_t *r)
{
    int width_hi;

    if (hl_number(p, &r->lo, &r->width) != 0) return -1;
    r->hi = r->lo;
    if (**p == '-') {
        (*p)++;
        if (hl_number(p, &r->hi, &width_hi) != 0 || r->hi < r->lo) return -1;
    }
    return **p == ',' || **p == ']' ? 0 : -1;
}

/* The number of names the group at p (just after '[') stands for; *end_p is past ']'. */
static int hl_group_count(const char *p, long *count_p, const char **end_p)
{
    hl_range_t r;
    long count = 0;

    for (;;) {
        if (hl_range(&p, &r) != 0) return -1;
        count += r.hi - r.lo + 1;
        if (count > HL_MAX_HOSTS) return -1;
        if (*p++ == ']') break;
    }
    *count_p = count;
    *end_p = p;
    return 0;
}

/* The k-th number of the group at p (just after '['), written into out. */
static void hl_group_nth(const char *p, long k, char *out, size_t len)
{
    hl_range_t r;

    for (;;) {
        hl_range(&p, &r); /* checked by hl_group_count */
        if (k <= r.hi - r.lo) {
            snprintf(out, len, "%0*ld", r.width, r.lo + k);
            return;
        }
        k -= r.hi - r.lo + 1;
        p++;
    }
}

/* The end of the name starting at p (the next ',' outside brackets, or '\0'), and how
 * many names it stands for. */
static int hl_name(const char *p, const char **end_p, long *count_p)
{
    long count = 1, group;

    while (*p != '\0' && *p != ',') {
        if (*p == ']') return -1;
        if (*p != '[') {
            p++;
            continue;
        }
        if (hl_group_count(p + 1, &group, &p) != 0) return -1;
        count *= group;
        if (count > HL_MAX_HOSTS) return -1;
    }
    *end_p = p;
    *count_p = count;
    return 0;
}

/* Writes the k-th name of [p, end) into host. */
static int hl_name_nth(const char *p, const char *end, long count, long k, char *host, size_t len)
{
    size_t used = 0;
    long stride = count, group;
    const char *after;
    char digits[HL_MAX_DIGITS + 2];

    while (p < end) {
        size_t add;
        if (*p != '[') {
            if (used + 1 >= len) return -1;
            host[used++] = *p++;
            continue;
        }
        hl_group_count(p + 1, &group, &after);
        stride /= group; /* the later groups vary faster */
        hl_group_nth(p + 1, k / stride, digits, sizeof(digits));
        k %= stride;
        add = strlen(digits);
        if (used + add >= len) return -1;
        memcpy(host + used, digits, add);
        used += add;
        p = after;
    }
    host[used] = '\0';
    return used > 0 ? 0 : -1;
}

chorus_status_t chorus__hostlist_count(const char *list, long *count_p)
{
    const char *p = list, *end;
    long total = 0, count;

    if (list == NULL || list[0] == '\0') return hl_bad("", "empty");
    for (;;) {
        if (hl_name(p, &end, &count) != 0 || end == p)
            return hl_bad(list, "not a list of names with [ranges]");
        total += count;
        if (total > HL_MAX_HOSTS) return hl_bad(list, "too many hosts");
        if (*end == '\0') break;
        p = end + 1;
    }
    *count_p = total;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__hostlist_nth(const char *list, long n, char *host, size_t len)
{
    const char *p = list, *end;
    long count, total;
    chorus_status_t status = chorus__hostlist_count(list, &total);

    if (status != CHORUS_SUCCESS) return status;
    if (n < 0 || n >= total) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "slurm host list '%.200s': no host %ld (it has %ld)", list, n, total);
    }
    for (;;) {
        hl_name(p, &end, &count);
        if (n < count) break;
        n -= count;
        p = end + 1;
    }
    if (hl_name_nth(p, end, count, n, host, len) != 0)
        return hl_bad(list, "a host name is too long");
    return CHORUS_SUCCESS;
}
