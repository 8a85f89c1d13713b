/*
 * gpu_report.c - the rows of a hardware comparison table, measured on this machine.
 *
 * For each visible GPU: what it is (name, compute capability, SMs, CUDA and tensor cores,
 * memory size, bus width, theoretical bandwidth), what it measures (device-to-device copy
 * bandwidth; cuBLAS GEMM TFLOP/s in fp32, tf32, fp16 and bf16), and how it behaved while
 * measuring (NVML: utilisation, temperature, SM clock, power, throttling; "n/a" where NVML
 * is absent). Prints a table; --json FILE also writes the run record (docs/run-record.md:
 * every GPU's properties, measurements and NVML series; a record without GPUs when there
 * are none).
 *
 *   build/examples/gpu_report [--json FILE] [--device N] [--no-bench] [--quick]
 *
 * Exit status: 0 (also when there is no GPU: it says so), 1 when a device could not be
 * read, 2 for usage errors.
 */
#include <dltrain.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "run_record.h"

#define NA "n/a"
#define COPY_BYTES ((size_t)512 << 20)

static const char *const GEMM_NAMES[4] = {"fp32", "tf32", "fp16", "bf16"};

typedef struct report {
    int32_t index;
    dlt_device_info *info; /* NULL when it could not be read */
    char error[512];
    int benched;
    double copy_gbps; /* < 0: n/a */
    double gemm_tflops[4];
    int64_t gemm_size[4];
    dlt_gpu_monitor *mon; /* NULL without benchmarks */
} report;

/* ---- measuring ---- */
static void measure(report *r, int quick) {
    dlt_ctx *ctx = NULL;
    r->copy_gbps = -1;
    for (int k = 0; k < 4; k++) r->gemm_tflops[k] = -1;
    if (dlt_ctx_create(DLT_DEVICE_CUDA, r->index, DLT_ABI_VERSION, &ctx) != DLT_OK) {
        fprintf(stderr, "gpu_report: GPU %d: %s\n", r->index, dlt_last_error());
        return;
    }
    r->benched = 1;
    /* the monitor always starts; without NVML its values are n/a */
    if (dlt_gpu_monitor_start(r->index, 50, &r->mon) != DLT_OK) r->mon = NULL;
    fprintf(stderr, "gpu_report: measuring GPU %d ...\n", r->index);
    if (dlt_bench_copy_bandwidth(ctx, COPY_BYTES, &r->copy_gbps) != DLT_OK) {
        fprintf(stderr, "gpu_report: GPU %d copy: %s\n", r->index, dlt_last_error());
        r->copy_gbps = -1;
    }
    for (int32_t k = 0; k < 4; k++) {
        /* fp32 without tensor cores is ~10x slower: a smaller problem keeps the run short */
        int64_t s = quick || k == DLT_GEMM_FP32 ? 4096 : 8192;
        r->gemm_size[k] = s;
        if (dlt_bench_gemm(ctx, k, s, s, s, &r->gemm_tflops[k]) != DLT_OK) {
            fprintf(stderr, "gpu_report: GPU %d GEMM %s: %s\n", r->index, GEMM_NAMES[k],
                    dlt_last_error());
            r->gemm_tflops[k] = -1;
        }
    }
    if (r->mon && dlt_gpu_monitor_stop(r->mon) != DLT_OK)
        fprintf(stderr, "gpu_report: GPU %d monitor: %s\n", r->index, dlt_last_error());
    dlt_ctx_destroy(ctx);
}

/* ---- table ---- */
#define VAL 96 /* bytes per table cell */

static int info_i(const dlt_device_info *in, int32_t key, int64_t *v) {
    return in && dlt_device_info_int(in, key, v) == DLT_OK;
}

static int mon_d(const dlt_gpu_monitor *m, int32_t key, double *v) {
    int64_t avail = 0;
    return m && dlt_gpu_monitor_int(m, DLT_GPUMON_AVAILABLE, &avail) == DLT_OK && avail &&
           dlt_gpu_monitor_double(m, key, v) == DLT_OK;
}

/* CUDA packs versions as 1000*major + 10*minor, cuDNN and cuBLAS as 10000*major + ... */
static void version_str(char buf[16], int64_t v, int cuda) {
    v = v < 0 ? 0 : v % 100000000; /* keeps the text within 16 bytes */
    if (cuda) snprintf(buf, 16, "%d.%d", (int)(v / 1000), (int)(v % 1000 / 10));
    else snprintf(buf, 16, "%d.%d.%d", (int)(v / 10000), (int)(v % 10000 / 100), (int)(v % 100));
}

/* Writes the text of table row `which` for one GPU into out (VAL bytes). */
static void cell(const report *rp, int which, char *out) {
    const dlt_device_info *in = rp->info;
    int64_t a = 0, b = 0;
    double d = 0, e = 0;
    snprintf(out, VAL, NA);
    switch (which) {
    case 0:
        if (!in || dlt_device_info_string(in, DLT_DEVINFO_NAME, out, VAL, NULL) != DLT_OK)
            snprintf(out, VAL, "error");
        break;
    case 1:
        if (info_i(in, DLT_DEVINFO_CC_MAJOR, &a) && info_i(in, DLT_DEVINFO_CC_MINOR, &b)) {
            char arch[32] = "";
            if (dlt_device_info_string(in, DLT_DEVINFO_ARCH_NAME, arch, sizeof arch, NULL) != DLT_OK)
                snprintf(arch, sizeof arch, "?");
            snprintf(out, VAL, "%lld.%lld (%s)", (long long)a, (long long)b, arch);
        }
        break;
    case 2: if (info_i(in, DLT_DEVINFO_SM_COUNT, &a)) snprintf(out, VAL, "%lld", (long long)a); break;
    case 3: if (info_i(in, DLT_DEVINFO_CUDA_CORES, &a)) snprintf(out, VAL, "%lld", (long long)a); break;
    case 4: if (info_i(in, DLT_DEVINFO_TENSOR_CORES, &a)) snprintf(out, VAL, "%lld", (long long)a); break;
    case 5:
        if (info_i(in, DLT_DEVINFO_MEMORY_BYTES, &a))
            snprintf(out, VAL, "%.1f GiB", (double)a / 1073741824.0);
        break;
    case 6:
        if (info_i(in, DLT_DEVINFO_MEMORY_BUS_BITS, &a) && info_i(in, DLT_DEVINFO_MEMORY_CLOCK_KHZ, &b))
            snprintf(out, VAL, "%lld-bit, %lld MHz", (long long)a, (long long)(b / 1000));
        break;
    case 7:
        if (in && dlt_device_info_double(in, DLT_DEVINFO_MEMORY_BANDWIDTH_GBPS, &d) == DLT_OK)
            snprintf(out, VAL, "%.0f GB/s", d);
        break;
    case 8:
        if (rp->copy_gbps > 0) {
            if (in && dlt_device_info_double(in, DLT_DEVINFO_MEMORY_BANDWIDTH_GBPS, &d) == DLT_OK)
                snprintf(out, VAL, "%.0f GB/s (%.0f%%)", rp->copy_gbps, 100.0 * rp->copy_gbps / d);
            else snprintf(out, VAL, "%.0f GB/s", rp->copy_gbps);
        }
        break;
    case 9: case 10: case 11: case 12: {
        int k = which - 9;
        if (rp->gemm_tflops[k] > 0)
            snprintf(out, VAL, "%.1f TFLOP/s (%lld^3)", rp->gemm_tflops[k], (long long)rp->gemm_size[k]);
        break;
    }
    case 13:
        if (mon_d(rp->mon, DLT_GPUMON_GPU_UTIL_MEAN, &d) && mon_d(rp->mon, DLT_GPUMON_GPU_UTIL_MAX, &e))
            snprintf(out, VAL, "%.0f%% mean, %.0f%% max", d, e);
        break;
    case 14:
        if (mon_d(rp->mon, DLT_GPUMON_TEMP_MEAN_C, &d) && mon_d(rp->mon, DLT_GPUMON_TEMP_MAX_C, &e))
            snprintf(out, VAL, "%.0f C mean, %.0f C max", d, e);
        break;
    case 15:
        if (mon_d(rp->mon, DLT_GPUMON_SM_CLOCK_MEAN_MHZ, &d) && mon_d(rp->mon, DLT_GPUMON_SM_CLOCK_MAX_MHZ, &e)) {
            if (info_i(in, DLT_DEVINFO_SM_CLOCK_KHZ, &a))
                snprintf(out, VAL, "%.0f mean, %.0f max (peak %lld) MHz", d, e, (long long)(a / 1000));
            else snprintf(out, VAL, "%.0f mean, %.0f max MHz", d, e);
        }
        break;
    case 16:
        if (mon_d(rp->mon, DLT_GPUMON_POWER_MEAN_W, &d) && mon_d(rp->mon, DLT_GPUMON_POWER_MAX_W, &e))
            snprintf(out, VAL, "%.0f W mean, %.0f W max", d, e);
        break;
    case 17:
        if (mon_d(rp->mon, DLT_GPUMON_MEM_USED_MAX_MIB, &d)) snprintf(out, VAL, "%.0f MiB", d);
        break;
    case 18: {
        double n = 0;
        if (mon_d(rp->mon, DLT_GPUMON_THERMAL_THROTTLE_SAMPLES, &d) &&
            mon_d(rp->mon, DLT_GPUMON_POWER_THROTTLE_SAMPLES, &e) &&
            mon_d(rp->mon, DLT_GPUMON_SAMPLES, &n)) {
            if (d == 0 && e == 0) snprintf(out, VAL, "none (%.0f samples)", n);
            else snprintf(out, VAL, "thermal %.0f, power %.0f of %.0f samples", d, e, n);
        }
        break;
    }
    case 19:
        if (in) {
            char dv[16], rv[16], cv[16], bv[16];
            info_i(in, DLT_DEVINFO_DRIVER_VERSION, &a);
            info_i(in, DLT_DEVINFO_RUNTIME_VERSION, &b);
            version_str(dv, a, 1);
            version_str(rv, b, 1);
            info_i(in, DLT_DEVINFO_CUDNN_VERSION, &a);
            info_i(in, DLT_DEVINFO_CUBLAS_VERSION, &b);
            version_str(cv, a, 0);
            version_str(bv, b, 0);
            snprintf(out, VAL, "drv %s rt %s cudnn %s cublas %s", dv, rv, cv, bv);
        }
        break;
    default: break;
    }
}

static const char *const LABELS[] = {
    "name", "compute capability", "SMs", "CUDA cores", "tensor cores", "memory",
    "memory bus", "bandwidth (theoretical)", "bandwidth (measured D2D)", "GEMM fp32",
    "GEMM tf32", "GEMM fp16", "GEMM bf16", "GPU utilisation*", "temperature*", "SM clock*",
    "power*", "memory used*", "throttling*", "CUDA/cuDNN/cuBLAS"};
#define NROWS ((int)(sizeof LABELS / sizeof LABELS[0]))

static void print_table(const report *r, int n, int benched) {
    int last = benched ? NROWS : 8; /* without benchmarks: properties only */
    char(*cells)[VAL] = calloc((size_t)n * NROWS, VAL);
    int *width = calloc((size_t)n, sizeof *width);
    if (!cells || !width) {
        free(cells);
        free(width);
        return;
    }
    for (int g = 0; g < n; g++) {
        width[g] = 8;
        for (int w = 0; w < NROWS; w++) {
            if (w >= last && w != NROWS - 1) continue;
            cell(&r[g], w, cells[g * NROWS + w]);
            int l = (int)strlen(cells[g * NROWS + w]);
            if (l > width[g]) width[g] = l;
        }
    }
    printf("%-26s", "");
    for (int g = 0; g < n; g++) {
        char h[32];
        snprintf(h, sizeof h, "GPU %d", r[g].index);
        printf(" | %-*s", width[g], h);
    }
    printf("\n");
    for (int w = 0; w < NROWS; w++) {
        if (w >= last && w != NROWS - 1) continue;
        printf("%-26s", LABELS[w]);
        for (int g = 0; g < n; g++) printf(" | %-*s", width[g], cells[g * NROWS + w]);
        printf("\n");
    }
    if (benched) printf("* sampled by NVML every 50 ms while the benchmarks ran\n");
    free(cells);
    free(width);
}

/* ---- the run record ---- */
static void record_gpu(run_record *rec, const report *rp) {
    cJSON *dev = run_record_add_device(rec, DLT_DEVICE_CUDA, rp->index);
    if (!dev) return;
    if (rp->benched) {
        cJSON *m = cJSON_AddObjectToObject(dev, "measured");
        rr_num(m, "copy_bandwidth_gbps", rp->copy_gbps > 0 ? rp->copy_gbps : NAN);
        rr_int(m, "copy_bytes", (int64_t)COPY_BYTES);
        cJSON *g = cJSON_AddObjectToObject(m, "gemm");
        for (int k = 0; k < 4; k++) {
            cJSON *o = cJSON_AddObjectToObject(g, GEMM_NAMES[k]);
            rr_int(o, "size", rp->gemm_size[k]);
            rr_num(o, "tflops", rp->gemm_tflops[k] > 0 ? rp->gemm_tflops[k] : NAN);
        }
    }
    run_record_device_monitor(rec, dev, rp->mon);
}

/* Writes the record of the GPUs in r (none when n is 0, with the reason). 0 or 1. */
static int write_record(run_record *rec, const char *path, const report *r, int n, const char *none_why) {
    cJSON *res = run_record_results(rec, "device_report");
    rr_int(res, "gpus", n);
    rr_str(res, "note", none_why);
    for (int g = 0; g < n; g++) record_gpu(rec, &r[g]);
    if (run_record_write(rec, path, "gpu_report") != 0) return 1;
    printf("run record: %s\n", path);
    return 0;
}

int main(int argc, char **argv) {
    int no_bench = 0, quick = 0;
    const char *json = NULL; /* --json FILE: the run record */
    int64_t device = -1;
    const cli_option opts[] = {
        {"json", CLI_STRING, &json, .metavar = "FILE",
         .help = "also write the run record (JSON, docs/run-record.md) to FILE"},
        {"device", CLI_INT, &device, .lo = 0, .hi = 1023, .metavar = "N",
         .help = "only CUDA device N (default: every visible GPU)"},
        {"no-bench", CLI_FLAG, &no_bench, .help = "properties only, no copy/GEMM measurements"},
        {"quick", CLI_FLAG, &quick, .help = "smaller GEMMs (4096^3 for every precision)"},
    };
    const int nopts = (int)(sizeof opts / sizeof opts[0]);
    int rc = cli_parse(argc, argv, "gpu_report", opts, nopts);
    if (rc) return rc == 1 ? 0 : rc;
    const int bench = !no_bench;
    const long only = (long)device;
    if (json && run_record_check_path(json, "gpu_report") != 0) return 1;
    run_record *rec = json ? run_record_begin("gpu_report", argc, argv) : NULL;
    if (json && !rec) return fprintf(stderr, "gpu_report: out of memory\n"), 1;
    int32_t count = 0;
    if (dlt_cuda_device_count(&count) != DLT_OK) count = 0;
    if (count == 0) {
        const char *why = dlt_built_with_cuda() ? "no CUDA GPU is visible (driver or device missing)"
                                                : "this libdltrain was built without CUDA";
        printf("gpu_report: %s; nothing to report.\n", why);
        int wrc = rec ? write_record(rec, json, NULL, 0, why) : 0;
        run_record_free(rec);
        return wrc;
    }
    if (only >= count) {
        run_record_free(rec);
        fprintf(stderr, "gpu_report: --device %ld, but %d GPU%s visible\n", only, count,
                count == 1 ? " is" : "s are");
        cli_usage(stderr, "gpu_report", opts, nopts);
        return 2;
    }
    int n = only >= 0 ? 1 : count;
    report *r = calloc((size_t)n, sizeof *r);
    if (!r) {
        run_record_free(rec);
        return 1;
    }
    int failed = 0;
    for (int g = 0; g < n; g++) {
        r[g].index = only >= 0 ? (int32_t)only : g;
        if (dlt_device_info_get(r[g].index, &r[g].info) != DLT_OK) {
            snprintf(r[g].error, sizeof r[g].error, "%s", dlt_last_error());
            fprintf(stderr, "gpu_report: GPU %d: %s\n", r[g].index, r[g].error);
            failed = 1;
            continue;
        }
        if (bench) measure(&r[g], quick);
    }
    print_table(r, n, bench);
    if (rec && write_record(rec, json, r, n, NULL) != 0) failed = 1;
    run_record_free(rec);
    for (int g = 0; g < n; g++) {
        dlt_gpu_monitor_destroy(r[g].mon);
        dlt_device_info_destroy(r[g].info);
    }
    free(r);
    return failed;
}
