/*
 * ctx.h - the context (lib/core/ctx.c): its backend, RNG state, autocast stack, poisoning
 * after asynchronous faults, memory accounting and the host allocations made on its behalf
 * (with the failure-injection hook). Part of lib/core/internal.h.
 */
#ifndef DLT_CORE_CTX_H
#define DLT_CORE_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "dltrain/core.h"
#include "env.h"
#include "tape.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlt_backend dlt_backend;

/* ---------------------------------------------------------------------------------------
 * Context
 * ------------------------------------------------------------------------------------- */
#define DLT_AUTOCAST_MAX_DEPTH 16

struct dlt_ctx {
    int32_t device_type;
    int32_t device_index;
    const dlt_backend *be;
    void *be_state; /* backend private: CUDA stream, handles, pool, plan caches */

    /* rng_offset: the generator's one counter, PyTorch's Philox offset: eager random ops and
     * graph replays both take their counters from it, in call order (graph.c). */
    uint64_t seed, rng_offset;
    /* Device uint64 added to the generator offsets of the random ops that read it (dropout,
     * attention dropout). A captured graph's kernels hold the offsets of the capture (from
     * rng0); each replay runs with the word at (counter - rng0), so it draws what an eager
     * step at that counter would. rng_base_value: the word's value as the next enqueued
     * kernel sees it (host mirror, stream order); eager ops pass offset - rng_base_value. */
    void *rng_base;
    uint64_t rng_base_value;
    int32_t grad_enabled;
    int32_t autocast_stack[DLT_AUTOCAST_MAX_DEPTH]; /* dtype per nesting level, -1 = off */
    int32_t autocast_depth;
    int32_t deterministic, allow_tf32;
    int32_t capturing; /* inside CUDA graph capture: no host syncs allowed */
    /* autocast copies the capture in progress reads without casting (graph.c takes them) */
    struct dlt__lp_use *capture_lp;
    int32_t n_capture_lp, cap_capture_lp;
    int32_t graph_warmup; /* in dlt_graph_create's warm-up steps: prepare all the capture will use */
    int32_t live_graphs;  /* captured graphs not destroyed yet (graph.c): zero_grad keeps gradient
                           * buffers while one may replay into them (tape.c) */

    dlt_status poisoned; /* != DLT_OK after an asynchronous fault */
    char poison_msg[512];

    /* host-side accounting (CPU backend memory; CUDA uses the pool's statistics) */
    uint64_t mem_allocated, mem_peak, mem_count;
    int64_t alloc_calls;    /* allocations made on behalf of this context */
    int64_t fail_alloc_at;  /* injection: fail when alloc_calls reaches this value (0 = off) */

    dlt_tape tape;
    int64_t live_tensors; /* leak accounting for tests */

    dlt__env env; /* the environment variables, read once when the context is created */
    /* flash: dlt_ctx_set_flash_sdp (CUDA f16/bf16 attention on tensor cores); CPU ignores it */
    int32_t flash_sdp;
    /* cudnn_sdp: dlt_ctx_set_cudnn_sdp (cuDNN's fused attention first on CUDA); CPU ignores it */
    int32_t cudnn_sdp;
    /* cudnn_benchmark: dlt_ctx_set_cudnn_benchmark (time cuDNN's engines per new shape) */
    int32_t cudnn_benchmark;
    /* fused paths that served, so tests can tell them from their fallbacks: data-gradient
     * GEMMs whose epilogue applied the GELU's derivative (dlt__gelu_linear's backward) */
    int64_t served_gelu_dgrad;
    int64_t served_ce_fwd_grad; /* cross-entropy forwards the backend's ce_fwd_grad served (tests) */
};

/* Fails with DLT_ERR_CONTEXT_POISONED if an earlier asynchronous fault broke the context. */
dlt_status dlt__ctx_ok(dlt_ctx *ctx, const char *func);
/* Marks the context poisoned (first fault wins) and returns code with the message set. */
dlt_status dlt__ctx_poison(dlt_ctx *ctx, dlt_status code, const char *func, const char *msg);
/* Allocates the context's device word rng_base (zero) on first use; fails inside a capture. */
dlt_status dlt__rng_base_ready(dlt_ctx *ctx, const char *func);
/* Reserves `blocks` Philox counters and returns the starting offset. */
uint64_t dlt__rng_reserve(dlt_ctx *ctx, uint64_t blocks);
/* The same for kernels that add the device word rng_base (dropout, attention): outside a
 * capture the returned offset plus the word is the counter reserved. */
uint64_t dlt__rng_reserve_based(dlt_ctx *ctx, uint64_t blocks);

/* Counts an allocation for the failure-injection hook; returns nonzero if it must fail. */
int dlt__alloc_should_fail(dlt_ctx *ctx);
/* Host allocations on behalf of a context (objects, metadata). Fail with injection too. */
void *dlt__host_alloc(dlt_ctx *ctx, size_t n);
void *dlt__host_calloc(dlt_ctx *ctx, size_t count, size_t size);
void *dlt__host_realloc(dlt_ctx *ctx, void *p, size_t n);
char *dlt__host_strdup(dlt_ctx *ctx, const char *s);
/* Overflow-checked multiply: returns 0 and sets *out, or 1 on overflow. */
int dlt__mul_overflow(size_t a, size_t b, size_t *out);

#ifdef __cplusplus
}
#endif
#endif
