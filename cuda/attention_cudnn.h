/*
 * attention_cudnn.h - scaled dot-product attention through cuDNN's fused flash attention
 * (attention_cudnn.c), the first path attention.cu's launchers try.
 */
#ifndef DLT_CUDA_ATTENTION_CUDNN_H
#define DLT_CUDA_ATTENTION_CUDNN_H

#include "../lib/kernel/nd.h"
#include "cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when cuDNN may serve this call: the context's cudnn_sdp setting is on and deterministic
 * mode off, f16/bf16, no dropout, T and S multiples of 128, D a multiple of 8 up to 128, data 16-byte aligned.
 * cuDNN may still have no engine for it (then *served stays 0 below). */
int dlt__cudnn_sdp_ok(dlt_ctx *ctx, int32_t dtype, const dlt_sdpa_params *p, const void *const *ptrs,
                      int n_ptrs);
/* o and lse (log-sum-exp of the scaled scores, fp32 [B*H*T]) from q, k, v. *served = 0
 * when cuDNN has no plan for the shape: nothing was launched and another path must run. */
dlt_status dlt__cudnn_sdp_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *q,
                              const dlt_tensor *k, const dlt_tensor *v, const dlt_sdpa_params *p, int *served);
/* dq, dk, dv (written, not accumulated) from dout and the forward's q, k, v, o, lse. */
dlt_status dlt__cudnn_sdp_bwd(dlt_ctx *ctx, dlt_tensor *dq, dlt_tensor *dk, dlt_tensor *dv, const dlt_tensor *dout,
                              const dlt_tensor *q, const dlt_tensor *k, const dlt_tensor *v, const dlt_tensor *o,
                              const dlt_tensor *lse, const dlt_sdpa_params *p, int *served);
/* The packed layouts (p->qkv_packed: q, k, v and their gradients rows of [B,T,3,H,D], o
 * and dout rows of [B,T,H,D]) read in place; *served = 0 where cuDNN may not serve. */
dlt_status dlt__cudnn_sdp_qkv_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *qkv,
                                 const dlt_sdpa_params *p, int *served);
dlt_status dlt__cudnn_sdp_qkv_bwd(dlt_ctx *ctx, dlt_tensor *dqkv, const dlt_tensor *dout, const dlt_tensor *qkv,
                                 const dlt_tensor *o, const dlt_tensor *lse, const dlt_sdpa_params *p, int *served);

#ifdef __cplusplus
}
#endif
#endif
