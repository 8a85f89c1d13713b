/*
 * conv2d_pad.cu - convolutions of 16-bit channels-last inputs with few channels (an image's
 * three: ResNet's stem) through cuDNN with the channels padded with zeros.
 *
 * Why: a pixel of three f16 channels is 6 bytes, an alignment cuDNN's tensor-core engines
 * for channels-last data do not take, so its heuristics pick generic kernels for such a
 * convolution (`..._indexed_wo_smem_...`). On the H200 at ResNet50's stem (7x7,
 * stride 2, 3 -> 64 channels, 32x32 images): forward 491 us at batch 4096, and the weight
 * gradient 120.8 us at batch 64, where batch 256's engine takes 28.5 + 7.3 us for four
 * times the work (ncu, docs/performance.md). With the input and the filter padded to cp
 * channels the same convolution is an aligned one: the padded channels are zeros in both,
 * so they add exact zeros to every sum and y is the same up to the order of the fp32
 * additions.
 *
 * Forward: x [N,H,W,C] -> xp [N,H,W,cp], w [K,R,S,C] -> wp [K,R,S,cp] (zeros after C), y
 * from xp and wp. Weight gradient: xp again (not kept from the forward: that would hold
 * N*H*W*cp values across the step), dwp [K,R,S,cp] from xp and dy, its first C channels
 * copied into dw. With beta = 1 dwp starts as dw padded and the plan adds into it (one
 * rounding, as cuDNN's beta does); only where no engine takes beta = 1 for the padded shapes
 * does a beta = 0 plan's dwp get added to dw by our kernel (rounded twice). The data
 * gradient is not padded: a stem's input needs none.
 *
 * The temporaries come from the pool (inside a captured step: its arena) and are released
 * after the call, stream-ordered. Work on the side stream may not allocate (lib/core/side.c),
 * so a weight gradient there runs unpadded. DLT_CONV_PAD_CHANNELS sets cp, 0 turns this off;
 * the default 4 (8-byte pixels) measured best on the H200 (ResNet50 captured step, batch 64
 * fp16: 1.613 ms, 1.610 with 8, 1.712 unpadded; batch 256 fp16: 2.192, 2.218 with 8, 2.198;
 * batch 1024 bf16: 4.41, 4.41, 4.51).
 */
#include "common.cuh"
#include "cudnn_graph.h"
#include "ops_cuda.h"

using namespace dlt;

namespace {

const char *const kFunc[3] = {"dlt_conv2d", "dlt_conv2d_backward", "dlt_conv2d_backward"};

/* dst [rows, CP] = src [rows, C] then zeros; 16-bit values moved as raw bits (0 is +0.0
 * in f16 and bf16), one thread per row, the row stored as one vector when CP is 4 or 8 */
template <int CP> struct RowVec;
template <> struct RowVec<4> { union { uint2 raw; uint16_t h[4]; }; };
template <> struct RowVec<8> { union { uint4 raw; uint16_t h[8]; }; };

template <int CP>
__global__ void pad_rows_vec(uint16_t *__restrict__ dst, const uint16_t *__restrict__ src, int64_t rows, int C) {
    DLT_GRID_STRIDE(r, rows) {
        RowVec<CP> v;
#pragma unroll
        for (int c = 0; c < CP; c++) v.h[c] = c < C ? src[r * C + c] : (uint16_t)0;
        reinterpret_cast<decltype(v.raw) *>(dst)[r] = v.raw;
    }
}

__global__ void pad_rows(uint16_t *__restrict__ dst, const uint16_t *__restrict__ src, int64_t rows, int C,
                         int cp) {
    DLT_GRID_STRIDE(i, rows * cp) {
        const int64_t r = i / cp;
        const int c = (int)(i % cp);
        dst[i] = c < C ? src[r * C + c] : (uint16_t)0;
    }
}

/* dst [rows, C] = src [rows, cp]'s first C channels, or dst + them when add */
template <typename T>
__global__ void unpad_rows(T *__restrict__ dst, const T *__restrict__ src, int64_t rows, int C, int cp, int add) {
    DLT_GRID_STRIDE(i, rows * C) {
        const int64_t r = i / C;
        const T v = src[r * cp + i % C];
        dst[i] = add ? from_f<T>(to_f<T>(dst[i]) + to_f<T>(v)) : v;
    }
}

dlt_status pad(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src, int32_t dir) {
    const int64_t C = src->shape[1], cp = dst->shape[1], rows = src->numel / C;
    uint16_t *d = (uint16_t *)dlt__data(dst);
    const uint16_t *s = (const uint16_t *)dlt__data(src);
    cudaStream_t st = dlt__stream(ctx);
    if (cp == 8)
        pad_rows_vec<8><<<grid_for(rows, 256), 256, 0, st>>>(d, s, rows, (int)C);
    else if (cp == 4)
        pad_rows_vec<4><<<grid_for(rows, 256), 256, 0, st>>>(d, s, rows, (int)C);
    else
        pad_rows<<<grid_for(rows * cp, 256), 256, 0, st>>>(d, s, rows, (int)C, (int)cp);
    DLT_CU_LAUNCHED(ctx, kFunc[dir]);
    return DLT_OK;
}

/* the padded twin of t: channel dim cp, same dtype and format */
dlt_status padded_like(dlt_ctx *ctx, const dlt_tensor *t, int64_t cp, int32_t dir, dlt_tensor **out) {
    const int64_t shape[4] = {t->shape[0], cp, t->shape[2], t->shape[3]};
    return dlt__tensor_new(ctx, t->dtype, shape, 4, t->format, kFunc[dir], out);
}

int qualifies(dlt_ctx *ctx, int32_t dir, const dlt_tensor *x, const dlt_tensor *w, const dlt_tensor *y,
              const dlt_conv_params *p, int32_t cp) {
    const int cl = DLT_FORMAT_CHANNELS_LAST;
    if (dir != 0 && dir != 2) return 0;
    if (x->dtype != DLT_F16 && x->dtype != DLT_BF16) return 0;
    if (w->dtype != x->dtype || y->dtype != x->dtype) return 0;
    if (x->format != cl || w->format != cl || y->format != cl || p->groups != 1) return 0;
    if (x->shape[1] >= cp || cp > 8 || x->numel == 0 || y->numel == 0) return 0;
    /* the side stream may not allocate: a weight gradient forked there runs as it is */
    return !dlt__cu(ctx)->side.on;
}

void log_once(dlt_ctx *ctx, const dlt_tensor *x, int32_t cp) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (s->conv_pad_logged) return;
    s->conv_pad_logged = 1;
    dlt__log(DLT_LOG_INFO, "dlt: conv2d with %lld input channels (%s channels-last) runs through cuDNN with "
             "its channels padded to %d", (long long)x->shape[1], dlt_dtype_name(x->dtype), (int)cp);
}

} // namespace

extern "C" dlt_status dlt__cuda_conv2d_padded(dlt_ctx *ctx, int32_t dir, const dlt_tensor *x, dlt_tensor *w,
                                              dlt_tensor *y, const dlt_conv_params *p, int32_t beta, int32_t cp,
                                              int *done) {
    *done = 0;
    if (!qualifies(ctx, dir, x, w, y, p, cp)) return DLT_OK;
    dlt_tensor *xp = NULL, *wp = NULL;
    dlt_cudnn_plan *plan = NULL;
    int add = 0; /* beta = 1 through a beta = 0 plan */
    dlt_status st = padded_like(ctx, x, cp, dir, &xp);
    if (st == DLT_OK) st = padded_like(ctx, w, cp, dir, &wp);
    /* the plan first: where cuDNN has none for the padded shapes nothing is launched (a
     * plan built with cudnn_benchmark on times its engines on xp and wp still unfilled) */
    if (st == DLT_OK) st = dlt__cuda_conv2d_plan(ctx, dir, xp, wp, y, p, dir == 2 ? beta : 0, &plan);
    if (st == DLT_OK && !plan && dir == 2 && beta) {
        st = dlt__cuda_conv2d_plan(ctx, dir, xp, wp, y, p, 0, &plan);
        add = 1;
    }
    if (st == DLT_OK && plan) {
        st = pad(ctx, xp, x, dir);
        if (st == DLT_OK && (dir == 0 || (beta && !add))) st = pad(ctx, wp, w, dir);
        if (st == DLT_OK) st = dlt__cuda_conv2d_execute(ctx, dir, plan, xp, wp, y, p, dir == 2 && !add ? beta : 0);
        if (st == DLT_OK && dir == 2) {
            const int64_t C = w->shape[1], rows = w->numel / C;
            const unsigned grid = grid_for(rows * C, 256);
            cudaStream_t cs = dlt__stream(ctx);
            if (w->dtype == DLT_F16)
                unpad_rows<__half><<<grid, 256, 0, cs>>>((__half *)dlt__data(w), (const __half *)dlt__data(wp),
                                                         rows, (int)C, (int)cp, add);
            else
                unpad_rows<__nv_bfloat16><<<grid, 256, 0, cs>>>((__nv_bfloat16 *)dlt__data(w),
                                                                (const __nv_bfloat16 *)dlt__data(wp), rows,
                                                                (int)C, (int)cp, add);
            const cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) st = dlt__cuda_fail(ctx, e, kFunc[dir], "unpad_rows");
        }
        if (st == DLT_OK) {
            *done = 1;
            log_once(ctx, x, cp);
        }
    }
    dlt_tensor_release(xp);
    dlt_tensor_release(wp);
    return st;
}
