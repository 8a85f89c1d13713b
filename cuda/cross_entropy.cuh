/*
 * cross_entropy.cuh - what the cross-entropy's forward (cross_entropy.cu) and backward
 * (cross_entropy_bwd.cu) share: the operands (CeArgs), the gradient's arithmetic for a
 * vector of 8 columns (ce_bwd_vec8: the plain backward and the one-pass forward compute the
 * same bits), and the dispatch helpers. cross_entropy.cu's comment states the math.
 */
#ifndef DLT_CUDA_CROSS_ENTROPY_CUH
#define DLT_CUDA_CROSS_ENTROPY_CUH

#include <stdint.h>

#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

/* the including file's own anonymous namespace (its kernels take these types) */
namespace {

struct CeArgs {
    int64_t ignore;
    int64_t C;     /* classes: the first C columns */
    float ls;      /* label smoothing */
    int reduction; /* DLT_REDUCTION_* */
    int rows_saved; /* the row losses are in saved[N+1..] whatever ls and the reduction (ce_smem_kernel<GRAD>) */
};

/* 2^x in one MUFU.EX2 (relative error ~1e-7; results under 2^-126 flush to 0) */
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* The gradient of the 8 columns j0 .. j0 + 7 of a row, one 16-byte vector of 16-bit logits
 * in and of gradients out: g (exp(x - lse) - (1-ls)[j == t] - ls/C), 0 on ignored rows and
 * padded columns, NaN for a bad target. ce_bwd_vec_kernel and ce_smem_kernel<GRAD> both use
 * it: the same bits either way. */
template <typename T, typename D, typename Ix = int64_t> /* Ix: int where columns and classes fit */
__device__ __forceinline__ uint4 ce_bwd_vec8(uint4 raw, Ix j0, Ix t, bool zero, bool bad, float g, float lse,
                                             float smooth, const CeArgs &a) {
    constexpr float LOG2E = 1.4426950408889634f;
    const float lse2 = lse * LOG2E;
    Vec16<T> in;
    Vec16<D> out;
    in.raw = raw;
    if (!zero && !bad && smooth == 0.0f && j0 + 8 <= (Ix)a.C && (t < j0 || t >= j0 + 8)) {
        /* the common vector (classes only, not the target, no smoothing): the formula below
         * with its subtrahend 0, the same bits in a third of the instructions */
#pragma unroll
        for (int e = 0; e < 8; e++) out.v[e] = from_f<D>(g * ex2_ftz(fmaf(to_f<T>(in.v[e]), LOG2E, -lse2)));
        return out.raw;
    }
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const Ix j = j0 + e;
        float o;
        if (zero || j >= (Ix)a.C) o = 0.0f;
        else if (bad) o = NAN;
        else o = g * (ex2_ftz(fmaf(to_f<T>(in.v[e]), LOG2E, -lse2)) - ((j == t ? 1.0f - a.ls : 0.0f) + smooth));
        out.v[e] = from_f<D>(o);
    }
    return out.raw;
}

inline CeArgs ce_args(const dlt_ce_params *p) {
    CeArgs a;
    a.ignore = p->ignore_index;
    a.C = p->n_classes;
    a.ls = (float)p->label_smoothing;
    a.reduction = p->reduction;
    a.rows_saved = 0;
    return a;
}

inline dlt_status bad_targets(const dlt_tensor *targets, const char *F) {
    return dlt__err(DLT_ERR_DTYPE, F, "targets must be i32 or i64, got %s", dlt_dtype_name(targets->dtype));
}

} // namespace

#endif
