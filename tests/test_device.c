/*
 * test_device.c - hardware reports: the architecture table, device info keys and refusals,
 * benchmark argument checks, and the NVML monitor.
 *
 * The monitor is tested three ways: with NVML made absent on purpose (DLT_NVML_LIBRARY
 * naming a missing file), with whatever the machine has, and with tests/fake_nvml.c (built
 * next to this program as libfake_nvml.so), whose scripted values let the summaries be
 * checked exactly: means and maxima recomputed here from the number of samples taken,
 * throttle reasons told apart (idle is neither thermal nor power), failures reported.
 * With a GPU: info fields are sane, copy bandwidth and GEMM throughput are plausible and
 * bounded by physics, and the monitor samples during a GEMM loop.
 */
#include <limits.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static void sleep_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------------------------------
 * Architecture table and info keys
 * ------------------------------------------------------------------------------------- */
static void test_arch_table(void) {
    static const int32_t rows[][4] = {
        {7, 0, 64, 8},  {7, 2, 64, 8},  {7, 5, 64, 8},  {8, 0, 64, 4},   {8, 6, 128, 4},
        {8, 7, 128, 4}, {8, 9, 128, 4}, {9, 0, 128, 4}, {10, 0, 128, 4}, {10, 3, 128, 4},
        {12, 0, 128, 4}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int32_t c = -1, t = -1;
        CHECK_OK(dlt_device_arch_cores(rows[i][0], rows[i][1], &c, &t));
        CHECK(c == rows[i][2] && t == rows[i][3], "sm_%d%d: %d cuda, %d tensor per SM", rows[i][0],
              rows[i][1], c, t);
    }
    /* published totals: V100 80 SMs 5120/640, A100 108 SMs 6912/432, H100 SXM 132 SMs 16896/528 */
    int32_t c, t;
    CHECK_OK(dlt_device_arch_cores(7, 0, &c, &t));
    CHECK(80 * c == 5120 && 80 * t == 640);
    CHECK_OK(dlt_device_arch_cores(8, 0, &c, &t));
    CHECK(108 * c == 6912 && 108 * t == 432);
    CHECK_OK(dlt_device_arch_cores(9, 0, &c, &t));
    CHECK(132 * c == 16896 && 132 * t == 528);
    c = t = 77;
    CHECK_STATUS(dlt_device_arch_cores(6, 1, &c, &t), DLT_ERR_NOT_SUPPORTED);
    CHECK(strstr(dlt_last_error(), "6.1") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_device_arch_cores(9, 9, &c, &t), DLT_ERR_NOT_SUPPORTED);
    CHECK(c == 77 && t == 77, "outputs untouched on failure");
    CHECK_STATUS(dlt_device_arch_cores(9, 0, NULL, &t), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_device_arch_cores(9, 0, &c, NULL), DLT_ERR_NULL_POINTER);
}

/* Keys 0..N-1 have unique names and a valid type; N has neither. */
static int32_t check_key_table(const char *(*name)(int32_t), int32_t (*type)(int32_t),
                               int32_t expect_n) {
    int32_t n = 0;
    while (name(n)) {
        CHECK(type(n) >= DLT_VALUE_INT && type(n) <= DLT_VALUE_STRING, "key %d type %d", n, type(n));
        CHECK(strlen(name(n)) > 0);
        for (int32_t j = 0; j < n; j++) CHECK(strcmp(name(j), name(n)) != 0, "dup name %s", name(n));
        n++;
    }
    CHECK(n == expect_n, "%d keys, expected %d", n, expect_n);
    CHECK(type(n) == -1 && type(-1) == -1 && name(-1) == NULL);
    return n;
}

static void test_info_keys(void) {
    check_key_table(dlt_device_info_key_name, dlt_device_info_key_type, DLT_DEVINFO_PCI_BUS_ID + 1);
    CHECK(strcmp(dlt_device_info_key_name(DLT_DEVINFO_SM_COUNT), "sm_count") == 0);
    CHECK(dlt_device_info_key_type(DLT_DEVINFO_SM_COUNT) == DLT_VALUE_INT);
    CHECK(dlt_device_info_key_type(DLT_DEVINFO_MEMORY_BANDWIDTH_GBPS) == DLT_VALUE_DOUBLE);
    CHECK(dlt_device_info_key_type(DLT_DEVINFO_NAME) == DLT_VALUE_STRING);
    CHECK(dlt_device_info_key_type(DLT_DEVINFO_ARCH_NAME) == DLT_VALUE_STRING);
}

static void test_info_refusals(void) {
    dlt_device_info *info = (dlt_device_info *)0x1;
    CHECK_STATUS(dlt_device_info_get(0, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_device_info_get(-1, &info), DLT_ERR_INVALID_ARGUMENT);
    int32_t n = 0;
    CHECK_OK(dlt_cuda_device_count(&n));
    /* without a device (always here) NO_DEVICE; with devices, one past the last */
    CHECK_STATUS(dlt_device_info_get(n, &info), DLT_ERR_NO_DEVICE);
    CHECK(info == (dlt_device_info *)0x1, "out-pointer untouched on failure");
    CHECK(strstr(dlt_last_error(), "dlt_device_info_get") == dlt_last_error(), "%s",
          dlt_last_error());
    CHECK(strstr(dlt_last_error(), "CUDA") != NULL, "a reason a user can act on: %s",
          dlt_last_error());
    int64_t v = 5;
    double d = 5;
    char buf[8];
    CHECK_STATUS(dlt_device_info_int(NULL, DLT_DEVINFO_SM_COUNT, &v), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_device_info_double(NULL, DLT_DEVINFO_MEMORY_BANDWIDTH_GBPS, &d),
                 DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_device_info_string(NULL, DLT_DEVINFO_NAME, buf, sizeof buf, NULL),
                 DLT_ERR_NULL_POINTER);
    CHECK(v == 5 && d == 5);
    dlt_device_info_destroy(NULL);
}

/* ---------------------------------------------------------------------------------------
 * Benchmarks: argument checks and CPU contexts
 * ------------------------------------------------------------------------------------- */
static void test_bench_refusals(void) {
    dlt_ctx *ctx = th_cpu_ctx();
    double v = -1;
    CHECK_STATUS(dlt_bench_copy_bandwidth(ctx, 1 << 20, &v), DLT_ERR_NOT_SUPPORTED);
    CHECK(strstr(dlt_last_error(), "CPU") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_bench_gemm(ctx, DLT_GEMM_BF16, 64, 64, 64, &v), DLT_ERR_NOT_SUPPORTED);
    CHECK_STATUS(dlt_bench_copy_bandwidth(NULL, 1 << 20, &v), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_bench_copy_bandwidth(ctx, 1 << 20, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_bench_copy_bandwidth(ctx, 0, &v), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_bench_gemm(NULL, DLT_GEMM_FP32, 8, 8, 8, &v), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_bench_gemm(ctx, DLT_GEMM_FP32, 8, 8, 8, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_bench_gemm(ctx, 4, 8, 8, 8, &v), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_bench_gemm(ctx, -1, 8, 8, 8, &v), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_bench_gemm(ctx, DLT_GEMM_FP32, 0, 8, 8, &v), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_bench_gemm(ctx, DLT_GEMM_FP32, 8, -3, 8, &v), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_bench_gemm(ctx, DLT_GEMM_FP32, 8, 8, (int64_t)INT_MAX + 1, &v),
                 DLT_ERR_INVALID_ARGUMENT);
    CHECK(v == -1, "output untouched on failure");
    dlt_ctx_destroy(ctx);
}

/* ---------------------------------------------------------------------------------------
 * Monitor
 * ------------------------------------------------------------------------------------- */
static int64_t mon_i(const dlt_gpu_monitor *m, int32_t key) {
    int64_t v = -12345;
    dlt_status st = dlt_gpu_monitor_int(m, key, &v);
    if (st != DLT_OK) th_fail(__FILE__, __LINE__, "key %d: %s", key, dlt_last_error());
    return v;
}

static double mon_d(const dlt_gpu_monitor *m, int32_t key) {
    double v = -12345;
    dlt_status st = dlt_gpu_monitor_double(m, key, &v);
    if (st != DLT_OK) th_fail(__FILE__, __LINE__, "key %s: %s", dlt_gpu_monitor_key_name(key),
                              dlt_last_error());
    return v;
}

/* The fake NVML beside this program, or NULL (the case skips). */
static const char *fake_nvml_path(void) {
    static char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n <= 0) return NULL;
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (!slash) return NULL;
    strcpy(slash + 1, "libfake_nvml.so");
    return access(path, R_OK) == 0 ? path : NULL;
}

static void clear_fake_env(void) {
    unsetenv("DLT_NVML_LIBRARY");
    unsetenv("FAKE_NVML_INIT_FAIL");
    unsetenv("FAKE_NVML_NO_POWER");
    unsetenv("FAKE_NVML_REASONS");
}

#define USE_FAKE_OR_SKIP()                                                                    \
    do {                                                                                      \
        const char *fp_ = fake_nvml_path();                                                   \
        if (!fp_) SKIP("libfake_nvml.so not built next to the test");                         \
        clear_fake_env();                                                                     \
        setenv("DLT_NVML_LIBRARY", fp_, 1);                                                   \
    } while (0)

/* Waits (at most 5 s) until the monitor has taken at least n samples. */
static int64_t wait_samples(const dlt_gpu_monitor *m, int64_t n) {
    double t0 = now_s();
    int64_t s = 0;
    while ((s = mon_i(m, DLT_GPUMON_SAMPLES)) < n && now_s() - t0 < 5.0) sleep_ms(2);
    return s;
}

static void test_monitor_args(void) {
    dlt_gpu_monitor *m = (dlt_gpu_monitor *)0x1;
    CHECK_STATUS(dlt_gpu_monitor_start(0, 100, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_gpu_monitor_start(-1, 100, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_gpu_monitor_start(0, 0, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_gpu_monitor_start(0, -5, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_gpu_monitor_start(0, 3600001, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK(m == (dlt_gpu_monitor *)0x1, "out-pointer untouched on failure");
    int64_t v;
    double d;
    char buf[4];
    CHECK_STATUS(dlt_gpu_monitor_int(NULL, DLT_GPUMON_SAMPLES, &v), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_gpu_monitor_double(NULL, DLT_GPUMON_SAMPLES, &d), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_gpu_monitor_string(NULL, DLT_GPUMON_UNAVAILABLE_REASON, buf, 4, NULL),
                 DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_gpu_monitor_stop(NULL), DLT_ERR_NULL_POINTER);
    dlt_gpu_monitor_destroy(NULL);
    check_key_table(dlt_gpu_monitor_key_name, dlt_gpu_monitor_key_type,
                    DLT_GPUMON_START_MONOTONIC_S + 1);
    CHECK(strcmp(dlt_gpu_monitor_key_name(DLT_GPUMON_GPU_UTIL_MEAN), "gpu_util_mean") == 0);
}

/* NVML made absent on purpose: start succeeds, nothing is sampled, values are "n/a". */
static void test_monitor_without_nvml(void) {
    clear_fake_env();
    setenv("DLT_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    dlt_gpu_monitor *m = NULL;
    CHECK_OK(dlt_gpu_monitor_start(0, 5, &m));
    unsetenv("DLT_NVML_LIBRARY");
    REQUIRE(m != NULL);
    CHECK(mon_i(m, DLT_GPUMON_AVAILABLE) == 0);
    CHECK(mon_i(m, DLT_GPUMON_INTERVAL_MS) == 5);
    sleep_ms(20);
    CHECK(mon_i(m, DLT_GPUMON_SAMPLES) == 0);
    CHECK(mon_d(m, DLT_GPUMON_DURATION_S) >= 0.015);
    double d = 42;
    int64_t v = 42;
    CHECK_STATUS(dlt_gpu_monitor_double(m, DLT_GPUMON_GPU_UTIL_MEAN, &d), DLT_ERR_NOT_SUPPORTED);
    CHECK(strstr(dlt_last_error(), "cannot load") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_gpu_monitor_int(m, DLT_GPUMON_THERMAL_THROTTLE, &v), DLT_ERR_NOT_SUPPORTED);
    CHECK(d == 42 && v == 42, "outputs untouched");
    /* key/type refusals */
    CHECK_STATUS(dlt_gpu_monitor_int(m, DLT_GPUMON_POWER_MEAN_W, &v), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_gpu_monitor_double(m, DLT_GPUMON_UNAVAILABLE_REASON, &d),
                 DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_gpu_monitor_int(m, 999, &v), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_gpu_monitor_int(m, DLT_GPUMON_SAMPLES, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_gpu_monitor_string(m, DLT_GPUMON_SAMPLES, NULL, 0, NULL),
                 DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_gpu_monitor_string(m, DLT_GPUMON_UNAVAILABLE_REASON, NULL, 5, NULL),
                 DLT_ERR_NULL_POINTER);
    /* the reason: full length first, then a truncated and a full copy */
    size_t len = 0;
    CHECK_OK(dlt_gpu_monitor_string(m, DLT_GPUMON_UNAVAILABLE_REASON, NULL, 0, &len));
    CHECK(len > 20, "len %zu", len);
    char small[6], full[512];
    size_t len2 = 0;
    CHECK_OK(dlt_gpu_monitor_string(m, DLT_GPUMON_UNAVAILABLE_REASON, small, sizeof small, &len2));
    CHECK(len2 == len && strlen(small) == 5);
    CHECK_OK(dlt_gpu_monitor_string(m, DLT_GPUMON_UNAVAILABLE_REASON, full, sizeof full, NULL));
    CHECK(strlen(full) == len && strstr(full, "/nonexistent/libnvidia-ml.so.1") != NULL, "%s", full);
    CHECK(strncmp(small, full, 5) == 0);
    CHECK_OK(dlt_gpu_monitor_stop(m));
    double dur = mon_d(m, DLT_GPUMON_DURATION_S);
    sleep_ms(10);
    CHECK(mon_d(m, DLT_GPUMON_DURATION_S) == dur, "duration frozen after stop");
    CHECK_OK(dlt_gpu_monitor_stop(m)); /* a second stop is a no-op */
    dlt_gpu_monitor_destroy(m);
}

/* Whatever this machine has: NVML absent (CPU machines) or present (GPU machines). */
static void test_monitor_default_library(void) {
    clear_fake_env();
    dlt_gpu_monitor *m = NULL;
    CHECK_OK(dlt_gpu_monitor_start(0, 10, &m));
    REQUIRE(m != NULL);
    char reason[512];
    CHECK_OK(dlt_gpu_monitor_string(m, DLT_GPUMON_UNAVAILABLE_REASON, reason, sizeof reason, NULL));
    if (mon_i(m, DLT_GPUMON_AVAILABLE)) {
        CHECK(reason[0] == '\0', "%s", reason);
        CHECK(wait_samples(m, 2) >= 2);
        double t = mon_d(m, DLT_GPUMON_TEMP_MAX_C);
        CHECK(t > 5 && t < 120, "temperature %g C", t);
    } else {
        printf("# NVML not available here: %s\n", reason);
        CHECK(strlen(reason) > 10);
        sleep_ms(15);
        CHECK(mon_i(m, DLT_GPUMON_SAMPLES) == 0);
    }
    dlt_gpu_monitor_destroy(m); /* destroy without stop stops it */
}

/* Expected summaries of the fake's first n calls (see fake_nvml.c). */
typedef struct fake_expect {
    double util_mean, util_max, mem_util_mean, temp_mean, temp_max, clk_mean, clk_max, pw_mean,
        pw_max, mem_max;
} fake_expect;

static fake_expect fake_expected(int64_t n) {
    fake_expect e;
    memset(&e, 0, sizeof e);
    for (int64_t i = 1; i <= n; i++) {
        double u = (double)((37 * i) % 101), mu = (double)((11 * i) % 101);
        double t = 40.0 + (double)(i % 7), c = 1000.0 + 10.0 * (double)i;
        double p = (200000.0 + 1500.0 * (double)i) / 1000.0, mem = 1024.0 + (double)i;
        e.util_mean += u, e.mem_util_mean += mu, e.temp_mean += t, e.clk_mean += c, e.pw_mean += p;
        if (u > e.util_max) e.util_max = u;
        if (t > e.temp_max) e.temp_max = t;
        if (c > e.clk_max) e.clk_max = c;
        if (p > e.pw_max) e.pw_max = p;
        if (mem > e.mem_max) e.mem_max = mem;
    }
    e.util_mean /= (double)n, e.mem_util_mean /= (double)n, e.temp_mean /= (double)n;
    e.clk_mean /= (double)n, e.pw_mean /= (double)n;
    return e;
}

static void test_monitor_fake_values(void) {
    USE_FAKE_OR_SKIP();
    dlt_gpu_monitor *m = NULL;
    CHECK_OK(dlt_gpu_monitor_start(0, 5, &m));
    REQUIRE(m != NULL);
    char reason[256] = "?";
    CHECK_OK(dlt_gpu_monitor_string(m, DLT_GPUMON_UNAVAILABLE_REASON, reason, sizeof reason, NULL));
    REQUIRE(mon_i(m, DLT_GPUMON_AVAILABLE) == 1, "fake NVML not used: %s", reason);
    CHECK(reason[0] == '\0');
    /* read while the thread samples: counts never go back, summaries stay whole */
    int64_t last = 0;
    for (int i = 0; i < 40; i++) {
        int64_t s = mon_i(m, DLT_GPUMON_SAMPLES);
        CHECK(s >= last, "samples went from %lld to %lld", (long long)last, (long long)s);
        last = s;
        if (s > 0) {
            /* the fake's clock max after n samples is 1000 + 10 n: a torn update would show */
            double mx = mon_d(m, DLT_GPUMON_SM_CLOCK_MAX_MHZ);
            int64_t s2 = mon_i(m, DLT_GPUMON_SAMPLES);
            CHECK(mx >= 1000 + 10.0 * (double)s && mx <= 1000 + 10.0 * (double)s2,
                  "clock max %g between %lld and %lld samples", mx, (long long)s, (long long)s2);
        }
        sleep_ms(2);
    }
    CHECK(wait_samples(m, 4) >= 4);
    CHECK_OK(dlt_gpu_monitor_stop(m));
    int64_t n = mon_i(m, DLT_GPUMON_SAMPLES);
    sleep_ms(25);
    CHECK(mon_i(m, DLT_GPUMON_SAMPLES) == n, "no sampling after stop");
    printf("# %lld samples at 5 ms in %.3f s\n", (long long)n, mon_d(m, DLT_GPUMON_DURATION_S));
    fake_expect e = fake_expected(n);
    const double tol = 1e-9;
    CHECK_NEAR(mon_d(m, DLT_GPUMON_GPU_UTIL_MEAN), e.util_mean, tol);
    CHECK_NEAR(mon_d(m, DLT_GPUMON_GPU_UTIL_MAX), e.util_max, tol);
    CHECK_NEAR(mon_d(m, DLT_GPUMON_MEM_UTIL_MEAN), e.mem_util_mean, tol);
    CHECK_NEAR(mon_d(m, DLT_GPUMON_TEMP_MEAN_C), e.temp_mean, tol);
    CHECK_NEAR(mon_d(m, DLT_GPUMON_TEMP_MAX_C), e.temp_max, tol);
    CHECK_NEAR(mon_d(m, DLT_GPUMON_SM_CLOCK_MEAN_MHZ), e.clk_mean, tol);
    CHECK_NEAR(mon_d(m, DLT_GPUMON_SM_CLOCK_MAX_MHZ), e.clk_max, tol);
    CHECK_NEAR(mon_d(m, DLT_GPUMON_POWER_MEAN_W), e.pw_mean, tol);
    CHECK_NEAR(mon_d(m, DLT_GPUMON_POWER_MAX_W), e.pw_max, tol);
    CHECK_NEAR(mon_d(m, DLT_GPUMON_MEM_USED_MAX_MIB), e.mem_max, tol);
    /* only "GPU idle" was reported: neither thermal nor power throttling */
    CHECK(mon_i(m, DLT_GPUMON_THERMAL_THROTTLE) == 0 && mon_i(m, DLT_GPUMON_POWER_THROTTLE) == 0);
    CHECK(mon_i(m, DLT_GPUMON_THERMAL_THROTTLE_SAMPLES) == 0);
    /* the double getter converts integer keys */
    CHECK(mon_d(m, DLT_GPUMON_SAMPLES) == (double)n);
    dlt_gpu_monitor_destroy(m);
    clear_fake_env();
}

static void test_monitor_fake_interval(void) {
    USE_FAKE_OR_SKIP();
    dlt_gpu_monitor *m = NULL;
    CHECK_OK(dlt_gpu_monitor_start(0, 40, &m));
    REQUIRE(mon_i(m, DLT_GPUMON_AVAILABLE) == 1);
    double t0 = now_s();
    sleep_ms(200);
    CHECK_OK(dlt_gpu_monitor_stop(m));
    double el = now_s() - t0;
    int64_t n = mon_i(m, DLT_GPUMON_SAMPLES);
    /* one at start, then one per 40 ms: 6 in 200 ms; wake-ups may run late, never early */
    CHECK(n >= 2 && n <= (int64_t)((el + 0.005) / 0.040) + 1, "%lld samples in %.3f s",
          (long long)n, el);
    /* stop wakes the sleeping thread at once instead of waiting out the interval */
    dlt_gpu_monitor_destroy(m);
    dlt_gpu_monitor *slow = NULL;
    CHECK_OK(dlt_gpu_monitor_start(0, 3600000, &slow));
    CHECK(wait_samples(slow, 1) == 1);
    double s0 = now_s();
    CHECK_OK(dlt_gpu_monitor_stop(slow));
    CHECK(now_s() - s0 < 1.0, "stop took %.3f s", now_s() - s0);
    dlt_gpu_monitor_destroy(slow);
    clear_fake_env();
}

static void test_monitor_fake_throttle(void) {
    USE_FAKE_OR_SKIP();
    static const char *modes[2] = {"thermal", "power"};
    for (int k = 0; k < 2; k++) {
        setenv("FAKE_NVML_REASONS", modes[k], 1);
        dlt_gpu_monitor *m = NULL;
        CHECK_OK(dlt_gpu_monitor_start(0, 2, &m));
        REQUIRE(mon_i(m, DLT_GPUMON_AVAILABLE) == 1);
        CHECK(wait_samples(m, 4) >= 4);
        CHECK_OK(dlt_gpu_monitor_stop(m));
        int thermal = k == 0;
        CHECK(mon_i(m, DLT_GPUMON_THERMAL_THROTTLE) == thermal, "mode %s", modes[k]);
        CHECK(mon_i(m, DLT_GPUMON_POWER_THROTTLE) == !thermal, "mode %s", modes[k]);
        CHECK(mon_i(m, DLT_GPUMON_THERMAL_THROTTLE_SAMPLES) == thermal);
        CHECK(mon_i(m, DLT_GPUMON_POWER_THROTTLE_SAMPLES) == !thermal);
        dlt_gpu_monitor_destroy(m);
    }
    clear_fake_env();
}

static void test_monitor_fake_failures(void) {
    USE_FAKE_OR_SKIP();
    char reason[512];
    dlt_gpu_monitor *m = NULL;
    /* nvmlInit fails (driver not loaded) */
    setenv("FAKE_NVML_INIT_FAIL", "1", 1);
    CHECK_OK(dlt_gpu_monitor_start(0, 5, &m));
    unsetenv("FAKE_NVML_INIT_FAIL");
    CHECK(mon_i(m, DLT_GPUMON_AVAILABLE) == 0);
    CHECK_OK(dlt_gpu_monitor_string(m, DLT_GPUMON_UNAVAILABLE_REASON, reason, sizeof reason, NULL));
    CHECK(strstr(reason, "nvmlInit_v2") && strstr(reason, "Driver Not Loaded"), "%s", reason);
    dlt_gpu_monitor_destroy(m);
    /* no such GPU */
    CHECK_OK(dlt_gpu_monitor_start(3, 5, &m));
    CHECK(mon_i(m, DLT_GPUMON_AVAILABLE) == 0);
    CHECK_OK(dlt_gpu_monitor_string(m, DLT_GPUMON_UNAVAILABLE_REASON, reason, sizeof reason, NULL));
    CHECK(strstr(reason, "3") != NULL, "%s", reason);
    printf("# device 3: %s\n", reason);
    sleep_ms(10);
    CHECK(mon_i(m, DLT_GPUMON_SAMPLES) == 0);
    dlt_gpu_monitor_destroy(m);
    /* a board without power readings: power is n/a, the rest is there */
    setenv("FAKE_NVML_NO_POWER", "1", 1);
    CHECK_OK(dlt_gpu_monitor_start(0, 2, &m));
    CHECK(wait_samples(m, 2) >= 2);
    CHECK_OK(dlt_gpu_monitor_stop(m));
    double d = 7;
    CHECK_STATUS(dlt_gpu_monitor_double(m, DLT_GPUMON_POWER_MAX_W, &d), DLT_ERR_NOT_SUPPORTED);
    CHECK(strstr(dlt_last_error(), "Not Supported") != NULL, "%s", dlt_last_error());
    CHECK(d == 7);
    CHECK_NEAR(mon_d(m, DLT_GPUMON_SM_CLOCK_MAX_MHZ),
               1000.0 + 10.0 * (double)mon_i(m, DLT_GPUMON_SAMPLES), 1e-9);
    dlt_gpu_monitor_destroy(m);
    clear_fake_env();
}

/* ---- the sample series (report, issue 23) ---- */
static double mono_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Every sample of the fake is a point (stride 1), with the fake's i-th values. */
static void test_monitor_fake_series(void) {
    USE_FAKE_OR_SKIP();
    setenv("FAKE_NVML_REASONS", "thermal", 1);
    double before = mono_now_s();
    dlt_gpu_monitor *m = NULL;
    CHECK_OK(dlt_gpu_monitor_start(0, 2, &m));
    double after = mono_now_s();
    REQUIRE(mon_i(m, DLT_GPUMON_AVAILABLE) == 1);
    double t0 = mon_d(m, DLT_GPUMON_START_MONOTONIC_S);
    CHECK(t0 >= before && t0 <= after, "start %.6f not in [%.6f, %.6f]", t0, before, after);
    CHECK(wait_samples(m, 6) >= 6);
    CHECK_OK(dlt_gpu_monitor_stop(m));
    int64_t n = mon_i(m, DLT_GPUMON_SAMPLES);
    CHECK(mon_i(m, DLT_GPUMON_SERIES_POINTS) == n, "%lld points for %lld samples",
          (long long)mon_i(m, DLT_GPUMON_SERIES_POINTS), (long long)n);
    CHECK(mon_i(m, DLT_GPUMON_SERIES_STRIDE) == 1);
    /* two fields past the library's: NaN */
    enum { NFX = DLT_GPUMON_SERIES_NFIELDS + 2 };
    double *buf = calloc((size_t)(n + 4) * NFX, sizeof *buf);
    REQUIRE(buf);
    int64_t got = -1;
    CHECK_OK(dlt_gpu_monitor_series(m, 0, n + 4, NFX, buf, &got));
    CHECK(got == n, "%lld points copied", (long long)got);
    double dur = mon_d(m, DLT_GPUMON_DURATION_S), last_t = -1;
    for (int64_t k = 0; k < got; k++) {
        const double *p = buf + k * NFX;
        int64_t i = k + 1; /* the fake's call number */
        CHECK(p[DLT_GPUMON_SERIES_TIME_S] > last_t && p[DLT_GPUMON_SERIES_TIME_S] <= dur,
              "point %lld at %g s (previous %g, duration %g)", (long long)k, p[0], last_t, dur);
        last_t = p[DLT_GPUMON_SERIES_TIME_S];
        CHECK(p[DLT_GPUMON_SERIES_GPU_UTIL] == (double)((37 * i) % 101), "k=%lld", (long long)k);
        CHECK(p[DLT_GPUMON_SERIES_MEM_UTIL] == (double)((11 * i) % 101));
        CHECK(p[DLT_GPUMON_SERIES_TEMP_C] == 40.0 + (double)(i % 7));
        CHECK(p[DLT_GPUMON_SERIES_SM_CLOCK_MHZ] == 1000.0 + 10.0 * (double)i);
        CHECK_NEAR(p[DLT_GPUMON_SERIES_POWER_W], (200000.0 + 1500.0 * (double)i) / 1000.0, 1e-12);
        CHECK(p[DLT_GPUMON_SERIES_MEM_USED_MIB] == 1024.0 + (double)i);
        /* GPU idle always; HW thermal slowdown on the third call */
        CHECK(p[DLT_GPUMON_SERIES_REASONS] == (i == 3 ? 0x41 : 0x1), "k=%lld reasons %g", (long long)k,
              p[DLT_GPUMON_SERIES_REASONS]);
        CHECK(isnan(p[NFX - 1]) && isnan(p[NFX - 2]));
    }
    /* a window from the middle, and one past the end */
    double two[2 * 3];
    CHECK_OK(dlt_gpu_monitor_series(m, 2, 2, 3, two, &got));
    CHECK(got == 2 && two[0] == buf[2 * NFX] && two[3 + 2] == buf[3 * NFX + 2]);
    CHECK_OK(dlt_gpu_monitor_series(m, n, 5, 3, two, &got));
    CHECK(got == 0);
    CHECK_OK(dlt_gpu_monitor_series(m, 0, 0, 3, NULL, &got));
    CHECK(got == 0);
    /* refusals write nothing */
    got = 77;
    two[0] = 5;
    CHECK_STATUS(dlt_gpu_monitor_series(NULL, 0, 1, 3, two, &got), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_gpu_monitor_series(m, 0, 1, 3, two, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_gpu_monitor_series(m, 0, 1, 3, NULL, &got), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_gpu_monitor_series(m, -1, 1, 3, two, &got), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_gpu_monitor_series(m, 0, -1, 3, two, &got), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_gpu_monitor_series(m, 0, 1, 0, two, &got), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "nfields = 0") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_gpu_monitor_series(m, 0, 1, 65, two, &got), DLT_ERR_INVALID_ARGUMENT);
    CHECK(got == 77 && two[0] == 5, "outputs untouched");
    free(buf);
    dlt_gpu_monitor_destroy(m);
    clear_fake_env();
}

static void test_monitor_series_names_and_unavailable(void) {
    static const char *const names[DLT_GPUMON_SERIES_NFIELDS] = {
        "t_s", "gpu_util", "mem_util", "temp_c", "sm_clock_mhz", "power_w", "mem_used_mib",
        "clock_event_reasons"};
    for (int32_t f = 0; f < DLT_GPUMON_SERIES_NFIELDS; f++) {
        const char *nm = dlt_gpu_monitor_series_field_name(f);
        CHECK(nm && strcmp(nm, names[f]) == 0, "field %d: %s", f, nm ? nm : "NULL");
    }
    CHECK(dlt_gpu_monitor_series_field_name(DLT_GPUMON_SERIES_NFIELDS) == NULL);
    CHECK(dlt_gpu_monitor_series_field_name(-1) == NULL);
    clear_fake_env();
    setenv("DLT_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    dlt_gpu_monitor *m = NULL;
    CHECK_OK(dlt_gpu_monitor_start(0, 5, &m));
    unsetenv("DLT_NVML_LIBRARY");
    REQUIRE(m != NULL);
    CHECK(mon_i(m, DLT_GPUMON_SERIES_POINTS) == 0 && mon_i(m, DLT_GPUMON_SERIES_STRIDE) == 1);
    CHECK(mon_d(m, DLT_GPUMON_START_MONOTONIC_S) > 0);
    double buf[8];
    int64_t got = -1;
    CHECK_OK(dlt_gpu_monitor_series(m, 0, 1, 8, buf, &got));
    CHECK(got == 0);
    dlt_gpu_monitor_destroy(m);
}

/* ---------------------------------------------------------------------------------------
 * With a GPU
 * ------------------------------------------------------------------------------------- */
static int64_t info_i(const dlt_device_info *info, int32_t key) {
    int64_t v = -1;
    if (dlt_device_info_int(info, key, &v) != DLT_OK)
        th_fail(__FILE__, __LINE__, "%s: %s", dlt_device_info_key_name(key), dlt_last_error());
    return v;
}

static void test_cuda_info(void) {
    CUDA_CTX_OR_SKIP(ctx);
    dlt_device_info *info = NULL;
    CHECK_OK(dlt_device_info_get(0, &info));
    char name[256], ctxname[256], arch[64], bus[64];
    CHECK_OK(dlt_device_info_string(info, DLT_DEVINFO_NAME, name, sizeof name, NULL));
    CHECK_OK(dlt_device_info_string(info, DLT_DEVINFO_ARCH_NAME, arch, sizeof arch, NULL));
    CHECK_OK(dlt_device_info_string(info, DLT_DEVINFO_PCI_BUS_ID, bus, sizeof bus, NULL));
    CHECK_OK(dlt_ctx_device_name(ctx, ctxname, sizeof ctxname));
    CHECK(strcmp(name, ctxname) == 0, "%s vs %s", name, ctxname);
    int64_t sms = info_i(info, DLT_DEVINFO_SM_COUNT), major = info_i(info, DLT_DEVINFO_CC_MAJOR);
    int64_t minor = info_i(info, DLT_DEVINFO_CC_MINOR);
    int64_t mem = info_i(info, DLT_DEVINFO_MEMORY_BYTES), bus_bits = info_i(info, DLT_DEVINFO_MEMORY_BUS_BITS);
    double bw = 0;
    CHECK_OK(dlt_device_info_double(info, DLT_DEVINFO_MEMORY_BANDWIDTH_GBPS, &bw));
    printf("# %s (%s, sm_%lld%lld, %s): %lld SMs, %.1f GiB, %lld-bit bus, %.0f GB/s\n", name,
           arch, (long long)major, (long long)minor, bus, (long long)sms, (double)mem / 1073741824.0,
           (long long)bus_bits, bw);
    CHECK(sms > 0 && mem > 0 && bw > 0 && bus_bits > 0);
    CHECK(major >= 7);
    double clk = (double)info_i(info, DLT_DEVINFO_MEMORY_CLOCK_KHZ);
    CHECK_NEAR(bw, 2.0 * clk * 1e3 * (double)bus_bits / 8.0 / 1e9, 1e-6 * bw);
    int32_t cps = 0, tps = 0;
    if (dlt_device_arch_cores((int32_t)major, (int32_t)minor, &cps, &tps) == DLT_OK) {
        CHECK(info_i(info, DLT_DEVINFO_CUDA_CORES) == sms * cps);
        CHECK(info_i(info, DLT_DEVINFO_TENSOR_CORES) == sms * tps);
    }
    CHECK(info_i(info, DLT_DEVINFO_RUNTIME_VERSION) >= 12000);
    CHECK(info_i(info, DLT_DEVINFO_DRIVER_VERSION) >= info_i(info, DLT_DEVINFO_RUNTIME_VERSION));
    CHECK(info_i(info, DLT_DEVINFO_CUDNN_VERSION) >= 91400);
    CHECK(info_i(info, DLT_DEVINFO_CUBLAS_VERSION) >= 120000);
    CHECK(info_i(info, DLT_DEVINFO_L2_BYTES) > 0 && info_i(info, DLT_DEVINFO_SM_CLOCK_KHZ) > 0);
    CHECK(strlen(bus) >= 12, "%s", bus);
    int64_t v;
    CHECK_STATUS(dlt_device_info_int(info, DLT_DEVINFO_NAME, &v), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_device_info_int(info, DLT_DEVINFO_MEMORY_BANDWIDTH_GBPS, &v),
                 DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_device_info_int(info, 4242, &v), DLT_ERR_INVALID_ARGUMENT);
    dlt_device_info_destroy(info);
    dlt_ctx_destroy(ctx);
}

static void test_cuda_bench_copy(void) {
    CUDA_CTX_OR_SKIP(ctx);
    dlt_device_info *info = NULL;
    CHECK_OK(dlt_device_info_get(0, &info));
    double peak = 0, bw = 0;
    CHECK_OK(dlt_device_info_double(info, DLT_DEVINFO_MEMORY_BANDWIDTH_GBPS, &peak));
    dlt_device_info_destroy(info);
    uint64_t a0 = 0, a1 = 0;
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_ALLOCATED, &a0));
    CHECK_OK(dlt_bench_copy_bandwidth(ctx, (size_t)256 << 20, &bw));
    CHECK_OK(dlt_ctx_synchronize(ctx));
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_ALLOCATED, &a1));
    printf("# copy %.0f GB/s (read+write), theoretical %.0f GB/s (%.0f%%)\n", bw, peak,
           100.0 * bw / peak);
    CHECK(bw > 100, "%.1f GB/s", bw);
    /* 256 MiB buffers do not fit in L2: DRAM traffic cannot exceed the theoretical peak */
    CHECK(bw < 1.02 * peak, "%.1f GB/s above the %.1f GB/s peak: bytes miscounted?", bw, peak);
    CHECK(a1 == a0, "buffers released: %llu -> %llu", (unsigned long long)a0, (unsigned long long)a1);
    dlt_ctx_destroy(ctx);
}

static void test_cuda_bench_gemm(void) {
    CUDA_CTX_OR_SKIP(ctx);
    static const char *names[4] = {"fp32", "tf32", "fp16", "bf16"};
    double tf[4] = {0, 0, 0, 0};
    for (int32_t kind = 0; kind < 4; kind++) {
        CHECK_OK(dlt_bench_gemm(ctx, kind, 4096, 4096, 4096, &tf[kind]));
        printf("# GEMM 4096^3 %s: %.1f TFLOP/s\n", names[kind], tf[kind]);
        CHECK(tf[kind] > 1 && tf[kind] < 5000, "%s %.2f TFLOP/s", names[kind], tf[kind]);
    }
    CHECK(tf[DLT_GEMM_BF16] > tf[DLT_GEMM_FP32], "bf16 %.1f vs fp32 %.1f", tf[3], tf[0]);
    CHECK(tf[DLT_GEMM_FP16] > tf[DLT_GEMM_FP32], "fp16 %.1f vs fp32 %.1f", tf[2], tf[0]);
    CHECK(tf[DLT_GEMM_TF32] > tf[DLT_GEMM_FP32], "tf32 %.1f vs fp32 %.1f", tf[1], tf[0]);
    /* an odd shape works too */
    double t = 0;
    CHECK_OK(dlt_bench_gemm(ctx, DLT_GEMM_BF16, 1000, 37, 129, &t));
    CHECK(t > 0);
    CHECK_OK(dlt_ctx_check(ctx));
    dlt_ctx_destroy(ctx);
}

static void test_cuda_monitor_during_gemm(void) {
    CUDA_CTX_OR_SKIP(ctx);
    clear_fake_env();
    dlt_gpu_monitor *m = NULL;
    CHECK_OK(dlt_gpu_monitor_start(0, 20, &m));
    if (!mon_i(m, DLT_GPUMON_AVAILABLE)) {
        char reason[200];
        CHECK_OK(dlt_gpu_monitor_string(m, DLT_GPUMON_UNAVAILABLE_REASON, reason, sizeof reason, NULL));
        dlt_gpu_monitor_destroy(m);
        dlt_ctx_destroy(ctx);
        SKIP("NVML absent on this GPU machine: %.200s", reason);
    }
    double t0 = now_s(), tf = 0;
    while (now_s() - t0 < 1.5) CHECK_OK(dlt_bench_gemm(ctx, DLT_GEMM_BF16, 8192, 8192, 8192, &tf));
    CHECK_OK(dlt_gpu_monitor_stop(m));
    int64_t n = mon_i(m, DLT_GPUMON_SAMPLES);
    printf("# %lld samples: util mean %.0f%% max %.0f%%, %.0f C max, SM %.0f MHz mean, %.0f W max, "
           "%.0f MiB used, throttle thermal %lld power %lld\n",
           (long long)n, mon_d(m, DLT_GPUMON_GPU_UTIL_MEAN), mon_d(m, DLT_GPUMON_GPU_UTIL_MAX),
           mon_d(m, DLT_GPUMON_TEMP_MAX_C), mon_d(m, DLT_GPUMON_SM_CLOCK_MEAN_MHZ),
           mon_d(m, DLT_GPUMON_POWER_MAX_W), mon_d(m, DLT_GPUMON_MEM_USED_MAX_MIB),
           (long long)mon_i(m, DLT_GPUMON_THERMAL_THROTTLE), (long long)mon_i(m, DLT_GPUMON_POWER_THROTTLE));
    CHECK(n > 10, "%lld samples in 1.5 s at 20 ms", (long long)n);
    CHECK(mon_d(m, DLT_GPUMON_GPU_UTIL_MAX) > 50);
    CHECK(mon_d(m, DLT_GPUMON_POWER_MAX_W) > 50);
    CHECK(mon_d(m, DLT_GPUMON_MEM_USED_MAX_MIB) > 3 * 128); /* three 128 MiB bf16 operands */
    CHECK(mon_d(m, DLT_GPUMON_SM_CLOCK_MAX_MHZ) > 300);
    dlt_gpu_monitor_destroy(m);
    dlt_ctx_destroy(ctx);
}

int main(void) {
    RUN(test_arch_table);
    RUN(test_info_keys);
    RUN(test_info_refusals);
    RUN(test_bench_refusals);
    RUN(test_monitor_args);
    RUN(test_monitor_without_nvml);
    RUN(test_monitor_default_library);
    RUN(test_monitor_fake_values);
    RUN(test_monitor_fake_interval);
    RUN(test_monitor_fake_throttle);
    RUN(test_monitor_fake_failures);
    RUN(test_monitor_fake_series);
    RUN(test_monitor_series_names_and_unavailable);
    RUN(test_cuda_info);
    RUN(test_cuda_bench_copy);
    RUN(test_cuda_bench_gemm);
    RUN(test_cuda_monitor_during_gemm);
    return th_done();
}
