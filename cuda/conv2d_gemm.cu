/*
 * conv2d_gemm.cu - convolutions with a one-pixel output (P = Q = 1) as cuBLASLt GEMMs over
 * the taps that touch data.
 *
 * Why: at CIFAR's 32x32 inputs ResNet50's last stage runs on 1x1 maps, where a 3x3 pad-1
 * convolution reads one tap of nine (the centre) and cuDNN's implicit GEMM still walks all
 * nine: on the H200 its data gradient took twice its forward's time
 * (../shared/reference/cudnn-notes.md §1). The stage's first 3x3 (stride 2, 2x2 -> 1x1)
 * reads four taps, its downsample one pixel of four.
 *
 * With one output pixel, input pixel (h, w) meets tap (r, s) = (h + pad_h, w + pad_w)
 * alone, so the input rows h whose r lies in [0, R) and the columns w whose s lies in
 * [0, S) form the window [h0, h1) x [w0, w1). In channels-last memory one window row,
 * all its pixels and channels, is contiguous in x ([N, H*W*C], row stride H*W*C) and in
 * w ([K, R*S*C], row stride R*S*C), so per window row, row-major:
 *   forward   y [N,K]        (+)= x_h [N, Wn*C] . w_r [K, Wn*C]^T   (rows after the first add)
 *   dgrad     dx_h [N, Wn*C]  = beta*dx_h + dy [N,K] . w_r [K, Wn*C]
 *   wgrad     dw_r [K, Wn*C]  = beta*dw_r + dy^T . x_h
 * (Wn = w1 - w0). Input pixels outside the window get a zero gradient and taps outside it
 * a zero weight gradient: with beta 0 the whole output is zeroed first when such exist.
 * Summation: fp32 accumulation inside cuBLASLt in its own order (the same tolerance as
 * cuDNN against the CPU reference); TF32 only for fp32 tensors when the context allows it.
 *
 * Qualifies: groups 1, dilation 1 along any kernel axis longer than 1, f32/f16/bf16, x in
 * channels-last unless it is 1x1, w in channels-last unless its kernel is 1x1. Used in the
 * default (auto) selection only: DLT_CONV_IMPL=cudnn or native keep every convolution on
 * that implementation.
 *
 * Mode 2 (DLT_CONV_GEMM=2, the default) also takes the 1x1 stride-1 unpadded convolutions
 * of channels-last tensors, ResNet's bottleneck ends, as one GEMM each over M = N*H*W rows:
 * y [M,K] = x [M,C] . w [K,C]^T, dx = beta*dx + dy . w, dw = beta*dw + dy^T . x. On the
 * H200 that was faster than cuDNN's implicit GEMM at every ResNet50 batch measured
 * (docs/performance.md, "Tenth session"); DLT_CONV_GEMM=1 keeps those on cuDNN.
 */
#include "common.cuh"
#include "ops_cuda.h"

namespace {

struct Window {
    int64_t N, C, H, W, K, R, S;
    int64_t h0, h1, w0, w1, ph, pw;
    int none;      /* no tap touches data */
    int all_in;    /* every input pixel is in the window */
    int all_taps;  /* every tap meets an input pixel */
};

int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* x, w and y share one float dtype the GEMMs take */
int same_float_dtype(const dlt_tensor *x, const dlt_tensor *w, const dlt_tensor *y) {
    return x->dtype == w->dtype && x->dtype == y->dtype &&
           (x->dtype == DLT_F32 || x->dtype == DLT_F16 || x->dtype == DLT_BF16);
}

/* 1 when the convolution qualifies, with its window */
int window_of(const dlt_tensor *x, const dlt_tensor *w, const dlt_tensor *y, const dlt_conv_params *p,
              Window *o) {
    if (y->shape[2] != 1 || y->shape[3] != 1 || p->groups != 1) return 0;
    if (!same_float_dtype(x, w, y)) return 0;
    o->N = x->shape[0], o->C = x->shape[1], o->H = x->shape[2], o->W = x->shape[3];
    o->K = w->shape[0], o->R = w->shape[2], o->S = w->shape[3];
    if ((o->R > 1 && p->dil[0] != 1) || (o->S > 1 && p->dil[1] != 1)) return 0;
    if (o->H * o->W > 1 && x->format != DLT_FORMAT_CHANNELS_LAST) return 0;
    if (o->R * o->S > 1 && w->format != DLT_FORMAT_CHANNELS_LAST) return 0;
    if (o->N == 0 || o->C == 0 || o->K == 0) return 0; /* the callers' empty cases */
    o->ph = p->pad[0], o->pw = p->pad[1];
    o->h0 = max64(0, -o->ph), o->h1 = min64(o->H, o->R - o->ph);
    o->w0 = max64(0, -o->pw), o->w1 = min64(o->W, o->S - o->pw);
    o->none = o->h1 <= o->h0 || o->w1 <= o->w0;
    const int64_t in_win = o->none ? 0 : (o->h1 - o->h0) * (o->w1 - o->w0);
    o->all_in = in_win == o->H * o->W;
    o->all_taps = in_win == o->R * o->S;
    return 1;
}

/* 1x1, stride 1, no padding, groups 1, every tensor channels-last: one GEMM over N*H*W rows */
int pointwise(const dlt_tensor *x, const dlt_tensor *w, const dlt_tensor *y, const dlt_conv_params *p) {
    return w->shape[2] == 1 && w->shape[3] == 1 && p->stride[0] == 1 && p->stride[1] == 1 &&
           p->pad[0] == 0 && p->pad[1] == 0 && p->groups == 1 && x->format == DLT_FORMAT_CHANNELS_LAST &&
           y->format == DLT_FORMAT_CHANNELS_LAST && same_float_dtype(x, w, y) && x->numel > 0 &&
           y->numel > 0 && x->shape[2] == y->shape[2] && x->shape[3] == y->shape[3];
}

} // namespace

extern "C" dlt_status dlt__cuda_conv2d_gemm(dlt_ctx *ctx, int32_t dir, dlt_tensor *x, dlt_tensor *w,
                                            dlt_tensor *y, const dlt_conv_params *p, int32_t beta,
                                            int32_t mode, int *done) {
    const char *F = dir == 0 ? "dlt_conv2d" : "dlt_conv2d_backward";
    Window g;
    *done = 0;
    if (!window_of(x, w, y, p, &g)) {
        if (mode < 2 || !pointwise(x, w, y, p)) return DLT_OK;
        const int64_t M = x->shape[0] * x->shape[2] * x->shape[3], C = x->shape[1], K = w->shape[0];
        void *px = dlt__data(x), *pw = dlt__data(w), *py = dlt__data(y);
        const int32_t dt = x->dtype;
        if (dir == 0)
            DLT_CHECK(dlt__cuda_gemm_rm(ctx, dt, 0, 1, M, K, C, px, C, pw, C, py, K, 0, F));
        else if (dir == 1)
            DLT_CHECK(dlt__cuda_gemm_rm(ctx, dt, 0, 0, M, C, K, py, K, pw, C, px, C, beta, F));
        else
            DLT_CHECK(dlt__cuda_gemm_rm(ctx, dt, 1, 0, K, C, M, py, K, px, C, pw, C, beta, F));
        *done = 1;
        return DLT_OK;
    }
    const int32_t dt = x->dtype;
    const size_t es = dlt__dtype_size(dt);
    const int64_t ldx = g.H * g.W * g.C, ldw = g.R * g.S * g.C, width = (g.w1 - g.w0) * g.C;
    char *px = (char *)dlt__data(x), *pw = (char *)dlt__data(w), *py = (char *)dlt__data(y);
    /* outputs the GEMMs leave unwritten are zeros */
    if (dir == 0 && g.none) DLT_CHECK(ctx->be->memset0(ctx, py, dlt__nbytes(y)));
    if (dir == 1 && !beta && !g.all_in) DLT_CHECK(ctx->be->memset0(ctx, px, dlt__nbytes(x)));
    if (dir == 2 && !beta && !g.all_taps) DLT_CHECK(ctx->be->memset0(ctx, pw, dlt__nbytes(w)));
    for (int64_t h = g.h0; h < g.h1 && !g.none; h++) {
        const int64_t r = h + g.ph, s0 = g.w0 + g.pw;
        char *xh = px + (size_t)((h * g.W + g.w0) * g.C) * es; /* row n at + n * ldx */
        char *wr = pw + (size_t)((r * g.S + s0) * g.C) * es;   /* row k at + k * ldw */
        if (dir == 0)
            DLT_CHECK(dlt__cuda_gemm_rm(ctx, dt, 0, 1, g.N, g.K, width, xh, ldx, wr, ldw, py, g.K,
                                        h > g.h0, F));
        else if (dir == 1)
            DLT_CHECK(dlt__cuda_gemm_rm(ctx, dt, 0, 0, g.N, width, g.K, py, g.K, wr, ldw, xh, ldx, beta, F));
        else
            DLT_CHECK(dlt__cuda_gemm_rm(ctx, dt, 1, 0, g.K, width, g.N, py, g.K, xh, ldx, wr, ldw, beta, F));
    }
    *done = 1;
    return DLT_OK;
}
