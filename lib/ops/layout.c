/*
 * layout.c - front doors of the layout ops: transpose, permute, narrow, split, cat,
 * contiguous and expand, with gradients.
 *
 * libdltrain tensors are dense (contiguous, or channels-last for 4-D), so unlike PyTorch's
 * views these return new tensors holding copies. The exception is narrow (and split) when
 * every dimension before `dim` has size 1 (e.g. dim 0): the piece is then a contiguous block
 * of the input and is returned as a view sharing its storage, as PyTorch's narrow always is.
 * A copy never sees later writes to the input.
 * Inputs in channels-last are read in their logical (N,C,H,W) order.
 *
 * Gradients: permute/transpose apply the inverse permutation; narrow writes u into a zero
 * tensor of the input's shape; split does that for all pieces at once (a piece without a
 * gradient leaves zeros); cat hands each input its slice of u; expand sums u over the
 * broadcast dimensions.
 */
#include <stdio.h>
#include <string.h>

#include "ops_internal.h"

/* ---- permute / transpose ---- */

typedef struct permute_attr {
    int32_t ndim;
    int32_t perm[DLT_MAX_DIMS];
} permute_attr;

/* y = x permuted: y.shape[i] = x.shape[perm[i]] (x contiguous) */
static dlt_status permute_copy(dlt_ctx *ctx, const dlt_tensor *x, const int32_t *perm, int32_t nd,
                               const char *F, dlt_tensor **out) {
    int64_t shape[DLT_MAX_DIMS], xs[DLT_MAX_DIMS];
    for (int32_t i = 0; i < nd; i++) shape[i] = x->shape[perm[i]];
    dlt_tensor *y = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, x->dtype, shape, nd, DLT_FORMAT_CONTIGUOUS, F, &y));
    dlt_nd s;
    dlt_nd_operand od, os;
    dlt__nd_init(&s, shape, nd);
    memset(&od, 0, sizeof od);
    memset(&os, 0, sizeof os);
    dlt__contig_strides(shape, nd, od.stride);
    dlt__contig_strides(x->shape, nd, xs);
    for (int32_t i = 0; i < nd; i++) os.stride[i] = xs[perm[i]];
    dlt_status st = dlt__k_copy(ctx, y, &od, x, &os, &s);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return st;
    }
    *out = y;
    return DLT_OK;
}

static dlt_status permute_backward(dlt_node *nd, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    const permute_attr *at = DLT_NODE_ATTR(nd, permute_attr);
    int32_t inv[DLT_MAX_DIMS];
    for (int32_t i = 0; i < at->ndim; i++) inv[at->perm[i]] = i;
    dlt_tensor *dx = NULL;
    DLT_CHECK(permute_copy(nd->ctx, gout[0], inv, at->ndim, "dlt_backward(permute)", &dx));
    return dlt__grad_slot_store(nd->ctx, &gin[0], dx);
}

dlt_status dlt_permute(dlt_tensor *x, const int32_t *dims, int32_t n, dlt_tensor **out) {
    static const char *F = "dlt_permute";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    if (n != x->ndim)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "dims has %d entries for a %d-D tensor", n, x->ndim);
    if (n > 0) DLT_NULL_CHECK(dims, F);
    permute_attr at = {.ndim = n};
    int32_t seen[DLT_MAX_DIMS] = {0};
    for (int32_t i = 0; i < n; i++) {
        int32_t d;
        DLT_CHECK(dlt__norm_dim(dims[i], n, F, &d));
        if (seen[d]) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "dimension %d appears twice in dims", dims[i]);
        seen[d] = 1;
        at.perm[i] = d;
    }
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, copy_nd, F);
    dlt_tensor *xc = NULL, *y = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    DLT_CHECK(dlt__contiguous_input(x, F, &xc));
    DLT_CHECK_GOTO(st, permute_copy(ctx, xc, at.perm, n, F, &y), done);
    DLT_CHECK_GOTO(st, dlt__record(ctx, "permute", permute_backward, &xc, 1, &y, 1, &node), done);
    DLT_SET_ATTR(node, permute_attr, at);
done:
    dlt_tensor_release(xc);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt_transpose(dlt_tensor *x, int32_t dim0, int32_t dim1, dlt_tensor **out) {
    static const char *F = "dlt_transpose";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    int32_t d0, d1, perm[DLT_MAX_DIMS];
    DLT_CHECK(dlt__norm_dim(dim0, x->ndim, F, &d0));
    DLT_CHECK(dlt__norm_dim(dim1, x->ndim, F, &d1));
    if (x->ndim < 2) { /* PyTorch: transposing a 0-D or 1-D tensor returns it as is */
        *out = dlt_tensor_retain(x);
        return DLT_OK;
    }
    for (int32_t i = 0; i < x->ndim; i++) perm[i] = i;
    perm[d0] = d1;
    perm[d1] = d0;
    dlt_status st = dlt_permute(x, perm, x->ndim, out);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

/* ---- narrow / split ---- */

typedef struct pieces_attr {
    int32_t ndim, dim, n;
    int32_t dtype;
    int64_t shape[DLT_MAX_DIMS];
    int64_t start[DLT_NODE_MAX_OUT];
    int64_t length[DLT_NODE_MAX_OUT];
} pieces_attr;

/* Copies src (the piece's shape) into or out of dst's slice [start, start+len) along dim. */
static dlt_status slice_copy(dlt_ctx *ctx, dlt_tensor *big, const dlt_tensor *piece, int32_t dim,
                             int64_t start, int into_big) {
    int64_t bs[DLT_MAX_DIMS];
    dlt_nd s;
    dlt_nd_operand ob, op;
    dlt__nd_init(&s, piece->shape, piece->ndim);
    memset(&ob, 0, sizeof ob);
    memset(&op, 0, sizeof op);
    dlt__contig_strides(big->shape, big->ndim, bs);
    for (int32_t i = 0; i < big->ndim; i++) ob.stride[i] = bs[i];
    ob.offset = start * bs[dim];
    dlt__contig_strides(piece->shape, piece->ndim, op.stride);
    return into_big ? dlt__k_copy(ctx, big, &ob, piece, &op, &s) : dlt__k_copy(ctx, (dlt_tensor *)piece, &op, big, &ob, &s);
}

static dlt_status pieces_backward(dlt_node *nd, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(split)";
    dlt_ctx *ctx = nd->ctx;
    const pieces_attr *at = DLT_NODE_ATTR(nd, pieces_attr);
    dlt_tensor *dx = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, gout[0] ? gout[0]->dtype : at->dtype, at->shape, at->ndim,
                              DLT_FORMAT_CONTIGUOUS, F, &dx));
    /* zero first unless the pieces cover the input and all have gradients */
    int64_t covered = 0;
    int all = 1;
    for (int32_t i = 0; i < at->n; i++) {
        covered += at->length[i];
        all &= gout[i] != NULL;
    }
    dlt_status st = DLT_OK;
    if (!(all && covered == at->shape[at->dim]) && dx->numel)
        st = ctx->be->memset0(ctx, dlt__data(dx), dlt__nbytes(dx));
    for (int32_t i = 0; i < at->n && st == DLT_OK; i++)
        if (gout[i]) st = slice_copy(ctx, dx, gout[i], at->dim, at->start[i], 1);
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

/* Pieces [start_i, start_i + len_i) of x along dim as one node (n <= DLT_NODE_MAX_OUT). */
static dlt_status pieces(dlt_tensor *x, int32_t dim, const int64_t *start, const int64_t *len, int32_t n,
                         const char *F, dlt_tensor **outs) {
    dlt_ctx *ctx = x->ctx;
    dlt_tensor *xc = NULL, *ys[DLT_NODE_MAX_OUT] = {NULL};
    dlt_node *node = NULL;
    dlt_status st;
    DLT_CHECK(dlt__contiguous_input(x, F, &xc));
    int view = 1; /* a piece is a contiguous block when every dimension before dim is 1 */
    for (int32_t i = 0; i < dim; i++) view &= xc->shape[i] == 1;
    int64_t xs[DLT_MAX_DIMS];
    dlt__contig_strides(xc->shape, xc->ndim, xs);
    for (int32_t i = 0; i < n; i++) {
        int64_t shape[DLT_MAX_DIMS];
        memcpy(shape, xc->shape, sizeof shape);
        shape[dim] = len[i];
        if (view) {
            const size_t off = xc->offset + (size_t)(start[i] * xs[dim]) * dlt__dtype_size(xc->dtype);
            DLT_CHECK_GOTO(st, dlt__tensor_from_storage(xc->storage, off, xc->dtype, shape, xc->ndim,
                                                        DLT_FORMAT_CONTIGUOUS, F, &ys[i]), done);
        } else {
            DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, xc->dtype, shape, xc->ndim, DLT_FORMAT_CONTIGUOUS, F, &ys[i]),
                           done);
            DLT_CHECK_GOTO(st, slice_copy(ctx, xc, ys[i], dim, start[i], 0), done);
        }
    }
    DLT_CHECK_GOTO(st, dlt__record(ctx, n == 1 ? "narrow" : "split", pieces_backward, &xc, 1, ys, n, &node), done);
    if (node) {
        pieces_attr at = {.ndim = xc->ndim, .dim = dim, .n = n, .dtype = xc->dtype};
        memcpy(at.shape, xc->shape, sizeof at.shape);
        for (int32_t i = 0; i < n; i++) {
            at.start[i] = start[i];
            at.length[i] = len[i];
        }
        DLT_SET_ATTR(node, pieces_attr, at);
    }
done:
    dlt_tensor_release(xc);
    if (st != DLT_OK) {
        for (int32_t i = 0; i < n; i++) dlt_tensor_release(ys[i]);
        return st;
    }
    for (int32_t i = 0; i < n; i++) outs[i] = ys[i];
    return DLT_OK;
}

dlt_status dlt_narrow(dlt_tensor *x, int32_t dim, int64_t start, int64_t length, dlt_tensor **out) {
    static const char *F = "dlt_narrow";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    if (x->ndim == 0) return dlt__err(DLT_ERR_SHAPE, F, "cannot narrow a 0-D tensor");
    int32_t d;
    DLT_CHECK(dlt__norm_dim(dim, x->ndim, F, &d));
    const int64_t size = x->shape[d];
    if (start < -size || start > size)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "start %lld is out of range for dimension %d of size %lld",
                        (long long)start, dim, (long long)size);
    const int64_t s0 = start < 0 ? start + size : start;
    if (length < 0 || length > size - s0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "start %lld + length %lld exceeds dimension %d of size %lld", (long long)s0,
                        (long long)length, dim, (long long)size);
    DLT_NEED_KERNEL(x->ctx, copy_nd, F);
    dlt_status st = pieces(x, d, &s0, &length, 1, F, out);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

dlt_status dlt_split(dlt_tensor *x, int64_t split_size, int32_t dim, dlt_tensor **outs, int32_t cap,
                     int32_t *n_out) {
    static const char *F = "dlt_split";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(n_out, F);
    if (x->ndim == 0) return dlt__err(DLT_ERR_SHAPE, F, "cannot split a 0-D tensor");
    int32_t d;
    DLT_CHECK(dlt__norm_dim(dim, x->ndim, F, &d));
    const int64_t size = x->shape[d];
    if (split_size <= 0 && !(split_size == 0 && size == 0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "split_size %lld must be positive", (long long)split_size);
    const int64_t n64 = size == 0 ? 1 : (size + split_size - 1) / split_size;
    if (n64 > cap || (cap > 0 && !outs)) {
        *n_out = n64 > INT32_MAX ? INT32_MAX : (int32_t)n64;
        if (!outs && cap > 0) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'outs' is NULL");
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "splitting size %lld by %lld gives %lld pieces; outs holds %d",
                        (long long)size, (long long)split_size, (long long)n64, cap);
    }
    DLT_NEED_KERNEL(x->ctx, copy_nd, F);
    const int32_t n = (int32_t)n64;
    /* one node per group of DLT_NODE_MAX_OUT pieces */
    for (int32_t g = 0; g < n; g += DLT_NODE_MAX_OUT) {
        int64_t st0[DLT_NODE_MAX_OUT], ln[DLT_NODE_MAX_OUT];
        const int32_t k = n - g < DLT_NODE_MAX_OUT ? n - g : DLT_NODE_MAX_OUT;
        for (int32_t i = 0; i < k; i++) {
            st0[i] = (int64_t)(g + i) * split_size;
            ln[i] = size - st0[i] < split_size ? size - st0[i] : split_size;
        }
        dlt_status st = pieces(x, d, st0, ln, k, F, outs + g);
        if (st != DLT_OK) {
            for (int32_t i = 0; i < g; i++) {
                dlt_tensor_release(outs[i]);
                outs[i] = NULL;
            }
            return dlt__err_wrap(st, F);
        }
    }
    *n_out = n;
    return DLT_OK;
}

/* ---- cat ---- */

typedef struct cat_attr {
    int32_t dim, n, ndim, pad_;
    int64_t start[DLT_NODE_MAX_IN];
    int64_t length[DLT_NODE_MAX_IN];
    int64_t shape[DLT_MAX_DIMS]; /* of the result */
} cat_attr;

static dlt_status cat_backward(dlt_node *nd, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(cat)";
    dlt_ctx *ctx = nd->ctx;
    const cat_attr *at = DLT_NODE_ATTR(nd, cat_attr);
    dlt_tensor *u = gout[0];
    for (int32_t i = 0; i < at->n; i++) {
        if (!gin[i].needed) continue;
        int64_t shape[DLT_MAX_DIMS];
        memcpy(shape, at->shape, sizeof shape);
        shape[at->dim] = at->length[i];
        dlt_tensor *g = NULL;
        DLT_CHECK(dlt__tensor_new(ctx, u->dtype, shape, at->ndim, DLT_FORMAT_CONTIGUOUS, F, &g));
        dlt_status st = slice_copy(ctx, u, g, at->dim, at->start[i], 0);
        if (st != DLT_OK) {
            dlt_tensor_release(g);
            return st;
        }
        DLT_CHECK(dlt__grad_slot_store(ctx, &gin[i], g));
    }
    return DLT_OK;
}

/* cat of n <= DLT_NODE_MAX_IN checked inputs */
static dlt_status cat_small(dlt_tensor *const *ts, int32_t n, int32_t dim, const char *F, dlt_tensor **out) {
    dlt_ctx *ctx = ts[0]->ctx;
    dlt_tensor *in[DLT_NODE_MAX_IN] = {NULL}, *y = NULL;
    dlt_node *node = NULL;
    dlt_status st = DLT_OK;
    cat_attr at = {.dim = dim, .n = n, .ndim = ts[0]->ndim};
    memcpy(at.shape, ts[0]->shape, sizeof at.shape);
    at.shape[dim] = 0;
    for (int32_t i = 0; i < n; i++) {
        DLT_CHECK_GOTO(st, dlt__contiguous_input(ts[i], F, &in[i]), done);
        at.start[i] = at.shape[dim];
        at.length[i] = ts[i]->shape[dim];
        at.shape[dim] += ts[i]->shape[dim];
    }
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, ts[0]->dtype, at.shape, at.ndim, DLT_FORMAT_CONTIGUOUS, F, &y), done);
    for (int32_t i = 0; i < n; i++) DLT_CHECK_GOTO(st, slice_copy(ctx, y, in[i], dim, at.start[i], 1), done);
    DLT_CHECK_GOTO(st, dlt__record(ctx, "cat", cat_backward, in, n, &y, 1, &node), done);
    DLT_SET_ATTR(node, cat_attr, at);
done:
    for (int32_t i = 0; i < n; i++) dlt_tensor_release(in[i]);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return st;
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt_cat(dlt_tensor *const *ts, int32_t n, int32_t dim, dlt_tensor **out) {
    static const char *F = "dlt_cat";
    DLT_NULL_CHECK(out, F);
    if (n < 1) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "cat needs at least one tensor, got %d", n);
    DLT_NULL_CHECK(ts, F);
    for (int32_t i = 0; i < n; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "ts[%d]", i);
        DLT_CHECK(dlt__check_tensor(ts[i], F, nm));
    }
    const dlt_tensor *t0 = ts[0];
    if (t0->ndim == 0) return dlt__err(DLT_ERR_SHAPE, F, "zero-dimensional tensors cannot be concatenated");
    int32_t d;
    DLT_CHECK(dlt__norm_dim(dim, t0->ndim, F, &d));
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        const dlt_tensor *t = ts[i];
        char a[96], b[96];
        DLT_CHECK(dlt__check_same_ctx(t0, t, F, "ts[0]", "ts[i]"));
        if (t->dtype != t0->dtype)
            return dlt__err(DLT_ERR_DTYPE, F, "ts[%d] is %s but ts[0] is %s: cast to one dtype first", i,
                            dlt_dtype_name(t->dtype), dlt_dtype_name(t0->dtype));
        int ok = t->ndim == t0->ndim;
        for (int32_t k = 0; ok && k < t0->ndim; k++) ok = k == d || t->shape[k] == t0->shape[k];
        if (!ok)
            return dlt__err(DLT_ERR_SHAPE, F, "ts[%d] has shape %s and ts[0] %s: sizes must match except in dimension %d",
                            i, dlt__shape_str(t, a, sizeof a), dlt__shape_str(t0, b, sizeof b), dim);
        if (__builtin_add_overflow(total, t->shape[d], &total))
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the concatenated size overflows");
    }
    DLT_NEED_KERNEL(t0->ctx, copy_nd, F);
    /* more inputs than a node holds: concatenate groups, then the groups */
    if (n > DLT_NODE_MAX_IN) {
        dlt_tensor *parts[DLT_NODE_MAX_IN] = {NULL};
        int32_t np = 0;
        dlt_status st = DLT_OK;
        const int32_t per = (n + DLT_NODE_MAX_IN - 1) / DLT_NODE_MAX_IN;
        for (int32_t g = 0; g < n && st == DLT_OK; g += per, np++)
            st = dlt_cat(ts + g, n - g < per ? n - g : per, d, &parts[np]);
        if (st == DLT_OK) st = dlt_cat(parts, np, d, out);
        for (int32_t i = 0; i < np; i++) dlt_tensor_release(parts[i]);
        return st == DLT_OK ? st : dlt__err_wrap(st, F);
    }
    dlt_status st = cat_small(ts, n, d, F, out);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

/* ---- contiguous / expand ---- */

dlt_status dlt_contiguous(dlt_tensor *x, dlt_tensor **out) {
    static const char *F = "dlt_contiguous";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    dlt_status st = dlt__contiguous_input(x, F, out);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

typedef struct expand_attr {
    int32_t ndim, dtype;
    int64_t shape[DLT_MAX_DIMS];
} expand_attr;

static dlt_status expand_backward(dlt_node *nd, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    const expand_attr *at = DLT_NODE_ATTR(nd, expand_attr);
    dlt_tensor *dx = NULL;
    DLT_CHECK(dlt__k_sum_to(nd->ctx, gout[0], at->shape, at->ndim, gout[0]->dtype, "dlt_backward(expand)", &dx));
    return dlt__grad_slot_store(nd->ctx, &gin[0], dx);
}

dlt_status dlt_expand(dlt_tensor *x, const int64_t *shape, int32_t ndim, dlt_tensor **out) {
    static const char *F = "dlt_expand";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    if (ndim < x->ndim || ndim > DLT_MAX_DIMS)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "cannot expand a %d-D tensor to %d dimensions", x->ndim, ndim);
    if (ndim > 0) DLT_NULL_CHECK(shape, F);
    int64_t s[DLT_MAX_DIMS];
    char a[96];
    for (int32_t i = 0; i < ndim; i++) {
        const int32_t ix = x->ndim - ndim + i;
        const int64_t xs = ix >= 0 ? x->shape[ix] : 1;
        s[i] = shape[i] == -1 && ix >= 0 ? xs : shape[i];
        if (s[i] < 0 || (xs != 1 && s[i] != xs))
            return dlt__err(DLT_ERR_SHAPE, F, "cannot expand %s: size %lld at dimension %d (input size %lld)",
                            dlt__shape_str(x, a, sizeof a), (long long)shape[i], i, (long long)xs);
    }
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, copy_nd, F);
    dlt_tensor *xc = NULL, *y = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    DLT_CHECK(dlt__contiguous_input(x, F, &xc));
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, xc->dtype, s, ndim, DLT_FORMAT_CONTIGUOUS, F, &y), done);
    {
        dlt_nd sp;
        dlt_nd_operand od, os;
        dlt__nd_init(&sp, s, ndim);
        dlt__nd_broadcast_operand(y, s, ndim, &od);
        dlt__nd_broadcast_operand(xc, s, ndim, &os);
        DLT_CHECK_GOTO(st, dlt__k_copy(ctx, y, &od, xc, &os, &sp), done);
    }
    DLT_CHECK_GOTO(st, dlt__record(ctx, "expand", expand_backward, &xc, 1, &y, 1, &node), done);
    if (node) {
        expand_attr at = {.ndim = xc->ndim, .dtype = xc->dtype};
        memcpy(at.shape, xc->shape, sizeof at.shape);
        DLT_SET_ATTR(node, expand_attr, at);
    }
done:
    dlt_tensor_release(xc);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}
