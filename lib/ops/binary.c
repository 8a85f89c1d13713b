/*
 * binary.c - front doors of the broadcasting elementwise ops: add, sub, mul, div (PyTorch's
 * torch.add/sub/mul/div between tensors).
 *
 * Shapes broadcast as in NumPy (aligned at the last dimension, each size equal or 1); the
 * result dtype is PyTorch's promotion (dlt__promote): two floats give the wider (f32 with
 * anything is f32, f16 with bf16 is f32), so the residual stream x (f32) + branch (bf16)
 * stays f32; a float with an integer gives the float; two integers the wider integer,
 * computed exactly (wrapping like PyTorch's int64); div of integers is true division into
 * f32. Inputs of one shape and one memory format are combined in that format; otherwise
 * channels-last inputs are made contiguous first and the result is contiguous.
 *
 * Gradients (y = a op b, u the upstream gradient, each summed back over the dimensions that
 * broadcasting added to an input, in that input's dtype):
 *   add: da = u, db = alpha u        mul: da = alpha u b, db = alpha u a
 *   div: da = alpha u / b, db = -u y / b
 */
#include <string.h>

#include "ops_internal.h"

typedef struct binary_attr {
    int32_t op;
    int32_t ndim[2];
    int32_t dtype[2];
    int32_t pad_;
    double alpha;
    int64_t shape[2][DLT_MAX_DIMS];
} binary_attr;

/* The gradient of input i from its full-shape contribution g (owned): summed to the input's
 * shape, in its dtype. */
static dlt_status deliver(dlt_ctx *ctx, const binary_attr *at, int i, dlt_tensor *g, dlt_grad_slot *slot) {
    dlt_tensor *r = NULL;
    dlt_status st = dlt__k_sum_to(ctx, g, at->shape[i], at->ndim[i], at->dtype[i], "dlt_backward(binary)", &r);
    dlt_tensor_release(g);
    if (st != DLT_OK) return st;
    return dlt__grad_slot_store(ctx, slot, r);
}

static dlt_status binary_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(binary)";
    dlt_ctx *ctx = n->ctx;
    const binary_attr *at = DLT_NODE_ATTR(n, binary_attr);
    dlt_tensor *u = gout[0], *g = NULL;
    const int32_t dt = u->dtype;
    switch (at->op) {
    case DLT_BIN_ADD:
        if (gin[0].needed) DLT_CHECK(deliver(ctx, at, 0, dlt_tensor_retain(u), &gin[0]));
        if (gin[1].needed) {
            if (at->alpha == 1.0) {
                g = dlt_tensor_retain(u);
            } else if (at->alpha == -1.0) {
                DLT_CHECK(dlt__k_unary(ctx, u, DLT_UN_NEG, 0.0, F, &g));
            } else {
                DLT_CHECK(dlt__tensor_new_like(u, dt, F, &g));
                dlt_status st = u->numel ? ctx->be->scale(ctx, g, u, NULL, at->alpha) : DLT_OK;
                if (st != DLT_OK) {
                    dlt_tensor_release(g);
                    return st;
                }
            }
            DLT_CHECK(deliver(ctx, at, 1, g, &gin[1]));
        }
        return DLT_OK;
    case DLT_BIN_MUL: {
        dlt_tensor *a = n->saved[0], *b = n->saved[1];
        if (gin[0].needed) {
            DLT_CHECK(dlt__k_binary(ctx, dt, u, b, DLT_BIN_MUL, at->alpha, F, &g));
            DLT_CHECK(deliver(ctx, at, 0, g, &gin[0]));
        }
        if (gin[1].needed) {
            DLT_CHECK(dlt__k_binary(ctx, dt, u, a, DLT_BIN_MUL, at->alpha, F, &g));
            DLT_CHECK(deliver(ctx, at, 1, g, &gin[1]));
        }
        return DLT_OK;
    }
    case DLT_BIN_DIV: {
        dlt_tensor *b = n->saved[0], *y = n->saved[1];
        if (gin[0].needed) {
            DLT_CHECK(dlt__k_binary(ctx, dt, u, b, DLT_BIN_DIV, at->alpha, F, &g));
            DLT_CHECK(deliver(ctx, at, 0, g, &gin[0]));
        }
        if (gin[1].needed) {
            dlt_tensor *uy = NULL;
            DLT_CHECK(dlt__k_binary(ctx, dt, u, y, DLT_BIN_MUL, -1.0, F, &uy));
            dlt_status st = dlt__k_binary(ctx, dt, uy, b, DLT_BIN_DIV, 1.0, F, &g);
            dlt_tensor_release(uy);
            DLT_CHECK(st);
            DLT_CHECK(deliver(ctx, at, 1, g, &gin[1]));
        }
        return DLT_OK;
    }
    default:
        return dlt__err(DLT_ERR_INTERNAL, F, "unknown binary op %d", at->op);
    }
}

static dlt_status binary_op(dlt_tensor *a, dlt_tensor *b, int32_t op, double alpha, const char *F,
                            const char *name, dlt_tensor **out) {
    DLT_CHECK(dlt__check_tensor(a, F, "a"));
    DLT_CHECK(dlt__check_tensor(b, F, "b"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_same_ctx(a, b, F, "a", "b"));
    dlt_ctx *ctx = a->ctx;
    DLT_NEED_KERNEL(ctx, binary, F);
    int64_t shape[DLT_MAX_DIMS];
    int32_t nd;
    DLT_CHECK(dlt__broadcast_shape(a, b, F, shape, &nd));
    int32_t dtype = dlt__promote(a->dtype, b->dtype);
    if (op == DLT_BIN_DIV && !dlt__is_float(dtype)) dtype = DLT_F32; /* true division */
    const int same = dlt__same_shape(a, b) && a->format == b->format;
    dlt_tensor *ac = NULL, *bc = NULL, *y = NULL;
    dlt_node *node = NULL;
    dlt_status st = DLT_OK;
    if (same) {
        ac = dlt_tensor_retain(a);
        bc = dlt_tensor_retain(b);
    } else {
        DLT_CHECK_GOTO(st, dlt__contiguous_input(a, F, &ac), done);
        DLT_CHECK_GOTO(st, dlt__contiguous_input(b, F, &bc), done);
    }
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, dtype, shape, nd, same ? a->format : DLT_FORMAT_CONTIGUOUS, F, &y),
                   done);
    if (y->numel) {
        if (same && op == DLT_BIN_ADD && alpha == 1.0 && a->dtype == b->dtype && dlt__is_float(a->dtype)) {
            st = ctx->be->add(ctx, y, ac, bc); /* the kernel the ResNet path always used */
        } else {
            dlt_nd s;
            dlt_nd_operand o[2];
            if (same) { /* one layout: flat */
                const int64_t n1 = y->numel;
                dlt__nd_init(&s, &n1, 1);
                memset(o, 0, sizeof o);
                o[0].stride[0] = o[1].stride[0] = 1;
            } else {
                dlt__nd_init(&s, shape, nd);
                dlt__nd_broadcast_operand(ac, shape, nd, &o[0]);
                dlt__nd_broadcast_operand(bc, shape, nd, &o[1]);
            }
            dlt__nd_collapse(&s, o, 2);
            st = ctx->be->binary(ctx, y, ac, &o[0], bc, &o[1], &s, op, alpha);
        }
        if (st != DLT_OK) goto done;
    }
    {
        dlt_tensor *in[2] = {ac, bc};
        DLT_CHECK_GOTO(st, dlt__record(ctx, name, binary_backward, in, 2, &y, 1, &node), done);
    }
    if (node) {
        binary_attr at = {.op = op, .alpha = alpha};
        const dlt_tensor *t2[2] = {ac, bc};
        for (int i = 0; i < 2; i++) {
            at.ndim[i] = t2[i]->ndim;
            at.dtype[i] = t2[i]->dtype;
            for (int32_t d = 0; d < t2[i]->ndim; d++) at.shape[i][d] = t2[i]->shape[d];
        }
        DLT_SET_ATTR(node, binary_attr, at);
        if (op == DLT_BIN_MUL) {
            dlt__save(node, ac);
            dlt__save(node, bc);
        } else if (op == DLT_BIN_DIV) {
            dlt_tensor *alias = NULL;
            DLT_CHECK_GOTO(st, dlt__alias(y, F, &alias), done);
            dlt__save(node, bc);
            dlt__save(node, alias);
            dlt_tensor_release(alias);
        }
    }
done:
    dlt_tensor_release(ac);
    dlt_tensor_release(bc);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt_add(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out) {
    return binary_op(a, b, DLT_BIN_ADD, 1.0, "dlt_add", "add", out);
}
dlt_status dlt_sub(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out) {
    return binary_op(a, b, DLT_BIN_ADD, -1.0, "dlt_sub", "sub", out);
}
dlt_status dlt_mul(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out) {
    return binary_op(a, b, DLT_BIN_MUL, 1.0, "dlt_mul", "mul", out);
}
dlt_status dlt_div(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out) {
    return binary_op(a, b, DLT_BIN_DIV, 1.0, "dlt_div", "div", out);
}
