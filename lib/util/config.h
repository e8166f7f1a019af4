/*
 * Configuration: every CHORUS_* environment variable is declared once, in the table of
 * config.c (name, type, default, one-line help), and read through these functions. The
 * environment is read once, on first use; chorus__config_reload() re-reads it (tests).
 * `chorus-bench --help-env` prints the table with chorus__config_print().
 */
#ifndef CHORUS_UTIL_CONFIG_H
#define CHORUS_UTIL_CONFIG_H

#include "chorus.h"

#include <stdint.h>
#include <stdio.h>

typedef enum {
    CHORUS_CFG_STRING,
    CHORUS_CFG_INT,     /* decimal integer */
    CHORUS_CFG_SIZE,    /* bytes, with optional K, M, G suffix (powers of 1024) */
    CHORUS_CFG_SECONDS, /* floating point seconds */
} chorus_config_type_t;

typedef struct {
    const char *name; /* "CHORUS_TIMEOUT" */
    chorus_config_type_t type;
    const char *default_value; /* NULL: unset by default */
    const char *help;
} chorus_config_entry_t;

/* The value of a declared variable: the environment's if set and non-empty, else the
 * default; NULL if neither. Asking for an undeclared name is a bug and returns NULL. */
const char *chorus__config_str(const char *name);

/* Nonzero if the environment sets the variable (a default does not count). */
int chorus__config_is_set(const char *name);

/* Typed getters. They return the default (or fallback when the table has no default)
 * when the variable is unset or does not parse; an unparsable value is logged once. */
int64_t chorus__config_int(const char *name, int64_t fallback);
uint64_t chorus__config_size(const char *name, uint64_t fallback);
double chorus__config_seconds(const char *name, double fallback);

/* Parses "123", "64K", "1M", "2G" into bytes; returns 0 on success, -1 if malformed. */
int chorus__parse_size(const char *text, uint64_t *bytes_p);

/* Re-reads the environment (for tests that change it). */
void chorus__config_reload(void);

/* Prints every variable: name, current value, default, help. */
void chorus__config_print(FILE *out);

/* The table itself, for tools. */
const chorus_config_entry_t *chorus__config_table(size_t *count_p);

#endif
