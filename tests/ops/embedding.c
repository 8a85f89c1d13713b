/*
 * embedding.c - rows of embedding: rows of the weight gathered by integer indices (with
 * repeats, so the backward must accumulate), padding_idx excluded from the gradient.
 * ip[0]: padding_idx (or DLT_NO_PADDING_IDX).
 */
#include "op_common.h"

static dlt_status fwd(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_embedding(in[0], in[1], c->ip[0], out);
}

static void ref(const ot_case *c, double *const *in, double *out) {
    const int64_t D = c->in[0].shape[1], n = ot_numel(&c->in[1]);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < D; j++) out[i * D + j] = in[0][(int64_t)in[1][i] * D + j];
}

static const ot_case CASES[] = {
    {"i64 indices with repeats", fwd, ref, 2, {{OT_X, 2, {7, 5}, 0, 0, 0}, {OT_I64, 2, {3, 4}, 0, 7, 0}}, 3,
     {3, 4, 5}, -1, {DLT_NO_PADDING_IDX}},
    {"i32 indices, 1-D", fwd, ref, 2, {{OT_X, 2, {4, 3}, 0, 0, 0}, {OT_I32, 1, {9}, 0, 4, 0}}, 2, {9, 3}, -1,
     {DLT_NO_PADDING_IDX}},
    {"wide rows", fwd, ref, 2, {{OT_X, 2, {11, 130}, 0, 0, 0}, {OT_I64, 1, {6}, 0, 11, 0}}, 2, {6, 130}, -1,
     {DLT_NO_PADDING_IDX}},
    /* V = 300: the CUDA backward's radix sort over 9 key bits, several passes */
    {"300 rows, 500 i64 indices", fwd, ref, 2, {{OT_X, 2, {300, 3}, 0, 0, 0}, {OT_I64, 1, {500}, 0, 300, 0}}, 2,
     {500, 3}, -1, {DLT_NO_PADDING_IDX}},
    /* 5000 indices into 5 rows of 70: runs of ~1000 rows spread over the CUDA backward's
     * eight warps, three 32-column tiles (the last partial), and more sorted positions than
     * its 4096 blocks, which then stride */
    {"5 rows of 70, 5000 i64 indices (long runs)", fwd, ref, 2, {{OT_X, 2, {5, 70}, 0, 0, 0}, {OT_I64, 1, {5000}, 0, 5, 0}},
     2, {5000, 70}, -1, {DLT_NO_PADDING_IDX}, .flags = OT_NO_FD},
    /* rows of 300: two groups of eight 32-column tiles, short runs (a warp per tile) and
     * long ones (the warps over the rows, 34 per run); in f32 the first is CUDA's vector
     * backward's (75 vectors: three slices, the last of 11) */
    {"7 rows of 300, 40 indices (short runs, two tile groups)", fwd, ref, 2,
     {{OT_X, 2, {7, 300}, 0, 0, 0}, {OT_I64, 1, {40}, 0, 7, 0}}, 2, {40, 300}, -1, {DLT_NO_PADDING_IDX},
     .flags = OT_NO_FD},
    {"3 rows of 300, 100 indices (long runs, two tile groups)", fwd, ref, 2,
     {{OT_X, 2, {3, 300}, 0, 0, 0}, {OT_I32, 1, {100}, 0, 3, 0}}, 2, {100, 300}, -1, {DLT_NO_PADDING_IDX},
     .flags = OT_NO_FD},
    /* padding_idx: the forward reads the row, the gradient skips it, which a finite
     * difference of the forward cannot check (PyTorch's rule, not the derivative): CUDA
     * against the CPU only, with long runs of repeated indices */
    {"padding_idx 2, long runs", fwd, ref, 2, {{OT_X, 2, {4, 6}, 0, 0, 0}, {OT_I32, 2, {10, 30}, 0, 4, 0}}, 3,
     {10, 30, 6}, -1, {2}, {0}, 0, OT_NO_REF},
    {"padding_idx -1 (the last row), i64", fwd, ref, 2, {{OT_X, 2, {5, 33}, 0, 0, 0}, {OT_I64, 1, {40}, 0, 5, 0}}, 2,
     {40, 33}, -1, {-1}, {0}, 0, OT_NO_REF},
    /* rows of whole 16-byte vectors (8 and 24 values: every dtype; 12: f32 only) take
     * CUDA's vector kernels (the forward's; the backward's too, n <= 16 V); 130, 70, 33 above
     * do not */
    {"rows of 8, i64", fwd, ref, 2, {{OT_X, 2, {6, 8}, 0, 0, 0}, {OT_I64, 2, {3, 5}, 0, 6, 0}}, 3, {3, 5, 8}, -1,
     {DLT_NO_PADDING_IDX}},
    {"rows of 24, i32", fwd, ref, 2, {{OT_X, 2, {5, 24}, 0, 0, 0}, {OT_I32, 1, {11}, 0, 5, 0}}, 2, {11, 24}, -1,
     {DLT_NO_PADDING_IDX}},
    {"rows of 12, i64", fwd, ref, 2, {{OT_X, 2, {4, 12}, 0, 0, 0}, {OT_I64, 1, {9}, 0, 4, 0}}, 2, {9, 12}, -1,
     {DLT_NO_PADDING_IDX}},
    /* CUDA's vector backward (rows of whole 16-byte vectors, n <= 16 V): a block per 32
     * sorted positions and slices of 32 vectors. Runs of ~1 (GPT-2's words; the first
     * backward starts from 0, the table's second one accumulates: beta 1) */
    {"2000 rows of 64, 300 indices (vector backward, runs of ~1)", fwd, ref, 2,
     {{OT_X, 2, {2000, 64}, 0, 0, 0}, {OT_I64, 1, {300}, 0, 2000, 0}}, 2, {300, 64}, -1, {DLT_NO_PADDING_IDX},
     .flags = OT_NO_FD},
    /* n = 16 V: runs of 16 +- 4, both sides of EMB_SHORT (a warp per short run, the eight
     * warps over a long one), crossing the 32-position chunks; rows of 264: f32 66 vectors
     * (three slices, the last of 2, grouped in one block), f16/bf16 33 (two) */
    {"64 rows of 264, 1024 indices (vector backward, short and long runs, slices grouped)", fwd, ref, 2,
     {{OT_X, 2, {64, 264}, 0, 0, 0}, {OT_I64, 1, {1024}, 0, 64, 0}}, 2, {1024, 264}, -1, {DLT_NO_PADDING_IDX},
     .flags = OT_NO_FD},
    /* indices in 3 of 64 rows (n <= 16 V still): runs of ~330 in the vector backward, their
     * positions staged 256 at a time */
    {"64 rows of 40, 1000 indices in rows 0..2 (vector backward, runs of ~330)", fwd, ref, 2,
     {{OT_X, 2, {64, 40}, 0, 0, 0}, {OT_I32, 1, {1000}, 0, 3, 0}}, 2, {1000, 40}, -1, {DLT_NO_PADDING_IDX},
     .flags = OT_NO_FD},
    /* padding_idx in the vector backward: on a short-run row, and on a long run's */
    {"padding_idx 3, 40 rows of 16, 600 indices (vector backward)", fwd, ref, 2,
     {{OT_X, 2, {40, 16}, 0, 0, 0}, {OT_I64, 1, {600}, 0, 40, 0}}, 2, {600, 16}, -1, {3}, {0}, 0, OT_NO_REF},
    {"padding_idx 1, 64 rows of 32, 900 indices in rows 0..3 (vector backward, long runs)", fwd, ref, 2,
     {{OT_X, 2, {64, 32}, 0, 0, 0}, {OT_I64, 1, {900}, 0, 4, 0}}, 2, {900, 32}, -1, {1}, {0}, 0, OT_NO_REF},
    /* rows of 20: whole vectors in f32 only (f16/bf16 take the scalar backward), n <= 16 V */
    {"50 rows of 20, 200 indices (f32 vector backward, f16/bf16 scalar)", fwd, ref, 2,
     {{OT_X, 2, {50, 20}, 0, 0, 0}, {OT_I32, 2, {10, 20}, 0, 50, 0}}, 3, {10, 20, 20}, -1, {DLT_NO_PADDING_IDX},
     .flags = OT_NO_FD},
    {"empty indices", fwd, ref, 2, {{OT_X, 2, {4, 3}, 0, 0, 0}, {OT_I64, 2, {2, 0}, 0, 4, 0}}, 3, {2, 0, 3}, -1,
     {DLT_NO_PADDING_IDX}},
};

/* padding_idx: the forward still reads the row, the gradient skips it */
static dlt_status e_padding(dlt_ctx *ctx, int *out_touched) {
    *out_touched = 0;
    const int64_t ws[2] = {3, 2}, n = 4;
    const float wv[6] = {1, 2, 3, 4, 5, 6};
    const int64_t iv[4] = {0, 1, 1, 2};
    dlt_tensor *w = NULL, *idx = NULL, *y = NULL, *u = NULL;
    dlt_status st = dlt_tensor_from_host(ctx, DLT_F32, ws, 2, 0, wv, sizeof wv, &w);
    if (st == DLT_OK) st = dlt_tensor_set_requires_grad(w, 1);
    if (st == DLT_OK) st = dlt_tensor_from_host(ctx, DLT_I64, &n, 1, 0, iv, sizeof iv, &idx);
    if (st == DLT_OK) st = dlt_embedding(w, idx, -2, &y); /* padding row 1 (= 3 - 2) */
    const int64_t ys[2] = {4, 2};
    if (st == DLT_OK) st = dlt_tensor_zeros(ctx, DLT_F32, ys, 2, 0, &u);
    if (st == DLT_OK) st = dlt_tensor_fill(u, 1.0);
    if (st == DLT_OK) st = dlt_backward(y, u);
    float yv[8] = {0}, gv[6] = {0};
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(y, yv, sizeof yv);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(dlt_tensor_grad(w), gv, sizeof gv);
    const float want_y[8] = {1, 2, 3, 4, 3, 4, 5, 6}, want_g[6] = {1, 1, 0, 0, 1, 1};
    for (int i = 0; st == DLT_OK && i < 8; i++)
        if (yv[i] != want_y[i] || (i < 6 && gv[i] != want_g[i])) st = DLT_ERR_INTERNAL;
    dlt_tensor_release(w), dlt_tensor_release(idx), dlt_tensor_release(y), dlt_tensor_release(u);
    return st;
}
/* bf16, one row hit 300 times by gradient 1: the sum is rounded once (300, a bf16 value);
 * adding in bf16 one row at a time would stop at 256, where 256 + 1 rounds back to 256 */
static dlt_status e_bf16_long_run(dlt_ctx *ctx, int *out_touched) {
    *out_touched = 0;
    const int64_t ws[2] = {2, 1}, n = 300, ys[2] = {300, 1};
    int64_t iv[300] = {0};
    dlt_tensor *w = NULL, *idx = NULL, *y = NULL, *u = NULL;
    dlt_status st = dlt_tensor_zeros(ctx, DLT_BF16, ws, 2, 0, &w);
    if (st == DLT_OK) st = dlt_tensor_set_requires_grad(w, 1);
    if (st == DLT_OK) st = dlt_tensor_from_host(ctx, DLT_I64, &n, 1, 0, iv, sizeof iv, &idx);
    if (st == DLT_OK) st = dlt_embedding(w, idx, DLT_NO_PADDING_IDX, &y);
    if (st == DLT_OK) st = dlt_tensor_zeros(ctx, DLT_BF16, ys, 2, 0, &u);
    if (st == DLT_OK) st = dlt_tensor_fill(u, 1.0);
    if (st == DLT_OK) st = dlt_backward(y, u);
    uint16_t gv[2] = {0};
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(dlt_tensor_grad(w), gv, sizeof gv);
    if (st == DLT_OK && (gv[0] != 0x4396 /* 300 */ || gv[1] != 0)) st = DLT_ERR_INTERNAL;
    dlt_tensor_release(w), dlt_tensor_release(idx), dlt_tensor_release(y), dlt_tensor_release(u);
    return st;
}
static dlt_status e_range(dlt_ctx *ctx, int *out_touched) {
    const int64_t ws[2] = {3, 2}, n = 2;
    const int64_t iv[2] = {1, 3};
    dlt_tensor *w = ot_zeros(ctx, DLT_F32, ws, 2), *idx = NULL, *o = OT_SENTINEL;
    dlt_status st = dlt_tensor_from_host(ctx, DLT_I64, &n, 1, 0, iv, sizeof iv, &idx);
    if (st == DLT_OK) st = dlt_embedding(w, idx, DLT_NO_PADDING_IDX, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(w), dlt_tensor_release(idx);
    return st;
}
static dlt_status e_negative(dlt_ctx *ctx, int *out_touched) {
    const int64_t ws[2] = {3, 2}, n = 1;
    const int32_t iv[1] = {-1};
    dlt_tensor *w = ot_zeros(ctx, DLT_F32, ws, 2), *idx = NULL, *o = OT_SENTINEL;
    dlt_status st = dlt_tensor_from_host(ctx, DLT_I32, &n, 1, 0, iv, sizeof iv, &idx);
    if (st == DLT_OK) st = dlt_embedding(w, idx, DLT_NO_PADDING_IDX, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(w), dlt_tensor_release(idx);
    return st;
}
static dlt_status e_float_idx(dlt_ctx *ctx, int *out_touched) {
    const int64_t ws[2] = {3, 2}, n = 2;
    dlt_tensor *w = ot_zeros(ctx, DLT_F32, ws, 2), *idx = ot_zeros(ctx, DLT_F32, &n, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_embedding(w, idx, DLT_NO_PADDING_IDX, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(w), dlt_tensor_release(idx);
    return st;
}
static dlt_status e_pad_range(dlt_ctx *ctx, int *out_touched) {
    const int64_t ws[2] = {3, 2}, n = 2;
    dlt_tensor *w = ot_zeros(ctx, DLT_F32, ws, 2), *idx = ot_zeros(ctx, DLT_I64, &n, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_embedding(w, idx, 3, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(w), dlt_tensor_release(idx);
    return st;
}
static dlt_status e_weight_1d(dlt_ctx *ctx, int *out_touched) {
    const int64_t ws[1] = {3}, n = 2;
    dlt_tensor *w = ot_zeros(ctx, DLT_F32, ws, 1), *idx = ot_zeros(ctx, DLT_I64, &n, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_embedding(w, idx, DLT_NO_PADDING_IDX, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(w), dlt_tensor_release(idx);
    return st;
}
static const ot_err ERRORS[] = {
    {"padding_idx -2 of 3 rows: forward reads it, gradient skips it (exact values)", e_padding, DLT_OK},
    {"bf16 row hit 300 times: gradient 300, the sum rounded once (exact value)", e_bf16_long_run, DLT_OK},
    {"index 3 of 3 rows", e_range, DLT_ERR_INVALID_ARGUMENT},
    {"negative index", e_negative, DLT_ERR_INVALID_ARGUMENT},
    {"float indices", e_float_idx, DLT_ERR_DTYPE},
    {"padding_idx out of range", e_pad_range, DLT_ERR_INVALID_ARGUMENT},
    {"1-D weight", e_weight_1d, DLT_ERR_SHAPE},
};

OT_STEM(embedding, CASES, ERRORS);
