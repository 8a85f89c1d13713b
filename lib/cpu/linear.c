/*
 * linear.c - CPU fully connected layer through CBLAS sgemm (row-major).
 *
 *   forward        y [M,N]  = x [M,K] . w[N,K]^T + b[N]
 *   backward data  dx [M,K] = dy [M,N] . w [N,K]
 *   backward weight dw [N,K] = beta*dw + dy^T . x;  db [N] = beta*db + column sums of dy
 *
 * All tensors are 2-D (b, db 1-D) contiguous and share one float dtype. f32 operands are used
 * in place; f16/bf16 are converted to fp32 copies and the results rounded back. The bias
 * column sums are accumulated in double.
 */
#include <cblas.h>
#include <stdlib.h>

#include "ops_cpu.h"

#define LINEAR_FN "dlt_linear"

static const float *f32_in(const dlt_tensor *t, float **owned) {
    *owned = NULL;
    if (t->dtype == DLT_F32) return dlt__data(t);
    *owned = dlt__cpu_to_f32_nchw(t);
    return *owned;
}

static float *f32_out(dlt_tensor *t, float **staged) {
    *staged = NULL;
    if (t->dtype == DLT_F32) return dlt__data(t);
    *staged = malloc((size_t)t->numel * sizeof(float));
    return *staged;
}

static dlt_status oom(const char *what) {
    return dlt__err(DLT_ERR_OUT_OF_MEMORY, LINEAR_FN, "cannot allocate the %s buffer", what);
}

/* Empty reductions give 0 (or leave the destination when accumulating); BLAS rejects the
 * zero leading dimensions they would need. */
static void zero_unless_acc(dlt_tensor *t, int32_t beta) {
    if (!t || beta) return;
    void *p = dlt__data(t);
    for (int64_t i = 0; i < t->numel; i++) dlt__st(p, t->dtype, i, 0.0f);
}

dlt_status dlt__cpu_linear_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                               const dlt_tensor *w, const dlt_tensor *b) {
    (void)ctx;
    const int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
    if (M * N == 0) return DLT_OK;
    if (K == 0) { /* y = bias */
        void *py = dlt__data(y);
        for (int64_t i = 0; i < M * N; i++)
            dlt__st(py, y->dtype, i, b ? dlt__ld(dlt__data(b), b->dtype, i % N) : 0.0f);
        return DLT_OK;
    }
    dlt_status st = DLT_OK;
    float *xo = NULL, *wo = NULL, *bo = NULL, *ys = NULL;
    const float *xf = f32_in(x, &xo), *wf = f32_in(w, &wo), *bf = b ? f32_in(b, &bo) : NULL;
    float *yf = f32_out(y, &ys);
    if (!xf || !wf || (b && !bf) || !yf) {
        st = oom("linear forward");
        goto done;
    }
    if (bf)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) yf[i * N + j] = bf[j];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, xf, (int)K,
                wf, (int)K, bf ? 1.0f : 0.0f, yf, (int)N);
    if (ys) dlt__cpu_from_f32_nchw(y, ys, 0);
done:
    free(xo);
    free(wo);
    free(bo);
    free(ys);
    return st;
}

dlt_status dlt__cpu_linear_bwd_data(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                    const dlt_tensor *w) {
    (void)ctx;
    const int64_t M = dy->shape[0], N = dy->shape[1], K = w->shape[1];
    if (M * K == 0) return DLT_OK;
    if (N == 0) {
        zero_unless_acc(dx, 0);
        return DLT_OK;
    }
    dlt_status st = DLT_OK;
    float *dyo = NULL, *wo = NULL, *dxs = NULL;
    const float *dyf = f32_in(dy, &dyo), *wf = f32_in(w, &wo);
    float *dxf = f32_out(dx, &dxs);
    if (!dyf || !wf || !dxf) {
        st = oom("linear backward-data");
        goto done;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)K, (int)N, 1.0f, dyf,
                (int)N, wf, (int)K, 0.0f, dxf, (int)K);
    if (dxs) dlt__cpu_from_f32_nchw(dx, dxs, 0);
done:
    free(dyo);
    free(wo);
    free(dxs);
    return st;
}

dlt_status dlt__cpu_linear_bwd_weight(dlt_ctx *ctx, dlt_tensor *dw, dlt_tensor *db,
                                      const dlt_tensor *x, const dlt_tensor *dy, int32_t beta) {
    (void)ctx;
    const int64_t M = x->shape[0], K = x->shape[1], N = dy->shape[1];
    if (M == 0 || N == 0) { /* nothing summed */
        zero_unless_acc(dw, beta);
        zero_unless_acc(db, beta);
        return DLT_OK;
    }
    if (K == 0) dw = NULL; /* empty: nothing to write */
    dlt_status st = DLT_OK;
    float *xo = NULL, *dyo = NULL, *dws = NULL;
    double *acc = NULL;
    const float *xf = dw ? f32_in(x, &xo) : NULL, *dyf = f32_in(dy, &dyo);
    float *dwf = dw ? f32_out(dw, &dws) : NULL;
    if (db) acc = calloc((size_t)N, sizeof(double));
    if ((dw && (!xf || !dwf)) || !dyf || (db && !acc)) {
        st = oom("linear backward-weight");
        goto done;
    }
    if (dw) {
        /* a staged (non-f32) dw is computed fresh and added with beta on the way back */
        const float b0 = (beta && !dws) ? 1.0f : 0.0f;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)N, (int)K, (int)M, 1.0f, dyf,
                    (int)N, xf, (int)K, b0, dwf, (int)K);
        if (dws) dlt__cpu_from_f32_nchw(dw, dws, beta);
    }
    if (db) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) acc[j] += (double)dyf[i * N + j];
        void *pb = dlt__data(db);
        for (int64_t j = 0; j < N; j++) {
            float v = (float)acc[j];
            if (beta) v += dlt__ld(pb, db->dtype, j);
            dlt__st(pb, db->dtype, j, v);
        }
    }
done:
    free(xo);
    free(dyo);
    free(dws);
    free(acc);
    return st;
}
