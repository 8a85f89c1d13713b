/*
 * gpt.c - the GPT module family (include/dltrain/gpt.h): kinds "gpt", "gpt_block",
 * "causal_self_attention", "gpt_mlp" and the "module_dict" container, built from the
 * Linear, Embedding, LayerNorm, Dropout and GELU kinds so that the state names are
 * nanoGPT's (model.py, karpathy/nanoGPT):
 *   transformer.wte, transformer.wpe, transformer.drop, transformer.h.{i}.{ln_1, attn.c_attn,
 *   attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, transformer.ln_f, lm_head (tied: the same
 *   tensor as transformer.wte.weight).
 *
 * Block (pre-LayerNorm):  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
 * Attention: qkv = c_attn(x) [B,T,3C]; causal attention of its q, k, v heads (each [B,T,C]
 *   seen as [B,T,H,C/H], dropout on the weights in training) merged back to [B,T,C] by
 *   dlt_scaled_dot_product_attention_qkvpacked (nanoGPT's split, view, transpose, SDPA,
 *   transpose; without the copies where cuDNN serves); c_proj; dropout.
 * MLP: c_fc (C -> 4C), GELU (tanh form, GPT-2's "gelu_new"), c_proj (4C -> C), dropout;
 * c_proj's backward recomputes the GELU from its input instead of keeping its output. Under
 * fp16/bf16 autocast on CUDA c_fc and the GELU are one GEMM (dlt__linear_gelu), and the
 * GELU's derivative is applied by c_proj's data-gradient GEMM (dlt__gelu_linear).
 * The positions 0..block_size-1 live on the device from creation (a view of the first T is
 * taken per forward: nothing is copied from the host, so a step can be captured).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/dltrain/gpt.h"
#include "../core/options.h"
#include "nn_internal.h"

/* ---- a container without a forward (nn.ModuleDict) ---- */

static dlt_status dict_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in, dlt_tensor **out, int32_t n_out) {
    (void)in, (void)n_in, (void)out, (void)n_out;
    return dlt__err(DLT_ERR_NOT_SUPPORTED, "dlt_module_forward", "a %s module is a container without a forward",
                    m->kind->name);
}

static const dlt__module_kind dict_kind = {.name = "module_dict", .n_inputs = -1, .n_outputs = -1,
                                           .forward = dict_forward};

/* ---- attention ---- */

typedef struct attn_attrs {
    int32_t n_head;
    int32_t pad_;
    double dropout;
    dlt_module *c_attn, *c_proj, *resid_dropout;
} attn_attrs;

#define REL(t)                                                                                \
    do {                                                                                      \
        dlt_tensor_release(t);                                                                \
        (t) = NULL;                                                                           \
    } while (0)

static dlt_status attn_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in, dlt_tensor **out, int32_t n_out) {
    (void)n_in, (void)n_out;
    const attn_attrs *a = DLT__IMPL(m, attn_attrs);
    dlt_tensor *x = in[0];
    if (x->ndim != 3) {
        char b[96];
        return dlt__err(DLT_ERR_SHAPE, "dlt_module_forward", "attention input must be [B, T, C], got %s",
                        dlt__shape_str(x, b, sizeof b));
    }
    dlt_tensor *qkv = NULL, *y = NULL, *t = NULL;
    dlt_status st;
    DLT_CHECK_GOTO(st, dlt__module_forward(a->c_attn, x, &qkv), done);
    /* the heads are read from qkv and merged into y by the op itself (no split copies) */
    DLT_CHECK_GOTO(st, dlt_scaled_dot_product_attention_qkvpacked(qkv, a->n_head, 1, m->training ? a->dropout : 0.0,
                                                                  0.0, &y),
                   done);
    DLT_CHECK_GOTO(st, dlt__module_forward(a->c_proj, y, &t), done);
    st = dlt__module_forward(a->resid_dropout, t, &out[0]);
done:
    dlt_tensor_release(qkv);
    dlt_tensor_release(t);
    dlt_tensor_release(y);
    return st;
}

/* A block's attention over new positions: q, k, v of the new tokens from c_attn (split and
 * moved to heads, [B, H, T, D]), k and v appended to the layer's cache along the positions,
 * the new queries against every cached key: causal among the new ones when the cache was
 * empty (the prompt), nothing to mask for one new query at the end. */
static dlt_status attn_cached(dlt_module *m, dlt_tensor *x, dlt_tensor **kc, dlt_tensor **vc, dlt_tensor **out) {
    const attn_attrs *a = DLT__IMPL(m, attn_attrs);
    const int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], H = a->n_head;
    const int64_t s4[4] = {B, T, H, C / H}, s3[3] = {B, T, C};
    const int32_t heads[4] = {0, 2, 1, 3}; /* [B, T, H, D] <-> [B, H, T, D], its own inverse */
    const int32_t causal = *kc == NULL;
    dlt_tensor *qkv = NULL, *parts[3] = {NULL, NULL, NULL}, *hd[3] = {NULL, NULL, NULL};
    dlt_tensor *y = NULL, *yt = NULL, *y3 = NULL, *p = NULL;
    int32_t np = 0;
    dlt_status st = dlt__module_forward(a->c_attn, x, &qkv);
    if (st == DLT_OK) st = dlt_split(qkv, C, 2, parts, 3, &np);
    for (int i = 0; st == DLT_OK && i < 3; i++) {
        dlt_tensor *r = NULL;
        st = dlt_reshape(parts[i], s4, 4, &r);
        if (st == DLT_OK) st = dlt_permute(r, heads, 4, &hd[i]);
        dlt_tensor_release(r);
    }
    for (int i = 1; st == DLT_OK && i < 3; i++) {
        dlt_tensor **c = i == 1 ? kc : vc, *grown = NULL;
        if (*c) {
            dlt_tensor *both[2] = {*c, hd[i]};
            st = dlt_cat(both, 2, 2, &grown);
        } else {
            grown = dlt_tensor_retain(hd[i]);
        }
        if (st == DLT_OK) {
            dlt_tensor_release(*c);
            *c = grown;
        }
    }
    if (st == DLT_OK) st = dlt_scaled_dot_product_attention(hd[0], *kc, *vc, causal, 0.0, 0.0, &y);
    if (st == DLT_OK) st = dlt_permute(y, heads, 4, &yt);
    if (st == DLT_OK) st = dlt_reshape(yt, s3, 3, &y3);
    if (st == DLT_OK) st = dlt__module_forward(a->c_proj, y3, &p);
    if (st == DLT_OK) st = dlt__module_forward(a->resid_dropout, p, out);
    dlt_tensor_release(qkv);
    for (int i = 0; i < 3; i++) dlt_tensor_release(parts[i]), dlt_tensor_release(hd[i]);
    dlt_tensor_release(y), dlt_tensor_release(yt), dlt_tensor_release(y3), dlt_tensor_release(p);
    return st;
}

static int attn_describe(const dlt_module *m, char *buf, size_t n) {
    const attn_attrs *a = DLT__IMPL(m, attn_attrs);
    return snprintf(buf, n, "n_head=%d, causal=True, dropout=%g", a->n_head, a->dropout);
}

static const dlt__module_kind attn_kind = {.name = "causal_self_attention", .impl_size = sizeof(attn_attrs),
                                           .n_inputs = 1, .n_outputs = 1, .forward = attn_forward,
                                           .describe = attn_describe};

/* ---- MLP ---- */

typedef struct mlp_attrs {
    dlt_module *c_fc, *gelu, *c_proj, *dropout;
} mlp_attrs;

static dlt_status mlp_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in, dlt_tensor **out, int32_t n_out) {
    (void)n_in, (void)n_out;
    const mlp_attrs *a = DLT__IMPL(m, mlp_attrs);
    dlt_tensor *h = NULL, *g = NULL, *p = NULL;
    /* c_fc and the GELU (tanh form) in one GEMM where the backend fuses them (cuBLASLt's
     * GELU_AUX_BIAS epilogue under autocast): h carries the gradient and the GELU's derivative
     * belongs to c_proj's node, whose data-gradient GEMM applies it in its epilogue (DGELU).
     * Else the two modules. */
    const dlt_module *fc = a->c_fc, *cp = a->c_proj;
    dlt_tensor *cp_w = cp->state[0].t, *cp_b = cp->n_state > 1 ? cp->state[1].t : NULL;
    dlt_status st = dlt__linear_gelu(in[0], fc->state[0].t, fc->n_state > 1 ? fc->state[1].t : NULL, &g, &h);
    const int fused = st == DLT_OK && g;
    if (st == DLT_OK && !fused) st = dlt__module_forward(a->c_fc, in[0], &h);
    if (st == DLT_OK && !fused) st = dlt__module_forward(a->gelu, h, &g);
    /* c_proj keeps the GELU's input h for its backward, not the output g (recomputed there):
     * one [B, T, 4C] activation less per block (GPT-2 124M at 16 x 1024: 1.2 GB) */
    if (st == DLT_OK && fused) st = dlt__gelu_linear(h, g, cp_w, cp_b, &p);
    else if (st == DLT_OK) st = dlt__linear_recompute(g, h, DLT_UN_GELU_TANH, 0.0, cp_w, cp_b, &p);
    if (st == DLT_OK) st = dlt__module_forward(a->dropout, p, &out[0]);
    dlt_tensor_release(h);
    dlt_tensor_release(g);
    dlt_tensor_release(p);
    return st;
}

static const dlt__module_kind mlp_kind = {.name = "gpt_mlp", .impl_size = sizeof(mlp_attrs), .n_inputs = 1,
                                          .n_outputs = 1, .forward = mlp_forward};

/* ---- block ---- */

/* A LayerNorm whose output only feeds a Linear (ln_1, ln_2, ln_f): under fp16/bf16 autocast
 * it is written in autocast's dtype (dlt_layer_norm_to), the values the Linear casts the f32
 * output to anyway, without the f32 tensor and the cast (GPT-2 124M at 16 x 1024: 25 casts of
 * 50 MB each way per step). */
static dlt_status ln_into_linear(dlt_module *ln, dlt_tensor *x, dlt_tensor **out) {
    const int32_t ac = dlt_autocast_dtype(x->ctx);
    if (ac == DLT_F16 || ac == DLT_BF16) return dlt__layernorm_forward_to(ln, x, ac, out);
    return dlt__module_forward(ln, x, out);
}

/* x + b, then a LayerNorm that only feeds a Linear, as one op where it fits
 * (dlt__layernorm_add_forward_to: the add's output is read once, and the backward writes the
 * residual gradient and its copy in b's dtype in one pass), else dlt_add and ln_into_linear:
 * the same numbers either way. *sum = x + b, *h = the LayerNorm's output. */
static dlt_status add_ln_into_linear(dlt_module *ln, dlt_tensor *x, dlt_tensor *b, dlt_tensor **sum, dlt_tensor **h) {
    const int32_t ac = dlt_autocast_dtype(x->ctx);
    dlt_status st = dlt__layernorm_add_forward_to(ln, x, b, ac == DLT_F16 || ac == DLT_BF16 ? ac : DLT_F32, sum, h);
    if (st != DLT_OK || *sum) return st;
    st = dlt_add(x, b, sum);
    if (st == DLT_OK) st = ln_into_linear(ln, *sum, h);
    if (st != DLT_OK) {
        dlt_tensor_release(*sum);
        *sum = NULL;
    }
    return st;
}

typedef struct block_attrs {
    dlt_module *ln_1, *attn, *ln_2, *mlp;
} block_attrs;

/* x + attn(ln_1(x)), then + mlp(ln_2(.)). pend (or NULL): the previous block's MLP output,
 * not yet added to x: ln_1 then runs on x + pend, the add and the LayerNorm as one op. With
 * pend_out, the block leaves its own last add to the caller the same way: *out = the residual
 * before it, *pend_out = the MLP's output. kc/vc: a layer's key/value cache (generation,
 * attn_cached) or NULL (the attention module). */
static dlt_status block_run(dlt_module *m, dlt_tensor *x, dlt_tensor *pend, dlt_tensor **kc, dlt_tensor **vc,
                            dlt_tensor **out, dlt_tensor **pend_out) {
    const block_attrs *a = DLT__IMPL(m, block_attrs);
    dlt_tensor *h = NULL, *b = NULL, *x0 = NULL, *x1 = NULL;
    dlt_status st;
    if (pend) {
        st = add_ln_into_linear(a->ln_1, x, pend, &x0, &h);
    } else {
        x0 = dlt_tensor_retain(x);
        st = ln_into_linear(a->ln_1, x, &h);
    }
    if (st == DLT_OK) st = kc ? attn_cached(a->attn, h, kc, vc, &b) : dlt__module_forward(a->attn, h, &b);
    REL(h);
    if (st == DLT_OK) st = add_ln_into_linear(a->ln_2, x0, b, &x1, &h);
    REL(b);
    if (st == DLT_OK) st = dlt__module_forward(a->mlp, h, &b);
    if (st == DLT_OK && pend_out) {
        *out = x1, x1 = NULL;
        *pend_out = b, b = NULL;
    } else if (st == DLT_OK) {
        st = dlt_add(x1, b, out);
    }
    dlt_tensor_release(h);
    dlt_tensor_release(b);
    dlt_tensor_release(x0);
    dlt_tensor_release(x1);
    return st;
}

static dlt_status block_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in, dlt_tensor **out, int32_t n_out) {
    (void)n_in, (void)n_out;
    return block_run(m, in[0], NULL, NULL, NULL, out, NULL);
}

static const dlt__module_kind block_kind = {.name = "gpt_block", .impl_size = sizeof(block_attrs), .n_inputs = 1,
                                            .n_outputs = 1, .forward = block_forward};

/* ---- GPT ---- */

typedef struct gpt_attrs {
    dlt_gpt_config cfg;
    dlt_tensor *pos; /* int64 [block_size]: 0, 1, ... on the device */
    dlt_module *wte, *wpe, *drop, *h, *ln_f, *lm_head;
} gpt_attrs;

static void gpt_destroy(dlt_module *m) { dlt_tensor_release(DLT__IMPL(m, gpt_attrs)->pos); }

/* drop(wte(idx) + wpe(positions pos0 .. pos0 + T - 1)) for idx [B, T] */
static dlt_status embed(const gpt_attrs *a, dlt_tensor *idx, int64_t pos0, dlt_tensor **out) {
    dlt_tensor *pos = NULL, *tok = NULL, *pe = NULL, *t = NULL;
    dlt_status st = dlt_narrow(a->pos, 0, pos0, idx->shape[1], &pos); /* a view */
    if (st == DLT_OK) st = dlt__module_forward(a->wte, idx, &tok);
    if (st == DLT_OK) st = dlt__module_forward(a->wpe, pos, &pe);
    if (st == DLT_OK) st = dlt_add(tok, pe, &t);
    if (st == DLT_OK) st = dlt__module_forward(a->drop, t, out);
    dlt_tensor_release(pos), dlt_tensor_release(tok), dlt_tensor_release(pe), dlt_tensor_release(t);
    return st;
}

/* The blocks over *x (replaced by the residual stream at the end): each block's last residual
 * add runs with the next LayerNorm (the next block's ln_1), and the last one is left to the
 * caller (*pend, for ln_f), see block_run. A child that is not a GPT block (not built by
 * dlt_gpt_create) gets the stream with every add done. */
static dlt_status run_blocks(const gpt_attrs *a, dlt_tensor **x, dlt_tensor **pend) {
    dlt_status st = DLT_OK;
    *pend = NULL;
    for (int32_t i = 0; st == DLT_OK && i < a->h->n_children; i++) {
        dlt_module *c = a->h->children[i];
        dlt_tensor *nx = NULL, *np = NULL;
        if (c->kind == &block_kind) {
            st = block_run(c, *x, *pend, NULL, NULL, &nx, &np);
        } else {
            dlt_tensor *s = NULL;
            st = *pend ? dlt_add(*x, *pend, &s) : DLT_OK;
            if (st == DLT_OK) st = dlt__module_forward(c, s ? s : *x, &nx);
            dlt_tensor_release(s);
        }
        dlt_tensor_release(*pend);
        *pend = np;
        if (st == DLT_OK) {
            dlt_tensor_release(*x);
            *x = nx;
        }
    }
    if (st != DLT_OK) REL(*pend);
    return st;
}

/* The forward; want_logits 0 (dlt_gpt_forward without logits): out[0] is NULL and the loss
 * may take the logits' memory for their gradient (dlt__cross_entropy_padded's consume). */
static dlt_status gpt_run(dlt_module *m, dlt_tensor *const *in, int32_t n_in, dlt_tensor **out, int32_t n_out,
                          int want_logits) {
    static const char *F = "dlt_gpt_forward";
    const gpt_attrs *a = DLT__IMPL(m, gpt_attrs);
    dlt_tensor *idx = in[0], *targets = n_in > 1 ? in[1] : NULL;
    char b1[96], b2[96];
    if (n_in < 1 || n_in > 2 || n_out < 1 || n_out > 2)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "a GPT takes idx [and targets] and gives logits [and loss]");
    if (idx->ndim != 2 || (idx->dtype != DLT_I64 && idx->dtype != DLT_I32))
        return dlt__err(DLT_ERR_SHAPE, F, "idx must be an int64/int32 [B, T] tensor, got %s %s",
                        dlt_dtype_name(idx->dtype), dlt__shape_str(idx, b1, sizeof b1));
    const int64_t T = idx->shape[1];
    if (T > a->cfg.block_size)
        return dlt__err(DLT_ERR_SHAPE, F, "sequence length %lld exceeds the block size %lld", (long long)T,
                        (long long)a->cfg.block_size);
    if (targets && (!dlt__same_shape(targets, idx) || (targets->dtype != DLT_I64 && targets->dtype != DLT_I32)))
        return dlt__err(DLT_ERR_SHAPE, F, "targets %s %s must be int64/int32 of idx's shape %s",
                        dlt_dtype_name(targets->dtype), dlt__shape_str(targets, b1, sizeof b1),
                        dlt__shape_str(idx, b2, sizeof b2));
    if (n_out == 2 && !targets) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "a loss needs targets");
    dlt_tensor *x = NULL, *t = NULL, *logits = NULL;
    dlt_status st;
    DLT_CHECK_GOTO(st, embed(a, idx, 0, &x), done);
    DLT_CHECK_GOTO(st, run_blocks(a, &x, &t), done);
    {
        /* ln_f, with the last block's residual add (t) when it was left pending */
        dlt_tensor *s = NULL, *hf = NULL;
        st = t ? add_ln_into_linear(a->ln_f, x, t, &s, &hf) : ln_into_linear(a->ln_f, x, &hf);
        dlt_tensor_release(s);
        REL(x);
        REL(t);
        x = hf;
        if (st != DLT_OK) goto done;
    }
    DLT_CHECK_GOTO(st, dlt__module_forward(a->lm_head, x, &logits), done);
    if (targets) {
        dlt_tensor *loss = NULL;
        DLT_CHECK_GOTO(st, dlt__cross_entropy_padded(logits, targets, a->cfg.vocab_size, -1, DLT_REDUCTION_MEAN, 0.0,
                                                     !want_logits, F, &loss),
                       done);
        if (n_out == 2) out[1] = loss;
        else dlt_tensor_release(loss);
    }
    if (want_logits) {
        out[0] = logits;
        logits = NULL;
    }
done:
    dlt_tensor_release(x);
    dlt_tensor_release(t);
    dlt_tensor_release(logits);
    return st;
}

static dlt_status gpt_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in, dlt_tensor **out, int32_t n_out) {
    return gpt_run(m, in, n_in, out, n_out, 1);
}

static int gpt_describe(const dlt_module *m, char *buf, size_t n) {
    const dlt_gpt_config *c = &DLT__IMPL(m, gpt_attrs)->cfg;
    return snprintf(buf, n, "n_layer=%d, n_head=%d, n_embd=%lld, vocab_size=%lld, block_size=%lld, bias=%s, tied=%s",
                    c->n_layer, c->n_head, (long long)c->n_embd, (long long)c->vocab_size, (long long)c->block_size,
                    c->bias ? "True" : "False", c->tied ? "True" : "False");
}

static const dlt__module_kind gpt_kind = {.name = "gpt", .impl_size = sizeof(gpt_attrs), .n_inputs = -1,
                                          .n_outputs = -1, .forward = gpt_forward, .destroy = gpt_destroy,
                                          .describe = gpt_describe};

/* ---- generation with a KV cache (gpt_generate.c) ---- */

dlt_status dlt__gpt_forward_cached(dlt_module *gpt, dlt_tensor *idx, int64_t pos0, dlt_tensor **cache,
                                   dlt_tensor **last_logits) {
    static const char *F = "dlt_gpt_generate";
    const gpt_attrs *a = DLT__IMPL(gpt, gpt_attrs);
    const int64_t T = idx->ndim == 2 ? idx->shape[1] : 0;
    if (T < 1 || pos0 < 0 || pos0 + T > a->cfg.block_size || (pos0 == 0) != (cache[0] == NULL) ||
        (pos0 > 0 && T != 1))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "a cached step takes the prompt at 0 or one token after it, "
                        "within the block (%lld tokens at %lld)", (long long)T, (long long)pos0);
    dlt_tensor *x = NULL, *last = NULL, *h = NULL;
    dlt_status st = embed(a, idx, pos0, &x);
    for (int32_t i = 0; st == DLT_OK && i < a->h->n_children; i++) {
        dlt_tensor *nx = NULL;
        st = block_run(a->h->children[i], x, NULL, &cache[2 * i], &cache[2 * i + 1], &nx, NULL);
        dlt_tensor_release(x);
        x = nx;
    }
    /* only the last position's logits are wanted */
    if (st == DLT_OK) st = dlt_narrow(x, 1, T - 1, 1, &last);
    if (st == DLT_OK) st = ln_into_linear(a->ln_f, last, &h);
    if (st == DLT_OK) st = dlt__module_forward(a->lm_head, h, last_logits);
    dlt_tensor_release(x), dlt_tensor_release(last), dlt_tensor_release(h);
    return st;
}

int32_t dlt__gpt_cache_len(const dlt_module *gpt) { return 2 * DLT__IMPL(gpt, gpt_attrs)->h->n_children; }

/* ---- configuration ---- */

/* GPT-2 124M */
static const dlt_gpt_config GPT_DEFAULTS = {.size = sizeof(dlt_gpt_config), .n_layer = 12, .n_head = 12, .bias = 1,
                                            .tied = 1, .n_embd = 768, .vocab_size = 50257, .block_size = 1024,
                                            .dropout = 0.0};
/* the first release's struct ends after dropout */
#define GPT_CONFIG_V1 DLT__FIELD_END(dlt_gpt_config, dropout)

void dlt_gpt_config_init(dlt_gpt_config *c, uint32_t size) {
    dlt__options_fill(c, size, &GPT_DEFAULTS, sizeof GPT_DEFAULTS, GPT_CONFIG_V1);
}

dlt_status dlt_gpt_config_preset_init(const char *name, dlt_gpt_config *c, uint32_t size) {
    static const char *F = "dlt_gpt_config_preset";
    DLT_NULL_CHECK(name, F);
    DLT_NULL_CHECK(c, F);
    if (size < GPT_CONFIG_V1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "size %u is below the smallest dlt_gpt_config (%zu bytes)",
                        (unsigned)size, (size_t)GPT_CONFIG_V1);
    dlt_gpt_config g = GPT_DEFAULTS;
    if (!strcmp(name, "gpt2")) {
    } else if (!strcmp(name, "gpt2-medium")) {
        g.n_layer = 24, g.n_head = 16, g.n_embd = 1024;
    } else if (!strcmp(name, "gpt2-large")) {
        g.n_layer = 36, g.n_head = 20, g.n_embd = 1280;
    } else if (!strcmp(name, "gpt2-xl")) {
        g.n_layer = 48, g.n_head = 25, g.n_embd = 1600;
    } else if (!strcmp(name, "shakespeare-char")) {
        g.n_layer = 6, g.n_head = 6, g.n_embd = 384, g.vocab_size = 65, g.block_size = 256, g.bias = 0, g.dropout = 0.2;
    } else if (!strcmp(name, "tiny")) {
        g.n_layer = 2, g.n_head = 2, g.n_embd = 32, g.vocab_size = 65, g.block_size = 32, g.bias = 0;
    } else {
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "unknown preset '%s' (gpt2, gpt2-medium, gpt2-large, gpt2-xl, shakespeare-char, tiny)", name);
    }
    dlt__options_fill(c, size, &g, sizeof g, GPT_CONFIG_V1);
    return DLT_OK;
}

static dlt_status check_config(const dlt_gpt_config *c, const char *F) {
    if (c->n_layer < 0 || c->n_head < 1 || c->n_embd < 1 || c->vocab_size < 1 || c->block_size < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "n_layer %d, n_head %d, n_embd %lld, vocab_size %lld, block_size %lld: all must be >= 1 "
                        "(n_layer >= 0)", c->n_layer, c->n_head, (long long)c->n_embd, (long long)c->vocab_size,
                        (long long)c->block_size);
    if (c->n_embd % c->n_head)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "n_embd %lld does not divide by n_head %d", (long long)c->n_embd,
                        c->n_head);
    if (c->padded_vocab_size != 0 && c->padded_vocab_size < c->vocab_size)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "padded_vocab_size %lld is below vocab_size %lld",
                        (long long)c->padded_vocab_size, (long long)c->vocab_size);
    if (!(c->dropout >= 0.0 && c->dropout < 1.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "dropout %g is not in [0, 1)", c->dropout);
    if (c->n_embd > ((int64_t)1 << 20) || c->vocab_size > ((int64_t)1 << 31) || c->block_size > ((int64_t)1 << 24) ||
        c->n_layer > 4096)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the configuration is too large for this library");
    return DLT_OK;
}

/* ---- construction ---- */

static dlt_status normal_(dlt_tensor *t, double std) { return dlt_tensor_rand_normal(t, 0.0, std); }

/* A Linear child with GPT-2's init: weight N(0, std), bias zeros. */
static dlt_status add_linear(dlt_module *parent, const char *name, int64_t in, int64_t out, int32_t bias, double std,
                             dlt_module **slot, const char *F) {
    dlt_module *c = NULL;
    dlt_status st = dlt__linear_new(parent->ctx, in, out, bias, F, &c);
    if (st == DLT_OK) st = normal_(c->state[0].t, std);
    if (st == DLT_OK && bias) st = dlt_tensor_fill(c->state[1].t, 0.0);
    if (st != DLT_OK) {
        dlt_module_destroy(c);
        return st;
    }
    return dlt__module_adopt(parent, name, DLT_OK, c, slot, F);
}

static dlt_status new_block(dlt_ctx *ctx, const dlt_gpt_config *c, const char *F, dlt_module **out) {
    dlt_module *b = NULL, *at = NULL, *mlp = NULL;
    const double std = 0.02, proj_std = 0.02 / sqrt(2.0 * (c->n_layer > 0 ? c->n_layer : 1));
    DLT_CHECK(dlt__module_new(ctx, &block_kind, F, &b));
    block_attrs *ba = DLT__IMPL(b, block_attrs);
    dlt_status st;
    /* ln_1 */
    {
        dlt_module *ln = NULL;
        st = dlt__layernorm_new(ctx, c->n_embd, 1e-5, 1, c->bias, F, &ln);
        st = dlt__module_adopt(b, "ln_1", st, ln, &ba->ln_1, F);
        if (st != DLT_OK) goto fail;
    }
    /* attn */
    st = dlt__module_new(ctx, &attn_kind, F, &at);
    if (st != DLT_OK) goto fail;
    {
        attn_attrs *aa = DLT__IMPL(at, attn_attrs);
        aa->n_head = c->n_head;
        aa->dropout = c->dropout;
        st = add_linear(at, "c_attn", c->n_embd, 3 * c->n_embd, c->bias, std, &aa->c_attn, F);
        if (st == DLT_OK) st = add_linear(at, "c_proj", c->n_embd, c->n_embd, c->bias, proj_std, &aa->c_proj, F);
        if (st == DLT_OK) {
            dlt_module *d = NULL;
            st = dlt__dropout_new(ctx, c->dropout, F, &d);
            st = dlt__module_adopt(at, "resid_dropout", st, d, &aa->resid_dropout, F);
        }
        if (st != DLT_OK) {
            dlt_module_destroy(at);
            goto fail;
        }
    }
    st = dlt__module_adopt(b, "attn", DLT_OK, at, &ba->attn, F);
    if (st != DLT_OK) goto fail;
    /* ln_2 */
    {
        dlt_module *ln = NULL;
        st = dlt__layernorm_new(ctx, c->n_embd, 1e-5, 1, c->bias, F, &ln);
        st = dlt__module_adopt(b, "ln_2", st, ln, &ba->ln_2, F);
        if (st != DLT_OK) goto fail;
    }
    /* mlp */
    st = dlt__module_new(ctx, &mlp_kind, F, &mlp);
    if (st != DLT_OK) goto fail;
    {
        mlp_attrs *ma = DLT__IMPL(mlp, mlp_attrs);
        st = add_linear(mlp, "c_fc", c->n_embd, 4 * c->n_embd, c->bias, std, &ma->c_fc, F);
        if (st == DLT_OK) {
            dlt_module *g = NULL;
            st = dlt_gelu_create(ctx, DLT_GELU_TANH, &g);
            st = dlt__module_adopt(mlp, "gelu", st, g, &ma->gelu, F);
        }
        if (st == DLT_OK) st = add_linear(mlp, "c_proj", 4 * c->n_embd, c->n_embd, c->bias, proj_std, &ma->c_proj, F);
        if (st == DLT_OK) {
            dlt_module *d = NULL;
            st = dlt__dropout_new(ctx, c->dropout, F, &d);
            st = dlt__module_adopt(mlp, "dropout", st, d, &ma->dropout, F);
        }
        if (st != DLT_OK) {
            dlt_module_destroy(mlp);
            goto fail;
        }
    }
    st = dlt__module_adopt(b, "mlp", DLT_OK, mlp, &ba->mlp, F);
    if (st != DLT_OK) goto fail;
    *out = b;
    return DLT_OK;
fail:
    dlt_module_destroy(b);
    return st;
}

dlt_status dlt_gpt_create(dlt_ctx *ctx, const dlt_gpt_config *cfg, dlt_module **out) {
    static const char *F = "dlt_gpt_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    dlt_gpt_config c = GPT_DEFAULTS;
    DLT_CHECK(dlt__options_read(&c, sizeof c, cfg, GPT_CONFIG_V1, "dlt_gpt_config", F));
    DLT_CHECK(check_config(&c, F));
    if (c.padded_vocab_size == 0) c.padded_vocab_size = c.vocab_size;
    dlt_module *m = NULL, *tr = NULL;
    DLT_CHECK(dlt__module_new(ctx, &gpt_kind, F, &m));
    gpt_attrs *a = DLT__IMPL(m, gpt_attrs);
    a->cfg = c;
    dlt_status st;
    /* positions on the device */
    {
        int64_t *pv = malloc((size_t)c.block_size * sizeof *pv);
        if (!pv) {
            st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the positions");
            goto fail;
        }
        for (int64_t i = 0; i < c.block_size; i++) pv[i] = i;
        st = dlt_tensor_from_host(ctx, DLT_I64, &c.block_size, 1, DLT_FORMAT_CONTIGUOUS, pv,
                                  (size_t)c.block_size * sizeof *pv, &a->pos);
        free(pv);
        if (st != DLT_OK) goto fail;
    }
    DLT_CHECK_GOTO(st, dlt__module_new(ctx, &dict_kind, F, &tr), fail);
    st = dlt__module_adopt(m, "transformer", DLT_OK, tr, NULL, F);
    if (st != DLT_OK) goto fail;
    {
        dlt_module *e = NULL;
        st = dlt__embedding_new(ctx, c.padded_vocab_size, c.n_embd, DLT_NO_PADDING_IDX, F, &e);
        if (st == DLT_OK) st = normal_(e->state[0].t, 0.02);
        st = dlt__module_adopt(tr, "wte", st, e, &a->wte, F);
        if (st != DLT_OK) goto fail;
        e = NULL;
        st = dlt__embedding_new(ctx, c.block_size, c.n_embd, DLT_NO_PADDING_IDX, F, &e);
        if (st == DLT_OK) st = normal_(e->state[0].t, 0.02);
        st = dlt__module_adopt(tr, "wpe", st, e, &a->wpe, F);
        if (st != DLT_OK) goto fail;
        dlt_module *d = NULL;
        st = dlt__dropout_new(ctx, c.dropout, F, &d);
        st = dlt__module_adopt(tr, "drop", st, d, &a->drop, F);
        if (st != DLT_OK) goto fail;
    }
    {
        dlt_module *h = NULL;
        st = dlt_sequential_create(ctx, &h);
        st = dlt__module_adopt(tr, "h", st, h, &a->h, F);
        if (st != DLT_OK) goto fail;
        for (int32_t i = 0; i < c.n_layer; i++) {
            dlt_module *b = NULL;
            char name[16];
            snprintf(name, sizeof name, "%d", i);
            DLT_CHECK_GOTO(st, new_block(ctx, &c, F, &b), fail);
            st = dlt__module_adopt(a->h, name, DLT_OK, b, NULL, F);
            if (st != DLT_OK) goto fail;
        }
        dlt_module *ln = NULL;
        st = dlt__layernorm_new(ctx, c.n_embd, 1e-5, 1, c.bias, F, &ln);
        st = dlt__module_adopt(tr, "ln_f", st, ln, &a->ln_f, F);
        if (st != DLT_OK) goto fail;
    }
    /* lm_head: with tying its weight is the token embedding's tensor */
    st = add_linear(m, "lm_head", c.n_embd, c.padded_vocab_size, 0, 0.02, &a->lm_head, F);
    if (st != DLT_OK) goto fail;
    if (c.tied) {
        dlt_tensor *w = a->wte->state[0].t;
        dlt_tensor_release(a->lm_head->state[0].t);
        a->lm_head->state[0].t = dlt_tensor_retain(w);
        dlt__module_invalidate(a->lm_head);
    }
    *out = m;
    return DLT_OK;
fail:
    dlt_module_destroy(m);
    return dlt__err_wrap(st, F);
}

dlt_status dlt_gpt_get_config(const dlt_module *gpt, dlt_gpt_config *c) {
    static const char *F = "dlt_gpt_get_config";
    DLT_NULL_CHECK(gpt, F);
    DLT_NULL_CHECK(c, F);
    if (gpt->kind != &gpt_kind)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the module is a %s, not a gpt", gpt->kind_name);
    size_t n = 0;
    DLT_CHECK(dlt__options_out_size(c, sizeof *c, GPT_CONFIG_V1, "dlt_gpt_config", F, &n));
    const uint32_t size = c->size; /* the caller's struct keeps its own size */
    memcpy(c, &DLT__IMPL(gpt, gpt_attrs)->cfg, n);
    c->size = size;
    return DLT_OK;
}

int dlt__is_gpt(const dlt_module *m) { return m && m->kind == &gpt_kind; }

dlt_status dlt_gpt_forward(dlt_module *gpt, dlt_tensor *idx, dlt_tensor *targets, dlt_tensor **logits,
                           dlt_tensor **loss) {
    static const char *F = "dlt_gpt_forward";
    DLT_NULL_CHECK(gpt, F);
    DLT_CHECK(dlt__check_tensor(idx, F, "idx"));
    if (gpt->kind != &gpt_kind)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the module is a %s, not a gpt", gpt->kind_name);
    if (!logits && !loss) return dlt__err(DLT_ERR_NULL_POINTER, F, "neither logits nor loss was asked for");
    if (loss && !targets) return dlt__err(DLT_ERR_NULL_POINTER, F, "a loss needs targets");
    if (targets) {
        DLT_CHECK(dlt__check_tensor(targets, F, "targets"));
        DLT_CHECK(dlt__check_same_ctx(idx, targets, F, "idx", "targets"));
    }
    if (idx->ctx != gpt->ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F, "idx and the model belong to different contexts");
    dlt_tensor *in[2] = {idx, targets}, *o[2] = {NULL, NULL};
    dlt_status st = gpt_run(gpt, in, targets ? 2 : 1, o, loss ? 2 : 1, logits != NULL);
    if (st != DLT_OK) {
        dlt_tensor_release(o[0]);
        dlt_tensor_release(o[1]);
        return dlt__err_wrap(st, F);
    }
    if (logits) *logits = o[0];
    else dlt_tensor_release(o[0]);
    if (loss) *loss = o[1];
    return DLT_OK;
}
