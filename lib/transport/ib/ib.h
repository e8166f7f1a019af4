/*
 * Private parts of the InfiniBand / RoCE verbs transport (lib/transport/ib). Everything
 * that does not need a NIC is pure C declared here and unit-tested without one
 * (tests/unit/test_ib_*.c): GID choice (ib_gid.c), credit-based flow control (ib_credit.c),
 * the registration cache (util/regcache.c), CHORUS_IB_HCA parsing (ib_dev.c) and the
 * zero-copy rendezvous's decisions and formats (ib_rndv.c). The verbs calls live in ib_tp.c,
 * ib_tp_data.c, ib_tp_zc.c and ib_dev.c's device part, all only under CHORUS_HAVE_IBV.
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

/* ---- Zero-copy rendezvous (ib_rndv.c) ----
 *
 * Messages too large to be worth two copies, and every message whose bytes the CPU cannot
 * copy (device memory: GPUDirect RDMA), skip the slots: the sender writes an RTS fragment
 * (one slot, the message's place in the per-peer sequence, so matching order is that of the
 * eager path); the receiver, once the RTS is at the head and a receive is posted, registers
 * the receive buffer and answers with an RTR fragment (address, rkey, length, the RTS's
 * sequence); the sender checks the length, RDMA-WRITEs its registered source straight into
 * the buffer and then writes a FIN fragment on the same QP, which RC delivers after the
 * data. While a rendezvous send waits for its RTR, later sends to that peer wait too, so the
 * FIN of a message always comes before the fragments of the next one. RTR fragments are
 * control: they are taken at the head of the stream whether or not a receive is posted.
 * This part is pure: the decisions, the formats and the per-peer state machine. */

#define IB_FRAG_RTS 4u  /* a rendezvous message's announcement (payload: ib_rts_t) */
#define IB_FRAG_RTR 8u  /* the receiver's answer, control (payload: ib_rtr_t) */
#define IB_FRAG_FIN 16u /* the data of a rendezvous message is in place (payload: ib_fin_t) */

typedef enum { IB_PATH_EAGER = 0, IB_PATH_RNDV = 1 } ib_path_t;

/* The path of a message of bytes on the sending side. Empty messages are eager (nothing to
 * register; one fragment synchronises); a buffer in device memory goes by rendezvous, and
 * so does every message when peer_may_be_device (the instance was given device memory
 * calls: the receive buffer may be on a GPU, which the CPU cannot copy into, and the sender
 * cannot see it); otherwise rendezvous from zcopy_min bytes (0: never). */
ib_path_t ib_rndv_path(uint64_t bytes, int buf_is_device, int peer_may_be_device,
                       uint64_t zcopy_min);

/* Status words of RTR and FIN. */
#define IB_RNDV_OK 0u
#define IB_RNDV_LEN 1u /* the lengths differ: both sides fail with CHORUS_ERR_MISMATCH */
#define IB_RNDV_REG 2u /* a buffer could not be registered: the other side fails too */

typedef struct {
    uint64_t len;    /* bytes of the message */
    uint32_t device; /* the source is device memory (informational) */
} ib_rts_t;

typedef struct {
    uint32_t rts_seq; /* the fragment sequence of the RTS answered */
    uint32_t status;  /* IB_RNDV_* */
    uint64_t addr;    /* where to write (the receive buffer's address) */
    uint64_t len;     /* bytes of the receive */
    uint32_t rkey;
} ib_rtr_t;

typedef struct {
    uint32_t rts_seq;
    uint32_t status; /* IB_RNDV_OK: the data is in place; else the sender gave up */
    uint64_t len;    /* bytes written */
} ib_fin_t;

/* Wire sizes (little-endian, packed by hand). */
#define IB_RTS_BYTES 16u
#define IB_RTR_BYTES 40u
#define IB_FIN_BYTES 24u

void ib_rts_encode(const ib_rts_t *m, uint8_t out[IB_RTS_BYTES]);
void ib_rtr_encode(const ib_rtr_t *m, uint8_t out[IB_RTR_BYTES]);
void ib_fin_encode(const ib_fin_t *m, uint8_t out[IB_FIN_BYTES]);

/* Decoders: n bytes at in, from peer, checked (size, magic, known status, an address range
 * that does not wrap); CHORUS_ERR_REMOTE naming rank, peer and the message otherwise. */
chorus_status_t ib_rts_decode(const uint8_t *in, size_t n, int rank, int peer, ib_rts_t *m_p);
chorus_status_t ib_rtr_decode(const uint8_t *in, size_t n, int rank, int peer, ib_rtr_t *m_p);
chorus_status_t ib_fin_decode(const uint8_t *in, size_t n, int rank, int peer, ib_fin_t *m_p);

/* CHORUS_ERR_MISMATCH, naming rank, peer and both lengths, unless they are equal. */
chorus_status_t ib_rndv_check_len(int rank, int peer, uint64_t send_len, uint64_t recv_len);

#define IB_ZTX_IDLE 0
#define IB_ZTX_WAIT_RTR 1 /* the RTS went; later sends wait */
#define IB_ZTX_WRITE 2    /* the RTR was accepted: data, then FIN */
#define IB_ZRX_IDLE 0
#define IB_ZRX_WAIT_FIN 1 /* the RTR went; the head receive waits for the FIN */

/* The rendezvous state of one peer, both directions. */
typedef struct {
    int rank, peer;
    int tx_state;
    uint32_t tx_seq; /* the RTS's fragment sequence */
    uint64_t tx_len;
    ib_rtr_t rtr; /* the accepted RTR (IB_ZTX_WRITE) */
    int rx_state;
    uint32_t rx_seq;
    uint64_t rx_len;
} ib_rndv_t;

void ib_rndv_init(ib_rndv_t *z, int rank, int peer);

/* Sender: the RTS of a len-byte message went as fragment seq. */
void ib_rndv_tx_rts(ib_rndv_t *z, uint32_t seq, uint64_t len);

/* Sender: an RTR arrived. CHORUS_SUCCESS: z->rtr holds it, the data may be written
 * (IB_ZTX_WRITE). Otherwise the send fails with the status returned and the state is idle:
 * CHORUS_ERR_MISMATCH when the lengths differ (refused by the receiver, or an RTR for a
 * receive of another length: never a write past its end), CHORUS_ERR_REMOTE when the peer
 * could not register its buffer, or for an RTR out of place (no RTS waiting, another
 * sequence); *fin_p says whether a FIN must still tell the receiver (it accepted). */
chorus_status_t ib_rndv_tx_rtr(ib_rndv_t *z, const ib_rtr_t *rtr, int *fin_p);

/* Sender: the FIN went (or the send gave up): idle. */
void ib_rndv_tx_done(ib_rndv_t *z);

/* Receiver: what to do with the fragment at the head of the peer's stream, given its flags,
 * whether a receive is posted and whether that receive already took eager fragments. */
typedef enum {
    IB_RX_WAIT,    /* nothing now: no receive posted */
    IB_RX_CONTROL, /* an RTR: take it now, whatever the receives */
    IB_RX_EAGER,   /* a fragment of an eager message */
    IB_RX_RTS,     /* start a rendezvous into the head receive */
    IB_RX_FIN,     /* completes the head receive */
    IB_RX_BAD      /* out of place: the peer breaks the protocol */
} ib_rx_action_t;

ib_rx_action_t ib_rndv_rx_classify(const ib_rndv_t *z, uint32_t flags, int have_recv,
                                   int recv_started);

/* Receiver: the RTS (fragment seq) is taken by a receive of recv_len bytes. CHORUS_SUCCESS:
 * an accepting RTR is due (IB_ZRX_WAIT_FIN). CHORUS_ERR_MISMATCH (state idle): the receive
 * fails and an RTR refusing with IB_RNDV_LEN is due. */
chorus_status_t ib_rndv_rx_rts(ib_rndv_t *z, uint32_t seq, const ib_rts_t *rts, uint64_t recv_len);

/* Receiver: the receive could not be registered; idle again (the RTR refuses: IB_RNDV_REG). */
void ib_rndv_rx_abort(ib_rndv_t *z);

/* Receiver: a FIN arrived: CHORUS_SUCCESS completes the head receive; an error fails it
 * (the sender gave up, or a FIN out of place). Idle after. */
chorus_status_t ib_rndv_rx_fin(ib_rndv_t *z, const ib_fin_t *fin);

#endif
