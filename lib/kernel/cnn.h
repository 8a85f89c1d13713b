/*
 * cnn.h - the argument structs of the convolution and pooling entries of the backend table
 * (lib/core/internal.h), filled by the front doors (lib/ops/conv2d.c, pool.c) and read by
 * lib/cpu and cuda/. Passed by pointer; plain C, also compiled as CUDA C++.
 */
#ifndef DLT_KERNEL_CNN_H
#define DLT_KERNEL_CNN_H

#include <stdint.h>

typedef struct dlt_conv_params {
    int64_t stride[2], pad[2], dil[2], groups;
} dlt_conv_params;

typedef struct dlt_pool_params {
    int64_t kernel[2], stride[2], pad[2];
} dlt_pool_params;

#endif
