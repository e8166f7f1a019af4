/*
 * CHORUS_TRACE end to end (issue 19): every rank runs a few collectives and a ring of
 * sends, destroys its comm, and rank 0 then waits for the job's merged trace and checks it
 * with a JSON parser: every rank is a process with a name; its calls are there, in order,
 * with their algorithm and bytes; every async slice that begins ends, no earlier than it
 * began; and the messages agree between the two ends: for every pair, the bytes rank a
 * sent to b are the bytes b received from a. Parts must be gone once merged.
 *
 *   chorusrun -n N -- env CHORUS_TRACE=FILE mp_trace [--expect-steps]
 *
 * --expect-steps: the job runs schedules (not only the single-host arena), so sends,
 * receives and reduces must be there. Exit status 0 when every check holds.
 */
#include "mp_common.h"

#include <dirent.h>
#include <jansson.h>
#include <libgen.h>

#define COUNT (256 * 1024)
#define NCALLS 6

static const char *const expected_calls[NCALLS] = {"allreduce #1", "allreduce #2", "allgather #3",
                                                   "broadcast #4", "group #5",     "allreduce #6"};

static int fail(const char *what)
{
    fprintf(stderr, "mp_trace: %s\n", what);
    return 1;
}

static int run_calls(chorus_comm_t comm, int rank, int n)
{
    float *a = calloc((size_t)COUNT * (size_t)n, sizeof *a),
          *b = calloc((size_t)COUNT * (size_t)n, sizeof *b);
    int bad = a == NULL || b == NULL;

    for (size_t i = 0; !bad && i < COUNT; i++)
        a[i] = (float)(rank + 1);
    if (!bad) bad |= chorus_allreduce(a, b, COUNT, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL) != 0;
    if (!bad) bad |= chorus_allreduce(a, b, COUNT / 3, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL) != 0;
    if (!bad) bad |= chorus_allgather(a, b, COUNT / 8, CHORUS_FLOAT32, comm, NULL) != 0;
    if (!bad) bad |= chorus_broadcast(a, b, COUNT, CHORUS_FLOAT32, 0, comm, NULL) != 0;
    if (!bad) {
        chorus_group_start();
        chorus_send(a, 1000, CHORUS_FLOAT32, (rank + 1) % n, comm, NULL);
        chorus_recv(b, 1000, CHORUS_FLOAT32, (rank + n - 1) % n, comm, NULL);
        bad |= chorus_group_end() != 0;
    }
    if (!bad) bad |= chorus_allreduce(a, b, COUNT, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL) != 0;
    free(a);
    free(b);
    return bad;
}

/* Waits (20 s at most) for the merged file, which the last rank renames into place. */
static json_t *wait_trace(const char *path)
{
    for (int k = 0; k < 2000; k++) {
        if (access(path, F_OK) == 0) {
            json_error_t err;
            json_t *root = json_load_file(path, 0, &err);
            if (root == NULL)
                fprintf(stderr, "mp_trace: %s: line %d: %s\n", path, err.line, err.text);
            return root;
        }
        usleep(10000);
    }
    fprintf(stderr, "mp_trace: %s never appeared\n", path);
    return NULL;
}

static int check_trace(json_t *root, const char *path, int n, int expect_steps)
{
    json_t *events = json_object_get(root, "traceEvents"), *e;
    size_t k;
    int bad = 0, named[64] = {0}, ncalls[64] = {0}, nsteps = 0;
    double *sent = calloc((size_t)n * (size_t)n, sizeof *sent);
    double *recvd = calloc((size_t)n * (size_t)n, sizeof *recvd);
    json_t *open = json_object();

    if (!json_is_array(events) || sent == NULL || recvd == NULL || open == NULL || n > 64)
        return fail("no traceEvents array");
    json_array_foreach(events, k, e)
    {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *cat = json_string_value(json_object_get(e, "cat"));
        int pid = (int)json_integer_value(json_object_get(e, "pid"));
        double ts = json_number_value(json_object_get(e, "ts"));

        if (ph == NULL || name == NULL || pid < 0 || pid >= n) {
            fprintf(stderr, "mp_trace: event %zu has no ph, name or valid pid\n", k);
            bad = 1;
            continue;
        }
        if (strcmp(ph, "M") == 0) {
            if (strcmp(name, "process_name") == 0) named[pid]++;
            continue;
        }
        if (ts < 0) {
            fprintf(stderr, "mp_trace: event %zu at %g us, before the origin\n", k, ts);
            bad = 1;
        }
        if (strcmp(ph, "X") == 0 && cat != NULL && strcmp(cat, "call") == 0) {
            json_t *args = json_object_get(e, "args");
            const char *algo = json_string_value(json_object_get(args, "algo"));
            if (ncalls[pid] < NCALLS && strcmp(name, expected_calls[ncalls[pid]]) != 0) {
                fprintf(stderr, "mp_trace: rank %d's call %d is '%s', not '%s'\n", pid,
                        ncalls[pid] + 1, name, expected_calls[ncalls[pid]]);
                bad = 1;
            }
            if (algo == NULL || algo[0] == '\0' ||
                json_integer_value(json_object_get(args, "bytes")) <= 0) {
                fprintf(stderr, "mp_trace: rank %d's '%s' has no algorithm or bytes\n", pid, name);
                bad = 1;
            }
            ncalls[pid]++;
        } else if (strcmp(ph, "X") == 0 && cat != NULL && strcmp(cat, "reduce") == 0) {
            nsteps++;
        } else if (strcmp(ph, "b") == 0 || strcmp(ph, "e") == 0) {
            const char *id = json_string_value(json_object_get(json_object_get(e, "id2"), "local"));
            char key[96];
            if (id == NULL || cat == NULL) {
                fprintf(stderr, "mp_trace: async event %zu without id2.local or cat\n", k);
                bad = 1;
                continue;
            }
            snprintf(key, sizeof key, "%d/%s", pid, id);
            if (ph[0] == 'b') {
                json_t *args = json_object_get(e, "args");
                int peer = (int)json_integer_value(json_object_get(args, "peer"));
                double bytes = (double)json_integer_value(json_object_get(args, "bytes"));
                if (peer < 0 || peer >= n || json_object_get(open, key) != NULL) {
                    fprintf(stderr, "mp_trace: slice %s: bad peer or begun twice\n", key);
                    bad = 1;
                    continue;
                }
                json_object_set_new(open, key, json_real(ts));
                if (strcmp(cat, "send") == 0)
                    sent[pid * n + peer] += bytes;
                else
                    recvd[peer * n + pid] += bytes;
                nsteps++;
            } else {
                json_t *b = json_object_get(open, key);
                if (b == NULL || json_real_value(b) > ts) {
                    fprintf(stderr, "mp_trace: slice %s ends %s\n", key,
                            b == NULL ? "without a beginning" : "before it began");
                    bad = 1;
                }
                json_object_del(open, key);
            }
        }
    }
    if (json_object_size(open) != 0) {
        fprintf(stderr, "mp_trace: %zu slices never ended\n", json_object_size(open));
        bad = 1;
    }
    for (int r = 0; r < n; r++) {
        if (named[r] != 1 || ncalls[r] != NCALLS) {
            fprintf(stderr, "mp_trace: rank %d: %d process names, %d calls (want 1, %d)\n", r,
                    named[r], ncalls[r], NCALLS);
            bad = 1;
        }
        for (int p = 0; p < n; p++)
            if (sent[r * n + p] != recvd[r * n + p]) {
                fprintf(stderr, "mp_trace: rank %d sent %.0f bytes to %d, which received %.0f\n", r,
                        sent[r * n + p], p, recvd[r * n + p]);
                bad = 1;
            }
    }
    if (expect_steps && nsteps == 0) {
        fprintf(stderr, "mp_trace: no sends, receives or reduces recorded\n");
        bad = 1;
    }
    {
        /* The parts (FILE.<comm id>.<rank>) and the tally are gone. */
        char dir[4096], base[4096];
        DIR *d;
        struct dirent *de;
        snprintf(dir, sizeof dir, "%s", path);
        snprintf(base, sizeof base, "%s", path);
        d = opendir(dirname(dir));
        const char *stem = basename(base);
        while (d != NULL && (de = readdir(d)) != NULL)
            if (strncmp(de->d_name, stem, strlen(stem)) == 0 && de->d_name[strlen(stem)] == '.') {
                fprintf(stderr, "mp_trace: %s is left over\n", de->d_name);
                bad = 1;
            }
        if (d != NULL) closedir(d);
    }
    if (!bad)
        printf("mp_trace: %d ranks, %d calls each, %d steps; sends and receives agree for every "
               "pair\n",
               n, NCALLS, nsteps);
    json_decref(open);
    free(sent);
    free(recvd);
    return bad;
}

int main(int argc, char **argv)
{
    const char *path = getenv("CHORUS_TRACE");
    int expect_steps = argc > 1 && strcmp(argv[1], "--expect-steps") == 0;
    chorus_comm_t comm;
    int rank, n, bad;

    if (path == NULL || path[0] == '\0') return fail("CHORUS_TRACE is not set");
    if (chorus_comm_init_env(&comm) != CHORUS_SUCCESS) {
        fprintf(stderr, "mp_trace: init: %s\n", chorus_last_error());
        return 1;
    }
    chorus_comm_rank(comm, &rank);
    chorus_comm_size(comm, &n);
    bad = run_calls(comm, rank, n);
    if (bad) fprintf(stderr, "mp_trace: rank %d: a call failed: %s\n", rank, chorus_last_error());
    chorus_comm_destroy(comm);
    if (rank == 0 && !bad) {
        json_t *root = wait_trace(path);
        bad = root == NULL || check_trace(root, path, n, expect_steps);
        json_decref(root);
    }
    return bad ? 1 : 0;
}
