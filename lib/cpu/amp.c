/*
 * amp.c - CPU GradScaler kernels: PyTorch's _amp_foreach_non_finite_check_and_unscale_
 * (inf/NaN check and in-place multiply by the reciprocal scale) and _amp_update_scale_.
 * Same arithmetic as cuda/amp.cu: inv = (float)(1/(double)scale), v * inv in fp32.
 */
#include <math.h>

#include "ops_cpu.h"

dlt_status dlt__cpu_amp_unscale(dlt_ctx *ctx, dlt_tensor **grads, int32_t n, void *found_inf,
                                const void *scale) {
    (void)ctx;
    const float inv = (float)(1.0 / (double)*(const float *)scale);
    int found = 0;
    for (int32_t i = 0; i < n; i++) {
        dlt_tensor *t = grads[i];
        void *x = dlt__data(t);
        if (t->dtype == DLT_F32) {
            float *v = (float *)x;
            for (int64_t e = 0; e < t->numel; e++) {
                float a = v[e];
                if (!isfinite(a)) found = 1;
                if (inv != 1.0f) v[e] = a * inv;
            }
        } else {
            for (int64_t e = 0; e < t->numel; e++) {
                float a = dlt__ld(x, t->dtype, e);
                if (!isfinite(a)) found = 1;
                if (inv != 1.0f) dlt__st(x, t->dtype, e, a * inv);
            }
        }
    }
    if (found) *(float *)found_inf = 1.0f;
    return DLT_OK;
}

dlt_status dlt__cpu_amp_update(dlt_ctx *ctx, void *scale, void *growth_tracker,
                               const void *found_inf, uint32_t mask, double growth_factor,
                               double backoff_factor, int32_t growth_interval) {
    (void)ctx;
    float *s = (float *)scale;
    int32_t *tracker = (int32_t *)growth_tracker;
    const float *f = (const float *)found_inf;
    float found = 0.0f;
    for (int i = 0; i < 32; i++)
        if (mask & (1u << i)) found += f[i];
    if (found != 0.0f) {
        *s = (float)(*s * backoff_factor);
        *tracker = 0;
    } else {
        int32_t successful = *tracker + 1;
        if (successful == growth_interval) {
            float grown = (float)(*s * growth_factor);
            if (isfinite(grown)) *s = grown; /* never grow to inf */
            *tracker = 0;
        } else {
            *tracker = successful;
        }
    }
    return DLT_OK;
}
