/*
 * dltrain/gpt.h - the GPT module family: GPT-2 (and nanoGPT's variants) as a dlt_module,
 * with PyTorch/nanoGPT parameter names, GPT-2's initialisation, a loss given targets,
 * Hugging Face GPT-2 checkpoints, and text generation.
 *
 * A GPT is a dlt_module (nn.h): its state names are nanoGPT's
 * ("transformer.wte.weight", "transformer.h.0.attn.c_attn.weight", ..., "lm_head.weight",
 * the same tensor as the token embedding when the head is tied), so the optimizers,
 * dlt_module_save/load, train/eval and summaries work on it unchanged.
 *
 * Forward: idx [B, T] int64/int32 token ids (T <= block_size) -> logits [B, T, V'] where
 * V' = padded_vocab_size (the extra columns of a padded vocabulary never take part in the
 * loss). With targets [B, T] the mean cross-entropy over the first vocab_size classes is
 * returned too (targets equal to -1 are ignored, as nanoGPT).
 */
#ifndef DLTRAIN_GPT_H
#define DLTRAIN_GPT_H

#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A GPT's shape. Fill with dlt_gpt_config_default or dlt_gpt_config_preset, then change
 *  fields; `size` makes the struct ABI-safe (fields are only ever appended). */
typedef struct dlt_gpt_config {
    uint32_t size;             /**< sizeof(dlt_gpt_config), set by the _default/_preset calls */
    int32_t n_layer;           /**< transformer blocks */
    int32_t n_head;            /**< attention heads (n_embd must divide by it) */
    int32_t bias;              /**< 1: biases in Linear and LayerNorm (GPT-2); 0: none (nanoGPT's bias=False) */
    int32_t tied;              /**< 1: lm_head shares the token embedding (GPT-2) */
    int32_t pad_;
    int64_t n_embd;            /**< model width */
    int64_t vocab_size;        /**< tokens that exist (50257 for GPT-2) */
    int64_t padded_vocab_size; /**< rows of the embedding / columns of the logits (0: vocab_size; 50304 is faster) */
    int64_t block_size;        /**< context length */
    double dropout;            /**< dropout after embeddings, attention weights, projections and MLP (training only) */
} dlt_gpt_config;

/** Fills the first `size` bytes of c (core.h: option structs) with GPT-2 124M: 12 layers,
 *  12 heads, 768 wide, vocabulary 50257, context 1024, biases, tied, dropout 0. */
DLT_API void dlt_gpt_config_init(dlt_gpt_config *c, uint32_t size);
/** dlt_gpt_config_init(c, sizeof *c): the call C and C++ programs make. */
static inline void dlt_gpt_config_default(dlt_gpt_config *c) { dlt_gpt_config_init(c, (uint32_t)sizeof *c); }
/** Named shapes: "gpt2" (124M), "gpt2-medium" (350M: 24/16/1024), "gpt2-large" (774M:
 *  36/20/1280), "gpt2-xl" (1558M: 48/25/1600), "shakespeare-char" (nanoGPT's: 6/6/384,
 *  vocabulary 65, context 256, no biases, dropout 0.2), "tiny" (tests: 2/2/32, vocabulary
 *  65, context 32, no biases). DLT_ERR_INVALID_ARGUMENT for another name (the message lists
 *  them) or a size below the first release's struct; size is the caller's sizeof (core.h:
 *  option structs). */
DLT_API DLT_NODISCARD dlt_status dlt_gpt_config_preset_init(const char *name, dlt_gpt_config *c, uint32_t size);
/** dlt_gpt_config_preset_init(name, c, sizeof *c): the call C and C++ programs make. */
static inline DLT_NODISCARD dlt_status dlt_gpt_config_preset(const char *name, dlt_gpt_config *c) {
    return dlt_gpt_config_preset_init(name, c, (uint32_t)sizeof *c);
}

/** Creates a GPT on ctx with GPT-2's initialisation: Linear and Embedding weights N(0, 0.02),
 *  the two residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2*n_layer)),
 *  biases 0, LayerNorm weights 1 and biases 0; drawn from the context's generator (set its
 *  seed for a reproducible model). c == NULL: dlt_gpt_config_default. The caller owns *out
 *  (dlt_module_destroy). */
DLT_API DLT_NODISCARD dlt_status dlt_gpt_create(dlt_ctx *ctx, const dlt_gpt_config *c, dlt_module **out);
/** The configuration of a GPT module, written within c->size (fill c with
 *  dlt_gpt_config_default first; core.h: option structs). DLT_ERR_INVALID_ARGUMENT for
 *  another kind or a size below the first release's struct. */
DLT_API DLT_NODISCARD dlt_status dlt_gpt_get_config(const dlt_module *gpt, dlt_gpt_config *c);
/** Forward: logits (may be NULL when only the loss is wanted) and, with targets, the mean
 *  cross-entropy loss (f32 scalar; loss may be NULL). Both are new references. */
DLT_API DLT_NODISCARD dlt_status dlt_gpt_forward(dlt_module *gpt, dlt_tensor *idx, dlt_tensor *targets,
                                                 dlt_tensor **logits, dlt_tensor **loss);

/** Samples max_new_tokens after the prompt (nanoGPT's generate): each step takes the last
 *  position's logits of the last block_size tokens, divides them by temperature (> 0), keeps
 *  the top_k largest (0: all), and draws from their softmax with a counter-based generator
 *  seeded by `seed` (the same tokens on every device for a seed). While the sequence fits
 *  block_size a key/value cache runs the prompt once and then each new token alone; past it
 *  the window slides and the last block_size tokens run again each step. out receives the
 *  prompt followed by the new tokens (n_prompt + max_new_tokens entries). Runs without
 *  gradients and in evaluation mode (restored afterwards); one device-to-host copy per
 *  token. */
DLT_API DLT_NODISCARD dlt_status dlt_gpt_generate(dlt_module *gpt, const int64_t *prompt, int64_t n_prompt,
                                                  int64_t max_new_tokens, double temperature, int32_t top_k,
                                                  uint64_t seed, int64_t *out);

/** Loads a Hugging Face GPT-2 checkpoint (model.safetensors of GPT2LMHeadModel or GPT2Model:
 *  names with or without "transformer.", Conv1D weights [in, out] transposed into our
 *  [out, in], lm_head omitted or equal to wte, attn.bias / attn.masked_bias buffers
 *  ignored). path is the file or a directory holding model.safetensors. The shapes must
 *  match this model's (a padded vocabulary takes the file's rows and zeros the rest). A
 *  missing, extra or mismatched tensor fails naming it, and the model is left unchanged. */
DLT_API DLT_NODISCARD dlt_status dlt_gpt_load_hf(dlt_module *gpt, const char *path);
/** Writes a Hugging Face GPT-2 directory: dir/model.safetensors (transformer.* names, Conv1D
 *  layout, no lm_head when tied) and dir/config.json (GPT2Config), both atomically, so
 *  transformers' GPT2LMHeadModel.from_pretrained(dir) loads it. Creates dir if needed. */
DLT_API DLT_NODISCARD dlt_status dlt_gpt_save_hf(const dlt_module *gpt, const char *dir);
/** Creates a GPT from a Hugging Face directory (config.json + model.safetensors). */
DLT_API DLT_NODISCARD dlt_status dlt_gpt_from_hf(dlt_ctx *ctx, const char *dir, dlt_module **out);

#ifdef __cplusplus
}
#endif
#endif
