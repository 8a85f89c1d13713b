/*
 * binary.c - rows of the broadcasting binary ops (add, sub, mul, div): float64 loops over
 * the broadcast index space. ip[0]: 0 add, 1 sub, 2 mul, 3 div.
 */
#include "op_common.h"

static dlt_status fwd(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    switch (c->ip[0]) {
    case 0: return dlt_add(in[0], in[1], out);
    case 1: return dlt_sub(in[0], in[1], out);
    case 2: return dlt_mul(in[0], in[1], out);
    default: return dlt_div(in[0], in[1], out);
    }
}

static void ref(const ot_case *c, double *const *in, double *out) {
    const int64_t n = ot_out_numel(c);
    for (int64_t i = 0; i < n; i++) {
        const double a = in[0][ot_bcast_index(c->out_shape, c->out_ndim, c->in[0].shape, c->in[0].ndim, i)];
        const double b = in[1][ot_bcast_index(c->out_shape, c->out_ndim, c->in[1].shape, c->in[1].ndim, i)];
        out[i] = c->ip[0] == 0 ? a + b : c->ip[0] == 1 ? a - b : c->ip[0] == 2 ? a * b : a / b;
    }
}

#define X(nd, ...) {OT_X, nd, {__VA_ARGS__}, 0, 0, 0}
#define XR(lo, hi, nd, ...) {OT_X, nd, {__VA_ARGS__}, lo, hi, 0}
static const ot_case CASES[] = {
    {"add same shape", fwd, ref, 2, {X(2, 3, 4), X(2, 3, 4)}, 2, {3, 4}, -1, {0}},
    {"add row broadcast", fwd, ref, 2, {X(3, 2, 3, 4), X(1, 4)}, 3, {2, 3, 4}, -1, {0}},
    {"add both broadcast", fwd, ref, 2, {X(3, 2, 1, 4), X(2, 3, 1)}, 3, {2, 3, 4}, -1, {0}},
    {"add scalar tensor", fwd, ref, 2, {X(2, 5, 2), X(0, 0)}, 2, {5, 2}, -1, {0}},
    {"sub leading broadcast", fwd, ref, 2, {X(1, 5), X(2, 2, 5)}, 2, {2, 5}, -1, {1}},
    {"mul same shape", fwd, ref, 2, {X(2, 3, 7), X(2, 3, 7)}, 2, {3, 7}, -1, {2}},
    {"mul outer", fwd, ref, 2, {X(3, 4, 1, 3), X(3, 1, 5, 1)}, 3, {4, 5, 3}, -1, {2}},
    {"div column", fwd, ref, 2, {X(2, 3, 4), XR(0.5, 2.0, 2, 3, 1)}, 2, {3, 4}, -1, {3}},
    {"div same shape", fwd, ref, 2, {X(1, 9), XR(-2.0, -0.5, 1, 9)}, 1, {9}, -1, {3}},
    {"add f32 + param promotes", fwd, ref, 2, {X(2, 2, 6), {OT_P, 1, {6}, 0, 0, 0}}, 2, {2, 6}, DLT_F32, {0}},
    /* same shape, mixed dtypes in f16/bf16 (the residual add f32 + branch): CUDA's flat
     * kernel with a tail after its packs (111 elements) */
    {"add f32 param + x same shape", fwd, ref, 2, {{OT_P, 2, {3, 37}, 0, 0, 0}, X(2, 3, 37)}, 2, {3, 37}, DLT_F32, {0}},
    {"div x / f32 param same shape", fwd, ref, 2, {X(1, 45), {OT_P, 1, {45}, 0.5, 2.0, 0}}, 1, {45}, DLT_F32, {3}},
    {"mul empty", fwd, ref, 2, {X(2, 0, 3), X(1, 3)}, 2, {0, 3}, -1, {2}},
    /* one operand the trailing dimensions of the other (the GPT's tok_emb + pos_emb):
     * CUDA's row-broadcast kernel, in 16-byte packs where the row is whole packs (24
     * elements: every dtype), one element per thread where not (6, 35, 5), with the small
     * operand on either side of the non-commutative sub and div */
    {"add [2,3,8] + [3,8] rows", fwd, ref, 2, {X(3, 2, 3, 8), X(2, 3, 8)}, 3, {2, 3, 8}, -1, {0}},
    {"add [2,5,6] + [6] rows, odd", fwd, ref, 2, {X(3, 2, 5, 6), X(1, 6)}, 3, {2, 5, 6}, -1, {0}},
    {"sub [3,8] - [4,3,8] rows on the left", fwd, ref, 2, {X(2, 3, 8), X(3, 4, 3, 8)}, 3, {4, 3, 8}, -1, {1}},
    {"mul [2,7,5] * [7,5] rows, odd", fwd, ref, 2, {X(3, 2, 7, 5), X(2, 7, 5)}, 3, {2, 7, 5}, -1, {2}},
    {"div [4,3,8] / [3,8] rows", fwd, ref, 2, {X(3, 4, 3, 8), XR(0.5, 2.0, 2, 3, 8)}, 3, {4, 3, 8}, -1, {3}},
    {"div [5] / [3,5] rows on the left, odd", fwd, ref, 2, {X(1, 5), XR(0.5, 2.0, 2, 3, 5)}, 2, {3, 5}, -1, {3}},
    /* mixed dtypes in f16/bf16 (x + an f32 parameter row -> f32): packs of 4 */
    {"add x [3,2,8] + f32 param [2,8] rows", fwd, ref, 2, {X(3, 3, 2, 8), {OT_P, 2, {2, 8}, 0, 0, 0}}, 3, {3, 2, 8},
     DLT_F32, {0}},
    /* integer operands (no gradient; the case dtype does not apply): CUDA's exact int64
     * kernel with mixed widths, and int -> float loads in the float kernel */
    {"add i64 + i32 broadcast, exact", fwd, ref, 2, {{OT_I64, 2, {3, 4}, -1000, 1000, 0}, {OT_I32, 1, {4}, -1000, 1000, 0}},
     2, {3, 4}, DLT_I64, {0}, {0}, 0, OT_NO_GRAD | OT_F32_ONLY},
    {"mul i32 outer broadcast, exact", fwd, ref, 2, {{OT_I32, 3, {2, 1, 3}, -900, 900, 0}, {OT_I32, 2, {4, 1}, -900, 900, 0}},
     3, {2, 4, 3}, DLT_I32, {2}, {0}, 0, OT_NO_GRAD | OT_F32_ONLY},
    {"div i64 by i32 is true division", fwd, ref, 2, {{OT_I64, 2, {2, 5}, -50, 50, 0}, {OT_I32, 1, {5}, 1, 40, 0}},
     2, {2, 5}, DLT_F32, {3}, {0}, 0, OT_NO_GRAD | OT_F32_ONLY},
    {"sub float - i32 broadcast", fwd, ref, 2, {X(2, 3, 4), {OT_I32, 1, {4}, -3, 3, 0}}, 2, {3, 4}, -1, {1}},
};

static dlt_status e_shape(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[2] = {2, 3}, b[2] = {3, 2};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 2), *y = ot_zeros(ctx, DLT_F32, b, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_mul(x, y, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x), dlt_tensor_release(y);
    return st;
}
/* integers: exact and wrapping as PyTorch's int64; promotion; true division into f32 */
static dlt_status e_int(dlt_ctx *ctx, int *out_touched) {
    *out_touched = 0;
    const int64_t n = 3;
    const int64_t av[3] = {INT64_MAX, -7, 1 << 30};
    const int32_t bv[3] = {1, 3, 4};
    const float fv[3] = {0.5f, 0.25f, 2.0f};
    dlt_tensor *a = NULL, *b = NULL, *f = NULL, *s = NULL, *m = NULL, *d = NULL, *p = NULL;
    dlt_status st = dlt_tensor_from_host(ctx, DLT_I64, &n, 1, 0, av, sizeof av, &a);
    if (st == DLT_OK) st = dlt_tensor_from_host(ctx, DLT_I32, &n, 1, 0, bv, sizeof bv, &b);
    if (st == DLT_OK) st = dlt_tensor_from_host(ctx, DLT_F32, &n, 1, 0, fv, sizeof fv, &f);
    if (st == DLT_OK) st = dlt_add(a, b, &s); /* i64 + i32 -> i64, INT64_MAX + 1 wraps */
    if (st == DLT_OK) st = dlt_mul(a, b, &m);
    if (st == DLT_OK) st = dlt_div(b, b, &d); /* true division of integers -> f32 */
    if (st == DLT_OK) st = dlt_sub(b, f, &p); /* i32 - f32 -> f32 */
    int64_t sv[3] = {0}, mv[3] = {0};
    float dv[3] = {0}, pv[3] = {0};
    if (st == DLT_OK && (dlt_tensor_dtype(s) != DLT_I64 || dlt_tensor_dtype(d) != DLT_F32 || dlt_tensor_dtype(p) != DLT_F32))
        st = DLT_ERR_INTERNAL;
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(s, sv, sizeof sv);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(m, mv, sizeof mv);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(d, dv, sizeof dv);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(p, pv, sizeof pv);
    if (st == DLT_OK && !(sv[0] == INT64_MIN && sv[1] == -4 && sv[2] == (1 << 30) + 4 && mv[0] == INT64_MAX &&
                          mv[1] == -21 && mv[2] == ((int64_t)1 << 32) && dv[0] == 1.0f && dv[2] == 1.0f &&
                          pv[0] == 0.5f && pv[1] == 2.75f && pv[2] == 2.0f))
        st = DLT_ERR_INTERNAL;
    dlt_tensor *all[] = {a, b, f, s, m, d, p};
    for (int i = 0; i < 7; i++) dlt_tensor_release(all[i]);
    return st;
}
static dlt_status e_bool(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[2] = {2, 2}, b[1] = {3};
    dlt_tensor *x = ot_zeros(ctx, DLT_I64, a, 2), *y = ot_zeros(ctx, DLT_I64, b, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_sub(x, y, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x), dlt_tensor_release(y);
    return st;
}
static dlt_status e_null(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[1] = {4};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_div(x, NULL, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static dlt_status e_ctx(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[1] = {4};
    dlt_ctx *other = NULL;
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &other) != DLT_OK) return -1;
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 1), *y = ot_zeros(other, DLT_F32, a, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_add(x, y, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x), dlt_tensor_release(y);
    dlt_ctx_destroy(other);
    return st;
}
static const ot_err ERRORS[] = {
    {"shapes [2,3] and [3,2] do not broadcast", e_shape, DLT_ERR_SHAPE},
    {"integers: exact int64 (INT64_MAX + 1 wraps), promotion, true division into f32", e_int, DLT_OK},
    {"integer operands whose shapes do not broadcast", e_bool, DLT_ERR_SHAPE},
    {"a NULL operand", e_null, DLT_ERR_NULL_POINTER},
    {"operands of two contexts", e_ctx, DLT_ERR_CONTEXT_MISMATCH},
};

OT_STEM(binary, CASES, ERRORS);
