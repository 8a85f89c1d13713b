/*
 * cross_entropy.c - front door of F.cross_entropy(logits, targets, ignore_index, reduction)
 * with integer class targets. The log-softmax runs in fp32 whatever the logits' dtype
 * (autocast's fp32 policy for log_softmax/nll_loss); the loss is an f32 scalar.
 * mean: sum over non-ignored rows of -log_softmax(x)[y] divided by their count.
 * Backward: dlogits = (softmax - onehot) * dloss / count (mean) or * dloss (sum), zero for
 * ignored rows; saved: logits, targets and the per-row logsumexp with the count.
 */
#include <math.h>

#include "ops_internal.h"

static dlt_status ce_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    dlt_ctx *ctx = n->ctx;
    dlt_tensor *logits = n->saved[0], *targets = n->saved[1], *saved = n->saved[2], *dx = NULL;
    DLT_CHECK(dlt__tensor_new_like(logits, logits->dtype, "dlt_backward(cross_entropy)", &dx));
    dlt_status st = dx->numel ? ctx->be->ce_bwd(ctx, dx, gout[0], logits, targets, saved, n->ip[0],
                                                (int32_t)n->ip[1])
                              : DLT_OK;
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

dlt_status dlt_cross_entropy(dlt_tensor *logits, dlt_tensor *targets, int64_t ignore_index,
                             int32_t reduction, dlt_tensor **out) {
    static const char *F = "dlt_cross_entropy";
    DLT_CHECK(dlt__check_tensor(logits, F, "logits"));
    DLT_CHECK(dlt__check_tensor(targets, F, "targets"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_same_ctx(logits, targets, F, "logits", "targets"));
    DLT_CHECK(dlt__check_ndim(logits, 2, F, "logits"));
    DLT_CHECK(dlt__check_float(logits, F, "logits"));
    if (targets->dtype != DLT_I32 && targets->dtype != DLT_I64)
        return dlt__err(DLT_ERR_DTYPE, F, "targets must be i32 or i64 class indices, got %s",
                        dlt_dtype_name(targets->dtype));
    if (targets->ndim != 1 || targets->shape[0] != logits->shape[0]) {
        char a[96], b[96];
        return dlt__err(DLT_ERR_SHAPE, F, "targets %s must be [N] for logits %s",
                        dlt__shape_str(targets, a, sizeof a), dlt__shape_str(logits, b, sizeof b));
    }
    if (reduction != DLT_REDUCTION_MEAN && reduction != DLT_REDUCTION_SUM)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "reduction %d is not DLT_REDUCTION_MEAN or _SUM",
                        reduction);
    if (logits->shape[1] < 1)
        return dlt__err(DLT_ERR_SHAPE, F, "logits need at least one class");
    dlt_ctx *ctx = logits->ctx;
    DLT_NEED_KERNEL(ctx, ce_fwd, F);
    const int64_t ns = logits->shape[0] + 1;
    dlt_tensor *loss = NULL, *saved = NULL;
    dlt_node *node = NULL;
    dlt_status st = DLT_OK;
    dlt__range_push(ctx, "cross_entropy");
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, NULL, 0, DLT_FORMAT_CONTIGUOUS, F, &loss), done);
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, &ns, 1, DLT_FORMAT_CONTIGUOUS, F, &saved), done);
    if (logits->shape[0] == 0) {
        DLT_CHECK_GOTO(st, ctx->be->fill(ctx, loss, reduction == DLT_REDUCTION_MEAN ? (double)NAN : 0.0), done);
        DLT_CHECK_GOTO(st, ctx->be->fill(ctx, saved, 0.0), done);
    } else {
        DLT_CHECK_GOTO(st, ctx->be->ce_fwd(ctx, loss, saved, logits, targets, ignore_index, reduction), done);
    }
    {
        dlt_tensor *in[2] = {logits, targets};
        DLT_CHECK_GOTO(st, dlt__record(ctx, "cross_entropy", ce_backward, in, 2, &loss, 1, &node), done);
    }
    if (node) {
        dlt__save(node, logits);
        dlt__save(node, targets);
        dlt__save(node, saved);
        node->ip[0] = ignore_index;
        node->ip[1] = reduction;
    }
done:
    dlt__range_pop(ctx);
    dlt_tensor_release(saved);
    if (st != DLT_OK) {
        dlt_tensor_release(loss);
        return dlt__err_wrap(st, F);
    }
    *out = loss;
    return DLT_OK;
}
