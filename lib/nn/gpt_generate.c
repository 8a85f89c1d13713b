/*
 * gpt_generate.c - text generation with a GPT module (nanoGPT's model.generate): for each
 * new token, run the last block_size tokens, take the last position's logits over the real
 * vocabulary, divide by the temperature, keep the top_k largest, softmax, and draw one
 * token. While the sequence fits the block, the blocks' keys and values are kept (a KV
 * cache, dlt__gpt_forward_cached): the prompt runs once and each new token alone. Past the
 * block the window slides and every position moves, so the last block_size tokens run again
 * each step, as nanoGPT does for all steps. The draw uses Philox (lib/kernel/philox.h) with
 * the caller's seed and the step as the counter, so a seed gives the same text on every
 * device and run. Without gradients, in evaluation mode (the caller's mode is restored).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/dltrain/gpt.h"
#include "../kernel/philox.h"
#include "nn_internal.h"

typedef struct scored {
    float v;
    int64_t i;
} scored;

static int by_value_desc(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return x->i < y->i ? -1 : x->i > y->i; /* ties: lower id first (stable choice) */
}

/* Draws one id from softmax(logits/temperature) restricted to the top_k largest. */
static int64_t sample(float *logits, scored *tmp, int64_t V, double temperature, int32_t top_k, uint64_t seed,
                      uint64_t step) {
    int64_t n = V;
    for (int64_t i = 0; i < V; i++) tmp[i] = (scored){(float)(logits[i] / temperature), i};
    if (top_k > 0 && top_k < V) {
        qsort(tmp, (size_t)V, sizeof *tmp, by_value_desc);
        n = top_k;
    }
    double m = -INFINITY, s = 0.0;
    for (int64_t i = 0; i < n; i++) m = tmp[i].v > m ? tmp[i].v : m;
    for (int64_t i = 0; i < n; i++) s += exp((double)tmp[i].v - m);
    const double u = (double)dlt__philox_uniform(seed, step, 0) * s;
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) {
        acc += exp((double)tmp[i].v - m);
        if (u < acc) return tmp[i].i;
    }
    return tmp[n - 1].i;
}

dlt_status dlt_gpt_generate(dlt_module *gpt, const int64_t *prompt, int64_t n_prompt, int64_t max_new_tokens,
                            double temperature, int32_t top_k, uint64_t seed, int64_t *out) {
    static const char *F = "dlt_gpt_generate";
    DLT_NULL_CHECK(gpt, F);
    DLT_NULL_CHECK(out, F);
    if (!dlt__is_gpt(gpt)) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the module is a %s, not a gpt", gpt->kind_name);
    if (n_prompt < 1) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the prompt needs at least one token");
    DLT_NULL_CHECK(prompt, F);
    if (max_new_tokens < 0 || max_new_tokens > ((int64_t)1 << 30))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "max_new_tokens %lld is out of range", (long long)max_new_tokens);
    if (!(temperature > 0.0) || isinf(temperature))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "temperature %g must be positive and finite", temperature);
    if (top_k < 0) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "top_k %d is negative", top_k);
    dlt_gpt_config c;
    dlt_gpt_config_default(&c);
    DLT_CHECK(dlt_gpt_get_config(gpt, &c));
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c.vocab_size)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "prompt token %lld at %lld is outside [0, %lld)",
                            (long long)prompt[i], (long long)i, (long long)c.vocab_size);
    dlt_ctx *ctx = gpt->ctx;
    const int64_t total = n_prompt + max_new_tokens, Vp = c.padded_vocab_size;
    int64_t *seq = malloc((size_t)total * sizeof *seq);
    float *row = malloc((size_t)Vp * sizeof *row);
    scored *tmp = malloc((size_t)Vp * sizeof *tmp);
    if (!seq || !row || !tmp) {
        free(seq), free(row), free(tmp);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %lld tokens", (long long)total);
    }
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    const int32_t was_training = dlt_module_is_training(gpt);
    int32_t prev_grad = 1;
    dlt_status st = dlt_grad_set_enabled(ctx, 0, &prev_grad);
    if (st == DLT_OK && was_training) st = dlt_module_set_training(gpt, 0);
    const int32_t n_cache = dlt__gpt_cache_len(gpt);
    dlt_tensor **cache = calloc((size_t)n_cache, sizeof *cache);
    if (!cache) st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the key/value cache");
    int64_t cached = 0; /* positions in the cache */
    for (int64_t n = n_prompt; st == DLT_OK && n < total; n++) {
        const int use_cache = n <= c.block_size; /* seq[0, n) fits: positions 0 .. n-1 */
        const int64_t Tc = use_cache ? n - cached : c.block_size, from = use_cache ? cached : n - Tc;
        const int64_t shape[2] = {1, Tc};
        dlt_tensor *idx = NULL, *logits = NULL, *last = NULL, *f32 = NULL;
        st = dlt_tensor_from_host(ctx, DLT_I64, shape, 2, DLT_FORMAT_CONTIGUOUS, seq + from,
                                  (size_t)Tc * sizeof *seq, &idx);
        if (st == DLT_OK && use_cache) {
            st = dlt__gpt_forward_cached(gpt, idx, cached, cache, &last);
            cached = n;
        } else if (st == DLT_OK) {
            if (cached) /* the window slides from here on: the cache is of no more use */
                for (int32_t i = 0; i < n_cache; i++) dlt_tensor_release(cache[i]), cache[i] = NULL;
            cached = 0;
            st = dlt_gpt_forward(gpt, idx, NULL, &logits, NULL);
            if (st == DLT_OK) st = dlt_narrow(logits, 1, Tc - 1, 1, &last);
        }
        if (st == DLT_OK) st = dlt_tensor_cast(last, DLT_F32, &f32);
        if (st == DLT_OK) st = dlt_tensor_copy_to_host(f32, row, (size_t)Vp * sizeof *row);
        if (st == DLT_OK) seq[n] = sample(row, tmp, c.vocab_size, temperature, top_k, seed, (uint64_t)(n - n_prompt));
        dlt_tensor_release(idx), dlt_tensor_release(logits), dlt_tensor_release(last), dlt_tensor_release(f32);
    }
    for (int32_t i = 0; cache && i < n_cache; i++) dlt_tensor_release(cache[i]);
    free(cache);
    if (was_training) {
        const dlt_status s2 = dlt_module_set_training(gpt, 1);
        if (st == DLT_OK) st = s2;
    }
    const dlt_status s3 = dlt_grad_set_enabled(ctx, prev_grad, NULL);
    if (st == DLT_OK) st = s3;
    if (st == DLT_OK) memcpy(out, seq, (size_t)total * sizeof *seq);
    free(seq), free(row), free(tmp);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}
