/*
 * nd.c - shape arithmetic shared by the front doors of the N-D ops: dimension arguments,
 * NumPy/PyTorch broadcasting, operand maps for the strided backend entries (nd.h), merged
 * dimensions, reduction specs, dtype promotion, and the kernel-level helpers that backward
 * functions use (they compute with backend entries directly: nothing they do is recorded).
 */
#include <string.h>

#include "ops_internal.h"

dlt_status dlt__norm_dim(int32_t dim, int32_t ndim, const char *func, int32_t *out) {
    const int32_t n = ndim > 0 ? ndim : 1;
    const int32_t d = dim < 0 ? dim + n : dim;
    if (d < 0 || d >= n)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "dimension %d is out of range for a %d-D tensor (expected %d..%d)", dim,
                        ndim, -n, n - 1);
    *out = d;
    return DLT_OK;
}

dlt_status dlt__broadcast_shape(const dlt_tensor *a, const dlt_tensor *b, const char *func,
                                int64_t *shape, int32_t *ndim) {
    const int32_t n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int32_t i = 0; i < n; i++) {
        const int32_t ia = a->ndim - n + i, ib = b->ndim - n + i;
        const int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char x[96], y[96];
            return dlt__err(DLT_ERR_SHAPE, func,
                            "shapes %s and %s do not broadcast: size %lld vs %lld at dimension %d "
                            "(counted from the end: %d)",
                            dlt__shape_str(a, x, sizeof x), dlt__shape_str(b, y, sizeof y),
                            (long long)sa, (long long)sb, i, i - n);
        }
        shape[i] = sa == 1 ? sb : sa;
    }
    *ndim = n;
    return DLT_OK;
}

void dlt__contig_strides(const int64_t *shape, int32_t ndim, int64_t *strides) {
    int64_t s = 1;
    for (int32_t i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

void dlt__nd_init(dlt_nd *s, const int64_t *shape, int32_t ndim) {
    memset(s, 0, sizeof *s);
    s->ndim = ndim;
    s->numel = 1;
    for (int32_t i = 0; i < ndim; i++) {
        s->shape[i] = shape[i];
        s->numel *= shape[i];
    }
}

void dlt__nd_broadcast_operand(const dlt_tensor *t, const int64_t *shape, int32_t ndim,
                               dlt_nd_operand *o) {
    int64_t st[DLT_MAX_DIMS];
    dlt__contig_strides(t->shape, t->ndim, st);
    memset(o, 0, sizeof *o);
    for (int32_t i = 0; i < ndim; i++) {
        const int32_t it = t->ndim - ndim + i;
        o->stride[i] = (it >= 0 && t->shape[it] == shape[i] && shape[i] != 1) ? st[it] : 0;
    }
}

void dlt__nd_collapse(dlt_nd *s, dlt_nd_operand *ops, int32_t n_ops) {
    /* drop size-1 dimensions (their index is always 0) */
    int32_t k = 0;
    for (int32_t d = 0; d < s->ndim; d++) {
        if (s->shape[d] == 1) continue;
        s->shape[k] = s->shape[d];
        for (int32_t o = 0; o < n_ops; o++) ops[o].stride[k] = ops[o].stride[d];
        k++;
    }
    s->ndim = k;
    if (k == 0) return;
    /* merge d into d+1 when every operand steps through d as one block of d+1 */
    int32_t w = 0;
    for (int32_t d = 1; d < s->ndim; d++) {
        int merge = 1;
        for (int32_t o = 0; o < n_ops && merge; o++)
            merge = ops[o].stride[w] == ops[o].stride[d] * s->shape[d];
        if (merge) {
            s->shape[w] *= s->shape[d];
            for (int32_t o = 0; o < n_ops; o++) ops[o].stride[w] = ops[o].stride[d];
        } else {
            w++;
            s->shape[w] = s->shape[d];
            for (int32_t o = 0; o < n_ops; o++) ops[o].stride[w] = ops[o].stride[d];
        }
    }
    s->ndim = w + 1;
    for (int32_t d = s->ndim; d < DLT_MAX_DIMS; d++) {
        s->shape[d] = 0;
        for (int32_t o = 0; o < n_ops; o++) ops[o].stride[d] = 0;
    }
}

void dlt__reduce_spec(const dlt_tensor *x, const int32_t *reduced, dlt_reduce_spec *r) {
    int64_t st[DLT_MAX_DIMS], ks[DLT_MAX_DIMS], rs[DLT_MAX_DIMS];
    int32_t nk = 0, nr = 0;
    dlt__contig_strides(x->shape, x->ndim, st);
    memset(r, 0, sizeof *r);
    for (int32_t d = 0; d < x->ndim; d++) {
        if (reduced[d]) {
            rs[nr] = x->shape[d];
            r->red_x.stride[nr++] = st[d];
        } else {
            ks[nk] = x->shape[d];
            r->kept_x.stride[nk++] = st[d];
        }
    }
    dlt__nd_init(&r->kept, ks, nk);
    dlt__nd_init(&r->red, rs, nr);
    dlt__nd_collapse(&r->kept, &r->kept_x, 1);
    dlt__nd_collapse(&r->red, &r->red_x, 1);
}

int32_t dlt__promote(int32_t a, int32_t b) {
    if (a == b) return a;
    const int fa = dlt__is_float(a), fb = dlt__is_float(b);
    if (fa && fb) return DLT_F32; /* f16 with bf16, or either with f32 */
    if (fa) return a;             /* a float with an integer: the float */
    if (fb) return b;
    /* two integers: the wider (u8 < i32 < i64) */
    const int wa = a == DLT_I64 ? 2 : a == DLT_I32, wb = b == DLT_I64 ? 2 : b == DLT_I32;
    return wa >= wb ? a : b;
}

dlt_status dlt__contiguous_input(dlt_tensor *x, const char *func, dlt_tensor **out) {
    if (x->format == DLT_FORMAT_CONTIGUOUS) {
        *out = dlt_tensor_retain(x);
        return DLT_OK;
    }
    return dlt__op_to_format(x, DLT_FORMAT_CONTIGUOUS, func, out);
}

/* ---- kernel-level helpers (not recorded) ---- */

dlt_status dlt__k_binary(dlt_ctx *ctx, int32_t dtype, const dlt_tensor *a, const dlt_tensor *b,
                         int32_t op, double alpha, const char *func, dlt_tensor **out) {
    int64_t shape[DLT_MAX_DIMS];
    int32_t nd;
    DLT_CHECK(dlt__broadcast_shape(a, b, func, shape, &nd));
    dlt_tensor *y = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, dtype, shape, nd, DLT_FORMAT_CONTIGUOUS, func, &y));
    if (y->numel) {
        dlt_nd s;
        dlt_nd_operand o[2];
        dlt__nd_init(&s, shape, nd);
        dlt__nd_broadcast_operand(a, shape, nd, &o[0]);
        dlt__nd_broadcast_operand(b, shape, nd, &o[1]);
        dlt__nd_collapse(&s, o, 2);
        dlt_status st = ctx->be->binary(ctx, y, a, &o[0], b, &o[1], &s, op, alpha);
        if (st != DLT_OK) {
            dlt_tensor_release(y);
            return st;
        }
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt__k_sum_to(dlt_ctx *ctx, dlt_tensor *g, const int64_t *shape, int32_t ndim,
                         int32_t dtype, const char *func, dlt_tensor **out) {
    /* reduced: the leading dimensions g has beyond ndim, and those where shape is 1 */
    int32_t reduced[DLT_MAX_DIMS] = {0};
    int any = g->ndim != ndim;
    for (int32_t d = 0; d < g->ndim; d++) {
        const int32_t it = d - (g->ndim - ndim);
        reduced[d] = it < 0 || (shape[it] == 1 && g->shape[d] != 1);
        any |= reduced[d];
    }
    if (!any && g->dtype == dtype) {
        *out = dlt_tensor_retain(g);
        return DLT_OK;
    }
    int sums = 0; /* reductions over size-1 dimensions only reshape */
    for (int32_t d = 0; d < g->ndim; d++) sums |= reduced[d] && g->shape[d] != 1;
    if (!sums && g->dtype == dtype && g->format == DLT_FORMAT_CONTIGUOUS)
        return dlt__tensor_view(g, shape, ndim, DLT_FORMAT_CONTIGUOUS, func, out);
    dlt_tensor *y = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, dtype, shape, ndim, DLT_FORMAT_CONTIGUOUS, func, &y));
    dlt_status st = DLT_OK;
    if (y->numel) {
        if (g->numel == 0) {
            st = ctx->be->memset0(ctx, dlt__data(y), dlt__nbytes(y));
        } else if (!any) {
            st = ctx->be->convert(ctx, y, g);
        } else {
            dlt_reduce_spec r;
            dlt__reduce_spec(g, reduced, &r);
            st = ctx->be->reduce(ctx, y, g, &r, DLT_RED_SUM, 1.0);
        }
    }
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return st;
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt__k_unary(dlt_ctx *ctx, const dlt_tensor *x, int32_t op, double alpha,
                        const char *func, dlt_tensor **out) {
    dlt_tensor *y = NULL;
    DLT_CHECK(dlt__tensor_new_like(x, x->dtype, func, &y));
    dlt_status st = y->numel ? ctx->be->unary(ctx, y, x, op, alpha) : DLT_OK;
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return st;
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt__k_copy(dlt_ctx *ctx, dlt_tensor *dst, const dlt_nd_operand *od, const dlt_tensor *src,
                       const dlt_nd_operand *os, const dlt_nd *s) {
    if (s->numel == 0) return DLT_OK;
    dlt_nd s2 = *s;
    dlt_nd_operand o[2] = {*od, *os};
    dlt__nd_collapse(&s2, o, 2);
    return ctx->be->copy_nd(ctx, dst, &o[0], src, &o[1], &s2);
}
