/*
 * device_internal.h - the boundary between the device reports in lib/device (plain C: key
 * tables, the architecture table, argument checks, the NVML monitor) and the CUDA side in
 * cuda/device.c (runtime queries, cuBLAS and copy benchmarks). Builds without CUDA link
 * lib/device/no_cuda_device.c instead, whose functions report DLT_ERR_NO_DEVICE.
 *
 * Included by C (lib/) and by cuda/device.c; it includes no CUDA header.
 */
#ifndef DLT_DEVICE_INTERNAL_H
#define DLT_DEVICE_INTERNAL_H

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the CUDA runtime and libraries report for one device (raw, before derived values). */
typedef struct dlt_device_props {
    char name[256];
    char pci_bus_id[32];
    int32_t cc_major, cc_minor;
    int32_t sm_count;
    int64_t memory_bytes;
    int32_t memory_bus_bits;
    int64_t memory_clock_khz;
    int64_t l2_bytes;
    int64_t sm_clock_khz;
    int32_t driver_version, runtime_version;
    int64_t cudnn_version, cublas_version;
} dlt_device_props;

/* Fills *out for CUDA ordinal index (>= 0). Errors name func. NO_DEVICE without CUDA, driver
 * or such a device. */
dlt_status dlt__device_query(int32_t index, const char *func, dlt_device_props *out);
/* The PCI bus id ("0000:19:00.0") of CUDA ordinal index, for matching NVML's devices.
 * Sets no error message on failure (callers fall back quietly). */
dlt_status dlt__device_pci_bus_id(int32_t index, char *buf, size_t n);

/* Benchmarks on a CUDA context (validated by lib/device/info.c: non-NULL, CUDA, not
 * capturing, sizes in range). They synchronise. */
dlt_status dlt__cuda_bench_copy(dlt_ctx *ctx, size_t bytes, double *gbytes_per_s);
dlt_status dlt__cuda_bench_gemm(dlt_ctx *ctx, int32_t kind, int64_t m, int64_t n, int64_t k,
                                double *tflops);

/* String getters of info and monitor: copies s into buf (NUL-terminated, truncated when n
 * is too small; nothing when buf is NULL) and writes strlen(s) to *len when len is set. */
dlt_status dlt__copy_string_out(const char *s, char *buf, size_t n, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
