/*
 * parallel.c - the CPU backend's thread count (dlt_set_num_threads, torch.set_num_threads's
 * counterpart) and the team size of each parallel loop (parallel.h).
 *
 * The count is process-wide, like PyTorch's. It is kept here rather than in OpenMP's
 * per-thread ICV (omp_set_num_threads) so that it holds whichever thread calls the library.
 * OpenBLAS, which threads the GEMMs itself, is told too when the process has it (found with
 * dlsym, so nothing links against a particular BLAS).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "../core/internal.h"
#include "parallel.h"

static atomic_int g_threads;        /* 0: OpenMP's default */
static atomic_int g_blas_default;   /* OpenBLAS's count before the first set, 0 unknown */

int dlt__cpu_threads(void) {
    const int n = atomic_load_explicit(&g_threads, memory_order_relaxed);
#if defined(_OPENMP)
    return n > 0 ? n : omp_get_max_threads();
#else
    (void)n;
    return 1;
#endif
}

int dlt__cpu_team(int64_t n, int64_t grain) {
    const int64_t most = dlt__cpu_threads();
    const int64_t chunks = grain > 0 ? n / grain : n;
    return (int)(chunks < 1 ? 1 : chunks < most ? chunks : most);
}

static void blas_threads(int n) {
    /* ISO C has no void* to function pointer conversion: copy the bits (POSIX's way) */
    void (*set)(int) = NULL;
    int (*get)(void) = NULL;
    void *ps = dlsym(RTLD_DEFAULT, "openblas_set_num_threads"), *pg = dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    memcpy(&set, &ps, sizeof set);
    memcpy(&get, &pg, sizeof get);
    if (!set || !get) return;
    int expect = 0;
    atomic_compare_exchange_strong(&g_blas_default, &expect, get());
    const int dflt = atomic_load(&g_blas_default);
    set(n > 0 ? n : dflt > 0 ? dflt : 1);
}

dlt_status dlt_set_num_threads(int32_t n) {
    if (n < 0 || n > 4096)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, "dlt_set_num_threads", "%d threads: want 1..4096, or 0 for the default",
                        (int)n);
    atomic_store(&g_threads, n);
    blas_threads(n);
    return DLT_OK;
}

int32_t dlt_get_num_threads(void) { return dlt__cpu_threads(); }
