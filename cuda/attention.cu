/*
 * attention.cu - CUDA scaled dot-product attention (lib/ops/attention.c), the reference
 * kernels: one warp per query row (forward, dq) or per key row (dk, dv), head dim up to 256
 * held in registers (DPL values per lane), online softmax in fp32, no T x S matrix:
 *   forward  for each key j <= last: s = scale q.k_j; running max m and normaliser l;
 *            acc = acc * exp(m_old - m) + exp(s - m) z_j v_j; o = acc / l, lse = m + log l
 *            (z_j: the dropout multiplier, l counts the weights before dropout, as PyTorch);
 *   backward Di = dO_i . O_i (a small kernel into scratch), then
 *            dq_i = scale sum_j p_ij (z_ij dO_i.v_j - Di) k_j               (warp per i)
 *            dv_j = sum_i p_ij z_ij dO_i, dk_j = scale sum_i ds_ij q_i     (warp per j)
 *            with p_ij = exp(scale q_i.k_j - lse_i) recomputed.
 * Dropout draws are lib/kernel/philox.h's for element ((b*H+h)*T+i)*S+j at the offset plus
 * *rng_base, the CPU's numbers. Deterministic (no atomics). These kernels are the
 * correctness path and the fallback. The launchers try cuDNN's fused flash attention first
 * (attention_cudnn.c), then our tensor-core kernels (attention_flash.cu), then these.
 */
#include "../lib/kernel/philox.h"
#include "attention_cudnn.h"
#include "attention_flash.h"
#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

__device__ __forceinline__ float zmul(const dlt_sdpa_params &p, uint64_t off, int64_t bh, int64_t i, int64_t j,
                                      float keep_scale) {
    if (p.dropout_p <= 0.0) return 1.0f;
    const uint64_t e = (uint64_t)((bh * p.T + i) * p.S + j);
    return dlt__philox_uniform(p.seed, off, e) >= (float)p.dropout_p ? keep_scale : 0.0f;
}

template <typename T, int DPL>
__device__ __forceinline__ void load_row(float (&r)[DPL], const T *row, int64_t D, int lane) {
#pragma unroll
    for (int t = 0; t < DPL; t++) {
        const int64_t d = lane + 32 * t;
        r[t] = d < D ? to_f<T>(row[d]) : 0.0f;
    }
}

template <int DPL> __device__ __forceinline__ float dot_row(const float (&a)[DPL], const float (&b)[DPL]) {
    float s = 0.0f;
#pragma unroll
    for (int t = 0; t < DPL; t++) s += a[t] * b[t];
    return warp_sum_f(s);
}

template <typename T, int DPL>
__global__ void sdpa_fwd_kernel(T *o, float *lse, const T *q, const T *k, const T *v, dlt_sdpa_params p,
                                const uint64_t *base, float keep_scale) {
    const int lane = threadIdx.x & 31;
    const int64_t rows = p.B * p.H * p.T;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const uint64_t off = p.offset + (p.dropout_p > 0.0 ? *base : 0);
    const float scale = (float)p.scale;
    for (int64_t r = first; r < rows; r += step) {
        const int64_t bh = r / p.T, i = r - bh * p.T;
        const int64_t last = p.causal ? (i < p.S - 1 ? i : p.S - 1) : p.S - 1;
        float qr[DPL], acc[DPL], kr[DPL], vr[DPL];
        load_row<T, DPL>(qr, q + r * p.D, p.D, lane);
#pragma unroll
        for (int t = 0; t < DPL; t++) acc[t] = 0.0f;
        float m = -INFINITY, l = 0.0f;
        for (int64_t j = 0; j <= last; j++) {
            const int64_t kb = (bh * p.S + j) * p.D;
            load_row<T, DPL>(kr, k + kb, p.D, lane);
            const float s = dot_row<DPL>(qr, kr) * scale;
            const float mn = s > m ? s : m;
            const float corr = expf(m - mn), e = expf(s - mn);
            l = l * corr + e;
            const float w = e * zmul(p, off, bh, i, j, keep_scale);
            load_row<T, DPL>(vr, v + kb, p.D, lane);
#pragma unroll
            for (int t = 0; t < DPL; t++) acc[t] = acc[t] * corr + w * vr[t];
            m = mn;
        }
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
        for (int t = 0; t < DPL; t++) {
            const int64_t d = lane + 32 * t;
            if (d < p.D) o[r * p.D + d] = from_f<T>(acc[t] * inv);
        }
        if (lane == 0) lse[r] = m + logf(l);
    }
}

/* Di = dO_i . O_i, row i = (b H + h) T + t of [B,H,T,D], or with p.qkv_packed at row
 * b T + t, head h of [B,T,H,D] */
template <typename T, int DPL>
__global__ void sdpa_delta_kernel(float *delta, const T *dout, const T *o, dlt_sdpa_params p) {
    const int lane = threadIdx.x & 31;
    const int64_t rows = p.B * p.H * p.T;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = first; r < rows; r += step) {
        int64_t at = r * p.D;
        if (p.qkv_packed) {
            const int64_t bh = r / p.T, t = r - bh * p.T, b = bh / p.H;
            at = ((b * p.T + t) * p.H + (bh - b * p.H)) * p.D;
        }
        float a[DPL], b[DPL];
        load_row<T, DPL>(a, dout + at, p.D, lane);
        load_row<T, DPL>(b, o + at, p.D, lane);
        const float d = dot_row<DPL>(a, b);
        if (lane == 0) delta[r] = d;
    }
}

template <typename T, int DPL>
__global__ void sdpa_dq_kernel(T *dq, const T *dout, const T *q, const T *k, const T *v, const float *lse,
                               const float *delta, dlt_sdpa_params p, const uint64_t *base, float keep_scale) {
    const int lane = threadIdx.x & 31;
    const int64_t rows = p.B * p.H * p.T;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const uint64_t off = p.offset + (p.dropout_p > 0.0 ? *base : 0);
    const float scale = (float)p.scale;
    for (int64_t r = first; r < rows; r += step) {
        const int64_t bh = r / p.T, i = r - bh * p.T;
        const int64_t last = p.causal ? (i < p.S - 1 ? i : p.S - 1) : p.S - 1;
        float qr[DPL], dor[DPL], g[DPL], kr[DPL], vr[DPL];
        load_row<T, DPL>(qr, q + r * p.D, p.D, lane);
        load_row<T, DPL>(dor, dout + r * p.D, p.D, lane);
#pragma unroll
        for (int t = 0; t < DPL; t++) g[t] = 0.0f;
        const float ls = lse[r], di = delta[r];
        for (int64_t j = 0; j <= last; j++) {
            const int64_t kb = (bh * p.S + j) * p.D;
            load_row<T, DPL>(kr, k + kb, p.D, lane);
            load_row<T, DPL>(vr, v + kb, p.D, lane);
            const float pij = expf(dot_row<DPL>(qr, kr) * scale - ls);
            const float ds = pij * (zmul(p, off, bh, i, j, keep_scale) * dot_row<DPL>(dor, vr) - di);
#pragma unroll
            for (int t = 0; t < DPL; t++) g[t] += ds * kr[t];
        }
#pragma unroll
        for (int t = 0; t < DPL; t++) {
            const int64_t d = lane + 32 * t;
            if (d < p.D) dq[r * p.D + d] = from_f<T>(g[t] * scale);
        }
    }
}

template <typename T, int DPL>
__global__ void sdpa_dkv_kernel(T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v, const float *lse,
                                const float *delta, dlt_sdpa_params p, const uint64_t *base, float keep_scale) {
    const int lane = threadIdx.x & 31;
    const int64_t rows = p.B * p.H * p.S;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const uint64_t off = p.offset + (p.dropout_p > 0.0 ? *base : 0);
    const float scale = (float)p.scale;
    for (int64_t r = first; r < rows; r += step) {
        const int64_t bh = r / p.S, j = r - bh * p.S;
        float kr[DPL], vr[DPL], gk[DPL], gv[DPL], qr[DPL], dor[DPL];
        load_row<T, DPL>(kr, k + r * p.D, p.D, lane);
        load_row<T, DPL>(vr, v + r * p.D, p.D, lane);
#pragma unroll
        for (int t = 0; t < DPL; t++) gk[t] = gv[t] = 0.0f;
        for (int64_t i = p.causal ? j : 0; i < p.T; i++) {
            const int64_t qrow = bh * p.T + i;
            load_row<T, DPL>(qr, q + qrow * p.D, p.D, lane);
            load_row<T, DPL>(dor, dout + qrow * p.D, p.D, lane);
            const float pij = expf(dot_row<DPL>(qr, kr) * scale - lse[qrow]);
            const float z = zmul(p, off, bh, i, j, keep_scale);
            const float ds = pij * (z * dot_row<DPL>(dor, vr) - delta[qrow]);
#pragma unroll
            for (int t = 0; t < DPL; t++) {
                gv[t] += pij * z * dor[t];
                gk[t] += ds * qr[t];
            }
        }
#pragma unroll
        for (int t = 0; t < DPL; t++) {
            const int64_t d = lane + 32 * t;
            if (d < p.D) {
                dk[r * p.D + d] = from_f<T>(gk[t] * scale);
                dv[r * p.D + d] = from_f<T>(gv[t]);
            }
        }
    }
}

/* DPL = values per lane for head dim D (<= 256) */
#define DLT_SDPA_DPL(D, DPL, ...)                                                             \
    do {                                                                                      \
        if ((D) <= 32) { constexpr int DPL = 1; __VA_ARGS__; }                                \
        else if ((D) <= 64) { constexpr int DPL = 2; __VA_ARGS__; }                           \
        else if ((D) <= 128) { constexpr int DPL = 4; __VA_ARGS__; }                          \
        else { constexpr int DPL = 8; __VA_ARGS__; }                                          \
    } while (0)

float keep_scale_of(const dlt_sdpa_params *p) { return p->dropout_p < 1.0 ? (float)(1.0 / (1.0 - p->dropout_p)) : 0.0f; }

/* delta[B*H*T] = rowsum(dO * O) into the context's scratch, on the stream: the first step of
 * every backward path below */
dlt_status delta_of(dlt_ctx *ctx, const dlt_tensor *dout, const dlt_tensor *o, const dlt_sdpa_params *p,
                    const char *F, float **delta) {
    const int64_t rows_q = p->B * p->H * p->T;
    void *scratch = NULL;
    DLT_CHECK(dlt__cuda_scratch(ctx, (size_t)rows_q * sizeof(float), &scratch));
    *delta = (float *)scratch;
    cudaStream_t st = dlt__stream(ctx);
    DLT_DISPATCH_FLOAT(o->dtype, T, DLT_SDPA_DPL(p->D, DPL,
        sdpa_delta_kernel<T, DPL><<<grid_for(rows_q * 32, 128), 128, 0, st>>>(*delta, (const T *)dlt__data(dout),
                                                                            (const T *)dlt__data(o), *p)));
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

} // namespace

extern "C" {

dlt_status dlt__cuda_sdpa_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *q, const dlt_tensor *k,
                              const dlt_tensor *v, const dlt_sdpa_params *p) {
    static const char *F = "dlt_scaled_dot_product_attention";
    if (p->D > 256) return dlt__err(DLT_ERR_NOT_SUPPORTED, F, "head dimension %lld > 256 on CUDA", (long long)p->D);
    DLT_CHECK(same_dtype(F, q->dtype, k, v, o));
    DLT_CHECK(same_dtype(F, DLT_F32, lse));
    {
        const void *ptrs[5] = {dlt__data(o), dlt__data(q), dlt__data(k), dlt__data(v), dlt__data(lse)};
        if (dlt__cudnn_sdp_ok(ctx, q->dtype, p, ptrs, 5)) {
            int served = 0;
            DLT_CHECK(dlt__cudnn_sdp_fwd(ctx, o, lse, q, k, v, p, &served));
            if (served) return DLT_OK;
        }
        if (dlt__cuda_flash_sdp_ok(ctx, q->dtype, p, ptrs, 4)) return dlt__cuda_flash_sdp_fwd(ctx, o, lse, q, k, v, p);
    }
    const int64_t rows = p->B * p->H * p->T;
    const uint64_t *base = (const uint64_t *)ctx->rng_base;
    const float ks = keep_scale_of(p);
    cudaStream_t st = dlt__stream(ctx);
    DLT_DISPATCH_FLOAT(q->dtype, T, DLT_SDPA_DPL(p->D, DPL,
        sdpa_fwd_kernel<T, DPL><<<grid_for(rows * 32, 128), 128, 0, st>>>(
            (T *)dlt__data(o), (float *)dlt__data(lse), (const T *)dlt__data(q), (const T *)dlt__data(k),
            (const T *)dlt__data(v), *p, base, ks)));
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

dlt_status dlt__cuda_sdpa_bwd(dlt_ctx *ctx, dlt_tensor *dq, dlt_tensor *dk, dlt_tensor *dv, const dlt_tensor *dout,
                              const dlt_tensor *q, const dlt_tensor *k, const dlt_tensor *v, const dlt_tensor *o,
                              const dlt_tensor *lse, const dlt_sdpa_params *p) {
    static const char *F = "dlt_backward(scaled_dot_product_attention)";
    if (p->D > 256) return dlt__err(DLT_ERR_NOT_SUPPORTED, F, "head dimension %lld > 256 on CUDA", (long long)p->D);
    DLT_CHECK(same_dtype(F, q->dtype, k, v, o, dout));
    DLT_CHECK(same_dtype(F, q->dtype, dq, dk, dv));
    DLT_CHECK(same_dtype(F, DLT_F32, lse));
    {
        const void *ptrs[9] = {dlt__data(dq), dlt__data(dk), dlt__data(dv), dlt__data(dout), dlt__data(q),
                                dlt__data(k),  dlt__data(v),  dlt__data(o),  dlt__data(lse)};
        if (dlt__cudnn_sdp_ok(ctx, q->dtype, p, ptrs, 9)) {
            int served = 0;
            DLT_CHECK(dlt__cudnn_sdp_bwd(ctx, dq, dk, dv, dout, q, k, v, o, lse, p, &served));
            if (served) return DLT_OK;
        }
    }
    const int64_t rows_q = p->B * p->H * p->T, rows_k = p->B * p->H * p->S;
    const uint64_t *base = (const uint64_t *)ctx->rng_base;
    const float ks = keep_scale_of(p);
    cudaStream_t st = dlt__stream(ctx);
    float *delta = NULL;
    DLT_CHECK(delta_of(ctx, dout, o, p, F, &delta));
    const void *ptrs[8] = {dlt__data(dq), dlt__data(dk), dlt__data(dv), dlt__data(dout),
                           dlt__data(q),  dlt__data(k),  dlt__data(v),  dlt__data(o)};
    if (dlt__cuda_flash_sdp_ok(ctx, q->dtype, p, ptrs, 8))
        return dlt__cuda_flash_sdp_bwd(ctx, dq, dk, dv, dout, q, k, v, lse, delta, p);
    DLT_DISPATCH_FLOAT(q->dtype, T, DLT_SDPA_DPL(p->D, DPL, {
        sdpa_dq_kernel<T, DPL><<<grid_for(rows_q * 32, 128), 128, 0, st>>>(
            (T *)dlt__data(dq), (const T *)dlt__data(dout), (const T *)dlt__data(q), (const T *)dlt__data(k),
            (const T *)dlt__data(v), (const float *)dlt__data(lse), delta, *p, base, ks);
        sdpa_dkv_kernel<T, DPL><<<grid_for(rows_k * 32, 128), 128, 0, st>>>(
            (T *)dlt__data(dk), (T *)dlt__data(dv), (const T *)dlt__data(dout), (const T *)dlt__data(q),
            (const T *)dlt__data(k), (const T *)dlt__data(v), (const float *)dlt__data(lse), delta, *p, base, ks);
    }));
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

/* The packed layouts (dlt_scaled_dot_product_attention_qkvpacked, p->qkv_packed): cuDNN,
 * else the flash kernels, both reading and writing the packed tensors in place; *served = 0
 * leaves the call to the front door's unpack, attend, pack. */
dlt_status dlt__cuda_sdpa_qkv_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *qkv,
                                  const dlt_sdpa_params *p, int *served) {
    DLT_CHECK(dlt__cudnn_sdp_qkv_fwd(ctx, o, lse, qkv, p, served));
    if (*served) return DLT_OK;
    if (o->dtype != qkv->dtype || lse->dtype != DLT_F32) return DLT_OK; /* the generic path converts */
    const void *ptrs[2] = {dlt__data(o), dlt__data(qkv)};
    if (!dlt__cuda_flash_sdp_ok(ctx, qkv->dtype, p, ptrs, 2)) return DLT_OK;
    DLT_CHECK(dlt__cuda_flash_sdp_fwd(ctx, o, lse, qkv, qkv, qkv, p));
    *served = 1;
    return DLT_OK;
}

dlt_status dlt__cuda_sdpa_qkv_bwd(dlt_ctx *ctx, dlt_tensor *dqkv, const dlt_tensor *dout, const dlt_tensor *qkv,
                                  const dlt_tensor *o, const dlt_tensor *lse, const dlt_sdpa_params *p, int *served) {
    static const char *F = "dlt_backward(scaled_dot_product_attention_qkvpacked)";
    DLT_CHECK(dlt__cudnn_sdp_qkv_bwd(ctx, dqkv, dout, qkv, o, lse, p, served));
    if (*served) return DLT_OK;
    if (dqkv->dtype != qkv->dtype || dout->dtype != qkv->dtype || o->dtype != qkv->dtype || lse->dtype != DLT_F32)
        return DLT_OK; /* an upstream gradient of another dtype: the generic path converts it */
    const void *ptrs[4] = {dlt__data(dqkv), dlt__data(dout), dlt__data(qkv), dlt__data(o)};
    if (!dlt__cuda_flash_sdp_ok(ctx, qkv->dtype, p, ptrs, 4)) return DLT_OK;
    float *delta = NULL;
    DLT_CHECK(delta_of(ctx, dout, o, p, F, &delta));
    DLT_CHECK(dlt__cuda_flash_sdp_bwd(ctx, dqkv, dqkv, dqkv, dout, qkv, qkv, qkv, lse, delta, p));
    *served = 1;
    return DLT_OK;
}

} // extern "C"
