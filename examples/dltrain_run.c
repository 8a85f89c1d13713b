/*
 * dltrain_run.c - dltrain-run, the launcher of data-parallel runs on one machine:
 *
 *   dltrain-run -n 4 ./build/examples/resnet50_cifar10 --batch 256
 *
 * starts 4 copies of the program with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
 * MASTER_ADDR and MASTER_PORT set as torchrun --nproc-per-node sets them, passes signals on,
 * and when one copy fails stops the others and exits with that copy's status (launch.c).
 * Several machines: run the program under mpirun or torchrun (docs/distributed.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"

static const char *PROG = "dltrain-run";

static int usage(FILE *f, int rc) {
    fprintf(f,
            "usage: %s -n N [--master-addr ADDR] [--master-port PORT] [--grace S] [--] PROGRAM [ARGS...]\n"
            "Starts N local processes of PROGRAM for data-parallel training (one per GPU).\n"
            "  -n, --nproc-per-node N  processes to start, 1..1024\n"
            "  --master-addr ADDR      rank 0's address (127.0.0.1)\n"
            "  --master-port PORT      rank 0's rendezvous port (a free one)\n"
            "  --grace S               seconds between SIGTERM and SIGKILL for the survivors of a\n"
            "                          failed process (5)\n"
            "Each process gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and\n"
            "MASTER_PORT. The exit status is that of the first process that failed (128 + signal).\n",
            PROG);
    return rc;
}

static int number(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "%s: %s needs a number in %ld..%ld, got '%s'\n", PROG, flag, lo, hi, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv) {
    long n = 0, port = 0, grace = 5;
    const char *addr = "127.0.0.1";
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-') break; /* the program */
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return usage(stdout, 0);
        if (strcmp(a, "-n") == 0 || strcmp(a, "--nproc-per-node") == 0) {
            if (number(a, v, 1, 1024, &n)) return usage(stderr, 2);
        } else if (strcmp(a, "--master-port") == 0) {
            if (number(a, v, 1, 65535, &port)) return usage(stderr, 2);
        } else if (strcmp(a, "--grace") == 0) {
            if (number(a, v, 0, 3600, &grace)) return usage(stderr, 2);
        } else if (strcmp(a, "--master-addr") == 0) {
            if (!v || !*v) return usage(stderr, 2);
            addr = v;
        } else {
            fprintf(stderr, "%s: unknown option %s\n", PROG, a);
            return usage(stderr, 2);
        }
        i++; /* the value */
    }
    if (n < 1 || i >= argc) {
        fprintf(stderr, "%s: %s\n", PROG, n < 1 ? "-n N is required" : "no program to run");
        return usage(stderr, 2);
    }
    return dlt_launch(PROG, (int)n, argv + i, addr, (int)port, (int)grace);
}
