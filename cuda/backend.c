/*
 * backend.c - the CUDA backend's function table: what lib/ reaches through
 * dlt__cuda_backend(), its only way into cuda/. Entries of the ops come from the ENTRIES
 * macros of ops_cuda.h (one per op stem); entries left NULL are reported by the front doors
 * as "not implemented on the cuda backend".
 */
#include "cuda_internal.h"
#include "ops_cuda.h"

static const dlt_backend CUDA_BACKEND = {
    .name = "cuda",
    .ctx_init = dlt__cuda_ctx_init,
    .ctx_fini = dlt__cuda_ctx_fini,
    .device_name = dlt__cuda_device_name,
    .device_count = dlt__cuda_device_count,
    .device_query = dlt__cuda_device_query,
    .device_pci_bus_id = dlt__cuda_device_pci_bus_id,
    .bench_copy = dlt__cuda_bench_copy,
    .bench_gemm = dlt__cuda_bench_gemm,
    .alloc = dlt__cuda_alloc,
    .free = dlt__cuda_free,
    .memcpy_h2d = dlt__cuda_memcpy_h2d,
    .memcpy_d2h = dlt__cuda_memcpy_d2h,
    .memcpy_d2d = dlt__cuda_memcpy_d2d,
    .memset0 = dlt__cuda_memset0,
    .synchronize = dlt__cuda_synchronize,
    .wait_plans = dlt__cuda_plans_wait,
    .mem_stat = dlt__cuda_mem_stat,
    .mem_reset_peak = dlt__cuda_mem_reset_peak,
    .empty_cache = dlt__cuda_empty_cache,
    .convert = dlt__cuda_convert,
    .fill = dlt__cuda_fill,
    .rand = dlt__cuda_rand,
    .add = dlt__cuda_add,
    .accumulate = dlt__cuda_accumulate,
    .accumulate_multi = dlt__cuda_accumulate_multi,
    .scale = dlt__cuda_scale,
    .sum = dlt__cuda_sum,
    .broadcast_scalar = dlt__cuda_broadcast_scalar,
    .relu_fwd = dlt__cuda_relu_fwd,
    .relu_bwd = dlt__cuda_relu_bwd,
    .range_push = dlt__cuda_range_push,
    .range_pop = dlt__cuda_range_pop,
    .event_create = dlt__cuda_event_create,
    .event_record = dlt__cuda_event_record,
    .event_elapsed = dlt__cuda_event_elapsed,
    .event_destroy = dlt__cuda_event_destroy,
    .capture_trace = dlt__cuda_capture_trace,
    .capture_begin = dlt__cuda_capture_begin,
    .capture_end = dlt__cuda_capture_end,
    .graph_launch = dlt__cuda_graph_launch,
    .graph_free = dlt__cuda_graph_free,
    .side_fork = dlt__cuda_side_fork,
    .side_unfork = dlt__cuda_side_unfork,
    .side_join = dlt__cuda_side_join,
    DLT_CUDA_OPS_ENTRIES
};

const dlt_backend *dlt__cuda_backend(void) { return &CUDA_BACKEND; }
