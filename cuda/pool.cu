/*
 * pool.cu - CUDA max pooling (with int32 argmax indices) and global average pooling,
 * forward and backward, f32/f16/bf16, NCHW and channels-last (NHWC) memory.
 *
 * Max pool (PyTorch's DilatedMaxPool2d.cu semantics, dilation 1, floor mode):
 *  - the window of output (p, q) covers rows p*sh - ph .. +kh-1 and columns q*sw - pw ..
 *    +kw-1, clipped to the input: padding never wins (it counts as -inf);
 *  - scan order is row-major inside the window; an element replaces the running maximum
 *    when it is strictly greater or NaN, so the first maximum wins and NaN propagates
 *    (with several NaNs the last one's index is kept, as PyTorch does);
 *  - indices (int32, same logical shape and memory format as y) hold h*W + w;
 *  - comparisons run in fp32; the stored maximum is one of the inputs, so exact.
 * Backward gathers instead of scattering: each dx element visits the output windows that
 * can contain it and adds dy where the saved index names it, in (p, q) order, in fp32.
 * No atomics, so the result is deterministic and equal to a sequential scatter.
 *
 * Global average pool: y[n,c] = sum_hw x[n,c,h,w] * (1/HW) with an fp32 accumulator;
 * backward dx = dy / HW (PyTorch's mean and mean_backward). y is [N,C,1,1], whose memory
 * order is the same in both formats.
 *
 * One thread per output element (per input element in max-pool backward), or per 16 bytes
 * of channels in channels-last when C allows (the _vec kernels; global average pooling's
 * only where the map has at most 64 positions). Threads walk
 * the tensor in memory order, so in channels-last neighbouring threads take neighbouring
 * channels and every load is coalesced. Index math is 32-bit when the tensor allows it.
 */
#include "common.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

template <typename I> struct PoolGeom {
    I N, C, H, W, P, Q;
    I kh, kw, sh, sw, ph, pw;
    int cl;
};

template <typename I>
static PoolGeom<I> pool_geom(const dlt_tensor *x, const dlt_tensor *y, const dlt_pool_params *p) {
    PoolGeom<I> g;
    g.N = (I)x->shape[0];
    g.C = (I)x->shape[1];
    g.H = (I)x->shape[2];
    g.W = (I)x->shape[3];
    g.P = (I)y->shape[2];
    g.Q = (I)y->shape[3];
    g.kh = (I)p->kernel[0];
    g.kw = (I)p->kernel[1];
    g.sh = (I)p->stride[0];
    g.sw = (I)p->stride[1];
    g.ph = (I)p->pad[0];
    g.pw = (I)p->pad[1];
    g.cl = x->format == DLT_FORMAT_CHANNELS_LAST;
    return g;
}

/* Splits a memory-order index of an [N,C,A,B] tensor into (n, c, a, b). */
template <typename I>
__device__ __forceinline__ void split4(I i, I C, I A, I B, int cl, I &n, I &c, I &a, I &b) {
    if (cl) {
        c = i % C;
        I r = i / C;
        b = r % B;
        r /= B;
        a = r % A;
        n = r / A;
    } else {
        b = i % B;
        I r = i / B;
        a = r % A;
        r /= A;
        c = r % C;
        n = r / C;
    }
}

/* Rows [hs, he) and columns [ws, we) of output (p, q)'s window, clipped to the input. */
template <typename I>
__device__ __forceinline__ void window_of(const PoolGeom<I> &g, I p, I q, I &hs, I &he, I &ws, I &we) {
    hs = p * g.sh - g.ph;
    ws = q * g.sw - g.pw;
    he = hs + g.kh < g.H ? hs + g.kh : g.H;
    we = ws + g.kw < g.W ? ws + g.kw : g.W;
    if (hs < 0) hs = 0;
    if (ws < 0) ws = 0;
}

/* The outputs [ps, pe) x [qs, qe) whose windows contain input (h, w):
 * p*sh - ph <= h < p*sh - ph + kh, and the same for w. */
template <typename I>
__device__ __forceinline__ void outputs_over(const PoolGeom<I> &g, I h, I w, I &ps, I &pe, I &qs, I &qe) {
    ps = (h + g.ph < g.kh) ? 0 : (h + g.ph - g.kh) / g.sh + 1;
    pe = (h + g.ph) / g.sh + 1;
    if (pe > g.P) pe = g.P;
    qs = (w + g.pw < g.kw) ? 0 : (w + g.pw - g.kw) / g.sw + 1;
    qe = (w + g.pw) / g.sw + 1;
    if (qe > g.Q) qe = g.Q;
}

template <typename T, typename I>
__global__ void maxpool_fwd_kernel(T *__restrict__ y, int32_t *__restrict__ ind,
                                   const T *__restrict__ x, PoolGeom<I> g, I total) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        I n, c, p, q;
        split4<I>(i, g.C, g.P, g.Q, g.cl, n, c, p, q);
        I hs, he, ws, we;
        window_of<I>(g, p, q, hs, he, ws, we);
        const T *base;
        I step_w, step_h;
        if (g.cl) {
            base = x + n * g.H * g.W * g.C + c;
            step_w = g.C;
            step_h = g.W * g.C;
        } else {
            base = x + (n * g.C + c) * g.H * g.W;
            step_w = 1;
            step_h = g.W;
        }
        float best = -INFINITY;
        int32_t best_i = (int32_t)(hs * g.W + ws);
        for (I h = hs; h < he; h++) {
            for (I w = ws; w < we; w++) {
                float v = to_f<T>(base[h * step_h + w * step_w]);
                if (v > best || v != v) {
                    best = v;
                    best_i = (int32_t)(h * g.W + w);
                }
            }
        }
        y[i] = from_f<T>(best);
        ind[i] = best_i;
    }
}

template <typename T, typename I>
__global__ void maxpool_bwd_kernel(T *__restrict__ dx, const T *__restrict__ dy,
                                   const int32_t *__restrict__ ind, PoolGeom<I> g, I total) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        I n, c, h, w;
        split4<I>(i, g.C, g.H, g.W, g.cl, n, c, h, w);
        I ps, pe, qs, qe;
        outputs_over<I>(g, h, w, ps, pe, qs, qe);
        const int32_t me = (int32_t)(h * g.W + w);
        float acc = 0.0f;
        for (I p = ps; p < pe; p++) {
            for (I q = qs; q < qe; q++) {
                I o = g.cl ? ((n * g.P + p) * g.Q + q) * g.C + c : ((n * g.C + c) * g.P + p) * g.Q + q;
                if (ind[o] == me) acc += to_f<T>(dy[o]);
            }
        }
        dx[i] = from_f<T>(acc);
    }
}

/* Channels-last with C a multiple of the 16-byte width: V = 16/sizeof(T) channels per thread,
 * one 16-byte load per window element (dy, x) and V indices per output, the same per-channel
 * logic and order as the kernels above (so the same bits). Index math is 32-bit. */
template <typename T>
__global__ void maxpool_fwd_vec_kernel(T *__restrict__ y, int32_t *__restrict__ ind, const T *__restrict__ x,
                                       PoolGeom<int32_t> g, int32_t total_v) {
    constexpr int V = Vec16<T>::N;
    const int32_t G = g.C / V;
    DLT_GRID_STRIDE32(i, total_v) {
        int32_t n, cg, p, q, hs, he, ws, we;
        split4<int32_t>(i, G, g.P, g.Q, 1, n, cg, p, q); /* channels-last: groups of V innermost */
        window_of<int32_t>(g, p, q, hs, he, ws, we);
        const uint4 *base = reinterpret_cast<const uint4 *>(x) + (int64_t)n * g.H * g.W * G + cg;
        float best[V];
        int32_t bi[V];
#pragma unroll
        for (int k = 0; k < V; k++) {
            best[k] = -INFINITY;
            bi[k] = hs * g.W + ws;
        }
        for (int32_t h = hs; h < he; h++)
            for (int32_t w = ws; w < we; w++) {
                Vec16<T> v;
                v.raw = base[(h * g.W + w) * G];
#pragma unroll
                for (int k = 0; k < V; k++) {
                    const float f = to_f<T>(v.v[k]);
                    if (f > best[k] || f != f) {
                        best[k] = f;
                        bi[k] = h * g.W + w;
                    }
                }
            }
        Vec16<T> out;
#pragma unroll
        for (int k = 0; k < V; k++) out.v[k] = from_f<T>(best[k]);
        reinterpret_cast<uint4 *>(y)[i] = out.raw;
        int4 *io = reinterpret_cast<int4 *>(ind + (int64_t)i * V);
#pragma unroll
        for (int j = 0; j < V / 4; j++) io[j] = make_int4(bi[4 * j], bi[4 * j + 1], bi[4 * j + 2], bi[4 * j + 3]);
    }
}

template <typename T>
__global__ void maxpool_bwd_vec_kernel(T *__restrict__ dx, const T *__restrict__ dy,
                                       const int32_t *__restrict__ ind, PoolGeom<int32_t> g, int32_t total_v) {
    constexpr int V = Vec16<T>::N;
    const int32_t G = g.C / V;
    DLT_GRID_STRIDE32(i, total_v) {
        int32_t n, cg, h, w, ps, pe, qs, qe;
        split4<int32_t>(i, G, g.H, g.W, 1, n, cg, h, w);
        outputs_over<int32_t>(g, h, w, ps, pe, qs, qe);
        const int32_t me = h * g.W + w;
        float acc[V];
#pragma unroll
        for (int k = 0; k < V; k++) acc[k] = 0.0f;
        for (int32_t p = ps; p < pe; p++)
            for (int32_t q = qs; q < qe; q++) {
                const int32_t o = ((n * g.P + p) * g.Q + q) * G + cg;
                Vec16<T> d;
                d.raw = reinterpret_cast<const uint4 *>(dy)[o];
                const int4 *io = reinterpret_cast<const int4 *>(ind + (int64_t)o * V);
#pragma unroll
                for (int j = 0; j < V / 4; j++) {
                    const int4 ix = io[j];
                    const int32_t e[4] = {ix.x, ix.y, ix.z, ix.w};
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        if (e[k] == me) acc[4 * j + k] += to_f<T>(d.v[4 * j + k]);
                }
            }
        Vec16<T> out;
#pragma unroll
        for (int k = 0; k < V; k++) out.v[k] = from_f<T>(acc[k]);
        reinterpret_cast<uint4 *>(dx)[i] = out.raw;
    }
}

/* elements of t's dtype in 16 bytes */
static int32_t vec_width(const dlt_tensor *t) { return 16 / (int32_t)dlt_dtype_size(t->dtype); }

/* whether the _vec kernels can take a pool between big (x or dx) and small (y or dy, and
 * ind): channels-last, C a multiple of the width, 16-byte aligned data, 32-bit indices */
static bool cl_vec_ok(const dlt_tensor *big, const dlt_tensor *small, const dlt_tensor *ind) {
    return big->format == DLT_FORMAT_CHANNELS_LAST && big->numel < ((int64_t)1 << 30) &&
           small->numel < ((int64_t)1 << 30) &&
           vec16_ok(big->shape[1], vec_width(big), dlt__data(big), dlt__data(small), ind ? dlt__data(ind) : nullptr);
}

/* NCHW: each (n, c) row of HW elements is contiguous. LANES = 32: a warp per row (large
 * maps); LANES = 1: a thread per row (small maps such as ResNet's 1x1..4x4 at CIFAR size,
 * where neighbouring threads then read neighbouring rows). */
template <typename T, int LANES>
__global__ void gavg_fwd_rows_kernel(T *__restrict__ y, const T *__restrict__ x, int64_t rows,
                                     int64_t hw, float inv) {
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / LANES;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) / LANES;
    const int lane = (int)(threadIdx.x % LANES);
    /* blockDim is a multiple of 32, so the lanes of one warp share `row` and the loop bound */
    for (int64_t row = first; row < rows; row += step) {
        const T *src = x + row * hw;
        float acc = 0.0f;
        for (int64_t j = lane; j < hw; j += LANES) acc += to_f<T>(src[j]);
        if (LANES == 32)
            for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) y[row] = from_f<T>(acc * inv);
    }
}

/* NHWC: x[(n*HW + j)*C + c]. Block (32, 8): threadIdx.x takes 32 neighbouring channels
 * (coalesced), threadIdx.y splits the HW positions; partial sums are added in a fixed
 * order, so the result is deterministic. Grid: (ceil(C/32), min(N, 65535)). */
template <typename T>
__global__ void gavg_fwd_cl_kernel(T *__restrict__ y, const T *__restrict__ x, int64_t N, int64_t C,
                                   int64_t hw, float inv) {
    __shared__ float part[8][33];
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
        float acc = 0.0f;
        if (c < C)
            for (int64_t j = threadIdx.y; j < hw; j += 8) acc += to_f<T>(x[(n * hw + j) * C + c]);
        part[threadIdx.y][threadIdx.x] = acc;
        __syncthreads();
        if (threadIdx.y == 0 && c < C) {
            float s = 0.0f;
            for (int r = 0; r < 8; r++) s += part[r][threadIdx.x];
            y[n * C + c] = from_f<T>(s * inv);
        }
        __syncthreads(); /* part is reused by the next n */
    }
}

/* NHWC with C a multiple of the 16-byte width and few positions (hw <= GAVG_VEC_MAX_HW:
 * ResNet's 1x1..7x7 final maps): a thread per (image, 16 bytes of channels) walks the
 * positions in order, so neighbouring threads read neighbouring 16 bytes. The sum is the
 * same sequence of fp32 additions as gavg_fwd_cl_kernel's for hw <= 8 (position j in
 * its row j, the rows added in order); for larger hw the order differs (fp32 rounding). */
constexpr int64_t GAVG_VEC_MAX_HW = 64;

template <typename T>
__global__ void gavg_fwd_vec_kernel(T *__restrict__ y, const T *__restrict__ x, int32_t G, int32_t hw,
                                    int32_t total_v, float inv) {
    constexpr int V = Vec16<T>::N;
    DLT_GRID_STRIDE32(i, total_v) {
        const int32_t n = i / G, g = i - n * G;
        const uint4 *src = reinterpret_cast<const uint4 *>(x) + (int64_t)n * hw * G + g;
        float acc[V];
#pragma unroll
        for (int k = 0; k < V; k++) acc[k] = 0.0f;
        for (int32_t j = 0; j < hw; j++) {
            Vec16<T> v;
            v.raw = src[(int64_t)j * G];
#pragma unroll
            for (int k = 0; k < V; k++) acc[k] += to_f<T>(v.v[k]);
        }
        Vec16<T> out;
#pragma unroll
        for (int k = 0; k < V; k++) out.v[k] = from_f<T>(acc[k] * inv);
        reinterpret_cast<uint4 *>(y)[i] = out.raw;
    }
}

/* backward of the above: dx[n, j, c] = dy[n, c] / hw, 16 bytes of channels per thread
 * (the same division per element as gavg_bwd_kernel) */
template <typename T>
__global__ void gavg_bwd_vec_kernel(T *__restrict__ dx, const T *__restrict__ dy, int32_t G, int32_t hw,
                                    int32_t total_v, float count) {
    constexpr int V = Vec16<T>::N;
    DLT_GRID_STRIDE32(i, total_v) {
        const int32_t g = i % G, n = i / (hw * G);
        Vec16<T> d, out;
        d.raw = reinterpret_cast<const uint4 *>(dy)[n * G + g];
#pragma unroll
        for (int k = 0; k < V; k++) out.v[k] = from_f<T>(to_f<T>(d.v[k]) / count);
        reinterpret_cast<uint4 *>(dx)[i] = out.raw;
    }
}

/* whether the vector kernels take a global average pool (big: x or dx; small: y or dy) */
static bool gavg_vec_ok(const dlt_tensor *big, const dlt_tensor *small) {
    return big->shape[2] * big->shape[3] <= GAVG_VEC_MAX_HW && cl_vec_ok(big, small, nullptr);
}

template <typename T, typename I>
__global__ void gavg_bwd_kernel(T *__restrict__ dx, const T *__restrict__ dy, I C, I hw, int cl,
                                float count, I total) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        I nc = cl ? (i / (hw * C)) * C + i % C : i / hw;
        dx[i] = from_f<T>(to_f<T>(dy[nc]) / count);
    }
}

template <typename T, typename I>
static void launch_maxpool_fwd(dlt_tensor *y, dlt_tensor *ind, const dlt_tensor *x,
                               const dlt_pool_params *p, cudaStream_t st) {
    I total = (I)y->numel;
    maxpool_fwd_kernel<T, I><<<grid_for(y->numel, 256), 256, 0, st>>>(
        (T *)dlt__data(y), (int32_t *)dlt__data(ind), (const T *)dlt__data(x), pool_geom<I>(x, y, p),
        total);
}

template <typename T, typename I>
static void launch_maxpool_bwd(dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *ind,
                               const dlt_pool_params *p, cudaStream_t st) {
    I total = (I)dx->numel;
    maxpool_bwd_kernel<T, I><<<grid_for(dx->numel, 256), 256, 0, st>>>(
        (T *)dlt__data(dx), (const T *)dlt__data(dy), (const int32_t *)dlt__data(ind),
        pool_geom<I>(dx, dy, p), total);
}

template <typename T, typename I>
static void launch_gavg_bwd(dlt_tensor *dx, const dlt_tensor *dy, cudaStream_t st) {
    const int64_t hw = dx->shape[2] * dx->shape[3];
    gavg_bwd_kernel<T, I><<<grid_for(dx->numel, 256), 256, 0, st>>>(
        (T *)dlt__data(dx), (const T *)dlt__data(dy), (I)dx->shape[1], (I)hw,
        dx->format == DLT_FORMAT_CHANNELS_LAST, (float)hw, (I)dx->numel);
}

/* Tensors this size or smaller use 32-bit index math (64-bit division is several times
 * slower on the GPU); the grid-stride increment must not overflow either. */
static inline int small_index(int64_t numel) { return numel < ((int64_t)1 << 30); }

} // namespace

extern "C" {

dlt_status dlt__cuda_maxpool_fwd(dlt_ctx *ctx, dlt_tensor *y, dlt_tensor *indices,
                                 const dlt_tensor *x, const dlt_pool_params *p) {
    cudaStream_t st = dlt__stream(ctx);
    const int small = small_index(x->numel) && small_index(y->numel);
    if (cl_vec_ok(x, y, indices)) {
        const int32_t total_v = (int32_t)(y->numel / vec_width(x));
        DLT_DISPATCH_FLOAT(x->dtype, T,
            maxpool_fwd_vec_kernel<T><<<grid_for(total_v, 256), 256, 0, st>>>(
                (T *)dlt__data(y), (int32_t *)dlt__data(indices), (const T *)dlt__data(x),
                pool_geom<int32_t>(x, y, p), total_v));
    } else if (small) {
        DLT_DISPATCH_FLOAT(x->dtype, T, launch_maxpool_fwd<T, int32_t>(y, indices, x, p, st));
    } else {
        DLT_DISPATCH_FLOAT(x->dtype, T, launch_maxpool_fwd<T, int64_t>(y, indices, x, p, st));
    }
    DLT_CU_LAUNCHED(ctx, "dlt_max_pool2d");
    return DLT_OK;
}

dlt_status dlt__cuda_maxpool_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                 const dlt_tensor *indices, const dlt_pool_params *p) {
    cudaStream_t st = dlt__stream(ctx);
    const int small = small_index(dx->numel) && small_index(dy->numel);
    if (cl_vec_ok(dx, dy, indices)) {
        const int32_t total_v = (int32_t)(dx->numel / vec_width(dx));
        DLT_DISPATCH_FLOAT(dx->dtype, T,
            maxpool_bwd_vec_kernel<T><<<grid_for(total_v, 256), 256, 0, st>>>(
                (T *)dlt__data(dx), (const T *)dlt__data(dy), (const int32_t *)dlt__data(indices),
                pool_geom<int32_t>(dx, dy, p), total_v));
    } else if (small) {
        DLT_DISPATCH_FLOAT(dx->dtype, T, launch_maxpool_bwd<T, int32_t>(dx, dy, indices, p, st));
    } else {
        DLT_DISPATCH_FLOAT(dx->dtype, T, launch_maxpool_bwd<T, int64_t>(dx, dy, indices, p, st));
    }
    DLT_CU_LAUNCHED(ctx, "dlt_max_pool2d_backward");
    return DLT_OK;
}

dlt_status dlt__cuda_gavgpool_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x) {
    cudaStream_t st = dlt__stream(ctx);
    const int64_t N = x->shape[0], C = x->shape[1], hw = x->shape[2] * x->shape[3];
    const float inv = 1.0f / (float)hw;
    if (gavg_vec_ok(x, y)) {
        const int32_t G = (int32_t)(C / vec_width(x));
        const int32_t total_v = (int32_t)N * G;
        DLT_DISPATCH_FLOAT(x->dtype, T,
            gavg_fwd_vec_kernel<T><<<grid_for(total_v, 256), 256, 0, st>>>(
                (T *)dlt__data(y), (const T *)dlt__data(x), G, (int32_t)hw, total_v, inv));
    } else if (x->format == DLT_FORMAT_CHANNELS_LAST && C > 1) {
        dim3 block(32, 8);
        dim3 grid((unsigned)((C + 31) / 32), (unsigned)(N < 65535 ? N : 65535));
        DLT_DISPATCH_FLOAT(x->dtype, T,
            gavg_fwd_cl_kernel<T><<<grid, block, 0, st>>>((T *)dlt__data(y), (const T *)dlt__data(x),
                                                          N, C, hw, inv));
    } else {
        /* NCHW, or C == 1 where both formats coincide */
        const int64_t rows = N * C;
        if (hw >= 32) {
            DLT_DISPATCH_FLOAT(x->dtype, T,
                gavg_fwd_rows_kernel<T, 32><<<grid_for(rows * 32, 256), 256, 0, st>>>(
                    (T *)dlt__data(y), (const T *)dlt__data(x), rows, hw, inv));
        } else {
            DLT_DISPATCH_FLOAT(x->dtype, T,
                gavg_fwd_rows_kernel<T, 1><<<grid_for(rows, 256), 256, 0, st>>>(
                    (T *)dlt__data(y), (const T *)dlt__data(x), rows, hw, inv));
        }
    }
    DLT_CU_LAUNCHED(ctx, "dlt_global_avg_pool2d");
    return DLT_OK;
}

dlt_status dlt__cuda_gavgpool_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy) {
    cudaStream_t st = dlt__stream(ctx);
    if (gavg_vec_ok(dx, dy)) {
        const int64_t hw = dx->shape[2] * dx->shape[3];
        const int32_t G = (int32_t)(dx->shape[1] / vec_width(dx));
        const int32_t total_v = (int32_t)(dx->numel / vec_width(dx));
        DLT_DISPATCH_FLOAT(dx->dtype, T,
            gavg_bwd_vec_kernel<T><<<grid_for(total_v, 256), 256, 0, st>>>(
                (T *)dlt__data(dx), (const T *)dlt__data(dy), G, (int32_t)hw, total_v, (float)hw));
    } else if (small_index(dx->numel)) {
        DLT_DISPATCH_FLOAT(dx->dtype, T, launch_gavg_bwd<T, int32_t>(dx, dy, st));
    } else {
        DLT_DISPATCH_FLOAT(dx->dtype, T, launch_gavg_bwd<T, int64_t>(dx, dy, st));
    }
    DLT_CU_LAUNCHED(ctx, "dlt_global_avg_pool2d_backward");
    return DLT_OK;
}

} // extern "C"
