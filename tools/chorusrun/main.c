/*
 * chorusrun: starts N local ranks of a program and supervises them.
 *
 *   chorusrun -n N [options] [--] prog args...
 *
 * chorusrun makes one unique id with chorus_get_unique_id(), so the rendezvous root lives
 * in this process and no rank has to race for a port, and gives it to every rank as
 * CHORUS_UNIQUE_ID (hex) with CHORUS_RANK, CHORUS_WORLD_SIZE, CHORUS_LOCAL_RANK and
 * CHORUS_LOCAL_SIZE. It prefixes every output line of rank r with "[r] ", stops all ranks
 * when one fails and exits with that rank's status, so a failure is never silent and no
 * rank is left behind.
 */
#include "chorus.h"
#include "hang.h"
#include "relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_RANKS 4096
#define DEFAULT_GRACE_S 3.0
/* After the first rank fails with a timeout, the others get this long to write their own
 * hang report before they are stopped: their deadlines fall due at about the same time. */
#define HANG_WAIT_S 2.0
#define EXIT_USAGE 2
#define EXIT_TIMEOUT 124
#define EXIT_NOT_FOUND 127

typedef struct {
    int nranks;
    int prefix;       /* prefix output lines with "[r] " */
    double timeout_s; /* 0: no timeout */
    double grace_s;   /* between SIGTERM and SIGKILL */
    int hang_signal;  /* --hang-report: SIGUSR1 to every rank at the first timeout */
    int torch_env;    /* --torch-env: also torchrun's variables (RANK, MASTER_PORT, ...) */
    int keep_going;   /* --on-failure continue: a rank's death does not stop the others */
    char **argv;      /* the program and its arguments, NULL-terminated */
} options_t;

typedef struct {
    pid_t pid;
    int running;
    relay_t out, err;
} rank_t;

typedef struct {
    options_t opt;
    rank_t *ranks;
    int nrunning;
    int sigfd;
    int stopping;   /* the ranks were told to stop: failure, timeout or signal */
    double kill_at; /* when SIGKILL follows SIGTERM; 0 when not armed */
    double stop_at; /* when the ranks are stopped after a timeout report; 0: not armed */
    int hang_asked; /* SIGUSR1 was sent for the hang report */
    int exit_code;  /* -1 until something decides it */
} run_t;

static const int handled_signals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT};

/* printf-style checking of say()'s arguments where the compiler offers it (as
 * CHORUS_PRINTF does inside the library, whose headers chorusrun does not include). */
#if defined(__GNUC__)
#define RUN_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define RUN_PRINTF(fmt_idx, arg_idx)
#endif

static void say(const char *fmt, ...) RUN_PRINTF(1, 2);
static void say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof(line) - 2) n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    /* One write, so that the line does not mix with relayed rank output. */
    if (write(STDERR_FILENO, "chorusrun: ", 11) < 0 || write(STDERR_FILENO, line, (size_t)n) < 0)
        return;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: chorusrun -n N [options] [--] prog [args...]\n"
            "Starts N local ranks of prog, each with CHORUS_UNIQUE_ID, CHORUS_RANK,\n"
            "CHORUS_WORLD_SIZE, CHORUS_LOCAL_RANK and CHORUS_LOCAL_SIZE set, so that\n"
            "chorus_comm_init_env() joins them into one communicator.\n"
            "\n"
            "options:\n"
            "  -n, --np N          number of ranks (1..%d)\n"
            "  -q, --no-prefix     do not prefix output lines with \"[rank] \"\n"
            "  -t, --timeout SEC   stop all ranks and exit %d after SEC seconds\n"
            "  -g, --grace SEC     seconds between SIGTERM and SIGKILL (default %.0f)\n"
            "  -x VAR=VALUE        set an environment variable for all ranks (repeatable)\n"
            "      --hang-report   at the first timeout, ask every rank for its state\n"
            "                      (SIGUSR1; sets CHORUS_HANG_REPORT=2 for the ranks)\n"
            "      --torch-env     also set what torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK,\n"
            "                      LOCAL_WORLD_SIZE, and MASTER_ADDR=127.0.0.1 and a free\n"
            "                      MASTER_PORT unless given), for env:// init of\n"
            "                      torch.distributed\n"
            "      --on-failure stop|continue\n"
            "                      what a rank's failure does to the others (default stop;\n"
            "                      continue: for jobs that survive the loss of ranks with\n"
            "                      chorus_comm_shrink, see examples/elastic.c)\n"
            "  -h, --help          this help\n"
            "  -V, --version       print the version of the Chorus library\n"
            "\n"
            "When a rank fails (non-zero exit or a signal), the others get SIGTERM, then\n"
            "SIGKILL after the grace period, and chorusrun exits with the failed rank's\n"
            "status (128 + signal number for a signal). With --on-failure continue the others\n"
            "go on: a rank killed by a signal is reported and forgiven (chorusrun exits 0 when\n"
            "every other rank does), a rank that exits non-zero sets the exit status.\n"
            "SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the ranks; a second one\n"
            "kills them at once. All ranks are local, so CHORUS_SOCKET_IFNAME defaults to\n"
            "lo. When a collective times out, chorusrun prints a hang summary from the\n"
            "ranks' reports (CHORUS_HANG_REPORT) naming the ranks that never arrived (not\n"
            "with -q).\n",
            MAX_RANKS, EXIT_TIMEOUT, DEFAULT_GRACE_S);
}

static int parse_seconds(const char *text, double *seconds_p)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v >= 0.0) || v > 1e9) return -1;
    *seconds_p = v;
    return 0;
}

/* -x VAR=VALUE is applied to chorusrun's own environment, which every rank inherits; so
 * it also reaches the rendezvous root (e.g. -x CHORUS_DEBUG=trace). */
static int apply_env_option(const char *arg)
{
    const char *eq = strchr(arg, '=');
    char name[256];

    if (eq == NULL || eq == arg || (size_t)(eq - arg) >= sizeof(name)) {
        say("-x expects VAR=VALUE, got '%s'", arg);
        return -1;
    }
    memcpy(name, arg, (size_t)(eq - arg));
    name[eq - arg] = '\0';
    if (setenv(name, eq + 1, 1) != 0) {
        say("cannot set %s: %s", name, strerror(errno));
        return -1;
    }
    return 0;
}

static int parse_options(int argc, char **argv, options_t *opt)
{
    static const struct option longs[] = {
        {"np", required_argument, NULL, 'n'},
        {"no-prefix", no_argument, NULL, 'q'},
        {"timeout", required_argument, NULL, 't'},
        {"grace", required_argument, NULL, 'g'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"hang-report", no_argument, NULL, 'H'},
        {"torch-env", no_argument, NULL, 'T'},
        {"on-failure", required_argument, NULL, 'F'},
        {NULL, 0, NULL, 0},
    };
    char *end;
    long n;
    int c;

    opt->nranks = 0;
    opt->prefix = 1;
    opt->timeout_s = 0.0;
    opt->grace_s = DEFAULT_GRACE_S;
    /* "+": stop at the program name, so that its own options are left alone. */
    while ((c = getopt_long(argc, argv, "+n:qt:g:x:hV", longs, NULL)) != -1) {
        switch (c) {
        case 'n':
            errno = 0;
            n = strtol(optarg, &end, 10);
            if (errno != 0 || end == optarg || *end != '\0' || n < 1 || n > MAX_RANKS) {
                say("-n expects a number of ranks in 1..%d, got '%s'", MAX_RANKS, optarg);
                return -1;
            }
            opt->nranks = (int)n;
            break;
        case 'q': opt->prefix = 0; break;
        case 'T': opt->torch_env = 1; break;
        case 'F':
            if (strcmp(optarg, "stop") != 0 && strcmp(optarg, "continue") != 0) {
                say("--on-failure expects stop or continue, got '%s'", optarg);
                return -1;
            }
            opt->keep_going = strcmp(optarg, "continue") == 0;
            break;
        case 'H':
            opt->hang_signal = 1;
            if (setenv("CHORUS_HANG_REPORT", "2", 1) != 0) return -1;
            break;
        case 't':
            if (parse_seconds(optarg, &opt->timeout_s) != 0) {
                say("--timeout expects seconds, got '%s'", optarg);
                return -1;
            }
            break;
        case 'g':
            if (parse_seconds(optarg, &opt->grace_s) != 0) {
                say("--grace expects seconds, got '%s'", optarg);
                return -1;
            }
            break;
        case 'x':
            if (apply_env_option(optarg) != 0) return -1;
            break;
        case 'h': usage(stdout); exit(0);
        case 'V': printf("chorusrun (Chorus %d)\n", chorus_version()); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (opt->nranks == 0 || optind >= argc) {
        if (opt->nranks == 0) say("missing -n N");
        if (optind >= argc) say("missing the program to run");
        usage(stderr);
        return -1;
    }
    opt->argv = argv + optind;
    return 0;
}

/* Resolves prog through PATH before any fork, so that a typo is one clear message and the
 * children only have to call execve. */
static char *find_program(const char *prog)
{
    const char *path = getenv("PATH");
    struct stat st;

    if (strchr(prog, '/') != NULL) return strdup(prog);
    if (path == NULL || *path == '\0') path = "/usr/local/bin:/usr/bin:/bin";
    while (*path != '\0') {
        size_t dir_len = strcspn(path, ":");
        size_t len = dir_len + strlen(prog) + 2;
        char *candidate = malloc(len);

        if (candidate == NULL) return NULL;
        if (dir_len == 0)
            snprintf(candidate, len, "%s", prog);
        else
            snprintf(candidate, len, "%.*s/%s", (int)dir_len, path, prog);
        if (stat(candidate, &st) == 0 && S_ISREG(st.st_mode) && access(candidate, X_OK) == 0)
            return candidate;
        free(candidate);
        path += dir_len;
        if (*path == ':') path++;
    }
    return NULL;
}

static int is_rank_variable(const char *entry, int torch_env)
{
    static const char *const names[] = {"CHORUS_UNIQUE_ID=", "CHORUS_RANK=", "CHORUS_WORLD_SIZE=",
                                        "CHORUS_LOCAL_RANK=", "CHORUS_LOCAL_SIZE=", "RANK=",
                                        "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE="};
    size_t n = sizeof(names) / sizeof(names[0]) - (torch_env ? 0 : 4);

    for (size_t i = 0; i < n; i++)
        if (strncmp(entry, names[i], strlen(names[i])) == 0) return 1;
    return 0;
}

/* --torch-env: MASTER_ADDR and a free MASTER_PORT on loopback in chorusrun's own
 * environment (inherited by every rank), unless the caller set them. */
static int set_torch_master(void)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    char port[16];
    int fd;

    if (getenv("MASTER_ADDR") == NULL && setenv("MASTER_ADDR", "127.0.0.1", 1) != 0) return -1;
    if (getenv("MASTER_PORT") != NULL) return 0;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        say("--torch-env: cannot find a free port: %s", strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    snprintf(port, sizeof(port), "%u", (unsigned)ntohs(a.sin_port));
    return setenv("MASTER_PORT", port, 1);
}

static char *format_entry(const char *name, long value)
{
    char text[64];

    snprintf(text, sizeof(text), "%s=%ld", name, value);
    return strdup(text);
}

/* The most entries build_env() allocates itself, at the start of the array: Chorus's four,
 * and torchrun's four with --torch-env. */
#define ENV_OWNED 8

/* Frees an environment made by build_env(): its own entries and the array, not the
 * entries borrowed from environ or the id entry. */
static void free_env(char **env, size_t owned)
{
    if (env == NULL) return;
    for (size_t i = 0; i < owned; i++)
        free(env[i]);
    free(env);
}

/* The environment of one rank: this rank's variables first, then chorusrun's own less any
 * inherited rank variables. Built before the fork and freed by the caller after it (the
 * child has exec'd with its copy by then). */
static char **build_env(int rank, int nranks, const char *id_entry, int torch_env)
{
    size_t count = 0, owned = torch_env ? 8 : 4, n = owned;
    char **env;

    while (environ[count] != NULL)
        count++;
    env = calloc(count + ENV_OWNED + 2, sizeof(*env));
    if (env == NULL) return NULL;
    env[0] = format_entry("CHORUS_RANK", rank);
    env[1] = format_entry("CHORUS_WORLD_SIZE", nranks);
    env[2] = format_entry("CHORUS_LOCAL_RANK", rank);
    env[3] = format_entry("CHORUS_LOCAL_SIZE", nranks);
    if (torch_env) {
        env[4] = format_entry("RANK", rank);
        env[5] = format_entry("WORLD_SIZE", nranks);
        env[6] = format_entry("LOCAL_RANK", rank);
        env[7] = format_entry("LOCAL_WORLD_SIZE", nranks);
    }
    for (size_t i = 0; i < owned; i++) {
        if (env[i] == NULL) {
            free_env(env, owned); /* calloc left the entries not yet made NULL */
            return NULL;
        }
    }
    env[n++] = (char *)id_entry;
    for (size_t i = 0; i < count; i++)
        if (!is_rank_variable(environ[i], torch_env)) env[n++] = environ[i];
    env[n] = NULL;
    return env;
}

/* Between fork and exec only async-signal-safe calls (the library has a thread running). */
static void child_exec(const char *path, char **argv, char **envp, int stdin_fd, int out_fd,
                       int err_fd, pid_t parent, const sigset_t *mask)
{
    static const char msg[] = "chorusrun: cannot execute ";
    struct sigaction dfl;
    const char *why;

    setpgid(0, 0);
    /* Dies with chorusrun even if chorusrun is killed with SIGKILL. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    if (stdin_fd != STDIN_FILENO && dup2(stdin_fd, STDIN_FILENO) < 0) _exit(1);
    if (out_fd >= 0 && dup2(out_fd, STDOUT_FILENO) < 0) _exit(1);
    if (err_fd >= 0 && dup2(err_fd, STDERR_FILENO) < 0) _exit(1);
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
#endif
    {
        long max_fd = sysconf(_SC_OPEN_MAX);
        if (max_fd < 0 || max_fd > 65536) max_fd = 65536;
        for (int fd = 3; fd < max_fd; fd++)
            close(fd);
    }
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, NULL);
    sigprocmask(SIG_SETMASK, mask, NULL);
    execve(path, argv, envp);
    /* strerror() is not async-signal-safe; the usual reasons are spelled out here. */
    why = errno == EACCES    ? ": permission denied\n"
          : errno == ENOENT  ? ": no such file or directory\n"
          : errno == ENOEXEC ? ": not an executable format\n"
                             : ": execve failed\n";
    if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0 ||
        write(STDERR_FILENO, path, strlen(path)) < 0 || write(STDERR_FILENO, why, strlen(why)) < 0)
        _exit(EXIT_NOT_FOUND);
    _exit(EXIT_NOT_FOUND);
}

static void signal_ranks(run_t *run, int sig)
{
    for (int r = 0; r < run->opt.nranks; r++)
        if (run->ranks[r].running) kill(-run->ranks[r].pid, sig);
}

/* Asks every running rank to stop with sig, and arms SIGKILL after the grace period. */
static void stop_ranks(run_t *run, int sig)
{
    run->stopping = 1;
    signal_ranks(run, sig);
    run->kill_at = now_s() + run->opt.grace_s;
}

static int spawn_rank(run_t *run, int r, const char *path, char **envp, int stdin_fd,
                      const sigset_t *mask)
{
    rank_t *rank = &run->ranks[r];
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    char prefix[24];
    pid_t self = getpid();
    pid_t pid;

    if (run->opt.prefix && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)) {
        say("cannot create pipes for rank %d: %s", r, strerror(errno));
        goto err_close;
    }
    pid = fork();
    if (pid < 0) {
        say("cannot start rank %d: fork: %s", r, strerror(errno));
        goto err_close;
    }
    if (pid == 0) child_exec(path, run->opt.argv, envp, stdin_fd, out[1], err[1], self, mask);
    /* Both sides set the group, so that a signal sent right now reaches the whole rank. */
    setpgid(pid, pid);
    rank->pid = pid;
    rank->running = 1;
    run->nrunning++;
    if (run->opt.prefix) {
        close(out[1]);
        close(err[1]);
        snprintf(prefix, sizeof(prefix), "[%d] ", r);
        if (relay_init(&rank->out, out[0], STDOUT_FILENO, prefix) != 0 ||
            relay_init(&rank->err, err[0], STDERR_FILENO, prefix) != 0) {
            rank->out.rank = rank->err.rank = -1;
            say("cannot relay the output of rank %d: %s", r, strerror(errno));
            /* A relay that was set up owns its pipe; finish() closes it. */
            if (rank->out.buf == NULL) close(out[0]);
            if (rank->err.buf == NULL) close(err[0]);
            return -1;
        }
        rank->out.rank = rank->err.rank = r;
    }
    return 0;

err_close:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0) close(out[i]);
        if (err[i] >= 0) close(err[i]);
    }
    return -1;
}

static int status_exit_code(int wstatus)
{
    if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
    return WEXITSTATUS(wstatus);
}

static void drain_rank(rank_t *rank)
{
    if (rank->out.buf != NULL) relay_drain(&rank->out);
    if (rank->err.buf != NULL) relay_drain(&rank->err);
}

/* Collects every rank that ended. The first failure decides the exit status and stops
 * the others; what happens after that (ranks dying of our SIGTERM) is not reported. */
static void reap(run_t *run)
{
    int wstatus;
    pid_t pid;

    while ((pid = waitpid(-1, &wstatus, WNOHANG)) > 0) {
        int r;
        for (r = 0; r < run->opt.nranks; r++)
            if (run->ranks[r].running && run->ranks[r].pid == pid) break;
        if (r == run->opt.nranks) continue;
        run->ranks[r].running = 0;
        run->nrunning--;
        /* The rank's last words come before chorusrun's line about it. */
        drain_rank(&run->ranks[r]);
        if (run->stopping || (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) continue;
        if (WIFSIGNALED(wstatus))
            say("rank %d killed by signal %d (%s)%s", r, WTERMSIG(wstatus),
                strsignal(WTERMSIG(wstatus)),
                run->opt.keep_going ? "; the others go on (--on-failure continue)" : "");
        else
            say("rank %d exited with status %d", r, WEXITSTATUS(wstatus));
        /* A lost rank is what an elastic job survives; one that gives up is a failure. */
        if (run->opt.keep_going) {
            if (!WIFSIGNALED(wstatus) && run->exit_code < 0)
                run->exit_code = status_exit_code(wstatus);
            continue;
        }
        run->exit_code = status_exit_code(wstatus);
        /* A timeout: the others' reports are on their way (hang.h). */
        if (hang_seen_timeout()) {
            if (run->stop_at == 0.0) run->stop_at = now_s() + HANG_WAIT_S;
        } else {
            stop_ranks(run, SIGTERM);
        }
    }
}

static void handle_signals(run_t *run)
{
    struct signalfd_siginfo info;

    while (read(run->sigfd, &info, sizeof(info)) == (ssize_t)sizeof(info)) {
        int sig = (int)info.ssi_signo;
        if (sig == SIGCHLD) {
            reap(run);
        } else if (!run->stopping) {
            say("got signal %d (%s); passing it to the ranks", sig, strsignal(sig));
            if (run->exit_code < 0) run->exit_code = 128 + sig;
            stop_ranks(run, sig);
        } else {
            say("got signal %d (%s) again; killing the ranks", sig, strsignal(sig));
            signal_ranks(run, SIGKILL);
        }
    }
    /* SIGCHLDs merge; a reap on every wake-up costs little and misses nothing. */
    reap(run);
}

static void check_deadlines(run_t *run, double start)
{
    double now = now_s();

    if (run->opt.timeout_s > 0.0 && !run->stopping && now >= start + run->opt.timeout_s) {
        char list[256];
        size_t len = 0;
        list[0] = '\0';
        for (int r = 0; r < run->opt.nranks && len < sizeof(list) - 16; r++)
            if (run->ranks[r].running)
                len += (size_t)snprintf(list + len, sizeof(list) - len, " %d", r);
        say("timeout: %g seconds passed; stopping the ranks still running:%s", run->opt.timeout_s,
            list);
        run->exit_code = EXIT_TIMEOUT;
        stop_ranks(run, SIGTERM);
    }
    if (hang_seen_timeout() && run->opt.hang_signal && !run->hang_asked) {
        run->hang_asked = 1;
        signal_ranks(run, SIGUSR1);
    }
    if (run->stop_at > 0.0 && !run->stopping && (now >= run->stop_at || run->nrunning == 0))
        stop_ranks(run, SIGTERM);
    if (run->kill_at > 0.0 && now >= run->kill_at) {
        signal_ranks(run, SIGKILL);
        run->kill_at = 0.0;
    }
}

static int poll_timeout_ms(const run_t *run, double start)
{
    double next = -1.0, now = now_s();

    if (run->opt.timeout_s > 0.0 && !run->stopping) next = start + run->opt.timeout_s;
    if (run->kill_at > 0.0 && (next < 0.0 || run->kill_at < next)) next = run->kill_at;
    if (run->stop_at > 0.0 && !run->stopping && (next < 0.0 || run->stop_at < next))
        next = run->stop_at;
    if (next < 0.0) return -1;
    if (next <= now) return 0;
    return (int)((next - now) * 1000.0) + 1;
}

static void supervise(run_t *run, struct pollfd *pfds, relay_t **polled)
{
    double start = now_s();

    while (run->nrunning > 0) {
        int nfds = 1;
        pfds[0].fd = run->sigfd;
        pfds[0].events = POLLIN;
        for (int r = 0; r < run->opt.nranks; r++) {
            relay_t *relays[2] = {&run->ranks[r].out, &run->ranks[r].err};
            for (int i = 0; i < 2; i++) {
                if (relays[i]->buf == NULL || relays[i]->fd < 0) continue;
                pfds[nfds].fd = relays[i]->fd;
                pfds[nfds].events = POLLIN;
                polled[nfds] = relays[i];
                nfds++;
            }
        }
        int n = poll(pfds, (nfds_t)nfds, poll_timeout_ms(run, start));
        if (n < 0 && errno != EINTR) {
            say("poll: %s; stopping the ranks", strerror(errno));
            if (run->exit_code < 0) run->exit_code = 1;
            signal_ranks(run, SIGKILL);
            return;
        }
        for (int i = 1; n > 0 && i < nfds; i++)
            if (pfds[i].revents != 0) relay_read(polled[i]);
        if (n > 0 && (pfds[0].revents & POLLIN)) handle_signals(run);
        check_deadlines(run, start);
    }
}

/* Everyone has been reaped: whatever a rank left behind in its process group goes too,
 * then the pipes are emptied. */
static void finish(run_t *run)
{
    for (int r = 0; r < run->opt.nranks; r++) {
        rank_t *rank = &run->ranks[r];
        if (rank->pid > 0) kill(-rank->pid, SIGKILL);
        if (rank->out.buf == NULL) continue;
        drain_rank(rank);
        relay_fini(&rank->out);
        relay_fini(&rank->err);
    }
}

/* Blocks the signals chorusrun handles before the library starts its rendezvous thread,
 * so that the thread inherits the mask and the signals arrive only on the signalfd. */
static int setup_signals(sigset_t *old_mask)
{
    struct sigaction ign;
    sigset_t set;
    int fd;

    sigemptyset(&set);
    for (size_t i = 0; i < sizeof(handled_signals) / sizeof(handled_signals[0]); i++)
        sigaddset(&set, handled_signals[i]);
    if (sigprocmask(SIG_BLOCK, &set, old_mask) != 0) return -1;
    fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0) return -1;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, NULL);
    return fd;
}

static char *make_id_entry(void)
{
    static const char hex[] = "0123456789abcdef";
    static const char name[] = "CHORUS_UNIQUE_ID=";
    chorus_unique_id_t id;
    chorus_status_t status;
    char *entry;
    size_t len = sizeof(name) - 1;

    /* All ranks are local: the root and the ranks meet on loopback unless told otherwise. */
    if (getenv("CHORUS_SOCKET_IFNAME") == NULL || *getenv("CHORUS_SOCKET_IFNAME") == '\0')
        setenv("CHORUS_SOCKET_IFNAME", "lo", 1);
    status = chorus_get_unique_id(&id);
    if (status != CHORUS_SUCCESS) {
        say("cannot create the unique id: %s: %s", chorus_status_string(status),
            chorus_last_error());
        return NULL;
    }
    entry = malloc(len + 2 * CHORUS_UNIQUE_ID_BYTES + 1);
    if (entry == NULL) {
        say("out of memory");
        return NULL;
    }
    memcpy(entry, name, len);
    for (size_t i = 0; i < CHORUS_UNIQUE_ID_BYTES; i++) {
        unsigned char byte = (unsigned char)id.internal[i];
        entry[len++] = hex[byte >> 4];
        entry[len++] = hex[byte & 15];
    }
    entry[len] = '\0';
    return entry;
}

static int start_ranks(run_t *run, const char *path, const char *id_entry, const sigset_t *mask)
{
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

    if (devnull < 0) {
        say("cannot open /dev/null: %s", strerror(errno));
        return -1;
    }
    for (int r = 0; r < run->opt.nranks; r++) {
        char **envp = build_env(r, run->opt.nranks, id_entry, run->opt.torch_env);
        /* Rank 0 may read a redirected stdin; a terminal stays with chorusrun, since the
         * ranks run in their own process groups and would stop on reading it. */
        int stdin_fd = (r == 0 && !isatty(STDIN_FILENO)) ? STDIN_FILENO : devnull;
        if (envp == NULL) {
            say("out of memory");
            close(devnull);
            return -1;
        }
        int rc = spawn_rank(run, r, path, envp, stdin_fd, mask);
        /* The child has its own copy of the environment (or has exec'd with it). */
        free_env(envp, run->opt.torch_env ? 8 : 4);
        if (rc != 0) {
            close(devnull);
            return -1;
        }
    }
    close(devnull);
    return 0;
}

int main(int argc, char **argv)
{
    run_t run;
    struct pollfd *pfds = NULL;
    relay_t **polled = NULL;
    sigset_t old_mask;
    char *path, *id_entry = NULL;

    memset(&run, 0, sizeof(run));
    run.exit_code = -1;
    if (parse_options(argc, argv, &run.opt) != 0) return EXIT_USAGE;
    if (run.opt.torch_env && set_torch_master() != 0) return 1;
    if (hang_init(run.opt.nranks) != 0) {
        say("out of memory");
        return 1;
    }
    path = find_program(run.opt.argv[0]);
    if (path == NULL) {
        say("%s: command not found", run.opt.argv[0]);
        return EXIT_NOT_FOUND;
    }
    run.sigfd = setup_signals(&old_mask);
    if (run.sigfd < 0) {
        say("cannot set up signal handling: %s", strerror(errno));
        run.exit_code = 1;
        goto out_path;
    }
    id_entry = make_id_entry();
    run.ranks = calloc((size_t)run.opt.nranks, sizeof(*run.ranks));
    pfds = calloc(2 * (size_t)run.opt.nranks + 1, sizeof(*pfds));
    polled = calloc(2 * (size_t)run.opt.nranks + 1, sizeof(*polled));
    if (id_entry == NULL || run.ranks == NULL || pfds == NULL || polled == NULL) {
        if (id_entry != NULL) say("out of memory");
        run.exit_code = 1;
        goto out_free;
    }
    if (start_ranks(&run, path, id_entry, &old_mask) != 0) {
        run.exit_code = 1;
        stop_ranks(&run, SIGKILL);
    }
    supervise(&run, pfds, polled);
    finish(&run);
    hang_summary();

out_free:
    free(polled);
    free(pfds);
    free(run.ranks);
    free(id_entry);
    close(run.sigfd);
out_path:
    free(path);
    return run.exit_code < 0 ? 0 : run.exit_code;
}
