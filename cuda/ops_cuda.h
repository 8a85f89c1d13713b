/*
 * ops_cuda.h - CUDA launchers of the layer ops, one file each under cuda/, and the
 * backend-table entries they fill. Each section belongs to one file: when the file
 * implements its launchers, its ENTRIES macro lists them (designated initialisers for
 * struct dlt_backend). Launchers are extern "C" and named dlt__cuda_<entry>.
 */
#ifndef DLT_OPS_CUDA_H
#define DLT_OPS_CUDA_H

#include "cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- conv2d.cu (cuDNN graph API) ---- */
#define DLT_CUDA_CONV2D_ENTRIES

/* ---- batchnorm.cu ---- */
#define DLT_CUDA_BATCHNORM_ENTRIES

/* ---- pool.cu ---- */
#define DLT_CUDA_POOL_ENTRIES

/* ---- linear.cu (cuBLASLt) ---- */
#define DLT_CUDA_LINEAR_ENTRIES

/* ---- cross_entropy.cu ---- */
#define DLT_CUDA_CROSS_ENTROPY_ENTRIES

/* ---- sgd.cu ---- */
#define DLT_CUDA_SGD_ENTRIES

/* ---- amp.cu ---- */
#define DLT_CUDA_AMP_ENTRIES

/* ---- data.cu ---- */
#define DLT_CUDA_DATA_ENTRIES

#ifdef __cplusplus
}
#endif

#define DLT_CUDA_OPS_ENTRIES                                                                  \
    DLT_CUDA_CONV2D_ENTRIES DLT_CUDA_BATCHNORM_ENTRIES DLT_CUDA_POOL_ENTRIES                  \
    DLT_CUDA_LINEAR_ENTRIES DLT_CUDA_CROSS_ENTROPY_ENTRIES DLT_CUDA_SGD_ENTRIES              \
    DLT_CUDA_AMP_ENTRIES DLT_CUDA_DATA_ENTRIES

#endif
