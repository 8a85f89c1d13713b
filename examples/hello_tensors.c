/*
 * hello_tensors.c - the smallest libdltrain program: a context on the best device present,
 * a few tensors, a copy back to the host, and the allocator's statistics.
 */
#include <dltrain.h>
#include <stdio.h>

#define TRY(call)                                                                             \
    do {                                                                                      \
        if ((call) != DLT_OK) {                                                               \
            fprintf(stderr, "%s failed: %s\n", #call, dlt_last_error());                     \
            return 1;                                                                         \
        }                                                                                     \
    } while (0)

int main(void) {
    int32_t ngpu = 0;
    TRY(dlt_cuda_device_count(&ngpu));
    int32_t dev = ngpu > 0 ? DLT_DEVICE_CUDA : DLT_DEVICE_CPU;
    dlt_ctx *ctx;
    TRY(dlt_ctx_create(dev, 0, DLT_ABI_VERSION, &ctx));
    char name[256];
    TRY(dlt_ctx_device_name(ctx, name, sizeof name));
    printf("libdltrain %s on %s (CUDA support compiled in: %s, GPUs visible: %d)\n",
           dlt_version_string(), name, dlt_built_with_cuda() ? "yes" : "no", ngpu);

    int64_t shape[4] = {256, 3, 32, 32};
    dlt_tensor *x, *h;
    TRY(dlt_ctx_set_seed(ctx, 0));
    TRY(dlt_tensor_empty(ctx, DLT_F32, shape, 4, DLT_FORMAT_CHANNELS_LAST, &x));
    TRY(dlt_tensor_rand_uniform(x, 0.0, 1.0));
    TRY(dlt_tensor_cast(x, DLT_F16, &h));
    double v0, v1;
    TRY(dlt_tensor_get(x, 0, &v0));
    TRY(dlt_tensor_get(h, 0, &v1));
    printf("made a %s [256,3,32,32] channels-last tensor; x[0] = %.7f, as f16 %.7f\n",
           dlt_dtype_name(dlt_tensor_dtype(x)), v0, v1);
    uint64_t cur, peak, res;
    TRY(dlt_memory_stat(ctx, DLT_MEM_ALLOCATED, &cur));
    TRY(dlt_memory_stat(ctx, DLT_MEM_PEAK_ALLOCATED, &peak));
    TRY(dlt_memory_stat(ctx, DLT_MEM_RESERVED, &res));
    printf("memory: %.2f MiB allocated, %.2f MiB peak, %.2f MiB reserved\n", cur / 1048576.0,
           peak / 1048576.0, res / 1048576.0);
    dlt_tensor_release(x);
    dlt_tensor_release(h);
    TRY(dlt_empty_cache(ctx));
    dlt_ctx_destroy(ctx);
    return 0;
}
