/*
 * chorus-trace: joins the parts of a CHORUS_TRACE run into one file, for jobs whose ranks
 * do not share a file system (then every rank leaves its part, FILE.<comm id>.<rank>, where
 * it ran; copy them to one place and merge them here). The last rank of a job on a shared
 * file system merges by itself. And reads the ranks' flight records together (fr.c).
 *
 *   chorus-trace merge OUT PART...
 *   chorus-trace fr DIR
 */
#include "fr.h"
#include "trace/trace_json.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "fr") == 0) return chorus_trace_fr(argv[2]);
    if (argc < 4 || strcmp(argv[1], "merge") != 0) {
        fprintf(stderr, "usage: chorus-trace merge OUT PART...\n"
                        "  joins CHORUS_TRACE parts (FILE.<comm id>.<rank>) into OUT, a Chrome\n"
                        "  trace / Perfetto JSON file whose time origin is the first event\n"
                        "       chorus-trace fr DIR\n"
                        "  reads the ranks' flight records (CHORUS_FR_DIR) and names, per\n"
                        "  communicator, the first operation not every rank completed and the\n"
                        "  ranks that never reached it, left no record or called another\n");
        return 2;
    }
    if (chorus__tjson_merge(argv[2], (const char *const *)(argv + 3), argc - 3) != CHORUS_SUCCESS) {
        fprintf(stderr, "chorus-trace: %s\n", chorus_last_error());
        return 1;
    }
    printf("chorus-trace: %d parts merged into %s\n", argc - 3, argv[2]);
    return 0;
}
