/* Two (or more) processes joined without a launcher: rank 0 makes the unique id and writes
 * it to a file that only its user can read (the id holds the job's secret); the other
 * ranks wait for the file and read it. Then every rank sums rank + 1 over all and checks.
 *
 *   ./id_by_file /tmp/chorus.id 0 2 &  ./id_by_file /tmp/chorus.id 1 2
 *
 * Any channel works the same way: a shared file system, a key-value store, MPI_Bcast. */
#define _POSIX_C_SOURCE 200809L
#include <chorus.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Written under a temporary name and renamed, so a reader never sees half an id. */
static int write_id(const char *path, const chorus_unique_id_t *id)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return -1;
    ssize_t n = write(fd, id, sizeof *id);
    if (close(fd) != 0 || n != (ssize_t)sizeof *id || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Waits up to timeout_s for the file to appear. */
static int read_id(const char *path, chorus_unique_id_t *id, int timeout_s)
{
    const struct timespec pause = {0, 10 * 1000 * 1000};
    for (int waited_ms = 0; waited_ms < timeout_s * 1000; waited_ms += 10) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            ssize_t n = read(fd, id, sizeof *id);
            close(fd);
            return n == (ssize_t)sizeof *id ? 0 : -1;
        }
        if (errno != ENOENT) return -1;
        nanosleep(&pause, NULL);
    }
    errno = ETIMEDOUT;
    return -1;
}

int main(int argc, char **argv)
{
    enum { COUNT = 1 << 16 };
    static int32_t data[COUNT];
    chorus_unique_id_t id;
    chorus_comm_t comm;

    if (argc != 4) {
        fprintf(stderr, "usage: %s ID_FILE RANK NRANKS\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    int rank = atoi(argv[2]), nranks = atoi(argv[3]);
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        fprintf(stderr, "%s: need 0 <= RANK < NRANKS\n", argv[0]);
        return 2;
    }
    if (rank == 0) {
        if (chorus_get_unique_id(&id) != CHORUS_SUCCESS) {
            fprintf(stderr, "unique id: %s\n", chorus_last_error());
            return 1;
        }
        if (write_id(path, &id) != 0) {
            fprintf(stderr, "rank 0: cannot write %s: %s\n", path, strerror(errno));
            return 1;
        }
    } else if (read_id(path, &id, 60) != 0) {
        fprintf(stderr, "rank %d: cannot read %s: %s\n", rank, path, strerror(errno));
        return 1;
    }

    chorus_status_t status = chorus_comm_init(&comm, nranks, &id, rank);
    if (status != CHORUS_SUCCESS) {
        fprintf(stderr, "rank %d: init: %s\n", rank, chorus_last_error());
        return 1;
    }
    if (rank == 0) unlink(path); /* every rank has joined: the id is no longer needed */
    for (int i = 0; i < COUNT; i++)
        data[i] = (rank + 1) * (i % 7);
    status = chorus_allreduce(data, data, COUNT, CHORUS_INT32, CHORUS_SUM, comm, NULL);
    int wrong = 0;
    for (int i = 0; status == CHORUS_SUCCESS && i < COUNT; i++)
        wrong += data[i] != nranks * (nranks + 1) / 2 * (i % 7);
    if (status != CHORUS_SUCCESS)
        fprintf(stderr, "rank %d: allreduce: %s\n", rank, chorus_last_error());
    else
        printf("rank %d of %d: allreduce of %d int32 without a launcher: %s\n", rank, nranks,
               COUNT, wrong ? "WRONG" : "ok");
    chorus_comm_destroy(comm);
    return status != CHORUS_SUCCESS || wrong != 0;
}
