/*
 * adamw.c - CPU Adam/AdamW step (lib/optim/adamw.c states the update). The element
 * function and its scalars are dlt__adamw_elem / dlt__adamw_scalars (lib/kernel/optim.h),
 * the same code cuda/adamw.cu runs, so both backends give the same bits. Elements are
 * independent: the loop over a tensor is split across threads.
 */
#include "../kernel/optim.h"
#include "ops_cpu.h"
#include "parallel.h"

dlt_status dlt__cpu_adamw_step(dlt_ctx *ctx, const dlt_adamw_launch *L) {
    (void)ctx;
    dlt_optim_dev *d = (dlt_optim_dev *)L->state;
    if (L->found_inf && *(const float *)L->found_inf != 0.0f) {
        d->last_applied = 0; /* the GradScaler's skip: nothing else changes */
        return DLT_OK;
    }
    int32_t *steps = (int32_t *)L->steps;
    /* fused clipping: grad * coef as clip_grad_norm would have left it in the gradient */
    const int clip = L->clip_coef != NULL;
    const float coef = clip ? *(const float *)L->clip_coef : 1.0f;
    for (int32_t i = 0; i < L->n; i++) {
        const int32_t g = L->group[i];
        dlt_adamw_scalars s;
        dlt__adamw_scalars(&s, (double)*dlt__optim_lr_at(d, g), L->weight_decay[g], L->decoupled,
                           L->maximize, L->beta1, L->beta2, L->eps,
                           (int64_t)steps[L->index[i]] + 1);
        float *p = (float *)dlt__data(L->params[i]);
        const float *gr = (const float *)dlt__data(L->grads[i]);
        float *m = (float *)dlt__data(L->exp_avg[i]);
        float *v = (float *)dlt__data(L->exp_avg_sq[i]);
        uint16_t *h16 = L->lp_copies[2 * i] ? (uint16_t *)dlt__data(L->lp_copies[2 * i]) : NULL;
        uint16_t *hbf = L->lp_copies[2 * i + 1] ? (uint16_t *)dlt__data(L->lp_copies[2 * i + 1]) : NULL;
        const int64_t n = L->params[i]->numel;
        DLT_PARALLEL_FOR(e, n, 1 << 15) {
            const float gv = clip ? DLT__FMUL(gr[e], coef) : gr[e];
            const float pv = dlt__adamw_elem(&s, p[e], gv, &m[e], &v[e]);
            p[e] = pv;
            if (h16) h16[e] = dlt__f32_to_f16(pv);
            if (hbf) hbf[e] = dlt__f32_to_bf16(pv);
        }
    }
    for (int32_t i = 0; i < L->n; i++) steps[L->index[i]]++;
    d->step = dlt__step_next(d->step);
    d->last_applied = 1;
    if (L->schedule)
        for (int32_t g = 0; g < L->n_groups; g++)
            *dlt__optim_lr_at(d, g) = (float)dlt__lr_schedule_eval(L->schedule, *dlt__optim_base_at(d, g), d->step);
    return DLT_OK;
}
