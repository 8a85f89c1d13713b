/*
 * dltrain/device.h - hardware reports: what a GPU is (device info), what it measures
 * (copy and GEMM micro-benchmarks), and what it does during a job (NVML monitor).
 *
 * These are the rows of a hardware comparison table: name, compute capability, SMs, CUDA
 * and tensor cores, memory size, bus width and theoretical bandwidth, measured bandwidth
 * and GEMM TFLOP/s, and during training GPU utilisation, temperature, clocks, power and
 * throttling. examples/gpu_report.c prints them.
 *
 * Values are read through key-based getters (dlt_device_info_int(info, DLT_DEVINFO_SM_COUNT,
 * &v)): keys are int32 constants that are only ever appended, so a binding written today
 * keeps working when keys are added, and every key can be enumerated with its name and
 * value type (dlt_device_info_key_name / _key_type), which is how a generic JSON writer or
 * a Python binding lists them without a table of its own.
 *
 * Units are spelled in the key names: bytes, bits, kHz, MHz, GB/s (10^9 bytes per second),
 * TFLOP/s (10^12), watts, degrees Celsius, MiB (2^20 bytes), percent.
 */
#ifndef DLTRAIN_DEVICE_H
#define DLTRAIN_DEVICE_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Value types of keys (dlt_device_info_key_type, dlt_gpu_monitor_key_type). */
#define DLT_VALUE_INT 0    /**< read with the _int getter (the _double getter converts) */
#define DLT_VALUE_DOUBLE 1 /**< read with the _double getter */
#define DLT_VALUE_STRING 2 /**< read with the _string getter */

/* ---------------------------------------------------------------------------------------
 * Architecture table
 * ------------------------------------------------------------------------------------- */

/**
 * CUDA cores and tensor cores per SM for a compute capability, from NVIDIA's architecture
 * white papers (the CUDA runtime does not report them):
 *
 *   compute capability             architecture        CUDA cores/SM  tensor cores/SM
 *   7.0 (V100), 7.2 (Xavier)       Volta                     64              8
 *   7.5 (T4, RTX 20xx)             Turing                    64              8
 *   8.0 (A100, A30)                Ampere                    64              4
 *   8.6, 8.7 (RTX 30xx, A40, Orin) Ampere                   128              4
 *   8.9 (L4, L40, RTX 40xx)        Ada Lovelace             128              4
 *   9.0 (H100, H200, GH200)        Hopper                   128              4
 *   10.0, 10.1, 10.3 (B200, B300)  Blackwell                128              4
 *   11.0 (Thor)                    Blackwell                128              4
 *   12.0, 12.1 (RTX 50xx, GB10)    Blackwell                128              4
 *
 * Tensor cores of different generations do different work per clock, so their counts
 * compare only within one generation; TFLOP/s from dlt_bench_gemm compare across all.
 * Thread-safe, no device needed.
 * @param cuda_cores_per_sm, tensor_cores_per_sm  receive the counts (neither may be NULL).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_NOT_SUPPORTED for a compute capability not in
 *         the table (pre-Volta, or newer than this release knows); the outputs are untouched.
 */
DLT_API DLT_NODISCARD dlt_status dlt_device_arch_cores(int32_t cc_major, int32_t cc_minor,
                                                       int32_t *cuda_cores_per_sm,
                                                       int32_t *tensor_cores_per_sm);

/* ---------------------------------------------------------------------------------------
 * Device info
 * ------------------------------------------------------------------------------------- */

/** A snapshot of one CUDA device's properties and the versions of the CUDA libraries in
 *  use. Immutable once made; it may be read from any thread. */
typedef struct dlt_device_info dlt_device_info;

/* Keys of dlt_device_info (append only, never renumber). The value type is in brackets. */
#define DLT_DEVINFO_NAME 0                /**< [string] e.g. "NVIDIA H200" */
#define DLT_DEVINFO_DEVICE_INDEX 1        /**< [int] CUDA ordinal the info was read for */
#define DLT_DEVINFO_CC_MAJOR 2            /**< [int] compute capability, major */
#define DLT_DEVINFO_CC_MINOR 3            /**< [int] compute capability, minor */
#define DLT_DEVINFO_ARCH_NAME 4           /**< [string] "Hopper", ... ("unknown" if not in the table) */
#define DLT_DEVINFO_SM_COUNT 5            /**< [int] streaming multiprocessors */
#define DLT_DEVINFO_CUDA_CORES 6          /**< [int] SMs x CUDA cores per SM (dlt_device_arch_cores) */
#define DLT_DEVINFO_TENSOR_CORES 7        /**< [int] SMs x tensor cores per SM (dlt_device_arch_cores) */
#define DLT_DEVINFO_MEMORY_BYTES 8        /**< [int] global memory size in bytes */
#define DLT_DEVINFO_MEMORY_BUS_BITS 9     /**< [int] memory bus width in bits */
#define DLT_DEVINFO_MEMORY_CLOCK_KHZ 10   /**< [int] peak memory clock in kHz */
#define DLT_DEVINFO_MEMORY_BANDWIDTH_GBPS 11 /**< [double] theoretical: 2 x clock x bus bits / 8, GB/s */
#define DLT_DEVINFO_L2_BYTES 12           /**< [int] L2 cache size in bytes */
#define DLT_DEVINFO_SM_CLOCK_KHZ 13       /**< [int] peak SM clock in kHz */
#define DLT_DEVINFO_DRIVER_VERSION 14     /**< [int] CUDA version the driver supports, 1000*major + 10*minor */
#define DLT_DEVINFO_RUNTIME_VERSION 15    /**< [int] CUDA runtime in use, same packing (13000 = 13.0) */
#define DLT_DEVINFO_CUDNN_VERSION 16      /**< [int] cuDNN loaded, as cudnnGetVersion (91400 = 9.14.0) */
#define DLT_DEVINFO_CUBLAS_VERSION 17     /**< [int] cuBLAS loaded, major*10000 + minor*100 + patch */
#define DLT_DEVINFO_PCI_BUS_ID 18         /**< [string] "0000:19:00.0" (matches nvidia-smi) */

/**
 * Reads the properties of CUDA device `device_index` (the ordinal dlt_ctx_create takes).
 * Does not create a context and does not touch any dlt_ctx.
 * @param out receives the info, owned by the caller (dlt_device_info_destroy). Untouched on
 *            failure.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (negative index);
 *         DLT_ERR_NO_DEVICE (a build without CUDA, no driver, no device, or no device with
 *         that index; the message says which); DLT_ERR_CUDA (the runtime failed);
 *         DLT_ERR_OUT_OF_MEMORY.
 * Thread-safe.
 */
DLT_API DLT_NODISCARD dlt_status dlt_device_info_get(int32_t device_index, dlt_device_info **out);
/** Frees an info. NULL is a no-op. */
DLT_API void dlt_device_info_destroy(dlt_device_info *info);

/**
 * Reads an integer key.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (unknown key, or a key that
 *         is not DLT_VALUE_INT); DLT_ERR_NOT_SUPPORTED when the value is unknown for this
 *         device (CUDA/tensor cores of an architecture not in the table); *out is untouched
 *         on failure.
 */
DLT_API DLT_NODISCARD dlt_status dlt_device_info_int(const dlt_device_info *info, int32_t key,
                                                     int64_t *out);
/** Reads a numeric key (DLT_VALUE_DOUBLE, or DLT_VALUE_INT converted). Statuses as
 *  dlt_device_info_int. */
DLT_API DLT_NODISCARD dlt_status dlt_device_info_double(const dlt_device_info *info, int32_t key,
                                                        double *out);
/**
 * Copies a string key into buf (always NUL-terminated when n > 0; truncated to fit).
 * @param len  receives the full length of the string without the NUL (may be NULL), so a
 *             caller can size buf (call with buf NULL and n 0 first).
 * @return DLT_OK; DLT_ERR_NULL_POINTER (info NULL, or buf NULL with n > 0);
 *         DLT_ERR_INVALID_ARGUMENT (unknown key or not a string key).
 */
DLT_API DLT_NODISCARD dlt_status dlt_device_info_string(const dlt_device_info *info, int32_t key,
                                                        char *buf, size_t n, size_t *len);
/** Static name of a key ("sm_count", "memory_bandwidth_gbps", ...), NULL for an unknown key.
 *  Keys are 0..N-1 without gaps: enumerate until NULL. Thread-safe. */
DLT_API const char *dlt_device_info_key_name(int32_t key);
/** DLT_VALUE_INT/DOUBLE/STRING of a key, -1 for an unknown key. Thread-safe. */
DLT_API int32_t dlt_device_info_key_type(int32_t key);

/* ---------------------------------------------------------------------------------------
 * Micro-benchmarks. They run on a CUDA context's stream and SYNCHRONISE: each returns after
 * its work has finished. They are not for use during graph capture. Temporary buffers come
 * from the context's allocator and are released before returning (peak memory statistics
 * show them).
 * ------------------------------------------------------------------------------------- */

/**
 * Device-to-device copy bandwidth: copies `bytes` between two buffers of the context's
 * device, 3 warm-up runs then 10 timed runs (CUDA events; a run repeats the copy enough
 * times to last about a millisecond), and reports the median run as (read + write bytes) /
 * time, i.e. 2 x bytes per copy, in GB/s (10^9 bytes per second). Uses 2 x bytes of
 * device memory. Synchronises.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (bytes == 0);
 *         DLT_ERR_NOT_SUPPORTED (a CPU context); DLT_ERR_INVALID_STATE (graph capture);
 *         DLT_ERR_DEVICE_OUT_OF_MEMORY; DLT_ERR_CUDA; DLT_ERR_CONTEXT_POISONED.
 */
DLT_API DLT_NODISCARD dlt_status dlt_bench_copy_bandwidth(dlt_ctx *ctx, size_t bytes,
                                                          double *gbytes_per_s);

/* GEMM kinds of dlt_bench_gemm (append only). All accumulate in fp32. */
#define DLT_GEMM_FP32 0 /**< fp32 in and out, exact fp32 math (CUDA cores) */
#define DLT_GEMM_TF32 1 /**< fp32 in and out, TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32) */
#define DLT_GEMM_FP16 2 /**< fp16 in and out, fp32 accumulate (tensor cores) */
#define DLT_GEMM_BF16 3 /**< bf16 in and out, fp32 accumulate (tensor cores) */

/**
 * GEMM throughput through cuBLAS (cublasGemmEx): C[m,n] = A[m,k] B[k,n] on uniform random
 * data in [-1, 1) (random, not zeros: power and clocks depend on the data), 2 warm-up runs
 * then 10 timed runs (CUDA events; a run repeats the GEMM until it holds about 10^12 FLOP),
 * reporting 2*m*n*k / median time in TFLOP/s (10^12 FLOP per second). Uses the context's
 * cuBLAS handle and RNG (the RNG offset advances). Synchronises.
 * @param kind  DLT_GEMM_*.
 * @param m, n, k  1..2^31-1.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (unknown kind, a size out of
 *         range); DLT_ERR_NOT_SUPPORTED (a CPU context); DLT_ERR_INVALID_STATE (graph
 *         capture); DLT_ERR_DEVICE_OUT_OF_MEMORY; DLT_ERR_CUDA; DLT_ERR_CUBLAS;
 *         DLT_ERR_CONTEXT_POISONED. Arguments are checked before the device type.
 */
DLT_API DLT_NODISCARD dlt_status dlt_bench_gemm(dlt_ctx *ctx, int32_t kind, int64_t m, int64_t n,
                                                int64_t k, double *tflops);

/* ---------------------------------------------------------------------------------------
 * GPU monitor (NVML)
 * ------------------------------------------------------------------------------------- */

/** A background sampler of one GPU's NVML counters: a thread reads utilisation,
 *  temperature, SM clock, power, memory use and clock-event (throttle) reasons every
 *  interval and keeps running summaries. The monitor is independent of any dlt_ctx. */
typedef struct dlt_gpu_monitor dlt_gpu_monitor;

/* Keys of dlt_gpu_monitor (append only, never renumber). Value type in brackets. Means are
 * over the samples in which NVML reported that quantity. */
#define DLT_GPUMON_AVAILABLE 0           /**< [int] 1 if NVML and the device were found, else 0 */
#define DLT_GPUMON_SAMPLES 1             /**< [int] sampling rounds taken so far */
#define DLT_GPUMON_INTERVAL_MS 2         /**< [int] the sampling interval asked for */
#define DLT_GPUMON_DURATION_S 3          /**< [double] time from start to stop (or to now) */
#define DLT_GPUMON_GPU_UTIL_MEAN 4       /**< [double] % of time a kernel was running */
#define DLT_GPUMON_GPU_UTIL_MAX 5        /**< [double] % */
#define DLT_GPUMON_MEM_UTIL_MEAN 6       /**< [double] % of time device memory was read or written */
#define DLT_GPUMON_TEMP_MEAN_C 7         /**< [double] GPU core temperature, Celsius */
#define DLT_GPUMON_TEMP_MAX_C 8          /**< [double] Celsius */
#define DLT_GPUMON_SM_CLOCK_MEAN_MHZ 9   /**< [double] current SM clock, MHz */
#define DLT_GPUMON_SM_CLOCK_MAX_MHZ 10   /**< [double] MHz */
#define DLT_GPUMON_POWER_MEAN_W 11       /**< [double] board power draw, watts */
#define DLT_GPUMON_POWER_MAX_W 12        /**< [double] watts */
#define DLT_GPUMON_MEM_USED_MAX_MIB 13   /**< [double] device memory in use by all processes, MiB */
#define DLT_GPUMON_THERMAL_THROTTLE 14   /**< [int] 1 if a HW or SW thermal slowdown was seen */
#define DLT_GPUMON_POWER_THROTTLE 15     /**< [int] 1 if the SW power cap or HW power brake was seen */
#define DLT_GPUMON_THERMAL_THROTTLE_SAMPLES 16 /**< [int] samples with a thermal slowdown */
#define DLT_GPUMON_POWER_THROTTLE_SAMPLES 17   /**< [int] samples with a power cap/brake */
#define DLT_GPUMON_UNAVAILABLE_REASON 18 /**< [string] why AVAILABLE is 0 ("" when it is 1) */
/* report (issue 23): the sample series and its time base */
#define DLT_GPUMON_SERIES_POINTS 19      /**< [int] points held by the sample series (dlt_gpu_monitor_series) */
#define DLT_GPUMON_SERIES_STRIDE 20      /**< [int] samples per series point (1 until the series first fills) */
#define DLT_GPUMON_START_MONOTONIC_S 21  /**< [double] CLOCK_MONOTONIC time of start, seconds (aligns the series with the caller's clock) */

/**
 * Starts sampling GPU `device_index` (the CUDA ordinal, as dlt_ctx_create takes; it is
 * matched to NVML's device by PCI bus id, so CUDA_VISIBLE_DEVICES and CUDA's device order
 * are honoured) every interval_ms on a new background thread. The thread takes its first
 * sample as soon as it runs (SAMPLES may still read 0 just after start returns).
 *
 * NVML is loaded at run time with dlopen("libnvidia-ml.so.1") (the environment variable
 * DLT_NVML_LIBRARY names another file); libdltrain does not link it. When NVML, the driver
 * or the device is absent, start still SUCCEEDS with a monitor whose DLT_GPUMON_AVAILABLE is
 * 0 (no thread, no samples; DLT_GPUMON_UNAVAILABLE_REASON says why), so a program can
 * always start a monitor and print "n/a" for its values.
 *
 * NVML's utilisation counters are averages over NVML's own update period (1/6 s to 1 s
 * depending on the GPU), so intervals below about 100 ms see repeated values.
 * @param interval_ms  1..3600000.
 * @param out          receives the monitor, owned by the caller (dlt_gpu_monitor_destroy).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (negative index, interval
 *         out of range); DLT_ERR_OUT_OF_MEMORY; DLT_ERR_INTERNAL (the thread could not be
 *         started).
 * Thread-safety: a monitor may be read from any thread while it samples (the sampling
 * thread writes only the monitor's own fields, under the monitor's mutex). stop and destroy
 * must not race with each other.
 */
DLT_API DLT_NODISCARD dlt_status dlt_gpu_monitor_start(int32_t device_index, int32_t interval_ms,
                                                       dlt_gpu_monitor **out);
/** Stops sampling and joins the thread (waits at most for one NVML read in progress); the
 *  summaries stay readable until destroy. Stopping a stopped or unavailable monitor is a
 *  no-op returning DLT_OK. @return DLT_OK or DLT_ERR_NULL_POINTER. */
DLT_API DLT_NODISCARD dlt_status dlt_gpu_monitor_stop(dlt_gpu_monitor *mon);
/** Stops the monitor if it runs, unloads NVML and frees everything. NULL is a no-op. */
DLT_API void dlt_gpu_monitor_destroy(dlt_gpu_monitor *mon);

/**
 * Reads an integer key (a consistent snapshot, also while sampling runs).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (unknown key or not
 *         DLT_VALUE_INT); DLT_ERR_NOT_SUPPORTED when no sample holds that quantity (monitor
 *         unavailable, no sample taken yet, or the GPU does not report it, e.g. power on
 *         some boards): print "n/a". AVAILABLE, SAMPLES and INTERVAL_MS always succeed.
 *         *out is untouched on failure.
 */
DLT_API DLT_NODISCARD dlt_status dlt_gpu_monitor_int(const dlt_gpu_monitor *mon, int32_t key,
                                                     int64_t *out);
/** Reads a numeric key (DLT_VALUE_DOUBLE, or DLT_VALUE_INT converted). Statuses as
 *  dlt_gpu_monitor_int; DURATION_S always succeeds. */
DLT_API DLT_NODISCARD dlt_status dlt_gpu_monitor_double(const dlt_gpu_monitor *mon, int32_t key,
                                                        double *out);
/** Copies a string key into buf (NUL-terminated when n > 0, truncated to fit); len (may be
 *  NULL) receives the full length. Statuses as dlt_device_info_string. */
DLT_API DLT_NODISCARD dlt_status dlt_gpu_monitor_string(const dlt_gpu_monitor *mon, int32_t key,
                                                        char *buf, size_t n, size_t *len);
/** Static name of a monitor key ("gpu_util_mean", ...), NULL for an unknown key. Keys are
 *  0..N-1 without gaps. Thread-safe. */
DLT_API const char *dlt_gpu_monitor_key_name(int32_t key);
/** DLT_VALUE_INT/DOUBLE/STRING of a monitor key, -1 for an unknown key. Thread-safe. */
DLT_API int32_t dlt_gpu_monitor_key_type(int32_t key);

/* ---------------------------------------------------------------------------------------
 * GPU monitor: the sample series (report, issue 23)
 *
 * Besides its summaries, a monitor keeps every sample as a point of a series, for charts of
 * a run (temperature, SM clock and power over time, throttling intervals). Memory stays
 * bounded: the series holds at most DLT_GPUMON_SERIES_MAX_POINTS points; when it fills,
 * neighbouring points are merged in pairs and from then on each point covers twice as many
 * samples (DLT_GPUMON_SERIES_STRIDE), so a run of any length is covered evenly. A point's
 * time is that of the first sample it covers, its values are means of the samples that
 * reported them (after a merge, the mean of the two halves' means), its clock-event reasons
 * the OR of theirs (a throttled sample is never merged away), and a value no covered sample
 * had is NaN (e.g. power on a board that does not report it).
 * ------------------------------------------------------------------------------------- */

/* Fields of a series point (append only, never renumber). */
#define DLT_GPUMON_SERIES_TIME_S 0       /**< seconds from start to the sample's NVML read */
#define DLT_GPUMON_SERIES_GPU_UTIL 1     /**< % of time a kernel was running */
#define DLT_GPUMON_SERIES_MEM_UTIL 2     /**< % of time device memory was read or written */
#define DLT_GPUMON_SERIES_TEMP_C 3       /**< GPU core temperature, Celsius */
#define DLT_GPUMON_SERIES_SM_CLOCK_MHZ 4 /**< current SM clock, MHz */
#define DLT_GPUMON_SERIES_POWER_W 5      /**< board power draw, watts */
#define DLT_GPUMON_SERIES_MEM_USED_MIB 6 /**< device memory in use by all processes, MiB */
/** NVML clock-event (throttle) reason bits as a double (exact: the bits are far below 2^53):
 *  0x4 SW power cap, 0x20 SW thermal slowdown, 0x40 HW thermal slowdown, 0x80 HW power brake
 *  (DLT_GPUMON_THERMAL_THROTTLE and _POWER_THROTTLE count these), 0x1 GPU idle, 0x2
 *  application clocks setting, 0x8 HW slowdown, 0x10 sync boost, 0x100 display clocks. */
#define DLT_GPUMON_SERIES_REASONS 7
#define DLT_GPUMON_SERIES_NFIELDS 8         /**< fields this header knows */
#define DLT_GPUMON_SERIES_MAX_POINTS 8192   /**< points held at most before pairs merge */

/**
 * Copies points first .. first + max_points - 1 of the series (those that exist) into out,
 * row-major: point i's field f is out[i * nfields + f]. Fields this library does not know
 * (nfields larger than its count, for a caller built against a newer header) are NaN.
 *
 * The series grows, and may merge, while the monitor samples: for a consistent copy read it
 * after dlt_gpu_monitor_stop, or in one call with max_points >= DLT_GPUMON_SERIES_POINTS.
 * An unavailable monitor has an empty series (0 points, DLT_OK).
 * @param first       index of the first point, >= 0 (past the end: 0 points copied).
 * @param max_points  >= 0; out must hold max_points * nfields doubles.
 * @param nfields     1..64: fields per point in out (DLT_GPUMON_SERIES_NFIELDS).
 * @param out         caller's buffer (may be NULL when max_points is 0).
 * @param points      receives the number of points copied.
 * @return DLT_OK; DLT_ERR_NULL_POINTER (mon or points NULL, out NULL with max_points > 0);
 *         DLT_ERR_INVALID_ARGUMENT (first or max_points negative, nfields out of range).
 *         Nothing is written on failure. Thread-safe as the other getters.
 */
DLT_API DLT_NODISCARD dlt_status dlt_gpu_monitor_series(const dlt_gpu_monitor *mon, int64_t first,
                                                        int64_t max_points, int32_t nfields,
                                                        double *out, int64_t *points);
/** Static name of a series field ("t_s", "gpu_util", "temp_c", "sm_clock_mhz", "power_w",
 *  ...), NULL for an unknown field. Fields are 0..N-1 without gaps. Thread-safe. */
DLT_API const char *dlt_gpu_monitor_series_field_name(int32_t field);

#ifdef __cplusplus
}
#endif
#endif /* DLTRAIN_DEVICE_H */
