/*
 * ops_cpu.h - CPU kernels of the layer ops, one file each, and the backend-table entries
 * they fill. Each section belongs to one file: when the file implements its kernels, its
 * ENTRIES macro lists them (designated initialisers for struct dlt_backend).
 */
#ifndef DLT_OPS_CPU_H
#define DLT_OPS_CPU_H

#include "cpu.h"

/* ---- conv2d.c ---- */
#define DLT_CPU_CONV2D_ENTRIES

/* ---- batchnorm.c ---- */
#define DLT_CPU_BATCHNORM_ENTRIES

/* ---- pool.c (max pool, global average pool) ---- */
#define DLT_CPU_POOL_ENTRIES

/* ---- linear.c ---- */
#define DLT_CPU_LINEAR_ENTRIES

/* ---- cross_entropy.c (and count_correct) ---- */
#define DLT_CPU_CROSS_ENTROPY_ENTRIES

/* ---- sgd.c ---- */
#define DLT_CPU_SGD_ENTRIES

/* ---- amp.c (unscale + inf check, scale update) ---- */
#define DLT_CPU_AMP_ENTRIES

/* ---- data.c (batch gather) ---- */
#define DLT_CPU_DATA_ENTRIES

#define DLT_CPU_OPS_ENTRIES                                                                   \
    DLT_CPU_CONV2D_ENTRIES DLT_CPU_BATCHNORM_ENTRIES DLT_CPU_POOL_ENTRIES                      \
    DLT_CPU_LINEAR_ENTRIES DLT_CPU_CROSS_ENTROPY_ENTRIES DLT_CPU_SGD_ENTRIES                  \
    DLT_CPU_AMP_ENTRIES DLT_CPU_DATA_ENTRIES

#endif
