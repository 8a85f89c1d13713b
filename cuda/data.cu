/*
 * data.cu - the CUDA side of the data pipeline: one gather-convert(-augment) kernel per
 * batch, the epoch order (Philox keys sorted with CUB's DeviceRadixSort), and the loader's
 * device cursor.
 *
 * Gather: one block per batch row. The block reads the row's position from the device
 * cursor (so a captured step reads a new batch on every replay), looks the sample up in
 * the permutation, stages its 3072 uint8 bytes in shared memory with 16-byte coalesced
 * loads, then writes the row's 3072 output elements - contiguous in memory in both NCHW
 * and channels-last - with 16-byte stores (4 fp32 or 8 fp16/bf16 per store). Each output
 * element is decoded back to (c, y, x) for its format, so crop and flip are just a
 * different source byte. Labels are widened to int32/int64 by thread 0.
 *
 * Order: keys[k] = 64-bit Philox key of index k, values k; a stable radix sort of the
 * (key, index) pairs equals the CPU's qsort by key then index. The sort's buffers come
 * from the stream-ordered pool and go back to it right after the launch (no sync).
 *
 * The per-sample math (draws, source byte, ToTensor/Normalize) is in
 * lib/data/data_internal.h, shared with lib/cpu/data.c: the same bits on both backends.
 */
#include <cub/device/device_radix_sort.cuh>

#include "../lib/data/data_internal.h"
#include "common.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

constexpr int GATHER_THREADS = 256;
constexpr int IMAGE_VEC16 = DLT_DATA_IMAGE_BYTES / 16;

struct GatherArgs {
    const uint8_t *images;
    const int32_t *labels;
    int64_t count;
    const int32_t *perm;
    const dlt_data_cursor *cursor;
    int64_t batch_size;
    float mean[3], std[3];
    int32_t normalize, crop_pad, hflip, augment, channels_last, y64;
    uint64_t aug_seed;
    void *x;
    void *y;
};

/* Logical (c, y, x) of memory element e of one image (3x32x32) in either format. */
__device__ __forceinline__ void decode(int e, int cl, int &c, int &y, int &x) {
    if (cl) {
        c = e % DLT_DATA_C;
        x = (e / DLT_DATA_C) % DLT_DATA_W;
        y = e / (DLT_DATA_C * DLT_DATA_W);
    } else {
        c = e / (DLT_DATA_H * DLT_DATA_W);
        y = (e / DLT_DATA_W) % DLT_DATA_H;
        x = e % DLT_DATA_W;
    }
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(GATHER_THREADS) gather_kernel(GatherArgs a) {
    __shared__ __align__(16) uint8_t img[DLT_DATA_IMAGE_BYTES];
    const int64_t row = blockIdx.x;
    const dlt_data_cursor cur = *a.cursor;
    const int64_t raw = cur.batch * a.batch_size + row; /* keys the augmentation */
    const int64_t pos = raw % a.count;                  /* wraps past the end (replays) */
    const int64_t idx = a.perm ? (int64_t)a.perm[pos] : pos;

    const uint4 *src = reinterpret_cast<const uint4 *>(a.images + idx * DLT_DATA_IMAGE_BYTES);
    for (int i = threadIdx.x; i < IMAGE_VEC16; i += GATHER_THREADS)
        reinterpret_cast<uint4 *>(img)[i] = __ldg(src + i);
    if (threadIdx.x == 0) {
        int32_t label = a.labels[idx];
        if (a.y64)
            static_cast<int64_t *>(a.y)[row] = label;
        else
            static_cast<int32_t *>(a.y)[row] = label;
    }
    /* every thread draws the same values: cheaper than a broadcast through shared memory */
    const dlt_data_aug aug = dlt__data_aug_draw(a.aug_seed, cur.epoch, raw, a.crop_pad, a.hflip);
    __syncthreads();

    constexpr int V = VEC ? 16 / (int)sizeof(T) : 1;
    T *out = static_cast<T *>(a.x) + row * DLT_DATA_IMAGE_BYTES;
    for (int v = threadIdx.x; v < DLT_DATA_IMAGE_BYTES / V; v += GATHER_THREADS) {
        union {
            uint4 u;
            T t[V];
        } pack;
#pragma unroll
        for (int k = 0; k < V; k++) {
            int c, y, x;
            decode(v * V + k, a.channels_last, c, y, x);
            uint8_t b = a.augment ? dlt__data_src_byte(img, c, y, x, aug, a.crop_pad)
                                  : img[(c * DLT_DATA_H + y) * DLT_DATA_W + x];
            /* selects, not a[c]: a dynamic index would copy the arguments to local memory */
            float mean = c == 0 ? a.mean[0] : c == 1 ? a.mean[1] : a.mean[2];
            float std = c == 0 ? a.std[0] : c == 1 ? a.std[1] : a.std[2];
            pack.t[k] = from_f<T>(dlt__data_value(b, a.normalize, mean, std));
        }
        if constexpr (VEC)
            reinterpret_cast<uint4 *>(out)[v] = pack.u;
        else
            out[v] = pack.t[0];
    }
}

__global__ void order_keys_kernel(uint64_t *keys, int32_t *vals, int64_t n, uint64_t seed,
                                  int64_t epoch) {
    DLT_GRID_STRIDE(i, n) {
        keys[i] = dlt__data_shuffle_key(seed, epoch, i);
        vals[i] = (int32_t)i;
    }
}

__global__ void cursor_set_kernel(dlt_data_cursor *c, int64_t batch, int64_t epoch) {
    c->batch = batch;
    c->epoch = epoch;
}

__global__ void cursor_advance_kernel(dlt_data_cursor *c) { c->batch += 1; }

template <typename T>
dlt_status launch_gather(dlt_ctx *ctx, const GatherArgs &a, int64_t n, bool vec) {
    cudaStream_t st = dlt__stream(ctx);
    if (vec)
        gather_kernel<T, true><<<(unsigned)n, GATHER_THREADS, 0, st>>>(a);
    else
        gather_kernel<T, false><<<(unsigned)n, GATHER_THREADS, 0, st>>>(a);
    DLT_CU_LAUNCHED(ctx, "dlt_loader_next");
    return DLT_OK;
}

size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

} // namespace

extern "C" {

dlt_status dlt__cuda_data_gather(dlt_ctx *ctx, const dlt_data_launch *L) {
    static const char *F = "dlt_loader_next";
    if (L->n < 1 || L->n > INT32_MAX)
        return dlt__err(DLT_ERR_INTERNAL, F, "batch of %lld rows", (long long)L->n);
    if (((uintptr_t)L->images & 15u) != 0)
        return dlt__err(DLT_ERR_INTERNAL, F, "dataset images are not 16-byte aligned");
    GatherArgs a;
    a.images = L->images;
    a.labels = L->labels;
    a.count = L->count;
    a.perm = L->perm;
    a.cursor = L->cursor;
    a.batch_size = L->batch_size;
    for (int c = 0; c < 3; c++) {
        a.mean[c] = L->mean[c];
        a.std[c] = L->std[c];
    }
    a.normalize = L->normalize;
    a.crop_pad = L->crop_pad;
    a.hflip = L->hflip;
    a.augment = L->crop_pad > 0 || L->hflip;
    a.channels_last = L->x->format == DLT_FORMAT_CHANNELS_LAST;
    a.y64 = L->y->dtype == DLT_I64;
    a.aug_seed = L->aug_seed;
    a.x = dlt__data(L->x);
    a.y = dlt__data(L->y);
    /* rows are 3072 elements, a multiple of 16 bytes, so an aligned base keeps every
     * 16-byte store aligned (the loader's buffers come from the pool, 256-aligned) */
    bool vec = ((uintptr_t)a.x & 15u) == 0;
    DLT_DISPATCH_FLOAT(L->x->dtype, T, return launch_gather<T>(ctx, a, L->n, vec));
    return DLT_OK;
}

dlt_status dlt__cuda_data_order(dlt_ctx *ctx, int32_t *perm, int64_t count, uint64_t seed,
                                int64_t epoch) {
    static const char *F = "dlt_loader_start_epoch";
    if (count < 1 || count > INT32_MAX)
        return dlt__err(DLT_ERR_INTERNAL, F, "order of %lld samples", (long long)count);
    cudaStream_t stream = dlt__stream(ctx);
    int n = (int)count;
    size_t temp_bytes = 0;
    DLT_CU(ctx, cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, (const uint64_t *)nullptr,
                                                (uint64_t *)nullptr, (const int32_t *)nullptr,
                                                (int32_t *)nullptr, n, 0, 64, stream),
           F);
    size_t keys_bytes = align256((size_t)n * sizeof(uint64_t));
    size_t vals_bytes = align256((size_t)n * sizeof(int32_t));
    size_t total = 2 * keys_bytes + vals_bytes + align256(temp_bytes);
    dlt_storage *s = NULL;
    DLT_CHECK(dlt__storage_new(ctx, total, F, &s));
    char *base = static_cast<char *>(s->data);
    uint64_t *keys_in = reinterpret_cast<uint64_t *>(base);
    uint64_t *keys_out = reinterpret_cast<uint64_t *>(base + keys_bytes);
    int32_t *vals_in = reinterpret_cast<int32_t *>(base + 2 * keys_bytes);
    void *temp = base + 2 * keys_bytes + vals_bytes;
    order_keys_kernel<<<grid_for(count, 256), 256, 0, stream>>>(keys_in, vals_in, count, seed, epoch);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, vals_in, perm, n,
                                            0, 64, stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    /* stream-ordered free: the pool hands the block out again only after the sort ran */
    dlt__storage_release(s);
    if (e != cudaSuccess) return dlt__cuda_fail(ctx, e, F, "epoch order (Philox keys + radix sort)");
    return DLT_OK;
}

dlt_status dlt__cuda_data_cursor_set(dlt_ctx *ctx, dlt_data_cursor *cursor, int64_t batch,
                                     int64_t epoch) {
    cursor_set_kernel<<<1, 1, 0, dlt__stream(ctx)>>>(cursor, batch, epoch);
    DLT_CU_LAUNCHED(ctx, "dlt_loader_start_epoch");
    return DLT_OK;
}

dlt_status dlt__cuda_data_cursor_advance(dlt_ctx *ctx, dlt_data_cursor *cursor) {
    cursor_advance_kernel<<<1, 1, 0, dlt__stream(ctx)>>>(cursor);
    DLT_CU_LAUNCHED(ctx, "dlt_loader_next");
    return DLT_OK;
}

} // extern "C"
