/*
 * cli.c - the examples' option parsing (cli.h): getopt_long over a table, checked numbers.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* An integer in decimal, the whole string, within lo..hi (strtoll reports overflow). */
static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || !end || *end || end == s || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_real(const char *s, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || !end || *end || end == s || !isfinite(v) || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* What a good value looks like, for the error message. */
static void expected(const cli_option *o, char *buf, size_t n) {
    switch (o->kind) {
    case CLI_INT: snprintf(buf, n, "an integer in %" PRId64 "..%" PRId64, o->lo, o->hi); break;
    case CLI_REAL: snprintf(buf, n, "a number in %g..%g", o->rlo, o->rhi); break;
    case CLI_CHOICE: {
        size_t k = (size_t)snprintf(buf, n, "one of");
        for (int i = 0; o->choices[i] && k < n; i++)
            k += (size_t)snprintf(buf + k, n - k, "%s %s", i ? "," : "", o->choices[i]);
        break;
    }
    default: /* the value's name and what the help says of it */
        snprintf(buf, n, "%s: %s", o->metavar ? o->metavar : "a value", o->help ? o->help : "");
        break;
    }
}

static int apply(const cli_option *o, const char *arg) {
    switch (o->kind) {
    case CLI_FLAG: *(int *)o->dst = 1; return 0;
    case CLI_INT: return parse_int(arg, o->lo, o->hi, (int64_t *)o->dst);
    case CLI_REAL: return parse_real(arg, o->rlo, o->rhi, (double *)o->dst);
    case CLI_STRING: *(const char **)o->dst = arg; return 0;
    case CLI_CHOICE:
        for (int i = 0; o->choices[i]; i++)
            if (strcmp(arg, o->choices[i]) == 0) {
                *(int32_t *)o->dst = o->values[i];
                return 0;
            }
        return -1;
    case CLI_CUSTOM: return o->parse(arg, o->dst);
    }
    return -1;
}

void cli_usage(FILE *f, const char *prog, const cli_option *opts, int n) {
    fprintf(f, "usage: %s [options]\n", prog);
    for (int i = 0; i < n; i++) {
        const cli_option *o = &opts[i];
        char head[64], meta[48] = "";
        if (o->kind != CLI_FLAG) {
            if (o->metavar) {
                snprintf(meta, sizeof meta, " %s", o->metavar);
            } else if (o->kind == CLI_CHOICE) {
                size_t k = 0;
                for (int c = 0; o->choices[c] && k < sizeof meta; c++)
                    k += (size_t)snprintf(meta + k, sizeof meta - k, "%s%s", c ? "|" : " ", o->choices[c]);
            } else {
                snprintf(meta, sizeof meta, " X");
            }
        }
        snprintf(head, sizeof head, "--%s%s", o->name, meta);
        fprintf(f, "  %-18s", head);
        if (strlen(head) >= 18) fprintf(f, "\n  %-18s", "");
        for (const char *h = o->help ? o->help : ""; *h; h++) {
            fputc(*h, f);
            if (*h == '\n') fprintf(f, "  %-18s", "");
        }
        if (o->kind == CLI_INT) fprintf(f, " [%" PRId64 "..%" PRId64 "]", o->lo, o->hi);
        if (o->kind == CLI_REAL) fprintf(f, " [%g..%g]", o->rlo, o->rhi);
        fputc('\n', f);
    }
}

int cli_parse(int argc, char **argv, const char *prog, const cli_option *opts, int n) {
    struct option *lo = calloc((size_t)n + 2, sizeof *lo);
    if (!lo) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 2;
    }
    for (int i = 0; i < n; i++) {
        lo[i].name = opts[i].name;
        lo[i].has_arg = opts[i].kind == CLI_FLAG ? no_argument : required_argument;
        lo[i].val = 256 + i;
    }
    lo[n].name = "help";
    lo[n].val = 'h';
    int rc = 0;
    opterr = 0; /* the messages below name the option and the program */
    optind = 1;
    for (;;) {
        int c = getopt_long(argc, argv, ":h", lo, NULL);
        if (c == -1) break;
        const char *given = argv[optind - 1];
        if (c == 'h') {
            cli_usage(stdout, prog, opts, n);
            rc = 1;
            break;
        }
        if (c == '?') {
            fprintf(stderr, "%s: unknown option %s\n", prog, given);
            rc = 2;
            break;
        }
        if (c == ':') {
            fprintf(stderr, "%s: %s needs a value\n", prog, given);
            rc = 2;
            break;
        }
        const cli_option *o = &opts[c - 256];
        if (apply(o, optarg) != 0) {
            char want[256];
            expected(o, want, sizeof want);
            fprintf(stderr, "%s: bad value for --%s: %s (expected %s)\n", prog, o->name, optarg, want);
            rc = 2;
            break;
        }
    }
    if (rc == 0 && optind < argc) {
        fprintf(stderr, "%s: unexpected argument %s\n", prog, argv[optind]);
        rc = 2;
    }
    if (rc == 2) cli_usage(stderr, prog, opts, n);
    free(lo);
    return rc;
}

int cli_parse_int_list(const char *s, void *dst) {
    cli_int_list *l = dst;
    int n = 0;
    while (*s) {
        char *end = NULL;
        long long v = strtoll(s, &end, 10);
        if (end == s || v < 1 || v > 65536 || n == CLI_LIST_MAX || (*end && *end != ',')) return -1;
        l->v[n++] = v;
        s = *end ? end + 1 : end;
    }
    if (n == 0) return -1;
    l->n = n;
    return 0;
}

int cli_parse_pair_list(const char *s, void *dst) {
    cli_pair_list *l = dst;
    int n = 0;
    while (*s) {
        size_t len = strcspn(s, ",");
        int k = -1;
        for (int i = 0; i < 2; i++)
            if (strlen(l->names[i]) == len && strncmp(s, l->names[i], len) == 0) k = i;
        if (k < 0 || n == 2 || (n == 1 && l->v[0] == l->values[k])) return -1;
        l->v[n++] = l->values[k];
        s += len;
        if (*s == ',') s++;
    }
    if (n == 0) return -1;
    l->n = n;
    return 0;
}
