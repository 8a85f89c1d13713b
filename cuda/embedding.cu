/*
 * embedding.cu - CUDA embedding (lib/ops/embedding.c).
 *   forward   the row read at its index: one thread per 16 bytes of output when rows are
 *             whole 16-byte vectors and the pointers aligned (one index load and a 32-bit
 *             division per vector; one thread per element, with a 64-bit division each,
 *             gathered 16384 rows of 768 f32 at ~1.4 TB/s on an H200), else one thread per
 *             element; an index outside [0, V) cannot be reported without a host sync, so
 *             its row is NaN (the loss then is NaN, as cross-entropy does with a bad target);
 *   backward  deterministic whatever the mode: the indices are sorted with their positions
 *             (CUB radix sort, stable, so equal indices keep position order), then a block
 *             per run of equal indices and 256 columns (32 where runs are mostly long) adds
 *             the run's gradient rows into dW[v]: a warp per 32 columns for short runs, the
 *             eight warps over the rows of long ones with their sums added in a fixed order. No atomics: the same bits
 *             every run. padding_idx and out-of-range indices are skipped.
 * The sort's buffers come from the context's scratch (sized in warm-up before a capture).
 */
#include <cub/device/device_radix_sort.cuh>

#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

template <typename T, typename I>
__global__ void embedding_fwd_kernel(T *y, const T *w, const I *idx, int64_t n, int64_t V, int64_t D) {
    DLT_GRID_STRIDE(e, n * D) {
        const int64_t i = e / D, j = e - i * D;
        const int64_t v = (int64_t)idx[i];
        y[e] = (v >= 0 && v < V) ? w[v * D + j] : from_f<T>(NAN);
    }
}

/* nv = n * D / W vectors of W = 16 / sizeof(T) values, D a multiple of W, dv = D / W per
 * row: vector e is vector j of output row i. The same bits as embedding_fwd_kernel (a copy,
 * or NaN); 32-bit index math (the launcher keeps nv below 2^31). */
template <typename T, typename I>
__global__ void embedding_fwd_vec_kernel(uint4 *y, const uint4 *w, const I *idx, uint32_t nv, int64_t V, uint32_t dv) {
    Vec16<T> nan_row;
#pragma unroll
    for (int k = 0; k < Vec16<T>::N; k++) nan_row.v[k] = from_f<T>(NAN);
    for (uint32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < nv; e += gridDim.x * blockDim.x) {
        const uint32_t i = e / dv, j = e - i * dv;
        const int64_t v = (int64_t)idx[i];
        y[e] = (v >= 0 && v < V) ? w[v * dv + j] : nan_row.raw;
    }
}

template <typename I> __global__ void iota_keys_kernel(int64_t *keys, int32_t *pos, const I *idx, int64_t n, int64_t V) {
    DLT_GRID_STRIDE(i, n) {
        const int64_t v = (int64_t)idx[i];
        keys[i] = (v >= 0 && v < V) ? v : V; /* out of range sorts last and is skipped */
        pos[i] = (int32_t)i;
    }
}

/* A block per run of equal sorted indices and group of `tpb` 32-column tiles (blockIdx.y).
 * A short run (at most EMB_SHORT rows, GPT-2's words): warp w adds the run's rows in order
 * for tile w of the group on its own, no barrier. A long run (a 65-character vocabulary:
 * hundreds of rows): for each tile of the group, warp w adds rows w, w + 8, ... and warp 0
 * adds the eight partial sums in warp order. The order depends on the run's length only
 * (not on tpb): deterministic. tpb is EMB_WARPS where most runs are short, so that a word's
 * block has a tile per warp, and 1 where most are long, so that a run's tiles are spread
 * over blocks rather than taken one after another (bwd_tiles_per_block). Blocks stride over
 * sorted positions and skip those that do not start a run (block-uniform, as is the path,
 * so the barriers are safe). */
constexpr int EMB_WARPS = 8, EMB_SHORT = 16;
template <typename T>
__global__ void __launch_bounds__(EMB_WARPS * 32) embedding_bwd_kernel(void *dw, int tdw, const T *dy, const int64_t *keys,
                                                                    const int32_t *pos, int64_t n, int64_t V, int64_t D,
                                                                    int64_t padding_idx, int beta, int tpb) {
    __shared__ float part[EMB_WARPS][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t tiles = (D + 31) / 32;
    for (int64_t s = blockIdx.x; s < n; s += gridDim.x) {
        const int64_t v = keys[s];
        if (v >= V || v == padding_idx || (s > 0 && keys[s - 1] == v)) continue;
        /* the run's end (keys are sorted): gallop, then bisect; a run of one reads one key */
        int64_t step = 1;
        while (s + step < n && keys[s + step] == v) step <<= 1;
        int64_t lo = s + (step >> 1) + 1, hi = s + step < n ? s + step : n;
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (keys[mid] == v) lo = mid + 1;
            else hi = mid;
        }
        const bool shortrun = lo - s <= EMB_SHORT;
        for (int64_t g = (int64_t)blockIdx.y * tpb; g < tiles; g += (int64_t)gridDim.y * tpb) {
            if (shortrun) {
                const int64_t j = (g + warp) * 32 + lane;
                if (warp < tpb && j < D) {
                    float acc = beta ? ld_dt(dw, tdw, v * D + j) : 0.0f;
                    for (int64_t r = s; r < lo; r++) acc += to_f<T>(dy[(int64_t)pos[r] * D + j]);
                    st_dt(dw, tdw, v * D + j, acc);
                }
                continue;
            }
            for (int64_t t = g; t < g + tpb && t < tiles; t++) {
                const int64_t j = t * 32 + lane;
                float acc = 0.0f;
                if (j < D)
                    for (int64_t r = s + warp; r < lo; r += EMB_WARPS) acc += to_f<T>(dy[(int64_t)pos[r] * D + j]);
                part[warp][lane] = acc;
                __syncthreads();
                if (warp == 0 && j < D) {
                    float sum = beta ? ld_dt(dw, tdw, v * D + j) : 0.0f;
#pragma unroll
                    for (int w = 0; w < EMB_WARPS; w++) sum += part[w][lane];
                    st_dt(dw, tdw, v * D + j, sum);
                }
                __syncthreads(); /* part is rewritten next */
            }
        }
    }
}

/* Tiles per block: 1 when the average run is long (more than EMB_SHORT indices per
 * vocabulary row: the 65-character vocabulary's runs of hundreds, whose tiles f6d5fb9
 * spread over blocks; 6b3b530 had one block take eight of them one after another, and the
 * Shakespeare iteration measured 6.98 ms after it against 6.70 before, the likely cause,
 * not yet measured apart), else a tile per warp (GPT-2's runs of one or a few). */
static int bwd_tiles_per_block(int64_t n, int64_t V) { return n > (int64_t)EMB_SHORT * V ? 1 : EMB_WARPS; }

/* blocks over sorted positions (at most 4096: each strides over n / 4096 of them) times
 * groups of tpb 32-column tiles (at most 65535 groups: the kernel strides over the rest) */
static dim3 bwd_grid(int64_t n, int64_t D, int tpb) {
    const int64_t x = n < 4096 ? (n > 0 ? n : 1) : 4096, tiles = D > 0 ? (D + 31) / 32 : 1,
                  y = (tiles + tpb - 1) / tpb;
    return dim3((unsigned)x, (unsigned)(y < 65535 ? y : 65535));
}

} // namespace

extern "C" {

dlt_status dlt__cuda_embedding_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *w, const dlt_tensor *idx) {
    const int64_t n = idx->numel, V = w->shape[0], D = w->shape[1];
    cudaStream_t st = dlt__stream(ctx);
    DLT_CHECK(same_dtype("dlt_embedding", w->dtype, y));
    const bool i64 = idx->dtype == DLT_I64;
    DLT_DISPATCH_FLOAT(w->dtype, T, {
        const int wv = Vec16<T>::N;
        const int64_t nv = n * D / wv;
        /* below 2^31 vectors, the index plus the grid stride stays within 32 bits */
        if (vec16_ok(D, wv, dlt__data(y), dlt__data(w)) && nv < ((int64_t)1 << 31)) {
            uint4 *yp = (uint4 *)dlt__data(y);
            const uint4 *wp = (const uint4 *)dlt__data(w);
            if (i64)
                embedding_fwd_vec_kernel<T, int64_t><<<grid_for(nv, 256), 256, 0, st>>>(
                    yp, wp, (const int64_t *)dlt__data(idx), (uint32_t)nv, V, (uint32_t)(D / wv));
            else
                embedding_fwd_vec_kernel<T, int32_t><<<grid_for(nv, 256), 256, 0, st>>>(
                    yp, wp, (const int32_t *)dlt__data(idx), (uint32_t)nv, V, (uint32_t)(D / wv));
        } else if (i64) {
            embedding_fwd_kernel<T, int64_t><<<grid_for(n * D, 256), 256, 0, st>>>(
                (T *)dlt__data(y), (const T *)dlt__data(w), (const int64_t *)dlt__data(idx), n, V, D);
        } else {
            embedding_fwd_kernel<T, int32_t><<<grid_for(n * D, 256), 256, 0, st>>>(
                (T *)dlt__data(y), (const T *)dlt__data(w), (const int32_t *)dlt__data(idx), n, V, D);
        }
    });
    DLT_CU_LAUNCHED(ctx, "dlt_embedding");
    return DLT_OK;
}

dlt_status dlt__cuda_embedding_bwd(dlt_ctx *ctx, dlt_tensor *dw, const dlt_tensor *dy, const dlt_tensor *idx,
                                   int64_t padding_idx, int32_t beta) {
    static const char *F = "dlt_backward(embedding)";
    const int64_t n = idx->numel, V = dw->shape[0], D = dw->shape[1];
    if (n > INT32_MAX) return dlt__err(DLT_ERR_NOT_SUPPORTED, F, "more than 2^31 indices");
    cudaStream_t st = dlt__stream(ctx);
    /* scratch: keys in/out (int64), positions in/out (int32), then CUB's temporary space */
    int end_bit = 1;
    while (end_bit < 63 && ((int64_t)1 << end_bit) <= V) end_bit++; /* keys are in [0, V] */
    size_t temp = 0;
    DLT_CU(ctx, cub::DeviceRadixSort::SortPairs(nullptr, temp, (const int64_t *)nullptr, (int64_t *)nullptr,
                                                (const int32_t *)nullptr, (int32_t *)nullptr, (int)n, 0, end_bit, st),
           F);
    const size_t keys_b = ((size_t)n * 8 + 255) & ~(size_t)255, pos_b = ((size_t)n * 4 + 255) & ~(size_t)255;
    void *scratch = NULL;
    DLT_CHECK(dlt__cuda_scratch(ctx, 2 * keys_b + 2 * pos_b + temp, &scratch));
    char *p = (char *)scratch;
    int64_t *keys_in = (int64_t *)p, *keys_out = (int64_t *)(p + keys_b);
    int32_t *pos_in = (int32_t *)(p + 2 * keys_b), *pos_out = (int32_t *)(p + 2 * keys_b + pos_b);
    void *cub_temp = p + 2 * keys_b + 2 * pos_b;
    if (idx->dtype == DLT_I64)
        iota_keys_kernel<int64_t><<<grid_for(n, 256), 256, 0, st>>>(keys_in, pos_in, (const int64_t *)dlt__data(idx), n, V);
    else
        iota_keys_kernel<int32_t><<<grid_for(n, 256), 256, 0, st>>>(keys_in, pos_in, (const int32_t *)dlt__data(idx), n, V);
    DLT_CU_LAUNCHED(ctx, F);
    DLT_CU(ctx, cub::DeviceRadixSort::SortPairs(cub_temp, temp, keys_in, keys_out, pos_in, pos_out, (int)n, 0, end_bit, st),
           F);
    if (!beta) DLT_CU(ctx, cudaMemsetAsync(dlt__data(dw), 0, dlt__nbytes(dw), st), F);
    const int tpb = bwd_tiles_per_block(n, V);
    DLT_DISPATCH_FLOAT(dy->dtype, T,
        embedding_bwd_kernel<T><<<bwd_grid(n, D, tpb), EMB_WARPS * 32, 0, st>>>(
            dlt__data(dw), dw->dtype, (const T *)dlt__data(dy), keys_out, pos_out, n, V, D, padding_idx, 1, tpb));
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

} // extern "C"
