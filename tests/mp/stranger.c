/*
 * A foreign process for stranger.sh: it finds the TCP ports that a job's processes listen
 * on (from /proc, by socket inode) and knocks on each with connections that do not know
 * the job's secret. It does not use the library.
 *
 *   mp_stranger --free-port                  print a free loopback TCP port
 *   mp_stranger --wait-listen PID[,PID...]   wait (10 s) until each pid listens somewhere
 *   mp_stranger --pids PID[,...] [--hold S] [--done FILE]
 *
 * With --pids, on each listening port it opens four connections: one sends garbage, one
 * answers the server's challenge with a wrong MAC, one announces an oversized hello, and
 * one stays silent. It creates FILE (--done) once all are sent, then waits up to S seconds
 * (default 30): each of the first three must be closed by the job without the server
 * sending its proof (more than the challenge's few bytes); the silent one is only held
 * open, to show that a stalled stranger does not hold up the job. Exit status 0 when
 * every port refused every bad connection; 1 otherwise; 3 when no port was found.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 64
#define KINDS 4

static const char *kind_names[KINDS] = {"garbage", "wrong-secret", "huge-hello", "silent"};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Socket inodes of a process. */
static int pid_inodes(int pid, unsigned long *inodes, int max)
{
    char path[64], link[128];
    int n = 0;
    snprintf(path, sizeof(path), "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    if (d == NULL) return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < max;) {
        char fdpath[320];
        snprintf(fdpath, sizeof(fdpath), "%s/%s", path, e->d_name);
        ssize_t len = readlink(fdpath, link, sizeof(link) - 1);
        if (len <= 0) continue;
        link[len] = '\0';
        if (sscanf(link, "socket:[%lu]", &inodes[n]) == 1) n++;
    }
    closedir(d);
    return n;
}

/* Listening IPv4 ports whose socket inode is in inodes (/proc/net/tcp, state 0A). */
static int listening_ports(const unsigned long *inodes, int ninodes, int *ports, int max)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    char line[512];
    int n = 0;
    if (f == NULL) return 0;
    while (fgets(line, sizeof(line), f) != NULL && n < max) {
        unsigned addr, port, state;
        unsigned long inode;
        if (sscanf(line, " %*d: %x:%x %*x:%*x %x %*s %*s %*s %*s %*s %lu", &addr, &port, &state,
                   &inode) != 4 || state != 0x0a)
            continue;
        for (int i = 0; i < ninodes; i++)
            if (inodes[i] == inode) ports[n++] = (int)port;
    }
    fclose(f);
    return n;
}

/* The children of pid (a test may start the job under timeout(1), whose child is the
 * process that listens). */
static int children_of(int pid, int *kids, int max)
{
    DIR *d = opendir("/proc");
    int n = 0;
    if (d == NULL) return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < max;) {
        char path[300], line[512];
        int child = atoi(e->d_name), ppid = 0;
        if (child <= 0) continue;
        snprintf(path, sizeof(path), "/proc/%d/stat", child);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        char *rp = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
        fclose(f);
        if (rp != NULL && sscanf(rp + 1, " %*c %d", &ppid) == 1 && ppid == pid) kids[n++] = child;
    }
    closedir(d);
    return n;
}

/* Listening ports of each pid of the list and of its children; *pids_without counts the
 * listed pids that listen nowhere. */
static int ports_of_pids(const char *list, int *ports, int max, int *pids_without)
{
    char buf[512], *save = NULL;
    int n = 0;
    *pids_without = 0;
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        unsigned long inodes[256];
        int procs[17], nprocs = 1, ni = 0;
        procs[0] = atoi(t);
        nprocs += children_of(procs[0], procs + 1, 16);
        for (int i = 0; i < nprocs; i++) ni += pid_inodes(procs[i], inodes + ni, 256 - ni);
        int got = listening_ports(inodes, ni, ports + n, max - n);
        if (got == 0) (*pids_without)++;
        n += got;
    }
    return n;
}

static int connect_port(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void random_bytes(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)rand();
}

/* Sends this kind's bad bytes. The challenge may come at once or only when the job gets
 * round to the connection, so nothing waits for it. */
static void knock(int fd, int kind)
{
    unsigned char msg[600];
    size_t len = 0;
    if (kind == 0) {
        len = 300;
        random_bytes(msg, len);
    } else if (kind == 1 || kind == 2) {
        random_bytes(msg, 16 + 32); /* nonce_c and a MAC made without the secret */
        uint32_t hello_len = htonl(kind == 1 ? 12 : 0x7fffffffu); /* network order */
        memcpy(msg + 48, &hello_len, 4);
        len = 52;
        if (kind == 1) {
            memcpy(msg + 52, "rank 0 hello", 12);
            len += 12;
        }
    }
    if (len > 0 && send(fd, msg, len, MSG_NOSIGNAL) < 0) {
        /* Already closed by the job: that is a refusal too, seen below as EOF. */
    }
}

static int run_pids(const char *pids, double hold, const char *done)
{
    int ports[MAX_PORTS], fds[MAX_PORTS][KINDS], without, failures = 0;
    size_t got[MAX_PORTS][KINDS];
    int closed[MAX_PORTS][KINDS];
    int nports = ports_of_pids(pids, ports, MAX_PORTS, &without);
    printf("stranger: %d listening ports (%d of the pids listen on none)\n", nports, without);
    for (int p = 0; p < nports; p++) {
        for (int k = 0; k < KINDS; k++) {
            fds[p][k] = connect_port(ports[p]);
            got[p][k] = 0;
            closed[p][k] = fds[p][k] < 0;
            if (fds[p][k] >= 0) knock(fds[p][k], k);
        }
    }
    if (done != NULL) {
        FILE *f = fopen(done, "w");
        if (f != NULL) fclose(f);
    }
    double deadline = now() + hold;
    for (;;) {
        int open_bad = 0;
        for (int p = 0; p < nports; p++) {
            for (int k = 0; k < KINDS; k++) {
                if (closed[p][k]) continue;
                if (k != 3) open_bad++;
                char buf[256];
                ssize_t r = recv(fds[p][k], buf, sizeof(buf), MSG_DONTWAIT);
                if (r > 0) got[p][k] += (size_t)r;
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
                    closed[p][k] = 1;
            }
        }
        if (open_bad == 0 || now() > deadline) break;
        usleep(20000);
    }
    for (int p = 0; p < nports; p++) {
        for (int k = 0; k < KINDS; k++) {
            /* The challenge is at most a few dozen bytes; the server's proof would follow. */
            const char *verdict = "refused";
            if (got[p][k] > 40) verdict = "ANSWERED (the server went past the challenge)";
            else if (!closed[p][k] && k != 3) verdict = "NOT DROPPED";
            else if (!closed[p][k]) verdict = "held open";
            if (strcmp(verdict, "refused") != 0 && strcmp(verdict, "held open") != 0)
                failures++;
            printf("stranger: port %d %-12s: %zu bytes received, %s\n", ports[p], kind_names[k],
                   got[p][k], verdict);
            if (fds[p][k] >= 0) close(fds[p][k]);
        }
    }
    if (nports == 0) return 3;
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *pids = NULL, *done = NULL;
    double hold = 30;
    setvbuf(stdout, NULL, _IOLBF, 0);
    srand((unsigned)getpid());
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--free-port") == 0) {
            struct sockaddr_in a = {.sin_family = AF_INET};
            socklen_t alen = sizeof(a);
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
                getsockname(fd, (struct sockaddr *)&a, &alen) != 0)
                return 1;
            printf("%d\n", ntohs(a.sin_port));
            close(fd);
            return 0;
        } else if (strcmp(argv[i], "--wait-listen") == 0 && i + 1 < argc) {
            int ports[MAX_PORTS], without = 1;
            double deadline = now() + 10;
            while (ports_of_pids(argv[i + 1], ports, MAX_PORTS, &without) >= 0 && without > 0 &&
                   now() < deadline)
                usleep(20000);
            return without > 0 ? 1 : 0;
        } else if (strcmp(argv[i], "--pids") == 0 && i + 1 < argc) {
            pids = argv[++i];
        } else if (strcmp(argv[i], "--hold") == 0 && i + 1 < argc) {
            hold = atof(argv[++i]);
        } else if (strcmp(argv[i], "--done") == 0 && i + 1 < argc) {
            done = argv[++i];
        } else {
            fprintf(stderr, "usage: see the comment at the top of tests/mp/stranger.c\n");
            return 2;
        }
    }
    if (pids == NULL) return 2;
    return run_pids(pids, hold, done);
}
