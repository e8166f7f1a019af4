/* The smallest Chorus program: every rank contributes rank + 1, all receive the sum.
 * Run it with: chorusrun -n 4 -- ./allreduce */
#include <chorus.h>
#include <stdio.h>

int main(void)
{
    enum { COUNT = 1024 };
    static float data[COUNT];
    chorus_comm_t comm;
    int rank, nranks, wrong = 0;

    chorus_status_t status = chorus_comm_init_env(&comm);
    if (status != CHORUS_SUCCESS) {
        fprintf(stderr, "init: %s: %s\n", chorus_status_string(status), chorus_last_error());
        return 1;
    }
    chorus_comm_rank(comm, &rank);
    chorus_comm_size(comm, &nranks);
    for (int i = 0; i < COUNT; i++)
        data[i] = (float)(rank + 1);
    status = chorus_allreduce(data, data, COUNT, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL);
    if (status != CHORUS_SUCCESS)
        fprintf(stderr, "allreduce: %s: %s\n", chorus_status_string(status), chorus_last_error());
    for (int i = 0; i < COUNT; i++)
        wrong += data[i] != (float)(nranks * (nranks + 1) / 2);
    if (status == CHORUS_SUCCESS && rank == 0)
        printf("allreduce of %d floats over %d ranks: %s\n", COUNT, nranks, wrong ? "WRONG" : "ok");
    chorus_comm_destroy(comm);
    return status != CHORUS_SUCCESS || wrong != 0;
}
