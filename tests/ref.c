/*
 * ref.c - independent float64 reference implementations used by the tests (naive loops,
 * written from the definitions, sharing no code with the library).
 *
 * Sources of the definitions: PyTorch's documentation of conv2d, BatchNorm2d, MaxPool2d,
 * AdaptiveAvgPool2d, Linear and cross_entropy, and reference/pytorch-semantics.md 4.2-4.3
 * (running statistics with the unbiased variance; max-pool's strict > or NaN rule).
 */
#include "ref.h"

#include <math.h>
#include <stdlib.h>

double ref_dot(const double *a, const double *b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

int64_t ref_conv_out(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
    return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

void ref_conv2d(const double *x, int64_t N, int64_t C, int64_t H, int64_t W, const double *w,
                int64_t K, int64_t R, int64_t S, const double *b, int64_t sh, int64_t sw,
                int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, double *y) {
    const int64_t P = ref_conv_out(H, R, sh, ph, dh), Q = ref_conv_out(W, S, sw, pw, dw);
    const int64_t Cg = C / groups, Kg = K / groups;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t g = k / Kg;
            for (int64_t p = 0; p < P; p++)
                for (int64_t q = 0; q < Q; q++) {
                    double acc = b ? b[k] : 0.0;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t r = 0; r < R; r++)
                            for (int64_t s = 0; s < S; s++) {
                                const int64_t h = p * sh - ph + r * dh;
                                const int64_t ww = q * sw - pw + s * dw;
                                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                                acc += x[((n * C + g * Cg + c) * H + h) * W + ww] *
                                       w[((k * Cg + c) * R + r) * S + s];
                            }
                    y[((n * K + k) * P + p) * Q + q] = acc;
                }
        }
}

/* Visits every (output, tap) pair of a convolution that touches a real input element and
 * calls the accumulation with the three flat indices (x, w, y). */
#define REF_CONV_TAPS(BODY)                                                                   \
    const int64_t P = ref_conv_out(H, R, sh, ph, dh), Q = ref_conv_out(W, S, sw, pw, dw);    \
    const int64_t Cg = C / groups, Kg = K / groups;                                          \
    for (int64_t n = 0; n < N; n++)                                                          \
        for (int64_t k = 0; k < K; k++)                                                      \
            for (int64_t p = 0; p < P; p++)                                                  \
                for (int64_t q = 0; q < Q; q++)                                              \
                    for (int64_t c = 0; c < Cg; c++)                                         \
                        for (int64_t r = 0; r < R; r++)                                      \
                            for (int64_t s = 0; s < S; s++) {                                \
                                const int64_t h = p * sh - ph + r * dh;                      \
                                const int64_t ww = q * sw - pw + s * dw;                     \
                                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;          \
                                const int64_t xi = ((n * C + (k / Kg) * Cg + c) * H + h) * W + ww; \
                                const int64_t wi = ((k * Cg + c) * R + r) * S + s;           \
                                const int64_t yi = ((n * K + k) * P + p) * Q + q;            \
                                BODY                                                         \
                            }

void ref_conv2d_bwd_data(const double *dy, int64_t N, int64_t C, int64_t H, int64_t W,
                         const double *w, int64_t K, int64_t R, int64_t S, int64_t sh, int64_t sw,
                         int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, double *dx) {
    for (int64_t i = 0; i < N * C * H * W; i++) dx[i] = 0.0;
    REF_CONV_TAPS(dx[xi] += dy[yi] * w[wi];)
}

void ref_conv2d_bwd_filter(const double *x, int64_t N, int64_t C, int64_t H, int64_t W,
                           const double *dy, int64_t K, int64_t R, int64_t S, int64_t sh,
                           int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                           int64_t groups, double *dwt) {
    for (int64_t i = 0; i < K * (C / groups) * R * S; i++) dwt[i] = 0.0;
    REF_CONV_TAPS(dwt[wi] += dy[yi] * x[xi];)
}

static void bn_finish(const double *x, int64_t N, int64_t C, int64_t HW, const double *gamma,
                      const double *beta, const double *mean, const double *var,
                      const double *residual, int relu, double eps, double *y) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t j = 0; j < HW; j++) {
                const int64_t i = (n * C + c) * HW + j;
                double v = (x[i] - mean[c]) / sqrt(var[c] + eps);
                v = v * (gamma ? gamma[c] : 1.0) + (beta ? beta[c] : 0.0);
                if (residual) v += residual[i];
                if (relu && !(v > 0.0) && !isnan(v)) v = 0.0;
                y[i] = v;
            }
}

void ref_batchnorm_train(const double *x, int64_t N, int64_t C, int64_t H, int64_t W,
                         const double *gamma, const double *beta, const double *residual,
                         int relu, double eps, double *y, double *mean_out, double *var_out) {
    const int64_t HW = H * W;
    const double n = (double)(N * HW);
    double *mean = calloc((size_t)C, sizeof(double)), *var = calloc((size_t)C, sizeof(double));
    for (int64_t c = 0; c < C; c++) {
        double s = 0.0;
        for (int64_t b = 0; b < N; b++)
            for (int64_t j = 0; j < HW; j++) s += x[(b * C + c) * HW + j];
        mean[c] = s / n;
        double v = 0.0;
        for (int64_t b = 0; b < N; b++)
            for (int64_t j = 0; j < HW; j++) {
                const double d = x[(b * C + c) * HW + j] - mean[c];
                v += d * d;
            }
        var[c] = v / n;
        if (mean_out) mean_out[c] = mean[c];
        if (var_out) var_out[c] = var[c];
    }
    bn_finish(x, N, C, HW, gamma, beta, mean, var, residual, relu, eps, y);
    free(mean);
    free(var);
}

void ref_batchnorm_eval(const double *x, int64_t N, int64_t C, int64_t H, int64_t W,
                        const double *gamma, const double *beta, const double *running_mean,
                        const double *running_var, const double *residual, int relu, double eps,
                        double *y) {
    bn_finish(x, N, C, H * W, gamma, beta, running_mean, running_var, residual, relu, eps, y);
}

void ref_batchnorm_running_update(double *running_mean, double *running_var, const double *mean,
                                  const double *var_biased, int64_t C, int64_t n, double momentum) {
    for (int64_t c = 0; c < C; c++) {
        running_mean[c] = (1.0 - momentum) * running_mean[c] + momentum * mean[c];
        const double unbiased = var_biased[c] * (double)n / (double)(n - 1);
        running_var[c] = (1.0 - momentum) * running_var[c] + momentum * unbiased;
    }
}

void ref_max_pool2d(const double *x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh,
                    int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, double *y,
                    int64_t *indices) {
    const int64_t P = ref_conv_out(H, kh, sh, ph, 1), Q = ref_conv_out(W, kw, sw, pw, 1);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < P; p++)
                for (int64_t q = 0; q < Q; q++) {
                    double best = -INFINITY;
                    int64_t bi = -1;
                    for (int64_t i = 0; i < kh; i++)
                        for (int64_t j = 0; j < kw; j++) {
                            const int64_t h = p * sh - ph + i, w = q * sw - pw + j;
                            if (h < 0 || h >= H || w < 0 || w >= W) continue; /* -inf */
                            const double v = x[((n * C + c) * H + h) * W + w];
                            if (bi < 0) bi = h * W + w; /* all -inf: the first real element */
                            if (v > best || isnan(v)) {
                                best = v;
                                bi = h * W + w;
                            }
                        }
                    const int64_t o = ((n * C + c) * P + p) * Q + q;
                    y[o] = best;
                    if (indices) indices[o] = bi;
                }
}

void ref_global_avg_pool2d(const double *x, int64_t N, int64_t C, int64_t H, int64_t W, double *y) {
    for (int64_t i = 0; i < N * C; i++) {
        double s = 0.0;
        for (int64_t j = 0; j < H * W; j++) s += x[i * H * W + j];
        y[i] = s / (double)(H * W);
    }
}

void ref_linear(const double *x, int64_t M, int64_t K, const double *w, int64_t N,
                const double *b, double *y) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = b ? b[j] : 0.0;
            for (int64_t k = 0; k < K; k++) s += x[i * K + k] * w[j * K + k];
            y[i * N + j] = s;
        }
}

double ref_cross_entropy(const double *logits, int64_t N, int64_t K, const int64_t *targets,
                         int64_t ignore_index, int reduction) {
    double total = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < N; i++) {
        if (targets[i] == ignore_index) continue;
        /* -log softmax(x)[t] = log(sum_k exp(x_k)) - x_t, with the max taken out */
        const double *r = logits + i * K;
        double m = r[0];
        for (int64_t k = 1; k < K; k++)
            if (r[k] > m) m = r[k];
        double s = 0.0;
        for (int64_t k = 0; k < K; k++) s += exp(r[k] - m);
        total += m + log(s) - r[targets[i]];
        count++;
    }
    if (reduction == 1) return total;
    return count ? total / (double)count : NAN;
}

void ref_relu(const double *x, int64_t n, double *y) {
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] > 0.0 || isnan(x[i])) ? x[i] : 0.0;
}

/* ---- data pipeline ---- */

void ref_philox4(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c[0] = n0;
        c[1] = n1;
        c[2] = n2;
        c[3] = n3;
    }
    for (int i = 0; i < 4; i++) out[i] = c[i];
}

void ref_philox(uint64_t seed, uint64_t counter, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    ref_philox4(ctr, key, out);
}

typedef struct {
    uint64_t key;
    int64_t index;
} ref_keyed;

static int ref_keyed_cmp(const void *pa, const void *pb) {
    const ref_keyed *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

void ref_data_order(uint64_t seed, int64_t epoch, int64_t n, int64_t *out) {
    ref_keyed *k = malloc((size_t)(n ? n : 1) * sizeof *k);
    for (int64_t i = 0; i < n; i++) {
        uint32_t w[4];
        ref_philox(seed, ((uint64_t)epoch << 32) | (uint64_t)i, w);
        k[i].key = ((uint64_t)w[0] << 32) | w[1];
        k[i].index = i;
    }
    qsort(k, (size_t)n, sizeof *k, ref_keyed_cmp);
    for (int64_t i = 0; i < n; i++) out[i] = k[i].index;
    free(k);
}

int64_t ref_token_offset(uint64_t seed, int64_t step, int64_t row, uint64_t range) {
    __extension__ typedef unsigned __int128 u128;
    uint32_t w[4];
    ref_philox(seed, ((uint64_t)step << 32) | (uint64_t)row, w);
    uint64_t u = ((uint64_t)w[0] << 32) | w[1];
    return (int64_t)(((u128)u * range) >> 64);
}
