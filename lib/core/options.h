/*
 * options.h - the one rule for caller-sized option structs (dlt_*_options, dlt_gpt_config).
 *
 * Every such struct starts with `uint32_t size`, and the caller's sizeof travels with it:
 * dlt_X_options_default(o) is a static inline in the public header that calls the exported
 * dlt_X_options_init(o, sizeof *o), so the library never writes past a struct compiled
 * against an older header, and never reads past one either. Fields are only ever appended.
 *
 * - init (dlt__options_fill): writes the defaults into the first min(size, ours) bytes;
 *   bytes the library does not know (a newer header's fields) are zeroed, and o->size keeps
 *   the caller's size. A size below the first release's struct writes nothing.
 * - create (dlt__options_read): NULL means all defaults; a size below the first release's
 *   is DLT_ERR_INVALID_ARGUMENT; fields beyond our struct must be zero (the caller set
 *   something this library cannot honour: DLT_ERR_NOT_SUPPORTED, as Linux's
 *   copy_struct_from_user refuses), the rest is copied over the defaults.
 */
#ifndef DLT_CORE_OPTIONS_H
#define DLT_CORE_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* The end of a field: a struct's first-release size is the end of its last v1 field (not
 * sizeof, which grows when fields are appended). */
#define DLT__FIELD_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* Fills o (size bytes as the caller's struct) from defaults (ours bytes, its size field
 * ignored). Nothing happens for o == NULL or size < min_size. */
void dlt__options_fill(void *o, uint32_t size, const void *defaults, size_t ours, size_t min_size);

/* dst holds the defaults (ours bytes); src is the caller's struct or NULL. what names the
 * struct type in messages ("dlt_sgd_options"). dst->size ends as ours. */
dlt_status dlt__options_read(void *dst, size_t ours, const void *src, size_t min_size, const char *what,
                             const char *func);

/* Checks a struct the library writes back into (dlt_adamw_get_options): its size must be at
 * least min_size; returns the number of bytes the library may write (min(size, ours)). */
dlt_status dlt__options_out_size(const void *o, size_t ours, size_t min_size, const char *what, const char *func,
                                 size_t *n);

#endif
