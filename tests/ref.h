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

#endif
