/*
 * no_cuda.c - stands in for cuda/ in builds without CUDA: there is no CUDA backend, so no
 * device is ever visible (lib/ reaches CUDA through dlt__cuda_backend() alone).
 */
#include "internal.h"

const dlt_backend *dlt__cuda_backend(void) { return NULL; }
