/*
 * chorus-trace: joins the parts of a CHORUS_TRACE run into one file, for jobs whose ranks
 * do not share a file system (then every rank leaves its part, FILE.<comm id>.<rank>, where
 * it ran; copy them to one place and merge them here). The last rank of a job on a shared
 * file system merges by itself.
 *
 *   chorus-trace merge OUT PART...
 */
#include "trace/trace_json.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 4 || strcmp(argv[1], "merge") != 0) {
        fprintf(stderr, "usage: chorus-trace merge OUT PART...\n"
                        "  joins CHORUS_TRACE parts (FILE.<comm id>.<rank>) into OUT, a Chrome\n"
                        "  trace / Perfetto JSON file whose time origin is the first event\n");
        return 2;
    }
    if (chorus__tjson_merge(argv[2], (const char *const *)(argv + 3), argc - 3) != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-trace: %s\n", chorus_last_error());
        return 1;
    }
    printf("chorus-trace: %d parts merged into %s\n", argc - 3, argv[2]);
    return 0;
}
