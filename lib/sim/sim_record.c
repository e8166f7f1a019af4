/*
 * A recorded run (chorus_sim_args_t.record): every step's times, the critical path through
 * them, and the run as a trace in the format of real runs (lib/trace/trace_json.h), so that
 * a simulated timeline and a measured one (CHORUS_TRACE) open side by side.
 */
#include "sim/sim_int.h"

#include "trace/trace_json.h"
#include "util/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

chorus_status_t chorus__sim_record_alloc(sim_t *s)
{
    const uint64_t n = s->slots;

    if (n > SIM_RECORD_MAX_STEPS)
        return chorus__error(CHORUS_ERR_UNSUPPORTED,
                             "sim: %llu steps are too many to record (at most %llu): fewer "
                             "ranks or a larger chunk",
                             (unsigned long long)n, (unsigned long long)SIM_RECORD_MAX_STEPS);
    s->r_ready = calloc(n + 1, sizeof *s->r_ready);
    s->r_cpu = calloc(n + 1, sizeof *s->r_cpu);
    s->r_end = calloc(n + 1, sizeof *s->r_end);
    s->r_flow = calloc(n + 1, sizeof *s->r_flow);
    s->r_rcause = malloc((n + 1) * sizeof *s->r_rcause);
    s->r_scause = malloc((n + 1) * sizeof *s->r_scause);
    s->r_why = calloc(n + 1, 1);
    s->cpu_owner = malloc((size_t)s->n * sizeof *s->cpu_owner);
    if (!s->r_ready || !s->r_cpu || !s->r_end || !s->r_flow || !s->r_rcause || !s->r_scause ||
        !s->r_why || !s->cpu_owner)
        return chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory to record %llu steps",
                             (unsigned long long)n);
    for (uint64_t g = 0; g <= n; g++)
        s->r_rcause[g] = s->r_scause[g] = SIM_NONE;
    for (int r = 0; r < s->n; r++)
        s->cpu_owner[r] = SIM_NONE;
    s->mem += (size_t)(n * (4 * sizeof(double) + 2 * sizeof(uint64_t) + 1));
    if (s->mem > s->mem_peak) s->mem_peak = s->mem;
    return CHORUS_SUCCESS;
}

void chorus__sim_record_free(sim_t *s)
{
    free(s->r_ready);
    free(s->r_cpu);
    free(s->r_end);
    free(s->r_flow);
    free(s->r_rcause);
    free(s->r_scause);
    free(s->r_why);
    free(s->cpu_owner);
    s->r_ready = s->r_cpu = s->r_end = s->r_flow = NULL;
    s->r_rcause = s->r_scause = s->cpu_owner = NULL;
    s->r_why = NULL;
}

/* Where the walk enters a step: at its end, at the end of its CPU part (a SEND's comes
 * before its flow), at the start of its CPU part, or at the moment it became ready. */
enum { AT_END, AT_CPU_END, AT_CPU_START, AT_READY };

/* The walk goes back in time from the last step to finish, through what held each step
 * back, adding up where the time went; the parts sum to the call's time. */
void chorus__sim_critical_path(const sim_t *s, chorus_sim_path_t *path)
{
    const uint64_t n = s->slots;
    uint64_t g = SIM_NONE;
    uint8_t *seen = calloc((size_t)s->n, 1);
    int at = AT_END;

    memset(path, 0, sizeof *path);
    for (uint64_t k = 0; k < n; k++)
        if (g == SIM_NONE || s->r_end[k] > s->r_end[g]) g = k;
    while (g != SIM_NONE) {
        const int r = (int)sim_g_rank(s, g);
        const sim_class_t *c = s->classes[s->cls[r]];
        const uint32_t i = sim_g_step(s, g);
        const double cpu = chorus__sim_cpu(s, c, r, i);
        const int kind = c->kind[i];
        const int why = s->r_why[g] & SIM_START_MASK;

        if (at == AT_END || at == AT_CPU_END) {
            path->steps++;
            if (seen != NULL && !seen[r]) {
                seen[r] = 1;
                path->ranks++;
            }
            if (kind == CHORUS_STEP_SEND) {
                /* Done at its flow's end, or earlier into socket buffers. */
                if (at == AT_END) path->network_s += s->r_end[g] - (s->r_cpu[g] + cpu);
                path->message_s += cpu;
            } else if (kind == CHORUS_STEP_RECV && at == AT_CPU_END) {
                /* Entered from the CPU it held: a streaming receive may end later. */
                path->message_s += cpu;
            } else if (kind == CHORUS_STEP_RECV && s->streams &&
                       s->r_end[g] > s->r_cpu[g] + cpu + 1e-12 * (1 + s->r_end[g])) {
                /* A streaming receive that ended with its last bytes: the software cost
                 * after them, the path's latency, the flow; on from the sender. */
                const uint64_t src = chorus__sim_recv_source(s, (uint32_t)r, i);
                const uint32_t rs = sim_g_rank(s, src);
                const double flow_start =
                    s->r_cpu[src] +
                    chorus__sim_cpu(s, s->classes[s->cls[rs]], (int)rs, sim_g_step(s, src));
                path->message_s += s->msg_s;
                path->latency_s += s->r_end[g] - s->msg_s - s->r_flow[src];
                path->network_s += s->r_flow[src] - flow_start;
                g = src;
                at = AT_CPU_END;
                continue;
            } else {
                double part = s->r_end[g] - s->r_cpu[g];
                if (kind == CHORUS_STEP_RECV)
                    path->message_s += part;
                else if (kind == CHORUS_STEP_REDUCE)
                    path->reduce_s += part;
                else
                    path->copy_s += part;
            }
        }
        if (at != AT_READY) {
            /* From the start of its CPU part back. */
            if (why == SIM_START_CPU) {
                /* The step that held the CPU, from the end of its CPU part (a SEND's flow
                 * and a streaming RECV's tail come after it). */
                g = s->r_scause[g];
                at = AT_CPU_END;
                if (g != SIM_NONE) {
                    const uint8_t k = s->classes[s->cls[sim_g_rank(s, g)]]->kind[sim_g_step(s, g)];
                    if (k != CHORUS_STEP_SEND && k != CHORUS_STEP_RECV) at = AT_END;
                }
                continue;
            }
            if (why == SIM_START_DATA) {
                /* The data's flow, then the path's latency; the SEND goes on from its CPU
                 * part. */
                const uint64_t src = s->r_scause[g];
                const uint32_t rs = sim_g_rank(s, src);
                const double flow_start =
                    s->r_cpu[src] +
                    chorus__sim_cpu(s, s->classes[s->cls[rs]], (int)rs, sim_g_step(s, src));
                path->latency_s += s->r_cpu[g] - s->r_flow[src];
                path->network_s += s->r_flow[src] - flow_start;
                g = src;
                at = AT_CPU_END;
                continue;
            }
            if (why == SIM_START_FIRST) {
                /* The first bytes: the send's software cost and the path's latency after
                 * the send's CPU part began. */
                const uint64_t src = s->r_scause[g];
                path->message_s += s->msg_s;
                path->latency_s += s->r_cpu[g] - s->msg_s - s->r_cpu[src];
                g = src;
                at = AT_CPU_START;
                continue;
            }
        }
        /* From the moment it became ready back. */
        switch (s->r_why[g] & 3) {
        case SIM_READY_DEP:
            g = s->r_rcause[g];
            at = AT_END;
            break;
        case SIM_READY_ORDER:
            g = s->r_rcause[g];
            at = AT_READY;
            break;
        default: g = SIM_NONE; break;
        }
    }
    free(seen);
}

typedef struct {
    double t0, t1;
} span_t;

static int cmp_span(const void *p, const void *q)
{
    const span_t *x = p, *y = q;
    return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

/* Waits as the real trace has them: spells of 10 us or more when the rank's CPU had
 * nothing to do, between its first CPU work and its last step's end. */
#define SIM_TRACE_WAIT_S 10e-6

static void trace_rank(const sim_t *s, chorus_tjson_t *w, int r, span_t *spans, const char *name)
{
    const sim_class_t *c = s->classes[s->cls[r]];
    double end = 0;
    uint32_t nspan = 0;

    for (uint32_t i = 0; i < c->nsteps; i++) {
        const uint64_t g = sim_g(s, (uint32_t)r, i);
        const double cpu = chorus__sim_cpu(s, c, r, i);
        chorus_tev_t e = {0, 0, c->bytes[i], -1, 0, NULL, NULL};

        if (s->r_end[g] > end) end = s->r_end[g];
        switch (c->kind[i]) {
        case CHORUS_STEP_SEND:
        case CHORUS_STEP_RECV:
            e.kind = c->kind[i] == CHORUS_STEP_SEND ? CHORUS_TEV_SEND : CHORUS_TEV_RECV;
            e.peer = (int32_t)((r + c->relpeer[i]) % s->n);
            e.t0_us = (c->kind[i] == CHORUS_STEP_SEND ? s->r_cpu[g] : s->r_ready[g]) * 1e6;
            e.t1_us = s->r_end[g] * 1e6;
            spans[nspan].t0 = s->r_cpu[g];
            spans[nspan++].t1 = s->r_cpu[g] + cpu;
            break;
        default:
            e.kind = c->kind[i] == CHORUS_STEP_COPY ? CHORUS_TEV_COPY : CHORUS_TEV_REDUCE;
            e.t0_us = s->r_cpu[g] * 1e6;
            e.t1_us = s->r_end[g] * 1e6;
            spans[nspan].t0 = s->r_cpu[g];
            spans[nspan++].t1 = s->r_end[g];
            break;
        }
        chorus__tjson_event(w, r, &e);
    }
    qsort(spans, nspan, sizeof *spans, cmp_span);
    for (uint32_t k = 1, until_k = 0; k < nspan; k++) {
        double until = spans[until_k].t1;
        if (spans[k].t0 - until >= SIM_TRACE_WAIT_S) {
            chorus_tev_t e = {until * 1e6, spans[k].t0 * 1e6, 0, -1, CHORUS_TEV_WAIT, NULL, NULL};
            chorus__tjson_event(w, r, &e);
        }
        if (spans[k].t1 > until) until_k = k;
    }
    {
        chorus_tev_t e = {
            0, end * 1e6, s->a->bytes, -1, CHORUS_TEV_CALL, name, chorus__algo_name(s->a->algo)};
        chorus__tjson_event(w, r, &e);
    }
}

chorus_status_t chorus__sim_write_trace(const sim_t *s, const char *path)
{
    FILE *f = fopen(path, "w");
    chorus_tjson_t w;
    span_t *spans;
    uint32_t most = 0;
    char label[160], name[96], details[160];
    int rc;

    if (f == NULL) return chorus__error(CHORUS_ERR_SYSTEM, "sim: %s: %s", path, strerror(errno));
    for (int k = 0; k < s->nclasses; k++)
        if (s->classes[k]->nsteps > most) most = s->classes[k]->nsteps;
    spans = malloc(((size_t)most + 1) * sizeof *spans);
    if (spans == NULL) {
        fclose(f);
        return chorus__error(CHORUS_ERR_NO_MEMORY, "sim: no memory for the trace");
    }
    snprintf(name, sizeof name, "%s (simulated)", chorus__coll_name(s->a->coll));
    chorus__tjson_begin(&w, f, 0);
    for (int r = 0; r < s->n; r++) {
        snprintf(label, sizeof label, "rank %d of %d on host %d (simulated)", r, s->n,
                 chorus__fabric_host_of(s->fab, r));
        chorus__tjson_process(&w, r, label);
        trace_rank(s, &w, r, spans, name);
    }
    free(spans);
    snprintf(details, sizeof details, "\"nranks\":%d,\"bytes\":%llu,\"time_us\":%.3f", s->n,
             (unsigned long long)s->a->bytes, s->finish * 1e6);
    rc = chorus__tjson_end(&w, "sim", details);
    if (fclose(f) != 0 || rc != 0)
        return chorus__error(CHORUS_ERR_SYSTEM, "sim: writing %s failed", path);
    return CHORUS_SUCCESS;
}
