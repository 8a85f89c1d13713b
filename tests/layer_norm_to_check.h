/*
 * layer_norm_to_check.h - dlt_layer_norm_to(dtype) must be dlt_layer_norm then dlt_cast, bit
 * for bit: the output and the x, weight and bias gradients, with or without an autocast
 * region. test_ops.c runs it on the CPU, cuda_ops.c on the device (where the register
 * kernels compute y in f32 either way and round once).
 */
#ifndef DLT_TEST_LAYER_NORM_TO_CHECK_H
#define DLT_TEST_LAYER_NORM_TO_CHECK_H

#include <string.h>

#include "harness.h"

static TH_UNUSED void layer_norm_to_check(dlt_ctx *ctx, int32_t dtype, int autocast) {
    const int64_t xs[2] = {6, 40}, ws[1] = {40};
    float xv[240], wv[40], bv[40], uv[240];
    for (int i = 0; i < 240; i++) {
        xv[i] = ((float)((i * 37) % 23) / 11.5f - 1.0f) * 2.0f;
        uv[i] = (float)((i * 13) % 17) / 8.5f - 1.0f;
    }
    for (int i = 0; i < 40; i++) wv[i] = 0.5f + (float)i / 40.0f, bv[i] = (float)i / 80.0f - 0.25f;
    float out[2][240], grads[2][3][240];
    for (int fused = 0; fused < 2; fused++) {
        dlt_tensor *x = NULL, *w = NULL, *b = NULL, *y = NULL, *u = NULL, *t = NULL;
        CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, xs, 2, DLT_FORMAT_CONTIGUOUS, xv, sizeof xv, &x));
        CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, ws, 1, DLT_FORMAT_CONTIGUOUS, wv, sizeof wv, &w));
        CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, ws, 1, DLT_FORMAT_CONTIGUOUS, bv, sizeof bv, &b));
        dlt_tensor *leaves[3] = {x, w, b};
        for (int i = 0; i < 3; i++) CHECK_OK(dlt_tensor_set_requires_grad(leaves[i], 1));
        if (autocast) CHECK_OK(dlt_autocast_begin(ctx, dtype));
        if (fused) {
            CHECK_OK(dlt_layer_norm_to(x, ws, 1, w, b, 1e-5, dtype, &y));
        } else {
            CHECK_OK(dlt_layer_norm(x, ws, 1, w, b, 1e-5, &t));
            CHECK_OK(dlt_cast(t, dtype, &y));
            dlt_tensor_release(t);
        }
        if (autocast) CHECK_OK(dlt_autocast_end(ctx));
        CHECK(dlt_tensor_dtype(y) == dtype, "output %s", dlt_dtype_name(dlt_tensor_dtype(y)));
        CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, xs, 2, DLT_FORMAT_CONTIGUOUS, uv, sizeof uv, &t));
        CHECK_OK(dlt_cast(t, dtype, &u));
        dlt_tensor_release(t);
        CHECK_OK(dlt_backward(y, u));
        CHECK_OK(dlt_cast(y, DLT_F32, &t));
        CHECK_OK(dlt_tensor_copy_to_host(t, out[fused], sizeof out[fused]));
        dlt_tensor_release(t);
        for (int i = 0; i < 3; i++)
            CHECK_OK(dlt_tensor_copy_to_host(dlt_tensor_grad(leaves[i]), grads[fused][i],
                                             (size_t)dlt_tensor_numel(leaves[i]) * sizeof(float)));
        dlt_tensor_release(u), dlt_tensor_release(y);
        for (int i = 0; i < 3; i++) dlt_tensor_release(leaves[i]);
    }
    CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0, "%s outputs differ", dlt_dtype_name(dtype));
    CHECK(memcmp(grads[0][0], grads[1][0], 240 * sizeof(float)) == 0, "dx differs");
    CHECK(memcmp(grads[0][1], grads[1][1], 40 * sizeof(float)) == 0, "dweight differs");
    CHECK(memcmp(grads[0][2], grads[1][2], 40 * sizeof(float)) == 0, "dbias differs");
}


#endif
