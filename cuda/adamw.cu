/*
 * adamw.cu - the Adam/AdamW step as one multi-tensor kernel launch (lib/optim/adamw.c
 * states the update). COMPILE-CHECKED ONLY: written in a session without a GPU; the
 * tests/cuda_optim.c cases "adamw_*_vs_cpu" check it against the CPU backend on the next
 * GPU session.
 *
 * Arithmetic: dlt__adamw_scalars / dlt__adamw_elem (lib/kernel/optim.h), the code the CPU
 * backend runs, with every rounding explicit (__fmul_rn, __fmaf_rn, ...): the same bits as
 * the CPU except where CUDA's double pow differs from the host's in the last ulp (then the
 * f32 scalars may differ by one ulp).
 *
 * Launch layout as sgd.cu: every parameter is cut into chunks of kChunk elements, block b
 * handles chunk b of the launch (binary search over the per-tensor first-chunk table), the
 * per-tensor pointers, sizes, groups and step-count slots travel by value in a
 * __grid_constant__ struct, so a captured graph replays with no host-side metadata. More
 * than kCap parameters take several launches.
 *
 * Fused clipping (dlt_optimizer_set_clip_grad_norm): with clip_coef set, every block reads
 * the coefficient the norm pass (clip_grad_norm.cu) left on the device and updates with
 * g * coef; the gradient itself is not written.
 *
 * Device-side decisions: every block reads found_inf and skips its chunk when it is set;
 * every block reads its tensor's lr (its group's) and step count before taking a ticket
 * from the state block's counter; the last block to finish runs the epilogue: the step
 * counts of this launch's parameters += 1 and, in the final launch, the applied-step count,
 * last_applied and every group's scheduled lr. So the step needs no second kernel and no
 * block can read a value the epilogue already advanced.
 */
#include <stdlib.h>
#include <string.h>

#include "../lib/kernel/optim.h"
#include "common.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 4096; /* 4 float4 per thread */
constexpr int kCap = 256;    /* tensors per launch: GPT-2 (148 parameters) is one launch */

struct AdamArgs {
    float *p[kCap];
    const float *g[kCap];
    float *m[kCap];
    float *v[kCap];
    __half *h[kCap];
    __nv_bfloat16 *bf[kCap];
    int64_t numel[kCap];
    int32_t chunk0[kCap + 1]; /* first chunk of tensor t; chunk0[n] = total */
    int32_t slot[kCap];       /* index into steps (the parameter's step count) */
    uint8_t grp[kCap];        /* parameter group */
    uint8_t vec[kCap];        /* 1: every pointer of tensor t allows 16-byte access */
    double wd[DLT_OPTIM_MAX_GROUPS];
    double beta1, beta2, eps;
    int32_t n, n_groups, final_launch, decoupled, maximize, has_sched;
    dlt_optim_dev *st;
    int32_t *steps;
    const float *found_inf;
    const float *clip_coef; /* fused clipping's coefficient, or NULL */
    dlt_lr_schedule sched;
};
static_assert(sizeof(AdamArgs) <= 32000, "Adam kernel arguments exceed the 32 KB parameter limit");

__device__ __forceinline__ void store_lp(__half *H, __nv_bfloat16 *BF, int64_t i, float4 pv) {
    if (H) {
        __half2 lo = __floats2half2_rn(pv.x, pv.y), hi = __floats2half2_rn(pv.z, pv.w);
        uint2 u;
        u.x = *reinterpret_cast<uint32_t *>(&lo);
        u.y = *reinterpret_cast<uint32_t *>(&hi);
        *reinterpret_cast<uint2 *>(H + i) = u;
    }
    if (BF) {
        __nv_bfloat162 lo = __floats2bfloat162_rn(pv.x, pv.y), hi = __floats2bfloat162_rn(pv.z, pv.w);
        uint2 u;
        u.x = *reinterpret_cast<uint32_t *>(&lo);
        u.y = *reinterpret_cast<uint32_t *>(&hi);
        *reinterpret_cast<uint2 *>(BF + i) = u;
    }
}

__global__ void __launch_bounds__(kThreads) adamw_kernel(const __grid_constant__ AdamArgs a) {
    __shared__ int s_last;
    const bool skip = a.found_inf != nullptr && *a.found_inf != 0.0f;
    if (!skip && a.n > 0) {
        const int blk = (int)blockIdx.x;
        int lo = 0, hi = a.n - 1; /* last t with chunk0[t] <= blk (skips empty tensors) */
        while (lo < hi) {
            int mid = (lo + hi + 1) >> 1;
            if (a.chunk0[mid] <= blk) lo = mid;
            else hi = mid - 1;
        }
        const int t = lo;
        const int64_t start = (int64_t)(blk - a.chunk0[t]) * kChunk;
        const int64_t end = min(start + (int64_t)kChunk, a.numel[t]);
        const int g = a.grp[t];
        dlt_adamw_scalars s;
        dlt__adamw_scalars(&s, (double)*dlt__optim_lr_at(a.st, g), a.wd[g], a.decoupled, a.maximize,
                           a.beta1, a.beta2, a.eps, (int64_t)a.steps[a.slot[t]] + 1);
        float *P = a.p[t], *M = a.m[t], *V = a.v[t];
        const float *G = a.g[t];
        __half *H = a.h[t];
        __nv_bfloat16 *BF = a.bf[t];
        /* fused clipping: g * coef, the bits clip_grad_norm's scale_kernel leaves in the
         * gradient; coef read once per block. The argument itself is tested at each use: a
         * bool copy made ptxas spill (tests/scripts/cuda_local_memory.sh) */
        const float cc = a.clip_coef ? *a.clip_coef : 1.0f;
        int64_t tail = start;
        if (a.vec[t]) {
            const int64_t nv = (end - start) >> 2;
            for (int64_t q = threadIdx.x; q < nv; q += kThreads) {
                const int64_t i = start + 4 * q;
                float4 pv = *reinterpret_cast<const float4 *>(P + i);
                float4 gv = *reinterpret_cast<const float4 *>(G + i);
                if (a.clip_coef) {
                    gv.x = __fmul_rn(gv.x, cc);
                    gv.y = __fmul_rn(gv.y, cc);
                    gv.z = __fmul_rn(gv.z, cc);
                    gv.w = __fmul_rn(gv.w, cc);
                }
                float4 mv = *reinterpret_cast<const float4 *>(M + i);
                float4 vv = *reinterpret_cast<const float4 *>(V + i);
                pv.x = dlt__adamw_elem(&s, pv.x, gv.x, &mv.x, &vv.x);
                pv.y = dlt__adamw_elem(&s, pv.y, gv.y, &mv.y, &vv.y);
                pv.z = dlt__adamw_elem(&s, pv.z, gv.z, &mv.z, &vv.z);
                pv.w = dlt__adamw_elem(&s, pv.w, gv.w, &mv.w, &vv.w);
                *reinterpret_cast<float4 *>(P + i) = pv;
                *reinterpret_cast<float4 *>(M + i) = mv;
                *reinterpret_cast<float4 *>(V + i) = vv;
                store_lp(H, BF, i, pv);
            }
            tail = start + 4 * nv;
        }
        for (int64_t i = tail + threadIdx.x; i < end; i += kThreads) {
            float mv = M[i], vv = V[i];
            const float gv = a.clip_coef ? __fmul_rn(G[i], cc) : G[i];
            const float pv = dlt__adamw_elem(&s, P[i], gv, &mv, &vv);
            P[i] = pv;
            M[i] = mv;
            V[i] = vv;
            if (H) H[i] = __float2half_rn(pv);
            if (BF) BF[i] = __float2bfloat16_rn(pv);
        }
    }

    /* epilogue in the last block to finish */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(&a.st->done_blocks, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    if (!skip)
        for (int i = threadIdx.x; i < a.n; i += kThreads) a.steps[a.slot[i]] += 1;
    if (threadIdx.x == 0) {
        dlt_optim_dev *st = a.st;
        st->done_blocks = 0; /* ready for the next launch (stream order) */
        if (a.final_launch) {
            if (skip) {
                st->last_applied = 0;
            } else {
                const int64_t step = dlt__step_next(st->step);
                st->step = step;
                st->last_applied = 1;
                if (a.has_sched)
                    for (int32_t g = 0; g < a.n_groups; g++)
                        *dlt__optim_lr_at(st, g) =
                            (float)dlt__lr_schedule_eval(&a.sched, *dlt__optim_base_at(st, g), step);
            }
        }
    }
}

inline bool aligned(const void *p, size_t n) { return ((uintptr_t)p & (n - 1)) == 0; }

} // namespace

extern "C" {

dlt_status dlt__cuda_adamw_step(dlt_ctx *ctx, const dlt_adamw_launch *L) {
    static const char *F = "dlt_optimizer_step";
    /* ~17 KB of arguments: on the heap, not the stack (the runtime copies them at launch) */
    AdamArgs *args = (AdamArgs *)malloc(sizeof(AdamArgs));
    if (!args) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate launch arguments");
    memset(args, 0, sizeof *args);
    for (int32_t g = 0; g < L->n_groups && g < DLT_OPTIM_MAX_GROUPS; g++) args->wd[g] = L->weight_decay[g];
    args->beta1 = L->beta1;
    args->beta2 = L->beta2;
    args->eps = L->eps;
    args->n_groups = L->n_groups;
    args->decoupled = L->decoupled;
    args->maximize = L->maximize;
    args->st = (dlt_optim_dev *)L->state;
    args->steps = (int32_t *)L->steps;
    args->found_inf = (const float *)L->found_inf;
    args->clip_coef = (const float *)L->clip_coef;
    args->has_sched = L->schedule != nullptr;
    if (L->schedule) args->sched = *L->schedule;
    cudaStream_t stream = dlt__stream(ctx);
    int32_t i = 0;
    dlt_status st = DLT_OK;
    do {
        int32_t n = 0;
        int64_t chunks = 0;
        while (i < L->n && n < kCap) {
            const dlt_tensor *p = L->params[i];
            const int64_t c = (p->numel + kChunk - 1) / kChunk;
            if (chunks + c > INT32_MAX) {
                if (n == 0) {
                    st = dlt__err(DLT_ERR_NOT_SUPPORTED, F, "parameter of %lld elements is too large",
                                  (long long)p->numel);
                    goto done;
                }
                break;
            }
            float *pp = (float *)dlt__data(p);
            const float *gp = (const float *)dlt__data(L->grads[i]);
            float *mp = (float *)dlt__data(L->exp_avg[i]);
            float *vp = (float *)dlt__data(L->exp_avg_sq[i]);
            __half *hp = L->lp_copies[2 * i] ? (__half *)dlt__data(L->lp_copies[2 * i]) : nullptr;
            __nv_bfloat16 *bfp =
                L->lp_copies[2 * i + 1] ? (__nv_bfloat16 *)dlt__data(L->lp_copies[2 * i + 1]) : nullptr;
            args->p[n] = pp;
            args->g[n] = gp;
            args->m[n] = mp;
            args->v[n] = vp;
            args->h[n] = hp;
            args->bf[n] = bfp;
            args->numel[n] = p->numel;
            args->chunk0[n] = (int32_t)chunks;
            args->slot[n] = L->index[i];
            args->grp[n] = (uint8_t)L->group[i];
            args->vec[n] = aligned(pp, 16) && aligned(gp, 16) && aligned(mp, 16) && aligned(vp, 16) &&
                           (!hp || aligned(hp, 8)) && (!bfp || aligned(bfp, 8));
            chunks += c;
            n++;
            i++;
        }
        args->chunk0[n] = (int32_t)chunks;
        args->n = n;
        args->final_launch = i >= L->n;
        adamw_kernel<<<chunks > 0 ? (unsigned)chunks : 1u, kThreads, 0, stream>>>(*args);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) {
            st = dlt__cuda_fail(ctx, e, F, "adamw_kernel launch");
            goto done;
        }
    } while (i < L->n);
done:
    free(args);
    return st;
}

} // extern "C"
