/*
 * env.c - the environment variables of the library (env.h): the table and the one reader.
 * A row's `values` column is what docs/environment.md shows in its "values (default)"
 * column, and `meaning` its "effect" column; the env_docs test compares them.
 */
#include <stdlib.h>
#include <string.h>

#include "env.h"

const dlt__env_var dlt__env_table[DLT__ENV_N] = {
    [DLT__ENV_CONV_IMPL] = {"DLT_CONV_IMPL", DLT__ENV_IMPL, -1, DLT_IMPL_AUTO, 0, 0,
        "`cudnn`, `native` (unset: auto)",
        "convolutions on CUDA: cuBLASLt GEMMs where DLT_CONV_GEMM says, else cuDNN when a plan "
        "finalizes, else our kernels; `cudnn` sends every convolution to cuDNN and makes a "
        "missing plan an error, `native` always uses ours (docs/ops.md)"},
    [DLT__ENV_BN_IMPL] = {"DLT_BN_IMPL", DLT__ENV_IMPL, -1, DLT_IMPL_AUTO, 0, 0,
        "`cudnn`, `native` (unset: auto)",
        "BatchNorm on CUDA: `cudnn` skips our single-pass kernels and makes a missing plan an "
        "error; `native` uses ours wherever they apply"},
    [DLT__ENV_BN_NATIVE_MAX] = {"DLT_BN_NATIVE_MAX", DLT__ENV_COUNT, -1, (int64_t)1 << 22, 0,
        INT64_MAX, "elements (4194304)",
        "auto mode: channels-last BatchNorm tensors of at most this many elements run our "
        "single-pass kernels, larger ones cuDNN; `0` sends every BN to cuDNN"},
    [DLT__ENV_BN_NATIVE_MAX_BWD] = {"DLT_BN_NATIVE_MAX_BWD", DLT__ENV_COUNT,
        DLT__ENV_BN_NATIVE_MAX, 0, 0, INT64_MAX, "elements (`DLT_BN_NATIVE_MAX`)",
        "the same threshold for the backward alone"},
    [DLT__ENV_BN_ONE_KERNEL] = {"DLT_BN_ONE_KERNEL", DLT__ENV_COUNT, -1, 1, 0, 2,
        "`0`, `1`, `2` (1)",
        "`0`: our single-pass BatchNorm kernels always take two launches per direction (the "
        "reduction, then the elementwise pass), also where one co-resident grid holds the "
        "tensor on chip and does both (docs/ops.md); `2` (for tests): one kernel without "
        "asking whether the grid fits, so a grid too large is refused by the runtime and "
        "falls back to two launches"},
    [DLT__ENV_BN_CUDNN_RUNNING_STATS] = {"DLT_BN_CUDNN_RUNNING_STATS", DLT__ENV_ON, -1, 1, 0, 0,
        "`0` (unset: on)",
        "`0`: our kernel updates the running statistics from cuDNN's saved mean and inverse std "
        "instead of cuDNN's BN graph"},
    [DLT__ENV_BN_ASYNC_PLANS] = {"DLT_BN_ASYNC_PLANS", DLT__ENV_ON, -1, 1, 0, 0,
        "`0` (unset: on)",
        "`0`: cuDNN BatchNorm plans are built in the calling thread (the first step then waits "
        "for NVRTC) instead of by background threads"},
    [DLT__ENV_BN_PLAN_THREADS] = {"DLT_BN_PLAN_THREADS", DLT__ENV_COUNT, -1, 4, 1, 16,
        "1-16 (4)", "background threads building cuDNN BatchNorm plans, per context"},
    [DLT__ENV_CUDNN_AUTOTUNE] = {"DLT_CUDNN_AUTOTUNE", DLT__ENV_OFF, -1, 0, 0, 0,
        "`1` (unset: off)",
        "the default of `dlt_ctx_set_cudnn_benchmark` (torch.backends.cudnn.benchmark) for "
        "contexts created after it is set: time the candidate cuDNN engines of each new "
        "convolution shape and keep the fastest (heuristics' first choice otherwise)"},
    [DLT__ENV_GEMM_AUTOTUNE] = {"DLT_GEMM_AUTOTUNE", DLT__ENV_OFF, -1, 0, 0, 0,
        "`1` (unset: off)",
        "time cuBLASLt's first 8 algorithms for each new GEMM shape at its first overwriting call "
        "outside a capture and keep the fastest (the heuristic's first choice otherwise; the "
        "choice, so the last bits, may differ from run to run)"},
    [DLT__ENV_CONV_GEMM] = {"DLT_CONV_GEMM", DLT__ENV_COUNT, -1, 2, 0, 2,
        "`0`, `1`, `2` (2)",
        "convolutions on CUDA that run as cuBLASLt GEMMs instead of cuDNN in the default "
        "selection: `1` those with a one-pixel output, `2` also the 1x1 stride-1 unpadded "
        "channels-last ones, `0` none (docs/ops.md)"},
    [DLT__ENV_CONV_PAD_CHANNELS] = {"DLT_CONV_PAD_CHANNELS", DLT__ENV_COUNT, -1, 4, 0, 8,
        "`0`-`8` (4)",
        "16-bit channels-last convolutions on CUDA with fewer input channels than this (an "
        "image's 3, as ResNet's stem) run their forward and weight gradient through cuDNN "
        "with the channels padded to this many with zeros; `0` runs them as they are "
        "(docs/ops.md)"},
    [DLT__ENV_WORKSPACE_MAX] = {"DLT_WORKSPACE_MAX", DLT__ENV_COUNT, -1, INT64_MAX, 0, INT64_MAX,
        "bytes (unlimited)",
        "cuDNN engines and cuBLASLt algorithms needing more workspace are passed over when "
        "another exists (performance.md \"Memory\")"},
    [DLT__ENV_GRAD_QUEUE_MAX] = {"DLT_GRAD_QUEUE_MAX", DLT__ENV_COUNT, -1, (int64_t)4 << 20, 0,
        INT64_MAX, "bytes (4194304)",
        "the fp16/bf16 weight gradients queued under autocast for the fp32 accumulation are "
        "flushed whenever the queue holds this much (`0` acts as 1: every gradient at once; any "
        "backend; performance.md \"Memory\")"},
    [DLT__ENV_GRAPH_ARENA] = {"DLT_GRAPH_ARENA", DLT__ENV_COUNT, -1, 1, 0, INT64_MAX,
        "`0` (unset: on)",
        "`0`: the memory a captured step allocates is left to the driver's graph memory nodes "
        "instead of one arena per graph sized by the last warm-up step (performance.md "
        "\"Memory\")"},
    [DLT__ENV_SIDE_STREAM] = {"DLT_SIDE_STREAM", DLT__ENV_ON, -1, 1, 0, 0,
        "`0` (unset: on)",
        "`0`: a convolution's weight gradient and the queued fp32 gradient accumulations run on "
        "the context's stream instead of beside the data gradients on a second stream (eager "
        "and captured steps; performance.md \"Concurrency\")"},
    [DLT__ENV_NVML_LIBRARY] = {"DLT_NVML_LIBRARY", DLT__ENV_PATH, -1, 0, 0, 0,
        "path (`libnvidia-ml.so.1`)",
        "the NVML library the GPU monitor loads with dlopen (read when a monitor starts)"},
    [DLT__ENV_NCCL_LIBRARY] = {"DLT_NCCL_LIBRARY", DLT__ENV_PATH, -1, 0, 0, 0,
        "path (`libnccl.so.2`)",
        "the NCCL library CUDA communicators load with dlopen, at the first NCCL call "
        "(docs/distributed.md)"},
    [DLT__ENV_DIST_TIMEOUT] = {"DLT_DIST_TIMEOUT", DLT__ENV_TEXT, -1, 0, 0, 0,
        "seconds (1800)",
        "how long a communicator waits for the other processes (rendezvous, every "
        "collective, NCCL's watchdog) before failing with `DLT_ERR_DIST_TIMEOUT`; read "
        "when a communicator is created without `timeout_ms`"},
    [DLT__ENV_MASTER_PORT] = {"DLT_MASTER_PORT", DLT__ENV_TEXT, -1, 0, 0, 0,
        "port",
        "rank 0's rendezvous port, ahead of `MASTER_PORT` (use it when a launcher holds "
        "`MASTER_PORT` itself); read when a communicator is created without "
        "`master_port`"},
};

/* The default text of a PATH row, from its `values` column: what lies between the first
 * pair of backquotes. */
static const char *path_default(const dlt__env_var *r, char *buf, size_t n) {
    const char *a = strchr(r->values, '`');
    const char *b = a ? strchr(a + 1, '`') : NULL;
    size_t len = a && b ? (size_t)(b - a - 1) : 0;
    if (len >= n) len = n - 1;
    if (len) memcpy(buf, a + 1, len);
    buf[len] = '\0';
    return buf;
}

int64_t dlt__env_parse(dlt__env_id id, const char *text, int64_t dflt) {
    const dlt__env_var *r = &dlt__env_table[id];
    if (!text) return dflt;
    switch (r->type) {
    case DLT__ENV_IMPL:
        if (strcmp(text, "cudnn") == 0) return DLT_IMPL_CUDNN;
        if (strcmp(text, "native") == 0) return DLT_IMPL_NATIVE;
        return DLT_IMPL_AUTO;
    case DLT__ENV_COUNT: {
        char *end = NULL;
        const long long n = strtoll(text, &end, 10);
        if (end == text || n < r->lo) return dflt;
        return n > r->hi ? r->hi : (int64_t)n;
    }
    case DLT__ENV_ON: return strcmp(text, "0") != 0;
    case DLT__ENV_OFF: return strcmp(text, "1") == 0;
    default: return 0;
    }
}

void dlt__env_read(dlt__env *out) {
    for (int32_t i = 0; i < DLT__ENV_N; i++) {
        const dlt__env_var *r = &dlt__env_table[i];
        if (r->type == DLT__ENV_PATH || r->type == DLT__ENV_TEXT) {
            out->v[i] = 0;
            continue;
        }
        /* rows whose default is another variable come after it in the table */
        const int64_t dflt = r->dflt_from >= 0 ? out->v[r->dflt_from] : r->dflt;
        out->v[i] = dlt__env_parse((dlt__env_id)i, getenv(r->name), dflt);
    }
}

const char *dlt__env_path(dlt__env_id id, char *buf, size_t n) {
    const char *v = getenv(dlt__env_table[id].name);
    if (!v || !v[0]) return path_default(&dlt__env_table[id], buf, n);
    size_t len = strlen(v);
    if (len >= n) len = n - 1;
    memcpy(buf, v, len);
    buf[len] = '\0';
    return buf;
}

const char *dlt__env_text(dlt__env_id id) { return getenv(dlt__env_table[id].name); }

const char *dlt__env_launcher(const char *name) { return getenv(name); }
