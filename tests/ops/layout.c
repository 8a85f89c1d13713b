/*
 * layout.c - rows of transpose, permute, narrow, split, cat and expand, referenced by index
 * arithmetic in the tests (multi-index of each output element mapped to its input element).
 * ip[0] selects the op; the other ip are its arguments.
 */
#include <stdlib.h>
#include <string.h>

#include "op_common.h"

enum { TRANSPOSE, PERMUTE, NARROW, SPLIT_CAT, CAT2, CAT3, EXPAND };

static dlt_status fwd(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    switch (c->ip[0]) {
    case TRANSPOSE: return dlt_transpose(in[0], (int32_t)c->ip[1], (int32_t)c->ip[2], out);
    case PERMUTE: {
        const int32_t p[4] = {(int32_t)c->ip[1], (int32_t)c->ip[2], (int32_t)c->ip[3], (int32_t)c->ip[4]};
        return dlt_permute(in[0], p, c->in[0].ndim, out);
    }
    case NARROW: return dlt_narrow(in[0], (int32_t)c->ip[1], c->ip[2], c->ip[3], out);
    case SPLIT_CAT: { /* pieces of ip[2] along ip[1], concatenated in reverse order */
        dlt_tensor *p[8] = {NULL}, *r[8];
        int32_t n = 0;
        dlt_status st = dlt_split(in[0], c->ip[2], (int32_t)c->ip[1], p, 8, &n);
        if (st != DLT_OK) return st;
        for (int32_t i = 0; i < n; i++) r[i] = p[n - 1 - i];
        st = dlt_cat(r, n, (int32_t)c->ip[1], out);
        for (int32_t i = 0; i < n; i++) dlt_tensor_release(p[i]);
        return st;
    }
    case CAT2: return dlt_cat(in, 2, (int32_t)c->ip[1], out);
    case CAT3: return dlt_cat(in, 3, (int32_t)c->ip[1], out);
    default: return dlt_expand(in[0], c->out_shape, c->out_ndim, out);
    }
}

/* multi-index of linear i in shape */
static void unravel(int64_t i, const int64_t *shape, int nd, int64_t *idx) {
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}
static int64_t ravel(const int64_t *idx, const int64_t *shape, int nd) {
    int64_t o = 0;
    for (int d = 0; d < nd; d++) o = o * shape[d] + idx[d];
    return o;
}

static void ref(const ot_case *c, double *const *in, double *out) {
    const ot_in *x = &c->in[0];
    const int64_t n = ot_out_numel(c);
    const int nd = c->out_ndim;
    for (int64_t i = 0; i < n; i++) {
        int64_t o[OT_MAX_DIMS], s[OT_MAX_DIMS];
        unravel(i, c->out_shape, nd, o);
        memcpy(s, o, sizeof s);
        int src = 0;
        switch (c->ip[0]) {
        case TRANSPOSE: {
            const int a = (int)((c->ip[1] + nd) % nd), b = (int)((c->ip[2] + nd) % nd);
            s[a] = o[b];
            s[b] = o[a];
            break;
        }
        case PERMUTE:
            for (int d = 0; d < nd; d++) s[c->ip[1 + d]] = o[d];
            break;
        case NARROW: s[c->ip[1]] = o[c->ip[1]] + c->ip[2]; break;
        case SPLIT_CAT: { /* pieces reversed: output position -> piece -> input position */
            const int d = (int)c->ip[1];
            const int64_t size = x->shape[d], ps = c->ip[2], np = (size + ps - 1) / ps;
            int64_t pos = o[d], acc = 0;
            for (int64_t r = np - 1; r >= 0; r--) {
                const int64_t len = r == np - 1 ? size - r * ps : ps;
                if (pos < acc + len) {
                    s[d] = r * ps + (pos - acc);
                    break;
                }
                acc += len;
            }
            break;
        }
        case CAT2:
        case CAT3: {
            const int d = (int)c->ip[1];
            int64_t pos = o[d];
            while (pos >= c->in[src].shape[d]) pos -= c->in[src++].shape[d];
            s[d] = pos;
            out[i] = in[src][ravel(s, c->in[src].shape, nd)];
            continue;
        }
        default: /* expand */
            out[i] = in[0][ot_bcast_index(c->out_shape, nd, x->shape, x->ndim, i)];
            continue;
        }
        out[i] = in[0][ravel(s, x->shape, x->ndim)];
    }
}

#define X(nd, ...) {OT_X, nd, {__VA_ARGS__}, 0, 0, 0}
static const ot_case CASES[] = {
    {"transpose 1,2", fwd, ref, 1, {X(3, 2, 3, 4)}, 3, {2, 4, 3}, -1, {TRANSPOSE, 1, 2}},
    {"transpose -1,0", fwd, ref, 1, {X(3, 2, 3, 4)}, 3, {4, 3, 2}, -1, {TRANSPOSE, -1, 0}},
    {"permute to heads", fwd, ref, 1, {X(4, 2, 5, 3, 4)}, 4, {2, 3, 5, 4}, -1, {PERMUTE, 0, 2, 1, 3}},
    {"narrow dim 0 (a view)", fwd, ref, 1, {X(2, 6, 3)}, 2, {2, 3}, -1, {NARROW, 0, 3, 2}},
    {"narrow last dim (a copy)", fwd, ref, 1, {X(3, 2, 3, 7)}, 3, {2, 3, 4}, -1, {NARROW, 2, 1, 4}},
    {"split last dim, cat reversed", fwd, ref, 1, {X(2, 3, 7)}, 2, {3, 7}, -1, {SPLIT_CAT, 1, 3}},
    {"split dim 0, cat reversed", fwd, ref, 1, {X(2, 9, 2)}, 2, {9, 2}, -1, {SPLIT_CAT, 0, 4}},
    {"cat two along 1", fwd, ref, 2, {X(3, 2, 3, 4), X(3, 2, 1, 4)}, 3, {2, 4, 4}, -1, {CAT2, 1}},
    {"cat three along last", fwd, ref, 3, {X(2, 2, 3), X(2, 2, 1), X(2, 2, 2)}, 2, {2, 6}, -1, {CAT3, 1}},
    {"expand", fwd, ref, 1, {X(3, 3, 1, 2)}, 4, {2, 3, 4, 2}, -1, {EXPAND}},
};

/* cat of 11 pieces (more than a tape node holds): exact values and gradients */
static dlt_status e_cat_many(dlt_ctx *ctx, int *out_touched) {
    *out_touched = 0;
    enum { N = 11 };
    dlt_tensor *t[N] = {NULL}, *y = NULL, *u = NULL;
    dlt_status st = DLT_OK;
    for (int i = 0; i < N && st == DLT_OK; i++) {
        const int64_t s[2] = {2, 1 + i % 2};
        float v[4] = {(float)i, (float)i + 0.5f, (float)i + 0.25f, (float)i + 0.75f};
        st = dlt_tensor_from_host(ctx, DLT_F32, s, 2, 0, v, (size_t)(2 * s[1]) * sizeof(float), &t[i]);
        if (st == DLT_OK) st = dlt_tensor_set_requires_grad(t[i], 1);
    }
    if (st == DLT_OK) st = dlt_cat(t, N, 1, &y);
    int64_t cols = 0;
    for (int i = 0; i < N; i++) cols += 1 + i % 2;
    if (st == DLT_OK && (dlt_tensor_dim(y, 0) != 2 || dlt_tensor_dim(y, 1) != cols)) st = DLT_ERR_INTERNAL;
    float *yv = malloc((size_t)(2 * cols) * sizeof *yv), *uv = malloc((size_t)(2 * cols) * sizeof *uv);
    for (int64_t j = 0; j < 2 * cols; j++) uv[j] = (float)j;
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(y, yv, (size_t)(2 * cols) * sizeof(float));
    const int64_t ys[2] = {2, cols};
    if (st == DLT_OK) st = dlt_tensor_from_host(ctx, DLT_F32, ys, 2, 0, uv, (size_t)(2 * cols) * sizeof(float), &u);
    if (st == DLT_OK) st = dlt_backward(y, u);
    int64_t col = 0;
    for (int i = 0; i < N && st == DLT_OK; i++) {
        const int64_t w = 1 + i % 2;
        float g[4];
        st = dlt_tensor_copy_to_host(dlt_tensor_grad(t[i]), g, (size_t)(2 * w) * sizeof(float));
        const float v[4] = {(float)i, (float)i + 0.5f, (float)i + 0.25f, (float)i + 0.75f};
        for (int r = 0; r < 2 && st == DLT_OK; r++)
            for (int64_t k = 0; k < w; k++) {
                if (yv[r * cols + col + k] != v[r * w + k]) st = DLT_ERR_INTERNAL;
                if (g[r * w + k] != uv[r * cols + col + k]) st = DLT_ERR_INTERNAL;
            }
        col += w;
    }
    free(yv);
    free(uv);
    for (int i = 0; i < N; i++) dlt_tensor_release(t[i]);
    dlt_tensor_release(y), dlt_tensor_release(u);
    return st;
}
static dlt_status e_cat_shape(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[2] = {2, 3}, b[2] = {3, 3};
    dlt_tensor *t[2] = {ot_zeros(ctx, DLT_F32, a, 2), ot_zeros(ctx, DLT_F32, b, 2)}, *o = OT_SENTINEL;
    dlt_status st = dlt_cat(t, 2, 1, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(t[0]), dlt_tensor_release(t[1]);
    return st;
}
static dlt_status e_cat_dtype(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[2] = {2, 3};
    dlt_tensor *t[2] = {ot_zeros(ctx, DLT_F32, a, 2), ot_zeros(ctx, DLT_BF16, a, 2)}, *o = OT_SENTINEL;
    dlt_status st = dlt_cat(t, 2, 0, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(t[0]), dlt_tensor_release(t[1]);
    return st;
}
static dlt_status e_narrow(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[2] = {2, 3};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_narrow(x, 1, 2, 2, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static dlt_status e_permute(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[3] = {2, 3, 4};
    const int32_t p[3] = {0, 0, 1};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 3), *o = OT_SENTINEL;
    dlt_status st = dlt_permute(x, p, 3, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static dlt_status e_split_cap(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[1] = {10};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 1), *o[2] = {OT_SENTINEL, OT_SENTINEL};
    int32_t n = 0;
    dlt_status st = dlt_split(x, 3, 0, o, 2, &n);
    *out_touched = o[0] != OT_SENTINEL || o[1] != OT_SENTINEL || n != 4;
    dlt_tensor_release(x);
    return st;
}
static dlt_status e_expand(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[2] = {2, 3}, s[2] = {4, 3};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_expand(x, s, 2, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static const ot_err ERRORS[] = {
    {"cat of 11 pieces: values and gradients", e_cat_many, DLT_OK},
    {"cat of [2,3] and [3,3] along 1", e_cat_shape, DLT_ERR_SHAPE},
    {"cat of f32 and bf16", e_cat_dtype, DLT_ERR_DTYPE},
    {"narrow past the end", e_narrow, DLT_ERR_INVALID_ARGUMENT},
    {"permute with a repeated dimension", e_permute, DLT_ERR_INVALID_ARGUMENT},
    {"split into more pieces than outs holds (reports 4)", e_split_cap, DLT_ERR_INVALID_ARGUMENT},
    {"expand a size 2 to 4", e_expand, DLT_ERR_SHAPE},
};

OT_STEM(layout, CASES, ERRORS);
