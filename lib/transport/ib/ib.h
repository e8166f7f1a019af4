/*
 * Private parts of the InfiniBand / RoCE verbs transport (lib/transport/ib). Everything
 * that does not need a NIC is pure C declared here and unit-tested without one
 * (tests/unit/test_ib_*.c): GID choice (ib_gid.c), credit-based flow control (ib_credit.c),
 * the registration cache (util/regcache.c) and CHORUS_IB_HCA parsing (ib_dev.c). The verbs
 * calls live in ib_tp.c and in ib_dev.c's device part, both only under CHORUS_HAVE_IBV.
 *
 * Data path (ib_tp.c). One RC queue pair per peer. Each rank registers one receive region
 * holding IB_NSLOTS slots of IB_SLOT_BYTES for every possible sender; a sender RDMA-WRITEs
 * a fragment (ib_frag_hdr_t + payload) into the slot its credit names, with the sequence
 * number in the immediate data, and the receiver copies it into the posted receive in
 * sequence order. Consumed slots are returned as cumulative credits, piggy-backed on the
 * fragments going the other way or, in batches, as zero-length writes with immediate.
 */
#ifndef CHORUS_TRANSPORT_IB_H
#define CHORUS_TRANSPORT_IB_H

#include "transport/transport.h"
#include "util/pci.h"
#include "util/regcache.h"
#include "util/status.h"

#include <stddef.h>
#include <stdint.h>

/* ---- GID selection (ib_gid.c) ---- */

/* GID types as rdma-core reports them (IBV_GID_TYPE_*), restated so the choice is pure. */
#define IB_GID_TYPE_IB 0
#define IB_GID_TYPE_ROCE_V1 1
#define IB_GID_TYPE_ROCE_V2 2

typedef struct {
    int index;       /* index in the port's GID table */
    uint8_t gid[16]; /* network byte order */
    int type;        /* IB_GID_TYPE_* */
} ib_gid_entry_t;

/* Chooses the GID to use among n entries of a port. forced >= 0 (CHORUS_IB_GID_INDEX)
 * selects that table index, which must be present and non-zero. Otherwise, on RoCE
 * (roce != 0): the lowest-index RoCE v2 GID that is an IPv4-mapped routable address
 * (::ffff:a.b.c.d, not 0.0.0.0 or 169.254/16), else the lowest RoCE v2 IPv6 global one
 * (not fe80::/10); link-local-only tables are refused (CHORUS_ERR_UNSUPPORTED, the message
 * says to set CHORUS_IB_GID_INDEX). On InfiniBand, where routing uses the LID, the first
 * non-zero GID. *pos_p gets the position in entries (not the table index). */
chorus_status_t ib_gid_select(const ib_gid_entry_t *entries, int n, int forced, int roce,
                              int *pos_p);

/* Text of a GID for messages ("::ffff:10.0.0.1" style is not attempted: 8 hex groups). */
void ib_gid_format(const uint8_t gid[16], char *out, size_t out_len);

/* ---- Credit-based flow control (ib_credit.c) ---- */

/* Immediate data: the top bit says what the low 31 bits carry. Both windows are far
 * smaller than 2^31, so the full 32-bit counter is rebuilt from the expected one. */
#define IB_IMM_CREDIT 0x80000000u
#define IB_IMM_MASK 0x7fffffffu
#define IB_CREDIT_MAX_SLOTS 1024

typedef struct {
    uint32_t nslots;
    uint32_t batch;
    /* Our writes into the peer's slots. */
    uint32_t tx_seq;   /* sequence number of the next fragment */
    uint32_t tx_limit; /* fragments the peer has consumed (cumulative credit) */
    /* The peer's writes into our slots. */
    uint32_t rx_next;     /* next sequence number to consume */
    uint32_t rx_returned; /* cumulative credit last sent to the peer */
    uint8_t arrived[IB_CREDIT_MAX_SLOTS];
} ib_credit_t;

/* Both directions start at `start` (tests use one near 2^32 to cross the wrap). nslots
 * is clamped to [1, IB_CREDIT_MAX_SLOTS] and rounded down to a power of two; batch to
 * [1, max(1, nslots / 2)], so that a sender out of credit always gets some back. */
void ib_credit_init(ib_credit_t *c, uint32_t nslots, uint32_t batch, uint32_t start);

/* Sender: 1 and the sequence number and slot of the next fragment when a credit is held
 * (the caller must then write it), else 0. */
int ib_credit_tx_reserve(ib_credit_t *c, uint32_t *seq_p, uint32_t *slot_p);

/* Sender: applies a cumulative credit from the peer, full 32 bits (piggy-backed). Stale
 * ones are ignored (0); one that credits fragments never sent is a protocol error (-1). */
int ib_credit_tx_update(ib_credit_t *c, uint32_t consumed);

/* Sender: the same from the 31 bits of an immediate. */
int ib_credit_tx_update_imm(ib_credit_t *c, uint32_t imm);

/* Receiver: a fragment with this 31-bit sequence (from the immediate) arrived. Returns 0
 * and its full sequence and slot, or -1 when the peer wrote without a credit or twice. */
int ib_credit_rx_arrive(ib_credit_t *c, uint32_t imm_seq, uint32_t *seq_p, uint32_t *slot_p);

/* Receiver: 1 and the slot of the next fragment in order when it has arrived, else 0. */
int ib_credit_rx_peek(const ib_credit_t *c, uint32_t *slot_p);

/* Receiver: the fragment rx_peek named is consumed; its slot may be written again once
 * the credit reaches the peer. */
void ib_credit_rx_consume(ib_credit_t *c);

/* Receiver: nonzero when a batch of credit is owed and should go out explicitly. */
int ib_credit_rx_owed(const ib_credit_t *c);

/* Receiver: the cumulative credit to send now (piggy-backed or explicit); it is then
 * counted as returned. */
uint32_t ib_credit_rx_take(ib_credit_t *c);

/* ---- Devices (ib_dev.c) ---- */

#define IB_HCA_MAX 16
#define IB_HCA_NAME 64

typedef struct {
    char name[IB_HCA_NAME];
    int port; /* 0: any port */
} ib_hca_spec_t;

/* CHORUS_IB_HCA: "mlx5_0:1", "mlx5_0", "mlx5_0:1,mlx5_1:1". A leading '^' excludes the
 * listed devices instead; a leading '=' (after '^' if any) asks for exact names, otherwise
 * a name matches every device it is a prefix of ("mlx5" matches mlx5_0 and mlx5_1). */
typedef struct {
    int exclude;
    int exact;
    int n;
    ib_hca_spec_t e[IB_HCA_MAX];
} ib_hca_list_t;

/* Parses the text (NULL or empty: everything allowed). CHORUS_ERR_INVALID_ARGUMENT with a
 * message quoting the bad part. */
chorus_status_t ib_hca_parse(const char *text, ib_hca_list_t *list_p);

/* Nonzero if the list lets this device and port be used. */
int ib_hca_match(const ib_hca_list_t *list, const char *dev, int port);

/* A port as the device scan saw it. */
typedef struct {
    char dev[IB_HCA_NAME];
    int port;
    int active;
    int roce; /* Ethernet link layer */
    char bus_id[CHORUS_PCI_BUSID_MAX]; /* the device's PCI address; "" if unknown */
} ib_port_cand_t;

/* The first active candidate that the list allows, in the order given (device list
 * order, then port): 0 and its position, or -1 when none is. */
int ib_port_pick(const ib_port_cand_t *cands, int n, const ib_hca_list_t *list, int *pos_p);

/* The choice when chorus_tp_params_t.nic_preference names NICs (comma-separated PCI bus
 * ids, nearest first, in any spelling util/pci.h reads; NULL or "": none): among the active
 * candidates the list allows, the one whose bus_id comes earliest in pref (the first port
 * of that device in candidate order). Malformed items of pref are skipped. When no allowed
 * active candidate is in pref, ib_port_pick. 0 and the position, or -1 when none is. */
int ib_port_pick_pref(const ib_port_cand_t *cands, int n, const ib_hca_list_t *list,
                      const char *pref, int *pos_p);

/* The PCI address of RDMA device ibdev ("mlx5_0"), read from the sysfs link
 * /sys/class/infiniband/<ibdev>/device, into buf of len bytes: 0, or -1 (buf untouched) when
 * there is no such device, the name holds a '/', or buf is too small. */
int ib_dev_bus_id(const char *ibdev, char *buf, size_t len);

#endif
