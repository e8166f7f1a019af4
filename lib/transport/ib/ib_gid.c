/*
 * RoCE v2 GID choice. A RoCE port lists one GID per (address, RoCE version) of its netdev;
 * only a v2 GID carrying a routable IP address reaches peers behind an IP router, and the
 * IPv4-mapped ones are what most RoCE fabrics route, so those come first. Link-local GIDs
 * (fe80::) work only inside one L2 segment and silently fail across routers, which is why
 * a table that has nothing else is refused rather than used.
 */
#include "transport/ib/ib.h"

#include <stdio.h>
#include <string.h>

static int gid_zero(const uint8_t g[16])
{
    for (int i = 0; i < 16; i++) {
        if (g[i] != 0) return 0;
    }
    return 1;
}

static int gid_v4_mapped(const uint8_t g[16])
{
    for (int i = 0; i < 10; i++) {
        if (g[i] != 0) return 0;
    }
    return g[10] == 0xff && g[11] == 0xff;
}

/* An IPv4-mapped GID whose address can be routed: not 0.0.0.0, not 169.254/16. */
static int gid_v4_routable(const uint8_t g[16])
{
    if (!gid_v4_mapped(g)) return 0;
    if (g[12] == 0 && g[13] == 0 && g[14] == 0 && g[15] == 0) return 0;
    return !(g[12] == 169 && g[13] == 254);
}

static int gid_link_local(const uint8_t g[16])
{
    return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

void ib_gid_format(const uint8_t gid[16], char *out, size_t out_len)
{
    size_t k = 0;

    if (out_len == 0) return;
    out[0] = '\0';
    for (int i = 0; i < 16 && k < out_len; i += 2) {
        int n = snprintf(out + k, out_len - k, "%s%02x%02x", i > 0 ? ":" : "", gid[i], gid[i + 1]);

        if (n < 0) return;
        k += (size_t)n;
    }
}

static chorus_status_t select_forced(const ib_gid_entry_t *entries, int n, int forced,
                                     int *pos_p)
{
    for (int i = 0; i < n; i++) {
        if (entries[i].index != forced) continue;
        if (gid_zero(entries[i].gid)) {
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "ib: CHORUS_IB_GID_INDEX=%d names an empty GID", forced);
        }
        *pos_p = i;
        return CHORUS_SUCCESS;
    }
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                         "ib: CHORUS_IB_GID_INDEX=%d is not in the port's GID table (%d entries)",
                         forced, n);
}

chorus_status_t ib_gid_select(const ib_gid_entry_t *entries, int n, int forced, int roce,
                              int *pos_p)
{
    int v6 = -1, link_local = 0;

    if (forced >= 0) return select_forced(entries, n, forced, pos_p);
    for (int i = 0; i < n; i++) {
        const uint8_t *g = entries[i].gid;

        if (gid_zero(g)) continue;
        if (!roce) {
            *pos_p = i;
            return CHORUS_SUCCESS;
        }
        if (entries[i].type != IB_GID_TYPE_ROCE_V2) continue;
        if (gid_v4_routable(g)) {
            *pos_p = i;
            return CHORUS_SUCCESS;
        }
        if (gid_link_local(g)) {
            link_local++;
        } else if (!gid_v4_mapped(g) && v6 < 0) {
            v6 = i;
        }
    }
    if (v6 >= 0) {
        *pos_p = v6;
        return CHORUS_SUCCESS;
    }
    if (link_local > 0) {
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "ib: the port has only link-local RoCE v2 GIDs (fe80::), which do not "
                             "route; give its netdev an IP address or set CHORUS_IB_GID_INDEX");
    }
    return chorus__error(CHORUS_ERR_UNSUPPORTED,
                         "ib: no usable GID on the port (%d entries, no routable RoCE v2 one); set "
                         "CHORUS_IB_GID_INDEX", n);
}
