/*
 * batchnorm.c - CPU BatchNorm2d over (N,H,W) per channel, with the optional fused residual
 * add and ReLU: y = act(gamma*(x - mean)*invstd + beta [+ residual]).
 *
 * Layouts: x, y, residual, dx, dy, dresidual share one dtype (f32/f16/bf16, loaded and stored
 * through dlt__ld/dlt__st) and one memory format; the loops below visit memory in order and
 * derive the channel from the position (NCHW: (i / HW) % C, NHWC: i % C). gamma, beta,
 * running stats, save_mean, save_invstd, dgamma, dbeta are f32 [C]; gamma/beta may be NULL
 * (affine=False: gamma 1, beta 0), running stats may be NULL.
 *
 * Statistics (sums, variance, the backward reductions) are accumulated in double: the CPU
 * backend is the reference the CUDA kernels are checked against. The variance is two-pass
 * (sum of squared deviations from the mean), which stays accurate for large means.
 *
 * Training (PyTorch): invstd = 1/sqrt(biased_var + eps); running = (1-m)*running + m*stat,
 * with the UNBIASED variance (n/(n-1)) for running_var.
 * Backward: g = dy masked by (y > 0) when y is given (fused ReLU); dresidual = g;
 * dbeta = sum(g), dgamma = sum(g*xhat); batch_stats=1 uses
 *   dx = gamma*invstd/n * (n*g - sum(g) - xhat*sum(g*xhat)),
 * batch_stats=0 treats mean and invstd as constants: dx = gamma*invstd*g.
 */
#include <math.h>
#include <stdlib.h>

#include "ops_cpu.h"
#include "parallel.h"

#define BN_FN "dlt_batch_norm2d"

/* Threads (DLT_PARALLEL_FOR): the per-channel sums go over channel blocks (one channel in
 * NCHW, BN_CBLOCK channels visited pixel by pixel in NHWC), each channel's elements summed in
 * ascending memory order as a single thread would: the results do not depend on the thread
 * count. The elementwise passes (apply, dx) split over image planes (NCHW) or pixels (NHWC). */
#define BN_CBLOCK 16

static int64_t bn_blocks(const dlt_tensor *t) {
    const int64_t C = t->shape[1];
    return t->format == DLT_FORMAT_CHANNELS_LAST ? (C + BN_CBLOCK - 1) / BN_CBLOCK : C;
}

static void bn_block_range(const dlt_tensor *t, int64_t cb, int64_t *c0, int64_t *c1) {
    const int64_t C = t->shape[1];
    if (t->format != DLT_FORMAT_CHANNELS_LAST) {
        *c0 = cb;
        *c1 = cb + 1;
        return;
    }
    *c0 = cb * BN_CBLOCK;
    *c1 = *c0 + BN_CBLOCK < C ? *c0 + BN_CBLOCK : C;
}

/* Elements per channel block, for the grain. */
static int64_t bn_block_work(const dlt_tensor *t) {
    const int64_t nb = bn_blocks(t);
    return nb ? t->numel / nb : 0;
}

/* Runs BODY for every element of channel block cb of a [N,C,H,W] tensor, with i the memory
 * index and c the channel; each channel's elements in ascending memory order. */
#define BN_FOR_BLOCK(t, cb, i, c, BODY)                                                       \
    do {                                                                                      \
        const int64_t bn_N = (t)->shape[0], bn_C = (t)->shape[1];                             \
        const int64_t bn_HW = (t)->shape[2] * (t)->shape[3];                                  \
        int64_t bn_c0, bn_c1;                                                                 \
        bn_block_range((t), (cb), &bn_c0, &bn_c1);                                            \
        if ((t)->format == DLT_FORMAT_CHANNELS_LAST) {                                        \
            for (int64_t bn_m = 0; bn_m < bn_N * bn_HW; bn_m++)                               \
                for (int64_t c = bn_c0; c < bn_c1; c++) {                                     \
                    const int64_t i = bn_m * bn_C + c;                                        \
                    BODY                                                                      \
                }                                                                             \
        } else {                                                                              \
            const int64_t c = bn_c0;                                                          \
            for (int64_t bn_n = 0; bn_n < bn_N; bn_n++)                                       \
                for (int64_t bn_j = 0; bn_j < bn_HW; bn_j++) {                                \
                    const int64_t i = (bn_n * bn_C + c) * bn_HW + bn_j;                       \
                    BODY                                                                      \
                }                                                                             \
        }                                                                                     \
    } while (0)

/* Runs BODY for every element of a [N,C,H,W] tensor, in parallel over planes or pixels; BODY
 * writes only element i. */
#define BN_FOR_EACH(t, i, c, BODY)                                                            \
    do {                                                                                      \
        const int64_t bn_N = (t)->shape[0], bn_C = (t)->shape[1];                             \
        const int64_t bn_HW = (t)->shape[2] * (t)->shape[3];                                  \
        if ((t)->format == DLT_FORMAT_CHANNELS_LAST) {                                        \
            DLT_PARALLEL_FOR(bn_m, bn_N * bn_HW, dlt__par_grain(bn_C)) {                      \
                for (int64_t c = 0; c < bn_C; c++) {                                          \
                    const int64_t i = bn_m * bn_C + c;                                        \
                    BODY                                                                      \
                }                                                                             \
            }                                                                                 \
        } else {                                                                              \
            DLT_PARALLEL_FOR(bn_nc, bn_N * bn_C, dlt__par_grain(bn_HW)) {                     \
                const int64_t c = bn_nc % bn_C;                                               \
                for (int64_t bn_j = 0; bn_j < bn_HW; bn_j++) {                                \
                    const int64_t i = bn_nc * bn_HW + bn_j;                                   \
                    BODY                                                                      \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    } while (0)

static const float *f32p(const dlt_tensor *t) { return t ? (const float *)dlt__data(t) : NULL; }

/* y = act(x*scale[c] + shift[c] [+ residual]) */
static void bn_apply(dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *residual,
                     int32_t relu, const double *scale, const double *shift) {
    const void *px = dlt__data(x), *pr = residual ? dlt__data(residual) : NULL;
    void *py = dlt__data(y);
    const int32_t dt = x->dtype;
    BN_FOR_EACH(x, i, c, {
        double v = (double)dlt__ld(px, dt, i) * scale[c] + shift[c];
        if (pr) v += (double)dlt__ld(pr, residual->dtype, i);
        float f = (float)v;
        if (relu && !(f > 0.0f) && f == f) f = 0.0f; /* NaN propagates */
        dlt__st(py, y->dtype, i, f);
    });
}

/* scale = gamma*invstd, shift = beta - mean*scale (gamma 1, beta 0 when NULL) */
static void bn_affine(int64_t C, const dlt_tensor *gamma, const dlt_tensor *beta,
                      const double *mean, const double *invstd, double *scale, double *shift) {
    const float *g = f32p(gamma), *b = f32p(beta);
    for (int64_t c = 0; c < C; c++) {
        scale[c] = (g ? (double)g[c] : 1.0) * invstd[c];
        shift[c] = (b ? (double)b[c] : 0.0) - mean[c] * scale[c];
    }
}

dlt_status dlt__cpu_bn_fwd_train(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                                 const dlt_tensor *residual, int32_t relu, const dlt_tensor *gamma,
                                 const dlt_tensor *beta, dlt_tensor *running_mean,
                                 dlt_tensor *running_var, dlt_tensor *save_mean,
                                 dlt_tensor *save_invstd, double momentum, double eps) {
    (void)ctx;
    const int64_t C = x->shape[1];
    const double n = (double)(x->shape[0] * x->shape[2] * x->shape[3]);
    double *buf = calloc((size_t)C * 5, sizeof(double));
    if (!buf) return dlt__err(DLT_ERR_OUT_OF_MEMORY, BN_FN, "cannot allocate %lld channel sums",
                              (long long)C);
    double *mean = buf, *sq = buf + C, *invstd = buf + 2 * C, *scale = buf + 3 * C,
           *shift = buf + 4 * C;
    const void *px = dlt__data(x);
    const int32_t dt = x->dtype;

    DLT_PARALLEL_FOR(cb, bn_blocks(x), dlt__par_grain(bn_block_work(x))) {
        int64_t c0, c1;
        bn_block_range(x, cb, &c0, &c1);
        BN_FOR_BLOCK(x, cb, i, c, { mean[c] += (double)dlt__ld(px, dt, i); });
        for (int64_t c = c0; c < c1; c++) mean[c] /= n;
        BN_FOR_BLOCK(x, cb, i, c, {
            const double d = (double)dlt__ld(px, dt, i) - mean[c];
            sq[c] += d * d;
        });
    }
    for (int64_t c = 0; c < C; c++) invstd[c] = 1.0 / sqrt(sq[c] / n + eps);

    if (save_mean) {
        float *sm = dlt__data(save_mean);
        for (int64_t c = 0; c < C; c++) sm[c] = (float)mean[c];
    }
    if (save_invstd) {
        float *si = dlt__data(save_invstd);
        for (int64_t c = 0; c < C; c++) si[c] = (float)invstd[c];
    }
    if (running_mean) {
        float *rm = dlt__data(running_mean);
        for (int64_t c = 0; c < C; c++)
            rm[c] = (float)((1.0 - momentum) * (double)rm[c] + momentum * mean[c]);
    }
    if (running_var) {
        /* unbiased; n == 1 gives inf/NaN like PyTorch's kernel (the front door rejects it) */
        float *rv = dlt__data(running_var);
        for (int64_t c = 0; c < C; c++)
            rv[c] = (float)((1.0 - momentum) * (double)rv[c] + momentum * (sq[c] / (n - 1.0)));
    }
    bn_affine(C, gamma, beta, mean, invstd, scale, shift);
    bn_apply(y, x, residual, relu, scale, shift);
    free(buf);
    return DLT_OK;
}

dlt_status dlt__cpu_bn_fwd_eval(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                                const dlt_tensor *residual, int32_t relu, const dlt_tensor *gamma,
                                const dlt_tensor *beta, const dlt_tensor *running_mean,
                                const dlt_tensor *running_var, dlt_tensor *save_mean,
                                dlt_tensor *save_invstd, double eps) {
    (void)ctx;
    const int64_t C = x->shape[1];
    double *buf = calloc((size_t)C * 4, sizeof(double));
    if (!buf) return dlt__err(DLT_ERR_OUT_OF_MEMORY, BN_FN, "cannot allocate %lld channel terms",
                              (long long)C);
    double *mean = buf, *invstd = buf + C, *scale = buf + 2 * C, *shift = buf + 3 * C;
    const float *rm = f32p(running_mean), *rv = f32p(running_var);
    for (int64_t c = 0; c < C; c++) {
        mean[c] = rm ? (double)rm[c] : 0.0;
        invstd[c] = 1.0 / sqrt((rv ? (double)rv[c] : 1.0) + eps);
    }
    if (save_mean) {
        float *sm = dlt__data(save_mean);
        for (int64_t c = 0; c < C; c++) sm[c] = (float)mean[c];
    }
    if (save_invstd) {
        float *si = dlt__data(save_invstd);
        for (int64_t c = 0; c < C; c++) si[c] = (float)invstd[c];
    }
    bn_affine(C, gamma, beta, mean, invstd, scale, shift);
    bn_apply(y, x, residual, relu, scale, shift);
    free(buf);
    return DLT_OK;
}

dlt_status dlt__cpu_bn_bwd(dlt_ctx *ctx, dlt_tensor *dx, dlt_tensor *dresidual, dlt_tensor *dgamma,
                           dlt_tensor *dbeta, int32_t beta_acc, const dlt_tensor *dy,
                           const dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *gamma,
                           const dlt_tensor *save_mean, const dlt_tensor *save_invstd,
                           int32_t batch_stats) {
    (void)ctx;
    const int64_t C = x->shape[1];
    const double n = (double)(x->shape[0] * x->shape[2] * x->shape[3]);
    double *buf = calloc((size_t)C * 5, sizeof(double));
    if (!buf) return dlt__err(DLT_ERR_OUT_OF_MEMORY, BN_FN, "cannot allocate %lld channel sums",
                              (long long)C);
    double *sdy = buf, *sdyx = buf + C, *k1 = buf + 2 * C, *mdy = buf + 3 * C, *mdyx = buf + 4 * C;
    const float *mean = f32p(save_mean), *invstd = f32p(save_invstd), *g = f32p(gamma);
    const void *px = dlt__data(x), *pdy = dlt__data(dy), *py = y ? dlt__data(y) : NULL;
    void *pdr = dresidual ? dlt__data(dresidual) : NULL;
    const int32_t dt = x->dtype;

    /* pass 1: masked dy (written to dresidual) and the per-channel sums */
    DLT_PARALLEL_FOR(cb, bn_blocks(x), dlt__par_grain(bn_block_work(x))) {
        BN_FOR_BLOCK(x, cb, i, c, {
            double gv = (double)dlt__ld(pdy, dy->dtype, i);
            if (py && dlt__ld(py, y->dtype, i) <= 0.0f) gv = 0.0;
            if (pdr) dlt__st(pdr, dresidual->dtype, i, (float)gv);
            sdy[c] += gv;
            sdyx[c] += gv * ((double)dlt__ld(px, dt, i) - (double)mean[c]);
        });
    }
    /* sum(g*xhat) = invstd * sum(g*(x-mean)) */
    for (int64_t c = 0; c < C; c++) sdyx[c] *= (double)invstd[c];
    if (dbeta) {
        float *db = dlt__data(dbeta);
        for (int64_t c = 0; c < C; c++)
            db[c] = (float)((beta_acc ? (double)db[c] : 0.0) + sdy[c]);
    }
    if (dgamma) {
        float *dg = dlt__data(dgamma);
        for (int64_t c = 0; c < C; c++)
            dg[c] = (float)((beta_acc ? (double)dg[c] : 0.0) + sdyx[c]);
    }
    if (dx) {
        for (int64_t c = 0; c < C; c++) {
            k1[c] = (g ? (double)g[c] : 1.0) * (double)invstd[c];
            mdy[c] = batch_stats ? sdy[c] / n : 0.0;
            mdyx[c] = batch_stats ? sdyx[c] / n : 0.0;
        }
        void *pdx = dlt__data(dx);
        /* pass 2: dx = gamma*invstd * (g - mean(g) - xhat*mean(g*xhat)) */
        BN_FOR_EACH(x, i, c, {
            double gv = (double)dlt__ld(pdy, dy->dtype, i);
            if (py && dlt__ld(py, y->dtype, i) <= 0.0f) gv = 0.0;
            const double xhat = ((double)dlt__ld(px, dt, i) - (double)mean[c]) * (double)invstd[c];
            dlt__st(pdx, dx->dtype, i, (float)(k1[c] * (gv - mdy[c] - xhat * mdyx[c])));
        });
    }
    free(buf);
    return DLT_OK;
}
