/*
 * The rendezvous of a Slurm step started without PMIx (`srun ./prog`): Slurm tells every
 * task the step's host list and the job and step ids, and places task 0 on the first
 * host, so every task can compute the same root address with nothing sent around.
 */
#include "bootstrap/launch.h"

#include "util/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *slurm_env(const char *a, const char *b)
{
    const char *v = getenv(a);

    if ((v == NULL || v[0] == '\0') && b != NULL) v = getenv(b);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* A Slurm id; a step id may also be a word (the batch script's "batch"), which is
 * hashed, since only equality between tasks matters. */
static unsigned long slurm_id(const char *text)
{
    unsigned long v = 0;
    char *end;

    errno = 0;
    v = strtoul(text, &end, 10);
    if (end != text && *end == '\0' && errno == 0) return v;
    for (v = 5381; *text != '\0'; text++) v = v * 33 + (unsigned char)*text;
    return v;
}

int chorus__slurm_port(unsigned long job_id, unsigned long step_id)
{
    /* Jobs 37 ports apart, the steps of one job on consecutive ports: two steps that run
     * at once on one first host collide only if 37 steps separate them. */
    unsigned long span = CHORUS_SLURM_PORT_SPAN;

    return CHORUS_SLURM_PORT_BASE + (int)(((job_id % span) * 37 + step_id % span) % span);
}

chorus_status_t chorus__slurm_root(int rank, char *text, size_t len)
{
    const char *list = slurm_env("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST");
    const char *job = slurm_env("SLURM_JOB_ID", "SLURM_JOBID");
    const char *step = slurm_env("SLURM_STEP_ID", "SLURM_STEPID");
    const char *node = slurm_env("SLURM_NODEID", NULL);
    chorus_status_t status;
    char host[256];

    if (list == NULL || job == NULL) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "bootstrap: SLURM_PROCID is set but not %s: cannot derive the "
                             "root; set CHORUS_ROOT=host:port",
                             list == NULL ? "SLURM_STEP_NODELIST or SLURM_JOB_NODELIST"
                                          : "SLURM_JOB_ID");
    }
    status = chorus__hostlist_nth(list, 0, host, sizeof(host));
    if (status != CHORUS_SUCCESS) return chorus__error_context(status, "bootstrap");
    /* With --distribution=arbitrary task 0 may land elsewhere: say so now rather than
     * let every task time out connecting to a root nobody serves. */
    if (rank == 0 && node != NULL && strcmp(node, "0") != 0) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "bootstrap: task 0 runs on node %s of the step, not on its first "
                             "host %s: set CHORUS_ROOT=host:port",
                             node, host);
    }
    snprintf(text, len, strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d", host,
             chorus__slurm_port(slurm_id(job), step != NULL ? slurm_id(step) : 0));
    return CHORUS_SUCCESS;
}
