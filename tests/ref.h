/*
 * ref.h - float64 reference implementations of the ops, for tests (see ref.c).
 *
 * Layouts are logical row-major (NCHW for images). Every function is a naive loop written
 * from PyTorch's definition of the op; none shares code with the library.
 */
#ifndef DLT_TEST_REF_H
#define DLT_TEST_REF_H

#include <stdint.h>

double ref_dot(const double *a, const double *b, int64_t n);

/* Output size of a convolution / pooling along one dimension (floor mode). */
int64_t ref_conv_out(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil);

/* conv2d (cross-correlation): x [N,C,H,W], w [K,C/G,R,S], b [K] or NULL,
 * y [N,K,P,Q] with P, Q from ref_conv_out. Direct loops over every output and tap. */
void ref_conv2d(const double *x, int64_t N, int64_t C, int64_t H, int64_t W, const double *w,
                int64_t K, int64_t R, int64_t S, const double *b, int64_t sh, int64_t sw,
                int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, double *y);

/* The gradients of ref_conv2d for an upstream gradient dy [N,K,P,Q], by direct scatter
 * loops: dx [N,C,H,W] = sum over taps of dy * w; dw [K,C/G,R,S] = sum of dy * x. */
void ref_conv2d_bwd_data(const double *dy, int64_t N, int64_t C, int64_t H, int64_t W,
                         const double *w, int64_t K, int64_t R, int64_t S, int64_t sh, int64_t sw,
                         int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, double *dx);
void ref_conv2d_bwd_filter(const double *x, int64_t N, int64_t C, int64_t H, int64_t W,
                           const double *dy, int64_t K, int64_t R, int64_t S, int64_t sh,
                           int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                           int64_t groups, double *dwt);

/* BatchNorm2d in training mode: batch mean and biased variance per channel over (N,H,W),
 * y = act(gamma*(x-mean)/sqrt(var+eps) + beta [+ residual]) with act = ReLU when relu != 0.
 * gamma/beta (NULL: 1/0), residual (NULL: none). mean/var_biased (may be NULL) receive the
 * batch statistics. */
void ref_batchnorm_train(const double *x, int64_t N, int64_t C, int64_t H, int64_t W,
                         const double *gamma, const double *beta, const double *residual,
                         int relu, double eps, double *y, double *mean, double *var_biased);
/* BatchNorm2d in evaluation mode with the given running statistics. */
void ref_batchnorm_eval(const double *x, int64_t N, int64_t C, int64_t H, int64_t W,
                        const double *gamma, const double *beta, const double *running_mean,
                        const double *running_var, const double *residual, int relu, double eps,
                        double *y);
/* PyTorch's running-stat update: r = (1-m) r + m * stat, the variance unbiased (n/(n-1)),
 * n = N*H*W. */
void ref_batchnorm_running_update(double *running_mean, double *running_var, const double *mean,
                                  const double *var_biased, int64_t C, int64_t n, double momentum);

/* max_pool2d: y [N,C,P,Q] and indices (h*W + w) of the chosen element. Padding is -inf;
 * an element replaces the current maximum when (val > max || isnan(val)) (PyTorch). */
void ref_max_pool2d(const double *x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh,
                    int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, double *y,
                    int64_t *indices);

/* adaptive_avg_pool2d to 1x1: y [N,C] = mean over H*W. */
void ref_global_avg_pool2d(const double *x, int64_t N, int64_t C, int64_t H, int64_t W, double *y);

/* y [M,N] = x [M,K] . w[N,K]^T + b[N] (b may be NULL). */
void ref_linear(const double *x, int64_t M, int64_t K, const double *w, int64_t N,
                const double *b, double *y);

/* F.cross_entropy(logits [N,K], targets [N], ignore_index, reduction 0 mean / 1 sum).
 * Mean over zero non-ignored rows is NaN. */
double ref_cross_entropy(const double *logits, int64_t N, int64_t K, const int64_t *targets,
                         int64_t ignore_index, int reduction);

/* Elementwise helpers. */
void ref_relu(const double *x, int64_t n, double *y);

/* ---- data pipeline (test_data, test_records, test_tokens, cuda_data) ---- */
/* Philox4x32-10 on a 128-bit counter and 64-bit key (Random123's definition). */
void ref_philox4(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* The library's use: 64-bit counter in words 0-1 (2-3 zero), 64-bit seed as the key. */
void ref_philox(uint64_t seed, uint64_t counter, uint32_t out[4]);
/* Shuffle order of epoch e over n samples: indices sorted by the 64-bit key
 * (w0 << 32 | w1) of philox(seed, e << 32 | k), ties by index. */
void ref_data_order(uint64_t seed, int64_t epoch, int64_t n, int64_t *out);
/* nanoGPT-style window start of row b of token draw s: floor(u * range / 2^64) for
 * u = w0 << 32 | w1 of philox(seed, s << 32 | b) (128-bit product). */
int64_t ref_token_offset(uint64_t seed, int64_t step, int64_t row, uint64_t range);

#endif
