/*
 * data.cu - the CUDA side of the data pipeline: one gather-convert(-augment) kernel per
 * batch, the token-window gather, the epoch order (Philox keys sorted with CUB's
 * DeviceRadixSort), and the loaders' device cursor.
 *
 * Image gather: one block per batch row. The block reads the row's position from the device
 * cursor (so a captured step reads a new batch on every replay), looks the sample up in
 * the permutation, stages its C*H*W uint8 bytes in shared memory (16-byte loads when the
 * records allow; images over 40 KiB are read from global memory instead), then writes the
 * row's output elements - contiguous in memory in both NCHW and channels-last - with
 * 16-byte stores (4 fp32 or 8 fp16/bf16 per store) where the row size allows. Each output
 * element is decoded back to (c, y, x) for its format, so crop and flip are just a
 * different source byte. CIFAR-10's 3x32x32 geometry is a template case with the sizes as
 * constants. Labels are widened to int32/int64 by thread 0.
 *
 * Other records (tensor datasets): one thread per output element over the whole batch, a
 * raw element copy when the dtypes match, else a conversion through fp32 (the CPU's
 * dlt__ld/dlt__st arithmetic: exact widening, round-to-nearest-even narrowing).
 *
 * Token windows: one block per row; every thread computes the row's Philox offset (cheaper
 * than a broadcast) and copies a strided part of x and y.
 *
 * Order: keys[k] = 64-bit Philox key of index k, values k; a stable radix sort of the
 * (key, index) pairs equals the CPU's qsort by key then index. The sort's buffers come
 * from the stream-ordered pool and go back to it right after the launch (no sync).
 *
 * The per-sample math (draws, source byte, ToTensor/Normalize, token offsets) is in
 * lib/kernel/data.h, shared with lib/cpu/data.c: the same bits on both backends.
 * The generic-record and token kernels are compile-checked only so far (no GPU in the
 * session that wrote them); tests/cuda_data.c compares them with the CPU.
 */
#include <string.h>

#include <cub/device/device_radix_sort.cuh>

#include "../lib/kernel/data.h"
#include "common.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

constexpr int GATHER_THREADS = 256;
constexpr int MAXC = DLT_DATA_MAX_CHANNELS;
constexpr int64_t STAGE_MAX_BYTES = 40 * 1024; /* dynamic shared memory per staged image */

struct GatherArgs {
    const uint8_t *images;
    const int32_t *labels;
    int64_t count;
    const int32_t *perm;
    const dlt_data_cursor *cursor;
    int64_t batch_size;
    int64_t n;
    float mean[MAXC], std[MAXC];
    int32_t normalize, crop_pad, hflip, augment, channels_last, y64;
    int32_t C, H, W, staged, vec_load, src_dtype;
    int64_t numel;
    int64_t record_bytes;
    uint64_t aug_seed;
    void *x;
    void *y;
    int64_t aug_stride, aug_offset; /* dist: a shard's augmentation keys */
};

/* Dataset index of batch row `row` at cursor cur; raw = the unwrapped epoch position. */
__device__ __forceinline__ int64_t sample_of(const GatherArgs &a, const dlt_data_cursor &cur,
                                             int64_t row, int64_t &raw) {
    const int64_t p = cur.batch * a.batch_size + row;
    /* keys the augmentation: the position in the whole epoch (a shard's: internal.h) */
    raw = a.aug_stride ? p * a.aug_stride + a.aug_offset : p;
    const int64_t pos = p % a.count; /* wraps past the end (replays) */
    return a.perm ? (int64_t)a.perm[pos] : pos;
}

__device__ __forceinline__ void write_label(const GatherArgs &a, int64_t row, int64_t idx) {
    int32_t label = a.labels[idx];
    if (a.y64)
        static_cast<int64_t *>(a.y)[row] = label;
    else
        static_cast<int32_t *>(a.y)[row] = label;
}

/* Logical (c, y, x) of memory element e of one C x H x W image in either format. */
__device__ __forceinline__ void decode(int e, int cl, int C, int H, int W, int &c, int &y, int &x) {
    if (cl) {
        c = e % C;
        x = (e / C) % W;
        y = e / (C * W);
    } else {
        c = e / (H * W);
        y = (e / W) % H;
        x = e % W;
    }
}

template <typename T, bool VEC, bool CIFAR>
__global__ void __launch_bounds__(GATHER_THREADS) gather_image_kernel(GatherArgs a) {
    extern __shared__ __align__(16) uint8_t staged[];
    __shared__ float s_mean[MAXC], s_std[MAXC];
    const int C = CIFAR ? DLT_DATA_C : a.C, H = CIFAR ? DLT_DATA_H : a.H, W = CIFAR ? DLT_DATA_W : a.W;
    const int numel = C * H * W;
    const int64_t row = blockIdx.x;
    const dlt_data_cursor cur = *a.cursor;
    int64_t raw;
    const int64_t idx = sample_of(a, cur, row, raw);
    const uint8_t *src = a.images + idx * a.record_bytes;
    if (a.staged) {
        if (a.vec_load) {
            for (int i = threadIdx.x; i < numel / 16; i += GATHER_THREADS)
                reinterpret_cast<uint4 *>(staged)[i] = __ldg(reinterpret_cast<const uint4 *>(src) + i);
        } else {
            for (int i = threadIdx.x; i < numel; i += GATHER_THREADS) staged[i] = __ldg(src + i);
        }
    }
    /* constant indices: a dynamic index into the arguments would copy them to local memory */
#pragma unroll
    for (int k = 0; k < MAXC; k++)
        if (threadIdx.x == k) {
            s_mean[k] = a.mean[k];
            s_std[k] = a.std[k];
        }
    if (threadIdx.x == 0 && a.y) write_label(a, row, idx);
    /* every thread draws the same values: cheaper than a broadcast through shared memory */
    const dlt_data_aug aug = dlt__data_aug_draw(a.aug_seed, cur.epoch, raw, a.crop_pad, a.hflip);
    __syncthreads();

    const uint8_t *img = a.staged ? staged : src;
    constexpr int V = VEC ? 16 / (int)sizeof(T) : 1;
    T *out = static_cast<T *>(a.x) + row * numel;
    for (int v = threadIdx.x; v < numel / V; v += GATHER_THREADS) {
        union {
            uint4 u;
            T t[V];
        } pack;
#pragma unroll
        for (int k = 0; k < V; k++) {
            int c, y, x;
            decode(v * V + k, a.channels_last, C, H, W, c, y, x);
            uint8_t b = a.augment ? dlt__data_src_byte(img, c, y, x, aug, a.crop_pad, H, W)
                                  : img[(c * H + y) * W + x];
            pack.t[k] = from_f<T>(dlt__data_value(b, a.normalize, s_mean[c], s_std[c]));
        }
        if constexpr (VEC)
            reinterpret_cast<uint4 *>(out)[v] = pack.u;
        else
            out[v] = pack.t[0];
    }
}

/* Logical (CHW-order) element of memory element e of a sample: channels-last samples are
 * [C, H, W] stored HWC. */
__device__ __forceinline__ int64_t logical_elem(const GatherArgs &a, int64_t e) {
    if (!a.channels_last) return e;
    const int64_t c = e % a.C, x = (e / a.C) % a.W, y = e / ((int64_t)a.C * a.W);
    return (c * a.H + y) * a.W + x;
}

__device__ __forceinline__ float load_f(const uint8_t *p, int32_t dtype, int64_t i) {
    switch (dtype) {
    case DLT_F32: return reinterpret_cast<const float *>(p)[i];
    case DLT_F16: return __half2float(reinterpret_cast<const __half *>(p)[i]);
    case DLT_BF16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(p)[i]);
    default: return (float)p[i];
    }
}

/* Non-image records converted to T, one thread per output element of the batch. */
template <typename T> __global__ void gather_convert_kernel(GatherArgs a) {
    const dlt_data_cursor cur = *a.cursor;
    DLT_GRID_STRIDE(i, a.n * a.numel) {
        const int64_t row = i / a.numel, e = i % a.numel;
        int64_t raw;
        const int64_t idx = sample_of(a, cur, row, raw);
        const float v = load_f(a.images + idx * a.record_bytes, a.src_dtype, logical_elem(a, e));
        static_cast<T *>(a.x)[i] = from_f<T>(v);
        if (i < a.n && a.y) write_label(a, i, sample_of(a, cur, i, raw));
    }
}

/* Non-image records in their own dtype: elements of E (1, 2 or 4 bytes) copied bit for bit. */
template <typename E> __global__ void gather_copy_kernel(GatherArgs a) {
    const dlt_data_cursor cur = *a.cursor;
    DLT_GRID_STRIDE(i, a.n * a.numel) {
        const int64_t row = i / a.numel, e = i % a.numel;
        int64_t raw;
        const int64_t idx = sample_of(a, cur, row, raw);
        const E *src = reinterpret_cast<const E *>(a.images + idx * a.record_bytes);
        static_cast<E *>(a.x)[i] = src[logical_elem(a, e)];
        if (i < a.n && a.y) write_label(a, i, sample_of(a, cur, i, raw));
    }
}

struct TokenArgs {
    const uint16_t *tokens;
    const dlt_data_cursor *cursor;
    uint64_t seed, range;
    int64_t T;
    void *x, *y;
    int64_t row_offset; /* dist: a rank's rows */
};

template <typename I> __global__ void tokens_kernel(TokenArgs a) {
    const int64_t b = blockIdx.x;
    const dlt_data_cursor cur = *a.cursor;
    const int64_t o = dlt__token_offset(a.seed, cur.batch, b + a.row_offset, a.range);
    const uint16_t *src = a.tokens + o;
    I *x = static_cast<I *>(a.x) + b * a.T, *y = static_cast<I *>(a.y) + b * a.T;
    for (int64_t t = threadIdx.x; t < a.T; t += blockDim.x) {
        x[t] = (I)src[t];
        y[t] = (I)src[t + 1];
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
dlt_status launch_image(dlt_ctx *ctx, const GatherArgs &a, bool vec, bool cifar) {
    cudaStream_t st = dlt__stream(ctx);
    const size_t smem = a.staged ? (size_t)((a.numel + 15) / 16 * 16) : 0;
    const unsigned blocks = (unsigned)a.n;
    if (cifar && vec)
        gather_image_kernel<T, true, true><<<blocks, GATHER_THREADS, smem, st>>>(a);
    else if (cifar)
        gather_image_kernel<T, false, true><<<blocks, GATHER_THREADS, smem, st>>>(a);
    else if (vec)
        gather_image_kernel<T, true, false><<<blocks, GATHER_THREADS, smem, st>>>(a);
    else
        gather_image_kernel<T, false, false><<<blocks, GATHER_THREADS, smem, st>>>(a);
    DLT_CU_LAUNCHED(ctx, "dlt_loader_next");
    return DLT_OK;
}

template <typename T> dlt_status launch_convert(dlt_ctx *ctx, const GatherArgs &a) {
    gather_convert_kernel<T><<<grid_for(a.n * a.numel, 256), 256, 0, dlt__stream(ctx)>>>(a);
    DLT_CU_LAUNCHED(ctx, "dlt_loader_next");
    return DLT_OK;
}

template <typename E> dlt_status launch_copy(dlt_ctx *ctx, const GatherArgs &a) {
    gather_copy_kernel<E><<<grid_for(a.n * a.numel, 256), 256, 0, dlt__stream(ctx)>>>(a);
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
    GatherArgs a;
    memset(&a, 0, sizeof a);
    a.images = L->images;
    a.labels = L->labels;
    a.count = L->count;
    a.perm = L->perm;
    a.cursor = L->cursor;
    a.batch_size = L->batch_size;
    a.n = L->n;
    for (int c = 0; c < MAXC; c++) {
        a.mean[c] = L->mean[c];
        a.std[c] = L->std[c];
    }
    a.normalize = L->normalize;
    a.crop_pad = L->crop_pad;
    a.hflip = L->hflip;
    a.augment = L->crop_pad > 0 || L->hflip;
    a.channels_last = L->x->format == DLT_FORMAT_CHANNELS_LAST;
    a.y64 = L->y && L->y->dtype == DLT_I64;
    a.C = (int32_t)L->C;
    a.H = (int32_t)L->H;
    a.W = (int32_t)L->W;
    a.src_dtype = L->src_dtype;
    a.numel = L->sample_numel;
    a.record_bytes = (int64_t)L->record_bytes;
    a.aug_seed = L->aug_seed;
    a.aug_stride = L->aug_stride;
    a.aug_offset = L->aug_offset;
    a.x = dlt__data(L->x);
    a.y = L->y ? dlt__data(L->y) : nullptr;
    if (!L->image) {
        if (L->x->dtype == L->src_dtype) {
            switch (dlt__dtype_size(L->src_dtype)) {
            case 1: return launch_copy<uint8_t>(ctx, a);
            case 2: return launch_copy<uint16_t>(ctx, a);
            default: return launch_copy<uint32_t>(ctx, a);
            }
        }
        DLT_DISPATCH_FLOAT(L->x->dtype, T, return launch_convert<T>(ctx, a));
        return DLT_OK;
    }
    if (a.numel > INT32_MAX / 2)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F, "images of %lld bytes", (long long)a.numel);
    a.staged = a.numel <= STAGE_MAX_BYTES;
    a.vec_load = ((uintptr_t)a.images & 15u) == 0 && a.record_bytes % 16 == 0;
    const bool cifar = a.C == DLT_DATA_C && a.H == DLT_DATA_H && a.W == DLT_DATA_W;
    /* 16-byte stores need an aligned base and rows of whole vectors (the loader's buffers
     * come from the pool, 256-aligned; CIFAR-10's 3072 elements always qualify) */
    const int width = L->x->dtype == DLT_F32 ? 4 : 8;
    const bool vec = ((uintptr_t)a.x & 15u) == 0 && a.numel % width == 0;
    DLT_DISPATCH_FLOAT(L->x->dtype, T, return launch_image<T>(ctx, a, vec, cifar));
    return DLT_OK;
}

dlt_status dlt__cuda_data_tokens(dlt_ctx *ctx, const dlt_token_launch *L) {
    static const char *F = "dlt_token_loader_next";
    if (L->batch_size < 1 || L->batch_size > INT32_MAX || L->block_size >= L->count)
        return dlt__err(DLT_ERR_INTERNAL, F, "token batch %lld x %lld over %lld tokens",
                        (long long)L->batch_size, (long long)L->block_size, (long long)L->count);
    TokenArgs a;
    a.tokens = L->tokens;
    a.cursor = L->cursor;
    a.seed = L->seed;
    a.range = (uint64_t)(L->count - L->block_size);
    a.T = L->block_size;
    a.x = dlt__data(L->x);
    a.y = dlt__data(L->y);
    a.row_offset = L->row_offset;
    const int threads = L->block_size >= 256 ? 256 : 64;
    if (L->x->dtype == DLT_I64)
        tokens_kernel<int64_t><<<(unsigned)L->batch_size, threads, 0, dlt__stream(ctx)>>>(a);
    else
        tokens_kernel<int32_t><<<(unsigned)L->batch_size, threads, 0, dlt__stream(ctx)>>>(a);
    DLT_CU_LAUNCHED(ctx, F);
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
