/*
 * run_record.c - the run record builder (run_record.h; schema in docs/run-record.md).
 *
 * Everything is read from the library (device info and monitor keys are enumerated by their
 * own names, so keys the library appends appear in records without changes here) or from
 * the operating system (host, CPU). Nothing is estimated: a value that cannot be read is
 * null, and the report shows it as missing.
 */
#include "run_record.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <dltrain/device.h>

struct run_record {
    cJSON *root;
    double t0_mono;
};

double run_record_mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double run_record_time(const run_record *r, double mono_s) { return mono_s - r->t0_mono; }

/* ---- small helpers ---- */
void rr_num(cJSON *o, const char *key, double v) {
    if (!o) return;
    if (isfinite(v)) cJSON_AddNumberToObject(o, key, v);
    else cJSON_AddNullToObject(o, key);
}

void rr_int(cJSON *o, const char *key, int64_t v) {
    if (o) cJSON_AddNumberToObject(o, key, (double)v);
}

void rr_str(cJSON *o, const char *key, const char *s) {
    if (!o) return;
    if (s) cJSON_AddStringToObject(o, key, s);
    else cJSON_AddNullToObject(o, key);
}

void rr_bool(cJSON *o, const char *key, int v) {
    if (o) cJSON_AddBoolToObject(o, key, v != 0);
}

const char *rr_precision_name(int32_t amp) {
    return amp == DLT_F16 ? "fp16" : amp == DLT_BF16 ? "bf16" : "fp32";
}

/* Rounded to a microsecond: records stay readable and nothing measured is that precise. */
static double us(double s) { return round(s * 1e6) / 1e6; }

void rr_sec(cJSON *o, const char *key, double seconds) { rr_num(o, key, us(seconds)); }

static void utc_now(char *buf, size_t n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, n, "%s.%03dZ", base, (int)(ts.tv_nsec / 1000000));
}

static cJSON *obj_get(cJSON *parent, const char *key) {
    cJSON *o = cJSON_GetObjectItemCaseSensitive(parent, key);
    if (!cJSON_IsObject(o)) {
        cJSON_DeleteItemFromObjectCaseSensitive(parent, key);
        o = cJSON_AddObjectToObject(parent, key);
    }
    return o;
}

static void set_item(cJSON *o, const char *key, cJSON *item) {
    if (cJSON_GetObjectItemCaseSensitive(o, key)) cJSON_ReplaceItemInObjectCaseSensitive(o, key, item);
    else cJSON_AddItemToObject(o, key, item);
}

/* The processor's model name from /proc/cpuinfo, or NULL. */
static char *cpu_model(char *buf, size_t n) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return NULL;
    char line[512];
    char *found = NULL;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        c[strcspn(c, "\n")] = '\0';
        snprintf(buf, n, "%s", c);
        found = buf;
        break;
    }
    fclose(f);
    return found;
}

static int64_t phys_memory_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (int64_t)pages * page : -1;
}

/* ---- the record ---- */
run_record *run_record_begin(const char *program, int argc, char **argv) {
    run_record *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->t0_mono = run_record_mono_now();
    r->root = cJSON_CreateObject();
    if (!r->root) {
        free(r);
        return NULL;
    }
    cJSON *root = r->root;
    rr_str(root, "schema", RUN_RECORD_SCHEMA);
    rr_int(root, "schema_version", RUN_RECORD_SCHEMA_VERSION);
    cJSON *prog = cJSON_AddObjectToObject(root, "program");
    rr_str(prog, "name", program);
    cJSON *args = cJSON_AddArrayToObject(prog, "argv");
    for (int i = 0; i < argc && args; i++) cJSON_AddItemToArray(args, cJSON_CreateString(argv[i]));
    char when[64];
    utc_now(when, sizeof when);
    rr_str(root, "started_utc", when);

    cJSON *host = cJSON_AddObjectToObject(root, "host");
    char hn[256] = "";
    rr_str(host, "hostname", gethostname(hn, sizeof hn - 1) == 0 ? hn : NULL);
    struct utsname u;
    char os[3 * sizeof u.release + 8];
    int have_uname = uname(&u) == 0;
    if (have_uname) snprintf(os, sizeof os, "%s %s %s", u.sysname, u.release, u.machine);
    rr_str(host, "os", have_uname ? os : NULL);
    char model[256];
    rr_str(host, "cpu_model", cpu_model(model, sizeof model));
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu > 0) rr_int(host, "logical_cpus", ncpu);
    else rr_num(host, "logical_cpus", NAN);
    int64_t mem = phys_memory_bytes();
    if (mem > 0) rr_int(host, "memory_bytes", mem);
    else rr_num(host, "memory_bytes", NAN);

    cJSON *sw = cJSON_AddObjectToObject(root, "software");
    rr_str(sw, "libdltrain", dlt_version_string());
    rr_int(sw, "abi_version", dlt_abi_version());
    rr_bool(sw, "built_with_cuda", dlt_built_with_cuda());
    /* filled by run_record_add_device for a CUDA device */
    rr_str(sw, "cuda_driver", NULL);
    rr_str(sw, "cuda_runtime", NULL);
    rr_str(sw, "cudnn", NULL);
    rr_str(sw, "cublas", NULL);
    cJSON_AddArrayToObject(root, "devices");
    cJSON_AddNullToObject(root, "workload");
    cJSON_AddNullToObject(root, "results");
    return r;
}

void run_record_free(run_record *r) {
    if (!r) return;
    cJSON_Delete(r->root);
    free(r);
}

cJSON *run_record_root(run_record *r) { return r->root; }

cJSON *run_record_workload(run_record *r) { return obj_get(r->root, "workload"); }

cJSON *run_record_results(run_record *r, const char *kind) {
    cJSON *res = obj_get(r->root, "results");
    if (res && !cJSON_GetObjectItemCaseSensitive(res, "kind")) rr_str(res, "kind", kind);
    return res;
}

/* CUDA packs versions as 1000*major + 10*minor; cuDNN and cuBLAS as 10000*major + 100*minor
 * + patch (gpu_report prints them the same way). */
static void version_into(cJSON *sw, const char *key, const dlt_device_info *in, int32_t info_key,
                         int cuda) {
    int64_t v = 0;
    char buf[32];
    if (dlt_device_info_int(in, info_key, &v) != DLT_OK || v <= 0) return; /* stays null */
    if (cuda) snprintf(buf, sizeof buf, "%d.%d", (int)(v / 1000), (int)(v % 1000 / 10));
    else snprintf(buf, sizeof buf, "%d.%d.%d", (int)(v / 10000), (int)(v % 10000 / 100), (int)(v % 100));
    set_item(sw, key, cJSON_CreateString(buf));
}

static void info_int_into(cJSON *dev, const char *key, const dlt_device_info *in, int32_t k) {
    int64_t v = 0;
    if (dlt_device_info_int(in, k, &v) == DLT_OK) rr_int(dev, key, v);
    else rr_num(dev, key, NAN);
}

static void cuda_device(run_record *r, cJSON *dev, int32_t index) {
    dlt_device_info *in = NULL;
    if (dlt_device_info_get(index, &in) != DLT_OK) {
        rr_str(dev, "name", NULL);
        rr_str(dev, "error", dlt_last_error());
        return;
    }
    char buf[256] = "";
    rr_str(dev, "name", dlt_device_info_string(in, DLT_DEVINFO_NAME, buf, sizeof buf, NULL) == DLT_OK ? buf : NULL);
    int64_t ma = 0, mi = 0;
    if (dlt_device_info_int(in, DLT_DEVINFO_CC_MAJOR, &ma) == DLT_OK &&
        dlt_device_info_int(in, DLT_DEVINFO_CC_MINOR, &mi) == DLT_OK) {
        snprintf(buf, sizeof buf, "%lld.%lld", (long long)ma, (long long)mi);
        rr_str(dev, "compute_capability", buf);
    } else {
        rr_str(dev, "compute_capability", NULL);
    }
    rr_str(dev, "arch", dlt_device_info_string(in, DLT_DEVINFO_ARCH_NAME, buf, sizeof buf, NULL) == DLT_OK ? buf : NULL);
    info_int_into(dev, "sm_count", in, DLT_DEVINFO_SM_COUNT);
    info_int_into(dev, "cuda_cores", in, DLT_DEVINFO_CUDA_CORES);
    info_int_into(dev, "tensor_cores", in, DLT_DEVINFO_TENSOR_CORES);
    info_int_into(dev, "memory_bytes", in, DLT_DEVINFO_MEMORY_BYTES);
    info_int_into(dev, "memory_bus_bits", in, DLT_DEVINFO_MEMORY_BUS_BITS);
    info_int_into(dev, "memory_clock_khz", in, DLT_DEVINFO_MEMORY_CLOCK_KHZ);
    info_int_into(dev, "l2_bytes", in, DLT_DEVINFO_L2_BYTES);
    info_int_into(dev, "sm_clock_khz", in, DLT_DEVINFO_SM_CLOCK_KHZ);
    rr_str(dev, "pci_bus_id", dlt_device_info_string(in, DLT_DEVINFO_PCI_BUS_ID, buf, sizeof buf, NULL) == DLT_OK ? buf : NULL);
    /* from the device's own clocks and widths (not a datasheet): bandwidth as the library
     * derives it, fp32 peak as 2 FLOP (one FMA) per CUDA core per peak SM clock */
    cJSON *th = cJSON_AddObjectToObject(dev, "theoretical");
    double bw = 0;
    rr_num(th, "memory_bandwidth_gbps",
           dlt_device_info_double(in, DLT_DEVINFO_MEMORY_BANDWIDTH_GBPS, &bw) == DLT_OK ? bw : NAN);
    int64_t cores = 0, khz = 0;
    rr_num(th, "fp32_tflops",
           dlt_device_info_int(in, DLT_DEVINFO_CUDA_CORES, &cores) == DLT_OK &&
                   dlt_device_info_int(in, DLT_DEVINFO_SM_CLOCK_KHZ, &khz) == DLT_OK && khz > 0
               ? 2.0 * (double)cores * (double)khz * 1e3 / 1e12
               : NAN);
    cJSON *sw = cJSON_GetObjectItemCaseSensitive(r->root, "software");
    version_into(sw, "cuda_driver", in, DLT_DEVINFO_DRIVER_VERSION, 1);
    version_into(sw, "cuda_runtime", in, DLT_DEVINFO_RUNTIME_VERSION, 1);
    version_into(sw, "cudnn", in, DLT_DEVINFO_CUDNN_VERSION, 0);
    version_into(sw, "cublas", in, DLT_DEVINFO_CUBLAS_VERSION, 0);
    dlt_device_info_destroy(in);
}

cJSON *run_record_add_device(run_record *r, int32_t device_type, int32_t index) {
    cJSON *devs = cJSON_GetObjectItemCaseSensitive(r->root, "devices");
    cJSON *dev = cJSON_CreateObject();
    if (!devs || !dev) {
        cJSON_Delete(dev);
        return NULL;
    }
    cJSON_AddItemToArray(devs, dev);
    if (device_type == DLT_DEVICE_CUDA) {
        rr_str(dev, "kind", "cuda");
        rr_int(dev, "index", index);
        cuda_device(r, dev, index);
    } else {
        char model[256];
        rr_str(dev, "kind", "cpu");
        rr_int(dev, "index", 0);
        const char *m = cpu_model(model, sizeof model);
        rr_str(dev, "name", m ? m : "cpu");
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        if (ncpu > 0) rr_int(dev, "logical_cpus", ncpu);
        else rr_num(dev, "logical_cpus", NAN);
        int64_t mem = phys_memory_bytes();
        if (mem > 0) rr_int(dev, "memory_bytes", mem);
        else rr_num(dev, "memory_bytes", NAN);
    }
    cJSON_AddNullToObject(dev, "monitor");
    return dev;
}

/* A monitor key's value, or dflt where the monitor has none. */
static int64_t mon_int(const dlt_gpu_monitor *mon, int32_t key, int64_t dflt) {
    int64_t v = 0;
    return dlt_gpu_monitor_int(mon, key, &v) == DLT_OK ? v : dflt;
}

static double mon_dbl(const dlt_gpu_monitor *mon, int32_t key) {
    double v = 0;
    return dlt_gpu_monitor_double(mon, key, &v) == DLT_OK ? v : NAN;
}

void run_record_device_monitor(run_record *r, cJSON *dev, const dlt_gpu_monitor *mon) {
    if (!dev) return;
    if (!mon) {
        set_item(dev, "monitor", cJSON_CreateNull());
        return;
    }
    cJSON *m = cJSON_CreateObject();
    if (!m) return;
    set_item(dev, "monitor", m);
    int64_t avail = mon_int(mon, DLT_GPUMON_AVAILABLE, 0), iv = mon_int(mon, DLT_GPUMON_INTERVAL_MS, 0);
    rr_bool(m, "available", (int)avail);
    char reason[512] = "";
    rr_str(m, "unavailable_reason",
           !avail && dlt_gpu_monitor_string(mon, DLT_GPUMON_UNAVAILABLE_REASON, reason, sizeof reason, NULL) == DLT_OK
               ? reason
               : NULL);
    rr_int(m, "interval_ms", iv);
    double dur = mon_dbl(mon, DLT_GPUMON_DURATION_S);
    double t_start = run_record_time(r, mon_dbl(mon, DLT_GPUMON_START_MONOTONIC_S));
    rr_num(m, "t_start_s", us(t_start));
    rr_num(m, "duration_s", us(dur));
    /* every numeric summary key, by the library's names */
    cJSON *sum = cJSON_AddObjectToObject(m, "summary");
    for (int32_t k = 0; dlt_gpu_monitor_key_name(k); k++) {
        int32_t t = dlt_gpu_monitor_key_type(k);
        if (t == DLT_VALUE_STRING || k == DLT_GPUMON_START_MONOTONIC_S) continue;
        rr_num(sum, dlt_gpu_monitor_key_name(k), mon_dbl(mon, k));
    }
    /* the series, one array per field; times moved into the record's time base */
    int64_t held = mon_int(mon, DLT_GPUMON_SERIES_POINTS, 0);
    enum { NF = DLT_GPUMON_SERIES_NFIELDS };
    double *buf = held > 0 ? malloc((size_t)held * NF * sizeof *buf) : NULL;
    int64_t n = 0;
    if (buf && dlt_gpu_monitor_series(mon, 0, held, NF, buf, &n) != DLT_OK) n = 0;
    cJSON *ser = cJSON_AddObjectToObject(m, "series");
    rr_int(ser, "stride", mon_int(mon, DLT_GPUMON_SERIES_STRIDE, 1));
    rr_int(ser, "points", n);
    for (int32_t f = 0; f < NF; f++) {
        cJSON *arr = cJSON_AddArrayToObject(ser, dlt_gpu_monitor_series_field_name(f));
        for (int64_t i = 0; i < n && arr; i++) {
            double v = buf[i * NF + f];
            if (f == DLT_GPUMON_SERIES_TIME_S) v = us(v + t_start);
            cJSON_AddItemToArray(arr, isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());
        }
    }
    free(buf);
}

/* ---- writing ---- */
/* The directory part of path ("." when it has none). */
static void dir_of(const char *path, char *dir, size_t n) {
    snprintf(dir, n, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
    else snprintf(dir, n, ".");
}

int run_record_check_path(const char *path, const char *prog) {
    char dir[PATH_MAX];
    struct stat st;
    if (!path[0]) {
        fprintf(stderr, "%s: --json needs a file name\n", prog);
        return -1;
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "%s: cannot write the record %s: it is a directory\n", prog, path);
        return -1;
    }
    dir_of(path, dir, sizeof dir);
    if (access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "%s: cannot write the record %s: directory %s: %s\n", prog, path, dir, strerror(errno));
        return -1;
    }
    return 0;
}

int run_record_write(run_record *r, const char *path, const char *prog) {
    char when[64];
    utc_now(when, sizeof when);
    set_item(r->root, "finished_utc", cJSON_CreateString(when));
    set_item(r->root, "duration_s", cJSON_CreateNumber(us(run_record_mono_now() - r->t0_mono)));
    char *text = cJSON_Print(r->root);
    if (!text) {
        fprintf(stderr, "%s: cannot write the record %s: out of memory\n", prog, path);
        return -1;
    }
    size_t len = strlen(text);
    /* the temporary file sits beside the target so that rename stays within one file system;
     * created with mode 0666 less the umask, as the target would be */
    char tmp[PATH_MAX], dir[PATH_MAX];
    int fd = -1, rc = -1, tmp_made = 0;
    const char *what = "create a temporary file beside";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%ld", path, (long)getpid(), (long)ts.tv_nsec) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        goto done;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) goto done;
    tmp_made = 1;
    what = "write";
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) goto done;
        off += (size_t)w;
    }
    if (write(fd, "\n", 1) != 1 || fsync(fd) != 0) goto done;
    what = "close";
    int cfd = fd;
    fd = -1;
    if (close(cfd) != 0) goto done;
    what = "rename the temporary file onto";
    if (rename(tmp, path) != 0) goto done;
    tmp_made = 0;
    /* the rename itself is durable once the directory is synced */
    dir_of(path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    rc = 0;
done:
    if (rc != 0) fprintf(stderr, "%s: cannot %s the record %s: %s\n", prog, what, path, strerror(errno));
    if (fd >= 0) close(fd);
    if (tmp_made) unlink(tmp);
    free(text);
    return rc;
}
