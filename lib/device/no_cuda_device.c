/*
 * no_cuda_device.c - stands in for cuda/device.c in builds without CUDA: there is no
 * device to query and nothing to benchmark. The public functions in lib/device/info.c turn
 * CPU contexts away before the benchmarks are reached, so those two are never called.
 */
#include "device_internal.h"

dlt_status dlt__device_query(int32_t index, const char *func, dlt_device_props *out) {
    (void)out;
    return dlt__err(DLT_ERR_NO_DEVICE, func,
                    "cannot read CUDA device %d: this libdltrain was built without CUDA support "
                    "(configure with -Dcuda=enabled on a machine with the CUDA toolkit and cuDNN)",
                    index);
}

dlt_status dlt__device_pci_bus_id(int32_t index, char *buf, size_t n) {
    (void)index;
    if (buf && n > 0) buf[0] = '\0';
    return DLT_ERR_NO_DEVICE;
}

dlt_status dlt__cuda_bench_copy(dlt_ctx *ctx, size_t bytes, double *gbytes_per_s) {
    (void)ctx, (void)bytes, (void)gbytes_per_s;
    return dlt__err(DLT_ERR_NO_DEVICE, "dlt_bench_copy_bandwidth", "built without CUDA support");
}

dlt_status dlt__cuda_bench_gemm(dlt_ctx *ctx, int32_t kind, int64_t m, int64_t n, int64_t k,
                                double *tflops) {
    (void)ctx, (void)kind, (void)m, (void)n, (void)k, (void)tflops;
    return dlt__err(DLT_ERR_NO_DEVICE, "dlt_bench_gemm", "built without CUDA support");
}
