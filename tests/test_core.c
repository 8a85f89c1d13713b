/*
 * test_core.c - versions, status strings, the thread-local error message, contexts (CPU,
 * CUDA where present, refusals), memory statistics, the failure-injection hook and the
 * flash attention switch.
 */
#include <pthread.h>

#include "harness.h"

static void test_version(void) {
    CHECK(dlt_version() == DLT_VERSION, "%u vs %d", dlt_version(), DLT_VERSION);
    CHECK(dlt_abi_version() == DLT_ABI_VERSION);
    CHECK(strcmp(dlt_version_string(), "0.1.0") == 0, "%s", dlt_version_string());
}

static void test_status_strings(void) {
    const dlt_status codes[] = {DLT_OK, DLT_ERR_INVALID_ARGUMENT, DLT_ERR_NULL_POINTER,
                                DLT_ERR_SHAPE, DLT_ERR_DTYPE, DLT_ERR_CONTEXT_MISMATCH,
                                DLT_ERR_INVALID_STATE, DLT_ERR_VERSION, DLT_ERR_NOT_SUPPORTED,
                                DLT_ERR_NO_DEVICE, DLT_ERR_OUT_OF_MEMORY,
                                DLT_ERR_DEVICE_OUT_OF_MEMORY, DLT_ERR_CUDA, DLT_ERR_CUBLAS,
                                DLT_ERR_CUDNN, DLT_ERR_CONTEXT_POISONED, DLT_ERR_IO,
                                DLT_ERR_FORMAT, DLT_ERR_INTERNAL};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = dlt_status_string(codes[i]);
        CHECK(s && s[0] && strcmp(s, "unknown status") != 0, "code %d", codes[i]);
        for (size_t j = 0; j < i; j++) CHECK(strcmp(s, dlt_status_string(codes[j])) != 0, "dup %d", codes[i]);
    }
    CHECK(strcmp(dlt_status_string(12345), "unknown status") == 0);
    /* kinds by hundreds */
    CHECK(DLT_ERR_SHAPE / 100 == 1 && DLT_ERR_NO_DEVICE / 100 == 2 &&
          DLT_ERR_DEVICE_OUT_OF_MEMORY / 100 == 3 && DLT_ERR_CUDNN / 100 == 4 &&
          DLT_ERR_FORMAT / 100 == 5 && DLT_ERR_INTERNAL / 100 == 9);
}

static void test_ctx_cpu(void) {
    dlt_ctx *ctx = NULL;
    CHECK_OK(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx));
    CHECK(dlt_ctx_device_type(ctx) == DLT_DEVICE_CPU);
    char name[64];
    CHECK_OK(dlt_ctx_device_name(ctx, name, sizeof name));
    CHECK(strcmp(name, "cpu") == 0, "%s", name);
    CHECK_OK(dlt_ctx_synchronize(ctx));
    CHECK_OK(dlt_ctx_wait_plans(ctx)); /* nothing is built in the background on the CPU */
    CHECK_OK(dlt_ctx_check(ctx));
    CHECK_OK(dlt_ctx_set_seed(ctx, 1234));
    uint64_t seed = 0, off = 99;
    CHECK_OK(dlt_ctx_get_seed(ctx, &seed, &off));
    CHECK(seed == 1234 && off == 0);
    dlt_ctx_destroy(ctx);
    dlt_ctx_destroy(NULL);
}

static void test_ctx_errors(void) {
    dlt_ctx *ctx = (dlt_ctx *)0x1;
    CHECK_STATUS(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION + 1, &ctx), DLT_ERR_VERSION);
    CHECK(strstr(dlt_last_error(), "ABI") != NULL, "%s", dlt_last_error());
    CHECK(ctx == (dlt_ctx *)0x1, "out-pointer must be untouched on failure");
    CHECK_STATUS(dlt_ctx_create(7, 0, DLT_ABI_VERSION, &ctx), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, NULL), DLT_ERR_NULL_POINTER);
    CHECK(strstr(dlt_last_error(), "dlt_ctx_create") == dlt_last_error(),
          "message names the function: %s", dlt_last_error());
    CHECK(dlt_last_error_code() == DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_ctx_synchronize(NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_ctx_wait_plans(NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_ctx_set_seed(NULL, 1), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_memory_stat(NULL, 0, NULL), DLT_ERR_NULL_POINTER);
    CHECK(dlt_ctx_device_type(NULL) == -1);
}

/* A CUDA context where none can exist must fail cleanly (no crash) with NO_DEVICE. */
static void test_ctx_cuda_absent(void) {
    int32_t n = -1;
    CHECK_OK(dlt_cuda_device_count(&n));
    CHECK(n >= 0);
    dlt_ctx *ctx = NULL;
    if (n > 0) {
        CHECK_STATUS(dlt_ctx_create(DLT_DEVICE_CUDA, n, DLT_ABI_VERSION, &ctx), DLT_ERR_NO_DEVICE);
        CHECK_STATUS(dlt_ctx_create(DLT_DEVICE_CUDA, -1, DLT_ABI_VERSION, &ctx), DLT_ERR_INVALID_ARGUMENT);
        return;
    }
    CHECK_STATUS(dlt_ctx_create(DLT_DEVICE_CUDA, 0, DLT_ABI_VERSION, &ctx), DLT_ERR_NO_DEVICE);
    CHECK(ctx == NULL);
    CHECK(strlen(dlt_last_error()) > 20, "a readable reason: %s", dlt_last_error());
}

static void test_last_error_copy(void) {
    CHECK_STATUS(dlt_ctx_synchronize(NULL), DLT_ERR_NULL_POINTER);
    char small[8];
    size_t len = dlt_last_error_copy(small, sizeof small);
    CHECK(len == strlen(dlt_last_error()));
    CHECK(strlen(small) == 7 && strncmp(small, dlt_last_error(), 7) == 0);
    CHECK(dlt_last_error_copy(NULL, 0) == len);
    dlt_clear_error();
    CHECK(dlt_last_error()[0] == '\0' && dlt_last_error_code() == DLT_OK);
}

static void *thread_fn(void *arg) {
    (void)arg;
    dlt_clear_error();
    const dlt_status st = dlt_ctx_set_seed(NULL, 0);
    return (void *)(st == DLT_ERR_NULL_POINTER && strstr(dlt_last_error(), "dlt_ctx_set_seed") ? (void *)1 : NULL);
}

static void test_error_thread_local(void) {
    CHECK_STATUS(dlt_ctx_synchronize(NULL), DLT_ERR_NULL_POINTER);
    pthread_t th;
    void *res = NULL;
    REQUIRE(pthread_create(&th, NULL, thread_fn, NULL) == 0);
    pthread_join(th, &res);
    CHECK(res == (void *)1, "the other thread saw its own message");
    CHECK(strstr(dlt_last_error(), "dlt_ctx_synchronize") != NULL,
          "this thread's message is untouched: %s", dlt_last_error());
}

static void test_memory_stats_cpu(void) {
    dlt_ctx *ctx = th_cpu_ctx();
    uint64_t a0, a1, peak, count;
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_ALLOCATED, &a0));
    int64_t shape[2] = {100, 10};
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, shape, 2, DLT_FORMAT_CONTIGUOUS, &t));
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_ALLOCATED, &a1));
    CHECK(a1 - a0 == 4000, "allocated grew by %llu", (unsigned long long)(a1 - a0));
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_ALLOC_COUNT, &count));
    CHECK(count == 1);
    dlt_tensor_release(t);
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_ALLOCATED, &a1));
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_PEAK_ALLOCATED, &peak));
    CHECK(a1 == a0 && peak == a0 + 4000);
    CHECK_OK(dlt_memory_reset_peak(ctx));
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_PEAK_ALLOCATED, &peak));
    CHECK(peak == a1);
    CHECK_OK(dlt_empty_cache(ctx));
    CHECK_STATUS(dlt_memory_stat(ctx, 42, &peak), DLT_ERR_INVALID_ARGUMENT);
    dlt_ctx_destroy(ctx);
}

static void test_fail_alloc_hook(void) {
    dlt_ctx *ctx = th_cpu_ctx();
    int64_t shape[1] = {16};
    dlt_tensor *keep = NULL, *t = NULL;
    CHECK_OK(dlt_tensor_zeros(ctx, DLT_F32, shape, 1, DLT_FORMAT_CONTIGUOUS, &keep));
    CHECK_OK(dlt_tensor_fill(keep, 3.0));
    int64_t c0 = 0, c1 = 0;
    CHECK_OK(dlt_testing_alloc_count(ctx, &c0));
    CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, shape, 1, DLT_FORMAT_CONTIGUOUS, &t));
    CHECK_OK(dlt_testing_alloc_count(ctx, &c1));
    int64_t per_tensor = c1 - c0;
    CHECK(per_tensor >= 1);
    dlt_tensor_release(t);
    for (int64_t k = 1; k <= per_tensor; k++) {
        t = NULL;
        CHECK_OK(dlt_testing_fail_alloc(ctx, k));
        CHECK_STATUS(dlt_tensor_empty(ctx, DLT_F32, shape, 1, DLT_FORMAT_CONTIGUOUS, &t),
                     DLT_ERR_OUT_OF_MEMORY);
        CHECK(t == NULL);
        /* the retry succeeds and earlier objects are intact */
        CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, shape, 1, DLT_FORMAT_CONTIGUOUS, &t));
        dlt_tensor_release(t);
    }
    double v = 0;
    CHECK_OK(dlt_tensor_get(keep, 15, &v));
    CHECK(v == 3.0);
    uint64_t count;
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_ALLOC_COUNT, &count));
    CHECK(count == 1, "no leak after failures: %llu live", (unsigned long long)count);
    dlt_tensor_release(keep);
    dlt_ctx_destroy(ctx);
}

/* The context's switches: flash and cudnn, the attention-kernel switches
 * (torch.backends.cuda.enable_flash_sdp, enable_cudnn_sdp), and cudnn_benchmark: stored on
 * the context, PyTorch's defaults, and without effect on the CPU backend's attention. */
typedef dlt_status (*switch_set_fn)(dlt_ctx *, int32_t);
typedef dlt_status (*switch_get_fn)(const dlt_ctx *, int32_t *);

static float *sdpa_cpu(dlt_ctx *ctx, switch_set_fn set, int32_t on) {
    const int64_t shape[4] = {1, 2, 5, 16};
    float v[160];
    for (int i = 0; i < 160; i++) v[i] = (float)((i * 37) % 23) / 23.0f - 0.5f;
    dlt_tensor *q = NULL, *y = NULL;
    CHECK_OK(set(ctx, on));
    CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, shape, 4, DLT_FORMAT_CONTIGUOUS, v, sizeof v, &q));
    CHECK_OK(dlt_scaled_dot_product_attention(q, q, q, 1, 0.0, 0.0, &y));
    float *out = calloc(160, sizeof(float));
    CHECK_OK(dlt_tensor_copy_to_host(y, out, sizeof v));
    dlt_tensor_release(y);
    dlt_tensor_release(q);
    return out;
}

static void check_ctx_switch(switch_set_fn set, switch_get_fn get, const char *set_name, const char *get_name,
                              int32_t dflt) {
    dlt_ctx *ctx = NULL;
    CHECK_OK(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx));
    int32_t on = 42;
    CHECK_OK(get(ctx, &on));
    CHECK(on == dflt, "%s: default %d, expected %d (as in PyTorch)", get_name, on, dflt);
    static const int32_t values[] = {0, 1, 5, 0}; /* any nonzero value is "on" */
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        CHECK_OK(set(ctx, values[i]));
        CHECK_OK(get(ctx, &on));
        CHECK(on == (values[i] != 0), "%s after set %d: %d", get_name, values[i], on);
    }
    /* errors: NULL context or out-pointer, nothing written */
    CHECK_STATUS(set(NULL, 1), DLT_ERR_NULL_POINTER);
    CHECK(strstr(dlt_last_error(), set_name) == dlt_last_error(), "%s", dlt_last_error());
    on = 42;
    CHECK_STATUS(get(NULL, &on), DLT_ERR_NULL_POINTER);
    CHECK(strstr(dlt_last_error(), get_name) == dlt_last_error(), "%s", dlt_last_error());
    CHECK(on == 42, "out written on failure: %d", on);
    CHECK_STATUS(get(ctx, NULL), DLT_ERR_NULL_POINTER);
    CHECK_OK(get(ctx, &on));
    CHECK(on == 0, "a failed call changed the setting: %d", on);
    /* the CPU backend ignores it: bitwise the same attention either way */
    float *a = sdpa_cpu(ctx, set, 0), *b = sdpa_cpu(ctx, set, 1);
    CHECK(memcmp(a, b, 160 * sizeof(float)) == 0, "CPU attention changed with %s on", set_name);
    free(a);
    free(b);
    dlt_ctx_destroy(ctx);
}

static void test_flash_sdp_setting(void) {
    check_ctx_switch(dlt_ctx_set_flash_sdp, dlt_ctx_flash_sdp_enabled, "dlt_ctx_set_flash_sdp",
                      "dlt_ctx_flash_sdp_enabled", 1);
}

static void test_cudnn_sdp_setting(void) {
    check_ctx_switch(dlt_ctx_set_cudnn_sdp, dlt_ctx_cudnn_sdp_enabled, "dlt_ctx_set_cudnn_sdp",
                      "dlt_ctx_cudnn_sdp_enabled", 1);
}

/* cudnn_benchmark (torch.backends.cudnn.benchmark): off by default, DLT_CUDNN_AUTOTUNE=1
 * turns the default on for contexts created after it is set; the CPU ignores it */
static void test_cudnn_benchmark_setting(void) {
    const char *was = getenv("DLT_CUDNN_AUTOTUNE");
    char saved[64] = "";
    if (was) snprintf(saved, sizeof saved, "%s", was);
    unsetenv("DLT_CUDNN_AUTOTUNE");
    check_ctx_switch(dlt_ctx_set_cudnn_benchmark, dlt_ctx_cudnn_benchmark_enabled,
                      "dlt_ctx_set_cudnn_benchmark", "dlt_ctx_cudnn_benchmark_enabled", 0);
    setenv("DLT_CUDNN_AUTOTUNE", "1", 1);
    dlt_ctx *ctx = NULL;
    CHECK_OK(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx));
    if (was) setenv("DLT_CUDNN_AUTOTUNE", saved, 1); else unsetenv("DLT_CUDNN_AUTOTUNE");
    int32_t on = 42;
    CHECK_OK(dlt_ctx_cudnn_benchmark_enabled(ctx, &on));
    CHECK(on == 1, "DLT_CUDNN_AUTOTUNE=1: default %d, expected 1", on);
    CHECK_OK(dlt_ctx_set_cudnn_benchmark(ctx, 0));
    CHECK_OK(dlt_ctx_cudnn_benchmark_enabled(ctx, &on));
    CHECK(on == 0, "set 0 after DLT_CUDNN_AUTOTUNE=1: %d", on);
    dlt_ctx_destroy(ctx);
}

static void test_cuda_ctx(void) {
    CUDA_CTX_OR_SKIP(ctx);
    char name[256];
    CHECK_OK(dlt_ctx_device_name(ctx, name, sizeof name));
    printf("# device: %s\n", name);
    CHECK(strlen(name) > 0);
    CHECK(dlt_ctx_device_type(ctx) == DLT_DEVICE_CUDA);
    CHECK_OK(dlt_ctx_synchronize(ctx));
    dlt_ctx_destroy(ctx);
}

int main(void) {
    RUN(test_version);
    RUN(test_status_strings);
    RUN(test_ctx_cpu);
    RUN(test_ctx_errors);
    RUN(test_ctx_cuda_absent);
    RUN(test_last_error_copy);
    RUN(test_error_thread_local);
    RUN(test_memory_stats_cpu);
    RUN(test_fail_alloc_hook);
    RUN(test_flash_sdp_setting);
    RUN(test_cudnn_sdp_setting);
    RUN(test_cudnn_benchmark_setting);
    RUN(test_cuda_ctx);
    return th_done();
}
