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
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define GPU_PLUGIN_FILE "libchorus-cuda.so"

static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static const chorus_gpu_ops_t *gpu_ops; /* NULL: host only */
static char gpu_desc[512] = "not loaded";

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

/* dlopens path; on failure appends why to *why. */
static void *gpu_try_open(const char *path, char *why, size_t why_len)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        size_t used = strlen(why);
        const char *err = dlerror();
        snprintf(why + used, why_len - used, "%s%s", used > 0 ? "; " : "",
                 err != NULL ? err : path);
    }
    return h;
}

/* Opens the plugin: CHORUS_CUDA_PLUGIN, else next to this object, ../lib from there, then
 * the loader's search path. NULL with the reasons in why. */
static void *gpu_open_plugin(char *why, size_t why_len)
{
    const char *forced = chorus__config_str("CHORUS_CUDA_PLUGIN");
    char dir[PATH_MAX], path[PATH_MAX + 64];
    void *h;

    if (forced != NULL) return gpu_try_open(forced, why, why_len);
    gpu_self_dir(dir, sizeof dir);
    if (dir[0] != '\0') {
        snprintf(path, sizeof path, "%s/%s", dir, GPU_PLUGIN_FILE);
        if ((h = gpu_try_open(path, why, why_len)) != NULL) return h;
        snprintf(path, sizeof path, "%s/../lib/%s", dir, GPU_PLUGIN_FILE);
        if ((h = gpu_try_open(path, why, why_len)) != NULL) return h;
    }
    return gpu_try_open(GPU_PLUGIN_FILE, why, why_len);
}

static void gpu_load(void)
{
    const char *forced = chorus__config_str("CHORUS_CUDA_PLUGIN");
    char why[sizeof gpu_desc - 64] = "";
    const chorus_gpu_ops_t *ops;
    chorus_gpu_plugin_fn entry;
    const char *desc = NULL;
    int ndevices = 0;
    void *h;

    if (forced != NULL && strcmp(forced, "none") == 0) {
        snprintf(gpu_desc, sizeof gpu_desc, "CHORUS_CUDA_PLUGIN=none");
        goto out;
    }
    h = gpu_open_plugin(why, sizeof why);
    if (h == NULL) {
        snprintf(gpu_desc, sizeof gpu_desc, "no CUDA plugin could be loaded: %s", why);
        goto out;
    }
    /* dlsym returns an object pointer; the plugin's entry is a function (POSIX allows the
     * conversion through memcpy). */
    void *sym = dlsym(h, CHORUS_GPU_PLUGIN_SYMBOL);
    if (sym == NULL) {
        snprintf(gpu_desc, sizeof gpu_desc, "the CUDA plugin has no %s",
                 CHORUS_GPU_PLUGIN_SYMBOL);
        goto out;
    }
    memcpy(&entry, &sym, sizeof entry);
    ops = entry(CHORUS_GPU_ABI_VERSION);
    if (ops == NULL || ops->abi_version != CHORUS_GPU_ABI_VERSION) {
        snprintf(gpu_desc, sizeof gpu_desc, "the CUDA plugin does not speak ABI %d",
                 CHORUS_GPU_ABI_VERSION);
        goto out;
    }
    if (ops->init(&ndevices, &desc) != CHORUS_SUCCESS) {
        snprintf(gpu_desc, sizeof gpu_desc, "the %s plugin failed to start: %s",
                 ops->name, ops->last_error());
        goto out;
    }
    if (ndevices <= 0) {
        snprintf(gpu_desc, sizeof gpu_desc, "%s plugin: %s", ops->name,
                 desc != NULL ? desc : "");
        goto out;
    }
    snprintf(gpu_desc, sizeof gpu_desc, "%s plugin: %s", ops->name, desc != NULL ? desc : "");
    gpu_ops = ops;
out:
    /* The handle is kept open for the life of the process, on purpose. */
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
    char msg[384];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return chorus__error(status, "%s: %s", msg, g != NULL ? g->last_error() : "no GPU");
}
