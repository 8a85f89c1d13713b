/*
 * pointwise.c - front doors of the unary elementwise ops: neg, exp, log, sqrt, rsqrt, abs,
 * pow by a scalar, add a scalar, and the activations gelu (erf and tanh forms), silu,
 * sigmoid, tanh, softplus, leaky_relu. The result has the input's shape, dtype and memory format.
 *
 * Autocast (PyTorch's CUDA policy, applied on every device): exp, log, rsqrt, pow and
 * softplus are on the fp32 list (a low-precision input is cast up and the result is f32);
 * the others run in the input's dtype. Integer inputs: neg, abs and adding a whole number
 * are exact in the input's dtype; everything else runs on an f32 copy (PyTorch promotes
 * integers to its default float dtype).
 *
 * Gradients dx = u * f'(x), with f' from x or from the saved output (lib/kernel/unary.h):
 *   neg -1; exp y; log 1/x; sqrt 1/(2y); rsqrt -y^3/2; abs sign(x) (0 at 0, as PyTorch);
 *   pow a x^(a-1) (0 where a == 0); gelu Phi(x) + x phi(x); gelu_tanh from PyTorch's
 *   formula; silu s(1 + x(1-s)); sigmoid y(1-y); tanh 1-y^2; softplus sigmoid(x);
 *   leaky_relu 1 where x > 0, else the slope (at 0 too, as PyTorch).
 */
#include <math.h>

#include "ops_internal.h"

typedef struct unary_attr {
    int32_t op;
    int32_t pad_;
    double alpha;
} unary_attr;

/* Which of x (bit 0) and y (bit 1) the backward reads. */
static int backward_needs(int32_t op) {
    switch (op) {
    case DLT_UN_NEG:
    case DLT_UN_ADD_SCALAR: return 0;
    case DLT_UN_EXP:
    case DLT_UN_SQRT:
    case DLT_UN_RSQRT:
    case DLT_UN_SIGMOID:
    case DLT_UN_TANH: return 2;
    default: return 1;
    }
}

static int fp32_list(int32_t op) {
    return op == DLT_UN_EXP || op == DLT_UN_LOG || op == DLT_UN_RSQRT || op == DLT_UN_POW ||
           op == DLT_UN_SOFTPLUS;
}

static dlt_status unary_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(unary)";
    dlt_ctx *ctx = n->ctx;
    const unary_attr *at = DLT_NODE_ATTR(n, unary_attr);
    dlt_tensor *u = gout[0], *dx = NULL;
    if (at->op == DLT_UN_ADD_SCALAR) return dlt__grad_slot_store(ctx, &gin[0], dlt_tensor_retain(u));
    const int need = backward_needs(at->op);
    const dlt_tensor *x = (need & 1) ? n->saved[0] : NULL;
    const dlt_tensor *y = (need & 2) ? n->saved[need & 1 ? 1 : 0] : NULL;
    DLT_CHECK(dlt__tensor_new_like(u, u->dtype, F, &dx));
    dlt_status st = dx->numel ? ctx->be->unary_bwd(ctx, dx, u, x, y, at->op, at->alpha) : DLT_OK;
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

static dlt_status unary_op(dlt_tensor *x, int32_t op, double alpha, const char *F, const char *name,
                           dlt_tensor **out) {
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, unary, F);
    dlt_tensor *xc = NULL, *y = NULL, *alias = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    if (!dlt__is_float(x->dtype)) {
        /* integers: neg, abs and adding a whole number stay exact in their dtype; the rest
         * (and adding a fraction) run on an f32 copy, as PyTorch promotes to its default
         * float dtype */
        const int exact = op == DLT_UN_NEG || op == DLT_UN_ABS || (op == DLT_UN_ADD_SCALAR && alpha == (double)(int64_t)alpha &&
                                                                 fabs(alpha) < 9.2e18);
        if (exact) {
            DLT_CHECK(dlt__tensor_new_like(x, x->dtype, F, &y));
            st = y->numel ? ctx->be->unary(ctx, y, x, op, alpha) : DLT_OK;
            if (st != DLT_OK) {
                dlt_tensor_release(y);
                return dlt__err_wrap(st, F);
            }
            *out = y;
            return DLT_OK;
        }
        DLT_CHECK(dlt__op_cast(x, DLT_F32, F, &xc));
    } else if (fp32_list(op)) {
        DLT_CHECK(dlt__autocast_fp32(x, F, &xc));
    } else {
        xc = dlt_tensor_retain(x);
    }
    DLT_CHECK_GOTO(st, dlt__tensor_new_like(xc, xc->dtype, F, &y), done);
    if (y->numel) DLT_CHECK_GOTO(st, ctx->be->unary(ctx, y, xc, op, alpha), done);
    DLT_CHECK_GOTO(st, dlt__record(ctx, name, unary_backward, &xc, 1, &y, 1, &node), done);
    if (node) {
        unary_attr at = {.op = op, .alpha = alpha};
        DLT_SET_ATTR(node, unary_attr, at);
        const int need = backward_needs(op);
        if (need & 1) dlt__save(node, xc);
        if (need & 2) {
            DLT_CHECK_GOTO(st, dlt__alias(y, F, &alias), done);
            dlt__save(node, alias);
        }
    }
done:
    dlt_tensor_release(xc);
    dlt_tensor_release(alias);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt_neg(dlt_tensor *x, dlt_tensor **out) { return unary_op(x, DLT_UN_NEG, 0.0, "dlt_neg", "neg", out); }
dlt_status dlt_exp(dlt_tensor *x, dlt_tensor **out) { return unary_op(x, DLT_UN_EXP, 0.0, "dlt_exp", "exp", out); }
dlt_status dlt_log(dlt_tensor *x, dlt_tensor **out) { return unary_op(x, DLT_UN_LOG, 0.0, "dlt_log", "log", out); }
dlt_status dlt_sqrt(dlt_tensor *x, dlt_tensor **out) { return unary_op(x, DLT_UN_SQRT, 0.0, "dlt_sqrt", "sqrt", out); }
dlt_status dlt_rsqrt(dlt_tensor *x, dlt_tensor **out) { return unary_op(x, DLT_UN_RSQRT, 0.0, "dlt_rsqrt", "rsqrt", out); }
dlt_status dlt_abs(dlt_tensor *x, dlt_tensor **out) { return unary_op(x, DLT_UN_ABS, 0.0, "dlt_abs", "abs", out); }
dlt_status dlt_pow_scalar(dlt_tensor *x, double exponent, dlt_tensor **out) {
    return unary_op(x, DLT_UN_POW, exponent, "dlt_pow_scalar", "pow", out);
}
dlt_status dlt_add_scalar(dlt_tensor *x, double value, dlt_tensor **out) {
    return unary_op(x, DLT_UN_ADD_SCALAR, value, "dlt_add_scalar", "add_scalar", out);
}
dlt_status dlt_gelu(dlt_tensor *x, int32_t approximate, dlt_tensor **out) {
    static const char *F = "dlt_gelu";
    if (approximate != DLT_GELU_NONE && approximate != DLT_GELU_TANH)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "approximate must be DLT_GELU_NONE (0) or DLT_GELU_TANH (1), got %d", approximate);
    return unary_op(x, approximate == DLT_GELU_TANH ? DLT_UN_GELU_TANH : DLT_UN_GELU, 0.0, F, "gelu", out);
}
dlt_status dlt_silu(dlt_tensor *x, dlt_tensor **out) { return unary_op(x, DLT_UN_SILU, 0.0, "dlt_silu", "silu", out); }
dlt_status dlt_sigmoid(dlt_tensor *x, dlt_tensor **out) {
    return unary_op(x, DLT_UN_SIGMOID, 0.0, "dlt_sigmoid", "sigmoid", out);
}
dlt_status dlt_tanh(dlt_tensor *x, dlt_tensor **out) { return unary_op(x, DLT_UN_TANH, 0.0, "dlt_tanh", "tanh", out); }
dlt_status dlt_softplus(dlt_tensor *x, dlt_tensor **out) {
    return unary_op(x, DLT_UN_SOFTPLUS, 0.0, "dlt_softplus", "softplus", out);
}
dlt_status dlt_leaky_relu(dlt_tensor *x, double negative_slope, dlt_tensor **out) {
    return unary_op(x, DLT_UN_LEAKY_RELU, negative_slope, "dlt_leaky_relu", "leaky_relu", out);
}
