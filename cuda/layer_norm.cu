/*
 * layer_norm.cu - CUDA layer norm over the rows of [M, N] (lib/ops/layer_norm.c), fp32
 * math, weight/bias of any float dtype or absent:
 *   forward   one warp per row: mean, then the biased variance around it (two passes over
 *             the row, which stays in L1/L2), rstd = rsqrt(var + eps), then y;
 *   backward  dx: one warp per row (the two row means of g = u*w and g*xhat, then dx);
 *             dw/db: deterministic two-level column sums, the rows split into at most
 *             LN_CHUNKS chunks summed by one thread per (chunk, column) into scratch, then
 *             one thread per column adds the chunks in order (and beta * the old value).
 * Compile-checked; first run on a GPU is the next session's.
 */
#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

#define LN_CHUNKS 128

template <typename T>
__global__ void ln_fwd_kernel(T *y, float *mean, float *rstd, const T *x, const void *w, int tw, const void *b, int tb,
                              int64_t M, int64_t N, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = first; r < M; r += step) {
        const T *xr = x + r * N;
        float s = 0.0f;
        for (int64_t j = lane; j < N; j += 32) s += to_f<T>(xr[j]);
        const float mu = warp_sum_f(s) / (float)N;
        float v = 0.0f;
        for (int64_t j = lane; j < N; j += 32) {
            const float d = to_f<T>(xr[j]) - mu;
            v += d * d;
        }
        const float rs = rsqrtf(warp_sum_f(v) / (float)N + eps);
        if (lane == 0) {
            mean[r] = mu;
            rstd[r] = rs;
        }
        for (int64_t j = lane; j < N; j += 32) {
            float o = (to_f<T>(xr[j]) - mu) * rs;
            if (w) o *= ld_dt(w, tw, j);
            if (b) o += ld_dt(b, tb, j);
            y[r * N + j] = from_f<T>(o);
        }
    }
}

template <typename T>
__global__ void ln_bwd_dx_kernel(T *dx, const T *dy, const T *x, const float *mean, const float *rstd, const void *w,
                                 int tw, int64_t M, int64_t N) {
    const int lane = threadIdx.x & 31;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = first; r < M; r += step) {
        const int64_t base = r * N;
        const float mu = mean[r], rs = rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t j = lane; j < N; j += 32) {
            const float g = to_f<T>(dy[base + j]) * (w ? ld_dt(w, tw, j) : 1.0f);
            sg += g;
            sgx += g * (to_f<T>(x[base + j]) - mu) * rs;
        }
        sg = warp_sum_f(sg) / (float)N;
        sgx = warp_sum_f(sgx) / (float)N;
        for (int64_t j = lane; j < N; j += 32) {
            const float g = to_f<T>(dy[base + j]) * (w ? ld_dt(w, tw, j) : 1.0f);
            const float xh = (to_f<T>(x[base + j]) - mu) * rs;
            dx[base + j] = from_f<T>(rs * (g - sg - xh * sgx));
        }
    }
}

/* partial[c][j] (dw) and partial[chunks + c][j] (db) over the rows of chunk c */
template <typename T>
__global__ void ln_bwd_partial_kernel(float *partial, const T *dy, const T *x, const float *mean, const float *rstd,
                                      int64_t M, int64_t N, int64_t rows_per_chunk, int chunks) {
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int c = (int)blockIdx.y;
    if (j >= N) return;
    const int64_t r0 = (int64_t)c * rows_per_chunk, r1 = r0 + rows_per_chunk < M ? r0 + rows_per_chunk : M;
    float aw = 0.0f, ab = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        const float u = to_f<T>(dy[r * N + j]);
        ab += u;
        aw += u * (to_f<T>(x[r * N + j]) - mean[r]) * rstd[r];
    }
    partial[(int64_t)c * N + j] = aw;
    partial[(int64_t)(chunks + c) * N + j] = ab;
}

__global__ void ln_bwd_final_kernel(void *dw, int tdw, void *db, int tdb, const float *partial, int64_t N, int chunks,
                                    int beta) {
    DLT_GRID_STRIDE(j, N) {
        float aw = 0.0f, ab = 0.0f;
        for (int c = 0; c < chunks; c++) {
            aw += partial[(int64_t)c * N + j];
            ab += partial[(int64_t)(chunks + c) * N + j];
        }
        if (dw) st_dt(dw, tdw, j, aw + (beta ? ld_dt(dw, tdw, j) : 0.0f));
        if (db) st_dt(db, tdb, j, ab + (beta ? ld_dt(db, tdb, j) : 0.0f));
    }
}

} // namespace

extern "C" {

dlt_status dlt__cuda_ln_fwd(dlt_ctx *ctx, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd, const dlt_tensor *x,
                            const dlt_tensor *w, const dlt_tensor *b, int64_t M, int64_t N, double eps) {
    DLT_CHECK(same_dtype("dlt_layer_norm", x->dtype, y));
    DLT_CHECK(same_dtype("dlt_layer_norm", DLT_F32, mean, rstd));
    DLT_DISPATCH_FLOAT(x->dtype, T,
        ln_fwd_kernel<T><<<grid_for(M * 32, 256), 256, 0, dlt__stream(ctx)>>>(
            (T *)dlt__data(y), (float *)dlt__data(mean), (float *)dlt__data(rstd), (const T *)dlt__data(x),
            w ? dlt__data(w) : nullptr, w ? w->dtype : 0, b ? dlt__data(b) : nullptr, b ? b->dtype : 0, M, N,
            (float)eps));
    DLT_CU_LAUNCHED(ctx, "dlt_layer_norm");
    return DLT_OK;
}

dlt_status dlt__cuda_ln_bwd(dlt_ctx *ctx, dlt_tensor *dx, dlt_tensor *dw, dlt_tensor *db, int32_t beta_acc,
                            const dlt_tensor *dy, const dlt_tensor *x, const dlt_tensor *mean, const dlt_tensor *rstd,
                            const dlt_tensor *w, int64_t M, int64_t N) {
    cudaStream_t st = dlt__stream(ctx);
    DLT_CHECK(same_dtype("dlt_layer_norm_backward", x->dtype, dx, dy));
    DLT_CHECK(same_dtype("dlt_layer_norm_backward", DLT_F32, mean, rstd));
    DLT_DISPATCH_FLOAT(x->dtype, T,
        ln_bwd_dx_kernel<T><<<grid_for(M * 32, 256), 256, 0, st>>>(
            (T *)dlt__data(dx), (const T *)dlt__data(dy), (const T *)dlt__data(x), (const float *)dlt__data(mean),
            (const float *)dlt__data(rstd), w ? dlt__data(w) : nullptr, w ? w->dtype : 0, M, N));
    DLT_CU_LAUNCHED(ctx, "dlt_layer_norm_backward");
    if (!dw && !db) return DLT_OK;
    const int chunks = (int)(M < LN_CHUNKS ? M : LN_CHUNKS);
    const int64_t rows_per_chunk = (M + chunks - 1) / chunks;
    void *scratch = NULL;
    DLT_CHECK(dlt__cuda_scratch(ctx, (size_t)2 * chunks * N * sizeof(float), &scratch));
    const dim3 grid((unsigned)((N + 127) / 128), (unsigned)chunks);
    DLT_DISPATCH_FLOAT(x->dtype, T,
        ln_bwd_partial_kernel<T><<<grid, 128, 0, st>>>((float *)scratch, (const T *)dlt__data(dy),
                                                       (const T *)dlt__data(x), (const float *)dlt__data(mean),
                                                       (const float *)dlt__data(rstd), M, N, rows_per_chunk, chunks));
    DLT_CU_LAUNCHED(ctx, "dlt_layer_norm_backward");
    ln_bwd_final_kernel<<<grid_for(N, 256), 256, 0, st>>>(dw ? dlt__data(dw) : nullptr, dw ? dw->dtype : 0,
                                                          db ? dlt__data(db) : nullptr, db ? db->dtype : 0,
                                                          (const float *)scratch, N, chunks, beta_acc);
    DLT_CU_LAUNCHED(ctx, "dlt_layer_norm_backward");
    return DLT_OK;
}

} // extern "C"
