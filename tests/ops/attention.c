/*
 * attention.c - rows of scaled_dot_product_attention and of its packed-qkv form, referenced
 * by the naive float64 formula: the full T x S score matrix per (b, h), softmax, dropout mask
 * from the tests' Philox (weight (b,h,i,j) at flat index ((b*H+h)*T+i)*S+j, offset 0 after
 * setting the seed), times v. ip[0]: causal; fp[0]: dropout p; fp[1]: scale (0: 1/sqrt(D)).
 * Packed rows ("packed qkv"): one input qkv [B,T,3C], ip[1] heads; the reference unpacks it
 * as nanoGPT's split/view/transpose does and merges the result back to [B,T,C].
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

/* out [B,H,T,D] from q [B,H,T,D], k, v [B,H,S,D] */
static void attend(const ot_case *c, int64_t B, int64_t H, int64_t T, int64_t S, int64_t D, double *const *in,
                   double *out) {
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

static void ref(const ot_case *c, double *const *in, double *out) {
    attend(c, c->in[0].shape[0], c->in[0].shape[1], c->in[0].shape[2], c->in[1].shape[2], c->in[0].shape[3], in,
           out);
}

static dlt_status fwd_packed(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    if (c->fp[0] > 0) {
        dlt_status st = dlt_ctx_set_seed(dlt_tensor_ctx(in[0]), SEED);
        if (st != DLT_OK) return st;
    }
    return dlt_scaled_dot_product_attention_qkvpacked(in[0], c->ip[1], (int32_t)c->ip[0], c->fp[0], c->fp[1], out);
}

static void ref_packed(const ot_case *c, double *const *in, double *out) {
    const int64_t B = c->in[0].shape[0], T = c->in[0].shape[1], C = c->in[0].shape[2] / 3, H = c->ip[1];
    const int64_t D = C / H, n = B * H * T * D;
    double *h[4];
    for (int i = 0; i < 4; i++) h[i] = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++)
                    for (int i = 0; i < 3; i++)
                        h[i][((b * H + hh) * T + t) * D + d] = in[0][(b * T + t) * 3 * C + i * C + hh * D + d];
    attend(c, B, H, T, T, D, h, h[3]);
    for (int64_t b = 0; b < B; b++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++)
                    out[(b * T + t) * C + hh * D + d] = h[3][((b * H + hh) * T + t) * D + d];
    for (int i = 0; i < 4; i++) free(h[i]);
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
    /* key counts that are multiples of 4: the kernels' lanes share Philox blocks */
    {"tiles: causal, dropout 0.2, 128 tokens, head dim 64", fwd, ref, 3, QKV(1, 2, 128, 128, 64), 4,
     {1, 2, 128, 64}, -1, {1}, {0.2}, .flags = OT_NO_FD},
    {"tiles: dropout 0.1, 96 queries, 132 keys, head dim 64", fwd, ref, 3, QKV(1, 1, 96, 132, 64), 4,
     {1, 1, 96, 64}, -1, {0}, {0.1}, .flags = OT_NO_FD},
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
    /* packed qkv [B,T,3C] -> [B,T,C]: the generic path (unpack, attend, merge) on the CPU and
     * where cuDNN does not serve; cuDNN reads the layout in place for the "cudnn:" rows */
    {"packed qkv: 2 heads of 4, causal", fwd_packed, ref_packed, 1, {{OT_X, 3, {2, 5, 24}, -1, 1, 0}}, 3,
     {2, 5, 8}, -1, {1, 2}},
    {"packed qkv: full, 3 heads of 8, dropout 0.2", fwd_packed, ref_packed, 1, {{OT_X, 3, {1, 6, 72}, -1, 1, 0}}, 3,
     {1, 6, 24}, -1, {0, 3}, {0.2}},
    {"packed qkv: scale 0.3, one head of 16, causal", fwd_packed, ref_packed, 1, {{OT_X, 3, {1, 4, 48}, -1, 1, 0}},
     3, {1, 4, 16}, -1, {1, 1}, {0.0, 0.3}},
    {"packed qkv: no tokens", fwd_packed, ref_packed, 1, {{OT_X, 3, {1, 0, 24}, -1, 1, 0}}, 3, {1, 0, 8}, -1,
     {1, 2}},
    {"cudnn: packed qkv, 128 tokens, 2 heads of 64, causal", fwd_packed, ref_packed, 1,
     {{OT_X, 3, {1, 128, 384}, -1, 1, 0}}, 3, {1, 128, 128}, -1, {1, 2}, .flags = OT_NO_FD},
    {"cudnn: packed qkv, 2 x 256 tokens, 3 heads of 32, full", fwd_packed, ref_packed, 1,
     {{OT_X, 3, {2, 256, 288}, -1, 1, 0}}, 3, {2, 256, 96}, -1, {0, 3}, .flags = OT_NO_FD},
    {"packed qkv: 130 tokens, 2 heads of 64, causal, dropout 0.1 (flash)", fwd_packed, ref_packed, 1,
     {{OT_X, 3, {1, 130, 384}, -1, 1, 0}}, 3, {1, 130, 128}, -1, {1, 2}, {0.1}, .flags = OT_NO_FD},
    {"packed qkv: 2 x 128 tokens, 2 heads of 64, causal, dropout 0.2 (flash)", fwd_packed, ref_packed, 1,
     {{OT_X, 3, {2, 128, 384}, -1, 1, 0}}, 3, {2, 128, 128}, -1, {1, 2}, {0.2}, .flags = OT_NO_FD},
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
static dlt_status e_packed(dlt_ctx *ctx, int *out_touched, int64_t c3, int64_t heads, int32_t ndim, double p) {
    const int64_t qs[3] = {1, 4, c3};
    dlt_tensor *q = ot_zeros(ctx, DLT_F32, ndim == 3 ? qs : qs + 1, ndim), *o = OT_SENTINEL;
    dlt_status st = dlt_scaled_dot_product_attention_qkvpacked(q, heads, 1, p, 0.0, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(q);
    return st;
}
static dlt_status e_packed_width(dlt_ctx *ctx, int *t) { return e_packed(ctx, t, 20, 2, 3, 0.0); }
static dlt_status e_packed_heads(dlt_ctx *ctx, int *t) { return e_packed(ctx, t, 24, 3, 3, 0.0); }
static dlt_status e_packed_zero(dlt_ctx *ctx, int *t) { return e_packed(ctx, t, 24, 0, 3, 0.0); }
static dlt_status e_packed_rank(dlt_ctx *ctx, int *t) { return e_packed(ctx, t, 24, 2, 2, 0.0); }
static dlt_status e_packed_p(dlt_ctx *ctx, int *t) { return e_packed(ctx, t, 24, 2, 3, 1.5); }
static const ot_err ERRORS[] = {
    {"packed qkv: last dimension 20 not a multiple of 3", e_packed_width, DLT_ERR_SHAPE},
    {"packed qkv: C = 8 not a multiple of 3 heads", e_packed_heads, DLT_ERR_SHAPE},
    {"packed qkv: 0 heads", e_packed_zero, DLT_ERR_SHAPE},
    {"packed qkv: 2-D", e_packed_rank, DLT_ERR_SHAPE},
    {"packed qkv: dropout_p 1.5", e_packed_p, DLT_ERR_INVALID_ARGUMENT},
    {"k's head dim differs from q's", e_shape, DLT_ERR_SHAPE},
    {"3-D q", e_rank, DLT_ERR_SHAPE},
    {"q f32 with k bf16 outside autocast", e_dtype, DLT_ERR_DTYPE},
    {"negative dropout_p", e_p, DLT_ERR_INVALID_ARGUMENT},
};

OT_STEM(attention, CASES, ERRORS);
