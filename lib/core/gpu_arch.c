/*
 * gpu_arch.c - the decision behind the CUDA backend's device check (see gpu_arch.h).
 * A pure function of the compute capability and the build's architecture lists, so the
 * rules are tested on machines without a GPU (tests/test_gpu_arch.c).
 */
#include "gpu_arch.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The next architecture of a list: its number (75, 120) and suffix ('a', 'f' or 0).
 * Returns the position after it, or NULL at the end. */
static const char *next_arch(const char *s, int *num, char *suffix) {
    while (s && *s && !isdigit((unsigned char)*s)) s++;
    if (!s || !*s) return NULL;
    char *end;
    long v = strtol(s, &end, 10);
    *num = (int)v;
    *suffix = (*end == 'a' || *end == 'f') ? *end : 0;
    return *suffix ? end + 1 : end;
}

/* Does code for architecture num+suffix run on major.minor? ptx: JIT rules. */
static int runs_on(int num, char suffix, int major, int minor, int ptx) {
    const int amaj = num / 10, amin = num % 10, cc = major * 10 + minor;
    if (suffix == 'a') return amaj == major && amin == minor;
    if (suffix == 'f' || !ptx) return amaj == major && minor >= amin;
    return cc >= num;
}

/* "sm_75, sm_80" or "compute_120" from a list, into out. */
static void list_str(const char *list, const char *prefix, char *out, size_t n) {
    size_t o = 0;
    int num;
    char suf;
    out[0] = '\0';
    for (const char *p = list; (p = next_arch(p, &num, &suf)) != NULL;) {
        int w = snprintf(out + o, n - o, "%s%s%d%s", o ? ", " : "", prefix, num,
                         suf == 'a' ? "a" : suf == 'f' ? "f" : "");
        if (w < 0 || (size_t)w >= n - o) break;
        o += (size_t)w;
    }
}

int dlt__gpu_arch_check(int major, int minor, const char *sass, const char *ptx, char *msg,
                        size_t n) {
    int num, best = -1, best_ptx = -1;
    char suf, best_suf = 0, ptx_suf = 0;
    char sass_s[256], ptx_s[128], none[1];
    if (!msg || n == 0) msg = none, n = sizeof none;
    /* the runtime loads the newest cubin that runs, else JIT-compiles the newest PTX */
    for (const char *p = sass; (p = next_arch(p, &num, &suf)) != NULL;)
        if (runs_on(num, suf, major, minor, 0) && num > best) best = num, best_suf = suf;
    for (const char *p = ptx; (p = next_arch(p, &num, &suf)) != NULL;)
        if (runs_on(num, suf, major, minor, 1) && num > best_ptx) best_ptx = num, ptx_suf = suf;
    if (best >= 0) {
        snprintf(msg, n, "compute capability %d.%d runs the sm_%d%s code of this build", major,
                 minor, best, best_suf == 'a' ? "a" : best_suf == 'f' ? "f" : "");
        return DLT_GPU_ARCH_SASS;
    }
    list_str(sass, "sm_", sass_s, sizeof sass_s);
    list_str(ptx, "compute_", ptx_s, sizeof ptx_s);
    if (best_ptx >= 0) {
        snprintf(msg, n,
                 "compute capability %d.%d has no cubin in this build (%s): the driver compiles "
                 "its PTX compute_%d%s at first use, which is slow once; rebuild with "
                 "-Dgpu_arch=%d%d for native code",
                 major, minor, sass_s[0] ? sass_s : "none", best_ptx,
                 ptx_suf == 'a' ? "a" : ptx_suf == 'f' ? "f" : "", major, minor);
        return DLT_GPU_ARCH_PTX;
    }
    if (major < 7) {
        snprintf(msg, n,
                 "compute capability %d.%d is older than Volta (7.0), the oldest GPU libdltrain "
                 "supports",
                 major, minor);
        return DLT_GPU_ARCH_NONE;
    }
    /* Volta: CUDA 13 dropped it, CUDA 12 still builds for it */
    const char *volta = major == 7 && minor < 5
                            ? " CUDA 13 toolkits no longer build for it: configure with a CUDA 12 "
                              "toolkit (-Dtoolkit_root=/usr/local/cuda-12.x, its nvcc on PATH; "
                              "README.md, GPU coverage)."
                            : "";
    snprintf(msg, n,
             "compute capability %d.%d cannot run this build of libdltrain, whose GPU code is "
             "%s%s%s: rebuild for it with `meson configure BUILDDIR -Dgpu_arch=%d%d && ninja -C "
             "BUILDDIR` (or add %d%d to the list).%s",
             major, minor, sass_s[0] ? sass_s : "no cubin", ptx_s[0] ? " and PTX " : "", ptx_s,
             major, minor, major, minor, volta);
    return DLT_GPU_ARCH_NONE;
}
