/* chorus-trace fr: the ranks' flight records read together (fr.c). */
#ifndef CHORUS_TOOLS_TRACE_FR_H
#define CHORUS_TOOLS_TRACE_FR_H

/* Reads DIR/chorus-fr.*.json and prints, per communicator, the first operation not every
 * rank completed and the ranks that stand out there ("culprit: rank R at #S: ..." lines).
 * Returns 0, or 1 when no record was found or a file could not be read. */
int chorus_trace_fr(const char *dir);

#endif
