/*
 * info.c - device info handles, the architecture table (CUDA and tensor cores per SM) and
 * the argument checks of the micro-benchmarks.
 *
 * The raw properties come from the CUDA backend's device_query entry (cuda/device.c); a
 * build without CUDA has no CUDA backend and reports DLT_ERR_NO_DEVICE here. The values a comparison table wants but the runtime does not report
 * (core counts, theoretical bandwidth, architecture name) are derived here, in C, so that
 * they are the same in every build and testable without a GPU.
 *
 * Keys are indexes into one table of (name, type); the getters switch on the key. A new
 * key is a new row at the end plus a case.
 */
#include <stdlib.h>
#include <string.h>

#include "device_internal.h"

/* ---------------------------------------------------------------------------------------
 * Architecture table (documented in include/dltrain/device.h)
 * ------------------------------------------------------------------------------------- */
typedef struct arch_row {
    int32_t major, minor; /* minor -1: every minor of that major */
    int32_t cuda_per_sm, tensor_per_sm;
    const char *name;
} arch_row;

static const arch_row ARCH[] = {
    {7, 0, 64, 8, "Volta"},      {7, 2, 64, 8, "Volta"},     {7, 5, 64, 8, "Turing"},
    {8, 0, 64, 4, "Ampere"},     {8, 6, 128, 4, "Ampere"},   {8, 7, 128, 4, "Ampere"},
    {8, 9, 128, 4, "Ada Lovelace"}, {9, 0, 128, 4, "Hopper"}, {10, 0, 128, 4, "Blackwell"},
    {10, 1, 128, 4, "Blackwell"}, {10, 3, 128, 4, "Blackwell"}, {11, 0, 128, 4, "Blackwell"},
    {12, 0, 128, 4, "Blackwell"}, {12, 1, 128, 4, "Blackwell"},
};

static const arch_row *arch_find(int32_t major, int32_t minor) {
    for (size_t i = 0; i < sizeof ARCH / sizeof ARCH[0]; i++)
        if (ARCH[i].major == major && ARCH[i].minor == minor) return &ARCH[i];
    return NULL;
}

dlt_status dlt_device_arch_cores(int32_t cc_major, int32_t cc_minor, int32_t *cuda_cores_per_sm,
                                 int32_t *tensor_cores_per_sm) {
    static const char *F = "dlt_device_arch_cores";
    DLT_NULL_CHECK(cuda_cores_per_sm, F);
    DLT_NULL_CHECK(tensor_cores_per_sm, F);
    const arch_row *r = arch_find(cc_major, cc_minor);
    if (!r)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F,
                        "compute capability %d.%d is not in the architecture table (known: Volta "
                        "7.0 to Blackwell 12.1)",
                        cc_major, cc_minor);
    *cuda_cores_per_sm = r->cuda_per_sm;
    *tensor_cores_per_sm = r->tensor_per_sm;
    return DLT_OK;
}

/* ---------------------------------------------------------------------------------------
 * Info handles
 * ------------------------------------------------------------------------------------- */
struct dlt_device_info {
    int32_t index;
    dlt_device_props p;
    const arch_row *arch; /* NULL when the architecture is not in the table */
};

typedef struct key_row {
    const char *name;
    int32_t type;
} key_row;

static const key_row DEVINFO_KEYS[] = {
    [DLT_DEVINFO_NAME] = {"name", DLT_VALUE_STRING},
    [DLT_DEVINFO_DEVICE_INDEX] = {"device_index", DLT_VALUE_INT},
    [DLT_DEVINFO_CC_MAJOR] = {"cc_major", DLT_VALUE_INT},
    [DLT_DEVINFO_CC_MINOR] = {"cc_minor", DLT_VALUE_INT},
    [DLT_DEVINFO_ARCH_NAME] = {"arch_name", DLT_VALUE_STRING},
    [DLT_DEVINFO_SM_COUNT] = {"sm_count", DLT_VALUE_INT},
    [DLT_DEVINFO_CUDA_CORES] = {"cuda_cores", DLT_VALUE_INT},
    [DLT_DEVINFO_TENSOR_CORES] = {"tensor_cores", DLT_VALUE_INT},
    [DLT_DEVINFO_MEMORY_BYTES] = {"memory_bytes", DLT_VALUE_INT},
    [DLT_DEVINFO_MEMORY_BUS_BITS] = {"memory_bus_bits", DLT_VALUE_INT},
    [DLT_DEVINFO_MEMORY_CLOCK_KHZ] = {"memory_clock_khz", DLT_VALUE_INT},
    [DLT_DEVINFO_MEMORY_BANDWIDTH_GBPS] = {"memory_bandwidth_gbps", DLT_VALUE_DOUBLE},
    [DLT_DEVINFO_L2_BYTES] = {"l2_bytes", DLT_VALUE_INT},
    [DLT_DEVINFO_SM_CLOCK_KHZ] = {"sm_clock_khz", DLT_VALUE_INT},
    [DLT_DEVINFO_DRIVER_VERSION] = {"driver_version", DLT_VALUE_INT},
    [DLT_DEVINFO_RUNTIME_VERSION] = {"runtime_version", DLT_VALUE_INT},
    [DLT_DEVINFO_CUDNN_VERSION] = {"cudnn_version", DLT_VALUE_INT},
    [DLT_DEVINFO_CUBLAS_VERSION] = {"cublas_version", DLT_VALUE_INT},
    [DLT_DEVINFO_PCI_BUS_ID] = {"pci_bus_id", DLT_VALUE_STRING},
};
#define DEVINFO_NKEYS ((int32_t)(sizeof DEVINFO_KEYS / sizeof DEVINFO_KEYS[0]))

const char *dlt_device_info_key_name(int32_t key) {
    return key >= 0 && key < DEVINFO_NKEYS ? DEVINFO_KEYS[key].name : NULL;
}

int32_t dlt_device_info_key_type(int32_t key) {
    return key >= 0 && key < DEVINFO_NKEYS ? DEVINFO_KEYS[key].type : -1;
}

dlt_status dlt_device_info_get(int32_t device_index, dlt_device_info **out) {
    static const char *F = "dlt_device_info_get";
    DLT_NULL_CHECK(out, F);
    if (device_index < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "device_index %d is negative", device_index);
    dlt_device_props p;
    memset(&p, 0, sizeof p);
    const dlt_backend *cu = dlt__cuda_backend();
    if (!cu || !cu->device_query)
        return dlt__err(DLT_ERR_NO_DEVICE, F,
                        "cannot read CUDA device %d: this libdltrain was built without CUDA support "
                        "(configure with -Dcuda=enabled on a machine with the CUDA toolkit and cuDNN)",
                        device_index);
    DLT_CHECK(cu->device_query(device_index, F, &p));
    dlt_device_info *info = calloc(1, sizeof *info);
    if (!info) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the device info");
    info->index = device_index;
    info->p = p;
    info->arch = arch_find(p.cc_major, p.cc_minor);
    *out = info;
    return DLT_OK;
}

void dlt_device_info_destroy(dlt_device_info *info) { free(info); }

/* Checks handle, out-pointer and key (and that the key has the wanted type class). */
static dlt_status key_check(const void *h, const void *out, int32_t key, int numeric,
                            const char *func) {
    if (!h) return dlt__err(DLT_ERR_NULL_POINTER, func, "argument 'info' is NULL");
    if (!out) return dlt__err(DLT_ERR_NULL_POINTER, func, "the out-pointer is NULL");
    int32_t t = dlt_device_info_key_type(key);
    if (t < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "unknown key %d (keys are 0..%d)", key,
                        DEVINFO_NKEYS - 1);
    if (numeric == 1 && t != DLT_VALUE_INT)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "key %d (%s) is not an integer", key,
                        DEVINFO_KEYS[key].name);
    if (numeric == 2 && t == DLT_VALUE_STRING)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "key %d (%s) is a string", key,
                        DEVINFO_KEYS[key].name);
    return DLT_OK;
}

static dlt_status arch_unknown(const dlt_device_info *info, const char *func, const char *what) {
    return dlt__err(DLT_ERR_NOT_SUPPORTED, func,
                    "%s of %s (compute capability %d.%d) are unknown: the architecture is not "
                    "in libdltrain's table",
                    what, info->p.name, info->p.cc_major, info->p.cc_minor);
}

/* Integer value of an integer key (type already checked). */
static dlt_status info_int(const dlt_device_info *info, int32_t key, const char *func,
                           int64_t *v) {
    const dlt_device_props *p = &info->p;
    switch (key) {
    case DLT_DEVINFO_DEVICE_INDEX: *v = info->index; return DLT_OK;
    case DLT_DEVINFO_CC_MAJOR: *v = p->cc_major; return DLT_OK;
    case DLT_DEVINFO_CC_MINOR: *v = p->cc_minor; return DLT_OK;
    case DLT_DEVINFO_SM_COUNT: *v = p->sm_count; return DLT_OK;
    case DLT_DEVINFO_CUDA_CORES:
        if (!info->arch) return arch_unknown(info, func, "CUDA cores");
        *v = (int64_t)p->sm_count * info->arch->cuda_per_sm;
        return DLT_OK;
    case DLT_DEVINFO_TENSOR_CORES:
        if (!info->arch) return arch_unknown(info, func, "tensor cores");
        *v = (int64_t)p->sm_count * info->arch->tensor_per_sm;
        return DLT_OK;
    case DLT_DEVINFO_MEMORY_BYTES: *v = p->memory_bytes; return DLT_OK;
    case DLT_DEVINFO_MEMORY_BUS_BITS: *v = p->memory_bus_bits; return DLT_OK;
    case DLT_DEVINFO_MEMORY_CLOCK_KHZ: *v = p->memory_clock_khz; return DLT_OK;
    case DLT_DEVINFO_L2_BYTES: *v = p->l2_bytes; return DLT_OK;
    case DLT_DEVINFO_SM_CLOCK_KHZ: *v = p->sm_clock_khz; return DLT_OK;
    case DLT_DEVINFO_DRIVER_VERSION: *v = p->driver_version; return DLT_OK;
    case DLT_DEVINFO_RUNTIME_VERSION: *v = p->runtime_version; return DLT_OK;
    case DLT_DEVINFO_CUDNN_VERSION: *v = p->cudnn_version; return DLT_OK;
    case DLT_DEVINFO_CUBLAS_VERSION: *v = p->cublas_version; return DLT_OK;
    default: return dlt__err(DLT_ERR_INTERNAL, func, "integer key %d has no value", key);
    }
}

dlt_status dlt_device_info_int(const dlt_device_info *info, int32_t key, int64_t *out) {
    static const char *F = "dlt_device_info_int";
    DLT_CHECK(key_check(info, out, key, 1, F));
    int64_t v = 0;
    DLT_CHECK(info_int(info, key, F, &v));
    *out = v;
    return DLT_OK;
}

dlt_status dlt_device_info_double(const dlt_device_info *info, int32_t key, double *out) {
    static const char *F = "dlt_device_info_double";
    DLT_CHECK(key_check(info, out, key, 2, F));
    if (key == DLT_DEVINFO_MEMORY_BANDWIDTH_GBPS) {
        const dlt_device_props *p = &info->p;
        if (p->memory_clock_khz <= 0 || p->memory_bus_bits <= 0)
            return dlt__err(DLT_ERR_NOT_SUPPORTED, F,
                            "%s does not report its memory clock (%lld kHz) or bus width (%d "
                            "bits)",
                            p->name, (long long)p->memory_clock_khz, p->memory_bus_bits);
        /* double data rate: two transfers per memory clock, bus_bits/8 bytes each */
        *out = 2.0 * (double)p->memory_clock_khz * 1e3 * (double)p->memory_bus_bits / 8.0 / 1e9;
        return DLT_OK;
    }
    int64_t v = 0;
    DLT_CHECK(info_int(info, key, F, &v));
    *out = (double)v;
    return DLT_OK;
}

dlt_status dlt__copy_string_out(const char *s, char *buf, size_t n, size_t *len) {
    size_t l = strlen(s);
    if (buf && n > 0) {
        size_t k = l < n - 1 ? l : n - 1;
        memcpy(buf, s, k);
        buf[k] = '\0';
    }
    if (len) *len = l;
    return DLT_OK;
}

dlt_status dlt_device_info_string(const dlt_device_info *info, int32_t key, char *buf, size_t n,
                                  size_t *len) {
    static const char *F = "dlt_device_info_string";
    if (!info) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'info' is NULL");
    if (!buf && n > 0) return dlt__err(DLT_ERR_NULL_POINTER, F, "buf is NULL but n is %zu", n);
    if (dlt_device_info_key_type(key) != DLT_VALUE_STRING)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "key %d is %s", key,
                        dlt_device_info_key_name(key) ? "not a string key" : "unknown");
    const char *s = "";
    switch (key) {
    case DLT_DEVINFO_NAME: s = info->p.name; break;
    case DLT_DEVINFO_ARCH_NAME: s = info->arch ? info->arch->name : "unknown"; break;
    case DLT_DEVINFO_PCI_BUS_ID: s = info->p.pci_bus_id; break;
    default: return dlt__err(DLT_ERR_INTERNAL, F, "string key %d has no value", key);
    }
    return dlt__copy_string_out(s, buf, n, len);
}

/* ---------------------------------------------------------------------------------------
 * Benchmarks: argument checks here, the work in the backend's bench_* entries (cuda/device.c)
 * ------------------------------------------------------------------------------------- */
static dlt_status bench_ctx_check(dlt_ctx *ctx, const char *func) {
    if (ctx->device_type != DLT_DEVICE_CUDA)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, func,
                        "benchmarks measure a GPU; this is a CPU context (create one with "
                        "DLT_DEVICE_CUDA)");
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, func,
                        "benchmarks synchronise and cannot run during graph capture");
    return dlt__ctx_ok(ctx, func);
}

dlt_status dlt_bench_copy_bandwidth(dlt_ctx *ctx, size_t bytes, double *gbytes_per_s) {
    static const char *F = "dlt_bench_copy_bandwidth";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(gbytes_per_s, F);
    if (bytes == 0 || bytes > SIZE_MAX / 4)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "bytes = %zu; it must be positive", bytes);
    DLT_CHECK(bench_ctx_check(ctx, F));
    double v = 0;
    if (!ctx->be->bench_copy) return dlt__be_missing(ctx, F, "bench_copy");
    DLT_CHECK(ctx->be->bench_copy(ctx, bytes, &v));
    *gbytes_per_s = v;
    return DLT_OK;
}

dlt_status dlt_bench_gemm(dlt_ctx *ctx, int32_t kind, int64_t m, int64_t n, int64_t k,
                          double *tflops) {
    static const char *F = "dlt_bench_gemm";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(tflops, F);
    if (kind < DLT_GEMM_FP32 || kind > DLT_GEMM_BF16)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "unknown kind %d (DLT_GEMM_FP32=0, TF32=1, FP16=2, BF16=3)", kind);
    if (m < 1 || n < 1 || k < 1 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "m=%lld n=%lld k=%lld: each must be in 1..2147483647", (long long)m,
                        (long long)n, (long long)k);
    DLT_CHECK(bench_ctx_check(ctx, F));
    double v = 0;
    if (!ctx->be->bench_gemm) return dlt__be_missing(ctx, F, "bench_gemm");
    DLT_CHECK(ctx->be->bench_gemm(ctx, kind, m, n, k, &v));
    *tflops = v;
    return DLT_OK;
}
