/*
 * The calibration file parser (chorus__tune_params_parse, lib/tune/tune_params.c and the
 * rule lines of tune_rules.c): the file lives in the user's cache directory, or wherever
 * CHORUS_TUNE_FILE points, so its text is not trusted. The input is the file's text.
 * Invariants: a refused file leaves the parameters untouched; an accepted one gives
 * parameters that tune_params_write writes back into a file the parser accepts, and rules
 * that name a real algorithm and a chunk of at most 2^40 bytes.
 */
#include "fuzz_common.h"

#include "tune/tune.h"

#include <string.h>

static const char scope[] = "shm.4x1";

static void fresh(chorus_tune_params_t *p)
{
    chorus__tune_params_default(p);
    snprintf(p->rule_scope, sizeof(p->rule_scope), "%s", scope);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static chorus_tune_params_t p, before, back;
    char *text = malloc(size + 1), *written = NULL;
    size_t wlen = 0;
    FILE *out;

    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    fresh(&p);
    before = p;
    if (chorus__tune_params_parse(text, "fuzz", &p) != CHORUS_SUCCESS) {
        FUZZ_CHECK(memcmp(&p, &before, sizeof(p)) == 0);
        free(text);
        return 0;
    }
    for (int c = 0; c < CHORUS_NUM_COLLS; c++) {
        for (int k = 0; k < CHORUS_TUNE_NCLASSES; k++) {
            FUZZ_CHECK(p.rule_algo[c][k] < CHORUS_NUM_ALGOS);
            FUZZ_CHECK(p.rule_chunk_log2[c][k] <= 40);
        }
    }
    out = open_memstream(&written, &wlen);
    FUZZ_CHECK(out != NULL);
    FUZZ_CHECK(chorus__tune_params_write(&p, out) == 0);
    fclose(out);
    fresh(&back);
    FUZZ_CHECK(chorus__tune_params_parse(written, "written", &back) == CHORUS_SUCCESS);
    free(written);
    free(text);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    unsetenv("CHORUS_DEBUG");
    return 0;
}
