/*
 * The launcher environment: rank and size from the first launcher whose variables are
 * set, the root address from CHORUS_ROOT or torchrun's MASTER_ADDR/MASTER_PORT, and the
 * secret from CHORUS_SECRET or a private file. Every rank derives the same id from these,
 * so nobody has to send it around.
 */
#include "bootstrap/bs_internal.h"
#include "bootstrap/launch.h"

#include "util/auth.h"
#include "util/config.h"
#include "util/log.h"
#include "util/sock.h"
#include "util/status.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET_HEX (2 * CHORUS_SECRET_BYTES)

/* A variable's value, CHORUS_* through the config table, the launchers' own directly. */
static const char *env_get(const char *name)
{
    const char *v = strncmp(name, "CHORUS_", 7) == 0 ? chorus__config_str(name) : getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

static int env_parse_int(const char *text, long *v_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || v < 0 || v > INT_MAX) return -1;
    *v_p = v;
    return 0;
}

/* The launchers, in the order chorus_comm_init_env looks for them (chorus.h). */
typedef enum {
    LAUNCH_CHORUS,   /* CHORUS_RANK: chorusrun, or set by hand */
    LAUNCH_TORCHRUN, /* RANK: torchrun and anything that copies it */
    LAUNCH_PMIX,     /* a PMIx server: mpirun, prterun, srun --mpi=pmix */
    LAUNCH_MPI,      /* OMPI_COMM_WORLD_RANK: Open MPI's mpirun, in a build without PMIx */
    LAUNCH_SLURM,    /* SLURM_PROCID: srun */
    LAUNCH_PMI,      /* PMI_RANK: MPICH's hydra and other PMI-1 launchers */
    LAUNCH_COUNT
} launch_kind_t;

/* Rank, size and local rank variables of each launcher but PMIx (size_alt: a variable
 * read when size is unset, local: NULL when it has none). */
static const struct {
    const char *name, *rank, *size, *size_alt, *local;
} launchers[LAUNCH_COUNT] = {
    [LAUNCH_CHORUS] = {"chorus", "CHORUS_RANK", "CHORUS_WORLD_SIZE", NULL, "CHORUS_LOCAL_RANK"},
    [LAUNCH_TORCHRUN] = {"torchrun", "RANK", "WORLD_SIZE", NULL, "LOCAL_RANK"},
    [LAUNCH_PMIX] = {"pmix", NULL, NULL, NULL, NULL},
    [LAUNCH_MPI] = {"mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", NULL,
                    "OMPI_COMM_WORLD_LOCAL_RANK"},
    /* A step may have fewer tasks than its job: SLURM_STEP_NUM_TASKS first. */
    [LAUNCH_SLURM] = {"slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",
                      "SLURM_LOCALID"},
    [LAUNCH_PMI] = {"pmi", "PMI_RANK", "PMI_SIZE", NULL, "MPI_LOCALRANKID"},
};

typedef struct {
    launch_kind_t kind;
    int rank, nranks, local_rank, nnodes;
} launch_t;

/* What the last successful chorus__bootstrap_id_from_env of this thread used. */
static _Thread_local char env_source_text[640];

/* CHORUS_LAUNCHER: auto (LAUNCH_COUNT), or the one launcher to read. */
static chorus_status_t env_forced(launch_kind_t *kind_p)
{
    const char *v = env_get("CHORUS_LAUNCHER");
    int k;

    *kind_p = LAUNCH_COUNT;
    if (v == NULL || strcmp(v, "auto") == 0) return CHORUS_SUCCESS;
    for (k = 0; k < LAUNCH_COUNT; k++) {
        if (strcmp(v, launchers[k].name) == 0) {
            *kind_p = (launch_kind_t)k;
            return CHORUS_SUCCESS;
        }
    }
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                         "bootstrap: CHORUS_LAUNCHER=%s is not one of auto, chorus, torchrun, "
                         "pmix, mpi, slurm, pmi",
                         v);
}

/* Rank and size from launcher k's variables; 1 in *found_p when it set any. */
static chorus_status_t env_vars_rank_size(launch_kind_t k, launch_t *l, int *found_p)
{
    const char *rank_name = launchers[k].rank, *size_name = launchers[k].size;
    const char *rt = env_get(rank_name), *st = env_get(size_name), *lt;
    long rank, size, local;

    if (st == NULL && launchers[k].size_alt != NULL) {
        size_name = launchers[k].size_alt;
        st = env_get(size_name);
    }
    *found_p = rt != NULL || st != NULL;
    if (!*found_p) return CHORUS_SUCCESS;
    if (rt == NULL || st == NULL) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "bootstrap: %s is set but %s is not",
                             rt != NULL ? rank_name : size_name, rt != NULL ? size_name : rank_name);
    }
    if (env_parse_int(rt, &rank) != 0 || env_parse_int(st, &size) != 0 || size < 1 ||
        size > CHORUS_BS_MAX_RANKS || rank >= size) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "bootstrap: %s=%s and %s=%s do not make a rank and a size "
                             "(need 0 <= rank < size)",
                             rank_name, rt, size_name, st);
    }
    lt = launchers[k].local != NULL ? env_get(launchers[k].local) : NULL;
    l->kind = k;
    l->rank = (int)rank;
    l->nranks = (int)size;
    l->local_rank = lt != NULL && env_parse_int(lt, &local) == 0 && local < size ? (int)local : -1;
    l->nnodes = 0;
    return CHORUS_SUCCESS;
}

/* The first launcher that set this process up (or the one CHORUS_LAUNCHER names). */
static chorus_status_t env_rank_size(launch_t *l)
{
    launch_kind_t forced, k;
    chorus_status_t status;
    int found;

    status = env_forced(&forced);
    if (status != CHORUS_SUCCESS) return status;
    for (k = 0; k < LAUNCH_COUNT; k++) {
        if (forced != LAUNCH_COUNT && k != forced) continue;
        if (k == LAUNCH_PMIX) {
            /* A build without PMIx falls through to the launcher's variables. */
            if (!chorus__pmix_launched() || (!chorus__pmix_built() && forced != k)) continue;
            status = chorus__pmix_rank_size(&l->rank, &l->nranks, &l->local_rank, &l->nnodes);
            if (status != CHORUS_SUCCESS) return status;
            l->kind = k;
            return CHORUS_SUCCESS;
        }
        status = env_vars_rank_size(k, l, &found);
        if (status != CHORUS_SUCCESS || found) return status;
    }
    if (forced != LAUNCH_COUNT) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "bootstrap: CHORUS_LAUNCHER=%s, but its variables are not set",
                             launchers[forced].name);
    }
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                         "bootstrap: no rank in the environment (set CHORUS_RANK and "
                         "CHORUS_WORLD_SIZE, or launch with torchrun, mpirun, srun or PMI)");
}

/* Where the root comes from. */
typedef enum {
    ROOT_GIVEN, /* CHORUS_ROOT or MASTER_ADDR:MASTER_PORT */
    ROOT_SLURM, /* derived from the Slurm step */
    ROOT_PMIX,  /* made by rank 0 and shared through PMIx */
} root_kind_t;

/* The root address, and its text as the launcher gave it: every rank has the same text,
 * while a host name may resolve differently on the root's own host. */
static chorus_status_t env_root_addr(const launch_t *l, struct sockaddr_storage *addr_p,
                                     char *text, size_t len, root_kind_t *kind_p)
{
    const char *root = env_get("CHORUS_ROOT");
    const char *host = env_get("MASTER_ADDR"), *port = env_get("MASTER_PORT");
    chorus_status_t status;

    *kind_p = ROOT_GIVEN;
    if (root != NULL) {
        snprintf(text, len, "%s", root);
        return chorus__sock_parse_addr(root, addr_p);
    }
    if (host != NULL && port != NULL) {
        /* A bare IPv6 address needs brackets to keep its colons apart from the port's. */
        snprintf(text, len, strchr(host, ':') != NULL && host[0] != '[' ? "[%s]:%s" : "%s:%s",
                 host, port);
        return chorus__sock_parse_addr(text, addr_p);
    }
    if (l->kind == LAUNCH_PMIX) {
        *kind_p = ROOT_PMIX;
        return CHORUS_SUCCESS;
    }
    if (l->kind == LAUNCH_SLURM) {
        *kind_p = ROOT_SLURM;
        status = chorus__slurm_root(l->rank, text, len);
        if (status != CHORUS_SUCCESS) return status;
        return chorus__sock_parse_addr(text, addr_p);
    }
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                         "bootstrap: no rendezvous address: set CHORUS_ROOT=host:port, or "
                         "MASTER_ADDR and MASTER_PORT%s",
                         chorus__pmix_launched() && !chorus__pmix_built()
                             ? " (a PMIx launcher started this process, but this Chorus was "
                               "built without PMIx: apt-get install libpmix-dev and rebuild)"
                             : "");
}

/* Exactly SECRET_HEX hex digits, then only whitespace. Returns 0 on success. */
static int env_unhex_secret(const char *hex, uint8_t secret[CHORUS_SECRET_BYTES])
{
    size_t i, len = strlen(hex);

    while (len > 0 && (hex[len - 1] == '\n' || hex[len - 1] == '\r' || hex[len - 1] == ' ')) {
        len--;
    }
    if (len != SECRET_HEX) return -1;
    for (i = 0; i < SECRET_HEX; i++) {
        char c = hex[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        if (i % 2 == 0) {
            secret[i / 2] = (uint8_t)(d << 4);
        } else {
            secret[i / 2] |= (uint8_t)d;
        }
    }
    return 0;
}

/* The secret file's path: CHORUS_SECRET_FILE, else ~/.chorus/secret. */
static chorus_status_t env_secret_path(char *path, size_t len)
{
    const char *file = env_get("CHORUS_SECRET_FILE");
    const char *home = getenv("HOME");
    struct passwd pw, *pwp = NULL;
    char pwbuf[1024];

    if (file != NULL) {
        if (snprintf(path, len, "%s", file) >= (int)len) goto err_long;
        return CHORUS_SUCCESS;
    }
    if (home == NULL || home[0] == '\0') {
        if (getpwuid_r(geteuid(), &pw, pwbuf, sizeof(pwbuf), &pwp) != 0 || pwp == NULL) {
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "bootstrap: no HOME for ~/.chorus/secret; set CHORUS_SECRET "
                                 "or CHORUS_SECRET_FILE");
        }
        home = pw.pw_dir;
    }
    if (snprintf(path, len, "%s/.chorus/secret", home) >= (int)len) goto err_long;
    return CHORUS_SUCCESS;

err_long:
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "bootstrap: secret file path too long");
}

/* Reads an existing secret file. Returns ENOENT (without recording an error) when there
 * is none, so that the caller creates it. */
static chorus_status_t env_read_secret(const char *path, uint8_t secret[CHORUS_SECRET_BYTES],
                                       int *missing_p)
{
    char buf[128];
    struct stat st;
    ssize_t n;
    int fd;

    *missing_p = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT) {
        *missing_p = 1;
        return CHORUS_SUCCESS;
    }
    if (fd < 0) return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "bootstrap: open %s", path);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "bootstrap: %s is not a regular file",
                             path);
    }
    /* A secret others can read is no secret: refuse rather than trust it. */
    if ((st.st_mode & 077) != 0 || st.st_uid != geteuid()) {
        close(fd);
        return chorus__error(CHORUS_ERR_AUTH,
                             "bootstrap: %s must be owned by you and private (chmod 600 %s)", path,
                             path);
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n < 0) return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "bootstrap: read %s", path);
    buf[n] = '\0';
    if (env_unhex_secret(buf, secret) != 0) {
        OPENSSL_cleanse(buf, sizeof(buf));
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "bootstrap: %s does not hold %d hex digits", path, SECRET_HEX);
    }
    OPENSSL_cleanse(buf, sizeof(buf));
    return CHORUS_SUCCESS;
}

/* Creates the secret file with fresh random content. It is written to a private temporary
 * file and link()ed into place, which fails if the file exists: so when several ranks of
 * one host race, exactly one wins, and nobody ever reads a half-written file. */
static chorus_status_t env_create_secret(const char *path)
{
    static const char digits[] = "0123456789abcdef";
    uint8_t raw[CHORUS_SECRET_BYTES], tag[4];
    char tmp[PATH_MAX + 32], dir[PATH_MAX], text[SECRET_HEX + 1];
    chorus_status_t status;
    char *slash;
    int fd, i, rc;

    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (slash != NULL && slash != dir) {
        *slash = '\0';
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            return chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "bootstrap: mkdir %s", dir);
        }
    }
    CHORUS_CHECK_GOTO(chorus__random_bytes(raw, sizeof(raw)), err);
    CHORUS_CHECK_GOTO(chorus__random_bytes(tag, sizeof(tag)), err);
    for (i = 0; i < CHORUS_SECRET_BYTES; i++) {
        text[2 * i] = digits[raw[i] >> 4];
        text[2 * i + 1] = digits[raw[i] & 15];
    }
    text[SECRET_HEX] = '\n';
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld.%02x%02x%02x%02x", path, (long)getpid(), tag[0], tag[1],
             tag[2], tag[3]);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "bootstrap: create %s", tmp);
        goto err;
    }
    rc = fchmod(fd, 0600) == 0 && write(fd, text, sizeof(text)) == (ssize_t)sizeof(text) &&
         fsync(fd) == 0;
    close(fd);
    if (!rc) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "bootstrap: write %s", tmp);
        goto err_unlink;
    }
    if (link(tmp, path) != 0 && errno != EEXIST) {
        status = chorus__error_errno(CHORUS_ERR_SYSTEM, errno, "bootstrap: link %s", path);
        goto err_unlink;
    }
    unlink(tmp);
    OPENSSL_cleanse(raw, sizeof(raw));
    OPENSSL_cleanse(text, sizeof(text));
    return CHORUS_SUCCESS;

err_unlink:
    unlink(tmp);
err:
    OPENSSL_cleanse(raw, sizeof(raw));
    OPENSSL_cleanse(text, sizeof(text));
    return status;
}

static chorus_status_t env_secret(uint8_t secret[CHORUS_SECRET_BYTES])
{
    const char *hex = env_get("CHORUS_SECRET");
    char path[PATH_MAX];
    chorus_status_t status;
    int missing;

    if (hex != NULL) {
        if (env_unhex_secret(hex, secret) != 0) {
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "bootstrap: CHORUS_SECRET must be %d hex digits", SECRET_HEX);
        }
        return CHORUS_SUCCESS;
    }
    status = env_secret_path(path, sizeof(path));
    if (status != CHORUS_SUCCESS) return status;
    status = env_read_secret(path, secret, &missing);
    if (status != CHORUS_SUCCESS || !missing) return status;
    CHORUS_INFO("bootstrap", "creating the job secret file %s", path);
    status = env_create_secret(path);
    if (status != CHORUS_SUCCESS) return status;
    /* Whoever won the race wrote it: everyone reads the same file back. */
    status = env_read_secret(path, secret, &missing);
    if (status == CHORUS_SUCCESS && missing) {
        return chorus__error(CHORUS_ERR_SYSTEM, "bootstrap: %s vanished after creation", path);
    }
    return status;
}

/* HMAC(secret, "chorus-comm-id" | root text): the same on every rank, and different for
 * two jobs that share a secret but not a root. */
static chorus_status_t env_comm_id(const chorus_id_info_t *info, const char *root_text,
                                   uint64_t *comm_id_p)
{
    uint8_t msg[14 + 320], mac[32];
    size_t tlen = strlen(root_text);
    unsigned mac_len = 0;

    if (tlen > sizeof(msg) - 14) tlen = sizeof(msg) - 14;
    memcpy(msg, "chorus-comm-id", 14);
    memcpy(msg + 14, root_text, tlen);
    if (HMAC(EVP_sha256(), info->secret, CHORUS_SECRET_BYTES, msg, 14 + tlen, mac, &mac_len) ==
            NULL ||
        mac_len != sizeof(mac)) {
        return chorus__error(CHORUS_ERR_INTERNAL, "bootstrap: HMAC for the comm id failed");
    }
    *comm_id_p = chorus__bs_get64(mac);
    return CHORUS_SUCCESS;
}

/* Records what the call used, for chorus-bench --info and the log. */
static void env_note_source(const launch_t *l, root_kind_t rk, const char *root_text,
                            int given_id)
{
    static const char *const why[LAUNCH_COUNT] = {
        [LAUNCH_CHORUS] = "CHORUS_RANK, CHORUS_WORLD_SIZE",
        [LAUNCH_TORCHRUN] = "RANK, WORLD_SIZE (torchrun)",
        [LAUNCH_PMIX] = "PMIx (mpirun, prterun or srun --mpi=pmix)",
        [LAUNCH_MPI] = "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (mpirun)",
        [LAUNCH_SLURM] = "SLURM_PROCID, SLURM_STEP_NUM_TASKS (srun)",
        [LAUNCH_PMI] = "PMI_RANK, PMI_SIZE",
    };
    const char *root = given_id          ? "CHORUS_UNIQUE_ID (chorusrun)"
                       : rk == ROOT_PMIX ? "made by rank 0, shared through PMIx"
                                         : root_text;

    snprintf(env_source_text, sizeof(env_source_text),
             "rank %d of %d (local rank %d) from %s; root %s%s", l->rank, l->nranks, l->local_rank,
             why[l->kind], root,
             given_id           ? ""
             : rk == ROOT_SLURM ? " (the step's first host, port from the job and step ids)"
             : rk == ROOT_GIVEN ? (env_get("CHORUS_ROOT") != NULL ? " (CHORUS_ROOT)"
                                                                   : " (MASTER_ADDR, MASTER_PORT)")
                                : "");
    CHORUS_INFO("bootstrap", "launch: %s", env_source_text);
}

const char *chorus__bootstrap_env_source(void)
{
    return env_source_text[0] != '\0' ? env_source_text : NULL;
}

chorus_status_t chorus__bootstrap_id_from_env(chorus_unique_id_t *id_p, int *rank_p, int *nranks_p,
                                              int *is_root_p)
{
    const char *hex = env_get("CHORUS_UNIQUE_ID");
    chorus_unique_id_t id;
    chorus_id_info_t info;
    chorus_status_t status;
    char root_text[320] = "";
    root_kind_t rk = ROOT_GIVEN;
    launch_t l;

    env_source_text[0] = '\0';
    memset(&l, 0, sizeof(l));
    CHORUS_CHECK_GOTO(env_rank_size(&l), err);
    if (hex != NULL) {
        CHORUS_CHECK_GOTO(chorus__id_from_hex(hex, &id), err);
        *is_root_p = CHORUS_BS_ROOT_NONE;
        goto done;
    }
    memset(&info, 0, sizeof(info));
    CHORUS_CHECK_GOTO(env_root_addr(&l, &info.root_addr, root_text, sizeof(root_text), &rk), err);
    if (rk == ROOT_PMIX) {
        /* Rank 0's root service is already running: nobody starts another. */
        CHORUS_CHECK_GOTO(chorus__pmix_share_id(l.rank, l.nnodes,
                                                chorus__config_seconds("CHORUS_TIMEOUT", 300.0),
                                                &id),
                          err);
        *is_root_p = CHORUS_BS_ROOT_NONE;
        goto done;
    }
    CHORUS_CHECK_GOTO(env_secret(info.secret), err_cleanse);
    CHORUS_CHECK_GOTO(env_comm_id(&info, root_text, &info.comm_id), err_cleanse);
    CHORUS_CHECK_GOTO(chorus__id_encode(&info, &id), err_cleanse);
    OPENSSL_cleanse(&info, sizeof(info));
    /* A derived root binds every interface: the first host's name may resolve to
     * another address on that host (127.0.1.1 on Debian) than on the others. */
    *is_root_p = l.rank != 0      ? CHORUS_BS_ROOT_RANK0
                 : rk == ROOT_SLURM ? CHORUS_BS_ROOT_ANY
                                    : CHORUS_BS_ROOT_ADDR;
done:
    env_note_source(&l, rk, root_text, hex != NULL);
    *id_p = id;
    *rank_p = l.rank;
    *nranks_p = l.nranks;
    return CHORUS_SUCCESS;

err_cleanse:
    OPENSSL_cleanse(&info, sizeof(info));
err:
    return chorus__error_context(status, "bootstrap: reading the launcher environment");
}
