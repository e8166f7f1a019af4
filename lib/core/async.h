/*
 * Nonblocking operations on host memory (chorus_i*, chorus_wait/test; the semantics are in
 * include/chorus.h). Internal to lib/core.
 *
 * A nonblocking call validates its arguments on the caller's thread and queues the
 * operation; one progress thread per communicator, started at the first such call, runs
 * the queue in call order with the same code as the blocking calls (chorus__coll_run and
 * the send/recv schedules), so the results are bit for bit those of the blocking calls
 * and every signature and sequence check still applies. Why a thread and not progress
 * inside chorus_wait/test: a framework computes between the call and the wait (the
 * backward pass of the next layer), and the collective must move meanwhile.
 *
 * Sends and receives are not queued one by one: the ones issued since the last flush form
 * an open batch that enters the queue as one group (as chorus_group_start/end would run
 * them) at the next flush: a collective call, any wait or test, a blocking call, destroy.
 * Then an exchange written as isend + irecv on both sides cannot deadlock, whatever the
 * order and the message sizes, and the batch is deterministic (it does not depend on how
 * fast the progress thread picks operations up).
 *
 * Host calls that are not nonblocking (blocking collectives, device calls, set_timeout)
 * first drain the queue (chorus__async_drain), so the comm's internals are only ever used by
 * one thread at a time and every operation keeps its place in call order.
 */
#ifndef CHORUS_CORE_ASYNC_H
#define CHORUS_CORE_ASYNC_H

#include "core/comm.h"
#include "core/gpu_coll.h"

/* Queues a validated host collective (call->device < 0) and returns its request in
 * *req_p. The comm's open send/recv batch is queued before it. */
chorus_status_t chorus__async_coll(chorus_comm_t comm, const chorus_coll_call_t *call,
                                   chorus_request_t *req_p);

/* Adds a validated send or receive (bytes > 0, peer != self allowed only in a batch with
 * its match) to the comm's open batch and returns its request in *req_p. */
chorus_status_t chorus__async_p2p(chorus_comm_t comm, const chorus_p2p_op_t *op,
                                  chorus_request_t *req_p);

/* Tagged point to point (tagged.c) runs on the comm's progress thread as one entry of its
 * queue that lasts: serve(comm) returns only when the comm is destroyed, aborted or
 * failed, and the comm then takes no other nonblocking work. Its requests are the queue's
 * (chorus_wait and the rest work on them unchanged): chorus__async_request makes a pending
 * one, and the service ends it with chorus__async_complete. */
chorus_status_t chorus__async_serve(chorus_comm_t comm, void (*serve)(chorus_comm_t comm));
chorus_status_t chorus__async_request(chorus_comm_t comm, chorus_request_t *req_p);
void chorus__async_complete(chorus_request_t req, chorus_status_t status, const char *msg);

/* A request that is complete at once (a zero-byte operation), status SUCCESS. */
chorus_status_t chorus__async_done_request(chorus_comm_t comm, chorus_request_t *req_p);

/* Queues the open batch and waits until the progress thread has run everything queued
 * (a no-op when the comm never had a nonblocking call). Not from the progress thread. */
/* Nonblocking operations queued or running on the comm. */
int chorus__async_inflight(chorus_comm_t comm);
void chorus__async_drain(chorus_comm_t comm);

/* Drains, stops and joins the progress thread and frees the comm's queue (destroy). */
void chorus__async_destroy(chorus_comm_t comm);

#endif
