/*
 * monitor.c - the GPU monitor: NVML, loaded at run time, sampled by a background thread.
 *
 * NVML (libnvidia-ml.so.1) ships with the driver, not the toolkit, and is absent on
 * machines without an NVIDIA driver, so it is opened with dlopen and never linked: the
 * library loads everywhere and a monitor without NVML simply reports available = 0. The
 * few NVML types and constants used are declared below with the values of NVML's public
 * nvml.h (they are part of NVML's stable ABI).
 *
 * Threading: the sampling thread reads NVML without holding the lock (a read can take a
 * millisecond), then folds the sample into the summaries under the monitor's mutex; the
 * getters read under the same mutex, so a reader always sees whole samples. The thread
 * sleeps on a condition variable with a CLOCK_MONOTONIC deadline, so stop wakes it at once.
 *
 * Device matching: CUDA ordinals follow CUDA_VISIBLE_DEVICES and CUDA's own order, NVML's
 * indexes follow the PCI order of all GPUs. The monitor takes the CUDA ordinal and finds
 * NVML's device by PCI bus id; only when CUDA cannot be asked (a build without CUDA, no
 * runtime) does it use NVML's index directly.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device_internal.h"
#include "series.h"

/* ---- NVML declarations (values from nvml.h) ---- */
typedef int nvml_return;                  /* nvmlReturn_t */
typedef struct nvml_device_st *nvml_device; /* nvmlDevice_t */
typedef struct nvml_utilization {         /* nvmlUtilization_t */
    unsigned int gpu;                     /* % of time a kernel ran, over NVML's period */
    unsigned int memory;                  /* % of time memory was read or written */
} nvml_utilization;
typedef struct nvml_memory { /* nvmlMemory_t (v1) */
    unsigned long long total, free, used;
} nvml_memory;
#define NVML_SUCCESS 0
#define NVML_TEMPERATURE_GPU 0 /* nvmlTemperatureSensors_t */
#define NVML_CLOCK_SM 1        /* nvmlClockType_t */
/* nvmlClocksEventReasons (formerly ...ThrottleReasons) bits */
#define NVML_REASON_SW_POWER_CAP 0x0000000000000004ULL
#define NVML_REASON_SW_THERMAL_SLOWDOWN 0x0000000000000020ULL
#define NVML_REASON_HW_THERMAL_SLOWDOWN 0x0000000000000040ULL
#define NVML_REASON_HW_POWER_BRAKE_SLOWDOWN 0x0000000000000080ULL
#define NVML_THERMAL_REASONS (NVML_REASON_SW_THERMAL_SLOWDOWN | NVML_REASON_HW_THERMAL_SLOWDOWN)
#define NVML_POWER_REASONS (NVML_REASON_SW_POWER_CAP | NVML_REASON_HW_POWER_BRAKE_SLOWDOWN)

typedef struct nvml_api {
    void *lib;
    nvml_return (*init)(void);
    nvml_return (*shutdown)(void);
    const char *(*error_string)(nvml_return);                        /* optional */
    nvml_return (*by_index)(unsigned int, nvml_device *);
    nvml_return (*by_pci)(const char *, nvml_device *);              /* optional */
    /* metrics: each optional (a missing one is reported as not supported) */
    nvml_return (*utilization)(nvml_device, nvml_utilization *);
    nvml_return (*temperature)(nvml_device, int, unsigned int *);
    nvml_return (*clock)(nvml_device, int, unsigned int *);
    nvml_return (*power)(nvml_device, unsigned int *); /* milliwatts */
    nvml_return (*memory)(nvml_device, nvml_memory *);
    nvml_return (*reasons)(nvml_device, unsigned long long *);
} nvml_api;

/* ---- the monitor ---- */
typedef struct agg {
    int64_t n;
    double sum, max;
    nvml_return last_err; /* last failure, for the message when n == 0 */
} agg;

enum { Q_UTIL, Q_MEM_UTIL, Q_TEMP, Q_CLOCK, Q_POWER, Q_MEM_USED, Q_REASONS, Q_COUNT };
static const char *const Q_NAMES[Q_COUNT] = {"GPU utilisation", "memory utilisation",
                                             "temperature", "SM clock", "power draw",
                                             "memory use", "clock-event (throttle) reasons"};

struct dlt_gpu_monitor {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int thread_running; /* a thread was started and not joined yet */
    int stop_requested;
    int stopped;
    int32_t device_index, interval_ms;
    int32_t available;
    char reason[320];
    nvml_api api;
    nvml_device dev;
    int nvml_initialised;
    struct timespec t_start, t_stop;
    /* summaries (under mu) */
    int64_t samples;
    agg q[Q_COUNT];
    int64_t thermal_samples, power_samples;
    dlt__series series; /* every sample, bounded (series.h) */
};

static void now_mono(struct timespec *t) { clock_gettime(CLOCK_MONOTONIC, t); }

static double seconds_between(const struct timespec *a, const struct timespec *b) {
    return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) * 1e-9;
}

static void add_ms(struct timespec *t, int32_t ms) {
    t->tv_sec += ms / 1000;
    t->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t->tv_nsec >= 1000000000L) {
        t->tv_sec++;
        t->tv_nsec -= 1000000000L;
    }
}

static int before(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* One reading of every quantity: ok[q] says whether v[q] holds a value. */
typedef struct sample {
    int ok[Q_COUNT];
    nvml_return err[Q_COUNT];
    double v[Q_COUNT];
    unsigned long long reasons;
} sample;

static void read_sample(const nvml_api *a, nvml_device d, sample *s) {
    memset(s, 0, sizeof *s);
    nvml_return r;
    /* -1 marks "function absent from this NVML" */
    for (int q = 0; q < Q_COUNT; q++) s->err[q] = -1;
    if (a->utilization) {
        nvml_utilization u = {0, 0};
        r = a->utilization(d, &u);
        s->err[Q_UTIL] = s->err[Q_MEM_UTIL] = r;
        if (r == NVML_SUCCESS) {
            s->ok[Q_UTIL] = s->ok[Q_MEM_UTIL] = 1;
            s->v[Q_UTIL] = u.gpu;
            s->v[Q_MEM_UTIL] = u.memory;
        }
    }
    unsigned int x = 0;
    if (a->temperature) {
        r = a->temperature(d, NVML_TEMPERATURE_GPU, &x);
        s->err[Q_TEMP] = r;
        if (r == NVML_SUCCESS) {
            s->ok[Q_TEMP] = 1;
            s->v[Q_TEMP] = x;
        }
    }
    if (a->clock) {
        r = a->clock(d, NVML_CLOCK_SM, &x);
        s->err[Q_CLOCK] = r;
        if (r == NVML_SUCCESS) {
            s->ok[Q_CLOCK] = 1;
            s->v[Q_CLOCK] = x;
        }
    }
    if (a->power) {
        r = a->power(d, &x);
        s->err[Q_POWER] = r;
        if (r == NVML_SUCCESS) {
            s->ok[Q_POWER] = 1;
            s->v[Q_POWER] = x / 1000.0; /* NVML reports milliwatts */
        }
    }
    if (a->memory) {
        nvml_memory m = {0, 0, 0};
        r = a->memory(d, &m);
        s->err[Q_MEM_USED] = r;
        if (r == NVML_SUCCESS) {
            s->ok[Q_MEM_USED] = 1;
            s->v[Q_MEM_USED] = (double)m.used / 1048576.0;
        }
    }
    if (a->reasons) {
        unsigned long long bits = 0;
        r = a->reasons(d, &bits);
        s->err[Q_REASONS] = r;
        if (r == NVML_SUCCESS) {
            s->ok[Q_REASONS] = 1;
            s->reasons = bits;
        }
    }
}

/* Appends a sample taken t seconds after start to the series (caller holds mu). */
static void series_sample(dlt_gpu_monitor *m, const sample *s, double t) {
    static const int FIELD_Q[DLT__SERIES_NFIELDS] = {
        [DLT_GPUMON_SERIES_TIME_S] = -1,          [DLT_GPUMON_SERIES_GPU_UTIL] = Q_UTIL,
        [DLT_GPUMON_SERIES_MEM_UTIL] = Q_MEM_UTIL, [DLT_GPUMON_SERIES_TEMP_C] = Q_TEMP,
        [DLT_GPUMON_SERIES_SM_CLOCK_MHZ] = Q_CLOCK, [DLT_GPUMON_SERIES_POWER_W] = Q_POWER,
        [DLT_GPUMON_SERIES_MEM_USED_MIB] = Q_MEM_USED, [DLT_GPUMON_SERIES_REASONS] = Q_REASONS};
    double v[DLT__SERIES_NFIELDS];
    for (int f = 0; f < DLT__SERIES_NFIELDS; f++) {
        int q = FIELD_Q[f];
        if (q < 0) v[f] = t;
        else if (!s->ok[q]) v[f] = NAN;
        else v[f] = q == Q_REASONS ? (double)s->reasons : s->v[q];
    }
    dlt__series_push(&m->series, v);
}

/* Folds a sample into the summaries (caller holds mu). */
static void apply_sample(dlt_gpu_monitor *m, const sample *s) {
    m->samples++;
    for (int q = 0; q < Q_COUNT; q++) {
        agg *g = &m->q[q];
        if (!s->ok[q]) {
            g->last_err = s->err[q];
            continue;
        }
        double v = s->v[q];
        if (g->n == 0 || v > g->max) g->max = v;
        g->sum += v;
        g->n++;
    }
    if (s->ok[Q_REASONS]) {
        if (s->reasons & NVML_THERMAL_REASONS) m->thermal_samples++;
        if (s->reasons & NVML_POWER_REASONS) m->power_samples++;
    }
}

static void *sampler_main(void *arg) {
    dlt_gpu_monitor *m = arg;
    struct timespec next;
    now_mono(&next);
    pthread_mutex_lock(&m->mu);
    while (!m->stop_requested) {
        pthread_mutex_unlock(&m->mu);
        sample s;
        struct timespec t_read;
        now_mono(&t_read);
        read_sample(&m->api, m->dev, &s);
        pthread_mutex_lock(&m->mu);
        apply_sample(m, &s);
        series_sample(m, &s, seconds_between(&m->t_start, &t_read));
        /* fixed cadence; after a stall (slow NVML, suspended process) restart from now */
        add_ms(&next, m->interval_ms);
        struct timespec now;
        now_mono(&now);
        if (before(&next, &now)) {
            next = now;
            add_ms(&next, m->interval_ms);
        }
        while (!m->stop_requested) {
            int rc = pthread_cond_timedwait(&m->cv, &m->mu, &next);
            if (rc == ETIMEDOUT) break;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* ---- loading NVML ---- */
/* ISO C has no conversion from void* to a function pointer; copying the bits is the POSIX
 * way (dlsym's own documentation does the same). */
#define RESOLVE(lib, dst, name)                                                               \
    do {                                                                                      \
        void *p_ = dlsym((lib), (name));                                                      \
        memcpy(&(dst), &p_, sizeof(dst));                                                     \
    } while (0)

static const char *nvml_err(const nvml_api *a, nvml_return r) {
    const char *s = a->error_string ? a->error_string(r) : NULL;
    return s ? s : "NVML error";
}

/* Loads NVML and finds the device; on failure fills m->reason and undoes what was done. */
static void nvml_open(dlt_gpu_monitor *m) {
    nvml_api *a = &m->api;
    char path_buf[4096];
    const char *path = dlt__env_path(DLT__ENV_NVML_LIBRARY, path_buf, sizeof path_buf);
    dlerror();
    a->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!a->lib) {
        const char *e = dlerror();
        snprintf(m->reason, sizeof m->reason, "NVML is not available: cannot load %s (%s)", path,
                 e ? e : "unknown reason");
        return;
    }
    RESOLVE(a->lib, a->init, "nvmlInit_v2");
    RESOLVE(a->lib, a->shutdown, "nvmlShutdown");
    RESOLVE(a->lib, a->error_string, "nvmlErrorString");
    RESOLVE(a->lib, a->by_index, "nvmlDeviceGetHandleByIndex_v2");
    RESOLVE(a->lib, a->by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    RESOLVE(a->lib, a->utilization, "nvmlDeviceGetUtilizationRates");
    RESOLVE(a->lib, a->temperature, "nvmlDeviceGetTemperature");
    RESOLVE(a->lib, a->clock, "nvmlDeviceGetClockInfo");
    RESOLVE(a->lib, a->power, "nvmlDeviceGetPowerUsage");
    RESOLVE(a->lib, a->memory, "nvmlDeviceGetMemoryInfo");
    RESOLVE(a->lib, a->reasons, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!a->reasons) RESOLVE(a->lib, a->reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    const char *missing = !a->init       ? "nvmlInit_v2"
                          : !a->shutdown ? "nvmlShutdown"
                          : !a->by_index ? "nvmlDeviceGetHandleByIndex_v2"
                                         : NULL;
    if (missing) {
        snprintf(m->reason, sizeof m->reason, "NVML is not usable: %s has no %s", path, missing);
        goto fail;
    }
    nvml_return r = a->init();
    if (r != NVML_SUCCESS) {
        snprintf(m->reason, sizeof m->reason, "NVML: nvmlInit_v2 failed: %s (%d)", nvml_err(a, r),
                 r);
        goto fail;
    }
    m->nvml_initialised = 1;

    int32_t ncuda = 0;
    if (dlt_cuda_device_count(&ncuda) != DLT_OK) ncuda = 0;
    if (ncuda > 0 && m->device_index >= ncuda) {
        snprintf(m->reason, sizeof m->reason, "CUDA device %d does not exist (%d visible)",
                 m->device_index, ncuda);
        goto fail;
    }
    char bus[64];
    r = -1;
    const dlt_backend *cu = dlt__cuda_backend();
    if (ncuda > 0 && a->by_pci && cu && cu->device_pci_bus_id &&
        cu->device_pci_bus_id(m->device_index, bus, sizeof bus) == DLT_OK)
        r = a->by_pci(bus, &m->dev);
    if (r != NVML_SUCCESS) r = a->by_index((unsigned int)m->device_index, &m->dev);
    if (r != NVML_SUCCESS) {
        snprintf(m->reason, sizeof m->reason, "NVML: cannot find GPU %d: %s (%d)", m->device_index,
                 nvml_err(a, r), r);
        goto fail;
    }
    m->available = 1;
    m->reason[0] = '\0';
    return;
fail:
    if (m->nvml_initialised) a->shutdown();
    m->nvml_initialised = 0;
    dlclose(a->lib);
    memset(a, 0, sizeof *a);
}

/* ---- public ---- */
dlt_status dlt_gpu_monitor_start(int32_t device_index, int32_t interval_ms,
                                 dlt_gpu_monitor **out) {
    static const char *F = "dlt_gpu_monitor_start";
    DLT_NULL_CHECK(out, F);
    if (device_index < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "device_index %d is negative", device_index);
    if (interval_ms < 1 || interval_ms > 3600000)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "interval_ms = %d; it must be in 1..3600000", interval_ms);
    dlt_gpu_monitor *m = calloc(1, sizeof *m);
    if (!m) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the monitor");
    m->device_index = device_index;
    m->interval_ms = interval_ms;
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc == 0) {
        rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        if (rc == 0) rc = pthread_cond_init(&m->cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    if (rc != 0) {
        free(m);
        return dlt__err(DLT_ERR_INTERNAL, F, "pthread_cond_init failed: %s", strerror(rc));
    }
    rc = pthread_mutex_init(&m->mu, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&m->cv);
        free(m);
        return dlt__err(DLT_ERR_INTERNAL, F, "pthread_mutex_init failed: %s", strerror(rc));
    }
    now_mono(&m->t_start);
    nvml_open(m);
    if (m->available && dlt__series_init(&m->series, DLT_GPUMON_SERIES_MAX_POINTS) != 0) {
        m->api.shutdown();
        dlclose(m->api.lib);
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
        free(m);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the sample series (%d points)",
                        DLT_GPUMON_SERIES_MAX_POINTS);
    }
    if (m->available) {
        rc = pthread_create(&m->thread, NULL, sampler_main, m);
        if (rc != 0) {
            dlt__series_free(&m->series);
            m->api.shutdown();
            dlclose(m->api.lib);
            pthread_mutex_destroy(&m->mu);
            pthread_cond_destroy(&m->cv);
            free(m);
            return dlt__err(DLT_ERR_INTERNAL, F, "cannot start the sampling thread: %s",
                            strerror(rc));
        }
        m->thread_running = 1;
    }
    *out = m;
    return DLT_OK;
}

/* Stops the sampling thread, if it runs (stop and destroy). */
static void monitor_stop(dlt_gpu_monitor *mon) {
    pthread_mutex_lock(&mon->mu);
    int join = mon->thread_running;
    mon->stop_requested = 1;
    pthread_cond_signal(&mon->cv);
    pthread_mutex_unlock(&mon->mu);
    if (join) pthread_join(mon->thread, NULL);
    pthread_mutex_lock(&mon->mu);
    mon->thread_running = 0;
    if (!mon->stopped) {
        now_mono(&mon->t_stop);
        mon->stopped = 1;
    }
    pthread_mutex_unlock(&mon->mu);
}

dlt_status dlt_gpu_monitor_stop(dlt_gpu_monitor *mon) {
    DLT_NULL_CHECK(mon, "dlt_gpu_monitor_stop");
    monitor_stop(mon);
    return DLT_OK;
}

void dlt_gpu_monitor_destroy(dlt_gpu_monitor *mon) {
    if (!mon) return;
    monitor_stop(mon);
    if (mon->nvml_initialised) mon->api.shutdown();
    if (mon->api.lib) dlclose(mon->api.lib);
    dlt__series_free(&mon->series);
    pthread_mutex_destroy(&mon->mu);
    pthread_cond_destroy(&mon->cv);
    free(mon);
}

/* ---- keys ---- */
typedef struct mon_key {
    const char *name;
    int32_t type;
} mon_key;

static const mon_key MON_KEYS[] = {
    [DLT_GPUMON_AVAILABLE] = {"available", DLT_VALUE_INT},
    [DLT_GPUMON_SAMPLES] = {"samples", DLT_VALUE_INT},
    [DLT_GPUMON_INTERVAL_MS] = {"interval_ms", DLT_VALUE_INT},
    [DLT_GPUMON_DURATION_S] = {"duration_s", DLT_VALUE_DOUBLE},
    [DLT_GPUMON_GPU_UTIL_MEAN] = {"gpu_util_mean", DLT_VALUE_DOUBLE},
    [DLT_GPUMON_GPU_UTIL_MAX] = {"gpu_util_max", DLT_VALUE_DOUBLE},
    [DLT_GPUMON_MEM_UTIL_MEAN] = {"mem_util_mean", DLT_VALUE_DOUBLE},
    [DLT_GPUMON_TEMP_MEAN_C] = {"temp_mean_c", DLT_VALUE_DOUBLE},
    [DLT_GPUMON_TEMP_MAX_C] = {"temp_max_c", DLT_VALUE_DOUBLE},
    [DLT_GPUMON_SM_CLOCK_MEAN_MHZ] = {"sm_clock_mean_mhz", DLT_VALUE_DOUBLE},
    [DLT_GPUMON_SM_CLOCK_MAX_MHZ] = {"sm_clock_max_mhz", DLT_VALUE_DOUBLE},
    [DLT_GPUMON_POWER_MEAN_W] = {"power_mean_w", DLT_VALUE_DOUBLE},
    [DLT_GPUMON_POWER_MAX_W] = {"power_max_w", DLT_VALUE_DOUBLE},
    [DLT_GPUMON_MEM_USED_MAX_MIB] = {"mem_used_max_mib", DLT_VALUE_DOUBLE},
    [DLT_GPUMON_THERMAL_THROTTLE] = {"thermal_throttle", DLT_VALUE_INT},
    [DLT_GPUMON_POWER_THROTTLE] = {"power_throttle", DLT_VALUE_INT},
    [DLT_GPUMON_THERMAL_THROTTLE_SAMPLES] = {"thermal_throttle_samples", DLT_VALUE_INT},
    [DLT_GPUMON_POWER_THROTTLE_SAMPLES] = {"power_throttle_samples", DLT_VALUE_INT},
    [DLT_GPUMON_UNAVAILABLE_REASON] = {"unavailable_reason", DLT_VALUE_STRING},
    [DLT_GPUMON_SERIES_POINTS] = {"series_points", DLT_VALUE_INT},
    [DLT_GPUMON_SERIES_STRIDE] = {"series_stride", DLT_VALUE_INT},
    [DLT_GPUMON_START_MONOTONIC_S] = {"start_monotonic_s", DLT_VALUE_DOUBLE},
};
#define MON_NKEYS ((int32_t)(sizeof MON_KEYS / sizeof MON_KEYS[0]))

const char *dlt_gpu_monitor_key_name(int32_t key) {
    return key >= 0 && key < MON_NKEYS ? MON_KEYS[key].name : NULL;
}

int32_t dlt_gpu_monitor_key_type(int32_t key) {
    return key >= 0 && key < MON_NKEYS ? MON_KEYS[key].type : -1;
}

/* No value for quantity q: say why (caller holds mu). */
static dlt_status no_value(const dlt_gpu_monitor *m, int q, const char *func) {
    if (!m->available)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, func, "no %s: %s", Q_NAMES[q], m->reason);
    if (m->samples == 0)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, func, "no %s: no sample has been taken yet",
                        Q_NAMES[q]);
    if (m->q[q].last_err == -1)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, func,
                        "no %s: the loaded NVML has no function for it", Q_NAMES[q]);
    return dlt__err(DLT_ERR_NOT_SUPPORTED, func, "no %s: NVML reported %s (%d) for GPU %d",
                    Q_NAMES[q], nvml_err(&m->api, m->q[q].last_err), m->q[q].last_err,
                    m->device_index);
}

/* Value of a numeric key as a double (caller holds mu; key is numeric). */
static dlt_status mon_value(const dlt_gpu_monitor *m, int32_t key, const char *func, double *v) {
    const agg *g = NULL;
    int q = -1, mean = 0;
    switch (key) {
    case DLT_GPUMON_AVAILABLE: *v = m->available; return DLT_OK;
    case DLT_GPUMON_SAMPLES: *v = (double)m->samples; return DLT_OK;
    case DLT_GPUMON_INTERVAL_MS: *v = m->interval_ms; return DLT_OK;
    case DLT_GPUMON_DURATION_S: {
        struct timespec end = m->t_stop;
        if (!m->stopped) now_mono(&end);
        *v = seconds_between(&m->t_start, &end);
        return DLT_OK;
    }
    case DLT_GPUMON_SERIES_POINTS: *v = (double)dlt__series_points(&m->series); return DLT_OK;
    case DLT_GPUMON_SERIES_STRIDE: *v = m->series.pts ? (double)m->series.stride : 1; return DLT_OK;
    case DLT_GPUMON_START_MONOTONIC_S:
        *v = (double)m->t_start.tv_sec + (double)m->t_start.tv_nsec * 1e-9;
        return DLT_OK;
    case DLT_GPUMON_GPU_UTIL_MEAN: q = Q_UTIL, mean = 1; break;
    case DLT_GPUMON_GPU_UTIL_MAX: q = Q_UTIL; break;
    case DLT_GPUMON_MEM_UTIL_MEAN: q = Q_MEM_UTIL, mean = 1; break;
    case DLT_GPUMON_TEMP_MEAN_C: q = Q_TEMP, mean = 1; break;
    case DLT_GPUMON_TEMP_MAX_C: q = Q_TEMP; break;
    case DLT_GPUMON_SM_CLOCK_MEAN_MHZ: q = Q_CLOCK, mean = 1; break;
    case DLT_GPUMON_SM_CLOCK_MAX_MHZ: q = Q_CLOCK; break;
    case DLT_GPUMON_POWER_MEAN_W: q = Q_POWER, mean = 1; break;
    case DLT_GPUMON_POWER_MAX_W: q = Q_POWER; break;
    case DLT_GPUMON_MEM_USED_MAX_MIB: q = Q_MEM_USED; break;
    case DLT_GPUMON_THERMAL_THROTTLE:
    case DLT_GPUMON_POWER_THROTTLE:
    case DLT_GPUMON_THERMAL_THROTTLE_SAMPLES:
    case DLT_GPUMON_POWER_THROTTLE_SAMPLES: {
        if (m->q[Q_REASONS].n == 0) return no_value(m, Q_REASONS, func);
        int64_t c = key == DLT_GPUMON_THERMAL_THROTTLE || key == DLT_GPUMON_THERMAL_THROTTLE_SAMPLES
                        ? m->thermal_samples
                        : m->power_samples;
        if (key == DLT_GPUMON_THERMAL_THROTTLE || key == DLT_GPUMON_POWER_THROTTLE) c = c > 0;
        *v = (double)c;
        return DLT_OK;
    }
    default: return dlt__err(DLT_ERR_INTERNAL, func, "numeric key %d has no value", key);
    }
    g = &m->q[q];
    if (g->n == 0) return no_value(m, q, func);
    *v = mean ? g->sum / (double)g->n : g->max;
    return DLT_OK;
}

static dlt_status mon_key_check(const dlt_gpu_monitor *mon, const void *out, int32_t key,
                                int want_int, const char *func) {
    if (!mon) return dlt__err(DLT_ERR_NULL_POINTER, func, "argument 'mon' is NULL");
    if (!out) return dlt__err(DLT_ERR_NULL_POINTER, func, "the out-pointer is NULL");
    int32_t t = dlt_gpu_monitor_key_type(key);
    if (t < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "unknown key %d (keys are 0..%d)", key,
                        MON_NKEYS - 1);
    if (want_int ? t != DLT_VALUE_INT : t == DLT_VALUE_STRING)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "key %d (%s) is %s", key,
                        MON_KEYS[key].name, want_int ? "not an integer" : "a string");
    return DLT_OK;
}

dlt_status dlt_gpu_monitor_int(const dlt_gpu_monitor *mon, int32_t key, int64_t *out) {
    static const char *F = "dlt_gpu_monitor_int";
    DLT_CHECK(mon_key_check(mon, out, key, 1, F));
    dlt_gpu_monitor *m = (dlt_gpu_monitor *)mon; /* the mutex is not part of the value */
    double v = 0;
    pthread_mutex_lock(&m->mu);
    dlt_status st = mon_value(m, key, F, &v);
    pthread_mutex_unlock(&m->mu);
    if (st == DLT_OK) *out = (int64_t)v;
    return st;
}

dlt_status dlt_gpu_monitor_double(const dlt_gpu_monitor *mon, int32_t key, double *out) {
    static const char *F = "dlt_gpu_monitor_double";
    DLT_CHECK(mon_key_check(mon, out, key, 0, F));
    dlt_gpu_monitor *m = (dlt_gpu_monitor *)mon;
    double v = 0;
    pthread_mutex_lock(&m->mu);
    dlt_status st = mon_value(m, key, F, &v);
    pthread_mutex_unlock(&m->mu);
    if (st == DLT_OK) *out = v;
    return st;
}

dlt_status dlt_gpu_monitor_string(const dlt_gpu_monitor *mon, int32_t key, char *buf, size_t n,
                                  size_t *len) {
    static const char *F = "dlt_gpu_monitor_string";
    if (!mon) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'mon' is NULL");
    if (!buf && n > 0) return dlt__err(DLT_ERR_NULL_POINTER, F, "buf is NULL but n is %zu", n);
    if (dlt_gpu_monitor_key_type(key) != DLT_VALUE_STRING)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "key %d is %s", key,
                        dlt_gpu_monitor_key_name(key) ? "not a string key" : "unknown");
    /* the reason is written before the thread starts and never changes after */
    return dlt__copy_string_out(mon->reason, buf, n, len);
}

/* ---- the sample series ---- */
static const char *const SERIES_FIELDS[] = {
    [DLT_GPUMON_SERIES_TIME_S] = "t_s",
    [DLT_GPUMON_SERIES_GPU_UTIL] = "gpu_util",
    [DLT_GPUMON_SERIES_MEM_UTIL] = "mem_util",
    [DLT_GPUMON_SERIES_TEMP_C] = "temp_c",
    [DLT_GPUMON_SERIES_SM_CLOCK_MHZ] = "sm_clock_mhz",
    [DLT_GPUMON_SERIES_POWER_W] = "power_w",
    [DLT_GPUMON_SERIES_MEM_USED_MIB] = "mem_used_mib",
    [DLT_GPUMON_SERIES_REASONS] = "clock_event_reasons",
};
_Static_assert(sizeof SERIES_FIELDS / sizeof SERIES_FIELDS[0] == DLT__SERIES_NFIELDS &&
                   DLT__SERIES_NFIELDS == DLT_GPUMON_SERIES_NFIELDS,
               "series fields: device.h, series.h and this table agree");

const char *dlt_gpu_monitor_series_field_name(int32_t field) {
    return field >= 0 && field < DLT__SERIES_NFIELDS ? SERIES_FIELDS[field] : NULL;
}

dlt_status dlt_gpu_monitor_series(const dlt_gpu_monitor *mon, int64_t first, int64_t max_points,
                                  int32_t nfields, double *out, int64_t *points) {
    static const char *F = "dlt_gpu_monitor_series";
    if (!mon) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'mon' is NULL");
    DLT_NULL_CHECK(points, F);
    if (!out && max_points > 0)
        return dlt__err(DLT_ERR_NULL_POINTER, F, "out is NULL but max_points is %lld",
                        (long long)max_points);
    if (first < 0 || max_points < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "first = %lld, max_points = %lld; neither may be negative",
                        (long long)first, (long long)max_points);
    if (nfields < 1 || nfields > 64)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "nfields = %d; it must be in 1..64 (%d known)",
                        nfields, DLT__SERIES_NFIELDS);
    dlt_gpu_monitor *m = (dlt_gpu_monitor *)mon; /* the mutex is not part of the value */
    pthread_mutex_lock(&m->mu);
    int64_t held = m->series.pts ? dlt__series_points(&m->series) : 0;
    int64_t n = first < held ? held - first : 0;
    if (n > max_points) n = max_points;
    for (int64_t i = 0; i < n; i++) {
        double p[DLT__SERIES_NFIELDS];
        dlt__series_point(&m->series, first + i, p);
        for (int32_t f = 0; f < nfields; f++)
            out[i * nfields + f] = f < DLT__SERIES_NFIELDS ? p[f] : NAN;
    }
    pthread_mutex_unlock(&m->mu);
    *points = n;
    return DLT_OK;
}
