/*
 * The loader of the GPU plugin (gpu.h says why the GPU is a plugin). Loads once per
 * process, on first use, and never unloads: streams and threads of the plugin may outlive
 * any one communicator.
 */
#include "gpu/gpu.h"

#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define GPU_PLUGIN_FILE "libchorus-cuda.so"

static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static const chorus_gpu_ops_t *gpu_ops; /* NULL: host only */
static chorus_gpu_state_t gpu_state = CHORUS_GPU_ABSENT;
static char gpu_desc[768] = "not loaded";

static void gpu_set(chorus_gpu_state_t state, const char *fmt, ...) CHORUS_PRINTF(2, 3);

/* Records the outcome of loading: its state and the words describe() returns. */
static void gpu_set(chorus_gpu_state_t state, const char *fmt, ...)
{
    va_list ap;

    gpu_state = state;
    va_start(ap, fmt);
    vsnprintf(gpu_desc, sizeof gpu_desc, fmt, ap);
    va_end(ap);
}

/* The directory of the object that holds this code (libchorus.so, or the executable
 * libchorus.a was linked into), without the trailing slash; "" when unknown. */
static void gpu_self_dir(char *dir, size_t len)
{
    Dl_info info;
    char *slash;

    dir[0] = '\0';
    if (dladdr((void *)&gpu_self_dir, &info) == 0 || info.dli_fname == NULL) return;
    snprintf(dir, len, "%s", info.dli_fname);
    slash = strrchr(dir, '/');
    if (slash == NULL) dir[0] = '\0';
    else *slash = '\0';
}

/* dlopens the plugin file at path (which holds a slash). A file that is not there sets
 * *missing_p and returns NULL: whether that means "no GPU" is the caller's to say. A file
 * that is there but will not load (not a shared object, an undefined symbol, a library it
 * needs missing) returns NULL with dlerror()'s words in why. */
static void *gpu_open_file(const char *path, int *missing_p, char *why, size_t why_len)
{
    struct stat st;
    const char *err;
    void *h;

    *missing_p = 0;
    if (stat(path, &st) != 0) {
        *missing_p = errno == ENOENT || errno == ENOTDIR;
        snprintf(why, why_len, "%s: %s", path, strerror(errno));
        return NULL;
    }
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        err = dlerror();
        snprintf(why, why_len, "dlopen: %s", err != NULL ? err : "failed");
    }
    return h;
}

/* dlopens the plugin by its bare name, on the loader's search path (LD_LIBRARY_PATH, the
 * cache, the default directories). The loader tells "nowhere on the path" from "found but
 * will not load" only in its message: glibc writes "<name>: cannot open shared object
 * file: No such file or directory" with the name it was asked for, while a library the
 * plugin needs that is missing is named by its own name, and a file that is not a shared
 * object gets another reason. */
static void *gpu_open_on_path(int *missing_p, char *why, size_t why_len)
{
    static const char not_found[] = GPU_PLUGIN_FILE ": cannot open shared object file";
    void *h = dlopen(GPU_PLUGIN_FILE, RTLD_NOW | RTLD_LOCAL);
    const char *err;

    *missing_p = 0;
    if (h == NULL) {
        err = dlerror();
        if (err == NULL) err = "failed";
        *missing_p = strncmp(err, not_found, sizeof not_found - 1) == 0 &&
                     strstr(err, "No such file or directory") != NULL;
        snprintf(why, why_len, "dlopen: %s", err);
    }
    return h;
}

/* Opens the plugin: CHORUS_CUDA_PLUGIN, else next to this object, ../lib from there, then
 * the loader's search path; the first file found is the plugin, and its name goes to path.
 * NULL with the state set when none loads: ABSENT when no file is found, BROKEN when the
 * one found will not load or CHORUS_CUDA_PLUGIN names a file that is not there (the user
 * asked for that plugin, so its absence is a mistake to report, not a machine without a
 * GPU). */
static void *gpu_open_plugin(const char *forced, char *path, size_t path_len)
{
    char dir[PATH_MAX], why[512];
    int missing = 0;
    void *h;

    if (forced != NULL) {
        snprintf(path, path_len, "%s", forced);
        /* A bare name is looked up on the loader's path, where any failure counts. */
        if (strchr(forced, '/') != NULL) {
            h = gpu_open_file(forced, &missing, why, sizeof why);
        } else if ((h = dlopen(forced, RTLD_NOW | RTLD_LOCAL)) == NULL) {
            const char *err = dlerror();
            snprintf(why, sizeof why, "dlopen: %s", err != NULL ? err : "failed");
        }
        if (h == NULL)
            gpu_set(CHORUS_GPU_BROKEN, "broken CUDA plugin %s: %s%s", forced, why,
                    missing ? " (CHORUS_CUDA_PLUGIN names it: unset it for the default "
                    "lookup, or set it to none for no GPU)" : "");
        return h;
    }
    gpu_self_dir(dir, sizeof dir);
    if (dir[0] != '\0') {
        snprintf(path, path_len, "%s/%s", dir, GPU_PLUGIN_FILE);
        if ((h = gpu_open_file(path, &missing, why, sizeof why)) != NULL) return h;
        if (!missing) goto broken;
        snprintf(path, path_len, "%s/../lib/%s", dir, GPU_PLUGIN_FILE);
        if ((h = gpu_open_file(path, &missing, why, sizeof why)) != NULL) return h;
        if (!missing) goto broken;
    }
    snprintf(path, path_len, "%s", GPU_PLUGIN_FILE);
    if ((h = gpu_open_on_path(&missing, why, sizeof why)) != NULL) return h;
    if (!missing) goto broken;
    gpu_set(CHORUS_GPU_ABSENT, "no CUDA plugin: %s is neither in %s nor in %s/../lib nor on "
            "the loader's path (a build without nvcc has none)", GPU_PLUGIN_FILE,
            dir[0] != '\0' ? dir : "(unknown)", dir[0] != '\0' ? dir : "(unknown)");
    return NULL;
broken:
    gpu_set(CHORUS_GPU_BROKEN, "broken CUDA plugin %s: %s", path, why);
    return NULL;
}

/* Asks the plugin at path (open as h) for its table and starts it: READY with a device,
 * ABSENT when it finds no driver or no device, BROKEN for anything else. */
static void gpu_start(void *h, const char *path)
{
    const chorus_gpu_ops_t *ops;
    chorus_gpu_plugin_fn entry;
    const char *desc = NULL, *err;
    int ndevices = 0;
    void *sym;

    /* dlsym returns an object pointer; the plugin's entry is a function (POSIX allows the
     * conversion through memcpy). */
    (void)dlerror();
    sym = dlsym(h, CHORUS_GPU_PLUGIN_SYMBOL);
    if (sym == NULL) {
        err = dlerror();
        gpu_set(CHORUS_GPU_BROKEN, "broken CUDA plugin %s: no entry %s (%s)", path,
                CHORUS_GPU_PLUGIN_SYMBOL, err != NULL ? err : "dlsym returned NULL");
        return;
    }
    memcpy(&entry, &sym, sizeof entry);
    ops = entry(CHORUS_GPU_ABI_VERSION);
    if (ops == NULL) {
        gpu_set(CHORUS_GPU_BROKEN, "broken CUDA plugin %s: it does not speak ABI %d (%s(%d) "
                "returned NULL): it was built for another version of Chorus", path,
                CHORUS_GPU_ABI_VERSION, CHORUS_GPU_PLUGIN_SYMBOL, CHORUS_GPU_ABI_VERSION);
        return;
    }
    if (ops->abi_version != CHORUS_GPU_ABI_VERSION) {
        gpu_set(CHORUS_GPU_BROKEN, "broken CUDA plugin %s: it does not speak ABI %d (its "
                "table is of ABI %d): it was built for another version of Chorus", path,
                CHORUS_GPU_ABI_VERSION, ops->abi_version);
        return;
    }
    if (ops->name == NULL || ops->init == NULL || ops->last_error == NULL) {
        gpu_set(CHORUS_GPU_BROKEN, "broken CUDA plugin %s: its table lacks name, init or "
                "last_error", path);
        return;
    }
    /* The plugin's init succeeds with 0 devices for no driver or no device (gpu.h); a
     * failure is anything else, such as a driver that does not match the runtime. */
    if (ops->init(&ndevices, &desc) != CHORUS_SUCCESS) {
        gpu_set(CHORUS_GPU_BROKEN, "broken CUDA plugin %s: the %s plugin failed to start: %s",
                path, ops->name, ops->last_error());
        return;
    }
    if (ndevices <= 0) {
        gpu_set(CHORUS_GPU_ABSENT, "%s plugin: %s", ops->name, desc != NULL ? desc : "");
        return;
    }
    gpu_set(CHORUS_GPU_READY, "%s plugin: %s", ops->name, desc != NULL ? desc : "");
    gpu_ops = ops;
}

static void gpu_load(void)
{
    const char *forced = chorus__config_str("CHORUS_CUDA_PLUGIN");
    char path[PATH_MAX + 64];
    void *h;

    if (forced != NULL && strcmp(forced, "none") == 0) {
        gpu_set(CHORUS_GPU_ABSENT, "CHORUS_CUDA_PLUGIN=none");
    } else if ((h = gpu_open_plugin(forced, path, sizeof path)) != NULL) {
        /* The handle is kept open for the life of the process, on purpose. */
        gpu_start(h, path);
    }
    if (gpu_state == CHORUS_GPU_BROKEN)
        CHORUS_WARN("gpu", "%s; the GPU is off and device calls fail", gpu_desc);
    else
        CHORUS_INFO("gpu", "%s%s", gpu_ops != NULL ? "" : "no GPU: ", gpu_desc);
}

const chorus_gpu_ops_t *chorus__gpu(void)
{
    pthread_once(&gpu_once, gpu_load);
    return gpu_ops;
}

const char *chorus__gpu_describe(void)
{
    pthread_once(&gpu_once, gpu_load);
    return gpu_desc;
}

chorus_gpu_state_t chorus__gpu_state(void)
{
    pthread_once(&gpu_once, gpu_load);
    return gpu_state;
}

/* "<msg>: <why there is no GPU>" into out; the status that goes with it. */
static chorus_status_t gpu_why_none(const char *msg, char *out, size_t len)
{
    if (chorus__gpu_state() == CHORUS_GPU_BROKEN) {
        snprintf(out, len, "%s: %s", msg, gpu_desc);
        return CHORUS_ERR_SYSTEM;
    }
    snprintf(out, len, "%s: no CUDA device (%s)", msg, gpu_desc);
    return CHORUS_ERR_UNSUPPORTED;
}

chorus_status_t chorus__gpu_unavailable(const char *fmt, ...)
{
    char msg[384], out[sizeof msg + sizeof gpu_desc + 32];
    chorus_status_t status;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    status = gpu_why_none(msg, out, sizeof out);
    return chorus__error(status, "%s", out);
}

chorus_status_t chorus__gpu_pointer_kind(const void *p, const char *what, int *is_device_p,
                                         int *device_p)
{
    const chorus_gpu_ops_t *g = chorus__gpu();
    int is_device = 0, device = -1;

    if (p != NULL && g != NULL && g->pointer_kind(p, &is_device, &device) != CHORUS_SUCCESS)
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "%s %p: cannot tell host from device "
                             "memory: %s", what, p, g->last_error());
    *is_device_p = is_device;
    if (device_p != NULL) *device_p = device;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__gpu_error(chorus_status_t status, const char *fmt, ...)
{
    const chorus_gpu_ops_t *g = chorus__gpu();
    char msg[384], out[sizeof msg + sizeof gpu_desc + 32];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g != NULL) return chorus__error(status, "%s: %s", msg, g->last_error());
    (void)gpu_why_none(msg, out, sizeof out);
    return chorus__error(status, "%s", out);
}
