/*
 * hd.h - the one definition of DLT_HD, the storage class of the kernel contract's functions
 * (lib/kernel/): plain `static inline` in C, callable from host and device code when the
 * header is compiled as CUDA C++. Every header of lib/kernel/ includes this one and nothing
 * of lib/ beyond it, so the CPU backend (lib/cpu) and the CUDA kernels (cuda/) compile the
 * same source for the math they must agree on bit for bit.
 */
#ifndef DLT_KERNEL_HD_H
#define DLT_KERNEL_HD_H

#if defined(__CUDACC__)
#define DLT_HD static __host__ __device__ __forceinline__
#else
#define DLT_HD static inline
#endif

#endif
