/*
 * embedding.cu - CUDA embedding (lib/ops/embedding.c).
 *   forward   one thread per output element, the row read at its index; an index outside
 *             [0, V) cannot be reported without a host sync, so its row is NaN (the loss
 *             then is NaN, as cross-entropy does with a bad target);
 *   backward  deterministic whatever the mode: the indices are sorted with their positions
 *             (CUB radix sort, stable, so equal indices keep position order), then one warp
 *             per run of equal indices adds that run's gradient rows in order into dW[v].
 *             No atomics: the same bits every run. padding_idx and out-of-range indices are
 *             skipped.
 * The sort's buffers come from the context's scratch (sized in warm-up before a capture).
 * Compile-checked; first run on a GPU is the next session's.
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

template <typename I> __global__ void iota_keys_kernel(int64_t *keys, int32_t *pos, const I *idx, int64_t n, int64_t V) {
    DLT_GRID_STRIDE(i, n) {
        const int64_t v = (int64_t)idx[i];
        keys[i] = (v >= 0 && v < V) ? v : V; /* out of range sorts last and is skipped */
        pos[i] = (int32_t)i;
    }
}

/* One warp per sorted position that starts a run; the warp adds the run's rows. */
template <typename T>
__global__ void embedding_bwd_kernel(void *dw, int tdw, const T *dy, const int64_t *keys, const int32_t *pos, int64_t n,
                                     int64_t V, int64_t D, int64_t padding_idx, int beta) {
    const int lane = threadIdx.x & 31;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t s = first; s < n; s += step) {
        const int64_t v = keys[s];
        if (v >= V || v == padding_idx || (s > 0 && keys[s - 1] == v)) continue;
        int64_t e = s;
        while (e < n && keys[e] == v) e++;
        for (int64_t j = lane; j < D; j += 32) {
            float acc = beta ? ld_dt(dw, tdw, v * D + j) : 0.0f;
            for (int64_t r = s; r < e; r++) acc += to_f<T>(dy[(int64_t)pos[r] * D + j]);
            st_dt(dw, tdw, v * D + j, acc);
        }
    }
}

} // namespace

extern "C" {

dlt_status dlt__cuda_embedding_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *w, const dlt_tensor *idx) {
    const int64_t n = idx->numel, V = w->shape[0], D = w->shape[1];
    cudaStream_t st = dlt__stream(ctx);
    DLT_CHECK(same_dtype("dlt_embedding", w->dtype, y));
    if (idx->dtype == DLT_I64) {
        DLT_DISPATCH_FLOAT(w->dtype, T,
            embedding_fwd_kernel<T, int64_t><<<grid_for(n * D, 256), 256, 0, st>>>(
                (T *)dlt__data(y), (const T *)dlt__data(w), (const int64_t *)dlt__data(idx), n, V, D));
    } else {
        DLT_DISPATCH_FLOAT(w->dtype, T,
            embedding_fwd_kernel<T, int32_t><<<grid_for(n * D, 256), 256, 0, st>>>(
                (T *)dlt__data(y), (const T *)dlt__data(w), (const int32_t *)dlt__data(idx), n, V, D));
    }
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
    DLT_DISPATCH_FLOAT(dy->dtype, T,
        embedding_bwd_kernel<T><<<grid_for(n * 32, 256), 256, 0, st>>>(dlt__data(dw), dw->dtype, (const T *)dlt__data(dy),
                                                                       keys_out, pos_out, n, V, D, padding_idx, 1));
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

} // extern "C"
