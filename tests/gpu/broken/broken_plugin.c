/*
 * GPU plugins that are broken on purpose, one per -D variant, for the loader's tests
 * (tests/unit/test_gpu_loader.c, and the gpu part of tests/run_tests.sh): each is a plugin
 * file that is there, so the loader must report it as broken, and the GPU tests must fail
 * on it with the loader's reason instead of skipping as on a machine without a GPU.
 *
 *   -DBROKEN_nosym     a shared object without chorus_gpu_plugin
 *   -DBROKEN_abi       chorus_gpu_plugin refuses ABI CHORUS_GPU_ABI_VERSION (returns NULL),
 *                      as a plugin built for another version of Chorus does
 *   -DBROKEN_abitable  chorus_gpu_plugin answers with a table of another ABI version
 *   -DBROKEN_init      init fails with a message, as on a driver that does not match
 *   -DBROKEN_undef     needs a symbol nothing defines, so dlopen (RTLD_NOW) fails, as for
 *                      a plugin built against another CUDA runtime
 *
 * The fifth kind, a file that is not a shared object at all, is a text file the Makefile
 * writes.
 */
#include "gpu/gpu.h"

#define BROKEN_INIT_MSG "cudaGetDeviceCount: cudaErrorSystemDriverMismatch: init fails on purpose"

const chorus_gpu_ops_t *chorus_gpu_plugin(int abi_version);

#if defined(BROKEN_nosym)

/* Some other entry, so that the object is a valid plugin in all but its name. */
const chorus_gpu_ops_t *chorus_gpu_plugin_v1(int abi_version);

const chorus_gpu_ops_t *chorus_gpu_plugin_v1(int abi_version)
{
    (void)abi_version;
    return NULL;
}

#elif defined(BROKEN_abi)

const chorus_gpu_ops_t *chorus_gpu_plugin(int abi_version)
{
    (void)abi_version;
    return NULL;
}

#elif defined(BROKEN_abitable)

static const chorus_gpu_ops_t old_table = {
    .abi_version = CHORUS_GPU_ABI_VERSION - 1,
    .name = "broken-abitable",
};

/* Ignores the version asked for, as a careless plugin would. */
const chorus_gpu_ops_t *chorus_gpu_plugin(int abi_version)
{
    (void)abi_version;
    return &old_table;
}

#elif defined(BROKEN_init)

static chorus_status_t broken_init(int *ndevices_p, const char **desc_p)
{
    *ndevices_p = 0;
    *desc_p = "";
    return CHORUS_ERR_SYSTEM;
}

static const char *broken_last_error(void)
{
    return BROKEN_INIT_MSG;
}

/* Only what the loader calls before init succeeds: it never uses the rest. */
static const chorus_gpu_ops_t init_table = {
    .abi_version = CHORUS_GPU_ABI_VERSION,
    .name = "broken-init",
    .init = broken_init,
    .last_error = broken_last_error,
};

const chorus_gpu_ops_t *chorus_gpu_plugin(int abi_version)
{
    return abi_version == CHORUS_GPU_ABI_VERSION ? &init_table : NULL;
}

#elif defined(BROKEN_undef)

/* Defined nowhere: the dynamic loader cannot bind it. */
void chorus_broken_plugin_missing_function(void);

const chorus_gpu_ops_t *chorus_gpu_plugin(int abi_version)
{
    (void)abi_version;
    chorus_broken_plugin_missing_function();
    return NULL;
}

#else
#error "define one of BROKEN_nosym, BROKEN_abi, BROKEN_abitable, BROKEN_init, BROKEN_undef"
#endif
