/*
 * cli.h - the examples' command-line parsing: one table of options per program, parsed
 * with getopt_long, the usage text generated from the same table.
 *
 * Every numeric option has bounds; a value outside them (or not a number, or trailing
 * text, or out of the type's range) is a usage error: the program prints what was wrong and
 * the usage on stderr and exits 2, before the library sees the value. Adding an option is
 * one table row:
 *
 *   { "json", CLI_FLAG, &o.json, .help = "a machine-readable summary on stdout at the end" },
 *   { "batch", CLI_INT, &o.batch, .lo = 1, .hi = 65536, .metavar = "N", .help = "batch size (256)" },
 *
 * getopt_long's conventions apply: "--name value" or "--name=value", and an unambiguous
 * prefix of a name ("--epo 3") is accepted.
 */
#ifndef DLT_EXAMPLES_CLI_H
#define DLT_EXAMPLES_CLI_H

#include <stdint.h>
#include <stdio.h>

typedef enum cli_kind {
    CLI_FLAG,   /* no value; sets *(int *)dst = 1 */
    CLI_INT,    /* *(int64_t *)dst, within lo..hi */
    CLI_REAL,   /* *(double *)dst, finite, within rlo..rhi */
    CLI_STRING, /* *(const char **)dst = the argument */
    CLI_CHOICE, /* *(int32_t *)dst = values[i] for the argument equal to choices[i] */
    CLI_CUSTOM, /* parse(arg, dst) returns 0 when the value is good */
} cli_kind;

typedef struct cli_option {
    const char *name; /* long name, without "--" */
    cli_kind kind;
    void *dst;
    int64_t lo, hi;                    /* CLI_INT bounds */
    double rlo, rhi;                   /* CLI_REAL bounds */
    const char *const *choices;        /* CLI_CHOICE: NULL-terminated names... */
    const int32_t *values;             /* ...and the value each one stores */
    int (*parse)(const char *arg, void *dst); /* CLI_CUSTOM */
    const char *metavar;               /* the value's name in the usage ("N", "DIR") */
    const char *help;                  /* one line; "\n" continues it, indented */
} cli_option;

/* ---- CLI_CUSTOM parsers for comma lists, shared by the benches ---- */
#define CLI_LIST_MAX 8
/* "8,16,32": up to CLI_LIST_MAX integers, each 1..65536 (batch sizes) */
typedef struct cli_int_list {
    int64_t v[CLI_LIST_MAX];
    int n;
} cli_int_list;
int cli_parse_int_list(const char *arg, void *dst);
/* "bf16,fp16": one or both of two words, each at most once; v holds their values in the
 * order given. Initialise v/n with the default and names/values with the two words. */
typedef struct cli_pair_list {
    int32_t v[2];
    int n;
    const char *names[2];
    int32_t values[2];
} cli_pair_list;
int cli_parse_pair_list(const char *arg, void *dst);

/* Parses argv[1..] against the n options. Returns 0 when the arguments are good, 1 after
 * --help or -h (usage printed on stdout: the program exits 0), 2 on a usage error (the
 * problem and the usage printed on stderr). */
int cli_parse(int argc, char **argv, const char *prog, const cli_option *opts, int n);
/* The usage text: "usage: prog [options]" and one entry per option with its bounds. */
void cli_usage(FILE *f, const char *prog, const cli_option *opts, int n);

#endif
