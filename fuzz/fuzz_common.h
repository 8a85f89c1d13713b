/*
 * fuzz_common.h - helpers shared by the fuzz harnesses (fuzz/fuzz_*.c) and by
 * tests/test_fuzz_corpus.c, which includes the harnesses to replay the corpus.
 *
 * A harness is three functions, dltfz_<target>_init / _run / _fini: _run takes one input
 * and returns 0, or 1 with a description in err when the library broke a rule the harness
 * checks (a status outside the documented set, a refusal without a message, a refused load
 * that changed something, a load that produced other data than the file holds). Crashes,
 * leaks and sanitizer reports are found by the sanitizers themselves. Under libFuzzer
 * (fuzz.sh builds without DLTFZ_NO_LIBFUZZER) LLVMFuzzerTestOneInput calls _run and
 * abort()s on 1, so the fuzzer records the input; the corpus test reports it as a failure.
 *
 * Everything here is static (the harnesses are included together into one test program)
 * and uses the public API only (the test links the shared library, whose internals are
 * hidden). Inputs become files under a per-process directory made by mkdtemp in $TMPDIR,
 * else /dev/shm (memory: fast), else /tmp.
 */
#ifndef DLTFZ_COMMON_H
#define DLTFZ_COMMON_H

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dltrain.h"

#define DLTFZ_UNUSED __attribute__((unused))

/* Formats a failure into err and returns 1 (the value _run returns for a broken rule). */
static DLTFZ_UNUSED __attribute__((format(printf, 3, 4))) int dltfz_fail(char *err, size_t n,
                                                                         const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return 1;
}

/* A fresh private directory for this process's input files. */
static DLTFZ_UNUSED int dltfz_make_dir(char *out, size_t n, const char *tag) {
    const char *bases[3] = {getenv("TMPDIR"), "/dev/shm", "/tmp"};
    for (int i = 0; i < 3; i++) {
        struct stat sb;
        if (!bases[i] || !bases[i][0] || stat(bases[i], &sb) != 0 || !S_ISDIR(sb.st_mode) ||
            access(bases[i], W_OK) != 0)
            continue;
        snprintf(out, n, "%s/dltfz-%s-XXXXXX", bases[i], tag);
        if (mkdtemp(out)) return 0;
    }
    out[0] = '\0';
    return -1;
}

/* Writes n bytes to path (created or truncated). */
static DLTFZ_UNUSED int dltfz_write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = n == 0 || fwrite(p, 1, n, f) == n;
    if (fclose(f) != 0) ok = 0;
    return ok ? 0 : -1;
}

/* Removes path, whether a file, a FIFO or an empty directory; a missing path is fine. */
static DLTFZ_UNUSED int dltfz_remove(const char *path) {
    if (unlink(path) == 0 || errno == ENOENT) return 0;
    if (errno == EISDIR || errno == EPERM) return rmdir(path) == 0 ? 0 : -1;
    return -1;
}

/* Removes every entry of dir (one level: the harnesses make no deeper trees), then dir. */
static DLTFZ_UNUSED void dltfz_remove_tree(const char *dir) {
    if (!dir || !dir[0]) return;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        (void)dltfz_remove(p);
    }
    if (d) closedir(d);
    (void)rmdir(dir);
}

/* A refusal must come with a message that starts with the public function's name. */
static DLTFZ_UNUSED int dltfz_check_message(dlt_status st, const char *func, char *err, size_t n) {
    if (st == DLT_OK) return 0;
    const char *msg = dlt_last_error();
    size_t fl = strlen(func);
    if (!msg[0]) return dltfz_fail(err, n, "%s returned %d (%s) without a message", func, st,
                                   dlt_status_string(st));
    if (strncmp(msg, func, fl) != 0 || msg[fl] != ':')
        return dltfz_fail(err, n, "%s returned %d with a message not naming it: %.300s", func, st,
                          msg);
    return 0;
}

/* 1 when st is one of the n statuses listed after it. */
static DLTFZ_UNUSED int dltfz_status_in(dlt_status st, int n, ...) {
    va_list ap;
    va_start(ap, n);
    int found = 0;
    for (int i = 0; i < n; i++)
        if (st == va_arg(ap, dlt_status)) found = 1;
    va_end(ap);
    return found;
}

/* FNV-1a, 64-bit: what "unchanged" compares. */
static DLTFZ_UNUSED uint64_t dltfz_hash(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define DLTFZ_HASH_INIT 0xcbf29ce484222325ull

/* Hash of a tensor's dtype, shape, format and bytes (memory order); 0 on a read failure. */
static DLTFZ_UNUSED uint64_t dltfz_hash_tensor(uint64_t h, const dlt_tensor *t) {
    if (!t) return dltfz_hash(h, "null", 4);
    int32_t meta[2] = {dlt_tensor_dtype(t), dlt_tensor_format(t)};
    int64_t shape[DLT_MAX_DIMS];
    int32_t nd = dlt_tensor_shape(t, shape, DLT_MAX_DIMS);
    h = dltfz_hash(h, meta, sizeof meta);
    h = dltfz_hash(h, shape, (size_t)(nd > 0 ? nd : 0) * sizeof shape[0]);
    size_t nb = dlt_tensor_nbytes(t);
    unsigned char *buf = malloc(nb ? nb : 1);
    if (!buf || dlt_tensor_copy_to_host(t, buf, nb) != DLT_OK) {
        free(buf);
        return 0;
    }
    h = dltfz_hash(h, buf, nb);
    free(buf);
    return h;
}

/* libFuzzer's entry points for a target made of NAME_init / NAME_run / NAME_fini (each
 * returning nonzero with a message in err on a finding): a finding aborts, which is how
 * libFuzzer records a crash input. Left out with DLTFZ_NO_LIBFUZZER (the corpus replay). */
#ifndef DLTFZ_NO_LIBFUZZER
#define DLTFZ_LIBFUZZER_MAIN(NAME)                                                            \
    int LLVMFuzzerInitialize(int *argc, char ***argv);                                        \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);                             \
    static void dltfz_atexit(void) { dltfz_##NAME##_fini(); }                                 \
    int LLVMFuzzerInitialize(int *argc, char ***argv) {                                       \
        (void)argc;                                                                           \
        (void)argv;                                                                           \
        char err[512];                                                                        \
        if (dltfz_##NAME##_init(err, sizeof err) != 0) {                                      \
            fprintf(stderr, "fuzz_" #NAME ": %s\n", err);                                     \
            abort();                                                                          \
        }                                                                                     \
        atexit(dltfz_atexit);                                                                 \
        return 0;                                                                             \
    }                                                                                         \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {                            \
        char err[1024];                                                                       \
        if (dltfz_##NAME##_run(data, size, err, sizeof err) != 0) {                           \
            fprintf(stderr, "fuzz_" #NAME ": %s\n", err);                                     \
            abort();                                                                          \
        }                                                                                     \
        return 0;                                                                             \
    }
#else
#define DLTFZ_LIBFUZZER_MAIN(NAME)
#endif

#endif
