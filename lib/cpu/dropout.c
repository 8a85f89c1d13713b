/*
 * dropout.c - CPU dropout: element i (flat memory order) is kept when the Philox uniform of
 * (seed, offset + *rng_base, i) is >= p, and scaled by 1/(1-p). The same call with the same
 * arguments is the backward (the mask is drawn again). cuda/dropout.cu draws the same bits.
 */
#include "../kernel/philox.h"
#include "ops_cpu.h"
#include "parallel.h"

dlt_status dlt__cpu_dropout(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, double p, uint64_t seed,
                            uint64_t offset) {
    const uint64_t off = offset + *(const uint64_t *)ctx->rng_base;
    const float pf = (float)p, scale = p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    const void *px = dlt__data(x);
    void *py = dlt__data(y);
    const int32_t tx = x->dtype, ty = y->dtype;
    DLT_PARALLEL_FOR(i, x->numel, 1 << 14) {
        const int keep = dlt__philox_uniform(seed, off, (uint64_t)i) >= pf;
        dlt__st(py, ty, i, keep ? dlt__ld(px, tx, i) * scale : 0.0f);
    }
    return DLT_OK;
}

dlt_status dlt__cpu_rng_advance(dlt_ctx *ctx, uint64_t delta) {
    *(uint64_t *)ctx->rng_base += delta;
    return DLT_OK;
}
