/*
 * parallel.h - the CPU backend's one way to run loop iterations on several cores.
 *
 *   DLT_PARALLEL_FOR(i, n, grain) { body using i }
 *
 * runs the body for i in [0, n) split into contiguous static chunks over OpenMP's threads
 * when the build has OpenMP (meson finds it; dlt_set_num_threads, else OMP_NUM_THREADS, sets
 * the most), and as a plain loop otherwise. Each thread gets at least `grain` iterations, so
 * a loop shorter than 2 * grain runs on the calling thread: a fork/join costs microseconds on
 * an idle machine and milliseconds on an oversubscribed one (a sleeping worker must be
 * scheduled), and small tensors are the common case.
 *
 * Rules for bodies: each iteration writes only its own outputs (no reductions across
 * iterations), so results are identical whatever the thread count; no dlt_ call that
 * allocates or sets the error message (those are per thread); no CBLAS call (OpenBLAS
 * threads itself).
 */
#ifndef DLT_CPU_PARALLEL_H
#define DLT_CPU_PARALLEL_H

#include <stdint.h>

/* Threads for a loop of n iterations of which `grain` make one thread's worth of work
 * (PyTorch's at::parallel_for rule): at most n / grain, at most dlt_get_num_threads(). */
int dlt__cpu_team(int64_t n, int64_t grain);
/* dlt_get_num_threads() */
int dlt__cpu_threads(void);

#if defined(_OPENMP)
#include <omp.h>
#define DLT__PRAGMA(x) _Pragma(#x)
#define DLT_PARALLEL_FOR(i, n, grain)                                                         \
    DLT__PRAGMA(omp parallel for schedule(static) if ((n) >= 2 * (grain))                     \
                num_threads(dlt__cpu_team((n), (grain))))                                     \
    for (int64_t i = 0; i < (n); i++)
#else
#define DLT_PARALLEL_FOR(i, n, grain) for (int64_t i = 0; i < (n); i++)
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
