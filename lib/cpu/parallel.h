/*
 * parallel.h - the CPU backend's one way to run loop iterations on several cores.
 *
 *   DLT_PARALLEL_FOR(i, n, grain) { body using i }
 *
 * runs the body for i in [0, n) split into contiguous static chunks over OpenMP's threads
 * when the build has OpenMP (meson finds it; OMP_NUM_THREADS sets the count), and as a plain
 * loop otherwise. A loop shorter than `grain` iterations runs on the calling thread: the
 * fork/join costs a few microseconds and small tensors are the common case in tests.
 *
 * Rules for bodies: each iteration writes only its own outputs (no reductions across
 * iterations), so results are identical whatever the thread count; no dlt_ call that
 * allocates or sets the error message (those are per thread); no CBLAS call (OpenBLAS
 * threads itself).
 */
#ifndef DLT_CPU_PARALLEL_H
#define DLT_CPU_PARALLEL_H

#include <stdint.h>

#if defined(_OPENMP)
#include <omp.h>
#define DLT__PRAGMA(x) _Pragma(#x)
#define DLT_PARALLEL_FOR(i, n, grain)                                                         \
    DLT__PRAGMA(omp parallel for schedule(static) if ((n) >= (grain)))                        \
    for (int64_t i = 0; i < (n); i++)
static inline int dlt__cpu_threads(void) { return omp_get_max_threads(); }
#else
#define DLT_PARALLEL_FOR(i, n, grain) for (int64_t i = 0; i < (n); i++)
static inline int dlt__cpu_threads(void) { return 1; }
#endif

/* ---- build: grains by work ----
 * A loop whose iterations each cover many elements (a channel, an image plane) goes
 * parallel from about DLT_PARALLEL_MIN_WORK elements in all: dlt__par_grain(elements per
 * iteration) is the iteration count from which that holds, for DLT_PARALLEL_FOR's grain. */
#define DLT_PARALLEL_MIN_WORK 32768
static inline int64_t dlt__par_grain(int64_t work_per_iter) {
    if (work_per_iter >= DLT_PARALLEL_MIN_WORK) return 2;
    if (work_per_iter < 1) work_per_iter = 1;
    return (DLT_PARALLEL_MIN_WORK + work_per_iter - 1) / work_per_iter;
}

#endif
