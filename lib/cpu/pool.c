/*
 * pool.c - CPU max pooling (with indices) and global average pooling.
 *
 * max_pool2d: x [N,C,H,W] -> y, indices [N,C,P,Q] (no dilation; P, Q come from y's shape).
 * Window (p,q) covers rows p*sh - ph + [0, kh) and columns q*sw - pw + [0, kw); padding
 * counts as -inf, so only in-bounds elements are candidates. PyTorch's rule, literally:
 * maxval starts at -inf with the index of the first in-bounds element, and an element is
 * taken when (val > maxval || isnan(val)): the first maximum in scan order wins and NaN
 * wins over every number (of several NaNs the last one is taken, as PyTorch does).
 * indices are int32 h*W + w of the chosen input element, stored in y's memory format.
 * Backward: dx = 0, then dx[index] += dy for every output (overlapping windows add), in
 * fp32.
 *
 * global average pool: y[n,c] = mean over H*W of x[n,c] (accumulated in double);
 * backward dx[n,c,h,w] = dy[n,c] / (H*W) in fp32.
 *
 * All tensors of a call share dtype (f32/f16/bf16 via dlt__ld/dlt__st) and memory format;
 * element offsets come from dlt__off4.
 *
 * Threads (DLT_PARALLEL_FOR) split the (n, c) planes: a plane's outputs, and in max-pool
 * backward the additions into its dx plane (indices stay inside the plane), are made by one
 * thread in the serial order, so results do not depend on the thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cpu.h"
#include "parallel.h"

dlt_status dlt__cpu_maxpool_fwd(dlt_ctx *ctx, dlt_tensor *y, dlt_tensor *indices,
                                const dlt_tensor *x, const dlt_pool_params *p) {
    (void)ctx;
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    const int64_t P = y->shape[2], Q = y->shape[3];
    const int64_t kh = p->kernel[0], kw = p->kernel[1], sh = p->stride[0], sw = p->stride[1];
    const int64_t ph = p->pad[0], pw = p->pad[1];
    const void *px = dlt__data(x);
    void *py = dlt__data(y);
    int32_t *pi = dlt__data(indices);
    DLT_PARALLEL_FOR(nc, N * C, dlt__par_grain(P * Q * kh * kw)) {
        const int64_t n = nc / C, c = nc % C;
        for (int64_t op = 0; op < P; op++) {
            const int64_t h0 = op * sh - ph;
            const int64_t hs = h0 < 0 ? 0 : h0, he = h0 + kh < H ? h0 + kh : H;
            for (int64_t oq = 0; oq < Q; oq++) {
                const int64_t w0 = oq * sw - pw;
                const int64_t ws = w0 < 0 ? 0 : w0, we = w0 + kw < W ? w0 + kw : W;
                float maxval = -INFINITY;
                int64_t maxidx = hs * W + ws;
                for (int64_t h = hs; h < he; h++)
                    for (int64_t w = ws; w < we; w++) {
                        const float v = dlt__ld(px, x->dtype, dlt__off4(x, n, c, h, w));
                        if (v > maxval || v != v) {
                            maxval = v;
                            maxidx = h * W + w;
                        }
                    }
                const int64_t o = dlt__off4(y, n, c, op, oq);
                dlt__st(py, y->dtype, o, maxval);
                pi[o] = (int32_t)maxidx;
            }
        }
    }
    return DLT_OK;
}

dlt_status dlt__cpu_maxpool_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                const dlt_tensor *indices, const dlt_pool_params *p) {
    (void)ctx;
    (void)p;
    const int64_t N = dx->shape[0], C = dx->shape[1], W = dx->shape[3];
    const int64_t P = dy->shape[2], Q = dy->shape[3];
    const void *pdy = dlt__data(dy);
    const int32_t *pi = dlt__data(indices);
    void *pdx = dlt__data(dx);
    /* accumulate in fp32 in dx's memory order; f32 dx is its own accumulator */
    float *acc = dx->dtype == DLT_F32 ? (float *)pdx : malloc((size_t)dx->numel * sizeof(float));
    if (!acc)
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_max_pool2d",
                        "cannot allocate the backward accumulator (%lld elements)",
                        (long long)dx->numel);
    memset(acc, 0, (size_t)dx->numel * sizeof(float));
    DLT_PARALLEL_FOR(nc, N * C, dlt__par_grain(P * Q)) {
        const int64_t n = nc / C, c = nc % C;
        for (int64_t op = 0; op < P; op++)
            for (int64_t oq = 0; oq < Q; oq++) {
                const int64_t idx = pi[dlt__off4(indices, n, c, op, oq)];
                acc[dlt__off4(dx, n, c, idx / W, idx % W)] +=
                    dlt__ld(pdy, dy->dtype, dlt__off4(dy, n, c, op, oq));
            }
    }
    if (acc != pdx) {
        DLT_PARALLEL_FOR(i, dx->numel, DLT_PARALLEL_MIN_WORK) dlt__st(pdx, dx->dtype, i, acc[i]);
        free(acc);
    }
    return DLT_OK;
}

dlt_status dlt__cpu_gavgpool_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x) {
    (void)ctx;
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    const int64_t HW = H * W;
    const void *px = dlt__data(x);
    void *py = dlt__data(y);
    if (x->format == DLT_FORMAT_CHANNELS_LAST) {
        /* one row of channel sums per sample, so samples can go to different threads */
        double *sums = calloc((size_t)(N * C > 0 ? N * C : 1), sizeof(double));
        if (!sums)
            return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_global_avg_pool2d",
                            "cannot allocate %lld channel sums", (long long)(N * C));
        DLT_PARALLEL_FOR(n, N, dlt__par_grain(HW * C)) {
            double *acc = sums + n * C;
            for (int64_t j = 0; j < HW; j++)
                for (int64_t c = 0; c < C; c++) acc[c] += dlt__ld(px, x->dtype, (n * HW + j) * C + c);
            for (int64_t c = 0; c < C; c++)
                dlt__st(py, y->dtype, dlt__off4(y, n, c, 0, 0), (float)(acc[c] / (double)HW));
        }
        free(sums);
        return DLT_OK;
    }
    DLT_PARALLEL_FOR(nc, N * C, dlt__par_grain(HW)) {
        const int64_t n = nc / C, c = nc % C;
        double s = 0.0;
        const int64_t base = nc * HW;
        for (int64_t j = 0; j < HW; j++) s += dlt__ld(px, x->dtype, base + j);
        dlt__st(py, y->dtype, dlt__off4(y, n, c, 0, 0), (float)(s / (double)HW));
    }
    return DLT_OK;
}

dlt_status dlt__cpu_gavgpool_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy) {
    (void)ctx;
    const int64_t N = dx->shape[0], C = dx->shape[1], H = dx->shape[2], W = dx->shape[3];
    /* PyTorch computes this mean's backward as dy / (H*W) */
    const float hw = (float)(H * W);
    const void *pdy = dlt__data(dy);
    void *pdx = dlt__data(dx);
    DLT_PARALLEL_FOR(nc, N * C, dlt__par_grain(H * W)) {
        const int64_t n = nc / C, c = nc % C;
        const float v = dlt__ld(pdy, dy->dtype, dlt__off4(dy, n, c, 0, 0)) / hw;
        for (int64_t h = 0; h < H; h++)
            for (int64_t w = 0; w < W; w++) dlt__st(pdx, dx->dtype, dlt__off4(dx, n, c, h, w), v);
    }
    return DLT_OK;
}
