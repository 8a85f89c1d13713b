/*
 * attention_flash.h - the tensor-core (FlashAttention-2) path of scaled dot-product
 * attention (attention_flash.cu), called by the launchers of attention.cu when
 * dlt__cuda_flash_sdp_ok says it can serve the call; the reference kernels run otherwise.
 */
#ifndef DLT_CUDA_ATTENTION_FLASH_H
#define DLT_CUDA_ATTENTION_FLASH_H

#include "../lib/kernel/nd.h"
#include "cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the flash kernels serve this call: the context's flash_sdp setting is on, the
 * dtype is f16/bf16, D is a multiple of 16 up to 128, the tensors' data is 16-byte aligned,
 * and the kernels were compiled for sm_80 or newer for this device (checked once per
 * context from the code the driver picked: a fat binary's sm_75 code has empty bodies). */
int dlt__cuda_flash_sdp_ok(dlt_ctx *ctx, int32_t dtype, const dlt_sdpa_params *p, const void *const *ptrs,
                           int n_ptrs);
/* o and lse (the reference's layout) from q, k, v; with p->qkv_packed, q, k and v are one
 * packed qkv [B,T,3,H,D] and o is [B,T,H,D], read and written in place. */
dlt_status dlt__cuda_flash_sdp_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *q,
                                   const dlt_tensor *k, const dlt_tensor *v, const dlt_sdpa_params *p);
/* dq, dk, dv; delta[B*H*T] = rowsum(dO * O), already computed on the stream. With
 * p->qkv_packed, dq, dk, dv are one packed [B,T,3,H,D] (q, k, v likewise), dout [B,T,H,D]. */
dlt_status dlt__cuda_flash_sdp_bwd(dlt_ctx *ctx, dlt_tensor *dq, dlt_tensor *dk, dlt_tensor *dv,
                                   const dlt_tensor *dout, const dlt_tensor *q, const dlt_tensor *k,
                                   const dlt_tensor *v, const dlt_tensor *lse, const float *delta,
                                   const dlt_sdpa_params *p);

#ifdef __cplusplus
}
#endif
#endif
