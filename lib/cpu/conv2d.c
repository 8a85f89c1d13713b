/*
 * conv2d.c - CPU 2-D convolution (PyTorch's conv2d: cross-correlation) and its three
 * backward kernels, by im2col + CBLAS sgemm.
 *
 * Shapes: x [N,C,H,W], w [K,C/G,R,S], bias [K], y [N,K,P,Q]; any stride, padding, dilation
 * and group count G. Per group g (Cg = C/G input and Kg = K/G output channels):
 *   col  [Cg*R*S, L]   im2col of a chunk of nb samples, column = nl*P*Q + p*Q + q
 *   y_g  [Kg, L]     = w_g [Kg, Cg*R*S] . col                       (forward)
 *   dcol [Cg*R*S, L] = w_g^T . dy_g, then col2im adds it into dx     (backward data)
 *   dw_g [Kg, Cg*R*S] (+)= dy_g . col^T                              (backward filter)
 * Samples are batched into one GEMM (L = nb*P*Q) up to a workspace budget, because the deep
 * layers of a ResNet on 32x32 images have tiny P*Q and a per-sample GEMM would be mostly
 * overhead. With nb = 1 the GEMM reads/writes y, dy and dx in place; a 1x1, stride-1,
 * unpadded convolution with nb = 1 needs no im2col buffer at all.
 *
 * Channels-last f32 (x, w, y all NHWC) has its own path without layout copies: the im2row
 * matrix has one row per output pixel, [N*P*Q, R*S*Cg] with (r, s, c) innermost, which is
 * exactly the memory order of a channels-last weight [K][R][S][Cg]; so per group
 *   y_g [NPQ, Kg] (ld K)  = rows . w_g^T,  drows = dy_g . w_g (then row2im adds into dx),
 *   dw_g [Kg, RSCg]      (+)= dy_g^T . rows,
 * in chunks of output rows up to the same workspace budget; a 1x1, stride-1, unpadded
 * convolution reads x itself as the row matrix (ld C).
 *
 * Math is fp32. f32 tensors are used in place; other dtypes (f16, bf16), and formats that
 * do not match one of the two paths, are converted to an fp32 NCHW copy first and the
 * result converted back (dlt__cpu_to_f32_nchw / dlt__cpu_from_f32_nchw).
 * Gradient convention: dx, dw and db are written with beta (0 overwrite, 1 accumulate: the
 * fp32 result is added to the destination's value, then rounded once).
 *
 * Threads: the GEMMs are OpenBLAS's; the layout loops around them use DLT_PARALLEL_FOR.
 * im2col/im2row split the rows they write; col2im/row2im, whose rows add into overlapping
 * parts of dx, split what one thread owns alone (a sample's channel, a sample) and keep the
 * serial order inside it, so every sum is made in the same order whatever the thread count.
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cpu.h"
#include "parallel.h"

#define CONV_FN "dlt_conv2d"
/* Bytes of im2col (and output staging) buffer one chunk of samples may use. */
#define CONV_COL_BUDGET ((size_t)32 << 20)
/* With this many output pixels per sample a per-sample GEMM is already large. */
#define CONV_PER_SAMPLE_PQ 1024

typedef struct conv_geom {
    int64_t N, C, H, W, K, R, S, P, Q, G, Cg, Kg, CRS, PQ;
    int64_t sh, sw, ph, pw, dh, dw;
    int pointwise; /* 1x1, stride 1, no padding: col is x itself */
} conv_geom;

static conv_geom make_geom(const dlt_tensor *x, const dlt_tensor *w, const dlt_tensor *y,
                           const dlt_conv_params *p) {
    conv_geom g;
    g.N = x->shape[0];
    g.C = x->shape[1];
    g.H = x->shape[2];
    g.W = x->shape[3];
    g.K = w->shape[0];
    g.R = w->shape[2];
    g.S = w->shape[3];
    g.P = y->shape[2];
    g.Q = y->shape[3];
    g.G = p->groups > 0 ? p->groups : 1;
    g.Cg = g.C / g.G;
    g.Kg = g.K / g.G;
    g.CRS = g.Cg * g.R * g.S;
    g.PQ = g.P * g.Q;
    g.sh = p->stride[0];
    g.sw = p->stride[1];
    g.ph = p->pad[0];
    g.pw = p->pad[1];
    g.dh = p->dil[0];
    g.dw = p->dil[1];
    g.pointwise = g.R == 1 && g.S == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 &&
                  g.P == g.H && g.Q == g.W;
    return g;
}

/* Samples per GEMM chunk. */
static int64_t chunk_samples(const conv_geom *g) {
    if (g->PQ >= CONV_PER_SAMPLE_PQ || g->N == 1) return 1;
    int64_t rows = g->CRS > g->Kg ? g->CRS : g->Kg;
    size_t per = (size_t)rows * (size_t)g->PQ * sizeof(float);
    int64_t nb = per ? (int64_t)(CONV_COL_BUDGET / per) : g->N;
    if (nb < 1) nb = 1;
    return nb < g->N ? nb : g->N;
}

/* ---- fp32 NCHW views ---- */

/* The tensor's memory when it already is fp32 NCHW, else a converted copy in *owned. */
static const float *f32_in(const dlt_tensor *t, float **owned) {
    *owned = NULL;
    if (t->dtype == DLT_F32 && t->format != DLT_FORMAT_CHANNELS_LAST) return dlt__data(t);
    *owned = dlt__cpu_to_f32_nchw(t);
    return *owned;
}

/* Where to compute an output: the tensor itself when fp32 NCHW (*staged = NULL), else a
 * scratch buffer (*staged) that out_finish converts into the tensor. */
static float *f32_out(dlt_tensor *t, float **staged) {
    *staged = NULL;
    if (t->dtype == DLT_F32 && t->format != DLT_FORMAT_CHANNELS_LAST) return dlt__data(t);
    *staged = malloc((size_t)t->numel * sizeof(float));
    return *staged;
}

static void out_finish(dlt_tensor *t, float *staged, int32_t beta) {
    if (staged) {
        dlt__cpu_from_f32_nchw(t, staged, beta);
        free(staged);
    }
}

/* ---- im2col / col2im over a chunk of samples and one group ---- */

/* col[(c*R + r)*S + s][nl*PQ + p*Q + q] = x[n0+nl, c0+c, p*sh-ph+r*dh, q*sw-pw+s*dw] or 0;
 * one row of col per iteration. */
static void im2col(const conv_geom *g, const float *x, int64_t n0, int64_t nb, int64_t c0,
                   float *col) {
    const int64_t L = nb * g->PQ;
    DLT_PARALLEL_FOR(crs, g->CRS, dlt__par_grain(L)) {
        const int64_t c = crs / (g->R * g->S), r = crs / g->S % g->R, s = crs % g->S;
        const int64_t w0 = s * g->dw - g->pw;
        float *row = col + crs * L;
        for (int64_t nl = 0; nl < nb; nl++) {
            const float *xc = x + ((n0 + nl) * g->C + c0 + c) * g->H * g->W;
            float *dst = row + nl * g->PQ;
            for (int64_t p = 0; p < g->P; p++) {
                const int64_t h = p * g->sh - g->ph + r * g->dh;
                float *d = dst + p * g->Q;
                if (h < 0 || h >= g->H) {
                    memset(d, 0, (size_t)g->Q * sizeof(float));
                    continue;
                }
                const float *xr = xc + h * g->W;
                if (g->sw == 1 && w0 >= 0 && w0 + g->Q <= g->W) {
                    memcpy(d, xr + w0, (size_t)g->Q * sizeof(float));
                    continue;
                }
                for (int64_t q = 0; q < g->Q; q++) {
                    const int64_t w = q * g->sw + w0;
                    d[q] = (w >= 0 && w < g->W) ? xr[w] : 0.0f;
                }
            }
        }
    }
}

/* dx[n0+nl, c0+c, h, w] += col[...] for every position im2col read (dx pre-zeroed); one
 * (sample, channel) plane of dx per iteration, its additions in (r, s, p, q) order. */
static void col2im_add(const conv_geom *g, const float *col, int64_t n0, int64_t nb, int64_t c0,
                       float *dx) {
    const int64_t L = nb * g->PQ;
    DLT_PARALLEL_FOR(nlc, nb * g->Cg, dlt__par_grain(g->R * g->S * g->PQ)) {
        const int64_t nl = nlc / g->Cg, c = nlc % g->Cg;
        float *xc = dx + ((n0 + nl) * g->C + c0 + c) * g->H * g->W;
        for (int64_t r = 0; r < g->R; r++)
            for (int64_t s = 0; s < g->S; s++) {
                const float *src = col + ((c * g->R + r) * g->S + s) * L + nl * g->PQ;
                const int64_t w0 = s * g->dw - g->pw;
                for (int64_t p = 0; p < g->P; p++) {
                    const int64_t h = p * g->sh - g->ph + r * g->dh;
                    if (h < 0 || h >= g->H) continue;
                    float *xr = xc + h * g->W;
                    const float *sr = src + p * g->Q;
                    for (int64_t q = 0; q < g->Q; q++) {
                        const int64_t w = q * g->sw + w0;
                        if (w >= 0 && w < g->W) xr[w] += sr[q];
                    }
                }
            }
    }
}

/* Gathers channels k0..k0+Kg of samples n0..n0+nb of t [N,K,PQ] into buf [Kg, nb*PQ]. */
static void gather_rows(const conv_geom *g, const float *t, int64_t n0, int64_t nb, int64_t k0,
                        float *buf) {
    const int64_t L = nb * g->PQ;
    DLT_PARALLEL_FOR(k, g->Kg, dlt__par_grain(L))
        for (int64_t nl = 0; nl < nb; nl++)
            memcpy(buf + k * L + nl * g->PQ, t + ((n0 + nl) * g->K + k0 + k) * g->PQ,
                   (size_t)g->PQ * sizeof(float));
}

/* Inverse of gather_rows. */
static void scatter_rows(const conv_geom *g, const float *buf, int64_t n0, int64_t nb, int64_t k0,
                         float *t) {
    const int64_t L = nb * g->PQ;
    DLT_PARALLEL_FOR(k, g->Kg, dlt__par_grain(L))
        for (int64_t nl = 0; nl < nb; nl++)
            memcpy(t + ((n0 + nl) * g->K + k0 + k) * g->PQ, buf + k * L + nl * g->PQ,
                   (size_t)g->PQ * sizeof(float));
}

static dlt_status oom(const char *what) {
    return dlt__err(DLT_ERR_OUT_OF_MEMORY, CONV_FN, "cannot allocate the %s buffer", what);
}

/* Empty reductions (no taps, no samples, no output channels): the result is 0 (or stays,
 * when accumulating). Handled here because BLAS rejects zero leading dimensions. */
static void zero_unless_acc(dlt_tensor *t, int32_t beta) {
    if (beta) return;
    void *p = dlt__data(t);
    for (int64_t i = 0; i < t->numel; i++) dlt__st(p, t->dtype, i, 0.0f);
}

/* ---- channels-last f32 path (im2row) ---- */

static int is_f32_cl(const dlt_tensor *t) {
    return t->dtype == DLT_F32 && t->format == DLT_FORMAT_CHANNELS_LAST;
}

/* Output rows (pixels) per chunk of the row matrix. */
static int64_t chunk_rows(const conv_geom *g) {
    const int64_t M = g->N * g->PQ;
    int64_t r = (int64_t)(CONV_COL_BUDGET / ((size_t)g->CRS * sizeof(float)));
    if (r < 1) r = 1;
    return r < M ? r : M;
}

/* rows[m - m0][(r*S + s)*Cg + c] = x[n, h, w, c0 + c] for output pixel m = (n, p, q), or 0
 * where (h, w) falls in the padding. */
static void im2row(const conv_geom *g, const float *x, int64_t m0, int64_t mc, int64_t c0,
                   float *rows) {
    DLT_PARALLEL_FOR(ml, mc, dlt__par_grain(g->CRS)) {
        const int64_t m = m0 + ml;
        const int64_t n = m / g->PQ, pq = m % g->PQ, p = pq / g->Q, q = pq % g->Q;
        float *dst = rows + (m - m0) * g->CRS;
        for (int64_t r = 0; r < g->R; r++) {
            const int64_t h = p * g->sh - g->ph + r * g->dh;
            for (int64_t s = 0; s < g->S; s++, dst += g->Cg) {
                const int64_t w = q * g->sw - g->pw + s * g->dw;
                if (h < 0 || h >= g->H || w < 0 || w >= g->W)
                    memset(dst, 0, (size_t)g->Cg * sizeof(float));
                else
                    memcpy(dst, x + ((n * g->H + h) * g->W + w) * g->C + c0,
                           (size_t)g->Cg * sizeof(float));
            }
        }
    }
}

/* dx[n, h, w, c0 + c] += rows[...] for every position im2row read (dx pre-zeroed). A
 * sample's rows add only into that sample of dx: one sample per iteration, its rows in
 * order. */
static void row2im_add(const conv_geom *g, const float *rows, int64_t m0, int64_t mc, int64_t c0,
                       float *dx) {
    if (mc <= 0) return;
    const int64_t n0 = m0 / g->PQ, n1 = (m0 + mc - 1) / g->PQ;
    DLT_PARALLEL_FOR(nl, n1 - n0 + 1, dlt__par_grain(g->PQ * g->CRS)) {
        const int64_t n = n0 + nl;
        const int64_t ma = n * g->PQ > m0 ? n * g->PQ : m0;
        const int64_t mb = (n + 1) * g->PQ < m0 + mc ? (n + 1) * g->PQ : m0 + mc;
        for (int64_t m = ma; m < mb; m++) {
            const int64_t pq = m % g->PQ, p = pq / g->Q, q = pq % g->Q;
            const float *src = rows + (m - m0) * g->CRS;
            for (int64_t r = 0; r < g->R; r++) {
                const int64_t h = p * g->sh - g->ph + r * g->dh;
                for (int64_t s = 0; s < g->S; s++, src += g->Cg) {
                    const int64_t w = q * g->sw - g->pw + s * g->dw;
                    if (h < 0 || h >= g->H || w < 0 || w >= g->W) continue;
                    float *d = dx + ((n * g->H + h) * g->W + w) * g->C + c0;
                    for (int64_t c = 0; c < g->Cg; c++) d[c] += src[c];
                }
            }
        }
    }
}

static dlt_status nhwc_fwd(const conv_geom *g, float *y, const float *x, const float *w,
                           const float *b) {
    const int64_t M = g->N * g->PQ, mmax = chunk_rows(g);
    float *rows = NULL;
    if (!g->pointwise && !(rows = malloc((size_t)mmax * (size_t)g->CRS * sizeof(float))))
        return oom("conv2d forward");
    for (int64_t m0 = 0; m0 < M; m0 += mmax) {
        const int64_t mc = M - m0 < mmax ? M - m0 : mmax;
        for (int64_t gi = 0; gi < g->G; gi++) {
            const float *A = x + m0 * g->C + gi * g->Cg;
            int64_t lda = g->C;
            if (!g->pointwise) {
                im2row(g, x, m0, mc, gi * g->Cg, rows);
                A = rows;
                lda = g->CRS;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)mc, (int)g->Kg, (int)g->CRS,
                        1.0f, A, (int)lda, w + gi * g->Kg * g->CRS, (int)g->CRS, 0.0f,
                        y + m0 * g->K + gi * g->Kg, (int)g->K);
        }
    }
    if (b) {
        DLT_PARALLEL_FOR(m, M, dlt__par_grain(g->K))
            for (int64_t k = 0; k < g->K; k++) y[m * g->K + k] += b[k];
    }
    free(rows);
    return DLT_OK;
}

/* beta 1: row2im adds into dx as it is, and the pointwise GEMM takes beta */
static dlt_status nhwc_bwd_data(const conv_geom *g, float *dx, const float *dy, const float *w,
                                int32_t beta) {
    const int64_t M = g->N * g->PQ, mmax = chunk_rows(g);
    float *rows = NULL;
    if (!g->pointwise) {
        if (!(rows = malloc((size_t)mmax * (size_t)g->CRS * sizeof(float))))
            return oom("conv2d backward-data");
        if (!beta) memset(dx, 0, (size_t)(g->N * g->H * g->W * g->C) * sizeof(float));
    }
    for (int64_t m0 = 0; m0 < M; m0 += mmax) {
        const int64_t mc = M - m0 < mmax ? M - m0 : mmax;
        for (int64_t gi = 0; gi < g->G; gi++) {
            /* pointwise: the GEMM writes this group's channel slice of dx directly */
            float *Cm = g->pointwise ? dx + m0 * g->C + gi * g->Cg : rows;
            const int64_t ldc = g->pointwise ? g->C : g->CRS;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)mc, (int)g->CRS, (int)g->Kg,
                        1.0f, dy + m0 * g->K + gi * g->Kg, (int)g->K, w + gi * g->Kg * g->CRS,
                        (int)g->CRS, g->pointwise && beta ? 1.0f : 0.0f, Cm, (int)ldc);
            if (!g->pointwise) row2im_add(g, rows, m0, mc, gi * g->Cg, dx);
        }
    }
    free(rows);
    return DLT_OK;
}

static dlt_status nhwc_bwd_filter(const conv_geom *g, float *dw, const float *x, const float *dy,
                                  int32_t beta) {
    const int64_t M = g->N * g->PQ, mmax = chunk_rows(g);
    float *rows = NULL;
    if (!g->pointwise && !(rows = malloc((size_t)mmax * (size_t)g->CRS * sizeof(float))))
        return oom("conv2d backward-filter");
    for (int64_t m0 = 0; m0 < M; m0 += mmax) {
        const int64_t mc = M - m0 < mmax ? M - m0 : mmax;
        for (int64_t gi = 0; gi < g->G; gi++) {
            const float *A = x + m0 * g->C + gi * g->Cg;
            int64_t lda = g->C;
            if (!g->pointwise) {
                im2row(g, x, m0, mc, gi * g->Cg, rows);
                A = rows;
                lda = g->CRS;
            }
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)g->Kg, (int)g->CRS, (int)mc,
                        1.0f, dy + m0 * g->K + gi * g->Kg, (int)g->K, A, (int)lda,
                        (m0 == 0 && !beta) ? 0.0f : 1.0f, dw + gi * g->Kg * g->CRS, (int)g->CRS);
        }
    }
    free(rows);
    return DLT_OK;
}

/* ---- forward ---- */

dlt_status dlt__cpu_conv2d_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                               const dlt_tensor *w, const dlt_tensor *b, const dlt_conv_params *p) {
    (void)ctx;
    const conv_geom g = make_geom(x, w, y, p);
    if (y->numel == 0) return DLT_OK;
    if (g.CRS == 0) { /* no input channels: y = bias */
        void *py = dlt__data(y);
        for (int64_t n = 0; n < g.N; n++)
            for (int64_t k = 0; k < g.K; k++)
                for (int64_t i = 0; i < g.PQ; i++)
                    dlt__st(py, y->dtype, dlt__off4(y, n, k, i / g.Q, i % g.Q),
                            b ? dlt__ld(dlt__data(b), b->dtype, k) : 0.0f);
        return DLT_OK;
    }
    if (is_f32_cl(x) && is_f32_cl(w) && is_f32_cl(y) && (!b || b->dtype == DLT_F32))
        return nhwc_fwd(&g, dlt__data(y), dlt__data(x), dlt__data(w), b ? dlt__data(b) : NULL);
    const int64_t nb_max = chunk_samples(&g);
    dlt_status st = DLT_OK;
    float *xo = NULL, *wo = NULL, *bo = NULL, *ys = NULL, *col = NULL, *tmp = NULL;
    const float *xf = f32_in(x, &xo), *wf = f32_in(w, &wo), *bf = NULL;
    float *yf = f32_out(y, &ys);
    if (b) bf = f32_in(b, &bo);
    const int need_col = !(g.pointwise && nb_max == 1);
    if (need_col) col = malloc((size_t)g.CRS * (size_t)(nb_max * g.PQ) * sizeof(float));
    if (nb_max > 1) tmp = malloc((size_t)g.Kg * (size_t)(nb_max * g.PQ) * sizeof(float));
    if (!xf || !wf || !yf || (b && !bf) || (need_col && !col) || (nb_max > 1 && !tmp)) {
        st = oom("conv2d forward");
        goto done;
    }
    for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
        const int64_t nb = g.N - n0 < nb_max ? g.N - n0 : nb_max;
        const int64_t L = nb * g.PQ;
        for (int64_t gi = 0; gi < g.G; gi++) {
            const float *B;
            if (need_col) {
                im2col(&g, xf, n0, nb, gi * g.Cg, col);
                B = col;
            } else {
                B = xf + (n0 * g.C + gi * g.Cg) * g.PQ;
            }
            const float *A = wf + gi * g.Kg * g.CRS;
            float *Cm = nb == 1 ? yf + (n0 * g.K + gi * g.Kg) * g.PQ : tmp;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g.Kg, (int)L, (int)g.CRS,
                        1.0f, A, (int)g.CRS, B, (int)L, 0.0f, Cm, (int)L);
            if (nb > 1) scatter_rows(&g, tmp, n0, nb, gi * g.Kg, yf);
        }
    }
    if (bf) {
        DLT_PARALLEL_FOR(nk, g.N * g.K, dlt__par_grain(g.PQ)) {
            float *yr = yf + nk * g.PQ;
            for (int64_t i = 0; i < g.PQ; i++) yr[i] += bf[nk % g.K];
        }
    }
    out_finish(y, ys, 0);
    ys = NULL;
done:
    free(xo);
    free(wo);
    free(bo);
    free(ys);
    free(col);
    free(tmp);
    return st;
}

/* ---- backward data: dx = beta*dx + col2im(w^T dy) ---- */

dlt_status dlt__cpu_conv2d_bwd_data(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                    const dlt_tensor *w, const dlt_conv_params *p, int32_t beta) {
    (void)ctx;
    const conv_geom g = make_geom(dx, w, dy, p);
    if (dx->numel == 0) return DLT_OK;
    if (g.Kg == 0 || g.PQ == 0) {
        zero_unless_acc(dx, beta);
        return DLT_OK;
    }
    if (is_f32_cl(dx) && is_f32_cl(dy) && is_f32_cl(w))
        return nhwc_bwd_data(&g, dlt__data(dx), dlt__data(dy), dlt__data(w), beta);
    const int64_t nb_max = chunk_samples(&g);
    dlt_status st = DLT_OK;
    float *dyo = NULL, *wo = NULL, *dxs = NULL, *col = NULL, *tmp = NULL;
    const float *dyf = f32_in(dy, &dyo), *wf = f32_in(w, &wo);
    float *dxf = f32_out(dx, &dxs);
    const int direct = g.pointwise && nb_max == 1; /* GEMM writes dx itself */
    if (!direct) col = malloc((size_t)g.CRS * (size_t)(nb_max * g.PQ) * sizeof(float));
    if (nb_max > 1) tmp = malloc((size_t)g.Kg * (size_t)(nb_max * g.PQ) * sizeof(float));
    if (!dyf || !wf || !dxf || (!direct && !col) || (nb_max > 1 && !tmp)) {
        st = oom("conv2d backward-data");
        goto done;
    }
    /* accumulating into dx itself (fp32 NCHW) adds to it as it is; a staged result starts
     * from zero and out_finish adds it */
    const int in_place = beta && !dxs;
    if (!direct && !in_place) memset(dxf, 0, (size_t)dx->numel * sizeof(float));
    for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
        const int64_t nb = g.N - n0 < nb_max ? g.N - n0 : nb_max;
        const int64_t L = nb * g.PQ;
        for (int64_t gi = 0; gi < g.G; gi++) {
            const float *B;
            if (nb == 1) {
                B = dyf + (n0 * g.K + gi * g.Kg) * g.PQ;
            } else {
                gather_rows(&g, dyf, n0, nb, gi * g.Kg, tmp);
                B = tmp;
            }
            const float *A = wf + gi * g.Kg * g.CRS;
            float *Cm = direct ? dxf + (n0 * g.C + gi * g.Cg) * g.PQ : col;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)g.CRS, (int)L, (int)g.Kg,
                        1.0f, A, (int)g.CRS, B, (int)L, direct && in_place ? 1.0f : 0.0f, Cm, (int)L);
            if (!direct) col2im_add(&g, col, n0, nb, gi * g.Cg, dxf);
        }
    }
    out_finish(dx, dxs, beta);
    dxs = NULL;
done:
    free(dyo);
    free(wo);
    free(dxs);
    free(col);
    free(tmp);
    return st;
}

/* ---- backward filter: dw = beta*dw + dy col^T ---- */

dlt_status dlt__cpu_conv2d_bwd_filter(dlt_ctx *ctx, dlt_tensor *dw, const dlt_tensor *x,
                                      const dlt_tensor *dy, const dlt_conv_params *p,
                                      int32_t beta) {
    (void)ctx;
    const conv_geom g = make_geom(x, dw, dy, p);
    if (dw->numel == 0) return DLT_OK;
    if (g.N * g.PQ == 0) {
        zero_unless_acc(dw, beta);
        return DLT_OK;
    }
    if (is_f32_cl(x) && is_f32_cl(dy) && is_f32_cl(dw))
        return nhwc_bwd_filter(&g, dlt__data(dw), dlt__data(x), dlt__data(dy), beta);
    const int64_t nb_max = chunk_samples(&g);
    dlt_status st = DLT_OK;
    float *xo = NULL, *dyo = NULL, *dws = NULL, *col = NULL, *tmp = NULL;
    const float *xf = f32_in(x, &xo), *dyf = f32_in(dy, &dyo);
    float *dwf = f32_out(dw, &dws);
    const int need_col = !(g.pointwise && nb_max == 1);
    if (need_col) col = malloc((size_t)g.CRS * (size_t)(nb_max * g.PQ) * sizeof(float));
    if (nb_max > 1) tmp = malloc((size_t)g.Kg * (size_t)(nb_max * g.PQ) * sizeof(float));
    if (!xf || !dyf || !dwf || (need_col && !col) || (nb_max > 1 && !tmp)) {
        st = oom("conv2d backward-filter");
        goto done;
    }
    /* staged output starts from zero and is added to dw with beta at the end */
    float beta0 = (dws == NULL && beta) ? 1.0f : 0.0f;
    for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
        const int64_t nb = g.N - n0 < nb_max ? g.N - n0 : nb_max;
        const int64_t L = nb * g.PQ;
        for (int64_t gi = 0; gi < g.G; gi++) {
            const float *Bc, *Ad;
            if (need_col) {
                im2col(&g, xf, n0, nb, gi * g.Cg, col);
                Bc = col;
            } else {
                Bc = xf + (n0 * g.C + gi * g.Cg) * g.PQ;
            }
            if (nb == 1) {
                Ad = dyf + (n0 * g.K + gi * g.Kg) * g.PQ;
            } else {
                gather_rows(&g, dyf, n0, nb, gi * g.Kg, tmp);
                Ad = tmp;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g.Kg, (int)g.CRS, (int)L,
                        1.0f, Ad, (int)L, Bc, (int)L, n0 == 0 ? beta0 : 1.0f,
                        dwf + gi * g.Kg * g.CRS, (int)g.CRS);
        }
    }
    out_finish(dw, dws, beta);
    dws = NULL;
done:
    free(xo);
    free(dyo);
    free(dws);
    free(col);
    free(tmp);
    return st;
}

/* ---- backward bias: db[k] = beta*db[k] + sum over n, p, q of dy ---- */

dlt_status dlt__cpu_conv2d_bwd_bias(dlt_ctx *ctx, dlt_tensor *db, const dlt_tensor *dy,
                                    int32_t beta) {
    (void)ctx;
    const int64_t N = dy->shape[0], K = dy->shape[1], PQ = dy->shape[2] * dy->shape[3];
    double *acc = calloc((size_t)K, sizeof(double));
    if (!acc) return oom("conv2d backward-bias");
    const void *p = dlt__data(dy);
    if (dy->format == DLT_FORMAT_CHANNELS_LAST) {
        for (int64_t i = 0; i < N * PQ; i++)
            for (int64_t k = 0; k < K; k++) acc[k] += dlt__ld(p, dy->dtype, i * K + k);
    } else if (dy->dtype == DLT_F32) {
        /* one channel per iteration, its samples in order */
        const float *f = p;
        DLT_PARALLEL_FOR(k, K, dlt__par_grain(N * PQ))
            for (int64_t n = 0; n < N; n++) {
                const float *r = f + (n * K + k) * PQ;
                double s = 0.0;
                for (int64_t i = 0; i < PQ; i++) s += r[i];
                acc[k] += s;
            }
    } else {
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++)
                for (int64_t i = 0; i < PQ; i++)
                    acc[k] += dlt__ld(p, dy->dtype, (n * K + k) * PQ + i);
    }
    void *pb = dlt__data(db);
    for (int64_t k = 0; k < K; k++) {
        float v = (float)acc[k];
        if (beta) v += dlt__ld(pb, db->dtype, k);
        dlt__st(pb, db->dtype, k, v);
    }
    free(acc);
    return DLT_OK;
}
