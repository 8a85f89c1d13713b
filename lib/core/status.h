/*
 * status.h - errors inside the library (lib/core/status.c): every failing path returns a
 * dlt_status and sets the thread-local message naming the public function and the values;
 * nothing prints, aborts or exits. Part of lib/core/internal.h.
 */
#ifndef DLT_CORE_STATUS_H
#define DLT_CORE_STATUS_H

#include <stdarg.h>
#include <stdint.h>

#include "dltrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DLT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DLT_PRINTF(a, b)
#endif

/* ---------------------------------------------------------------------------------------
 * Errors. Every failing path sets the thread-local message with the public function name:
 *   return dlt__err(DLT_ERR_SHAPE, "dlt_conv2d", "input must be 4-D, got %d-D", nd);
 * ------------------------------------------------------------------------------------- */
dlt_status dlt__err(dlt_status code, const char *func, const char *fmt, ...) DLT_PRINTF(3, 4);
dlt_status dlt__verr(dlt_status code, const char *func, const char *fmt, va_list ap);
/* Prefixes the current message with "func: " context from an outer call; keeps the code. */
dlt_status dlt__err_wrap(dlt_status code, const char *func);
void dlt__log(int32_t level, const char *fmt, ...) DLT_PRINTF(2, 3);

#define DLT_CHECK(expr)                                                                       \
    do {                                                                                      \
        dlt_status dlt__s = (expr);                                                           \
        if (dlt__s != DLT_OK) return dlt__s;                                                  \
    } while (0)
#define DLT_CHECK_GOTO(st, expr, label)                                                       \
    do {                                                                                      \
        (st) = (expr);                                                                        \
        if ((st) != DLT_OK) goto label;                                                       \
    } while (0)
#define DLT_NULL_CHECK(p, func)                                                               \
    do {                                                                                      \
        if ((p) == NULL) return dlt__err(DLT_ERR_NULL_POINTER, func, "argument '%s' is NULL", #p); \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
