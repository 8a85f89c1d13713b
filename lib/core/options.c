/* options.c - caller-sized option structs (the rule is in options.h). */
#include "options.h"

#include <string.h>

void dlt__options_fill(void *o, uint32_t size, const void *defaults, size_t ours, size_t min_size) {
    if (!o || size < min_size) return;
    size_t n = size < ours ? size : ours;
    memcpy(o, defaults, n);
    if (size > n) memset((char *)o + n, 0, size - n);
    memcpy(o, &size, sizeof size);
}

static uint32_t size_of(const void *o) {
    uint32_t size;
    memcpy(&size, o, sizeof size);
    return size;
}

dlt_status dlt__options_read(void *dst, size_t ours, const void *src, size_t min_size, const char *what,
                             const char *func) {
    if (!src) return DLT_OK;
    const uint32_t size = size_of(src);
    if (size < min_size)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "%s.size is %u, below the smallest %s (%zu bytes): fill the struct with %s_default "
                        "(or %s_init(o, sizeof *o) through an FFI) first",
                        what, (unsigned)size, what, min_size, what, what);
    const char *s = src;
    for (size_t i = ours; i < size; i++)
        if (s[i])
            return dlt__err(DLT_ERR_NOT_SUPPORTED, func,
                            "%s sets byte %zu of %u, a field this libdltrain (%zu-byte struct) does not know: "
                            "the program was built against a newer header",
                            what, i, (unsigned)size, ours);
    const uint32_t own = (uint32_t)ours;
    memcpy(dst, src, size < ours ? size : ours);
    memcpy(dst, &own, sizeof own);
    return DLT_OK;
}

dlt_status dlt__options_out_size(const void *o, size_t ours, size_t min_size, const char *what, const char *func,
                                 size_t *n) {
    const uint32_t size = size_of(o);
    if (size < min_size)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "%s.size is %u, below the smallest %s (%zu bytes): fill the struct with %s_default first",
                        what, (unsigned)size, what, min_size, what);
    *n = size < ours ? size : ours;
    return DLT_OK;
}
