/*
 * autocast.c - autocast regions: a per-context stack of dtypes. The op front doors ask
 * dlt__autocast_dtype(); conv2d and linear compute in it (docs/numerics.md has the policy).
 */
#include "../core/internal.h"

dlt_status dlt_autocast_begin(dlt_ctx *ctx, int32_t dtype) {
    static const char *F = "dlt_autocast_begin";
    DLT_NULL_CHECK(ctx, F);
    if (dtype != DLT_F16 && dtype != DLT_BF16 && dtype != DLT_F32)
        return dlt__err(DLT_ERR_DTYPE, F, "autocast dtype must be f16, bf16 or f32 (off), got %s",
                        dlt_dtype_name(dtype));
    if (ctx->autocast_depth >= DLT_AUTOCAST_MAX_DEPTH)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "autocast regions nest at most %d deep",
                        DLT_AUTOCAST_MAX_DEPTH);
    ctx->autocast_stack[ctx->autocast_depth++] = dtype == DLT_F32 ? -1 : dtype;
    return DLT_OK;
}

dlt_status dlt_autocast_end(dlt_ctx *ctx) {
    static const char *F = "dlt_autocast_end";
    DLT_NULL_CHECK(ctx, F);
    if (ctx->autocast_depth == 0)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "no autocast region is open");
    ctx->autocast_depth--;
    return DLT_OK;
}

int32_t dlt__autocast_dtype(const dlt_ctx *ctx) {
    return ctx->autocast_depth > 0 ? ctx->autocast_stack[ctx->autocast_depth - 1] : -1;
}

int32_t dlt_autocast_dtype(const dlt_ctx *ctx) { return ctx ? dlt__autocast_dtype(ctx) : -1; }
