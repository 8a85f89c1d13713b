/*
 * ctx.c - contexts: device selection, RNG state, poisoning after device faults, memory
 * statistics and the allocation-failure hook shared by every allocation path.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int32_t dlt_built_with_cuda(void) { return dlt__cuda_backend() != NULL; }

dlt_status dlt_cuda_device_count(int32_t *out) {
    DLT_NULL_CHECK(out, "dlt_cuda_device_count");
    const dlt_backend *cu = dlt__cuda_backend();
    *out = cu && cu->device_count ? cu->device_count() : 0;
    return DLT_OK;
}

dlt_status dlt_ctx_create(int32_t device_type, int32_t device_index, uint32_t abi_version,
                          dlt_ctx **out) {
    static const char *F = "dlt_ctx_create";
    DLT_NULL_CHECK(out, F);
    if (abi_version != DLT_ABI_VERSION)
        return dlt__err(DLT_ERR_VERSION, F,
                        "the program was built against libdltrain ABI %u but the loaded library "
                        "is ABI %u (release %s); rebuild the program or load the matching library",
                        abi_version, (unsigned)DLT_ABI_VERSION, dlt_version_string());
    const dlt_backend *be = NULL;
    if (device_type == DLT_DEVICE_CPU) {
        be = dlt__cpu_backend();
    } else if (device_type == DLT_DEVICE_CUDA) {
        be = dlt__cuda_backend();
        if (!be)
            return dlt__err(DLT_ERR_NO_DEVICE, F,
                            "this libdltrain was built without CUDA support (configure with "
                            "-Dcuda=enabled on a machine with the CUDA toolkit and cuDNN)");
        if (device_index < 0)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "device_index %d is negative",
                            device_index);
    } else {
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "unknown device_type %d (use DLT_DEVICE_CPU=0 or DLT_DEVICE_CUDA=1)",
                        device_type);
    }
    dlt_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the context");
    dlt__env_read(&ctx->env); /* every variable of lib/core/env.c, once */
    ctx->device_type = device_type;
    ctx->device_index = device_type == DLT_DEVICE_CPU ? 0 : device_index;
    ctx->be = be;
    ctx->grad_enabled = 1;
    ctx->flash_sdp = 1; /* verified on an H200 2026-12-02 (docs/performance.md) */
    ctx->cudnn_sdp = 1;
    ctx->cudnn_benchmark = ctx->env.v[DLT__ENV_CUDNN_AUTOTUNE] != 0;
    ctx->autocast_depth = 0;
    dlt_status st = be->ctx_init ? be->ctx_init(ctx) : DLT_OK;
    if (st != DLT_OK) {
        free(ctx);
        return dlt__err_wrap(st, F);
    }
    *out = ctx;
    return DLT_OK;
}

void dlt_ctx_destroy(dlt_ctx *ctx) {
    if (!ctx) return;
    dlt__tape_fini(ctx);
    if (ctx->be->synchronize && ctx->poisoned == DLT_OK) (void)ctx->be->synchronize(ctx);
    if (ctx->rng_base) ctx->be->free(ctx, ctx->rng_base, sizeof(uint64_t));
    if (ctx->be->ctx_fini) ctx->be->ctx_fini(ctx);
    free(ctx);
}

int32_t dlt_ctx_device_type(const dlt_ctx *ctx) { return ctx ? ctx->device_type : -1; }
int32_t dlt_ctx_device_index(const dlt_ctx *ctx) { return ctx ? ctx->device_index : -1; }

dlt_status dlt_ctx_device_name(const dlt_ctx *ctx, char *buf, size_t n) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_device_name");
    DLT_NULL_CHECK(buf, "dlt_ctx_device_name");
    if (n == 0) return dlt__err(DLT_ERR_INVALID_ARGUMENT, "dlt_ctx_device_name", "buffer size is 0");
    return ctx->be->device_name((dlt_ctx *)ctx, buf, n);
}

dlt_status dlt__ctx_ok(dlt_ctx *ctx, const char *func) {
    if (ctx->poisoned != DLT_OK)
        return dlt__err(DLT_ERR_CONTEXT_POISONED, func,
                        "the context was broken by an earlier device fault (%s); destroy it and "
                        "create a new one",
                        ctx->poison_msg);
    return DLT_OK;
}

dlt_status dlt__ctx_poison(dlt_ctx *ctx, dlt_status code, const char *func, const char *msg) {
    if (ctx->poisoned == DLT_OK) {
        ctx->poisoned = code;
        strncpy(ctx->poison_msg, msg, sizeof ctx->poison_msg - 1);
        ctx->poison_msg[sizeof ctx->poison_msg - 1] = '\0';
    }
    return dlt__err(code, func, "%s", msg);
}

dlt_status dlt_ctx_synchronize(dlt_ctx *ctx) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_synchronize");
    DLT_CHECK(dlt__ctx_ok(ctx, "dlt_ctx_synchronize"));
    return ctx->be->synchronize(ctx);
}

dlt_status dlt_ctx_wait_plans(dlt_ctx *ctx) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_wait_plans");
    DLT_CHECK(dlt__ctx_ok(ctx, "dlt_ctx_wait_plans"));
    if (ctx->be->wait_plans) ctx->be->wait_plans(ctx);
    return DLT_OK;
}

dlt_status dlt_ctx_check(dlt_ctx *ctx) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_check");
    return dlt__ctx_ok(ctx, "dlt_ctx_check");
}

dlt_status dlt_ctx_set_seed(dlt_ctx *ctx, uint64_t seed) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_set_seed");
    ctx->seed = seed;
    ctx->rng_offset = 0;
    return DLT_OK;
}

dlt_status dlt_ctx_get_seed(const dlt_ctx *ctx, uint64_t *seed, uint64_t *offset) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_get_seed");
    if (seed) *seed = ctx->seed;
    if (offset) *offset = ctx->rng_offset;
    return DLT_OK;
}

/* ---- gptex (issue 17): the generator's state for exact resumes ---- */
/* rng_offset counts eager ops and replays alike (graph.c), so the state is host-side. */
dlt_status dlt_ctx_get_rng_state(dlt_ctx *ctx, uint64_t *seed, uint64_t *offset) {
    static const char *F = "dlt_ctx_get_rng_state";
    DLT_NULL_CHECK(ctx, F);
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing) return dlt__err(DLT_ERR_INVALID_STATE, F, "not allowed during graph capture");
    if (seed) *seed = ctx->seed;
    if (offset) *offset = ctx->rng_offset;
    return DLT_OK;
}

dlt_status dlt_ctx_set_rng_state(dlt_ctx *ctx, uint64_t seed, uint64_t offset) {
    static const char *F = "dlt_ctx_set_rng_state";
    DLT_NULL_CHECK(ctx, F);
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing) return dlt__err(DLT_ERR_INVALID_STATE, F, "not allowed during graph capture");
    ctx->seed = seed;
    ctx->rng_offset = offset;
    return DLT_OK;
}

dlt_status dlt__rng_base_ready(dlt_ctx *ctx, const char *func) {
    if (ctx->rng_base) return DLT_OK;
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, func,
                        "the first random op of this context runs inside a graph capture: run the "
                        "step once before capturing (a warm-up step)");
    void *p = NULL;
    DLT_CHECK(ctx->be->alloc(ctx, sizeof(uint64_t), &p));
    dlt_status st = ctx->be->memset0(ctx, p, sizeof(uint64_t));
    if (st != DLT_OK) {
        ctx->be->free(ctx, p, sizeof(uint64_t));
        return st;
    }
    ctx->rng_base = p;
    ctx->rng_base_value = 0;
    return DLT_OK;
}

uint64_t dlt__rng_reserve(dlt_ctx *ctx, uint64_t blocks) {
    uint64_t off = ctx->rng_offset;
    ctx->rng_offset += blocks;
    return off;
}

/* Offsets wrap modulo 2^64 like the word, so off - value + value is off. During a capture
 * the raw counter is kept: dlt_graph_run sets the word for each replay. */
uint64_t dlt__rng_reserve_based(dlt_ctx *ctx, uint64_t blocks) {
    const uint64_t off = dlt__rng_reserve(ctx, blocks);
    return ctx->capturing ? off : off - ctx->rng_base_value;
}

dlt_status dlt_ctx_set_deterministic(dlt_ctx *ctx, int32_t on) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_set_deterministic");
    ctx->deterministic = on != 0;
    return DLT_OK;
}

dlt_status dlt_ctx_set_allow_tf32(dlt_ctx *ctx, int32_t on) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_set_allow_tf32");
    ctx->allow_tf32 = on != 0;
    return DLT_OK;
}

/* read where cuDNN plans are built (cuda/cudnn_graph.c) */
dlt_status dlt_ctx_set_cudnn_benchmark(dlt_ctx *ctx, int32_t on) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_set_cudnn_benchmark");
    ctx->cudnn_benchmark = on != 0;
    return DLT_OK;
}

dlt_status dlt_ctx_cudnn_benchmark_enabled(const dlt_ctx *ctx, int32_t *out) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_cudnn_benchmark_enabled");
    DLT_NULL_CHECK(out, "dlt_ctx_cudnn_benchmark_enabled");
    *out = ctx->cudnn_benchmark;
    return DLT_OK;
}

/* flash: where the CUDA attention launchers read it (cuda/attention_flash.cu) */
dlt_status dlt_ctx_set_flash_sdp(dlt_ctx *ctx, int32_t enabled) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_set_flash_sdp");
    ctx->flash_sdp = enabled != 0;
    return DLT_OK;
}

dlt_status dlt_ctx_flash_sdp_enabled(const dlt_ctx *ctx, int32_t *out) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_flash_sdp_enabled");
    DLT_NULL_CHECK(out, "dlt_ctx_flash_sdp_enabled");
    *out = ctx->flash_sdp;
    return DLT_OK;
}

dlt_status dlt_ctx_set_cudnn_sdp(dlt_ctx *ctx, int32_t enabled) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_set_cudnn_sdp");
    ctx->cudnn_sdp = enabled != 0;
    return DLT_OK;
}

dlt_status dlt_ctx_cudnn_sdp_enabled(const dlt_ctx *ctx, int32_t *out) {
    DLT_NULL_CHECK(ctx, "dlt_ctx_cudnn_sdp_enabled");
    DLT_NULL_CHECK(out, "dlt_ctx_cudnn_sdp_enabled");
    *out = ctx->cudnn_sdp;
    return DLT_OK;
}

/* ---- memory statistics ---- */

dlt_status dlt_memory_stat(dlt_ctx *ctx, int32_t which, uint64_t *out) {
    static const char *F = "dlt_memory_stat";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    if (which < DLT_MEM_ALLOCATED || which > DLT_MEM_ALLOC_COUNT)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "unknown statistic %d", which);
    return ctx->be->mem_stat(ctx, which, out);
}

dlt_status dlt_memory_reset_peak(dlt_ctx *ctx) {
    DLT_NULL_CHECK(ctx, "dlt_memory_reset_peak");
    return ctx->be->mem_reset_peak(ctx);
}

dlt_status dlt_empty_cache(dlt_ctx *ctx) {
    DLT_NULL_CHECK(ctx, "dlt_empty_cache");
    DLT_CHECK(dlt__ctx_ok(ctx, "dlt_empty_cache"));
    return ctx->be->empty_cache(ctx);
}

/* ---- allocation failure injection and host allocations ---- */

dlt_status dlt_testing_fail_alloc(dlt_ctx *ctx, int64_t n) {
    DLT_NULL_CHECK(ctx, "dlt_testing_fail_alloc");
    ctx->fail_alloc_at = n > 0 ? ctx->alloc_calls + n : 0;
    return DLT_OK;
}

dlt_status dlt_testing_alloc_count(dlt_ctx *ctx, int64_t *out) {
    DLT_NULL_CHECK(ctx, "dlt_testing_alloc_count");
    DLT_NULL_CHECK(out, "dlt_testing_alloc_count");
    *out = ctx->alloc_calls;
    return DLT_OK;
}

int dlt__alloc_should_fail(dlt_ctx *ctx) {
    ctx->alloc_calls++;
    if (ctx->fail_alloc_at > 0 && ctx->alloc_calls == ctx->fail_alloc_at) {
        ctx->fail_alloc_at = 0; /* one failure per arming: the retry must succeed */
        return 1;
    }
    return 0;
}

void *dlt__host_alloc(dlt_ctx *ctx, size_t n) {
    if (ctx && dlt__alloc_should_fail(ctx)) return NULL;
    return malloc(n ? n : 1);
}

void *dlt__host_calloc(dlt_ctx *ctx, size_t count, size_t size) {
    if (ctx && dlt__alloc_should_fail(ctx)) return NULL;
    return calloc(count ? count : 1, size ? size : 1);
}

void *dlt__host_realloc(dlt_ctx *ctx, void *p, size_t n) {
    if (ctx && dlt__alloc_should_fail(ctx)) return NULL;
    return realloc(p, n ? n : 1);
}

char *dlt__host_strdup(dlt_ctx *ctx, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = dlt__host_alloc(ctx, n);
    if (d) memcpy(d, s, n);
    return d;
}

dlt_status dlt__be_missing(const dlt_ctx *ctx, const char *func, const char *what) {
    return dlt__err(DLT_ERR_NOT_SUPPORTED, func, "%s is not implemented on the %s backend", what,
                    ctx->be->name);
}
