/*
 * status.c - status strings, the thread-local last-error message, the log callback and
 * version queries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define DLT_ERR_MSG_MAX 1024

static _Thread_local char tl_msg[DLT_ERR_MSG_MAX];
static _Thread_local dlt_status tl_code;

/* The callback pair is written rarely and read on error paths; a torn read of two words is
 * harmless in practice, but keep them in one struct swapped under a simple flag. */
static dlt_log_fn g_log_fn;
static void *g_log_user;

uint32_t dlt_version(void) { return DLT_VERSION; }
uint32_t dlt_abi_version(void) { return DLT_ABI_VERSION; }
const char *dlt_version_string(void) {
#define DLT_STR2(x) #x
#define DLT_STR(x) DLT_STR2(x)
    return DLT_STR(DLT_VERSION_MAJOR) "." DLT_STR(DLT_VERSION_MINOR) "." DLT_STR(DLT_VERSION_PATCH);
}

const char *dlt_status_string(dlt_status code) {
    switch (code) {
    case DLT_OK: return "ok";
    case DLT_ERR_INVALID_ARGUMENT: return "invalid argument";
    case DLT_ERR_NULL_POINTER: return "null pointer";
    case DLT_ERR_SHAPE: return "shape mismatch";
    case DLT_ERR_DTYPE: return "unsupported dtype";
    case DLT_ERR_CONTEXT_MISMATCH: return "objects from different contexts";
    case DLT_ERR_INVALID_STATE: return "invalid state";
    case DLT_ERR_VERSION: return "ABI version mismatch";
    case DLT_ERR_NOT_SUPPORTED: return "not supported";
    case DLT_ERR_NO_DEVICE: return "no CUDA device";
    case DLT_ERR_OUT_OF_MEMORY: return "out of host memory";
    case DLT_ERR_DEVICE_OUT_OF_MEMORY: return "out of device memory";
    case DLT_ERR_CUDA: return "CUDA error";
    case DLT_ERR_CUBLAS: return "cuBLAS error";
    case DLT_ERR_CUDNN: return "cuDNN error";
    case DLT_ERR_CONTEXT_POISONED: return "context poisoned by an earlier device fault";
    case DLT_ERR_NCCL: return "NCCL error";
    case DLT_ERR_DIST: return "a peer process failed or disagreed";
    case DLT_ERR_DIST_TIMEOUT: return "timed out waiting for peer processes";
    case DLT_ERR_IO: return "I/O error";
    case DLT_ERR_FORMAT: return "malformed data";
    case DLT_ERR_INTERNAL: return "internal error";
    default: return "unknown status";
    }
}

dlt_status dlt__verr(dlt_status code, const char *func, const char *fmt, va_list ap) {
    int n = snprintf(tl_msg, sizeof tl_msg, "%s: ", func ? func : "dltrain");
    if (n < 0) n = 0;
    if ((size_t)n < sizeof tl_msg) vsnprintf(tl_msg + n, sizeof tl_msg - (size_t)n, fmt, ap);
    tl_code = code;
    return code;
}

dlt_status dlt__err(dlt_status code, const char *func, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dlt__verr(code, func, fmt, ap);
    va_end(ap);
    return code;
}

dlt_status dlt__err_wrap(dlt_status code, const char *func) {
    char tmp[DLT_ERR_MSG_MAX + 128];
    size_t fl = strlen(func);
    /* Do not stack the same prefix twice. */
    if (strncmp(tl_msg, func, fl) == 0 && tl_msg[fl] == ':') return code;
    snprintf(tmp, sizeof tmp, "%.100s: %s", func, tl_msg[0] ? tl_msg : dlt_status_string(code));
    memcpy(tl_msg, tmp, sizeof tl_msg - 1);
    tl_msg[sizeof tl_msg - 1] = '\0';
    tl_code = code;
    return code;
}

const char *dlt_last_error(void) { return tl_msg; }
dlt_status dlt_last_error_code(void) { return tl_code; }

size_t dlt_last_error_copy(char *buf, size_t n) {
    size_t len = strlen(tl_msg);
    if (buf && n > 0) {
        size_t k = len < n - 1 ? len : n - 1;
        memcpy(buf, tl_msg, k);
        buf[k] = '\0';
    }
    return len;
}

void dlt_clear_error(void) {
    tl_msg[0] = '\0';
    tl_code = DLT_OK;
}

/* nn: the message of a user callback's own failure (custom module forwards). */
dlt_status dlt_set_error(dlt_status code, const char *message) {
    DLT_NULL_CHECK(message, "dlt_set_error");
    if (code == DLT_OK)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, "dlt_set_error", "code 0 (DLT_OK) is not a failure");
    snprintf(tl_msg, sizeof tl_msg, "%s", message);
    tl_code = code;
    return code;
}

void dlt_set_log_callback(dlt_log_fn fn, void *user) {
    g_log_user = user;
    g_log_fn = fn;
}

void dlt__log(int32_t level, const char *fmt, ...) {
    dlt_log_fn fn = g_log_fn;
    if (!fn) return;
    char buf[DLT_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fn(level, buf, g_log_user);
}

int dlt__mul_overflow(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 1;
    *out = a * b;
    return 0;
}

