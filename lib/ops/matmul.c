/*
 * matmul.c - front doors of matmul (PyTorch's torch.matmul for 1-D and higher inputs) and
 * bmm, on the backends' batched GEMM (cuBLASLt strided-batched on CUDA, CBLAS on the CPU).
 *
 * matmul: a 1-D a is treated as [1, k] and b as [k, 1], the added dimension removed from
 * the result (1-D x 1-D is a dot product, 0-D). Otherwise a [..., m, k] @ b [..., k, n] ->
 * [broadcast(batch a, batch b)..., m, n]. An operand whose batch is either all of the
 * broadcast batch or a single matrix is read in place (batch stride 0 for the latter);
 * other broadcasts (e.g. [2,1,m,k] with [1,3,k,n]) expand the operand first (a recorded
 * copy, whose backward sums). bmm: [B, m, k] @ [B, k, n], no broadcasting.
 * Autocast runs both in the region's dtype (inputs cast down, as conv2d and linear);
 * otherwise a and b must share one float dtype. Accumulation is fp32.
 *
 * Gradients (per batch matrix, then summed over batch dimensions an operand was
 * broadcast along): da = u b^T, db = a^T u.
 */
#include <string.h>

#include "ops_internal.h"

typedef struct gemm_attr {
    dlt_gemm_batch g;  /* the forward product */
    int64_t bshape[DLT_MAX_DIMS];
    int32_t bnd;       /* batch dims of the result */
    int32_t pad_;
} gemm_attr;

/* Full-batch gradient of one operand, summed to that operand's shape. */
static dlt_status gemm_grad(dlt_ctx *ctx, const gemm_attr *at, int which, dlt_tensor *u,
                            const dlt_tensor *other, const dlt_tensor *like, dlt_grad_slot *slot) {
    static const char *F = "dlt_backward(matmul)";
    const dlt_gemm_batch *f = &at->g;
    dlt_gemm_batch g = {.batch = f->batch, .alpha = 1.0};
    int64_t shape[DLT_MAX_DIMS];
    memcpy(shape, at->bshape, sizeof shape);
    if (which == 0) { /* da (m x k) = u (m x n) . b^T */
        g.m = f->m;
        g.n = f->k;
        g.k = f->n;
        g.trans_a = 0;
        g.trans_b = 1;
        g.stride_a = f->m * f->n;
        g.stride_b = f->stride_b;
        shape[at->bnd] = f->m;
        shape[at->bnd + 1] = f->k;
    } else { /* db (k x n) = a^T (k x m) . u (m x n) */
        g.m = f->k;
        g.n = f->n;
        g.k = f->m;
        g.trans_a = 1;
        g.trans_b = 0;
        g.stride_a = f->stride_a;
        g.stride_b = f->m * f->n;
        shape[at->bnd] = f->k;
        shape[at->bnd + 1] = f->n;
    }
    g.stride_c = g.m * g.n;
    dlt_tensor *full = NULL, *r = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, u->dtype, shape, at->bnd + 2, DLT_FORMAT_CONTIGUOUS, F, &full));
    dlt_status st = DLT_OK;
    if (full->numel) {
        if (g.k == 0) st = ctx->be->memset0(ctx, dlt__data(full), dlt__nbytes(full));
        else st = which == 0 ? ctx->be->gemm(ctx, full, u, other, &g) : ctx->be->gemm(ctx, full, other, u, &g);
    }
    if (st == DLT_OK) st = dlt__k_sum_to(ctx, full, like->shape, like->ndim, like->dtype, F, &r);
    dlt_tensor_release(full);
    if (st != DLT_OK) return st;
    return dlt__grad_slot_store(ctx, slot, r);
}

static dlt_status gemm_backward(dlt_node *nd, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    const gemm_attr *at = DLT_NODE_ATTR(nd, gemm_attr);
    dlt_tensor *a = nd->saved[0], *b = nd->saved[1];
    if (gin[0].needed) DLT_CHECK(gemm_grad(nd->ctx, at, 0, gout[0], b, a, &gin[0]));
    if (gin[1].needed) DLT_CHECK(gemm_grad(nd->ctx, at, 1, gout[0], a, b, &gin[1]));
    return DLT_OK;
}

/* c = a @ b for a [.., m, k], b [.., k, n] of one dtype whose batches are each either the
 * full broadcast batch (contiguous) or one matrix; recorded as one node. */
static dlt_status gemm_op(dlt_tensor *a, dlt_tensor *b, const int64_t *bshape, int32_t bnd, const char *F,
                          dlt_tensor **out) {
    dlt_ctx *ctx = a->ctx;
    gemm_attr at;
    memset(&at, 0, sizeof at);
    at.bnd = bnd;
    memcpy(at.bshape, bshape, (size_t)bnd * sizeof *bshape);
    int64_t batch = 1, ba = 1, bb = 1;
    for (int32_t i = 0; i < bnd; i++) batch *= bshape[i];
    for (int32_t i = 0; i < a->ndim - 2; i++) ba *= a->shape[i];
    for (int32_t i = 0; i < b->ndim - 2; i++) bb *= b->shape[i];
    at.g.batch = batch;
    at.g.m = a->shape[a->ndim - 2];
    at.g.k = a->shape[a->ndim - 1];
    at.g.n = b->shape[b->ndim - 1];
    at.g.stride_a = ba == 1 && batch != 1 ? 0 : at.g.m * at.g.k;
    at.g.stride_b = bb == 1 && batch != 1 ? 0 : at.g.k * at.g.n;
    at.g.stride_c = at.g.m * at.g.n;
    at.g.alpha = 1.0;
    int64_t shape[DLT_MAX_DIMS];
    memcpy(shape, bshape, (size_t)bnd * sizeof *bshape);
    shape[bnd] = at.g.m;
    shape[bnd + 1] = at.g.n;
    dlt_tensor *y = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    DLT_CHECK(dlt__tensor_new(ctx, a->dtype, shape, bnd + 2, DLT_FORMAT_CONTIGUOUS, F, &y));
    if (y->numel) {
        st = at.g.k == 0 ? ctx->be->memset0(ctx, dlt__data(y), dlt__nbytes(y)) : ctx->be->gemm(ctx, y, a, b, &at.g);
        if (st != DLT_OK) goto fail;
    }
    {
        dlt_tensor *in[2] = {a, b};
        DLT_CHECK_GOTO(st, dlt__record(ctx, "matmul", gemm_backward, in, 2, &y, 1, &node), fail);
    }
    if (node) {
        DLT_SET_ATTR(node, gemm_attr, at);
        dlt__save(node, a);
        dlt__save(node, b);
    }
    *out = y;
    return DLT_OK;
fail:
    dlt_tensor_release(y);
    return st;
}

/* An operand of the batched product: itself (retained) when its batch is one matrix or the
 * whole broadcast batch, else expanded to the broadcast batch (a recorded copy). */
static dlt_status batch_operand(dlt_tensor *t, const int64_t *bshape, int32_t bnd, dlt_tensor **out) {
    int64_t tb = 1, full = 1;
    for (int32_t i = 0; i < t->ndim - 2; i++) tb *= t->shape[i];
    for (int32_t i = 0; i < bnd; i++) full *= bshape[i];
    int same = 1; /* t's batch shape, aligned right, equals bshape (leading 1s aside) */
    for (int32_t i = 0; i < bnd && same; i++) {
        const int32_t it = t->ndim - 2 - bnd + i;
        same = (it >= 0 ? t->shape[it] : 1) == bshape[i];
    }
    if (tb == 1 || same || full == 0) {
        *out = dlt_tensor_retain(t);
        return DLT_OK;
    }
    int64_t shape[DLT_MAX_DIMS];
    memcpy(shape, bshape, (size_t)bnd * sizeof *bshape);
    shape[bnd] = t->shape[t->ndim - 2];
    shape[bnd + 1] = t->shape[t->ndim - 1];
    return dlt_expand(t, shape, bnd + 2, out);
}

static dlt_status check_pair(dlt_tensor *a, dlt_tensor *b, const char *F, int32_t *dtype) {
    DLT_CHECK(dlt__check_tensor(a, F, "a"));
    DLT_CHECK(dlt__check_tensor(b, F, "b"));
    DLT_CHECK(dlt__check_same_ctx(a, b, F, "a", "b"));
    DLT_CHECK(dlt__check_float(a, F, "a"));
    DLT_CHECK(dlt__check_float(b, F, "b"));
    const int32_t ac = dlt__autocast_dtype(a->ctx);
    if (ac < 0 && a->dtype != b->dtype)
        return dlt__err(DLT_ERR_DTYPE, F, "a is %s but b is %s: use one dtype, or an autocast region",
                        dlt_dtype_name(a->dtype), dlt_dtype_name(b->dtype));
    *dtype = ac >= 0 ? ac : a->dtype;
    DLT_NEED_KERNEL(a->ctx, gemm, F);
    return DLT_OK;
}

dlt_status dlt_matmul(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out) {
    static const char *F = "dlt_matmul";
    DLT_NULL_CHECK(out, F);
    int32_t dtype;
    DLT_CHECK(check_pair(a, b, F, &dtype));
    char sa[96], sb[96];
    if (a->ndim == 0 || b->ndim == 0)
        return dlt__err(DLT_ERR_SHAPE, F, "both operands need at least one dimension, got %s and %s",
                        dlt__shape_str(a, sa, sizeof sa), dlt__shape_str(b, sb, sizeof sb));
    const int64_t ka = a->shape[a->ndim - 1], kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
    if (ka != kb)
        return dlt__err(DLT_ERR_SHAPE, F, "a %s and b %s: the inner sizes %lld and %lld differ",
                        dlt__shape_str(a, sa, sizeof sa), dlt__shape_str(b, sb, sizeof sb), (long long)ka,
                        (long long)kb);
    /* batch shapes broadcast */
    const int32_t na = a->ndim >= 2 ? a->ndim - 2 : 0, nb = b->ndim >= 2 ? b->ndim - 2 : 0;
    const int32_t bnd = na > nb ? na : nb;
    int64_t bshape[DLT_MAX_DIMS];
    for (int32_t i = 0; i < bnd; i++) {
        const int32_t ia = na - bnd + i, ib = nb - bnd + i;
        const int64_t x = ia >= 0 ? a->shape[ia] : 1, y = ib >= 0 ? b->shape[ib] : 1;
        if (x != y && x != 1 && y != 1)
            return dlt__err(DLT_ERR_SHAPE, F, "a %s and b %s: batch sizes %lld and %lld do not broadcast",
                            dlt__shape_str(a, sa, sizeof sa), dlt__shape_str(b, sb, sizeof sb), (long long)x,
                            (long long)y);
        bshape[i] = x == 1 ? y : x;
    }
    if (bnd + 2 > DLT_MAX_DIMS) return dlt__err(DLT_ERR_SHAPE, F, "too many dimensions");
    dlt_tensor *a1 = NULL, *b1 = NULL, *a2 = NULL, *b2 = NULL, *ac = NULL, *bc = NULL, *y = NULL;
    dlt_status st;
    DLT_CHECK_GOTO(st, dlt__contiguous_input(a, F, &ac), done);
    DLT_CHECK_GOTO(st, dlt__contiguous_input(b, F, &bc), done);
    { /* cast, then give 1-D operands their matrix dimension (views) */
        dlt_tensor *t = NULL;
        DLT_CHECK_GOTO(st, dlt__autocast_operand(ac, dtype, F, &t), done);
        dlt_tensor_release(ac);
        ac = t;
        DLT_CHECK_GOTO(st, dlt__autocast_operand(bc, dtype, F, &t), done);
        dlt_tensor_release(bc);
        bc = t;
    }
    if (a->ndim == 1) {
        const int64_t s[2] = {1, ka};
        DLT_CHECK_GOTO(st, dlt_reshape(ac, s, 2, &a1), done);
    } else {
        a1 = dlt_tensor_retain(ac);
    }
    if (b->ndim == 1) {
        const int64_t s[2] = {kb, 1};
        DLT_CHECK_GOTO(st, dlt_reshape(bc, s, 2, &b1), done);
    } else {
        b1 = dlt_tensor_retain(bc);
    }
    DLT_CHECK_GOTO(st, batch_operand(a1, bshape, bnd, &a2), done);
    DLT_CHECK_GOTO(st, batch_operand(b1, bshape, bnd, &b2), done);
    DLT_CHECK_GOTO(st, gemm_op(a2, b2, bshape, bnd, F, &y), done);
    if (a->ndim == 1 || b->ndim == 1) { /* drop the added dimension(s) */
        int64_t s[DLT_MAX_DIMS];
        int32_t k = 0;
        for (int32_t i = 0; i < bnd; i++) s[k++] = bshape[i];
        if (a->ndim != 1) s[k++] = a->shape[a->ndim - 2];
        if (b->ndim != 1) s[k++] = b->shape[b->ndim - 1];
        dlt_tensor *t = NULL;
        DLT_CHECK_GOTO(st, dlt_reshape(y, s, k, &t), done);
        dlt_tensor_release(y);
        y = t;
    }
done:
    dlt_tensor_release(ac);
    dlt_tensor_release(bc);
    dlt_tensor_release(a1);
    dlt_tensor_release(b1);
    dlt_tensor_release(a2);
    dlt_tensor_release(b2);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt_bmm(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out) {
    static const char *F = "dlt_bmm";
    DLT_NULL_CHECK(out, F);
    int32_t dtype;
    DLT_CHECK(check_pair(a, b, F, &dtype));
    DLT_CHECK(dlt__check_ndim(a, 3, F, "a"));
    DLT_CHECK(dlt__check_ndim(b, 3, F, "b"));
    char sa[96], sb[96];
    if (a->shape[0] != b->shape[0] || a->shape[2] != b->shape[1])
        return dlt__err(DLT_ERR_SHAPE, F, "a %s and b %s: expected [B,m,k] and [B,k,n]",
                        dlt__shape_str(a, sa, sizeof sa), dlt__shape_str(b, sb, sizeof sb));
    dlt_tensor *ac = NULL, *bc = NULL, *t = NULL, *y = NULL;
    dlt_status st;
    DLT_CHECK_GOTO(st, dlt__contiguous_input(a, F, &t), done);
    st = dlt__autocast_operand(t, dtype, F, &ac);
    dlt_tensor_release(t);
    if (st != DLT_OK) goto done;
    DLT_CHECK_GOTO(st, dlt__contiguous_input(b, F, &t), done);
    st = dlt__autocast_operand(t, dtype, F, &bc);
    dlt_tensor_release(t);
    if (st != DLT_OK) goto done;
    st = gemm_op(ac, bc, a->shape, 1, F, &y);
done:
    dlt_tensor_release(ac);
    dlt_tensor_release(bc);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    *out = y;
    return DLT_OK;
}
