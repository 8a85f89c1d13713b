/*
 * layer_norm.c - CPU layer norm over the rows of [M, N] (lib/ops/layer_norm.c): two-pass
 * statistics in double, rstd = 1/sqrt(biased var + eps); backward
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = u * w
 *   dw += sum_rows u * xhat,  db += sum_rows u      (columns in parallel, rows in order)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cpu.h"
#include "parallel.h"

dlt_status dlt__cpu_ln_fwd(dlt_ctx *ctx, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd, const dlt_tensor *x,
                           const dlt_tensor *w, const dlt_tensor *b, int64_t M, int64_t N, double eps) {
    (void)ctx;
    const void *px = dlt__data(x), *pw = w ? dlt__data(w) : NULL, *pb = b ? dlt__data(b) : NULL;
    void *py = dlt__data(y);
    float *pm = dlt__data(mean), *pr = dlt__data(rstd);
    const int32_t tx = x->dtype, ty = y->dtype, tw = w ? w->dtype : 0, tb = b ? b->dtype : 0;
    DLT_PARALLEL_FOR(r, M, dlt__par_grain(N)) {
        const int64_t base = r * N;
        double s = 0.0;
        for (int64_t j = 0; j < N; j++) s += dlt__ld(px, tx, base + j);
        const double mu = s / (double)N;
        double v = 0.0;
        for (int64_t j = 0; j < N; j++) {
            const double d = (double)dlt__ld(px, tx, base + j) - mu;
            v += d * d;
        }
        const double rs = 1.0 / sqrt(v / (double)N + eps);
        pm[r] = (float)mu;
        pr[r] = (float)rs;
        for (int64_t j = 0; j < N; j++) {
            double o = ((double)dlt__ld(px, tx, base + j) - mu) * rs;
            if (pw) o *= dlt__ld(pw, tw, j);
            if (pb) o += dlt__ld(pb, tb, j);
            dlt__st(py, ty, base + j, (float)o);
        }
    }
    return DLT_OK;
}

dlt_status dlt__cpu_ln_bwd(dlt_ctx *ctx, dlt_tensor *dx, int32_t dx_acc, dlt_tensor *dw, dlt_tensor *db, int32_t beta_acc,
                           const dlt_tensor *dy, const dlt_tensor *x, const dlt_tensor *mean,
                           const dlt_tensor *rstd, const dlt_tensor *w, int64_t M, int64_t N) {
    (void)ctx;
    const void *pu = dlt__data(dy), *px = dlt__data(x), *pw = w ? dlt__data(w) : NULL;
    const float *pm = dlt__data(mean), *pr = dlt__data(rstd);
    void *pd = dlt__data(dx);
    const int32_t tu = dy->dtype, tx = x->dtype, td = dx->dtype, tw = w ? w->dtype : 0;
    DLT_PARALLEL_FOR(r, M, dlt__par_grain(N)) {
        const int64_t base = r * N;
        const double mu = pm[r], rs = pr[r];
        double sg = 0.0, sgx = 0.0;
        for (int64_t j = 0; j < N; j++) {
            const double g = (double)dlt__ld(pu, tu, base + j) * (pw ? (double)dlt__ld(pw, tw, j) : 1.0);
            const double xh = ((double)dlt__ld(px, tx, base + j) - mu) * rs;
            sg += g;
            sgx += g * xh;
        }
        sg /= (double)N;
        sgx /= (double)N;
        for (int64_t j = 0; j < N; j++) {
            const double g = (double)dlt__ld(pu, tu, base + j) * (pw ? (double)dlt__ld(pw, tw, j) : 1.0);
            const double xh = ((double)dlt__ld(px, tx, base + j) - mu) * rs;
            const float v = (float)(rs * (g - sg - xh * sgx));
            if (!dx_acc) {
                dlt__st(pd, td, base + j, v);
                continue;
            }
            /* dx's dtype rounds v first, then one float add: what writing dx and
             * accumulating it (dlt__cpu_accumulate) gives */
            const float prev = dlt__ld(pd, td, base + j);
            dlt__st(pd, td, base + j, v);
            dlt__st(pd, td, base + j, dlt__ld(pd, td, base + j) + prev);
        }
    }
    if (dw || db) {
        void *pdw = dw ? dlt__data(dw) : NULL, *pdb = db ? dlt__data(db) : NULL;
        DLT_PARALLEL_FOR(j, N, dlt__par_grain(M)) {
            double aw = 0.0, ab = 0.0;
            for (int64_t r = 0; r < M; r++) {
                const double u = dlt__ld(pu, tu, r * N + j);
                ab += u;
                aw += u * ((double)dlt__ld(px, tx, r * N + j) - pm[r]) * pr[r];
            }
            if (pdw) dlt__st(pdw, dw->dtype, j, (float)(aw + (beta_acc ? (double)dlt__ld(pdw, dw->dtype, j) : 0.0)));
            if (pdb) dlt__st(pdb, db->dtype, j, (float)(ab + (beta_acc ? (double)dlt__ld(pdb, db->dtype, j) : 0.0)));
        }
    }
    return DLT_OK;
}

/* sum = x + add as the CPU's add computes it (double, rounded once to sum's dtype), then the
 * layer norm of sum */
dlt_status dlt__cpu_add_ln_fwd(dlt_ctx *ctx, dlt_tensor *sum, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd,
                               const dlt_tensor *x, const dlt_tensor *add, const dlt_tensor *w, const dlt_tensor *b,
                               int64_t M, int64_t N, double eps) {
    const void *px = dlt__data(x), *pa = dlt__data(add);
    void *ps = dlt__data(sum);
    const int32_t tx = x->dtype, ta = add->dtype, ts = sum->dtype;
    DLT_PARALLEL_FOR(i, M * N, 4096) {
        dlt__st(ps, ts, i, (float)((double)dlt__ld(px, tx, i) + (double)dlt__ld(pa, ta, i)));
    }
    return dlt__cpu_ln_fwd(ctx, y, mean, rstd, sum, w, b, M, N, eps);
}

/* dx = prev (copied, unless it is dx) + the layer norm's dx, then dcast = dx converted */
dlt_status dlt__cpu_add_ln_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *prev, dlt_tensor *dcast, dlt_tensor *dw,
                               dlt_tensor *db, int32_t beta_acc, const dlt_tensor *dy, const dlt_tensor *sum,
                               const dlt_tensor *mean, const dlt_tensor *rstd, const dlt_tensor *w, int64_t M,
                               int64_t N) {
    if (prev && prev != dx) memcpy(dlt__data(dx), dlt__data(prev), (size_t)dx->numel * dlt_dtype_size(dx->dtype));
    DLT_CHECK(dlt__cpu_ln_bwd(ctx, dx, prev != NULL, dw, db, beta_acc, dy, sum, mean, rstd, w, M, N));
    return dcast ? dlt__cpu_convert(ctx, dcast, dx) : DLT_OK;
}
