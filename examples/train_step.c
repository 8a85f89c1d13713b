/*
 * train_step.c - the seed's training step (train_step.h): its PyTorch lines
 *   opt.zero_grad(); with autocast(fp16): loss = cross_entropy(model(x), y)
 *   scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
 */
#include "train_step.h"

#define CK(call)                                                                              \
    do {                                                                                      \
        dlt_status s_ = (call);                                                               \
        if (s_ != DLT_OK) return s_;                                                          \
    } while (0)

dlt_status train_micro_batch(train_step *s, int no_sync, int32_t *has_batch, int64_t *rows, dlt_tensor **loss) {
    dlt_tensor *x = NULL, *y = NULL, *logits = NULL, *l = NULL, *scaled = NULL;
    *loss = NULL;
    CK(dlt_loader_next(s->loader, &x, &y, has_batch));
    if (!*has_batch) return DLT_OK;
    *rows = dlt_tensor_dim(x, 0);
    if (s->amp >= 0) CK(dlt_autocast_begin(s->ctx, s->amp));
    dlt_status st = s->ddp ? dlt_ddp_forward(s->ddp, x, &logits) : dlt_module_forward(s->model, x, &logits);
    if (st == DLT_OK) st = dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &l);
    if (st == DLT_OK && s->accum > 1) {
        dlt_tensor *div = NULL;
        st = dlt_mul_scalar(l, NULL, 1.0 / (double)s->accum, &div);
        dlt_tensor_release(l);
        l = div;
    }
    const dlt_status st2 = s->amp >= 0 ? dlt_autocast_end(s->ctx) : DLT_OK;
    if (st == DLT_OK) st = st2;
    dlt_tensor_release(logits);
    if (st == DLT_OK) st = dlt_grad_scaler_scale(s->scaler, l, &scaled);
    if (st == DLT_OK && s->ddp) st = dlt_ddp_no_sync(s->ddp, no_sync);
    if (st == DLT_OK) st = dlt_backward(scaled, NULL);
    dlt_tensor_release(scaled);
    if (st != DLT_OK) {
        dlt_tensor_release(l);
        return st;
    }
    *loss = l;
    return DLT_OK;
}

dlt_status train_step_run(void *user) {
    train_step *s = user;
    if (s->accum == 1) CK(dlt_optimizer_zero_grad(s->opt, 1));
    for (int64_t m = 0; m < s->accum; m++) {
        int32_t has = 0;
        int64_t rows = 0;
        dlt_tensor *loss = NULL;
        CK(train_micro_batch(s, s->accum > 1 && m != s->accum - 1, &has, &rows, &loss));
        if (!has) return DLT_ERR_INVALID_STATE; /* the caller counted the batches wrong */
        const dlt_status st = m == s->accum - 1 ? dlt_tensor_copy(s->loss_out, loss) : DLT_OK;
        dlt_tensor_release(loss);
        CK(st);
    }
    CK(dlt_grad_scaler_step(s->scaler, s->opt));
    CK(dlt_grad_scaler_update(s->scaler));
    if (s->accum > 1) CK(dlt_optimizer_zero_grad(s->opt, 1));
    return DLT_OK;
}
