/*
 * cross_entropy.c - CPU cross-entropy over logits [N,K] with integer class targets, and the
 * accuracy counter (count_correct).
 *
 * Forward (PyTorch's F.cross_entropy with weight=None; see dlt_ce_params for the padded
 * classes and label smoothing ls):
 *   lse_i = m_i + log(sum_k exp(x_ik - m_i)), m_i = max_k x_ik   (in double, k < n_classes)
 *   l_i   = (1-ls) (lse_i - x_i,t_i) + ls (lse_i - mean_k x_ik)
 *   loss  = sum over non-ignored rows of l_i, divided by their count for reduction mean
 *           (0/0 = NaN when every row is ignored, as PyTorch), or not (sum), or l_i per row
 *           (none, ignored rows 0).
 * saved [N+1] f32 receives lse_i for every row and then the count, for the backward.
 * A target outside [0,K) that is not ignore_index fails with DLT_ERR_INVALID_ARGUMENT before
 * anything is written.
 * Backward: dlogits_ik = (exp(x_ik - lse_i) - (1-ls) [k == t_i] - ls/C) * g, g = dloss / count
 * (mean), dloss (sum) or dloss_i (none); rows with an ignored target and padded columns get
 * zeros. In place (dlogits == logits) too: each element is read before it is written.
 * ce_fwd_grad: the forward, then that gradient for dloss = 1 in place; ce_grad_scale: such a
 * gradient times dloss (lib/ops/cross_entropy.c).
 *
 * logits are contiguous, any float dtype (loaded as fp32); targets are i32 or i64; loss,
 * dloss are one f32 element.
 */
#include <math.h>

#include "ops_cpu.h"

#define CE_FN "dlt_cross_entropy"

static inline int64_t target_at(const dlt_tensor *t, int64_t i) {
    const void *p = dlt__data(t);
    return t->dtype == DLT_I64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

dlt_status dlt__cpu_ce_fwd(dlt_ctx *ctx, dlt_tensor *loss, dlt_tensor *saved,
                           const dlt_tensor *logits, const dlt_tensor *targets, const dlt_ce_params *p) {
    (void)ctx;
    const int64_t N = logits->shape[0], K = logits->shape[1], C = p->n_classes;
    const int64_t ignore_index = p->ignore_index;
    const double ls = p->label_smoothing;
    const void *px = dlt__data(logits);
    const int32_t dt = logits->dtype;
    for (int64_t i = 0; i < N; i++) {
        const int64_t t = target_at(targets, i);
        if (t != ignore_index && (t < 0 || t >= C))
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, CE_FN,
                            "target %lld of row %lld is outside [0, %lld) and is not "
                            "ignore_index (%lld)",
                            (long long)t, (long long)i, (long long)C, (long long)ignore_index);
    }
    float *sv = dlt__data(saved);
    float *pl = dlt__data(loss);
    double total = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < N; i++) {
        const int64_t base = i * K;
        double m = -INFINITY, sx = 0.0;
        for (int64_t k = 0; k < C; k++) {
            const double v = dlt__ld(px, dt, base + k);
            if (v > m) m = v;
            sx += v;
        }
        double s = 0.0;
        for (int64_t k = 0; k < C; k++) s += exp((double)dlt__ld(px, dt, base + k) - m);
        const double lse = m + log(s);
        sv[i] = (float)lse;
        const int64_t t = target_at(targets, i);
        if (t == ignore_index) {
            if (p->reduction == DLT_REDUCTION_NONE) pl[i] = 0.0f;
            continue;
        }
        double li = lse - (double)dlt__ld(px, dt, base + t);
        if (ls != 0.0) li = (1.0 - ls) * li + ls * (lse - sx / (double)C);
        if (p->reduction == DLT_REDUCTION_NONE) pl[i] = (float)li;
        total += li;
        count++;
    }
    sv[N] = (float)count;
    if (p->reduction != DLT_REDUCTION_NONE)
        pl[0] = (float)(p->reduction == DLT_REDUCTION_SUM ? total : total / (double)count);
    return DLT_OK;
}

/* The gradient for a reduced loss's dloss g0 (sum: g0, mean: g0 / count), or per row (none:
 * pg[i]). */
static void ce_grad(dlt_tensor *dlogits, const dlt_tensor *logits, const dlt_tensor *targets,
                    const dlt_tensor *saved, const dlt_ce_params *p, double g0, const float *pg) {
    const int64_t N = logits->shape[0], K = logits->shape[1], C = p->n_classes;
    const double ls = p->label_smoothing;
    const void *px = dlt__data(logits);
    void *pd = dlt__data(dlogits);
    const float *sv = dlt__data(saved);
    const double scale = p->reduction == DLT_REDUCTION_SUM ? g0
                         : p->reduction == DLT_REDUCTION_MEAN ? g0 / (double)sv[N]
                                                               : 0.0;
    for (int64_t i = 0; i < N; i++) {
        const int64_t base = i * K, t = target_at(targets, i);
        if (t == p->ignore_index) {
            for (int64_t k = 0; k < K; k++) dlt__st(pd, dlogits->dtype, base + k, 0.0f);
            continue;
        }
        const double g = p->reduction == DLT_REDUCTION_NONE ? (double)pg[i] : scale;
        const double lse = sv[i];
        for (int64_t k = 0; k < C; k++) {
            const double pr = exp((double)dlt__ld(px, logits->dtype, base + k) - lse);
            const double target = (k == t ? 1.0 - ls : 0.0) + ls / (double)C;
            dlt__st(pd, dlogits->dtype, base + k, (float)((pr - target) * g));
        }
        for (int64_t k = C; k < K; k++) dlt__st(pd, dlogits->dtype, base + k, 0.0f);
    }
}

dlt_status dlt__cpu_ce_bwd(dlt_ctx *ctx, dlt_tensor *dlogits, const dlt_tensor *dloss,
                           const dlt_tensor *logits, const dlt_tensor *targets,
                           const dlt_tensor *saved, const dlt_ce_params *p) {
    (void)ctx;
    const float *pg = dlt__data(dloss);
    ce_grad(dlogits, logits, targets, saved, p, (double)pg[0], pg);
    return DLT_OK;
}

/* The forward, then the gradient for dloss = 1 over the logits (the CPU's one pass is the
 * two passes in a row: the same values as ce_fwd and ce_bwd). */
dlt_status dlt__cpu_ce_fwd_grad(dlt_ctx *ctx, dlt_tensor *loss, dlt_tensor *saved, dlt_tensor *logits,
                                const dlt_tensor *targets, const dlt_ce_params *p, int *served) {
    *served = 0;
    if (p->reduction != DLT_REDUCTION_MEAN && p->reduction != DLT_REDUCTION_SUM) return DLT_OK;
    DLT_CHECK(dlt__cpu_ce_fwd(ctx, loss, saved, logits, targets, p));
    ce_grad(logits, logits, targets, saved, p, 1.0, NULL);
    *served = 1;
    return DLT_OK;
}

dlt_status dlt__cpu_ce_grad_scale(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dloss) {
    (void)ctx;
    const float g = *(const float *)dlt__data(dloss);
    if (g == 1.0f) return DLT_OK;
    void *pd = dlt__data(dx);
    for (int64_t k = 0; k < dx->numel; k++) dlt__st(pd, dx->dtype, k, dlt__ld(pd, dx->dtype, k) * g);
    return DLT_OK;
}

dlt_status dlt__cpu_count_correct(dlt_ctx *ctx, void *correct, const dlt_tensor *logits,
                                  const dlt_tensor *targets) {
    (void)ctx;
    const int64_t N = logits->shape[0], K = logits->shape[1];
    const void *px = dlt__data(logits);
    int64_t hits = 0;
    for (int64_t i = 0; i < N; i++) {
        /* first maximum wins; NaN counts as the maximum (torch.argmax) */
        int64_t best = 0;
        float bv = dlt__ld(px, logits->dtype, i * K);
        for (int64_t k = 1; k < K && bv == bv; k++) {
            const float v = dlt__ld(px, logits->dtype, i * K + k);
            if (v > bv || v != v) {
                bv = v;
                best = k;
            }
        }
        if (best == target_at(targets, i)) hits++;
    }
    *(int64_t *)correct += hits;
    return DLT_OK;
}
