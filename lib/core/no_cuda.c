/*
 * no_cuda.c - stands in for cuda/ in builds without CUDA: there is no CUDA backend and no
 * device is ever visible.
 */
#include "internal.h"

const dlt_backend *dlt__cuda_backend(void) { return NULL; }
int32_t dlt__cuda_device_count(void) { return 0; }
