/*
 * losses.c - mse_loss and binary_cross_entropy_with_logits (PyTorch's F.mse_loss and
 * F.binary_cross_entropy_with_logits), composed of the recorded elementwise ops, so their
 * gradients and every backend come from those ops.
 *
 * Both are on autocast's fp32 list: in an autocast region low-precision inputs are cast up
 * first and the loss is f32. Shapes broadcast (PyTorch warns and broadcasts too).
 *   mse:  l = (x - y)^2
 *   bce:  l = (1 - y) x + w_pos (log(1 + exp(-|x|)) + max(-x, 0)),  w_pos = 1 + (pos_weight - 1) y
 *         (PyTorch's stable form; pos_weight NULL: w_pos = 1), times weight when given
 * reduction: DLT_REDUCTION_MEAN (mean over all elements), _SUM, _NONE (the elementwise l).
 */
#include "ops_internal.h"

/* Releases the tensors of a composite as it goes. */
#define REL(t)                                                                                \
    do {                                                                                      \
        dlt_tensor_release(t);                                                                \
        (t) = NULL;                                                                           \
    } while (0)

static dlt_status reduce_loss(dlt_tensor *l, int32_t reduction, dlt_tensor **out) {
    if (reduction == DLT_REDUCTION_NONE) {
        *out = dlt_tensor_retain(l);
        return DLT_OK;
    }
    return reduction == DLT_REDUCTION_MEAN ? dlt_mean(l, out) : dlt_sum(l, out);
}

static dlt_status check_reduction(int32_t reduction, const char *F) {
    if (reduction != DLT_REDUCTION_MEAN && reduction != DLT_REDUCTION_SUM && reduction != DLT_REDUCTION_NONE)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "reduction %d is not DLT_REDUCTION_MEAN, _SUM or _NONE",
                        reduction);
    return DLT_OK;
}

dlt_status dlt_mse_loss(dlt_tensor *input, dlt_tensor *target, int32_t reduction, dlt_tensor **out) {
    static const char *F = "dlt_mse_loss";
    DLT_CHECK(dlt__check_tensor(input, F, "input"));
    DLT_CHECK(dlt__check_tensor(target, F, "target"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_same_ctx(input, target, F, "input", "target"));
    DLT_CHECK(dlt__check_float(input, F, "input"));
    DLT_CHECK(dlt__check_float(target, F, "target"));
    DLT_CHECK(check_reduction(reduction, F));
    int64_t shape[DLT_MAX_DIMS];
    int32_t nd;
    DLT_CHECK(dlt__broadcast_shape(input, target, F, shape, &nd));
    dlt_tensor *x = NULL, *y = NULL, *d = NULL, *sq = NULL;
    dlt_status st;
    DLT_CHECK_GOTO(st, dlt__autocast_fp32(input, F, &x), done);
    DLT_CHECK_GOTO(st, dlt__autocast_fp32(target, F, &y), done);
    DLT_CHECK_GOTO(st, dlt_sub(x, y, &d), done);
    DLT_CHECK_GOTO(st, dlt_mul(d, d, &sq), done);
    st = reduce_loss(sq, reduction, out);
done:
    dlt_tensor_release(x);
    dlt_tensor_release(y);
    dlt_tensor_release(d);
    dlt_tensor_release(sq);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

dlt_status dlt_binary_cross_entropy_with_logits(dlt_tensor *input, dlt_tensor *target, dlt_tensor *weight,
                                                dlt_tensor *pos_weight, int32_t reduction, dlt_tensor **out) {
    static const char *F = "dlt_binary_cross_entropy_with_logits";
    DLT_CHECK(dlt__check_tensor(input, F, "input"));
    DLT_CHECK(dlt__check_tensor(target, F, "target"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_same_ctx(input, target, F, "input", "target"));
    DLT_CHECK(dlt__check_float(input, F, "input"));
    DLT_CHECK(dlt__check_float(target, F, "target"));
    DLT_CHECK(check_reduction(reduction, F));
    if (!dlt__same_shape(input, target)) {
        char a[96], b[96];
        return dlt__err(DLT_ERR_SHAPE, F, "target %s must have the shape of input %s",
                        dlt__shape_str(target, a, sizeof a), dlt__shape_str(input, b, sizeof b));
    }
    int64_t shape[DLT_MAX_DIMS];
    int32_t nd;
    if (weight) {
        DLT_CHECK(dlt__check_tensor(weight, F, "weight"));
        DLT_CHECK(dlt__check_same_ctx(input, weight, F, "input", "weight"));
        DLT_CHECK(dlt__check_float(weight, F, "weight"));
        DLT_CHECK(dlt__broadcast_shape(input, weight, F, shape, &nd));
    }
    if (pos_weight) {
        DLT_CHECK(dlt__check_tensor(pos_weight, F, "pos_weight"));
        DLT_CHECK(dlt__check_same_ctx(input, pos_weight, F, "input", "pos_weight"));
        DLT_CHECK(dlt__check_float(pos_weight, F, "pos_weight"));
        DLT_CHECK(dlt__broadcast_shape(input, pos_weight, F, shape, &nd));
    }
    dlt_tensor *x = NULL, *y = NULL, *yx = NULL, *lin = NULL, *nx = NULL, *sp = NULL, *lw = NULL, *t = NULL,
               *l = NULL, *lw2 = NULL;
    dlt_status st;
    DLT_CHECK_GOTO(st, dlt__autocast_fp32(input, F, &x), done);
    DLT_CHECK_GOTO(st, dlt__autocast_fp32(target, F, &y), done);
    DLT_CHECK_GOTO(st, dlt_mul(y, x, &yx), done);
    DLT_CHECK_GOTO(st, dlt_sub(x, yx, &lin), done); /* (1 - y) x */
    REL(yx);
    DLT_CHECK_GOTO(st, dlt_neg(x, &nx), done);
    DLT_CHECK_GOTO(st, dlt_softplus(nx, &sp), done); /* log(1 + exp(-x)), stable */
    REL(nx);
    if (pos_weight) {
        DLT_CHECK_GOTO(st, dlt__autocast_fp32(pos_weight, F, &t), done);
        DLT_CHECK_GOTO(st, dlt_add_scalar(t, -1.0, &lw2), done);
        REL(t);
        DLT_CHECK_GOTO(st, dlt_mul(lw2, y, &t), done);
        REL(lw2);
        DLT_CHECK_GOTO(st, dlt_add_scalar(t, 1.0, &lw), done);
        REL(t);
        DLT_CHECK_GOTO(st, dlt_mul(lw, sp, &t), done);
        REL(sp);
        sp = t;
        t = NULL;
    }
    DLT_CHECK_GOTO(st, dlt_add(lin, sp, &l), done);
    if (weight) {
        dlt_tensor *w = NULL;
        DLT_CHECK_GOTO(st, dlt__autocast_fp32(weight, F, &w), done);
        st = dlt_mul(l, w, &t);
        dlt_tensor_release(w);
        if (st != DLT_OK) goto done;
        REL(l);
        l = t;
        t = NULL;
    }
    st = reduce_loss(l, reduction, out);
done:
    dlt_tensor_release(x);
    dlt_tensor_release(y);
    dlt_tensor_release(yx);
    dlt_tensor_release(lin);
    dlt_tensor_release(nx);
    dlt_tensor_release(sp);
    dlt_tensor_release(lw);
    dlt_tensor_release(lw2);
    dlt_tensor_release(t);
    dlt_tensor_release(l);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}
