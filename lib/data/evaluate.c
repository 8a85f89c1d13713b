/*
 * evaluate.c - top-1 accuracy of a model over one epoch of a loader.
 *
 * Runs the model in evaluation mode (BatchNorm on running statistics) with gradient
 * recording off, as PyTorch's model.eval() + torch.no_grad(); both settings are restored
 * afterwards, on failure too. Correct predictions are counted on the device by the
 * backend's count_correct into one int64 counter, and read once at the end, so the loop
 * enqueues work without waiting for the host.
 *
 * The pass restarts the loader's current epoch (epoch 0 if it never ran) and takes every
 * batch, with the loader's settings (shuffle, drop_last, augmentation: an evaluation loader
 * normally has neither). The loader is left at the end of that epoch.
 */
#include "data_internal.h"

dlt_status dlt_evaluate_accuracy(dlt_module *model, dlt_loader *ld, double *accuracy) {
    static const char *F = "dlt_evaluate_accuracy";
    DLT_NULL_CHECK(model, F);
    DLT_NULL_CHECK(ld, F);
    DLT_NULL_CHECK(accuracy, F);
    dlt_ctx *ctx = ld->ctx;
    /* checked first: the pass below changes the loader's position and the model's mode */
    dlt_ctx *model_ctx = dlt_module_ctx(model);
    if (model_ctx != ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F,
                        "the model and the loader belong to different contexts (%s and %s)",
                        model_ctx->be->name, ctx->be->name);
    if (!ld->ds->labels)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the loader's dataset has no labels to compare the predictions with");
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "reads the device: not allowed during capture");
    if (!ctx->be->count_correct) return dlt__be_missing(ctx, F, "count_correct");

    int64_t one = 1;
    dlt_tensor *correct = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, DLT_I64, &one, 1, DLT_FORMAT_CONTIGUOUS, F, &correct));
    dlt_status st = ctx->be->memset0(ctx, dlt__data(correct), sizeof(int64_t));
    if (st != DLT_OK) {
        dlt_tensor_release(correct);
        return dlt__err_wrap(st, F);
    }

    int32_t was_training = dlt_module_is_training(model);
    int32_t grad_was = 1;
    int32_t grad_set = 0, mode_set = 0;
    int64_t seen = 0;
    DLT_CHECK_GOTO(st, dlt_grad_set_enabled(ctx, 0, &grad_was), done);
    grad_set = 1;
    mode_set = 1; /* restored even if this fails half-way through the children */
    DLT_CHECK_GOTO(st, dlt_module_set_training(model, 0), done);
    DLT_CHECK_GOTO(st, dlt_loader_start_epoch(ld, ld->started ? ld->epoch : 0), done);
    for (;;) {
        dlt_tensor *x = NULL, *y = NULL, *logits = NULL;
        int32_t has = 0;
        DLT_CHECK_GOTO(st, dlt_loader_next(ld, &x, &y, &has), done);
        if (!has) break;
        DLT_CHECK_GOTO(st, dlt_module_forward(model, x, &logits), done);
        st = ctx->be->count_correct(ctx, dlt__data(correct), logits, y);
        dlt_tensor_release(logits);
        if (st != DLT_OK) goto done;
        seen += y->shape[0];
    }
    if (seen == 0) {
        st = dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the loader yields no samples");
        goto done;
    }
    int64_t hits = 0;
    DLT_CHECK_GOTO(st, ctx->be->memcpy_d2h(ctx, &hits, dlt__data(correct), sizeof hits), done);
    *accuracy = (double)hits / (double)seen;
done:
    /* restore in reverse order; a failure here is reported only if nothing failed before */
    if (mode_set) {
        dlt_status s2 = dlt_module_set_training(model, was_training);
        if (st == DLT_OK) st = s2;
    }
    if (grad_set) {
        dlt_status s2 = dlt_grad_set_enabled(ctx, grad_was, NULL);
        if (st == DLT_OK) st = s2;
    }
    dlt_tensor_release(correct);
    return st == DLT_OK ? DLT_OK : dlt__err_wrap(st, F);
}
