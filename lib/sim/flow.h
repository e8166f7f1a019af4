/*
 * A flow-level network: messages in flight are flows over paths of links, and the links'
 * capacity is shared among the flows crossing them max-min fairly (progressive filling:
 * the most contended link fixes the rate of its flows, whose share of every other link is
 * then taken out, and so on), recomputed whenever a flow starts or ends. Between those
 * moments every flow moves at its rate, so the time of the next completion is exact.
 *
 * Time is in seconds, sizes in bytes, capacities in bytes per second. The caller drives
 * it: add flows at the current time, ask for the next completion, advance to a time no
 * later than that, collect the flows that ended then. Flows that end together are
 * collected together (the same recomputation serves them all), which is what keeps a
 * 4,096-rank ring, whose steps end in lockstep, cheap.
 */
#ifndef CHORUS_SIM_FLOW_H
#define CHORUS_SIM_FLOW_H

#include "chorus.h"

#include <stdint.h>

#define CHORUS_FLOW_PATH_MAX 32

typedef struct chorus_flownet chorus_flownet_t;

/* A network of nlinks links of the given capacities (copied; 0 is a link that is down). */
chorus_status_t chorus__flownet_create(const double *cap, int nlinks, chorus_flownet_t **net_p);
void chorus__flownet_free(chorus_flownet_t *net);

/* Makes link a token bucket (tbf without a peak rate): while it holds tokens the link runs at
 * peak (bytes per second, above its capacity), and drains by what it carries beyond its
 * capacity; when empty it runs at its capacity, and refills by what it leaves unused, up to
 * bucket bytes. It starts full. An empty bucket lets the link burst again once it holds
 * min(bucket, CHORUS_FLOW_BURST_PACKET) bytes: tbf sends a packet only when the bucket holds
 * all of it, and the veths of the emulated cluster pass packets of up to 64 KiB (GSO).
 * Call before the first flow. CHORUS_ERR_INVALID_ARGUMENT for an unknown or down link, a
 * bucket <= 0 or a peak not above the capacity. */
#define CHORUS_FLOW_BURST_PACKET 1514.0
chorus_status_t chorus__flownet_set_bucket(chorus_flownet_t *net, int link, double bucket,
                                           double peak);

/* Starts a flow of bytes (> 0) over the links (at most CHORUS_FLOW_PATH_MAX; none: an
 * unlimited path that ends at once) at time now, which must not be before the last
 * advance. tag comes back when it ends. CHORUS_ERR_INVALID_ARGUMENT for a path too long
 * or through a link that is down. */
chorus_status_t chorus__flownet_add(chorus_flownet_t *net, double now, const int32_t *links,
                                    int nlinks, double bytes, uint64_t tag);

/* The time the next flow ends or a bucket empties or refills (INFINITY when none). */
double chorus__flownet_next(chorus_flownet_t *net);

/* Moves every flow on to time t (no later than chorus__flownet_next) and takes the flows
 * that have ended by then: their tags into tags (up to max; call again for more, at the
 * same t), their number returned; buckets that empty or refill by t change their link's
 * capacity, which the next chorus__flownet_next takes into account. */
int chorus__flownet_advance(chorus_flownet_t *net, double t, uint64_t *tags, int max);

/* The time of the last add or advance. */
double chorus__flownet_now(const chorus_flownet_t *net);

/* Flows in flight. */
int chorus__flownet_active(const chorus_flownet_t *net);

/* Bytes each link has carried so far. */
const double *chorus__flownet_link_bytes(const chorus_flownet_t *net);

/* How many times the rates were computed (for the cost figures). */
uint64_t chorus__flownet_solves(const chorus_flownet_t *net);

#endif
