/*
 * dist_prog.c - a tiny rank program for tests/scripts/launcher.sh (dltrain-run, mpirun-style
 * environments). Modes:
 *   sum             every rank all-reduces its rank + 1 on the CPU and checks the result;
 *                   rank 0 prints "world W sum S"
 *   fail R CODE     after joining, rank R exits with CODE; the others sleep (only the
 *                   launcher can end them)
 *   sleep           every rank sleeps (the test signals the launcher)
 * Exits 0 on success, 1 with the library's message otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dltrain.h>

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "sum";
    int32_t rank = 0, world = 1, local = 0;
    dlt_ctx *ctx = NULL;
    dlt_comm *c = NULL;
    dlt_tensor *t = NULL;
    int rc = 1;
    if (dlt_dist_env(&rank, &world, &local) != DLT_OK || dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx) != DLT_OK ||
        dlt_comm_create(ctx, &c) != DLT_OK) {
        fprintf(stderr, "dist_prog: %s\n", dlt_last_error());
        goto done;
    }
    if (strcmp(mode, "fail") == 0 && argc > 3) {
        if (rank == atoi(argv[2])) exit(atoi(argv[3]));
        sleep(60);
    } else if (strcmp(mode, "sleep") == 0) {
        sleep(60);
    } else {
        int64_t one = 1;
        double v = 0;
        if (dlt_tensor_zeros(ctx, DLT_F32, &one, 1, 0, &t) != DLT_OK || dlt_tensor_fill(t, rank + 1.0) != DLT_OK ||
            dlt_comm_all_reduce(c, t, DLT_REDUCE_SUM) != DLT_OK || dlt_tensor_item(t, &v) != DLT_OK) {
            fprintf(stderr, "dist_prog: rank %d: %s\n", rank, dlt_last_error());
            goto done;
        }
        if (v != world * (world + 1) / 2.0) {
            fprintf(stderr, "dist_prog: rank %d: sum %g\n", rank, v);
            goto done;
        }
        if (rank == 0) printf("world %d sum %g local %d\n", world, v, local);
    }
    rc = 0;
done:
    dlt_tensor_release(t);
    dlt_comm_destroy(c);
    dlt_ctx_destroy(ctx);
    return rc;
}
