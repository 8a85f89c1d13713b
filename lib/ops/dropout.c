/*
 * dropout.c - front door of dropout (PyTorch's F.dropout(x, p, training)).
 *
 * In training, element i is kept when the Philox uniform of (context seed, offset, i) is
 * >= p and then scaled by 1/(1-p); the rest are zeroed. The generator offset is reserved
 * from the context (so consecutive calls differ and a seed replays a run), and the
 * numbers are the same on the CPU and on CUDA for the same seed. The mask is never stored:
 * the backward draws it again (dx = u * keep / (1-p)), which costs less than reading a
 * saved mask. In a captured graph the offsets are taken relative to the context's device
 * word rng_base, which each replay advances, so replays draw fresh masks.
 * p = 0 or training = 0 returns x itself (a new reference, no kernel); p = 1 returns zeros.
 */
#include "../kernel/philox.h"
#include "ops_internal.h"

typedef struct dropout_attr {
    double p;
    uint64_t seed, offset;
} dropout_attr;

static dlt_status dropout_backward(dlt_node *nd, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    dlt_ctx *ctx = nd->ctx;
    const dropout_attr *at = DLT_NODE_ATTR(nd, dropout_attr);
    dlt_tensor *u = gout[0], *dx = NULL;
    DLT_CHECK(dlt__tensor_new_like(u, u->dtype, "dlt_backward(dropout)", &dx));
    dlt_status st = dx->numel ? ctx->be->dropout(ctx, dx, u, at->p, at->seed, at->offset) : DLT_OK;
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

dlt_status dlt_dropout(dlt_tensor *x, double p, int32_t training, dlt_tensor **out) {
    static const char *F = "dlt_dropout";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_float(x, F, "x"));
    if (!(p >= 0.0 && p <= 1.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "dropout probability %g is not in [0, 1]", p);
    if (!training || p == 0.0) {
        *out = dlt_tensor_retain(x);
        return DLT_OK;
    }
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, dropout, F);
    DLT_CHECK(dlt__rng_base_ready(ctx, F));
    dlt_tensor *y = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    DLT_CHECK(dlt__tensor_new_like(x, x->dtype, F, &y));
    dropout_attr at = {.p = p, .seed = ctx->seed, .offset = dlt__rng_reserve_based(ctx, dlt__philox_blocks((uint64_t)x->numel))};
    if (y->numel) DLT_CHECK_GOTO(st, ctx->be->dropout(ctx, y, x, p, at.seed, at.offset), done);
    DLT_CHECK_GOTO(st, dlt__record(ctx, "dropout", dropout_backward, &x, 1, &y, 1, &node), done);
    DLT_SET_ATTR(node, dropout_attr, at);
    st = DLT_OK;
done:
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}
