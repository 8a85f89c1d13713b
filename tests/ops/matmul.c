/*
 * matmul.c - rows of matmul (torch.matmul's rules: 1-D operands, broadcast batches) and bmm,
 * referenced by a triple loop in float64 over the broadcast batch. ip[0]: 0 matmul, 1 bmm.
 */
#include "op_common.h"

static dlt_status fwd(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return c->ip[0] ? dlt_bmm(in[0], in[1], out) : dlt_matmul(in[0], in[1], out);
}

static void ref(const ot_case *c, double *const *in, double *out) {
    const ot_in *A = &c->in[0], *B = &c->in[1];
    /* matrices of a and b: [.., m, k] and [.., k, n], 1-D ones promoted */
    int64_t as[OT_MAX_DIMS + 1] = {0}, bs[OT_MAX_DIMS + 1] = {0};
    int32_t an = A->ndim, bn = B->ndim;
    for (int i = 0; i < an; i++) as[i] = A->shape[i];
    for (int i = 0; i < bn; i++) bs[i] = B->shape[i];
    if (an == 1) as[0] = 1, as[1] = A->shape[0], an = 2;
    if (bn == 1) bs[0] = B->shape[0], bs[1] = 1, bn = 2;
    const int64_t m = as[an - 2], k = as[an - 1], n = bs[bn - 1];
    const int32_t nb = (an > bn ? an : bn) - 2;
    int64_t bshape[OT_MAX_DIMS];
    int64_t batch = 1;
    for (int i = 0; i < nb; i++) {
        const int ia = an - 2 - nb + i, ib = bn - 2 - nb + i;
        const int64_t x = ia >= 0 ? as[ia] : 1, y = ib >= 0 ? bs[ib] : 1;
        bshape[i] = x == 1 ? y : x;
        batch *= bshape[i];
    }
    for (int64_t b = 0; b < batch; b++) {
        const int64_t ab = ot_bcast_index(bshape, nb, as, an - 2, b), bb = ot_bcast_index(bshape, nb, bs, bn - 2, b);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0.0;
                for (int64_t t = 0; t < k; t++) s += in[0][(ab * m + i) * k + t] * in[1][(bb * k + t) * n + j];
                out[(b * m + i) * n + j] = s;
            }
    }
}

#define X(nd, ...) {OT_X, nd, {__VA_ARGS__}, 0, 0, 0}
static const ot_case CASES[] = {
    {"2-D", fwd, ref, 2, {X(2, 3, 4), X(2, 4, 5)}, 2, {3, 5}, -1, {0}},
    {"batched", fwd, ref, 2, {X(3, 2, 3, 4), X(3, 2, 4, 5)}, 3, {2, 3, 5}, -1, {0}},
    {"one matrix times a batch", fwd, ref, 2, {X(2, 4, 5), X(3, 2, 5, 3)}, 3, {2, 4, 3}, -1, {0}},
    {"batch times one matrix", fwd, ref, 2, {X(3, 3, 2, 4), X(2, 4, 6)}, 3, {3, 2, 6}, -1, {0}},
    {"broadcast batches", fwd, ref, 2, {X(4, 2, 1, 3, 4), X(3, 3, 4, 2)}, 4, {2, 3, 3, 2}, -1, {0}},
    {"dot", fwd, ref, 2, {X(1, 7), X(1, 7)}, 0, {0}, -1, {0}},
    {"vector times matrix", fwd, ref, 2, {X(1, 4), X(2, 4, 3)}, 1, {3}, -1, {0}},
    {"batch times vector", fwd, ref, 2, {X(3, 2, 3, 4), X(1, 4)}, 2, {2, 3}, -1, {0}},
    {"bmm", fwd, ref, 2, {X(3, 3, 2, 4), X(3, 3, 4, 5)}, 3, {3, 2, 5}, -1, {1}},
    {"inner size 0", fwd, ref, 2, {X(2, 3, 0), X(2, 0, 2)}, 2, {3, 2}, -1, {0}},
    /* batches beyond 65535 (CUDA runs them in chunks), and one matrix repeated over them */
    {"bmm, 70000 batches", fwd, ref, 2, {X(3, 70000, 1, 2), X(3, 70000, 2, 3)}, 3, {70000, 1, 3}, -1, {1}},
    {"one matrix times 70000 batches", fwd, ref, 2, {X(2, 2, 3), X(3, 70000, 3, 1)}, 3, {70000, 2, 1}, -1, {0}},
};

static dlt_status e_inner(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[2] = {2, 3}, b[2] = {4, 2};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 2), *y = ot_zeros(ctx, DLT_F32, b, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_matmul(x, y, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x), dlt_tensor_release(y);
    return st;
}
static dlt_status e_batch(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[3] = {2, 3, 4}, b[3] = {3, 4, 2};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 3), *y = ot_zeros(ctx, DLT_F32, b, 3), *o = OT_SENTINEL;
    dlt_status st = dlt_matmul(x, y, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x), dlt_tensor_release(y);
    return st;
}
static dlt_status e_bmm_rank(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[2] = {3, 4}, b[3] = {1, 4, 2};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 2), *y = ot_zeros(ctx, DLT_F32, b, 3), *o = OT_SENTINEL;
    dlt_status st = dlt_bmm(x, y, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x), dlt_tensor_release(y);
    return st;
}
static dlt_status e_dtype(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[2] = {3, 4}, b[2] = {4, 2};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 2), *y = ot_zeros(ctx, DLT_F16, b, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_matmul(x, y, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x), dlt_tensor_release(y);
    return st;
}
static dlt_status e_scalar(dlt_ctx *ctx, int *out_touched) {
    const int64_t b[1] = {4};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, NULL, 0), *y = ot_zeros(ctx, DLT_F32, b, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_matmul(x, y, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x), dlt_tensor_release(y);
    return st;
}
static const ot_err ERRORS[] = {
    {"inner sizes 3 and 4", e_inner, DLT_ERR_SHAPE},
    {"batches 2 and 3", e_batch, DLT_ERR_SHAPE},
    {"bmm of a 2-D operand", e_bmm_rank, DLT_ERR_SHAPE},
    {"f32 with f16 outside autocast", e_dtype, DLT_ERR_DTYPE},
    {"0-D operand", e_scalar, DLT_ERR_SHAPE},
};

OT_STEM(matmul, CASES, ERRORS);
