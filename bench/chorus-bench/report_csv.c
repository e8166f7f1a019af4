/*
 * The CSV form of a run: the metadata as "# key: value" lines (pandas reads them with
 * comment='#'), one header line, then one line per row. Every row repeats the ranks, the
 * transport and the requested algorithm, so that the files of several runs (a sweep writes
 * them all into one) can be concatenated and grouped without the metadata, and ends with
 * the algorithm the library chose for it. Fields that do not apply
 * to a collective (the op of a broadcast, the root of an allreduce, the #wrong of an
 * unchecked run) are empty.
 */
#include "bench.h"

#include <stdio.h>

static void write_meta(FILE *out, const meta_t *m)
{
    fprintf(out, "# tool: chorus-bench\n");
    fprintf(out, "# chorus_version: %d\n", m->version);
    fprintf(out, "# ranks: %d\n# hosts: %d\n", m->ranks, m->hosts);
    fprintf(out, "# transport: %s\n# algo_requested: %s\n", m->transport, m->algo_requested);
    fprintf(out, "# chunk_size: %llu\n", (unsigned long long)m->chunk_size);
    fprintf(out, "# hostname: %s\n# date: %s\n", m->hostname, m->date);
    fprintf(out, "# command: %s\n", m->command != NULL ? m->command : "");
    fprintf(out, "# device: %s\n# backend: %s\n", m->device, m->backend);
    if (m->gpu[0] != '\0') fprintf(out, "# gpu: %s\n", m->gpu);
    if (m->nccl_version > 0) fprintf(out, "# nccl_version: %d\n", m->nccl_version);
}

static void write_row(FILE *out, const meta_t *m, const row_t *w)
{
    fprintf(out, "%s,%llu,%llu,", bench_coll_name(w->coll), (unsigned long long)w->size,
            (unsigned long long)w->count);
    fprintf(out, "%s,%s,", w->has_dtype ? chorus_dtype_name(w->dtype) : "",
            w->has_op ? chorus_op_name(w->op) : "");
    if (w->has_root) fprintf(out, "%d", w->root);
    fprintf(out, ",%d,%.3f,%.9g,%.9g,", w->in_place, w->time_us, w->algbw, w->busbw);
    if (w->wrong >= 0) fprintf(out, "%lld", (long long)w->wrong);
    fprintf(out, ",%.3f,%.3f,%.3f,%d,%d,%s,%s,%s,", w->lat_avg_us, w->lat_min_us, w->lat_max_us,
            w->iters, m->ranks, m->transport, m->algo_requested, w->algo);
    /* Last, so that readers that count columns keep working; empty without a model. */
    if (w->predicted_us >= 0.0) fprintf(out, "%.3f", w->predicted_us);
    fprintf(out, "\n");
}

int bench_write_csv(FILE *out, const results_t *r, int with_header)
{
    write_meta(out, &r->meta);
    if (with_header)
        fprintf(out, "collective,size,count,dtype,op,root,in_place,time_us,algbw,busbw,wrong,"
                     "lat_avg_us,lat_min_us,lat_max_us,iters,ranks,transport,algo_requested,"
                     "algo,predicted_us\n");
    for (size_t i = 0; i < r->nrows; i++)
        write_row(out, &r->meta, &r->rows[i]);
    return ferror(out) ? -1 : 0;
}

int bench_write_csv_file(const results_t *r, const char *path)
{
    FILE *out = fopen(path, "w");
    int rc;

    if (out == NULL) {
        perror(path);
        return -1;
    }
    rc = bench_write_csv(out, r, 1);
    if (fclose(out) != 0) rc = -1;
    if (rc != 0) fprintf(stderr, "chorus-bench: cannot write %s\n", path);
    return rc;
}
