/*
 * sgd.cu - the SGD step as one multi-tensor kernel launch, and the optimizer's state writes.
 *
 * Arithmetic (same as lib/cpu/sgd.c, PyTorch's foreach kernels in fp32): scalars rounded to
 * f32, a + alpha*b as one FMA (__fmaf_rn: nvcc contracts PyTorch's `a + alpha * b` the same
 * way), buf*momentum rounded on its own (__fmul_rn keeps it out of an FMA).
 *
 * Launch layout: every parameter is cut into chunks of kChunk elements; block b handles
 * chunk b of the launch (binary search over the per-tensor first-chunk table). The
 * per-tensor pointers, sizes and flags travel by value in a __grid_constant__ struct
 * (about 15 KB for kCap tensors: kernel parameters up to 32764 bytes need CUDA 12.1+ on
 * sm_70+, which the CUDA 13 runtime guarantees), so a captured graph replays with no
 * host-side metadata. More than kCap parameters take several launches.
 *
 * Fused clipping (dlt_optimizer_set_clip_grad_norm): with clip_coef set, every block reads
 * the coefficient the norm pass (clip_grad_norm.cu) left on the device and uses g * coef in
 * place of g (the gradient is written only in the nesterov case above, as without it).
 *
 * Device-side decisions: every block reads found_inf and skips its chunk when it is set;
 * the last block to finish (a ticket from an atomic counter in the state block) runs the
 * epilogue: mark the momentum buffers of this launch as holding data, and in the final
 * launch advance the applied-step count, set last_applied and evaluate the lr schedule.
 * All blocks read lr and the buffer flags before taking their ticket, so the epilogue's
 * writes cannot race with them, and the step needs no second kernel.
 *
 * Vectorised: float4 loads/stores of param, grad and buffer (and 4-element stores of the
 * f16/bf16 copies) when the host found every pointer of a tensor aligned; chunk starts are
 * multiples of 4 elements, so only a tensor's tail is scalar.
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
constexpr int kCap = 256;    /* tensors per launch: ResNet50 (161 parameters) is one launch */

struct SgdArgs {
    float *p[kCap];
    float *g[kCap];
    float *b[kCap];
    __half *h[kCap];
    __nv_bfloat16 *bf[kCap];
    int64_t numel[kCap];
    int32_t chunk0[kCap + 1]; /* first chunk of tensor t; chunk0[n] = total */
    int32_t flag[kCap];       /* index into flags (buffer flag of the parameter) */
    uint8_t vec[kCap];        /* 1: every pointer of tensor t allows 16-byte access */
    int32_t n;
    int32_t final_launch;
    int32_t use_wd, nesterov, maximize, write_grad, has_sched;
    float mu, damp, wd;
    dlt_optim_dev *st;
    int32_t *flags;
    const float *found_inf;
    const float *clip_coef; /* fused clipping's coefficient, or NULL */
    dlt_lr_schedule sched;
};
static_assert(sizeof(SgdArgs) <= 32000, "SGD kernel arguments exceed the 32 KB parameter limit");

struct Hyper {
    float neg_lr, mu, damp, wd, coef;
    bool use_wd, has_b, first, nesterov, maximize, write_grad, clip;
};

/* One element: returns the new parameter; updates b and (PyTorch's foreach nesterov case)
 * g in place through the references. */
__device__ __forceinline__ float sgd_elem(const Hyper &k, float p, float &g, float &b) {
    const float gc = k.clip ? __fmul_rn(g, k.coef) : g; /* fused clipping: g * coef */
    float d = k.maximize ? -gc : gc;
    if (k.use_wd) d = __fmaf_rn(k.wd, p, d);
    if (k.has_b) {
        float bv = k.first ? d : __fmaf_rn(k.damp, d, __fmul_rn(b, k.mu));
        b = bv;
        d = k.nesterov ? __fmaf_rn(k.mu, bv, d) : bv;
        if (k.write_grad) g = d;
    }
    return __fmaf_rn(k.neg_lr, d, p);
}

__global__ void __launch_bounds__(kThreads) sgd_kernel(const __grid_constant__ SgdArgs a) {
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
        Hyper k;
        k.neg_lr = -a.st->lr;
        k.mu = a.mu;
        k.damp = a.damp;
        k.wd = a.wd;
        k.use_wd = a.use_wd;
        k.has_b = a.b[t] != nullptr;
        k.first = k.has_b && a.flags[a.flag[t]] == 0;
        k.nesterov = a.nesterov;
        k.maximize = a.maximize;
        k.write_grad = a.write_grad && k.has_b;
        k.clip = a.clip_coef != nullptr;
        k.coef = k.clip ? *a.clip_coef : 1.0f; /* once per block */
        float *P = a.p[t], *G = a.g[t], *B = a.b[t];
        __half *H = a.h[t];
        __nv_bfloat16 *BF = a.bf[t];
        int64_t tail = start;
        if (a.vec[t]) {
            const int64_t nv = (end - start) >> 2;
            for (int64_t v = threadIdx.x; v < nv; v += kThreads) {
                const int64_t i = start + 4 * v;
                float4 pv = *reinterpret_cast<const float4 *>(P + i);
                float4 gv = *reinterpret_cast<const float4 *>(G + i);
                float4 bv = k.has_b ? *reinterpret_cast<const float4 *>(B + i) : make_float4(0, 0, 0, 0);
                pv.x = sgd_elem(k, pv.x, gv.x, bv.x);
                pv.y = sgd_elem(k, pv.y, gv.y, bv.y);
                pv.z = sgd_elem(k, pv.z, gv.z, bv.z);
                pv.w = sgd_elem(k, pv.w, gv.w, bv.w);
                *reinterpret_cast<float4 *>(P + i) = pv;
                if (k.has_b) *reinterpret_cast<float4 *>(B + i) = bv;
                if (k.write_grad) *reinterpret_cast<float4 *>(G + i) = gv;
                if (H) {
                    __half2 lo2 = __floats2half2_rn(pv.x, pv.y), hi2 = __floats2half2_rn(pv.z, pv.w);
                    uint2 u;
                    u.x = *reinterpret_cast<uint32_t *>(&lo2);
                    u.y = *reinterpret_cast<uint32_t *>(&hi2);
                    *reinterpret_cast<uint2 *>(H + i) = u;
                }
                if (BF) {
                    __nv_bfloat162 lo2 = __floats2bfloat162_rn(pv.x, pv.y), hi2 = __floats2bfloat162_rn(pv.z, pv.w);
                    uint2 u;
                    u.x = *reinterpret_cast<uint32_t *>(&lo2);
                    u.y = *reinterpret_cast<uint32_t *>(&hi2);
                    *reinterpret_cast<uint2 *>(BF + i) = u;
                }
            }
            tail = start + 4 * nv;
        }
        for (int64_t i = tail + threadIdx.x; i < end; i += kThreads) {
            float gv = G[i], bv = k.has_b ? B[i] : 0.0f;
            float pv = sgd_elem(k, P[i], gv, bv);
            P[i] = pv;
            if (k.has_b) B[i] = bv;
            if (k.write_grad) G[i] = gv;
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
        for (int i = threadIdx.x; i < a.n; i += kThreads)
            if (a.b[i]) a.flags[a.flag[i]] = 1;
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
                if (a.has_sched) st->lr = (float)dlt__lr_schedule_eval(&a.sched, st->base_lr, step);
            }
        }
    }
}

__global__ void sgd_state_kernel(dlt_optim_dev *d, const __grid_constant__ dlt_optim_state_op op) {
    dlt__optim_state_apply(d, &op);
}

inline bool aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

} // namespace

extern "C" {

dlt_status dlt__cuda_sgd_step(dlt_ctx *ctx, const dlt_sgd_launch *L) {
    static const char *F = "dlt_optimizer_step";
    /* ~10 KB of arguments: on the heap, not the stack (the runtime copies them at launch) */
    SgdArgs *args = (SgdArgs *)malloc(sizeof(SgdArgs));
    if (!args) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate launch arguments");
    memset(args, 0, sizeof *args);
    args->use_wd = L->weight_decay != 0.0;
    args->nesterov = L->nesterov;
    args->maximize = L->maximize;
    args->write_grad = L->bufs && L->nesterov && !L->maximize && !args->use_wd;
    args->mu = (float)L->momentum;
    args->damp = (float)(1.0 - L->dampening);
    args->wd = (float)L->weight_decay;
    args->st = (dlt_optim_dev *)L->state;
    args->flags = (int32_t *)L->buf_init;
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
            float *gp = (float *)dlt__data(L->grads[i]);
            float *bp = L->bufs && L->bufs[i] ? (float *)dlt__data(L->bufs[i]) : nullptr;
            __half *hp = L->lp_copies[2 * i] ? (__half *)dlt__data(L->lp_copies[2 * i]) : nullptr;
            __nv_bfloat16 *bfp = L->lp_copies[2 * i + 1] ? (__nv_bfloat16 *)dlt__data(L->lp_copies[2 * i + 1]) : nullptr;
            args->p[n] = pp;
            args->g[n] = gp;
            args->b[n] = bp;
            args->h[n] = hp;
            args->bf[n] = bfp;
            args->numel[n] = p->numel;
            args->chunk0[n] = (int32_t)chunks;
            args->flag[n] = L->buf_index[i];
            args->vec[n] = aligned(pp, 16) && aligned(gp, 16) && (!bp || aligned(bp, 16)) &&
                           (!hp || aligned(hp, 8)) && (!bfp || aligned(bfp, 8));
            chunks += c;
            n++;
            i++;
        }
        args->chunk0[n] = (int32_t)chunks;
        args->n = n;
        args->final_launch = i >= L->n;
        sgd_kernel<<<chunks > 0 ? (unsigned)chunks : 1u, kThreads, 0, stream>>>(*args);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) {
            st = dlt__cuda_fail(ctx, e, F, "sgd_kernel launch");
            goto done;
        }
    } while (i < L->n);
done:
    free(args);
    return st;
}

dlt_status dlt__cuda_sgd_state(dlt_ctx *ctx, void *state, const dlt_optim_state_op *op) {
    sgd_state_kernel<<<1, 1, 0, dlt__stream(ctx)>>>((dlt_optim_dev *)state, *op);
    DLT_CU_LAUNCHED(ctx, "dlt_optimizer_state");
    return DLT_OK;
}

} // extern "C"
