/*
 * The hang summary of chorusrun. Ranks write "chorus-hang: ..." lines (lib/core/hang.h)
 * when a collective times out, and on SIGUSR1 with CHORUS_HANG_REPORT=2. chorusrun reads
 * every line its ranks write; this module keeps the last report of each rank and, at the
 * end of the run, prints one summary: what each rank was doing in the collective that
 * timed out first, and which ranks never arrived at it.
 */
#ifndef CHORUSRUN_HANG_H
#define CHORUSRUN_HANG_H

#include <stddef.h>

/* Sets up for nranks ranks. Returns 0, -1 when out of memory. */
int hang_init(int nranks);

/* Looks at one line that rank wrote (without its newline). Returns 1 when the line is the
 * run's first timeout report, else 0. */
int hang_note_line(int rank, const char *line, size_t len);

/* Nonzero once any rank reported a timeout. */
int hang_seen_timeout(void);

/* Prints the summary to stderr when some rank reported a timeout; frees everything. */
void hang_summary(void);

#endif
