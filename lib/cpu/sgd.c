/*
 * sgd.c - CPU SGD step (see lib/optim/sgd.c for the update rule) and the optimizer's
 * device-state writes. The arithmetic mirrors PyTorch's foreach kernels on CUDA op for op,
 * with fused multiply-adds where those use alpha (a + alpha*b compiles to one FMA there)
 * and a separately rounded product for buf*momentum; fmaf is correctly rounded, so this
 * loop and cuda/sgd.cu give the same bits.
 */
#include <math.h>

#include "../kernel/optim.h"
#include "ops_cpu.h"

dlt_status dlt__cpu_sgd_step(dlt_ctx *ctx, const dlt_sgd_launch *L) {
    (void)ctx;
    dlt_optim_dev *d = (dlt_optim_dev *)L->state;
    if (L->found_inf && *(const float *)L->found_inf != 0.0f) {
        d->last_applied = 0; /* the GradScaler's skip: nothing else changes */
        return DLT_OK;
    }
    int32_t *flags = (int32_t *)L->buf_init;
    const float neg_lr = -d->lr;
    const float mu = (float)L->momentum;
    const float damp = (float)(1.0 - L->dampening);
    const float wd = (float)L->weight_decay;
    const int use_wd = L->weight_decay != 0.0, nesterov = L->nesterov, maximize = L->maximize;
    /* PyTorch's foreach path adds mu*b into .grad itself when nothing copied it before */
    const int write_grad = L->bufs && nesterov && !maximize && !use_wd;
    /* fused clipping: grad * coef as clip_grad_norm would have left it in the gradient */
    const int clip = L->clip_coef != NULL;
    const float coef = clip ? *(const float *)L->clip_coef : 1.0f;
    for (int32_t i = 0; i < L->n; i++) {
        float *p = (float *)dlt__data(L->params[i]);
        float *g = (float *)dlt__data(L->grads[i]);
        float *b = L->bufs ? (float *)dlt__data(L->bufs[i]) : NULL;
        const int first = b && !flags[L->buf_index[i]];
        uint16_t *h16 = L->lp_copies[2 * i] ? (uint16_t *)dlt__data(L->lp_copies[2 * i]) : NULL;
        uint16_t *hbf = L->lp_copies[2 * i + 1] ? (uint16_t *)dlt__data(L->lp_copies[2 * i + 1]) : NULL;
        const int64_t n = L->params[i]->numel;
        for (int64_t e = 0; e < n; e++) {
            const float gc = clip ? g[e] * coef : g[e];
            float gv = maximize ? -gc : gc;
            if (use_wd) gv = fmaf(wd, p[e], gv);
            if (b) {
                float bv;
                if (first) {
                    bv = gv; /* clone(g): no dampening on the first step */
                } else {
                    float scaled = b[e] * mu;
                    bv = fmaf(damp, gv, scaled);
                }
                b[e] = bv;
                gv = nesterov ? fmaf(mu, bv, gv) : bv;
                if (write_grad) g[e] = gv;
            }
            float pv = fmaf(neg_lr, gv, p[e]);
            p[e] = pv;
            if (h16) h16[e] = dlt__f32_to_f16(pv);
            if (hbf) hbf[e] = dlt__f32_to_bf16(pv);
        }
    }
    if (L->bufs)
        for (int32_t i = 0; i < L->n; i++) flags[L->buf_index[i]] = 1;
    d->step = dlt__step_next(d->step);
    d->last_applied = 1;
    if (L->schedule) d->lr = (float)dlt__lr_schedule_eval(L->schedule, d->base_lr, d->step);
    return DLT_OK;
}

dlt_status dlt__cpu_sgd_state(dlt_ctx *ctx, void *state, const dlt_optim_state_op *op) {
    (void)ctx;
    dlt__optim_state_apply((dlt_optim_dev *)state, op);
    return DLT_OK;
}
