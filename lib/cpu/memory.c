/*
 * memory.c - CPU backend memory: 64-byte aligned host allocations with the same statistics
 * the CUDA pool reports (allocated, peak, reserved == allocated, live count).
 */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

dlt_status dlt__cpu_ctx_init(dlt_ctx *ctx) {
    (void)ctx;
    return DLT_OK;
}

dlt_status dlt__cpu_device_name(dlt_ctx *ctx, char *buf, size_t n) {
    (void)ctx;
    strncpy(buf, "cpu", n - 1);
    buf[n - 1] = '\0';
    return DLT_OK;
}

dlt_status dlt__cpu_alloc(dlt_ctx *ctx, size_t nbytes, void **ptr) {
    void *p = NULL;
    size_t rounded = (nbytes + 63) & ~(size_t)63;
    if (rounded < nbytes || posix_memalign(&p, 64, rounded) != 0 || !p)
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_alloc", "cannot allocate %zu bytes of host memory",
                        nbytes);
    ctx->mem_allocated += nbytes;
    ctx->mem_count++;
    if (ctx->mem_allocated > ctx->mem_peak) ctx->mem_peak = ctx->mem_allocated;
    *ptr = p;
    return DLT_OK;
}

void dlt__cpu_free(dlt_ctx *ctx, void *ptr, size_t nbytes) {
    if (!ptr) return;
    ctx->mem_allocated -= nbytes;
    ctx->mem_count--;
    free(ptr);
}

dlt_status dlt__cpu_memcpy(dlt_ctx *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    if (n) memmove(dst, src, n);
    return DLT_OK;
}

dlt_status dlt__cpu_memset0(dlt_ctx *ctx, void *dst, size_t n) {
    (void)ctx;
    if (n) memset(dst, 0, n);
    return DLT_OK;
}

dlt_status dlt__cpu_synchronize(dlt_ctx *ctx) {
    (void)ctx;
    return DLT_OK;
}

dlt_status dlt__cpu_mem_stat(dlt_ctx *ctx, int32_t which, uint64_t *out) {
    switch (which) {
    case DLT_MEM_ALLOCATED: *out = ctx->mem_allocated; break;
    case DLT_MEM_PEAK_ALLOCATED: *out = ctx->mem_peak; break;
    case DLT_MEM_RESERVED: *out = ctx->mem_allocated; break;
    default: *out = ctx->mem_count; break;
    }
    return DLT_OK;
}

dlt_status dlt__cpu_mem_reset_peak(dlt_ctx *ctx) {
    ctx->mem_peak = ctx->mem_allocated;
    return DLT_OK;
}

dlt_status dlt__cpu_empty_cache(dlt_ctx *ctx) {
    (void)ctx; /* malloc'ed blocks are returned on free: nothing is cached */
    return DLT_OK;
}
