/*
 * backend.c - the CPU backend's function table. Entries left NULL are reported by the op
 * front doors as "not implemented on the cpu backend".
 */
#include "cpu.h"
#include "ops_cpu.h"

static const dlt_backend CPU_BACKEND = {
    .name = "cpu",
    .ctx_init = dlt__cpu_ctx_init,
    .ctx_fini = NULL,
    .device_name = dlt__cpu_device_name,
    .alloc = dlt__cpu_alloc,
    .free = dlt__cpu_free,
    .memcpy_h2d = dlt__cpu_memcpy,
    .memcpy_d2h = dlt__cpu_memcpy,
    .memcpy_d2d = dlt__cpu_memcpy,
    .memset0 = dlt__cpu_memset0,
    .synchronize = dlt__cpu_synchronize,
    .mem_stat = dlt__cpu_mem_stat,
    .mem_reset_peak = dlt__cpu_mem_reset_peak,
    .empty_cache = dlt__cpu_empty_cache,
    .convert = dlt__cpu_convert,
    .fill = dlt__cpu_fill,
    .rand = dlt__cpu_rand,
    .add = dlt__cpu_add,
    .accumulate = dlt__cpu_accumulate,
    .accumulate_multi = dlt__cpu_accumulate_multi,
    .scale = dlt__cpu_scale,
    .sum = dlt__cpu_sum,
    .broadcast_scalar = dlt__cpu_broadcast_scalar,
    .relu_fwd = dlt__cpu_relu_fwd,
    .relu_bwd = dlt__cpu_relu_bwd,
    .event_create = dlt__cpu_event_create,
    .event_record = dlt__cpu_event_record,
    .event_elapsed = dlt__cpu_event_elapsed,
    .event_destroy = dlt__cpu_event_destroy,
    DLT_CPU_OPS_ENTRIES
};

const dlt_backend *dlt__cpu_backend(void) { return &CPU_BACKEND; }
