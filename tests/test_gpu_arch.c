/*
 * test_gpu_arch.c - the CUDA backend's device check (lib/core/gpu_arch.c), compiled into this
 * program on its own and run without a GPU: for the default fat binary of a CUDA 13 toolkit
 * and for narrower builds, which code the runtime would load on each compute capability
 * (the newest compatible cubin, else PTX through the driver's JIT), and the message when
 * nothing fits (the capability, the build's code, the rebuild command; Volta's CUDA 12 hint).
 */
#include "../lib/core/gpu_arch.h"
#include "harness.h"

#define FAT "75,80,86,89,90,100,120" /* meson's default with CUDA 13 */

static char msg[512];

static int check(int major, int minor, const char *sass, const char *ptx) {
    memset(msg, 0, sizeof msg);
    return dlt__gpu_arch_check(major, minor, sass, ptx, msg, sizeof msg);
}

/* every capability of a GPU line in the list runs its own (or its major's older) cubin */
static void test_fat_binary_natives(void) {
    static const struct { int maj, min; const char *code; } rows[] = {
        {7, 5, "sm_75"}, {8, 0, "sm_80"}, {8, 6, "sm_86"}, {8, 7, "sm_86"},
        {8, 9, "sm_89"}, {9, 0, "sm_90"}, {10, 0, "sm_100"}, {10, 3, "sm_100"},
        {12, 0, "sm_120"}, {12, 1, "sm_120"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int r = check(rows[i].maj, rows[i].min, FAT, "120");
        CHECK(r == DLT_GPU_ARCH_SASS, "%d.%d -> %d (%s)", rows[i].maj, rows[i].min, r, msg);
        char want[64];
        snprintf(want, sizeof want, "runs the %s code", rows[i].code);
        CHECK(strstr(msg, want) != NULL, "%d.%d: '%s' lacks '%s'", rows[i].maj, rows[i].min, msg,
              want);
    }
}

/* newer than the newest cubin: the PTX; a major between (Thor, 11.0): nothing */
static void test_fat_binary_ptx_and_gaps(void) {
    CHECK(check(13, 0, FAT, "120") == DLT_GPU_ARCH_PTX, "%s", msg);
    CHECK(strstr(msg, "PTX compute_120") && strstr(msg, "-Dgpu_arch=130"), "%s", msg);
    CHECK(check(11, 0, FAT, "120") == DLT_GPU_ARCH_NONE, "%s", msg);
    CHECK(strstr(msg, "compute capability 11.0 cannot run"), "%s", msg);
    CHECK(strstr(msg, "sm_75, sm_80, sm_86, sm_89, sm_90, sm_100, sm_120 and PTX compute_120"),
          "%s", msg);
    CHECK(strstr(msg, "-Dgpu_arch=110"), "%s", msg);
    CHECK(!strstr(msg, "CUDA 12"), "no Volta hint for 11.0: %s", msg);
}

/* Volta with a CUDA 13 build: refused, with the CUDA 12 route; older GPUs: refused */
static void test_volta_and_older(void) {
    CHECK(check(7, 0, FAT, "120") == DLT_GPU_ARCH_NONE, "%s", msg);
    CHECK(strstr(msg, "compute capability 7.0") && strstr(msg, "-Dgpu_arch=70") &&
              strstr(msg, "CUDA 12 toolkit"),
          "%s", msg);
    CHECK(check(6, 1, FAT, "120") == DLT_GPU_ARCH_NONE, "%s", msg);
    CHECK(strstr(msg, "6.1 is older than Volta"), "%s", msg);
    /* a CUDA 12 build for Volta: native on 7.x (Turing runs sm_70 cubins), PTX (JIT) from 8.0 */
    CHECK(check(7, 0, "70", "70") == DLT_GPU_ARCH_SASS, "%s", msg);
    CHECK(check(7, 5, "70", "70") == DLT_GPU_ARCH_SASS && strstr(msg, "sm_70"), "%s", msg);
    CHECK(check(8, 0, "70", "70") == DLT_GPU_ARCH_PTX, "%s", msg);
    CHECK(check(9, 0, "70", "70") == DLT_GPU_ARCH_PTX, "%s", msg);
}

/* -Dgpu_arch=90: sm_90 + PTX compute_90 */
static void test_single_arch(void) {
    CHECK(check(9, 0, "90", "90") == DLT_GPU_ARCH_SASS, "%s", msg);
    CHECK(check(10, 0, "90", "90") == DLT_GPU_ARCH_PTX, "%s", msg);
    CHECK(check(8, 9, "90", "90") == DLT_GPU_ARCH_NONE, "%s", msg);
    CHECK(strstr(msg, "whose GPU code is sm_90 and PTX compute_90") && strstr(msg, "-Dgpu_arch=89"),
          "%s", msg);
    /* separators: commas or spaces */
    CHECK(check(8, 6, "75 86", "") == DLT_GPU_ARCH_SASS && strstr(msg, "sm_86"), "%s", msg);
    CHECK(check(8, 6, NULL, NULL) == DLT_GPU_ARCH_NONE && strstr(msg, "no cubin"), "%s", msg);
}

/* arch-specific ('a') code runs only on its exact capability, its PTX is not portable;
 * family ('f') code runs within the major */
static void test_suffixes(void) {
    CHECK(check(9, 0, "90a", "90a") == DLT_GPU_ARCH_SASS && strstr(msg, "sm_90a"), "%s", msg);
    CHECK(check(10, 0, "90a", "90a") == DLT_GPU_ARCH_NONE, "%s", msg);
    CHECK(strstr(msg, "sm_90a and PTX compute_90a"), "%s", msg);
    CHECK(check(10, 3, "100f", "") == DLT_GPU_ARCH_SASS && strstr(msg, "sm_100f"), "%s", msg);
    CHECK(check(12, 0, "100f", "100f") == DLT_GPU_ARCH_NONE, "%s", msg);
}

/* the message buffer: truncated safely, or absent */
static void test_message_buffer(void) {
    char small[12];
    memset(small, 'x', sizeof small);
    CHECK(dlt__gpu_arch_check(11, 0, FAT, "120", small, 8) == DLT_GPU_ARCH_NONE);
    CHECK(strlen(small) == 7 && small[8] == 'x', "'%.12s'", small);
    CHECK(dlt__gpu_arch_check(9, 0, FAT, "120", NULL, 0) == DLT_GPU_ARCH_SASS);
}

int main(void) {
    RUN(test_fat_binary_natives);
    RUN(test_fat_binary_ptx_and_gaps);
    RUN(test_volta_and_older);
    RUN(test_single_arch);
    RUN(test_suffixes);
    RUN(test_message_buffer);
    return th_done();
}
