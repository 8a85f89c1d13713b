/*
 * fake_nvml.c - a stand-in libnvidia-ml for test_device: the functions the GPU monitor
 * resolves, returning a scripted sequence so that the monitor's summaries can be checked
 * against exact values on machines without a driver.
 *
 * The i-th call (1-based, counted per function since nvmlInit_v2) returns:
 *   utilisation  gpu = (37 i) mod 101 %, memory = (11 i) mod 101 %
 *   temperature  40 + (i mod 7) C           (sensor 0 only, else an error)
 *   SM clock     1000 + 10 i MHz            (clock type 1 = SM; other types give 9999)
 *   power        200000 + 1500 i mW         (FAKE_NVML_NO_POWER: NOT_SUPPORTED)
 *   memory used  (1024 + i) MiB
 *   reasons      GPU idle (0x1) always, plus FAKE_NVML_REASONS=thermal: HW thermal
 *                slowdown (0x40) on call 3; =power: HW power brake (0x80) on call 2
 * Only device index 0 exists. FAKE_NVML_INIT_FAIL makes nvmlInit_v2 fail with
 * NVML_ERROR_DRIVER_NOT_LOADED (9).
 */
#include <stdlib.h>
#include <string.h>

#define FAKE_API __attribute__((visibility("default")))

typedef int nvml_return;
typedef struct { unsigned int gpu, memory; } fake_util;
typedef struct { unsigned long long total, free, used; } fake_mem;

static int fake_device; /* its address is the one device handle */
static unsigned n_util, n_temp, n_clock, n_power, n_mem, n_reasons;

static int valid(void *dev) { return dev == (void *)&fake_device; }

FAKE_API nvml_return nvmlInit_v2(void);
FAKE_API nvml_return nvmlShutdown(void);
FAKE_API const char *nvmlErrorString(nvml_return r);
FAKE_API nvml_return nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **dev);
FAKE_API nvml_return nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev);
FAKE_API nvml_return nvmlDeviceGetUtilizationRates(void *dev, fake_util *u);
FAKE_API nvml_return nvmlDeviceGetTemperature(void *dev, int sensor, unsigned int *t);
FAKE_API nvml_return nvmlDeviceGetClockInfo(void *dev, int type, unsigned int *mhz);
FAKE_API nvml_return nvmlDeviceGetPowerUsage(void *dev, unsigned int *mw);
FAKE_API nvml_return nvmlDeviceGetMemoryInfo(void *dev, fake_mem *m);
FAKE_API nvml_return nvmlDeviceGetCurrentClocksEventReasons(void *dev, unsigned long long *r);

nvml_return nvmlInit_v2(void) {
    if (getenv("FAKE_NVML_INIT_FAIL")) return 9;
    n_util = n_temp = n_clock = n_power = n_mem = n_reasons = 0;
    return 0;
}

nvml_return nvmlShutdown(void) { return 0; }

const char *nvmlErrorString(nvml_return r) {
    switch (r) {
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

nvml_return nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **dev) {
    if (index != 0 || !dev) return 2;
    *dev = &fake_device;
    return 0;
}

nvml_return nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev) {
    if (!bus || !dev) return 2;
    *dev = &fake_device;
    return 0;
}

nvml_return nvmlDeviceGetUtilizationRates(void *dev, fake_util *u) {
    if (!valid(dev) || !u) return 2;
    unsigned i = ++n_util;
    u->gpu = (37 * i) % 101;
    u->memory = (11 * i) % 101;
    return 0;
}

nvml_return nvmlDeviceGetTemperature(void *dev, int sensor, unsigned int *t) {
    if (!valid(dev) || !t || sensor != 0) return 2;
    unsigned i = ++n_temp;
    *t = 40 + i % 7;
    return 0;
}

nvml_return nvmlDeviceGetClockInfo(void *dev, int type, unsigned int *mhz) {
    if (!valid(dev) || !mhz) return 2;
    unsigned i = ++n_clock;
    *mhz = type == 1 ? 1000 + 10 * i : 9999;
    return 0;
}

nvml_return nvmlDeviceGetPowerUsage(void *dev, unsigned int *mw) {
    if (!valid(dev) || !mw) return 2;
    if (getenv("FAKE_NVML_NO_POWER")) return 3;
    unsigned i = ++n_power;
    *mw = 200000 + 1500 * i;
    return 0;
}

nvml_return nvmlDeviceGetMemoryInfo(void *dev, fake_mem *m) {
    if (!valid(dev) || !m) return 2;
    unsigned i = ++n_mem;
    m->total = 80ull << 30;
    m->used = (1024ull + i) << 20;
    m->free = m->total - m->used;
    return 0;
}

nvml_return nvmlDeviceGetCurrentClocksEventReasons(void *dev, unsigned long long *r) {
    if (!valid(dev) || !r) return 2;
    unsigned i = ++n_reasons;
    const char *mode = getenv("FAKE_NVML_REASONS");
    *r = 0x1ull; /* GPU idle: neither thermal nor power */
    if (mode && strcmp(mode, "thermal") == 0 && i == 3) *r |= 0x40ull;
    if (mode && strcmp(mode, "power") == 0 && i == 2) *r |= 0x80ull;
    return 0;
}
