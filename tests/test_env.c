/*
 * test_env.c - the environment variable table (lib/core/env.c, compiled in here: its
 * functions are internal): the table's shape, and how each type of variable reads its text.
 * tests/scripts/env_docs.sh checks the same table against docs/environment.md.
 */
#include <stdlib.h>
#include <string.h>

#include "../lib/core/env.h"
#include "harness.h"

static void test_table_shape(void) {
    for (int32_t i = 0; i < DLT__ENV_N; i++) {
        const dlt__env_var *r = &dlt__env_table[i];
        REQUIRE(r->name && !strncmp(r->name, "DLT_", 4), "row %d has no DLT_ name", i);
        CHECK(r->values && r->values[0] && r->meaning && r->meaning[0], "%s: values or meaning empty", r->name);
        for (int32_t j = 0; j < i; j++)
            CHECK(strcmp(r->name, dlt__env_table[j].name) != 0, "%s listed twice", r->name);
        CHECK(r->dflt_from < i, "%s takes its default from a later row", r->name);
        if (r->type == DLT__ENV_COUNT && r->dflt_from < 0)
            CHECK(r->lo <= r->dflt && r->dflt <= r->hi, "%s: default %lld outside %lld..%lld", r->name,
                  (long long)r->dflt, (long long)r->lo, (long long)r->hi);
    }
}

static void test_parse_rules(void) {
    /* choices: the two names, anything else is auto */
    CHECK(dlt__env_parse(DLT__ENV_CONV_IMPL, "cudnn", 0) == DLT_IMPL_CUDNN, "cudnn");
    CHECK(dlt__env_parse(DLT__ENV_BN_IMPL, "native", 0) == DLT_IMPL_NATIVE, "native");
    CHECK(dlt__env_parse(DLT__ENV_BN_IMPL, "Native", 0) == DLT_IMPL_AUTO, "case matters");
    CHECK(dlt__env_parse(DLT__ENV_BN_IMPL, NULL, DLT_IMPL_AUTO) == DLT_IMPL_AUTO, "unset");
    /* counts: a decimal prefix >= lo, clamped to hi; else the default */
    CHECK(dlt__env_parse(DLT__ENV_BN_NATIVE_MAX, "123", 7) == 123, "123");
    CHECK(dlt__env_parse(DLT__ENV_BN_NATIVE_MAX, "12abc", 7) == 12, "trailing text ignored");
    CHECK(dlt__env_parse(DLT__ENV_BN_NATIVE_MAX, " 9", 7) == 9, "leading space");
    CHECK(dlt__env_parse(DLT__ENV_BN_NATIVE_MAX, "0", 7) == 0, "0 is a count");
    CHECK(dlt__env_parse(DLT__ENV_BN_NATIVE_MAX, "abc", 7) == 7, "not a number");
    CHECK(dlt__env_parse(DLT__ENV_BN_NATIVE_MAX, "-1", 7) == 7, "negative");
    CHECK(dlt__env_parse(DLT__ENV_BN_NATIVE_MAX, "", 7) == 7, "empty");
    CHECK(dlt__env_parse(DLT__ENV_BN_PLAN_THREADS, "0", 4) == 4, "threads below 1");
    CHECK(dlt__env_parse(DLT__ENV_BN_PLAN_THREADS, "3", 4) == 3, "3 threads");
    CHECK(dlt__env_parse(DLT__ENV_BN_PLAN_THREADS, "99", 4) == 16, "threads clamped to 16");
    CHECK(dlt__env_parse(DLT__ENV_WORKSPACE_MAX, "99999999999999999999", 0) == INT64_MAX, "saturates");
    /* switches: exactly "0" turns an on-switch off, exactly "1" an off-switch on */
    CHECK(dlt__env_parse(DLT__ENV_BN_ASYNC_PLANS, "0", 1) == 0, "on-switch 0");
    CHECK(dlt__env_parse(DLT__ENV_BN_ASYNC_PLANS, "no", 1) == 1, "on-switch no");
    CHECK(dlt__env_parse(DLT__ENV_BN_ASYNC_PLANS, NULL, 1) == 1, "on-switch unset");
    CHECK(dlt__env_parse(DLT__ENV_CUDNN_AUTOTUNE, "1", 0) == 1, "off-switch 1");
    CHECK(dlt__env_parse(DLT__ENV_CUDNN_AUTOTUNE, "yes", 0) == 0, "off-switch yes");
    CHECK(dlt__env_parse(DLT__ENV_GEMM_AUTOTUNE, "1", 0) == 1, "GEMM autotune on");
    CHECK(dlt__env_parse(DLT__ENV_GEMM_AUTOTUNE, NULL, 0) == 0, "GEMM autotune unset: off");
}

static void test_read_and_defaults(void) {
    unsetenv("DLT_BN_NATIVE_MAX");
    unsetenv("DLT_BN_NATIVE_MAX_BWD");
    unsetenv("DLT_GRAD_QUEUE_MAX");
    dlt__env e;
    dlt__env_read(&e);
    CHECK(e.v[DLT__ENV_BN_NATIVE_MAX] == (int64_t)1 << 22, "BN threshold %lld", (long long)e.v[DLT__ENV_BN_NATIVE_MAX]);
    CHECK(e.v[DLT__ENV_GRAD_QUEUE_MAX] == (int64_t)4 << 20, "queue %lld", (long long)e.v[DLT__ENV_GRAD_QUEUE_MAX]);
    CHECK(e.v[DLT__ENV_BN_PLAN_THREADS] == 4 && e.v[DLT__ENV_BN_CUDNN_RUNNING_STATS] == 1 &&
              e.v[DLT__ENV_GRAPH_ARENA] == 1 && e.v[DLT__ENV_WORKSPACE_MAX] == INT64_MAX,
          "defaults");
    /* the backward threshold follows the forward's unless set itself */
    setenv("DLT_BN_NATIVE_MAX", "1000", 1);
    dlt__env_read(&e);
    CHECK(e.v[DLT__ENV_BN_NATIVE_MAX_BWD] == 1000, "bwd follows: %lld", (long long)e.v[DLT__ENV_BN_NATIVE_MAX_BWD]);
    setenv("DLT_BN_NATIVE_MAX_BWD", "5", 1);
    dlt__env_read(&e);
    CHECK(e.v[DLT__ENV_BN_NATIVE_MAX] == 1000 && e.v[DLT__ENV_BN_NATIVE_MAX_BWD] == 5, "bwd set");
    unsetenv("DLT_BN_NATIVE_MAX");
    unsetenv("DLT_BN_NATIVE_MAX_BWD");
}

static void test_path(void) {
    char buf[64];
    unsetenv("DLT_NVML_LIBRARY");
    CHECK(!strcmp(dlt__env_path(DLT__ENV_NVML_LIBRARY, buf, sizeof buf), "libnvidia-ml.so.1"), "default %s", buf);
    setenv("DLT_NVML_LIBRARY", "", 1);
    CHECK(!strcmp(dlt__env_path(DLT__ENV_NVML_LIBRARY, buf, sizeof buf), "libnvidia-ml.so.1"), "empty %s", buf);
    setenv("DLT_NVML_LIBRARY", "/opt/nvml.so", 1);
    CHECK(!strcmp(dlt__env_path(DLT__ENV_NVML_LIBRARY, buf, sizeof buf), "/opt/nvml.so"), "set %s", buf);
    char small[5];
    CHECK(!strcmp(dlt__env_path(DLT__ENV_NVML_LIBRARY, small, sizeof small), "/opt"), "truncated %s", small);
    unsetenv("DLT_NVML_LIBRARY");
}

int main(void) {
    RUN(test_table_shape);
    RUN(test_parse_rules);
    RUN(test_read_and_defaults);
    RUN(test_path);
    return th_done();
}
