/* The one table of CHORUS_* variables, read from the environment once. */
#include "util/config.h"

#include "util/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const chorus_config_entry_t config_table[] = {
    /* Logging. */
    {"CHORUS_DEBUG", CHORUS_CFG_STRING, "none", "log level: none, warn, info or trace"},
    {"CHORUS_DEBUG_FILE", CHORUS_CFG_STRING, NULL,
     "log to this file instead of stderr (%h: host name, %p: pid)"},
    /* Rendezvous and launch. */
    {"CHORUS_UNIQUE_ID", CHORUS_CFG_STRING, NULL,
     "hex unique id given by chorusrun; overrides CHORUS_ROOT and the secret"},
    {"CHORUS_ROOT", CHORUS_CFG_STRING, NULL,
     "host:port of the rendezvous root for chorus_comm_init_env (else MASTER_ADDR:MASTER_PORT)"},
    {"CHORUS_SECRET", CHORUS_CFG_STRING, NULL,
     "job secret, 32 hex digits, for chorus_comm_init_env (never logged)"},
    {"CHORUS_SECRET_FILE", CHORUS_CFG_STRING, NULL,
     "0600 file holding the job secret (default ~/.chorus/secret, created when missing)"},
    {"CHORUS_LAUNCHER", CHORUS_CFG_STRING, "auto",
     "whose variables chorus_comm_init_env reads: auto (the first found of chorus, torchrun, "
     "pmix, mpi, slurm, pmi) or one of them"},
    {"CHORUS_RANK", CHORUS_CFG_INT, NULL,
     "rank of this process (else RANK, PMIx, OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMI_RANK)"},
    {"CHORUS_WORLD_SIZE", CHORUS_CFG_INT, NULL, "number of ranks (else WORLD_SIZE, ...)"},
    {"CHORUS_LOCAL_RANK", CHORUS_CFG_INT, NULL, "rank among the ranks of this host (chorusrun)"},
    {"CHORUS_LOCAL_SIZE", CHORUS_CFG_INT, NULL, "number of ranks on this host (chorusrun)"},
    {"CHORUS_HOSTID", CHORUS_CFG_STRING, NULL,
     "host identity (default: hostname and boot id); ranks with equal ids use shm"},
    {"CHORUS_SOCKET_IFNAME", CHORUS_CFG_STRING, NULL,
     "network interface to listen on (default: the one routing to the root)"},
    {"CHORUS_TIMEOUT", CHORUS_CFG_SECONDS, "300",
     "seconds any blocking wait may last before CHORUS_ERR_TIMEOUT (0: no deadline)"},
    /* Algorithms and transports. */
    {"CHORUS_ALGO", CHORUS_CFG_STRING, "auto", "force an algorithm: auto, ring, tree or rd"},
    {"CHORUS_REPRODUCIBLE", CHORUS_CFG_INT, "0",
     "floating-point reductions: 0 fastest order, 1 one fixed order (rank order), 2 SUM and "
     "AVG exactly rounded (chorus_comm_set_reproducible)"},
    {"CHORUS_TRANSPORT", CHORUS_CFG_STRING, "auto",
     "force a transport for all peers: auto (shm same host, tcp otherwise), shm or tcp"},
    {"CHORUS_CHUNK_SIZE", CHORUS_CFG_SIZE, "512K", "pipeline chunk size of the algorithms"},
    {"CHORUS_CHECK_CALLS", CHORUS_CFG_INT, "1",
     "1: schedules exchange call signatures, so that different calls on two ranks are "
     "reported as a mismatch; 0: not (to measure what the check costs)"},
    {"CHORUS_SHM_RING_SIZE", CHORUS_CFG_SIZE, "4M", "bytes of each shared-memory inbound ring"},
    {"CHORUS_TCP_BUF", CHORUS_CFG_SIZE, "4M", "TCP socket send and receive buffer size"},
    /* Waiting. */
    {"CHORUS_SPIN_US", CHORUS_CFG_SECONDS, "20",
     "microseconds a wait spins before it starts yielding the core"},
    {"CHORUS_YIELD_US", CHORUS_CFG_SECONDS, "2000",
     "microseconds a wait yields before it sleeps in the transport"},
    /* Cost model (lib/tune). */
    {"CHORUS_TUNE", CHORUS_CFG_INT, "1",
     "1: choose algorithms with the cost model; 0: by size thresholds"},
    {"CHORUS_TUNE_FILE", CHORUS_CFG_STRING, NULL,
     "calibration file (default $XDG_CACHE_HOME/chorus/tune-<host>.conf, else ~/.cache/...)"},
    {"CHORUS_TUNE_MEASURE", CHORUS_CFG_INT, "1",
     "1: without a calibration file, measure copy and reduce rates at init (about 1 ms)"},
    /* Single-host shared arena (lib/arena). */
    {"CHORUS_ARENA", CHORUS_CFG_INT, "1", "1: single-host comms get a shared arena; 0: none"},
    {"CHORUS_ARENA_CHUNK", CHORUS_CFG_SIZE, "512K", "pipeline chunk of the arena's staged path"},
    {"CHORUS_ARENA_FLAT_MAX", CHORUS_CFG_SIZE, "16K",
     "largest message (bytes, all parts of one rank) on the arena's flat path"},
    {"CHORUS_ARENA_CMA", CHORUS_CFG_INT, "0",
     "1: allgather, broadcast and alltoall read peers' buffers directly (process_vm_readv)"},
    {"CHORUS_WIN_ONESHOT_MAX", CHORUS_CFG_SIZE, "256K",
     "allreduce on registered memory: one-shot (every rank reduces every vector) up to this "
     "size (times 4/n above 4 ranks) and on 2 ranks, two-shot above"},
    {"CHORUS_ARENA_CMA_MIN", CHORUS_CFG_SIZE, "256K",
     "bytes per peer from which the arena reads peers' buffers directly"},
    {"CHORUS_TRACE", CHORUS_CFG_STRING, NULL,
     "write a timeline of every call and step (Chrome trace / Perfetto JSON) to this file"},
    {"CHORUS_TRACE_MAX", CHORUS_CFG_INT, "1000000",
     "events a rank keeps for CHORUS_TRACE (about 40 bytes each); later ones are dropped"},
    {"CHORUS_HANG_REPORT", CHORUS_CFG_INT, "1",
     "hang report lines: 0 none, 1 when a call times out, 2 also on SIGUSR1"},
    {"CHORUS_FR_DIR", CHORUS_CFG_STRING, NULL,
     "directory for flight records (chorus-fr.<comm>.<rank>.json): written when a call "
     "fails, on abort, on a fatal signal, on SIGUSR1 and on request"},
    {"CHORUS_FR_ENTRIES", CHORUS_CFG_INT, "256",
     "operations each communicator's flight recorder keeps (0: off)"},
    {"CHORUS_TCP_KEEPALIVE", CHORUS_CFG_SECONDS, "10",
     "seconds of silence (keep-alive, unacknowledged data) before a tcp peer is dead; 0 off"},
    {"CHORUS_CUDA_PLUGIN", CHORUS_CFG_STRING, NULL,
     "path of the CUDA plugin (default: libchorus-cuda.so beside libchorus); none: no GPU"},
    {"CHORUS_GPU_PATH", CHORUS_CFG_STRING, "auto",
     "device buffers: auto, ipc (collectives, one host), staging (via host memory), direct "
     "(send/recv, GPUDirect transports only; collectives as auto)"},
    {"CHORUS_GPU_STAGING_CHUNK", CHORUS_CFG_SIZE, "4M",
     "pipeline chunk of device collectives staged through pinned host memory"},
    {"CHORUS_GPU_IPC_CHUNK", CHORUS_CFG_SIZE, "8M",
     "bytes of each rank's device staging slot for CUDA IPC collectives"},
    {"CHORUS_TOPO_FILE", CHORUS_CFG_STRING, NULL,
     "JSON topology (docs/topology.schema.json) used instead of hwloc discovery"},
    {"CHORUS_IB_HCA", CHORUS_CFG_STRING, NULL,
     "ib device[:port] list: mlx5_0:1,mlx5_1 (prefixes), =exact, ^exclude (default: first active)"},
    {"CHORUS_IB_GID_INDEX", CHORUS_CFG_INT, NULL,
     "RoCE GID index to use (default: routable IPv4-mapped RoCE v2 GID, else IPv6 global)"},
    {"CHORUS_UCX_RMA_MIN", CHORUS_CFG_SIZE, "0",
     "ucx: messages of at least this many bytes go by receiver-driven RMA put (0: never)"},
    /* 1M, unmeasured (no NIC here): ib registers a user buffer per message (no memory hooks),
     * which costs about what copying it twice does below that size; see ib_tp.c. */
    {"CHORUS_IB_ZCOPY_MIN", CHORUS_CFG_SIZE, "1M",
     "ib: host messages of at least this many bytes go zero-copy by rendezvous (0: never)"},
    /* Fault injection for tests/fault (a rank that dies at an instant no timer can hit). */
    {"CHORUS_TEST_DIE_AFTER_FORM", CHORUS_CFG_INT, "-1",
     "tests only: rank R of a shrinking comm exits the moment its first new comm formed"},
};

#define CONFIG_COUNT (sizeof(config_table) / sizeof(config_table[0]))

static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static char *config_values[CONFIG_COUNT]; /* copies of the environment at load time */
static int config_loaded;

static void load_locked(void)
{
    for (size_t i = 0; i < CONFIG_COUNT; i++) {
        free(config_values[i]);
        config_values[i] = NULL;
        const char *v = getenv(config_table[i].name);
        if (v != NULL && v[0] != '\0') config_values[i] = strdup(v);
    }
    config_loaded = 1;
}

static int find(const char *name)
{
    for (size_t i = 0; i < CONFIG_COUNT; i++) {
        if (strcmp(config_table[i].name, name) == 0) return (int)i;
    }
    return -1;
}

const char *chorus__config_str(const char *name)
{
    int i = find(name);
    if (i < 0) return NULL;
    pthread_mutex_lock(&config_lock);
    if (!config_loaded) load_locked();
    const char *v = config_values[i] != NULL ? config_values[i] : config_table[i].default_value;
    pthread_mutex_unlock(&config_lock);
    return v;
}

int chorus__config_is_set(const char *name)
{
    int i = find(name);
    if (i < 0) return 0;
    pthread_mutex_lock(&config_lock);
    if (!config_loaded) load_locked();
    int set = config_values[i] != NULL;
    pthread_mutex_unlock(&config_lock);
    return set;
}

void chorus__config_reload(void)
{
    pthread_mutex_lock(&config_lock);
    load_locked();
    pthread_mutex_unlock(&config_lock);
}

int chorus__parse_size(const char *text, uint64_t *bytes_p)
{
    char *end;
    errno = 0;
    /* strtoull skips blanks and takes a sign, and wraps " -5" to 2^64 - 5: a size starts
     * with a digit or is not one. */
    if (text == NULL || text[0] < '0' || text[0] > '9') return -1;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text) return -1;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: return -1;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0') return -1;
    if (shift != 0 && v > (UINT64_MAX >> shift)) return -1;
    *bytes_p = (uint64_t)v << shift;
    return 0;
}

/* Logged once per variable and load, so a bad value does not flood the log. */
static void warn_bad(const char *name, const char *value)
{
    CHORUS_WARN("config", "ignoring %s=\"%s\": not a valid value", name, value);
}

int64_t chorus__config_int(const char *name, int64_t fallback)
{
    const char *v = chorus__config_str(name);
    if (v == NULL) return fallback;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0') {
        warn_bad(name, v);
        return fallback;
    }
    return x;
}

uint64_t chorus__config_size(const char *name, uint64_t fallback)
{
    const char *v = chorus__config_str(name);
    uint64_t bytes;
    if (v == NULL) return fallback;
    if (chorus__parse_size(v, &bytes) != 0) {
        warn_bad(name, v);
        return fallback;
    }
    return bytes;
}

double chorus__config_seconds(const char *name, double fallback)
{
    const char *v = chorus__config_str(name);
    if (v == NULL) return fallback;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || x < 0) {
        warn_bad(name, v);
        return fallback;
    }
    return x;
}

const chorus_config_entry_t *chorus__config_table(size_t *count_p)
{
    *count_p = CONFIG_COUNT;
    return config_table;
}

void chorus__config_print(FILE *out)
{
    static const char *type_names[] = {"string", "int", "size", "seconds"};
    for (size_t i = 0; i < CONFIG_COUNT; i++) {
        const chorus_config_entry_t *e = &config_table[i];
        const char *v = chorus__config_str(e->name);
        int secret = strcmp(e->name, "CHORUS_SECRET") == 0 || strcmp(e->name, "CHORUS_UNIQUE_ID") == 0;
        fprintf(out, "%-22s %-8s = %-12s (default %s)\n    %s\n", e->name, type_names[e->type],
                v == NULL ? "<unset>" : (secret ? "<hidden>" : v),
                e->default_value ? e->default_value : "unset", e->help);
    }
}
