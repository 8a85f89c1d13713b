/*
 * attention.c - rows of scaled_dot_product_attention, referenced by the naive float64
 * formula: the full T x S score matrix per (b, h), softmax, dropout mask from the tests'
 * Philox (weight (b,h,i,j) at flat index ((b*H+h)*T+i)*S+j, offset 0 after setting the seed),
 * times v. ip[0]: causal; fp[0]: dropout p; fp[1]: scale (0: 1/sqrt(D)).
 */
#include <math.h>
#include <stdlib.h>

#include "op_common.h"

#define SEED 77u

static dlt_status fwd(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    if (c->fp[0] > 0) {
        dlt_status st = dlt_ctx_set_seed(dlt_tensor_ctx(in[0]), SEED);
        if (st != DLT_OK) return st;
    }
    return dlt_scaled_dot_product_attention(in[0], in[1], in[2], (int32_t)c->ip[0], c->fp[0], c->fp[1], out);
}

static void ref(const ot_case *c, double *const *in, double *out) {
    const int64_t B = c->in[0].shape[0], H = c->in[0].shape[1], T = c->in[0].shape[2], D = c->in[0].shape[3];
    const int64_t S = c->in[1].shape[2];
    const double scale = c->fp[1] > 0 ? c->fp[1] : 1.0 / sqrt((double)D), p = c->fp[0];
    double *w = malloc((size_t)(S > 0 ? S : 1) * sizeof *w);
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int64_t i = 0; i < T; i++) {
            double m = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < S; j++) {
                double s = 0.0;
                for (int64_t t = 0; t < D; t++) s += in[0][(bh * T + i) * D + t] * in[1][(bh * S + j) * D + t];
                w[j] = c->ip[0] && j > i ? -INFINITY : s * scale;
                m = fmax(m, w[j]);
            }
            for (int64_t j = 0; j < S; j++) sum += w[j] == -INFINITY ? 0.0 : exp(w[j] - m);
            for (int64_t t = 0; t < D; t++) out[(bh * T + i) * D + t] = 0.0;
            for (int64_t j = 0; j < S; j++) {
                double a = w[j] == -INFINITY ? 0.0 : exp(w[j] - m) / sum;
                if (p > 0) a = ot_philox_uniform(SEED, (uint64_t)((bh * T + i) * S + j)) >= p ? a / (1.0 - p) : 0.0;
                for (int64_t t = 0; t < D; t++) out[(bh * T + i) * D + t] += a * in[2][(bh * S + j) * D + t];
            }
        }
    free(w);
}

#define QKV(B, H, T, S, D)                                                                    \
    {{OT_X, 4, {B, H, T, D}, -1, 1, 0}, {OT_X, 4, {B, H, S, D}, -1, 1, 0}, {OT_X, 4, {B, H, S, D}, -1, 1, 0}}
static const ot_case CASES[] = {
    {"full", fwd, ref, 3, QKV(2, 2, 5, 5, 4), 4, {2, 2, 5, 4}, -1, {0}},
    {"causal", fwd, ref, 3, QKV(2, 2, 5, 5, 4), 4, {2, 2, 5, 4}, -1, {1}},
    {"causal, more keys", fwd, ref, 3, QKV(1, 2, 3, 6, 8), 4, {1, 2, 3, 8}, -1, {1}},
    {"full, fewer keys", fwd, ref, 3, QKV(1, 3, 6, 2, 8), 4, {1, 3, 6, 8}, -1, {0}},
    {"scale 0.3", fwd, ref, 3, QKV(1, 1, 4, 4, 3), 4, {1, 1, 4, 3}, -1, {1}, {0.0, 0.3}},
    {"dropout 0.25", fwd, ref, 3, QKV(2, 1, 6, 6, 4), 4, {2, 1, 6, 4}, -1, {1}, {0.25}},
    {"head dim 64, 33 tokens", fwd, ref, 3, QKV(1, 2, 33, 33, 64), 4, {1, 2, 33, 64}, -1, {1}},
    /* CUDA holds a head in 1, 2, 4 or 8 values per lane (D <= 32, 64, 128, 256) */
    {"head dim 32", fwd, ref, 3, QKV(1, 1, 4, 4, 32), 4, {1, 1, 4, 32}, -1, {0}},
    {"head dim 96, causal, fewer keys", fwd, ref, 3, QKV(1, 2, 7, 4, 96), 4, {1, 2, 7, 96}, -1, {1}},
    {"head dim 160, dropout 0.1", fwd, ref, 3, QKV(1, 1, 5, 6, 160), 4, {1, 1, 5, 160}, -1, {0}, {0.1}},
    {"causal with dropout 0.3", fwd, ref, 3, QKV(1, 2, 6, 6, 8), 4, {1, 2, 6, 8}, -1, {1}, {0.3}},
    {"no keys", fwd, ref, 3, QKV(1, 2, 3, 0, 4), 4, {1, 2, 3, 4}, -1, {0}},
    /* flash (cuda/attention_flash.cu): 64-row tiles of queries and keys, head dim padded to
     * 64 or 128 in shared memory. Partial tiles (T, S not multiples of 64), causal with more
     * and with fewer keys than queries, an exact 64-key tile, padded head dims, dropout.
     * cuda_op_table runs them with dlt_ctx_set_flash_sdp on as well (group "flash"). */
    {"tiles: 65 tokens, head dim 64, causal", fwd, ref, 3, QKV(1, 2, 65, 65, 64), 4, {1, 2, 65, 64}, -1, {1},
     .flags = OT_NO_FD},
    {"tiles: 127 queries, 200 keys, head dim 64", fwd, ref, 3, QKV(1, 1, 127, 200, 64), 4, {1, 1, 127, 64}, -1,
     {0}, .flags = OT_NO_FD},
    {"tiles: causal, 200 queries, 127 keys, head dim 128", fwd, ref, 3, QKV(1, 1, 200, 127, 128), 4,
     {1, 1, 200, 128}, -1, {1}, .flags = OT_NO_FD},
    {"tiles: causal, 65 queries, 200 keys, head dim 64", fwd, ref, 3, QKV(1, 2, 65, 200, 64), 4, {1, 2, 65, 64},
     -1, {1}, .flags = OT_NO_FD},
    {"tiles: causal, dropout 0.2, 130 tokens, head dim 128", fwd, ref, 3, QKV(1, 1, 130, 130, 128), 4,
     {1, 1, 130, 128}, -1, {1}, {0.2}, .flags = OT_NO_FD},
    {"tiles: dropout 0.1, 64 queries, 129 keys, head dim 64", fwd, ref, 3, QKV(1, 2, 64, 129, 64), 4,
     {1, 2, 64, 64}, -1, {0}, {0.1}, .flags = OT_NO_FD},
    {"tiles: head dim 48 (padded to 64), 100 tokens, causal", fwd, ref, 3, QKV(2, 1, 100, 100, 48), 4,
     {2, 1, 100, 48}, -1, {1}, .flags = OT_NO_FD},
    {"tiles: head dim 96 (padded to 128), scale 0.2, 70 queries, 64 keys", fwd, ref, 3, QKV(1, 1, 70, 64, 96), 4,
     {1, 1, 70, 96}, -1, {0}, {0.0, 0.2}, .flags = OT_NO_FD},
    {"tiles: 200 tokens, 16 heads of 64, causal", fwd, ref, 3, QKV(1, 16, 200, 200, 64), 4, {1, 16, 200, 64}, -1,
     {1}, .flags = OT_NO_FD},
    /* cuDNN's fused attention (cuda/attention_cudnn.c) serves f16/bf16 without dropout when
     * T and S are multiples of 128 and D a multiple of 8 up to 128: causal with equal, more
     * and fewer keys, full, a head dim only cuDNN takes (72: not a multiple of 16), scale.
     * cuda_op_table's group "cudnn" checks that cuDNN really served. */
    {"cudnn: 128 tokens, 2 heads of 64, causal", fwd, ref, 3, QKV(1, 2, 128, 128, 64), 4, {1, 2, 128, 64}, -1, {1},
     .flags = OT_NO_FD},
    {"cudnn: full, 128 queries, 256 keys, head dim 32", fwd, ref, 3, QKV(2, 1, 128, 256, 32), 4, {2, 1, 128, 32},
     -1, {0}, .flags = OT_NO_FD},
    {"cudnn: causal, 128 queries, 256 keys, head dim 128", fwd, ref, 3, QKV(1, 1, 128, 256, 128), 4,
     {1, 1, 128, 128}, -1, {1}, .flags = OT_NO_FD},
    {"cudnn: causal, 256 queries, 128 keys, head dim 64", fwd, ref, 3, QKV(1, 1, 256, 128, 64), 4, {1, 1, 256, 64},
     -1, {1}, .flags = OT_NO_FD},
    {"cudnn: head dim 72, scale 0.2, 128 tokens, causal", fwd, ref, 3, QKV(1, 2, 128, 128, 72), 4, {1, 2, 128, 72},
     -1, {1}, {0.0, 0.2}, .flags = OT_NO_FD},
};

static dlt_status e_shape(dlt_ctx *ctx, int *out_touched) {
    const int64_t qs[4] = {1, 2, 4, 8}, ks[4] = {1, 2, 4, 4};
    dlt_tensor *q = ot_zeros(ctx, DLT_F32, qs, 4), *k = ot_zeros(ctx, DLT_F32, ks, 4), *o = OT_SENTINEL;
    dlt_status st = dlt_scaled_dot_product_attention(q, k, k, 1, 0.0, 0.0, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(q), dlt_tensor_release(k);
    return st;
}
static dlt_status e_rank(dlt_ctx *ctx, int *out_touched) {
    const int64_t qs[3] = {2, 4, 8};
    dlt_tensor *q = ot_zeros(ctx, DLT_F32, qs, 3), *o = OT_SENTINEL;
    dlt_status st = dlt_scaled_dot_product_attention(q, q, q, 0, 0.0, 0.0, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(q);
    return st;
}
static dlt_status e_dtype(dlt_ctx *ctx, int *out_touched) {
    const int64_t qs[4] = {1, 1, 2, 4};
    dlt_tensor *q = ot_zeros(ctx, DLT_F32, qs, 4), *k = ot_zeros(ctx, DLT_BF16, qs, 4), *o = OT_SENTINEL;
    dlt_status st = dlt_scaled_dot_product_attention(q, k, q, 0, 0.0, 0.0, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(q), dlt_tensor_release(k);
    return st;
}
static dlt_status e_p(dlt_ctx *ctx, int *out_touched) {
    const int64_t qs[4] = {1, 1, 2, 4};
    dlt_tensor *q = ot_zeros(ctx, DLT_F32, qs, 4), *o = OT_SENTINEL;
    dlt_status st = dlt_scaled_dot_product_attention(q, q, q, 0, -0.1, 0.0, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(q);
    return st;
}
static const ot_err ERRORS[] = {
    {"k's head dim differs from q's", e_shape, DLT_ERR_SHAPE},
    {"3-D q", e_rank, DLT_ERR_SHAPE},
    {"q f32 with k bf16 outside autocast", e_dtype, DLT_ERR_DTYPE},
    {"negative dropout_p", e_p, DLT_ERR_INVALID_ARGUMENT},
};

OT_STEM(attention, CASES, ERRORS);
