/*
 * layer_norm.cu - CUDA layer norm over the rows of [M, N] (lib/ops/layer_norm.c), fp32
 * math, weight/bias of any float dtype or absent. Two implementations of the same sums:
 *
 * y and dy have x's dtype, or are f16/bf16 with an f32 x (dlt_layer_norm_to: the output
 * rounded once to what autocast's next matmul takes).
 *
 * Row in registers (the common case: N a multiple of the 16-byte vector, N <= 1024,
 * 16-byte aligned rows, weight and bias of x's dtype or f32): one warp per row loads
 * it once with 16-byte loads and keeps it, so the forward reads x once and writes y once,
 * and the backward reads x and dy once and writes dx once. The backward also adds u and
 * u*xhat into per-lane column sums (a lane's columns are the same in every row), which a
 * block adds up warp by warp in shared memory and writes as one partial row per block; the
 * partials are summed in block order. The GPT-2 step spent ~6 ms of 55 in the per-element
 * kernels below (ncu on the H200, 2026-12-02), whose three passes read the row three times
 * with 2- or 4-byte loads.
 *
 * Per element (any N, alignment or dtype mix):
 *   forward   one warp per row: mean, then the biased variance around it (two passes over
 *             the row, which stays in L1/L2), rstd = rsqrt(var + eps), then y;
 *   backward  dx: one warp per row (the two row means of g = u*w and g*xhat, then dx);
 *             dw/db: the rows split into at most LN_CHUNKS chunks summed by one thread per
 *             (chunk, column) into scratch.
 * Both end with ln_bwd_final_kernel: per column the chunks added in a fixed order (and beta *
 * the old value), so dweight and dbias are deterministic.
 */
#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

#define LN_CHUNKS 128

template <typename T, typename TY>
__global__ void ln_fwd_kernel(TY *y, float *mean, float *rstd, const T *x, const void *w, int tw, const void *b, int tb,
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
            y[r * N + j] = from_f<TY>(o);
        }
    }
}

template <typename T, typename TY>
__global__ void ln_bwd_dx_kernel(T *dx, int acc, const TY *dy, const T *x, const float *mean, const float *rstd,
                                 const void *w, int tw, int64_t M, int64_t N) {
    const int lane = threadIdx.x & 31;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = first; r < M; r += step) {
        const int64_t base = r * N;
        const float mu = mean[r], rs = rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t j = lane; j < N; j += 32) {
            const float g = to_f<TY>(dy[base + j]) * (w ? ld_dt(w, tw, j) : 1.0f);
            sg += g;
            sgx += g * (to_f<T>(x[base + j]) - mu) * rs;
        }
        sg = warp_sum_f(sg) / (float)N;
        sgx = warp_sum_f(sgx) / (float)N;
        for (int64_t j = lane; j < N; j += 32) {
            const float g = to_f<TY>(dy[base + j]) * (w ? ld_dt(w, tw, j) : 1.0f);
            const float xh = (to_f<T>(x[base + j]) - mu) * rs;
            const float v = rs * (g - sg - xh * sgx);
            dx[base + j] = from_f<T>(acc ? v + to_f<T>(dx[base + j]) : v);
        }
    }
}

/* partial[c][j] (dw) and partial[chunks + c][j] (db) over the rows of chunk c */
template <typename T, typename TY>
__global__ void ln_bwd_partial_kernel(float *partial, const TY *dy, const T *x, const float *mean, const float *rstd,
                                      int64_t M, int64_t N, int64_t rows_per_chunk, int chunks) {
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int c = (int)blockIdx.y;
    if (j >= N) return;
    const int64_t r0 = (int64_t)c * rows_per_chunk, r1 = r0 + rows_per_chunk < M ? r0 + rows_per_chunk : M;
    float aw = 0.0f, ab = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        const float u = to_f<TY>(dy[r * N + j]);
        ab += u;
        aw += u * (to_f<T>(x[r * N + j]) - mean[r]) * rstd[r];
    }
    partial[(int64_t)c * N + j] = aw;
    partial[(int64_t)(chunks + c) * N + j] = ab;
}

/* Per column j: the chunks' partial sums in a fixed order (deterministic): FIN_ROWS threads
 * per column each add every FIN_ROWS-th chunk, then a tree over their sums. FIN_COLS = 8
 * columns per block (a warp reads 4 chunks x 32 bytes) so that N = 768 makes 96 blocks: with
 * 32 columns per block (24 blocks) the kernel took ~10 us per LayerNorm on an H200, most of
 * it latency. */
constexpr int FIN_COLS = 8, FIN_ROWS = 64;
__global__ void __launch_bounds__(FIN_COLS *FIN_ROWS) ln_bwd_final_kernel(void *dw, int tdw, void *db, int tdb,
                                                                        const float *partial, int64_t N, int chunks,
                                                                        int beta) {
    __shared__ float sw[FIN_ROWS][FIN_COLS], sb[FIN_ROWS][FIN_COLS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t j = (int64_t)blockIdx.x * FIN_COLS + tx;
    float aw = 0.0f, ab = 0.0f;
    if (j < N)
        for (int c = ty; c < chunks; c += FIN_ROWS) {
            aw += partial[(int64_t)c * N + j];
            ab += partial[(int64_t)(chunks + c) * N + j];
        }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    for (int h = FIN_ROWS / 2; h > 0; h >>= 1) {
        if (ty < h) {
            sw[ty][tx] += sw[ty + h][tx];
            sb[ty][tx] += sb[ty + h][tx];
        }
        __syncthreads();
    }
    if (ty != 0 || j >= N) return;
    aw = sw[0][tx];
    ab = sb[0][tx];
    if (dw) st_dt(dw, tdw, j, aw + (beta ? ld_dt(dw, tdw, j) : 0.0f));
    if (db) st_dt(db, tdb, j, ab + (beta ? ld_dt(db, tdb, j) : 0.0f));
}

/* ---- row in registers ---- */

constexpr int LN_VEC_THREADS = 128;  /* 4 warps: a row each */
/* backward blocks, each a row of dweight/dbias partial sums. The kernel is memory-bound and
 * holds 113 registers per thread (f32 rows of 768), so 4 blocks (16 warps) fit an SM: 512
 * blocks keep an H200's 132 SMs full in one wave (256 left them half empty: 1.7 TB/s) */
constexpr int LN_VEC_MAX_BLOCKS = 512;
constexpr int LN_VEC_MAX_ELEMS = 32; /* row elements per lane: the backward keeps 3 such arrays
                                      * in registers (dy, x, the incoming gradient; 148
                                      * registers at 32, ptxas sm_90) */

/* V elements of TY at p (V * sizeof(TY) bytes: 8, 16 or 32, aligned so) to or from floats */
template <typename TY, int V> __device__ __forceinline__ void loadv(float (&o)[V], const TY *p) {
    constexpr int BYTES = V * (int)sizeof(TY);
    static_assert(BYTES == 8 || BYTES % 16 == 0, "8-byte or 16-byte multiples");
    alignas(16) TY e[V];
    if constexpr (BYTES == 8) {
        *reinterpret_cast<uint2 *>(e) = *reinterpret_cast<const uint2 *>(p);
    } else {
#pragma unroll
        for (int k = 0; k < BYTES / 16; k++) reinterpret_cast<uint4 *>(e)[k] = reinterpret_cast<const uint4 *>(p)[k];
    }
#pragma unroll
    for (int i = 0; i < V; i++) o[i] = to_f<TY>(e[i]);
}

template <typename TY, int V> __device__ __forceinline__ void storev(TY *p, const float (&v)[V]) {
    constexpr int BYTES = V * (int)sizeof(TY);
    static_assert(BYTES == 8 || BYTES % 16 == 0, "8-byte or 16-byte multiples");
    alignas(16) TY e[V];
#pragma unroll
    for (int i = 0; i < V; i++) e[i] = from_f<TY>(v[i]);
    if constexpr (BYTES == 8) {
        *reinterpret_cast<uint2 *>(p) = *reinterpret_cast<const uint2 *>(e);
    } else {
#pragma unroll
        for (int k = 0; k < BYTES / 16; k++) reinterpret_cast<uint4 *>(p)[k] = reinterpret_cast<const uint4 *>(e)[k];
    }
}

/* lane's vector t of a row is vector lane + 32 t: present when below nvec */
/* with add (dlt__add_layer_norm_to): the row is x + add, stored to sum (x's dtype) before the
 * statistics are taken from it, the arithmetic and rounding of the separate add kernel */
template <typename T, typename TY, typename W, int NV>
__global__ void __launch_bounds__(LN_VEC_THREADS) ln_fwd_vec_kernel(TY *y, float *mean, float *rstd, const T *x,
                                                                    const W *w, const W *b, int64_t M, int N,
                                                                    float eps, const TY *add, T *sum) {
    constexpr int V = Vec16<T>::N;
    const int lane = threadIdx.x & 31, nvec = N / V;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = first; r < M; r += step) {
        const T *xr = x + r * N;
        float v[NV][V];
        float s = 0.0f;
#pragma unroll
        for (int t = 0; t < NV; t++) {
            const int i = lane + 32 * t;
            if (i < nvec) {
                loadv<T, V>(v[t], xr + (int64_t)i * V);
                if (add) {
                    float a[V];
                    loadv<TY, V>(a, add + r * N + (int64_t)i * V);
#pragma unroll
                    for (int e = 0; e < V; e++) v[t][e] = to_f<T>(from_f<T>(v[t][e] + a[e]));
                    storev<T, V>(sum + r * N + (int64_t)i * V, v[t]);
                }
#pragma unroll
                for (int e = 0; e < V; e++) s += v[t][e];
            }
        }
        const float mu = warp_sum_f(s) / (float)N;
        float q = 0.0f;
#pragma unroll
        for (int t = 0; t < NV; t++)
            if (lane + 32 * t < nvec) {
#pragma unroll
                for (int e = 0; e < V; e++) q += (v[t][e] - mu) * (v[t][e] - mu);
            }
        const float rs = rsqrtf(warp_sum_f(q) / (float)N + eps);
        if (lane == 0) {
            mean[r] = mu;
            rstd[r] = rs;
        }
#pragma unroll
        for (int t = 0; t < NV; t++) {
            const int i = lane + 32 * t;
            if (i >= nvec) continue;
            float o[V];
#pragma unroll
            for (int e = 0; e < V; e++) {
                const int j = i * V + e;
                o[e] = (v[t][e] - mu) * rs;
                if (w) o[e] *= to_f<W>(w[j]);
                if (b) o[e] += to_f<W>(b[j]);
            }
            storev<TY, V>(y + r * N + (int64_t)i * V, o);
        }
    }
}

/* dx (+ prev: the gradient so far, may be dx itself) for the rows of this block's warps, and
 * with dcast the same dx rounded to dy's dtype (the residual add's gradient for its 16-bit
 * operand, dlt__add_layer_norm_to); with partial, the block's column sums of u * xhat (row 0
 * of its chunk) and u (row gridDim.x + chunk) as ln_bwd_final_kernel reads them.
 * One memory round trip per row: dy, x and prev are loaded together before the row's two
 * sums (prev after them cost a second latency per row: 73 us for GPT-2's 16384 x 768 f32
 * rows on an H200, 2.7 TB/s). The column sums run in shared memory, a [2][N] slice per warp
 * that only its lanes touch (each lane owns its columns), added warp by warp at the end: the
 * registers left are the row's three arrays (124 registers per thread before, 113 after;
 * 62 us per call after, H200). */
template <typename T, typename TY, typename W, int NV>
__global__ void __launch_bounds__(LN_VEC_THREADS) ln_bwd_vec_kernel(T *dx, const T *prev, TY *dcast, float *partial,
                                                                    const TY *dy, const T *x, const float *mean,
                                                                    const float *rstd, const W *w, int64_t M, int N) {
    constexpr int V = Vec16<T>::N;
    constexpr int WARPS = LN_VEC_THREADS / 32;
    extern __shared__ float4 sh4[]; /* partial: [WARPS][2][N] per-warp column sums */
    float *sh = reinterpret_cast<float *>(sh4);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nvec = N / V;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    float *aw = partial ? sh + (size_t)warp * 2 * N : nullptr, *ab = aw ? aw + N : nullptr;
    if (aw)
#pragma unroll
        for (int t = 0; t < NV; t++) {
            const int i = lane + 32 * t;
            if (i >= nvec) continue;
#pragma unroll
            for (int e = 0; e < V; e++) aw[i * V + e] = ab[i * V + e] = 0.0f;
        }
    for (int64_t r = first; r < M; r += step) {
        const int64_t base = r * N;
        const float mu = mean[r], rs = rstd[r];
        float g[NV][V], xh[NV][V], pv[NV][V];
        float sg = 0.0f, sgx = 0.0f;
#pragma unroll
        for (int t = 0; t < NV; t++) {
            const int i = lane + 32 * t;
            if (i >= nvec) continue;
            loadv<TY, V>(g[t], dy + base + (int64_t)i * V);
            loadv<T, V>(xh[t], x + base + (int64_t)i * V);
            if (prev) loadv<T, V>(pv[t], prev + base + (int64_t)i * V);
        }
#pragma unroll
        for (int t = 0; t < NV; t++) {
            const int i = lane + 32 * t;
            if (i >= nvec) continue;
            float wv[V];
            if (w) loadv<W, V>(wv, w + i * V);
#pragma unroll
            for (int e = 0; e < V; e++) {
                xh[t][e] = (xh[t][e] - mu) * rs;
                const float u = g[t][e];
                if (aw) {
                    aw[i * V + e] += u * xh[t][e];
                    ab[i * V + e] += u;
                }
                g[t][e] = u * (w ? wv[e] : 1.0f);
                sg += g[t][e];
                sgx += g[t][e] * xh[t][e];
            }
        }
        sg = warp_sum_f(sg) / (float)N;
        sgx = warp_sum_f(sgx) / (float)N;
#pragma unroll
        for (int t = 0; t < NV; t++) {
            const int i = lane + 32 * t;
            if (i >= nvec) continue;
            float o[V];
#pragma unroll
            for (int e = 0; e < V; e++) {
                o[e] = rs * (g[t][e] - sg - xh[t][e] * sgx);
                if (prev) o[e] += pv[t][e];
            }
            storev<T, V>(dx + base + (int64_t)i * V, o);
            if (dcast) {
#pragma unroll
                for (int e = 0; e < V; e++) o[e] = to_f<T>(from_f<T>(o[e])); /* dx as stored */
                storev<TY, V>(dcast + base + (int64_t)i * V, o);
            }
        }
    }
    if (!partial) return;
    __syncthreads();
    for (int j = threadIdx.x; j < N; j += blockDim.x) { /* warp by warp: a fixed order */
        float sw = 0.0f, sb = 0.0f;
#pragma unroll
        for (int k = 0; k < WARPS; k++) {
            sw += sh[(size_t)k * 2 * N + j];
            sb += sh[(size_t)k * 2 * N + N + j];
        }
        partial[(int64_t)blockIdx.x * N + j] = sw;
        partial[(int64_t)(gridDim.x + blockIdx.x) * N + j] = sb;
    }
}

/* Runs the body with NV = the vectors per lane: 1..4, and 6 or 8 for f32 (4 per vector);
 * ln_vec_nv never asks 16-bit types for more than 4, so their 6 and 8 are capped to 4 rather
 * than compiled (they would spill) */
template <typename T> constexpr int ln_nv_cap(int nv) {
    return nv * Vec16<T>::N <= LN_VEC_MAX_ELEMS ? nv : LN_VEC_MAX_ELEMS / Vec16<T>::N;
}
#define LN_NV(T, nv, NV, ...)                                                                 \
    do {                                                                                      \
        if ((nv) <= 1) { constexpr int NV = 1; __VA_ARGS__; }                                 \
        else if ((nv) <= 2) { constexpr int NV = 2; __VA_ARGS__; }                            \
        else if ((nv) <= 3) { constexpr int NV = 3; __VA_ARGS__; }                            \
        else if ((nv) <= 4) { constexpr int NV = 4; __VA_ARGS__; }                            \
        else if ((nv) <= 6) { constexpr int NV = ln_nv_cap<T>(6); __VA_ARGS__; }              \
        else { constexpr int NV = ln_nv_cap<T>(8); __VA_ARGS__; }                             \
    } while (0)

/* The vectors per lane when the row-in-registers kernels can serve, else 0: N a multiple of
 * the vector, at most LN_VEC_MAX_ELEMS elements per lane (N <= 1024), rows 16-byte aligned
 * (the base; N keeps every row so), weight and bias absent or of one dtype, x's or f32,
 * 16-byte aligned. */
int ln_vec_nv(int32_t dtype, int32_t ydtype, int64_t N, const void *const *rows, int n_rows, const dlt_tensor *w,
              const dlt_tensor *b) {
    const int64_t V = dtype == DLT_F32 ? 4 : 8;
    if (N <= 0 || N % V != 0 || N > 32 * LN_VEC_MAX_ELEMS) return 0;
    if (ydtype != dtype && !(dtype == DLT_F32 && (ydtype == DLT_F16 || ydtype == DLT_BF16))) return 0;
    for (int i = 0; i < n_rows; i++)
        if (((uintptr_t)rows[i] & 15) != 0) return 0;
    const int32_t wt = w ? w->dtype : b ? b->dtype : dtype;
    if ((w && w->dtype != wt) || (b && b->dtype != wt)) return 0;
    if (wt != dtype && wt != DLT_F32) return 0;
    if ((w && ((uintptr_t)dlt__data(w) & 15) != 0) || (b && ((uintptr_t)dlt__data(b) & 15) != 0))
        return 0; /* the backward loads the weight a vector at a time */
    return (int)((N / V + 31) / 32);
}

/* T, TY: x's and y's (dy's) element types for the pairs ln_vec_nv accepts: equal, or f32 x
 * with a 16-bit y (dlt_layer_norm_to under autocast) */
#define LN_DISPATCH_XY(xdt, ydt, T, TY, ...)                                                  \
    do {                                                                                      \
        if ((xdt) == (ydt)) {                                                                 \
            DLT_DISPATCH_FLOAT(xdt, T, { typedef T TY; __VA_ARGS__; });                       \
        } else if ((ydt) == DLT_F16) {                                                        \
            typedef float T;                                                                  \
            typedef __half TY;                                                                \
            __VA_ARGS__;                                                                      \
        } else {                                                                              \
            typedef float T;                                                                  \
            typedef __nv_bfloat16 TY;                                                         \
            __VA_ARGS__;                                                                      \
        }                                                                                     \
    } while (0)

/* the per-element kernels take any pair */
#define LN_DISPATCH_ANY(xdt, ydt, T, TY, ...)                                                 \
    DLT_DISPATCH_FLOAT(xdt, T, DLT_DISPATCH_FLOAT(ydt, TY, __VA_ARGS__))

/* W: the parameters' element type (x's, or float) */
#define LN_DISPATCH_W(wdtype, T, W, ...)                                                      \
    do {                                                                                      \
        if ((wdtype) == DLT_F32) { typedef float W; __VA_ARGS__; }                            \
        else { typedef T W; __VA_ARGS__; }                                                    \
    } while (0)

/* s = x + add per element in fp32, rounded to s's dtype (the per-element path of the fused
 * add; the vector kernels do it while loading the row) */
template <typename T, typename TB> __global__ void add_rows_kernel(T *s, const T *x, const TB *b, int64_t n) {
    DLT_GRID_STRIDE(i, n) s[i] = from_f<T>(to_f<T>(x[i]) + to_f<TB>(b[i]));
}

template <typename T, typename TB> __global__ void cast_rows_kernel(TB *y, const T *x, int64_t n) {
    DLT_GRID_STRIDE(i, n) y[i] = from_f<TB>(to_f<T>(x[i]));
}

/* layer norm of x, or of sum = x + add when add is given (add and y of one dtype) */
dlt_status ln_fwd(dlt_ctx *ctx, const char *F, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd, const dlt_tensor *x,
                  const dlt_tensor *w, const dlt_tensor *b, int64_t M, int64_t N, double eps, const dlt_tensor *add,
                  dlt_tensor *sum) {
    DLT_CHECK(same_dtype(F, DLT_F32, mean, rstd));
    cudaStream_t st = dlt__stream(ctx);
    if (add) {
        DLT_CHECK(same_dtype(F, x->dtype, sum));
        DLT_CHECK(same_dtype(F, y->dtype, add));
    }
    const void *rows[4] = {dlt__data(x), dlt__data(y), add ? dlt__data(add) : NULL, add ? dlt__data(sum) : NULL};
    const int nv = ln_vec_nv(x->dtype, y->dtype, N, rows, 4, w, b);
    if (nv > 0) {
        const int32_t wt = w ? w->dtype : b ? b->dtype : x->dtype;
        LN_DISPATCH_XY(x->dtype, y->dtype, T, TY, LN_DISPATCH_W(wt, T, W, LN_NV(T, nv, NV,
            ln_fwd_vec_kernel<T, TY, W, NV><<<grid_for(M * 32, LN_VEC_THREADS), LN_VEC_THREADS, 0, st>>>(
                (TY *)dlt__data(y), (float *)dlt__data(mean), (float *)dlt__data(rstd), (const T *)dlt__data(x),
                w ? (const W *)dlt__data(w) : nullptr, b ? (const W *)dlt__data(b) : nullptr, M, (int)N,
                (float)eps, add ? (const TY *)dlt__data(add) : nullptr, add ? (T *)dlt__data(sum) : nullptr))));
        DLT_CU_LAUNCHED(ctx, F);
        return DLT_OK;
    }
    if (add) {
        LN_DISPATCH_ANY(x->dtype, add->dtype, T, TB,
            add_rows_kernel<T, TB><<<grid_for(M * N, 256), 256, 0, st>>>((T *)dlt__data(sum), (const T *)dlt__data(x),
                                                                      (const TB *)dlt__data(add), M * N));
        DLT_CU_LAUNCHED(ctx, F);
        x = sum;
    }
    LN_DISPATCH_ANY(x->dtype, y->dtype, T, TY,
        ln_fwd_kernel<T, TY><<<grid_for(M * 32, 256), 256, 0, st>>>(
            (TY *)dlt__data(y), (float *)dlt__data(mean), (float *)dlt__data(rstd), (const T *)dlt__data(x),
            w ? dlt__data(w) : nullptr, w ? w->dtype : 0, b ? dlt__data(b) : nullptr, b ? b->dtype : 0, M, N,
            (float)eps));
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

/* dx = prev + layer norm's dx (prev NULL: none; may be dx), dcast = dx in dy's dtype (or NULL) */
dlt_status ln_bwd(dlt_ctx *ctx, const char *F, dlt_tensor *dx, const dlt_tensor *prev, dlt_tensor *dcast,
                  dlt_tensor *dw, dlt_tensor *db, int32_t beta_acc, const dlt_tensor *dy, const dlt_tensor *x,
                  const dlt_tensor *mean, const dlt_tensor *rstd, const dlt_tensor *w, int64_t M, int64_t N) {
    cudaStream_t st = dlt__stream(ctx);
    DLT_CHECK(same_dtype(F, x->dtype, dx, prev));
    DLT_CHECK(same_dtype(F, DLT_F32, mean, rstd));
    if (dcast) DLT_CHECK(same_dtype(F, dy->dtype, dcast));
    const dim3 fin_block(FIN_COLS, FIN_ROWS);
    const unsigned fin_grid = (unsigned)((N + FIN_COLS - 1) / FIN_COLS);
    const void *rows[5] = {dlt__data(x), dlt__data(dx), dlt__data(dy), prev ? dlt__data(prev) : NULL,
                           dcast ? dlt__data(dcast) : NULL};
    const int nv = ln_vec_nv(x->dtype, dy->dtype, N, rows, 5, w, NULL);
    if (nv > 0) {
        /* a fixed grid (not the SM count): the same chunks, so the same sums, on any GPU */
        const int64_t warps = LN_VEC_THREADS / 32;
        const int blocks = (int)((M + warps - 1) / warps < LN_VEC_MAX_BLOCKS ? (M + warps - 1) / warps
                                                                                : LN_VEC_MAX_BLOCKS);
        float *partial = NULL;
        if (dw || db) {
            void *scratch = NULL;
            DLT_CHECK(dlt__cuda_scratch(ctx, (size_t)2 * blocks * N * sizeof(float), &scratch));
            partial = (float *)scratch;
        }
        const size_t smem = partial ? (size_t)2 * (LN_VEC_THREADS / 32) * N * sizeof(float) : 0;
        const int32_t wt = w ? w->dtype : x->dtype;
        LN_DISPATCH_XY(x->dtype, dy->dtype, T, TY, LN_DISPATCH_W(wt, T, W, LN_NV(T, nv, NV,
            ln_bwd_vec_kernel<T, TY, W, NV><<<blocks, LN_VEC_THREADS, smem, st>>>(
                (T *)dlt__data(dx), prev ? (const T *)dlt__data(prev) : nullptr, dcast ? (TY *)dlt__data(dcast) : nullptr,
                partial, (const TY *)dlt__data(dy), (const T *)dlt__data(x), (const float *)dlt__data(mean),
                (const float *)dlt__data(rstd), w ? (const W *)dlt__data(w) : nullptr, M, (int)N))));
        DLT_CU_LAUNCHED(ctx, F);
        if (!partial) return DLT_OK;
        ln_bwd_final_kernel<<<fin_grid, fin_block, 0, st>>>(dw ? dlt__data(dw) : nullptr, dw ? dw->dtype : 0,
                                                            db ? dlt__data(db) : nullptr, db ? db->dtype : 0, partial,
                                                            N, blocks, beta_acc);
        DLT_CU_LAUNCHED(ctx, F);
        return DLT_OK;
    }
    if (prev && prev != dx)
        DLT_CU(ctx, cudaMemcpyAsync(dlt__data(dx), dlt__data(prev), (size_t)dx->numel * dlt_dtype_size(dx->dtype),
                                    cudaMemcpyDeviceToDevice, st),
               F);
    LN_DISPATCH_ANY(x->dtype, dy->dtype, T, TY,
        ln_bwd_dx_kernel<T, TY><<<grid_for(M * 32, 256), 256, 0, st>>>(
            (T *)dlt__data(dx), prev ? 1 : 0, (const TY *)dlt__data(dy), (const T *)dlt__data(x), (const float *)dlt__data(mean),
            (const float *)dlt__data(rstd), w ? dlt__data(w) : nullptr, w ? w->dtype : 0, M, N));
    DLT_CU_LAUNCHED(ctx, F);
    if (dcast) {
        LN_DISPATCH_ANY(x->dtype, dcast->dtype, T, TB,
            cast_rows_kernel<T, TB><<<grid_for(M * N, 256), 256, 0, st>>>((TB *)dlt__data(dcast), (const T *)dlt__data(dx),
                                                                       M * N));
        DLT_CU_LAUNCHED(ctx, F);
    }
    if (!dw && !db) return DLT_OK;
    const int chunks = (int)(M < LN_CHUNKS ? M : LN_CHUNKS);
    const int64_t rows_per_chunk = (M + chunks - 1) / chunks;
    void *scratch = NULL;
    DLT_CHECK(dlt__cuda_scratch(ctx, (size_t)2 * chunks * N * sizeof(float), &scratch));
    const dim3 grid((unsigned)((N + 127) / 128), (unsigned)chunks);
    LN_DISPATCH_ANY(x->dtype, dy->dtype, T, TY,
        ln_bwd_partial_kernel<T, TY><<<grid, 128, 0, st>>>((float *)scratch, (const TY *)dlt__data(dy),
                                                       (const T *)dlt__data(x), (const float *)dlt__data(mean),
                                                       (const float *)dlt__data(rstd), M, N, rows_per_chunk, chunks));
    DLT_CU_LAUNCHED(ctx, F);
    ln_bwd_final_kernel<<<fin_grid, fin_block, 0, st>>>(dw ? dlt__data(dw) : nullptr, dw ? dw->dtype : 0,
                                                        db ? dlt__data(db) : nullptr, db ? db->dtype : 0,
                                                        (const float *)scratch, N, chunks, beta_acc);
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

} // namespace

extern "C" {

dlt_status dlt__cuda_ln_fwd(dlt_ctx *ctx, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd, const dlt_tensor *x,
                            const dlt_tensor *w, const dlt_tensor *b, int64_t M, int64_t N, double eps) {
    return ln_fwd(ctx, "dlt_layer_norm", y, mean, rstd, x, w, b, M, N, eps, NULL, NULL);
}

dlt_status dlt__cuda_ln_bwd(dlt_ctx *ctx, dlt_tensor *dx, int32_t dx_acc, dlt_tensor *dw, dlt_tensor *db, int32_t beta_acc,
                            const dlt_tensor *dy, const dlt_tensor *x, const dlt_tensor *mean, const dlt_tensor *rstd,
                            const dlt_tensor *w, int64_t M, int64_t N) {
    return ln_bwd(ctx, "dlt_layer_norm_backward", dx, dx_acc ? dx : NULL, NULL, dw, db, beta_acc, dy, x, mean, rstd, w,
                  M, N);
}

dlt_status dlt__cuda_add_ln_fwd(dlt_ctx *ctx, dlt_tensor *sum, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd,
                                const dlt_tensor *x, const dlt_tensor *add, const dlt_tensor *w, const dlt_tensor *b,
                                int64_t M, int64_t N, double eps) {
    return ln_fwd(ctx, "dlt_add_layer_norm", y, mean, rstd, x, w, b, M, N, eps, add, sum);
}

dlt_status dlt__cuda_add_ln_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *prev, dlt_tensor *dcast, dlt_tensor *dw,
                                dlt_tensor *db, int32_t beta_acc, const dlt_tensor *dy, const dlt_tensor *sum,
                                const dlt_tensor *mean, const dlt_tensor *rstd, const dlt_tensor *w, int64_t M,
                                int64_t N) {
    return ln_bwd(ctx, "dlt_add_layer_norm_backward", dx, prev, dcast, dw, db, beta_acc, dy, sum, mean, rstd, w, M, N);
}

} // extern "C"
