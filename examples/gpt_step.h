/*
 * gpt_step.h - the GPT training step shared by examples/gpt_train.c and examples/bench_gpt.c:
 * nanoGPT's optimizer (AdamW with weight decay on the 2-D tensors only, clipping the
 * gradients' global norm at grad_clip) and one whole iteration (zero-grad, --accum
 * micro-steps of forward + backward with the loss divided by accum, scaler step and
 * update), written so that it can be captured as one CUDA graph (graph.h): every value that
 * changes per step lives on the device (the loader's draw counter, the lr, the loss scale,
 * the gradient norm) and the step reads nothing back.
 *
 * nanoGPT's train.py, line for line:
 *   for micro_step in range(accum):
 *       with ctx: logits, loss = model(X, Y); loss = loss / accum
 *       X, Y = get_batch('train'); scaler.scale(loss).backward()
 *   if grad_clip != 0.0: scaler.unscale_(optimizer); clip_grad_norm_(model.parameters(), grad_clip)
 *   scaler.step(optimizer); scaler.update(); optimizer.zero_grad(set_to_none=True)
 * The clipping is the optimizer's (dlt_optimizer_set_clip_grad_norm, set by gpt_step_init):
 * the scaler's step unscales, then the AdamW step takes the norm of the unscaled gradients
 * and updates with grad * coef, the parameters and moments nanoGPT's unscale_ + clip + step
 * give, bit for bit, without the kernel that rewrites every gradient (the gradients stay
 * unclipped; nothing here reads them after the step).
 */
#ifndef DLT_EXAMPLES_GPT_STEP_H
#define DLT_EXAMPLES_GPT_STEP_H

#include <dltrain.h>

typedef struct gpt_step {
    dlt_ctx *ctx;
    dlt_module *model;
    dlt_optimizer *opt;
    dlt_grad_scaler *scaler;
    dlt_token_loader *loader;
    int32_t amp;          /* DLT_BF16, DLT_F16 (with the scaler) or DLT_F32 (no autocast) */
    int64_t accum;        /* micro-steps per optimizer step */
    double grad_clip;     /* 0: no clipping; read by gpt_step_init (set it before) */
    dlt_tensor *loss_out; /* f32 []: the last micro-step's loss (before the division by accum) */
    dlt_ddp *ddp;         /* data parallel (dist.h; NULL: one process): the gradients are averaged
                           * in the last micro-step's backward only (nanoGPT's
                           * require_backward_grad_sync), so clipping sees the averaged ones */
} gpt_step;

/* nanoGPT's configure_optimizers: AdamW(lr, betas, eps 1e-8) over two parameter groups,
 * weight_decay on the tensors with 2 or more dimensions (matmul weights, embeddings) and 0
 * on the rest (biases, LayerNorm), clipping at s->grad_clip when it is > 0 (2-norm, in the
 * step). Fills s->opt and s->loss_out.
 * *n_decay / *n_nodecay (may be NULL) receive the element counts of the two groups. */
dlt_status gpt_step_init(gpt_step *s, double lr, double beta1, double beta2, double weight_decay,
                         int64_t *n_decay, int64_t *n_nodecay);
/* Frees what gpt_step_init made (the optimizer, the parameter array, loss_out). */
void gpt_step_fini(gpt_step *s);
/* One training iteration (a dlt_step_fn). */
dlt_status gpt_train_step(void *gpt_step_ptr);

/* nanoGPT's get_num_params(non_embedding): every parameter once (the tied head is the token
 * embedding), minus the position embedding when non_embedding. */
int64_t gpt_num_params(const dlt_module *gpt, int non_embedding);
/* nanoGPT's estimate_mfu numerator per token at context T (PaLM, appendix B):
 * 6 * N + 12 * n_layer * n_head * (n_embd / n_head) * T, N = gpt_num_params(non_embedding). */
double gpt_flops_per_token(const dlt_module *gpt, int64_t T);

/* --sdp K: the attention kernels, in PyTorch's terms (torch.backends.cuda.enable_*_sdp):
 * "cudnn" (the default) tries cuDNN's fused attention, then the flash kernels, then the
 * reference kernels; "flash" the flash kernels, then the reference; "math" the reference
 * kernels alone. */
#define GPT_SDP_MATH 0
#define GPT_SDP_FLASH 1
#define GPT_SDP_CUDNN 2
extern const char *const GPT_SDP_NAMES[];
extern const int32_t GPT_SDP_VALUES[];
dlt_status gpt_set_sdp(dlt_ctx *ctx, int32_t sdp);

#endif
