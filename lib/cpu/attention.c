/*
 * attention.c - CPU scaled dot-product attention, one query row at a time with O(S) scratch
 * per thread (no T x S matrix), in double:
 *   s_j = scale q.k_j (causal: j > i masked), lse = log sum_j exp(s_j), a_j = exp(s_j - lse)
 *   z_j = keep_j / (1-p) (dropout; 1 without), o = sum_j a_j z_j v_j
 * Backward (the weights recomputed from the saved lse; D_i = dO_i . O_i):
 *   dv_j += a_ij z_ij dO_i;  ds_ij = a_ij (z_ij dO_i.v_j - D_i)
 *   dq_i = scale sum_j ds_ij k_j;  dk_j += scale ds_ij q_i
 * Query rows run in parallel for the forward and dq; dk/dv are summed per (b, h) with the
 * query rows in order, so results do not depend on the thread count.
 */
#include <math.h>
#include <stdlib.h>

#include "../kernel/philox.h"
#include "ops_cpu.h"
#include "parallel.h"

typedef struct attn_view {
    const void *q, *k, *v;
    int32_t dt;
    int64_t T, S, D;
    float keep_p, zscale;
    uint64_t seed, off;
} attn_view;

/* Dropout multiplier of weight (bh, i, j). */
static inline double zmul(const attn_view *a, const dlt_sdpa_params *p, int64_t bh, int64_t i, int64_t j) {
    if (p->dropout_p <= 0.0) return 1.0;
    const uint64_t e = (uint64_t)((bh * a->T + i) * a->S + j);
    return dlt__philox_uniform(a->seed, a->off, e) >= a->keep_p ? (double)a->zscale : 0.0;
}

/* Scores of query row (bh, i) into s[0..S): masked ones -inf. Returns the count of keys. */
static int64_t scores(const attn_view *a, const dlt_sdpa_params *p, int64_t bh, int64_t i, double *s) {
    const int64_t D = a->D, S = a->S;
    const int64_t qb = (bh * a->T + i) * D, kb = bh * S * D;
    const int64_t last = p->causal ? (i < S - 1 ? i : S - 1) : S - 1;
    for (int64_t j = 0; j < S; j++) {
        if (j > last) {
            s[j] = -INFINITY;
            continue;
        }
        double d = 0.0;
        for (int64_t t = 0; t < D; t++) d += (double)dlt__ld(a->q, a->dt, qb + t) * dlt__ld(a->k, a->dt, kb + j * D + t);
        s[j] = d * p->scale;
    }
    return last + 1;
}

static attn_view view_of(dlt_ctx *ctx, const dlt_tensor *q, const dlt_tensor *k, const dlt_tensor *v,
                         const dlt_sdpa_params *p) {
    attn_view a = {dlt__data(q), dlt__data(k), dlt__data(v), q->dtype, p->T, p->S, p->D,
                   (float)p->dropout_p, p->dropout_p < 1.0 ? (float)(1.0 / (1.0 - p->dropout_p)) : 0.0f,
                   p->seed, p->offset};
    if (p->dropout_p > 0.0) a.off += *(const uint64_t *)ctx->rng_base;
    return a;
}

dlt_status dlt__cpu_sdpa_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *q,
                             const dlt_tensor *k, const dlt_tensor *v, const dlt_sdpa_params *p) {
    const attn_view a = view_of(ctx, q, k, v, p);
    const int64_t rows = p->B * p->H * p->T, S = p->S, D = p->D;
    void *po = dlt__data(o);
    float *pl = dlt__data(lse);
    const int32_t to = o->dtype;
    int oom = 0;
#if defined(_OPENMP)
#pragma omp parallel if (rows >= 2 * dlt__par_grain(S * D)) num_threads(dlt__cpu_team(rows, dlt__par_grain(S * D)))
#endif
    {
        double *s = malloc((size_t)S * sizeof *s), *acc = malloc((size_t)D * sizeof *acc);
        if (!s || !acc) {
#if defined(_OPENMP)
#pragma omp atomic write
#endif
            oom = 1;
        }
#if defined(_OPENMP)
#pragma omp for schedule(static)
#endif
        for (int64_t r = 0; r < rows; r++) {
            if (!s || !acc) continue;
            const int64_t bh = r / p->T, i = r % p->T;
            const int64_t n = scores(&a, p, bh, i, s);
            double m = -INFINITY;
            for (int64_t j = 0; j < n; j++)
                if (s[j] > m) m = s[j];
            double l = 0.0;
            for (int64_t j = 0; j < n; j++) l += exp(s[j] - m);
            const double ls = m + log(l);
            pl[r] = (float)ls;
            for (int64_t t = 0; t < D; t++) acc[t] = 0.0;
            for (int64_t j = 0; j < n; j++) {
                const double w = exp(s[j] - ls) * zmul(&a, p, bh, i, j);
                if (w == 0.0) continue;
                const int64_t vb = (bh * S + j) * D;
                for (int64_t t = 0; t < D; t++) acc[t] += w * dlt__ld(a.v, a.dt, vb + t);
            }
            for (int64_t t = 0; t < D; t++) dlt__st(po, to, r * D + t, (float)acc[t]);
        }
        free(s);
        free(acc);
    }
    if (oom) return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_scaled_dot_product_attention", "cannot allocate row scratch");
    return DLT_OK;
}

dlt_status dlt__cpu_sdpa_bwd(dlt_ctx *ctx, dlt_tensor *dq, dlt_tensor *dk, dlt_tensor *dv, const dlt_tensor *dout,
                             const dlt_tensor *q, const dlt_tensor *k, const dlt_tensor *v, const dlt_tensor *o,
                             const dlt_tensor *lse, const dlt_sdpa_params *p) {
    const attn_view a = view_of(ctx, q, k, v, p);
    const int64_t BH = p->B * p->H, T = p->T, S = p->S, D = p->D;
    const void *pdo = dlt__data(dout), *po = dlt__data(o);
    const float *pl = dlt__data(lse);
    void *pdq = dlt__data(dq), *pdk = dlt__data(dk), *pdv = dlt__data(dv);
    const int32_t tdo = dout->dtype, tout = o->dtype, tq = dq->dtype, tk = dk->dtype, tv = dv->dtype;
    int oom = 0;
#if defined(_OPENMP)
#pragma omp parallel if (BH >= 2 * dlt__par_grain(T * S * D)) num_threads(dlt__cpu_team(BH, dlt__par_grain(T * S * D)))
#endif
    {
        double *s = malloc((size_t)S * sizeof *s), *gq = malloc((size_t)D * sizeof *gq);
        double *gk = calloc((size_t)(S * D > 0 ? S * D : 1), sizeof *gk);
        double *gv = calloc((size_t)(S * D > 0 ? S * D : 1), sizeof *gv);
        if (!s || !gq || !gk || !gv) {
#if defined(_OPENMP)
#pragma omp atomic write
#endif
            oom = 1;
        }
#if defined(_OPENMP)
#pragma omp for schedule(static)
#endif
        for (int64_t bh = 0; bh < BH; bh++) {
            if (!s || !gq || !gk || !gv) continue;
            for (int64_t t = 0; t < S * D; t++) gk[t] = gv[t] = 0.0;
            for (int64_t i = 0; i < T; i++) {
                const int64_t r = bh * T + i, qb = r * D;
                const int64_t n = scores(&a, p, bh, i, s);
                double Di = 0.0;
                for (int64_t t = 0; t < D; t++) Di += (double)dlt__ld(pdo, tdo, qb + t) * dlt__ld(po, tout, qb + t);
                for (int64_t t = 0; t < D; t++) gq[t] = 0.0;
                for (int64_t j = 0; j < n; j++) {
                    const double aij = exp(s[j] - (double)pl[r]), z = zmul(&a, p, bh, i, j);
                    const int64_t kb = (bh * S + j) * D;
                    double dov = 0.0;
                    for (int64_t t = 0; t < D; t++) dov += (double)dlt__ld(pdo, tdo, qb + t) * dlt__ld(a.v, a.dt, kb + t);
                    const double ds = aij * (z * dov - Di);
                    for (int64_t t = 0; t < D; t++) {
                        const double dot = dlt__ld(pdo, tdo, qb + t);
                        gv[j * D + t] += aij * z * dot;
                        gq[t] += ds * dlt__ld(a.k, a.dt, kb + t);
                        gk[j * D + t] += ds * dlt__ld(a.q, a.dt, qb + t);
                    }
                }
                for (int64_t t = 0; t < D; t++) dlt__st(pdq, tq, qb + t, (float)(gq[t] * p->scale));
            }
            for (int64_t t = 0; t < S * D; t++) {
                dlt__st(pdk, tk, bh * S * D + t, (float)(gk[t] * p->scale));
                dlt__st(pdv, tv, bh * S * D + t, (float)gv[t]);
            }
        }
        free(s);
        free(gq);
        free(gk);
        free(gv);
    }
    if (oom)
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_backward(scaled_dot_product_attention)", "cannot allocate scratch");
    return DLT_OK;
}
