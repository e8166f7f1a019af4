/*
 * UCX transport: UCP tag matching over whatever UCX_TLS allows (rc/dc on InfiniBand, tcp and
 * shared memory here). One ucp_context and one worker per instance; the worker address is
 * the address blob; one endpoint per masked peer.
 *
 * Matching. Every message carries a 64-bit tag made of its sender's rank and a per-pair
 * sequence number, XORed with a per-direction key that only the two ends know (derived
 * from the job secret during the handshake). The receive for the k-th message from a peer
 * asks for exactly that tag, so the per-pair FIFO matching of transport.h holds whatever
 * order UCX delivers in, and a process that does not know the secret cannot produce a tag
 * that any receive matches.
 *
 * Authentication. Each blob carries a fresh random nonce (blobs travel over the
 * authenticated bootstrap). In connect_all every rank sends each peer, on a reserved
 * control tag, HMAC(secret, "chorus-ucx-auth" | comm_id | from | to | nonce_to | nonce_from)
 * and checks the peer's. A bad proof is logged and ignored (the receive is reposted), so a
 * stranger cannot disturb the setup; a peer that never proves the secret ends in
 * CHORUS_ERR_AUTH at the deadline.
 *
 * Every pending UCX request carries a small transport-owned record (ucx_slot_t, in the
 * request memory UCX allocates through request_size), so that a failed peer's requests can
 * be found and fini can detach the callers' requests before it cancels what is pending.
 */
#include "transport/transport.h"

#include "util/status.h"

#ifdef CHORUS_HAVE_UCX

#include "transport/ucx/ucx.h"

#include "util/auth.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

/* ---- keys and proofs ---- */

/* HMAC-SHA256(secret, label | comm_id | from | to | nonce of to | nonce of from). */
static chorus_status_t ucx_mac(const ucx_tp_t *tp, const char *label, int from, int to,
                               const uint8_t *nonce_to, const uint8_t *nonce_from,
                               uint8_t mac[UCX_MAC_BYTES])
{
    uint8_t buf[32 + 8 + 8 + 2 * UCX_NONCE_BYTES];
    size_t n = strlen(label);
    unsigned mac_len = 0;

    memcpy(buf, label, n);
    chorus__ucx_put_be64(buf + n, tp->comm_id);
    chorus__ucx_put_be64(buf + n + 8, (uint64_t)(uint32_t)from << 32 | (uint32_t)to);
    memcpy(buf + n + 16, nonce_to, UCX_NONCE_BYTES);
    memcpy(buf + n + 16 + UCX_NONCE_BYTES, nonce_from, UCX_NONCE_BYTES);
    n += 16 + 2 * UCX_NONCE_BYTES;
    if (HMAC(EVP_sha256(), tp->secret, CHORUS_SECRET_BYTES, buf, n, mac, &mac_len) == NULL ||
        mac_len != UCX_MAC_BYTES) {
        return chorus__error(CHORUS_ERR_INTERNAL, "rank %d: ucx: HMAC-SHA256 failed", tp->rank);
    }
    return CHORUS_SUCCESS;
}

/* The tag key of messages from `from` to `to`: a 64-bit piece of a MAC over both nonces. */
static chorus_status_t ucx_key(const ucx_tp_t *tp, int from, int to, const uint8_t *nonce_to,
                               const uint8_t *nonce_from, uint64_t *key_p)
{
    uint8_t mac[UCX_MAC_BYTES];
    chorus_status_t status = ucx_mac(tp, "chorus-ucx-key", from, to, nonce_to, nonce_from, mac);
    if (status != CHORUS_SUCCESS) return status;
    *key_p = chorus__ucx_get_be64(mac);
    return CHORUS_SUCCESS;
}

/* ---- life cycle ---- */

static void ucx_request_init(void *request)
{
    memset(request, 0, sizeof(ucx_slot_t));
}

/* UCX's keep-alive finds peers that died without closing their connections (shared memory
 * has no connection to close). Its default period (20 s) is longer than the deadlines the
 * tests use, so a shorter one applies unless UCX_KEEPALIVE_INTERVAL says otherwise. */
static void ucx_tune_config(ucp_config_t *config)
{
    if (getenv("UCX_KEEPALIVE_INTERVAL") == NULL) {
        (void)ucp_config_modify(config, "KEEPALIVE_INTERVAL", "1s");
    }
}

static chorus_status_t ucx_open(ucx_tp_t *tp)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_config_t *config = NULL;
    ucs_status_t st;

    st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) goto err_ucs;
    ucx_tune_config(config);
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                        UCP_PARAM_FIELD_REQUEST_INIT | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    /* RMA only when the rendezvous may use it: a context without it needs no RMA lanes. */
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    if (tp->rma_min > 0) params.features |= UCP_FEATURE_RMA;
    params.request_size = sizeof(ucx_slot_t);
    params.request_init = ucx_request_init;
    params.mt_workers_shared = 0;
    st = ucp_init(&params, config, &tp->context);
    ucp_config_release(config);
    if (st != UCS_OK) goto err_ucs;
    /* Serialized, not single: the communicator is driven by one thread at a time, but not
     * always the same one (the GPU proxy thread takes over for device collectives). */
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    st = ucp_worker_create(tp->context, &wparams, &tp->worker);
    if (st != UCS_OK) goto err_context;
    st = ucp_worker_get_efd(tp->worker, &tp->efd);
    if (st != UCS_OK) goto err_worker;
    return CHORUS_SUCCESS;

err_worker:
    ucp_worker_destroy(tp->worker);
    tp->worker = NULL;
err_context:
    ucp_cleanup(tp->context);
    tp->context = NULL;
err_ucs:
    return chorus__error(CHORUS_ERR_SYSTEM, "rank %d: ucx: init: %s", tp->rank,
                         ucs_status_string(st));
}

/* Writes the blob: magic, nonce, address length, worker address. The full address (every
 * transport UCX_TLS allows) when it fits, else the network-only one. */
static chorus_status_t ucx_make_blob(ucx_tp_t *tp)
{
    ucp_worker_attr_t attr;
    ucs_status_t st;
    const size_t room = CHORUS_TP_BLOB_MAX - UCX_BLOB_HEAD;
    static const uint32_t flags[2] = {0, UCP_WORKER_ADDRESS_FLAG_NET_ONLY};
    size_t sizes[2] = {0, 0};

    for (int i = 0; i < 2; i++) {
        memset(&attr, 0, sizeof(attr));
        attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
        attr.address_flags = flags[i];
        st = ucp_worker_query(tp->worker, &attr);
        if (st != UCS_OK) {
            return chorus__error(CHORUS_ERR_SYSTEM, "rank %d: ucx: worker address: %s", tp->rank,
                                 ucs_status_string(st));
        }
        sizes[i] = attr.address_length;
        if (attr.address_length <= room) {
            chorus__ucx_put_be32(tp->blob, UCX_BLOB_MAGIC);
            memcpy(tp->blob + 4, tp->nonce, UCX_NONCE_BYTES);
            chorus__ucx_put_be32(tp->blob + 4 + UCX_NONCE_BYTES, (uint32_t)attr.address_length);
            memcpy(tp->blob + UCX_BLOB_HEAD, attr.address, attr.address_length);
            tp->blob_len = UCX_BLOB_HEAD + attr.address_length;
            if (i > 0) {
                CHORUS_INFO("ucx",
                            "rank %d: worker address of %zu bytes too long: using the "
                            "network-only one (%zu bytes)",
                            tp->rank, sizes[0], sizes[1]);
            }
            ucp_worker_release_address(tp->worker, attr.address);
            return CHORUS_SUCCESS;
        }
        ucp_worker_release_address(tp->worker, attr.address);
    }
    return chorus__error(CHORUS_ERR_UNSUPPORTED,
                         "rank %d: ucx: the worker address is %zu bytes (%zu network-only), more "
                         "than the %zu an address blob holds: narrow UCX_TLS or UCX_NET_DEVICES",
                         tp->rank, sizes[0], sizes[1], room);
}

static chorus_status_t ucx_init(const chorus_tp_params_t *params, chorus_tp_t **tp_p)
{
    chorus_status_t status;
    ucx_tp_t *tp;

    if (params == NULL || params->nranks <= 0 || params->rank < 0 ||
        params->rank >= params->nranks || params->nranks > UCX_MAX_RANKS ||
        params->secret == NULL) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "ucx: init: bad parameters");
    }
    tp = calloc(1, sizeof(*tp));
    if (tp == NULL) goto err_nomem;
    tp->peers = calloc((size_t)params->nranks, sizeof(*tp->peers));
    if (tp->peers == NULL) goto err_free;
    tp->rank = params->rank;
    tp->nranks = params->nranks;
    memcpy(tp->secret, params->secret, CHORUS_SECRET_BYTES);
    tp->comm_id = params->comm_id;
    tp->abort_flag = params->abort_flag;
    tp->efd = -1;
    for (int p = 0; p < tp->nranks; p++) {
        tp->peers[p].tp = tp;
        tp->peers[p].rank = p;
    }
    tp->rma_min = (size_t)chorus__config_size("CHORUS_UCX_RMA_MIN", 0);
    CHORUS_CHECK_GOTO(chorus__random_bytes(tp->nonce, sizeof(tp->nonce)), err_ctx);
    CHORUS_CHECK_GOTO(ucx_open(tp), err_ctx);
    CHORUS_CHECK_GOTO(ucx_make_blob(tp), err_close);
    CHORUS_CHECK_GOTO(chorus__ucx_mem_init(tp), err_close);
    *tp_p = (chorus_tp_t *)tp;
    return CHORUS_SUCCESS;

err_close:
    ucp_worker_destroy(tp->worker);
    ucp_cleanup(tp->context);
err_ctx:
    chorus__error_context(status, "rank %d: ucx: init", params->rank);
    free(tp->peers);
    free(tp);
    return status;
err_free:
    free(tp);
err_nomem:
    return chorus__error(CHORUS_ERR_NO_MEMORY, "rank %d: ucx: init: out of memory", params->rank);
}

static chorus_status_t ucx_get_addr(chorus_tp_t *tpv, void *blob, size_t *len_p)
{
    ucx_tp_t *tp = (ucx_tp_t *)tpv;
    memcpy(blob, tp->blob, tp->blob_len);
    *len_p = tp->blob_len;
    return CHORUS_SUCCESS;
}

/* ---- connection setup ---- */

static void ucx_ep_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    ucx_peer_t *pp = arg;
    (void)ep;
    /* Requests are failed from progress(), outside UCX's callback. */
    if (pp->ep_status == UCS_OK) pp->ep_status = st;
    pp->tp->ep_errors = 1;
}

static chorus_status_t ucx_create_ep(ucx_tp_t *tp, int p, const uint8_t *blob)
{
    ucx_peer_t *pp = &tp->peers[p];
    ucp_ep_params_t params;
    ucs_status_t st;
    uint32_t len = chorus__ucx_get_be32(blob + 4 + UCX_NONCE_BYTES);

    if (chorus__ucx_get_be32(blob) != UCX_BLOB_MAGIC || len == 0 ||
        len > CHORUS_TP_BLOB_MAX - UCX_BLOB_HEAD) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "rank %d: ucx: peer %d's address blob is not a ucx address", tp->rank,
                             p);
    }
    memcpy(pp->nonce, blob + 4, UCX_NONCE_BYTES);
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = (const ucp_address_t *)(blob + UCX_BLOB_HEAD);
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = ucx_ep_error;
    params.err_handler.arg = pp;
    st = ucp_ep_create(tp->worker, &params, &pp->ep);
    if (st == UCS_ERR_UNREACHABLE) {
        /* UCX 1.13's shared-memory transports cannot report a failed peer: with only them
         * (UCX_TLS=sm,self) the endpoint works without error handling, and a dead peer is
         * then noticed only at the communicator's deadline. */
        CHORUS_INFO("ucx",
                    "rank %d: peer %d: no transport in UCX_TLS reports peer failures; "
                    "a dead peer is noticed only at the deadline",
                    tp->rank, p);
        params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        st = ucp_ep_create(tp->worker, &params, &pp->ep);
        pp->no_errhandling = 1;
    }
    if (st != UCS_OK) {
        return chorus__error(CHORUS_ERR_REMOTE, "rank %d: ucx: endpoint to peer %d: %s", tp->rank,
                             p, ucs_status_string(st));
    }
    chorus_status_t status = ucx_key(tp, tp->rank, p, pp->nonce, tp->nonce, &pp->key_out);
    if (status == CHORUS_SUCCESS)
        status = ucx_key(tp, p, tp->rank, tp->nonce, pp->nonce, &pp->key_in);
    return status;
}

/* Checks a completed proof from peer p; a bad one is logged and its receive reposted. */
static chorus_status_t ucx_check_proof(ucx_tp_t *tp, int p)
{
    ucx_peer_t *pp = &tp->peers[p];
    uint8_t want[UCX_MAC_BYTES];
    chorus_status_t status;

    if (pp->ctrl_recv.status == CHORUS_SUCCESS) {
        CHORUS_CHECK_GOTO(ucx_mac(tp, "chorus-ucx-auth", p, tp->rank, tp->nonce, pp->nonce, want),
                          err);
        if (CRYPTO_memcmp(want, pp->mac_in, UCX_MAC_BYTES) == 0) {
            pp->verified = 1;
            CHORUS_TRACE("ucx", "rank %d: peer %d proved the secret", tp->rank, p);
            return CHORUS_SUCCESS;
        }
    }
    if (pp->error != CHORUS_SUCCESS) return pp->error;
    /* Anyone holding our address can send to the control tag: refuse, log, and wait on. */
    tp->refused++;
    CHORUS_WARN(
        "ucx", "rank %d: refused a handshake message claiming to be rank %d (%s)", tp->rank, p,
        pp->ctrl_recv.status == CHORUS_SUCCESS ? "wrong proof of the secret" : "bad length");
    return chorus__ucx_post(tp, p, 0, pp->mac_in, UCX_MAC_BYTES,
                            chorus__ucx_ctrl_tag(p, tp->comm_id, 0), UCX_REQ_CTRL, &pp->ctrl_recv);
err:
    return status;
}

/* Starts the handshake with peer p: its endpoint, our proof, the receive of its proof. */
static chorus_status_t ucx_start_peer(ucx_tp_t *tp, int p, const uint8_t *blob)
{
    ucx_peer_t *pp = &tp->peers[p];
    chorus_status_t status;

    CHORUS_CHECK_GOTO(ucx_create_ep(tp, p, blob), err);
    CHORUS_CHECK_GOTO(
        ucx_mac(tp, "chorus-ucx-auth", tp->rank, p, pp->nonce, tp->nonce, pp->mac_out), err);
    CHORUS_CHECK_GOTO(chorus__ucx_post(tp, p, 0, pp->mac_in, UCX_MAC_BYTES,
                                       chorus__ucx_ctrl_tag(p, tp->comm_id, 0), UCX_REQ_CTRL,
                                       &pp->ctrl_recv),
                      err);
    CHORUS_CHECK_GOTO(chorus__ucx_post(tp, p, 0, pp->ack_in, sizeof(pp->ack_in),
                                       chorus__ucx_ctrl_tag(p, tp->comm_id, 1), UCX_REQ_CTRL,
                                       &pp->ack_recv),
                      err);
    CHORUS_CHECK_GOTO(chorus__ucx_post(tp, p, 1, pp->mac_out, UCX_MAC_BYTES,
                                       chorus__ucx_ctrl_tag(tp->rank, tp->comm_id, 0), UCX_REQ_CTRL,
                                       &pp->ctrl_send),
                      err);
    return CHORUS_SUCCESS;
err:
    return status;
}

/* One pass over the handshakes: returns how many peers are not done yet. */
static int ucx_handshakes_left(ucx_tp_t *tp, const uint8_t *mask, chorus_status_t *status_p)
{
    int left = 0;

    *status_p = CHORUS_SUCCESS;
    for (int p = 0; p < tp->nranks && *status_p == CHORUS_SUCCESS; p++) {
        ucx_peer_t *pp = &tp->peers[p];
        if (!mask[p] || p == tp->rank) continue;
        /* A peer whose handshake completed and that failed since (it may already have
         * returned from its connect_all and died) was connected: its failure belongs to the
         * requests that involve it, not to this setup. */
        if (pp->verified && pp->ctrl_send.done && pp->ctrl_send.status == CHORUS_SUCCESS &&
            pp->ack_sent && pp->ack_send.done && pp->ack_send.status == CHORUS_SUCCESS &&
            pp->ack_recv.done && pp->ack_recv.status == CHORUS_SUCCESS)
            continue;
        if (pp->error != CHORUS_SUCCESS) {
            *status_p = chorus__error(pp->error, "%s", pp->why);
            break;
        }
        if (!pp->verified && pp->ctrl_recv.done) *status_p = ucx_check_proof(tp, p);
        if (*status_p == CHORUS_SUCCESS && pp->verified && !pp->ack_sent) {
            chorus__ucx_put_be64(pp->ack_out, tp->comm_id);
            pp->ack_sent = 1;
            *status_p = chorus__ucx_post(tp, p, 1, pp->ack_out, sizeof(pp->ack_out),
                                         chorus__ucx_ctrl_tag(tp->rank, tp->comm_id, 1),
                                         UCX_REQ_CTRL, &pp->ack_send);
        }
        if (*status_p != CHORUS_SUCCESS) break;
        chorus_status_t st = pp->ctrl_send.done ? pp->ctrl_send.status : CHORUS_SUCCESS;
        if (st == CHORUS_SUCCESS && pp->ack_sent && pp->ack_send.done) st = pp->ack_send.status;
        if (st == CHORUS_SUCCESS && pp->ack_recv.done) st = pp->ack_recv.status;
        if (st != CHORUS_SUCCESS) {
            *status_p =
                chorus__error(st, "rank %d: ucx: the handshake with peer %d failed", tp->rank, p);
        }
        left += !pp->verified || !pp->ctrl_send.done || !pp->ack_sent || !pp->ack_send.done ||
                !pp->ack_recv.done;
    }
    return left;
}

/* Names the peers that never proved the secret, for the deadline's message. */
static chorus_status_t ucx_setup_timeout(ucx_tp_t *tp, const uint8_t *mask)
{
    char list[256];
    size_t n = 0;
    int unproved = 0;

    list[0] = '\0';
    for (int p = 0; p < tp->nranks; p++) {
        if (!mask[p] || p == tp->rank || tp->peers[p].verified) continue;
        unproved++;
        if (n + 16 < sizeof(list)) n += (size_t)snprintf(list + n, sizeof(list) - n, " %d", p);
    }
    if (unproved > 0 && tp->refused > 0) {
        return chorus__error(CHORUS_ERR_AUTH,
                             "rank %d: ucx: connect_all: peer(s)%s never proved the job secret "
                             "(%u handshake message(s) refused)",
                             tp->rank, list, tp->refused);
    }
    return chorus__error(CHORUS_ERR_TIMEOUT,
                         "rank %d: ucx: connect_all: no handshake from peer(s)%s by the deadline",
                         tp->rank, unproved > 0 ? list : " (acknowledgements pending)");
}

static chorus_status_t ucx_connect_all(chorus_tp_t *tpv, const uint8_t *peer_mask,
                                       const void *blobs, uint64_t deadline_ns)
{
    ucx_tp_t *tp = (ucx_tp_t *)tpv;
    chorus_status_t status = CHORUS_SUCCESS;

    for (int p = 0; p < tp->nranks && status == CHORUS_SUCCESS; p++) {
        if (!peer_mask[p] || p == tp->rank || tp->peers[p].ep != NULL) continue;
        status = ucx_start_peer(tp, p, (const uint8_t *)blobs + (size_t)p * CHORUS_TP_BLOB_MAX);
    }
    while (status == CHORUS_SUCCESS) {
        chorus__ucx_progress(tpv);
        if (ucx_handshakes_left(tp, peer_mask, &status) == 0 || status != CHORUS_SUCCESS) break;
        if (tp->abort_flag != NULL && atomic_load_explicit(tp->abort_flag, memory_order_relaxed)) {
            status =
                chorus__error(CHORUS_ERR_ABORTED, "rank %d: ucx: connect_all aborted", tp->rank);
        } else if (deadline_ns != 0 && chorus__deadline_passed(deadline_ns)) {
            status = ucx_setup_timeout(tp, peer_mask);
        } else {
            chorus__ucx_wait(tpv, 10000);
        }
    }
    if (status != CHORUS_SUCCESS) chorus__error_context(status, "rank %d: ucx", tp->rank);
    return status;
}

/* Detaches every pending request from its caller and cancels it. */
static void ucx_detach_all(ucx_tp_t *tp)
{
    tp->closing = 1;
    for (int p = 0; p < tp->nranks; p++) {
        for (ucx_slot_t *s = tp->peers[p].head; s != NULL; s = s->next) {
            s->req = NULL;
            if (s->reg != NULL) chorus__ucx_mem_put(tp, s->reg);
            s->reg = NULL;
        }
    }
    for (int p = 0; p < tp->nranks; p++) {
        while (tp->peers[p].head != NULL) {
            ucx_slot_t *s = tp->peers[p].head;
            /* Unlinked first: the cancel may complete it at once, or never (a rendezvous
             * send in flight), and then the worker's destruction frees it. */
            tp->peers[p].head = s->next;
            if (s->next != NULL) s->next->prev = NULL;
            s->next = s->prev = NULL;
            s->peer = -1;
            ucp_request_cancel(tp->worker, s);
        }
    }
}

/* Closes every endpoint, flushing for at most UCX_CLOSE_NS, then forcing the rest; with
 * force, every endpoint that has peer-failure handling is forced at once (its requests,
 * failed already, are dropped: a flush could not end, and UCX asserts when a worker goes with
 * requests still on an endpoint). */
static void ucx_close_eps(ucx_tp_t *tp, int force)
{
    void **reqs = calloc((size_t)tp->nranks, sizeof(*reqs));
    uint64_t deadline = chorus__now_ns() + UCX_CLOSE_NS;
    ucp_request_param_t param;
    int left = 0;

    memset(&param, 0, sizeof(param));
    for (int p = 0; p < tp->nranks; p++) {
        ucx_peer_t *pp = &tp->peers[p];
        if (pp->ep == NULL) continue;
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        /* Forcing is undefined without error handling: those only flush, within the time. */
        param.flags = (force || pp->ep_status != UCS_OK || reqs == NULL) && !pp->no_errhandling
                          ? UCP_EP_CLOSE_FLAG_FORCE
                          : 0;
        void *r = ucp_ep_close_nbx(pp->ep, &param);
        pp->ep = NULL;
        if (r == NULL || UCS_PTR_IS_ERR(r)) continue;
        if (reqs == NULL) continue;
        reqs[p] = r;
        left++;
    }
    while (left > 0 && chorus__now_ns() < deadline) {
        ucp_worker_progress(tp->worker);
        left = 0;
        for (int p = 0; p < tp->nranks; p++) {
            if (reqs[p] == NULL) continue;
            if (ucp_request_check_status(reqs[p]) != UCS_INPROGRESS) {
                ucp_request_free(reqs[p]);
                reqs[p] = NULL;
            } else {
                left++;
            }
        }
    }
    for (int p = 0; left > 0 && p < tp->nranks; p++) {
        if (reqs[p] == NULL) continue;
        CHORUS_INFO("ucx", "rank %d: the endpoint to peer %d did not flush in time", tp->rank, p);
        ucp_request_cancel(tp->worker, reqs[p]);
        ucp_request_free(reqs[p]);
    }
    free(reqs);
}

/* Leaving the communicator (it was revoked, or this rank found a mismatch): every peer is
 * failed here, and every endpoint closed at once, forced where the peer has error handling,
 * so that a peer still waiting on this rank sees it go now, not at its deadline (tcp sends
 * a message for it, shm marks the segment). Without it the survivors of a death that had
 * not seen it waited in their collective on the ranks that had gone on to shrink. */
static void ucx_leave(chorus_tp_t *tpv, chorus_status_t status)
{
    ucx_tp_t *tp = (ucx_tp_t *)tpv;
    char why[1024]; /* status.c keeps messages of up to 1024 bytes */

    if (tp == NULL || tp->left) return;
    tp->left = 1;
    /* The caller's message (the failure that made it leave) stays this thread's. */
    snprintf(why, sizeof why, "%s", chorus_last_error());
    for (int p = 0; p < tp->nranks; p++) {
        if (p == tp->rank || tp->peers[p].ep == NULL) continue;
        (void)chorus__ucx_fail_peer(tp, p, status, "rank %d: ucx: this rank left the "
                                    "communicator (%s)", tp->rank, chorus_status_string(status));
    }
    (void)chorus__error(status, "%s", why);
    ucx_close_eps(tp, 1);
}

static void ucx_fini(chorus_tp_t *tpv)
{
    ucx_tp_t *tp = (ucx_tp_t *)tpv;
    int pending = 0;
    if (tp == NULL) return;
    for (int p = 0; p < tp->nranks; p++) pending |= tp->peers[p].head != NULL;
    ucx_detach_all(tp);
    ucx_close_eps(tp, pending || tp->ep_errors || tp->error != CHORUS_SUCCESS);
    /* Remote keys belong to the worker and registrations to the context: both go first. */
    chorus__ucx_rma_free_all(tp);
    chorus__ucx_mem_fini(tp);
    ucp_worker_destroy(tp->worker);
    ucp_cleanup(tp->context);
    OPENSSL_cleanse(tp->secret, sizeof(tp->secret));
    free(tp->peers);
    free(tp);
}

const chorus_tp_ops_t chorus__tp_ucx_ops = {
    .size = sizeof(chorus_tp_ops_t),
    .name = "ucx",
    .caps = CHORUS_TP_CAP_HOST_MEM,
    .init = ucx_init,
    .get_addr = ucx_get_addr,
    .connect_all = ucx_connect_all,
    .isend = chorus__ucx_isend,
    .irecv = chorus__ucx_irecv,
    .progress = chorus__ucx_progress,
    .wait = chorus__ucx_wait,
    .reg_mem = chorus__ucx_reg_mem,
    .dereg_mem = chorus__ucx_dereg_mem,
    .fini = ucx_fini,
    .leave = ucx_leave,
};

#else /* !CHORUS_HAVE_UCX */

/* Built without UCX: the transport exists, so CHORUS_TRANSPORT=ucx names it, but it only
 * says what is missing. */
static chorus_status_t ucx_stub_init(const chorus_tp_params_t *params, chorus_tp_t **tp_p)
{
    (void)tp_p;
    return chorus__error(CHORUS_ERR_UNSUPPORTED,
                         "rank %d: ucx: built without UCX (apt-get install libucx-dev)",
                         params != NULL ? params->rank : -1);
}

const chorus_tp_ops_t chorus__tp_ucx_ops = {
    .size = sizeof(chorus_tp_ops_t),
    .name = "ucx",
    .caps = 0,
    .init = ucx_stub_init,
};

#endif
