/*
 * conv2d.cu - 2-D convolution on CUDA: forward, backward-data, backward-filter through
 * cuDNN 9's backend graph API (cudnn_graph.h), backward-bias with our own reduction, and
 * direct-loop kernels as the fallback for shapes no cuDNN engine takes.
 *
 * Layouts: x/dx [N,C,H,W], w/dw [K,C/groups,R,S], y/dy [N,K,P,Q], each contiguous in its
 * own memory format (NCHW / KCRS, or channels-last NHWC / KRSC). cuDNN descriptors carry
 * the logical NCHW dims with the packed strides of that format. Grouped convolution is
 * expressed to cuDNN through the filter's channel dim (C/groups), as PyTorch does.
 *
 * Numerics: fp32/fp16/bf16 I/O, fp32 compute (CUDNN_DATA_FLOAT). fp32 convolutions only use
 * tensor-core (TF32) engines when ctx->allow_tf32; engines that down-convert inputs are never
 * used; ctx->deterministic drops engines with the NONDETERMINISTIC note. The fallback
 * kernels accumulate in fp32, one thread per output element, in a fixed order (exact and
 * deterministic, slow: a safety net, not a fast path).
 *
 * Plans: one per (direction, dtype, formats, dims, conv params, beta, alignments, tf32,
 * deterministic) in the context's cache. The backward passes with beta=1 (dw accumulating,
 * dx adding into a residual branch's gradient) use the operation's BETA; if no engine
 * takes beta=1, a beta=0 plan writes into the workspace and our kernel adds it.
 * DLT_CONV_IMPL=native forces the fallback kernels (testing); DLT_CONV_IMPL=cudnn turns "no
 * plan" into an error instead of a fallback. In the default selection the convolutions
 * DLT_CONV_GEMM names (one-pixel outputs, 1x1 channels-last) run as GEMMs (conv2d_gemm.cu),
 * and 16-bit channels-last inputs of fewer than DLT_CONV_PAD_CHANNELS channels run their
 * forward and weight gradient padded (conv2d_pad.cu).
 *
 * conv2d_bwd_bias: db[k] (+)= sum over N,P,Q of dy, as per-block partial sums in a fixed
 * partition (scratch memory) and one ordered pass over the partials: deterministic, no
 * atomics. Nothing here synchronises with the host (autotuning, when enabled, happens while
 * a plan is built, never during capture).
 */
#include <stdio.h>

#include "common.cuh"
#include "cudnn_graph.h"
#include "ops_cuda.h"

using namespace dlt;

namespace {

enum ConvDir { CONV_FWD = 0, CONV_BWD_DATA = 1, CONV_BWD_FILTER = 2 };
const char *const kDirName[3] = {"forward", "backward-data", "backward-filter"};
const char *const kFuncName[3] = {"dlt_conv2d", "dlt_conv2d_backward", "dlt_conv2d_backward"};

/* ---- geometry and the fallback kernels ---- */
struct Geo {
    int64_t N, C, H, W, K, Cg, Kg, R, S, P, Q, sh, sw, ph, pw, dh, dw;
    int clx, clw, cly;
};

Geo make_geo(const dlt_tensor *x, const dlt_tensor *w, const dlt_tensor *y, const dlt_conv_params *p) {
    Geo g;
    g.N = x->shape[0];
    g.C = x->shape[1];
    g.H = x->shape[2];
    g.W = x->shape[3];
    g.K = w->shape[0];
    g.Cg = w->shape[1];
    g.R = w->shape[2];
    g.S = w->shape[3];
    g.P = y->shape[2];
    g.Q = y->shape[3];
    g.Kg = g.K / (p->groups > 0 ? p->groups : 1);
    g.sh = p->stride[0];
    g.sw = p->stride[1];
    g.ph = p->pad[0];
    g.pw = p->pad[1];
    g.dh = p->dil[0];
    g.dw = p->dil[1];
    g.clx = x->format == DLT_FORMAT_CHANNELS_LAST;
    g.clw = w->format == DLT_FORMAT_CHANNELS_LAST;
    g.cly = y->format == DLT_FORMAT_CHANNELS_LAST;
    return g;
}

__device__ __forceinline__ int64_t off4(int cl, int64_t n, int64_t c, int64_t h, int64_t w,
                                        int64_t C, int64_t H, int64_t W) {
    return cl ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
}

template <typename T>
__global__ void conv_fwd_direct(T *y, const T *x, const T *w, const T *b, Geo g, int64_t total) {
    DLT_GRID_STRIDE(i, total) {
        const int64_t q = i % g.Q, p = (i / g.Q) % g.P, k = (i / (g.Q * g.P)) % g.K,
                      n = i / (g.Q * g.P * g.K);
        const int64_t c0 = (k / g.Kg) * g.Cg;
        float acc = b ? to_f<T>(b[k]) : 0.0f;
        for (int64_t c = 0; c < g.Cg; c++)
            for (int64_t r = 0; r < g.R; r++) {
                const int64_t h = p * g.sh - g.ph + r * g.dh;
                if (h < 0 || h >= g.H) continue;
                for (int64_t s = 0; s < g.S; s++) {
                    const int64_t ww = q * g.sw - g.pw + s * g.dw;
                    if (ww < 0 || ww >= g.W) continue;
                    acc += to_f<T>(x[off4(g.clx, n, c0 + c, h, ww, g.C, g.H, g.W)]) *
                           to_f<T>(w[off4(g.clw, k, c, r, s, g.Cg, g.R, g.S)]);
                }
            }
        y[off4(g.cly, n, k, p, q, g.K, g.P, g.Q)] = from_f<T>(acc);
    }
}

template <typename T>
__global__ void conv_bwd_data_direct(T *dx, const T *dy, const T *w, Geo g, int64_t total, int beta) {
    DLT_GRID_STRIDE(i, total) {
        const int64_t ww = i % g.W, h = (i / g.W) % g.H, c = (i / (g.W * g.H)) % g.C,
                      n = i / (g.W * g.H * g.C);
        const int64_t grp = c / g.Cg, cl = c % g.Cg;
        float acc = 0.0f;
        for (int64_t kk = 0; kk < g.Kg; kk++) {
            const int64_t k = grp * g.Kg + kk;
            for (int64_t r = 0; r < g.R; r++) {
                const int64_t hp = h + g.ph - r * g.dh;
                if (hp < 0 || hp % g.sh != 0) continue;
                const int64_t p = hp / g.sh;
                if (p >= g.P) continue;
                for (int64_t s = 0; s < g.S; s++) {
                    const int64_t wp = ww + g.pw - s * g.dw;
                    if (wp < 0 || wp % g.sw != 0) continue;
                    const int64_t q = wp / g.sw;
                    if (q >= g.Q) continue;
                    acc += to_f<T>(dy[off4(g.cly, n, k, p, q, g.K, g.P, g.Q)]) *
                           to_f<T>(w[off4(g.clw, k, cl, r, s, g.Cg, g.R, g.S)]);
                }
            }
        }
        T *o = &dx[off4(g.clx, n, c, h, ww, g.C, g.H, g.W)];
        *o = from_f<T>(beta ? acc + to_f<T>(*o) : acc);
    }
}

template <typename T>
__global__ void conv_bwd_filter_direct(T *dw, const T *x, const T *dy, Geo g, int64_t total, int beta) {
    DLT_GRID_STRIDE(i, total) {
        const int64_t s = i % g.S, r = (i / g.S) % g.R, c = (i / (g.S * g.R)) % g.Cg,
                      k = i / (g.S * g.R * g.Cg);
        const int64_t cx = (k / g.Kg) * g.Cg + c;
        float acc = 0.0f;
        for (int64_t n = 0; n < g.N; n++)
            for (int64_t p = 0; p < g.P; p++) {
                const int64_t h = p * g.sh - g.ph + r * g.dh;
                if (h < 0 || h >= g.H) continue;
                for (int64_t q = 0; q < g.Q; q++) {
                    const int64_t ww = q * g.sw - g.pw + s * g.dw;
                    if (ww < 0 || ww >= g.W) continue;
                    acc += to_f<T>(dy[off4(g.cly, n, k, p, q, g.K, g.P, g.Q)]) *
                           to_f<T>(x[off4(g.clx, n, cx, h, ww, g.C, g.H, g.W)]);
                }
            }
        const int64_t o = off4(g.clw, k, c, r, s, g.Cg, g.R, g.S);
        dw[o] = from_f<T>(beta ? to_f<T>(dw[o]) + acc : acc);
    }
}

/* ---- small kernels around cuDNN ---- */

/* y[n,k,p,q] += b[k], in y's memory order */
template <typename T>
__global__ void bias_add_kernel(T *y, const T *b, int64_t n, int64_t K, int64_t PQ, int cl) {
    DLT_GRID_STRIDE(i, n) {
        const int64_t k = cl ? i % K : (i / PQ) % K;
        y[i] = from_f<T>(to_f<T>(y[i]) + to_f<T>(b[k]));
    }
}

/* dst += src, same dtype and layout (beta=1 through a beta=0 plan) */
template <typename T> __global__ void add_into_kernel(T *dst, const T *src, int64_t n) {
    DLT_GRID_STRIDE(i, n) dst[i] = from_f<T>(to_f<T>(dst[i]) + to_f<T>(src[i]));
}

/* Deterministic per-channel sums of dy (bias gradient), pass 1: each block sums a fixed
 * slice of rows for its channels into part[split][k].
 * Channels-last: dy is [M rows, K]; block (32 channels x 8 rows). */
template <typename T>
__global__ void bias_partial_cl(float *part, const T *dy, int64_t M, int64_t K) {
    __shared__ float sh[8][33];
    const int64_t k = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (k < K)
        for (int64_t r = (int64_t)blockIdx.y * 8 + threadIdx.y; r < M; r += (int64_t)gridDim.y * 8)
            acc += to_f<T>(dy[r * K + k]);
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && k < K) {
        float s = 0.0f;
        for (int j = 0; j < 8; j++) s += sh[j][threadIdx.x];
        part[(int64_t)blockIdx.y * K + k] = s;
    }
}

/* NCHW: channel k's elements are N runs of PQ; block of 256 threads per (channel, split). */
template <typename T>
__global__ void bias_partial_nchw(float *part, const T *dy, int64_t N, int64_t K, int64_t PQ) {
    __shared__ float warp_sums[8];
    const int64_t k = blockIdx.x, M = N * PQ;
    float acc = 0.0f;
    for (int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; j < M;
         j += (int64_t)gridDim.y * blockDim.x) {
        const int64_t n = j / PQ, i = j - n * PQ;
        acc += to_f<T>(dy[(n * K + k) * PQ + i]);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int j = 0; j < (int)(blockDim.x >> 5); j++) s += warp_sums[j];
        part[(int64_t)blockIdx.y * K + k] = s;
    }
}

/* pass 2: db[k] = (beta ? db[k] : 0) + sum over splits, in split order */
template <typename T>
__global__ void bias_finish(T *db, const float *part, int64_t K, int32_t splits, int beta) {
    const int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    float s = 0.0f;
    for (int32_t j = 0; j < splits; j++) s += part[(int64_t)j * K + k];
    db[k] = from_f<T>(beta ? to_f<T>(db[k]) + s : s);
}

/* ---- descriptions, keys, plans ---- */
void describe(char *buf, size_t n, int dir, const dlt_tensor *x, const dlt_tensor *w,
              const dlt_tensor *y, const dlt_conv_params *p, int beta) {
    snprintf(buf, n,
             "conv2d %s %s %s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] y[%lld,%lld,%lld,%lld] "
             "stride %lldx%lld pad %lldx%lld dilation %lldx%lld groups %lld%s",
             kDirName[dir], dlt_dtype_name(x->dtype),
             x->format == DLT_FORMAT_CHANNELS_LAST ? "channels-last" : "NCHW",
             (long long)x->shape[0], (long long)x->shape[1], (long long)x->shape[2],
             (long long)x->shape[3], (long long)w->shape[0], (long long)w->shape[1],
             (long long)w->shape[2], (long long)w->shape[3], (long long)y->shape[0],
             (long long)y->shape[1], (long long)y->shape[2], (long long)y->shape[3],
             (long long)p->stride[0], (long long)p->stride[1], (long long)p->pad[0],
             (long long)p->pad[1], (long long)p->dil[0], (long long)p->dil[1], (long long)p->groups,
             beta ? " beta=1" : "");
}

void make_key(dlt_cudnn_key *k, const dlt_ctx *ctx, int dir, const dlt_tensor *x, const dlt_tensor *w,
              const dlt_tensor *y, const dlt_conv_params *p, int beta) {
    k->n = 0;
    dlt__cudnn_key_push(k, 1); /* op family: convolution */
    dlt__cudnn_key_push(k, dir);
    dlt__cudnn_key_push(k, x->dtype);
    dlt__cudnn_key_push(k, x->format);
    dlt__cudnn_key_push(k, w->format);
    dlt__cudnn_key_push(k, y->format);
    for (int i = 0; i < 4; i++) dlt__cudnn_key_push(k, x->shape[i]);
    for (int i = 0; i < 4; i++) dlt__cudnn_key_push(k, w->shape[i]);
    for (int i = 0; i < 4; i++) dlt__cudnn_key_push(k, y->shape[i]);
    for (int i = 0; i < 2; i++) {
        dlt__cudnn_key_push(k, p->stride[i]);
        dlt__cudnn_key_push(k, p->pad[i]);
        dlt__cudnn_key_push(k, p->dil[i]);
    }
    dlt__cudnn_key_push(k, p->groups);
    dlt__cudnn_key_push(k, beta);
    dlt__cudnn_key_push(k, dlt__cudnn_align(dlt__data(x)));
    dlt__cudnn_key_push(k, dlt__cudnn_align(dlt__data(w)));
    dlt__cudnn_key_push(k, dlt__cudnn_align(dlt__data(y)));
    dlt__cudnn_key_push(k, ctx->allow_tf32);
    dlt__cudnn_key_push(k, ctx->deterministic);
}

enum { UID_X = 1, UID_W = 2, UID_Y = 3 };

/* Describes the one-operation graph and builds its plan. x/w/y are the tensors in the X,
 * W, Y roles (dx for backward-data, dw for backward-filter, dy as Y for both). */
dlt_status build_plan(dlt_ctx *ctx, int dir, const dlt_tensor *x, const dlt_tensor *w,
                      const dlt_tensor *y, const dlt_conv_params *p, int beta, const char *what,
                      dlt_cudnn_plan *out) {
    const char *func = kFuncName[dir];
    cudnnDataType_t dt;
    if (dlt__cudnn_dtype(x->dtype, &dt) != 0)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, func, "%s: dtype not supported", what);
    dlt_cudnn_builder b;
    dlt__cudnn_builder_init(&b, ctx, func, what);
    cudnnBackendDescriptor_t X = dlt__cudnn_tensor4(&b, UID_X, dt, x->shape,
                                                    x->format == DLT_FORMAT_CHANNELS_LAST,
                                                    dlt__cudnn_align(dlt__data(x)), 0);
    cudnnBackendDescriptor_t W = dlt__cudnn_tensor4(&b, UID_W, dt, w->shape,
                                                    w->format == DLT_FORMAT_CHANNELS_LAST,
                                                    dlt__cudnn_align(dlt__data(w)), 0);
    cudnnBackendDescriptor_t Y = dlt__cudnn_tensor4(&b, UID_Y, dt, y->shape,
                                                    y->format == DLT_FORMAT_CHANNELS_LAST,
                                                    dlt__cudnn_align(dlt__data(y)), 0);
    cudnnBackendDescriptor_t conv = dlt__cudnn_make(&b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t spatial = 2;
    const int64_t dil[2] = {p->dil[0], p->dil[1]}, str[2] = {p->stride[0], p->stride[1]},
                  pad[2] = {p->pad[0], p->pad[1]};
    DLT_CUDNN_SET(&b, conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    DLT_CUDNN_SET(&b, conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    DLT_CUDNN_SET(&b, conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
    DLT_CUDNN_SET(&b, conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
    DLT_CUDNN_SET(&b, conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
    DLT_CUDNN_SET(&b, conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    DLT_CUDNN_SET(&b, conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    DLT_CUDNN_FINALIZE(&b, conv);

    const float alpha = 1.0f, betaf = beta ? 1.0f : 0.0f; /* float compute: CUDNN_TYPE_FLOAT */
    cudnnBackendDescriptor_t op = NULL;
    if (dir == CONV_FWD) {
        op = dlt__cudnn_make(&b, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, X);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, W);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, Y);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv);
        DLT_CUDNN_SET(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        DLT_CUDNN_SET(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &betaf);
    } else if (dir == CONV_BWD_DATA) {
        op = dlt__cudnn_make(&b, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, X);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, W);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, Y);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv);
        DLT_CUDNN_SET(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        DLT_CUDNN_SET(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &betaf);
    } else {
        op = dlt__cudnn_make(&b, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, X);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, W);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, Y);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv);
        DLT_CUDNN_SET(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        DLT_CUDNN_SET(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &betaf);
    }
    DLT_CUDNN_FINALIZE(&b, op);

    const int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *trial[3] = {dlt__data(x), dlt__data(w), dlt__data(y)};
    dlt_cudnn_plan_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.fp32_io = x->dtype == DLT_F32;
    opts.trial_ptrs = trial;
    opts.out_slot = dir == CONV_FWD ? 2 : dir == CONV_BWD_DATA ? 0 : 1;
    opts.out_bytes = dlt__nbytes(dir == CONV_FWD ? y : dir == CONV_BWD_DATA ? x : w);
    return dlt__cudnn_build_plan(&b, &op, 1, uids, 3, &opts, out);
}

/* The cached plan for this call (built on first use). *plan is NULL when cuDNN has none and
 * the caller may fall back; with DLT_CONV_IMPL=cudnn that is an error instead. */
dlt_status get_plan(dlt_ctx *ctx, int dir, const dlt_tensor *x, const dlt_tensor *w,
                    const dlt_tensor *y, const dlt_conv_params *p, int beta, const char *what,
                    int32_t impl, int allow_missing, dlt_cudnn_plan **plan) {
    dlt_cudnn_key key;
    *plan = NULL;
    make_key(&key, ctx, dir, x, w, y, p, beta);
    dlt_cudnn_plan *e = NULL;
    DLT_CHECK(dlt__cudnn_cache_find(ctx, &key, &e));
    if (!e) {
        dlt_cudnn_plan built;
        DLT_CHECK(build_plan(ctx, dir, x, w, y, p, beta, what, &built));
        DLT_CHECK(dlt__cudnn_cache_insert(ctx, &key, &built, &e));
        if (!e->supported && impl != DLT_IMPL_CUDNN && !allow_missing)
            dlt__log(DLT_LOG_WARNING, "dlt: no cuDNN plan for %s (%s); using libdltrain's direct kernels",
                     what, e->why);
    }
    if (!e->supported) {
        if (impl == DLT_IMPL_CUDNN && !allow_missing) return dlt__cudnn_plan_error(e, kFuncName[dir], what);
        return DLT_OK;
    }
    *plan = e;
    return DLT_OK;
}

int64_t splits_for(dlt_ctx *ctx, int64_t blocks_per_split, int64_t max_splits) {
    int64_t target = 2 * (int64_t)(dlt__cu(ctx)->sm_count > 0 ? dlt__cu(ctx)->sm_count : 80);
    int64_t s = (target + blocks_per_split - 1) / blocks_per_split;
    if (s > max_splits) s = max_splits;
    if (s > 1024) s = 1024;
    if (s < 1) s = 1;
    return s;
}

dlt_status launch_direct(dlt_ctx *ctx, int dir, const dlt_tensor *x, const dlt_tensor *w,
                         const dlt_tensor *y, const dlt_tensor *b, const dlt_conv_params *p, int beta) {
    Geo g = make_geo(x, w, y, p);
    cudaStream_t st = dlt__stream(ctx);
    const char *func = kFuncName[dir];
    if (dir == CONV_FWD) {
        const int64_t total = y->numel;
        DLT_DISPATCH_FLOAT(x->dtype, T,
            conv_fwd_direct<T><<<grid_for(total, 256), 256, 0, st>>>(
                (T *)dlt__data(y), (const T *)dlt__data(x), (const T *)dlt__data(w),
                b ? (const T *)dlt__data(b) : (const T *)nullptr, g, total));
    } else if (dir == CONV_BWD_DATA) {
        const int64_t total = x->numel;
        DLT_DISPATCH_FLOAT(x->dtype, T,
            conv_bwd_data_direct<T><<<grid_for(total, 256), 256, 0, st>>>(
                (T *)dlt__data(x), (const T *)dlt__data(y), (const T *)dlt__data(w), g, total, beta));
    } else {
        const int64_t total = w->numel;
        DLT_DISPATCH_FLOAT(x->dtype, T,
            conv_bwd_filter_direct<T><<<grid_for(total, 256), 256, 0, st>>>(
                (T *)dlt__data(w), (const T *)dlt__data(x), (const T *)dlt__data(y), g, total, beta));
    }
    DLT_CU_LAUNCHED(ctx, func);
    return DLT_OK;
}

dlt_status add_bias(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *b) {
    const int64_t n = y->numel, K = y->shape[1], PQ = y->shape[2] * y->shape[3];
    const int cl = y->format == DLT_FORMAT_CHANNELS_LAST;
    DLT_DISPATCH_FLOAT(y->dtype, T,
        bias_add_kernel<T><<<grid_for(n, 256), 256, 0, dlt__stream(ctx)>>>(
            (T *)dlt__data(y), (const T *)dlt__data(b), n, K, PQ, cl));
    DLT_CU_LAUNCHED(ctx, "dlt_conv2d");
    return DLT_OK;
}

/* A beta=1 convolution through the operation's BETA; where no engine takes it, a beta=0
 * plan into the workspace and our kernel adds that to out (dir: data or filter; the
 * tensors in the X, W, Y roles as build_plan takes them). *done = 0: no cuDNN plan. */
dlt_status run_with_beta(dlt_ctx *ctx, int dir, dlt_tensor *out, const dlt_tensor *x, const dlt_tensor *w,
                         const dlt_tensor *y, const dlt_conv_params *p, int beta, int32_t impl, int *done) {
    char what[400];
    describe(what, sizeof what, dir, x, w, y, p, beta);
    dlt_cudnn_plan *plan = NULL;
    const int slot = dir == CONV_BWD_DATA ? 0 : 1;
    void *ptrs[3] = {dlt__data(x), dlt__data(w), dlt__data(y)};
    *done = 0;
    /* beta=1: a missing plan is not final yet */
    DLT_CHECK(get_plan(ctx, dir, x, w, y, p, beta, what, impl, beta, &plan));
    if (plan) {
        void *ws = NULL;
        DLT_CHECK(dlt__cuda_workspace(ctx, (size_t)plan->workspace, &ws));
        DLT_CHECK(dlt__cudnn_execute(ctx, plan, ptrs, ws, "dlt_conv2d_backward", what));
        *done = 1;
        return DLT_OK;
    }
    if (!beta) return DLT_OK;
    describe(what, sizeof what, dir, x, w, y, p, 0);
    DLT_CHECK(get_plan(ctx, dir, x, w, y, p, 0, what, impl, 0, &plan));
    if (!plan) return DLT_OK;
    const size_t off = dlt__cudnn_round256((size_t)plan->workspace);
    void *ws = NULL;
    DLT_CHECK(dlt__cuda_workspace(ctx, off + dlt__nbytes(out), &ws));
    void *tmp = (char *)ws + off;
    ptrs[slot] = tmp;
    DLT_CHECK(dlt__cudnn_execute(ctx, plan, ptrs, ws, "dlt_conv2d_backward", what));
    const int64_t n = out->numel;
    DLT_DISPATCH_FLOAT(out->dtype, T,
        add_into_kernel<T><<<grid_for(n, 256), 256, 0, dlt__stream(ctx)>>>(
            (T *)dlt__data(out), (const T *)tmp, n));
    DLT_CU_LAUNCHED(ctx, "dlt_conv2d_backward");
    *done = 1;
    return DLT_OK;
}

} // namespace

extern "C" {

dlt_status dlt__cuda_conv2d_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *w,
                                const dlt_tensor *b, const dlt_conv_params *p) {
    const dlt_cudnn_settings *set = NULL;
    DLT_CHECK(dlt__cudnn_settings(ctx, &set));
    if (set->conv_impl == DLT_IMPL_AUTO && set->conv_gemm > 0) {
        int done = 0;
        DLT_CHECK(dlt__cuda_conv2d_gemm(ctx, CONV_FWD, (dlt_tensor *)x, (dlt_tensor *)w, y, p, 0, set->conv_gemm, &done));
        if (done) return b ? add_bias(ctx, y, b) : DLT_OK;
    }
    if (set->conv_impl != DLT_IMPL_NATIVE && set->conv_pad > 0) {
        int done = 0;
        DLT_CHECK(dlt__cuda_conv2d_padded(ctx, CONV_FWD, x, (dlt_tensor *)w, y, p, 0, set->conv_pad, &done));
        if (done) return b ? add_bias(ctx, y, b) : DLT_OK;
    }
    if (set->conv_impl != DLT_IMPL_NATIVE) {
        char what[400];
        describe(what, sizeof what, CONV_FWD, x, w, y, p, 0);
        dlt_cudnn_plan *plan = NULL;
        DLT_CHECK(get_plan(ctx, CONV_FWD, x, w, y, p, 0, what, set->conv_impl, 0, &plan));
        if (plan) {
            void *ws = NULL;
            DLT_CHECK(dlt__cuda_workspace(ctx, (size_t)plan->workspace, &ws));
            void *ptrs[3] = {dlt__data(x), dlt__data(w), dlt__data(y)};
            DLT_CHECK(dlt__cudnn_execute(ctx, plan, ptrs, ws, "dlt_conv2d", what));
            if (b) DLT_CHECK(add_bias(ctx, y, b));
            return DLT_OK;
        }
    }
    return launch_direct(ctx, CONV_FWD, x, w, y, b, p, 0);
}

dlt_status dlt__cuda_conv2d_bwd_data(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                     const dlt_tensor *w, const dlt_conv_params *p, int32_t beta) {
    const dlt_cudnn_settings *set = NULL;
    DLT_CHECK(dlt__cudnn_settings(ctx, &set));
    beta = beta ? 1 : 0;
    int done = 0;
    if (set->conv_impl == DLT_IMPL_AUTO && set->conv_gemm > 0) {
        DLT_CHECK(dlt__cuda_conv2d_gemm(ctx, CONV_BWD_DATA, dx, (dlt_tensor *)w, (dlt_tensor *)dy, p, beta,
                                        set->conv_gemm, &done));
        if (done) return DLT_OK;
    }
    if (set->conv_impl != DLT_IMPL_NATIVE) {
        DLT_CHECK(run_with_beta(ctx, CONV_BWD_DATA, dx, dx, w, dy, p, beta, set->conv_impl, &done));
        if (done) return DLT_OK;
    }
    return launch_direct(ctx, CONV_BWD_DATA, dx, w, dy, NULL, p, beta);
}

dlt_status dlt__cuda_conv2d_bwd_filter(dlt_ctx *ctx, dlt_tensor *dw, const dlt_tensor *x,
                                       const dlt_tensor *dy, const dlt_conv_params *p, int32_t beta) {
    const dlt_cudnn_settings *set = NULL;
    DLT_CHECK(dlt__cudnn_settings(ctx, &set));
    beta = beta ? 1 : 0;
    int done = 0;
    if (set->conv_impl == DLT_IMPL_AUTO && set->conv_gemm > 0) {
        DLT_CHECK(dlt__cuda_conv2d_gemm(ctx, CONV_BWD_FILTER, (dlt_tensor *)x, dw, (dlt_tensor *)dy, p, beta,
                                        set->conv_gemm, &done));
        if (done) return DLT_OK;
    }
    if (set->conv_impl != DLT_IMPL_NATIVE && set->conv_pad > 0) {
        DLT_CHECK(dlt__cuda_conv2d_padded(ctx, CONV_BWD_FILTER, x, dw, (dlt_tensor *)dy, p, beta, set->conv_pad,
                                          &done));
        if (done) return DLT_OK;
    }
    if (set->conv_impl != DLT_IMPL_NATIVE) {
        DLT_CHECK(run_with_beta(ctx, CONV_BWD_FILTER, dw, x, dw, dy, p, beta, set->conv_impl, &done));
        if (done) return DLT_OK;
    }
    return launch_direct(ctx, CONV_BWD_FILTER, x, dw, dy, NULL, p, beta);
}

dlt_status dlt__cuda_conv2d_plan(dlt_ctx *ctx, int32_t dir, const dlt_tensor *x, const dlt_tensor *w,
                                 const dlt_tensor *y, const dlt_conv_params *p, int32_t beta,
                                 dlt_cudnn_plan **plan) {
    char what[400];
    describe(what, sizeof what, dir, x, w, y, p, beta);
    return get_plan(ctx, dir, x, w, y, p, beta, what, DLT_IMPL_AUTO, 1, plan);
}

dlt_status dlt__cuda_conv2d_execute(dlt_ctx *ctx, int32_t dir, dlt_cudnn_plan *plan, const dlt_tensor *x,
                                    const dlt_tensor *w, const dlt_tensor *y, const dlt_conv_params *p,
                                    int32_t beta) {
    char what[400];
    describe(what, sizeof what, dir, x, w, y, p, beta);
    void *ws = NULL;
    DLT_CHECK(dlt__cuda_workspace(ctx, (size_t)plan->workspace, &ws));
    void *ptrs[3] = {dlt__data(x), dlt__data(w), dlt__data(y)};
    return dlt__cudnn_execute(ctx, plan, ptrs, ws, kFuncName[dir], what);
}

dlt_status dlt__cuda_conv2d_bwd_bias(dlt_ctx *ctx, dlt_tensor *db, const dlt_tensor *dy, int32_t beta) {
    static const char *F = "dlt_conv2d_backward";
    const int64_t N = dy->shape[0], K = dy->shape[1], PQ = dy->shape[2] * dy->shape[3];
    const int64_t M = N * PQ;
    const int cl = dy->format == DLT_FORMAT_CHANNELS_LAST;
    cudaStream_t st = dlt__stream(ctx);
    int64_t splits;
    if (cl)
        splits = splits_for(ctx, (K + 31) / 32, (M + 7) / 8);
    else
        splits = splits_for(ctx, K, (M + 255) / 256);
    float *part = NULL;
    DLT_CHECK(dlt__cuda_scratch(ctx, (size_t)(splits * K) * sizeof(float), (void **)&part));
    if (cl) {
        dim3 grid((unsigned)((K + 31) / 32), (unsigned)splits), block(32, 8);
        DLT_DISPATCH_FLOAT(dy->dtype, T,
            bias_partial_cl<T><<<grid, block, 0, st>>>(part, (const T *)dlt__data(dy), M, K));
    } else {
        dim3 grid((unsigned)K, (unsigned)splits);
        DLT_DISPATCH_FLOAT(dy->dtype, T,
            bias_partial_nchw<T><<<grid, 256, 0, st>>>(part, (const T *)dlt__data(dy), N, K, PQ));
    }
    DLT_CU_LAUNCHED(ctx, F);
    DLT_DISPATCH_FLOAT(db->dtype, T,
        bias_finish<T><<<(unsigned)((K + 255) / 256), 256, 0, st>>>((T *)dlt__data(db), part, K,
                                                                   (int32_t)splits, beta ? 1 : 0));
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

} // extern "C"
