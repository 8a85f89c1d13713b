/*
 * gpt_step.c - nanoGPT's optimizer set-up and training iteration over the library
 * (gpt_step.h). The iteration enqueues work only, so dlt_graph_create can capture it.
 */
#include "gpt_step.h"

#include <stdlib.h>
#include <string.h>

#define CK(call)                                                                              \
    do {                                                                                      \
        dlt_status s_ = (call);                                                               \
        if (s_ != DLT_OK) return s_;                                                          \
    } while (0)

dlt_status gpt_step_init(gpt_step *s, double lr, double beta1, double beta2, double weight_decay,
                         int64_t *n_decay, int64_t *n_nodecay) {
    const int32_t n = dlt_module_num_params(s->model);
    dlt_tensor **p = calloc((size_t)(n > 0 ? n : 1), sizeof *p);
    dlt_tensor **decay = calloc((size_t)(n > 0 ? n : 1), sizeof *decay);
    dlt_tensor **rest = calloc((size_t)(n > 0 ? n : 1), sizeof *rest);
    dlt_status st = DLT_OK;
    if (!p || !decay || !rest) {
        st = dlt_set_error(DLT_ERR_OUT_OF_MEMORY, "gpt_step_init: out of memory");
        goto done;
    }
    st = dlt_module_params(s->model, p, n, NULL);
    int32_t nd = 0, nr = 0;
    int64_t ed = 0, er = 0;
    for (int32_t i = 0; st == DLT_OK && i < n; i++) {
        if (dlt_tensor_ndim(p[i]) >= 2) {
            decay[nd++] = p[i];
            ed += dlt_tensor_numel(p[i]);
        } else {
            rest[nr++] = p[i];
            er += dlt_tensor_numel(p[i]);
        }
    }
    dlt_adamw_options o;
    dlt_adamw_options_default(&o);
    o.lr = lr;
    o.beta1 = beta1;
    o.beta2 = beta2;
    o.eps = 1e-8;
    o.weight_decay = weight_decay;
    if (st == DLT_OK) st = dlt_adamw_create_ex(decay, nd, &o, &s->opt);
    if (st == DLT_OK && nr > 0) st = dlt_optimizer_add_param_group(s->opt, rest, nr, lr, 0.0);
    /* nanoGPT's clip_grad_norm_(model.parameters(), grad_clip), folded into the AdamW step:
     * its parameters are the model's, so the total is the same, and the step writes the bits
     * clip + step would (without a pass that rewrites every gradient) */
    if (st == DLT_OK && s->grad_clip > 0) st = dlt_optimizer_set_clip_grad_norm(s->opt, s->grad_clip, 2.0);
    if (st == DLT_OK) st = dlt_tensor_zeros(s->ctx, DLT_F32, NULL, 0, 0, &s->loss_out);
    if (st == DLT_OK) {
        if (n_decay) *n_decay = ed;
        if (n_nodecay) *n_nodecay = er;
    }
done:
    free(p);
    free(decay);
    free(rest);
    return st;
}

void gpt_step_fini(gpt_step *s) {
    dlt_optimizer_destroy(s->opt);
    dlt_tensor_release(s->loss_out);
    s->opt = NULL;
    s->loss_out = NULL;
}

/* One micro-step: forward under autocast, loss / accum, scaled backward. */
static dlt_status micro_step(gpt_step *s, int last) {
    dlt_tensor *x = NULL, *y = NULL, *loss = NULL, *div = NULL, *scaled = NULL;
    CK(dlt_token_loader_next(s->loader, &x, &y));
    if (s->amp != DLT_F32) CK(dlt_autocast_begin(s->ctx, s->amp));
    dlt_status st = dlt_gpt_forward(s->model, x, y, NULL, &loss);
    if (st == DLT_OK && s->accum > 1) st = dlt_mul_scalar(loss, NULL, 1.0 / (double)s->accum, &div);
    dlt_status st2 = s->amp != DLT_F32 ? dlt_autocast_end(s->ctx) : DLT_OK;
    if (st == DLT_OK) st = st2;
    if (st == DLT_OK) st = dlt_grad_scaler_scale(s->scaler, div ? div : loss, &scaled);
    if (st == DLT_OK) st = dlt_backward(scaled, NULL);
    if (st == DLT_OK && last) st = dlt_tensor_copy(s->loss_out, loss);
    dlt_tensor_release(scaled);
    dlt_tensor_release(div);
    dlt_tensor_release(loss);
    return st;
}

dlt_status gpt_train_step(void *user) {
    gpt_step *s = user;
    CK(dlt_optimizer_zero_grad(s->opt, 1));
    for (int64_t m = 0; m < s->accum; m++) {
        if (s->ddp) CK(dlt_ddp_no_sync(s->ddp, m != s->accum - 1));
        CK(micro_step(s, m == s->accum - 1));
    }
    /* the scaler's step unscales, then the optimizer's step clips (gpt_step_init set it) */
    CK(dlt_grad_scaler_step(s->scaler, s->opt));
    return dlt_grad_scaler_update(s->scaler);
}

int64_t gpt_num_params(const dlt_module *gpt, int non_embedding) {
    int64_t n = dlt_module_param_count(gpt);
    dlt_tensor *wpe = NULL;
    if (non_embedding && dlt_module_find(gpt, "transformer.wpe.weight", &wpe) == DLT_OK) n -= dlt_tensor_numel(wpe);
    return n;
}

double gpt_flops_per_token(const dlt_module *gpt, int64_t T) {
    dlt_gpt_config c;
    dlt_gpt_config_default(&c);
    if (dlt_gpt_get_config(gpt, &c) != DLT_OK) return 0;
    const double N = (double)gpt_num_params(gpt, 1);
    return 6.0 * N + 12.0 * c.n_layer * c.n_head * (double)(c.n_embd / c.n_head) * (double)T;
}

const char *const GPT_SDP_NAMES[] = {"math", "flash", "cudnn", NULL};
const int32_t GPT_SDP_VALUES[] = {GPT_SDP_MATH, GPT_SDP_FLASH, GPT_SDP_CUDNN};

dlt_status gpt_set_sdp(dlt_ctx *ctx, int32_t sdp) {
    dlt_status st = dlt_ctx_set_flash_sdp(ctx, sdp >= GPT_SDP_FLASH);
    return st != DLT_OK ? st : dlt_ctx_set_cudnn_sdp(ctx, sdp == GPT_SDP_CUDNN);
}
