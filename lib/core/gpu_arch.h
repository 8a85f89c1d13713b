/*
 * gpu_arch.h - can this build's GPU code run on a device? (lib/core/gpu_arch.c)
 *
 * The CUDA backend is compiled for a list of real architectures (cubins, "sm_XY") and PTX
 * for the newest of them (meson's gpu_arch option). At context creation cuda/context.c asks
 * dlt__gpu_arch_check with the device's compute capability and refuses a device that no code
 * of the build can run, with a message naming the capability and the rebuild command.
 * Plain C, self-contained (no other library header), so tests compile it on their own.
 */
#ifndef DLT_GPU_ARCH_H
#define DLT_GPU_ARCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DLT_GPU_ARCH_NONE 0 /* nothing runs: msg says why and how to rebuild */
#define DLT_GPU_ARCH_SASS 1 /* a cubin of the build runs natively */
#define DLT_GPU_ARCH_PTX 2  /* only PTX: the driver compiles it at first use (JIT) */

/*
 * The CUDA rules: a cubin for sm_XY runs on compute capability X.Z with Z >= Y (same major);
 * one for sm_XYa only on X.Y; sm_XYf on the same major from X.Y up. PTX compute_XY is
 * compiled by the driver for any capability >= X.Y (compute_XYa only for X.Y, compute_XYf
 * within the major).
 * sass, ptx: the build's lists, architecture numbers separated by commas or spaces
 *            ("75,80,86,89,90,100,120", "120"); NULL or "" for none.
 * msg:       receives one sentence in every case (n bytes, NUL-terminated): which code
 *            runs, or why nothing does and the meson command that builds for this device.
 */
int dlt__gpu_arch_check(int major, int minor, const char *sass, const char *ptx, char *msg,
                        size_t n);

#ifdef __cplusplus
}
#endif
#endif
