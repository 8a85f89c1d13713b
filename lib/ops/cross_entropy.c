/*
 * cross_entropy.c - front doors of F.cross_entropy(logits, targets, ignore_index,
 * reduction, label_smoothing) with integer class targets.
 *
 * logits [N, C], or [..., C] with targets [...] (classes along the LAST dimension: the
 * layout of a language model's [B, T, V] logits; PyTorch's own K-dimensional form puts
 * classes in dimension 1, which this library does not take). Per counted item (target !=
 * ignore_index), with lse the log-sum-exp of its logits:
 *   loss = (1 - ls) * (lse - x_target) + ls * (lse - mean_c x_c)
 * reduction mean divides the sum by the number of counted items (NaN when there are none,
 * as PyTorch), sum does not, none returns the per-item losses (ignored items 0) in targets'
 * shape. The log-softmax runs in fp32 whatever the logits' dtype and is never stored: this
 * is autocast's fp32 policy for cross_entropy without materialising fp32 logits or
 * probabilities. The loss is f32.
 * Backward: dlogits = (softmax - (1 - ls) onehot - ls / C) * g (g = dloss / count, dloss,
 * or the item's dloss), zero rows for ignored items; saved: logits, targets and the per-row
 * logsumexp with the count. Written over the logits when only the tape holds them.
 *
 * dlt__cross_entropy_padded (internal) is the same with only the first n_classes columns of
 * the logits taking part (a vocabulary padded for speed): the others get zero gradient.
 * With `consume` the caller gives the logits up (a GPT asked for its loss alone): where the
 * tape will want their gradient (mean or sum, bf16 or f32 logits made by an op) and the
 * backend has a one-pass kernel for them (ce_fwd_grad), the forward writes the gradient for
 * dloss = 1 over them while each row is still on chip (as llm.c's fused classifier), and the
 * backward only multiplies it by dloss, a pass it skips on the device when dloss is 1 (a
 * plain loss.backward()). That saves one read of the logits (1.65
 * GB for GPT-2 at 16 x 1024) when dloss is 1 and costs one write when it is not (a loss
 * divided for accumulation). Not fp16: the unscaled gradient would fall into fp16's
 * subnormals before the GradScaler's factor reached it.
 */
#include <math.h>

#include "ops_internal.h"

static dlt_status ce_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    dlt_ctx *ctx = n->ctx;
    const dlt_ce_params *p = DLT_NODE_ATTR(n, dlt_ce_params);
    dlt_tensor *logits = n->saved[0], *targets = n->saved[1], *saved = n->saved[2], *dx = NULL;
    if (p->grad_in_logits) { /* the forward wrote the gradient for dloss = 1 over the logits */
        dlt_status st = logits->numel ? ctx->be->ce_grad_scale(ctx, logits, gout[0]) : DLT_OK;
        return st == DLT_OK ? dlt__grad_slot_store(ctx, &gin[0], dlt_tensor_retain(logits)) : st;
    }
    /* Logits nobody else holds are dead once this node has run (the tape drops its saved
     * tensors then): the gradient overwrites them in place, as llm.c does, instead of a
     * second [N, V] buffer at the backward's peak (1.6 GB for GPT-2 at 16 x 1024 in bf16).
     * The kernels read each logit before writing its gradient, element by element. */
    if (logits->refcount == 1 && logits->storage->refcount == 1 && !logits->storage->external &&
        !logits->requires_grad && logits->grad_fn)
        dx = dlt_tensor_retain(logits);
    else
        DLT_CHECK(dlt__tensor_new_like(logits, logits->dtype, "dlt_backward(cross_entropy)", &dx));
    dlt_status st = dx->numel ? ctx->be->ce_bwd(ctx, dx, gout[0], logits, targets, saved, p) : DLT_OK;
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

static dlt_status ce_op(dlt_tensor *logits, dlt_tensor *targets, dlt_ce_params p, int consume, const char *F,
                        dlt_tensor **out) {
    DLT_CHECK(dlt__check_tensor(logits, F, "logits"));
    DLT_CHECK(dlt__check_tensor(targets, F, "targets"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_same_ctx(logits, targets, F, "logits", "targets"));
    DLT_CHECK(dlt__check_float(logits, F, "logits"));
    if (targets->dtype != DLT_I32 && targets->dtype != DLT_I64)
        return dlt__err(DLT_ERR_DTYPE, F, "targets must be i32 or i64 class indices, got %s",
                        dlt_dtype_name(targets->dtype));
    char a[96], b[96];
    int ok = logits->ndim >= 2 && targets->ndim == logits->ndim - 1;
    for (int32_t i = 0; ok && i < targets->ndim; i++) ok = targets->shape[i] == logits->shape[i];
    if (!ok)
        return dlt__err(DLT_ERR_SHAPE, F,
                        "targets %s must have the shape of logits %s without its last (class) dimension",
                        dlt__shape_str(targets, a, sizeof a), dlt__shape_str(logits, b, sizeof b));
    if (p.reduction != DLT_REDUCTION_MEAN && p.reduction != DLT_REDUCTION_SUM && p.reduction != DLT_REDUCTION_NONE)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "reduction %d is not DLT_REDUCTION_MEAN, _SUM or _NONE", p.reduction);
    if (!(p.label_smoothing >= 0.0 && p.label_smoothing <= 1.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "label_smoothing %g is not in [0, 1]", p.label_smoothing);
    const int64_t C = logits->shape[logits->ndim - 1];
    if (C < 1) return dlt__err(DLT_ERR_SHAPE, F, "logits need at least one class");
    if (p.n_classes <= 0) p.n_classes = C;
    if (p.n_classes > C)
        return dlt__err(DLT_ERR_SHAPE, F, "%lld classes but the logits have %lld columns",
                        (long long)p.n_classes, (long long)C);
    dlt_ctx *ctx = logits->ctx;
    DLT_NEED_KERNEL(ctx, ce_fwd, F);
    const int64_t N = targets->numel, ns = 2 * N + 1; /* lse, count, row losses */
    const int64_t rows[2] = {N, C}, flat = N;
    dlt_tensor *lc = NULL, *l2 = NULL, *t1 = NULL, *loss = NULL, *saved = NULL;
    dlt_node *node = NULL;
    dlt_status st = DLT_OK;
    dlt__range_push(ctx, "cross_entropy");
    /* the kernels read [N, C] rows and [N] targets: views of contiguous inputs */
    DLT_CHECK_GOTO(st, dlt__contiguous_input(logits, F, &lc), done);
    DLT_CHECK_GOTO(st, dlt_reshape(lc, rows, 2, &l2), done);
    DLT_CHECK_GOTO(st, dlt__tensor_view(targets, &flat, 1, DLT_FORMAT_CONTIGUOUS, F, &t1), done);
    if (p.reduction == DLT_REDUCTION_NONE)
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, targets->shape, targets->ndim, DLT_FORMAT_CONTIGUOUS, F, &loss),
                       done);
    else
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, NULL, 0, DLT_FORMAT_CONTIGUOUS, F, &loss), done);
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, &ns, 1, DLT_FORMAT_CONTIGUOUS, F, &saved), done);
    if (N == 0) {
        if (loss->numel)
            DLT_CHECK_GOTO(st, ctx->be->fill(ctx, loss, p.reduction == DLT_REDUCTION_MEAN ? (double)NAN : 0.0), done);
        DLT_CHECK_GOTO(st, ctx->be->fill(ctx, saved, 0.0), done);
    } else {
        dlt_tensor *in[2] = {l2, t1};
        /* the gradient in the forward: logits the caller gave up (lc is them, not a copy),
         * made by an op (not a leaf anyone holds), that the tape will differentiate, where
         * the backend has a one-pass kernel for them; else the plain forward and backward */
        int served = 0;
        if (consume && lc == logits && !logits->requires_grad && logits->grad_fn && !logits->storage->external &&
            p.reduction != DLT_REDUCTION_NONE && (logits->dtype == DLT_BF16 || logits->dtype == DLT_F32) &&
            ctx->be->ce_fwd_grad && ctx->be->ce_grad_scale && dlt__needs_grad(ctx, in, 2))
            DLT_CHECK_GOTO(st, ctx->be->ce_fwd_grad(ctx, loss, saved, l2, t1, &p, &served), done);
        p.grad_in_logits = served;
        if (served) ctx->served_ce_fwd_grad++;
        else DLT_CHECK_GOTO(st, ctx->be->ce_fwd(ctx, loss, saved, l2, t1, &p), done);
    }
    {
        dlt_tensor *in[2] = {l2, t1};
        DLT_CHECK_GOTO(st, dlt__record(ctx, "cross_entropy", ce_backward, in, 2, &loss, 1, &node), done);
    }
    if (node) {
        DLT_SET_ATTR(node, dlt_ce_params, p);
        dlt__save(node, l2);
        dlt__save(node, t1);
        dlt__save(node, saved);
    }
done:
    dlt__range_pop(ctx);
    dlt_tensor_release(lc);
    dlt_tensor_release(l2);
    dlt_tensor_release(t1);
    dlt_tensor_release(saved);
    if (st != DLT_OK) {
        dlt_tensor_release(loss);
        return dlt__err_wrap(st, F);
    }
    *out = loss;
    return DLT_OK;
}

dlt_status dlt_cross_entropy(dlt_tensor *logits, dlt_tensor *targets, int64_t ignore_index,
                             int32_t reduction, dlt_tensor **out) {
    const dlt_ce_params p = {.ignore_index = ignore_index, .reduction = reduction};
    return ce_op(logits, targets, p, 0, "dlt_cross_entropy", out);
}

dlt_status dlt_cross_entropy_ex(dlt_tensor *logits, dlt_tensor *targets, int64_t ignore_index,
                                int32_t reduction, double label_smoothing, dlt_tensor **out) {
    const dlt_ce_params p = {.ignore_index = ignore_index, .reduction = reduction,
                             .label_smoothing = label_smoothing};
    return ce_op(logits, targets, p, 0, "dlt_cross_entropy_ex", out);
}

dlt_status dlt__cross_entropy_padded(dlt_tensor *logits, dlt_tensor *targets, int64_t n_classes,
                                     int64_t ignore_index, int32_t reduction, double label_smoothing,
                                     int consume, const char *func, dlt_tensor **out) {
    const dlt_ce_params p = {.ignore_index = ignore_index, .reduction = reduction,
                             .label_smoothing = label_smoothing, .n_classes = n_classes};
    return ce_op(logits, targets, p, consume, func, out);
}
