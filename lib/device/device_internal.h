/*
 * device_internal.h - helpers shared by the device reports of lib/device (plain C: key
 * tables, the architecture table, argument checks, the NVML monitor). The CUDA side
 * (runtime queries, cuBLAS and copy benchmarks, cuda/device.c) is reached through the
 * backend table's device_* and bench_* entries (lib/core/internal.h), like every other
 * CUDA call from lib/.
 */
#ifndef DLT_DEVICE_INTERNAL_H
#define DLT_DEVICE_INTERNAL_H

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* String getters of info and monitor: copies s into buf (NUL-terminated, truncated when n
 * is too small; nothing when buf is NULL) and writes strlen(s) to *len when len is set. */
dlt_status dlt__copy_string_out(const char *s, char *buf, size_t n, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
