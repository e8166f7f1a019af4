/*
 * Shared by the libFuzzer harnesses of tests/fuzz (each fuzz_<name>.c is one target, built
 * and run by `make fuzz`). A broken invariant is a crash on purpose: libFuzzer keeps the
 * input that broke it, like an ASan report.
 */
#ifndef CHORUS_FUZZ_COMMON_H
#define CHORUS_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);   \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#endif
