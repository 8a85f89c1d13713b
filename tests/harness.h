/*
 * harness.h - a tiny TAP test harness. Each test case is a function; RUN() executes it and
 * prints one TAP line ("ok N - name", "not ok N - name", "ok N - name # SKIP reason").
 * scripts/test.sh counts these lines across all test programs.
 *
 *   static void test_fill(void) { CHECK_OK(dlt_tensor_fill(t, 1.0)); CHECK(v == 1.0, "v=%g", v); }
 *   int main(void) { RUN(test_fill); return th_done(); }
 *
 * Inside a test, SKIP("reason") ends the case as skipped; CHECK records a failure with its
 * message (and goes on, so one run shows every broken assertion); REQUIRE stops the case.
 */
#ifndef DLT_TEST_HARNESS_H
#define DLT_TEST_HARNESS_H

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "dltrain.h"

#define TH_UNUSED __attribute__((unused))

static TH_UNUSED int th_count, th_failed_cases, th_case_failed, th_case_skipped;
static char th_skip_reason[256];
static jmp_buf th_jmp;

static TH_UNUSED void th_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    printf("# FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    th_case_failed = 1;
}

/* CHECK(cond) or CHECK(cond, "fmt", args...): the trailing "" keeps ISO C's variadic
 * macros happy when no message is given (th_fail ignores the extra argument). */
#define CHECK(...) TH_CHECK_(__VA_ARGS__, "")
#define TH_CHECK_(cond, ...)                                                                  \
    do {                                                                                      \
        if (!(cond)) th_fail(__FILE__, __LINE__, "CHECK(" #cond ") " __VA_ARGS__);            \
    } while (0)
#define REQUIRE(...) TH_REQUIRE_(__VA_ARGS__, "")
#define TH_REQUIRE_(cond, ...)                                                                \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            th_fail(__FILE__, __LINE__, "REQUIRE(" #cond ") " __VA_ARGS__);                   \
            longjmp(th_jmp, 1);                                                               \
        }                                                                                     \
    } while (0)
/* A call that must succeed; on failure prints the status and the library's message. */
#define CHECK_OK(call)                                                                        \
    do {                                                                                      \
        dlt_status th_s = (call);                                                             \
        if (th_s != DLT_OK) {                                                                 \
            th_fail(__FILE__, __LINE__, "%s -> %d (%s): %s", #call, th_s,                     \
                    dlt_status_string(th_s), dlt_last_error());                               \
            longjmp(th_jmp, 1);                                                               \
        }                                                                                     \
    } while (0)
/* A call that must fail with `code` and leave a non-empty message. */
#define CHECK_STATUS(call, code)                                                              \
    do {                                                                                      \
        dlt_clear_error();                                                                    \
        dlt_status th_s = (call);                                                             \
        if (th_s != (code))                                                                   \
            th_fail(__FILE__, __LINE__, "%s -> %d (%s), expected %d (%s); message: %s", #call, \
                    th_s, dlt_status_string(th_s), (int)(code), dlt_status_string(code),      \
                    dlt_last_error());                                                        \
        else if (dlt_last_error()[0] == '\0')                                                 \
            th_fail(__FILE__, __LINE__, "%s failed without a message", #call);                \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                                 \
    do {                                                                                      \
        double th_a = (a), th_b = (b);                                                        \
        if (!(fabs(th_a - th_b) <= (tol)))                                                    \
            th_fail(__FILE__, __LINE__, "%s = %.9g vs %s = %.9g (tol %g)", #a, th_a, #b, th_b, \
                    (double)(tol));                                                           \
    } while (0)
#define SKIP(...)                                                                             \
    do {                                                                                      \
        snprintf(th_skip_reason, sizeof th_skip_reason, __VA_ARGS__);                         \
        th_case_skipped = 1;                                                                  \
        longjmp(th_jmp, 1);                                                                   \
    } while (0)

static TH_UNUSED void th_run(void (*fn)(void), const char *name) {
    th_case_failed = 0;
    th_case_skipped = 0;
    th_skip_reason[0] = '\0';
    if (setjmp(th_jmp) == 0) fn();
    th_count++;
    if (th_case_failed) {
        th_failed_cases++;
        printf("not ok %d - %s\n", th_count, name);
    } else if (th_case_skipped) {
        printf("ok %d - %s # SKIP %s\n", th_count, name, th_skip_reason);
    } else {
        printf("ok %d - %s\n", th_count, name);
    }
    fflush(stdout);
}
#define RUN(fn) th_run(fn, #fn)

static TH_UNUSED int th_done(void) {
    printf("1..%d\n", th_count);
    return th_failed_cases ? 1 : 0;
}

/* ---- helpers shared by test programs ---- */

/* A CUDA context on device 0, or NULL (the caller skips) with the reason in th_skip_reason. */
static TH_UNUSED dlt_ctx *th_cuda_ctx(void) {
    int32_t n = 0;
    if (!dlt_built_with_cuda()) {
        snprintf(th_skip_reason, sizeof th_skip_reason, "built without CUDA");
        return NULL;
    }
    if (dlt_cuda_device_count(&n) != DLT_OK || n == 0) {
        snprintf(th_skip_reason, sizeof th_skip_reason, "no CUDA device");
        return NULL;
    }
    dlt_ctx *ctx = NULL;
    if (dlt_ctx_create(DLT_DEVICE_CUDA, 0, DLT_ABI_VERSION, &ctx) != DLT_OK) {
        snprintf(th_skip_reason, sizeof th_skip_reason, "CUDA context failed: %s", dlt_last_error());
        return NULL;
    }
    return ctx;
}
#define CUDA_CTX_OR_SKIP(var)                                                                 \
    dlt_ctx *var = th_cuda_ctx();                                                             \
    do {                                                                                      \
        if (!var) {                                                                           \
            th_case_skipped = 1; /* th_cuda_ctx wrote the reason */                           \
            longjmp(th_jmp, 1);                                                               \
        }                                                                                     \
    } while (0)

static TH_UNUSED dlt_ctx *th_cpu_ctx(void) {
    dlt_ctx *ctx = NULL;
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx) != DLT_OK) {
        printf("# cannot create a CPU context: %s\n", dlt_last_error());
        exit(1);
    }
    return ctx;
}

/* The device the CUDA comparison programs test: the CUDA context, or with
 * DLT_CUDA_OPS_SELFTEST=1 a second CPU context (so CI runs the programs' own logic against
 * the CPU backend). NULL without a device, the reason in why. */
static TH_UNUSED dlt_ctx *th_dev_ctx(char *why, size_t n) {
    const char *self = getenv("DLT_CUDA_OPS_SELFTEST");
    if (self && self[0] == '1') {
        printf("# DLT_CUDA_OPS_SELFTEST=1: comparing the CPU backend with itself\n");
        return th_cpu_ctx();
    }
    dlt_ctx *ctx = th_cuda_ctx();
    if (!ctx) snprintf(why, n, "%s", th_skip_reason);
    return ctx;
}

/* The compute capability's major version of ctx's device (0 when it cannot be read: the
 * CPU, or no device information) */
static TH_UNUSED int64_t th_cc_major(dlt_ctx *ctx) {
    dlt_device_info *info = NULL;
    int64_t major = 0;
    if (!ctx || dlt_device_info_get(dlt_ctx_device_index(ctx), &info) != DLT_OK) return 0;
    if (dlt_device_info_int(info, DLT_DEVINFO_CC_MAJOR, &major) != DLT_OK) major = 0;
    dlt_device_info_destroy(info);
    return major;
}

/* A whole file's bytes with one spare byte after them, or NULL (*n = 0); the caller frees. */
static TH_UNUSED unsigned char *th_read_file(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *p = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (p = malloc((size_t)len + 1)) != NULL) {
        if (fread(p, 1, (size_t)len, f) == (size_t)len) {
            *n = (size_t)len;
        } else {
            free(p);
            p = NULL;
        }
    }
    fclose(f);
    return p;
}

/* Number of entries of dir whose name starts with prefix. */
static TH_UNUSED int th_count_files(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    if (d) closedir(d);
    return n;
}

/* Tensor from float values (converted to dtype on the device). */
/* An f32 leaf that requires a gradient, of these values, on ctx in format fmt. */
static TH_UNUSED dlt_tensor *th_param_f32(dlt_ctx *ctx, const int64_t *shape, int32_t nd, int32_t fmt,
                                          const float *v) {
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, shape, nd, fmt, &t));
    CHECK_OK(dlt_tensor_copy_from_host(t, v, dlt_tensor_nbytes(t)));
    CHECK_OK(dlt_tensor_set_requires_grad(t, 1));
    return t;
}

static TH_UNUSED dlt_tensor *th_tensor_f32(dlt_ctx *ctx, const float *vals, const int64_t *shape, int32_t ndim) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    dlt_tensor *t = NULL;
    if (dlt_tensor_from_host(ctx, DLT_F32, shape, ndim, DLT_FORMAT_CONTIGUOUS, vals,
                             (size_t)n * sizeof(float), &t) != DLT_OK) {
        printf("# th_tensor_f32: %s\n", dlt_last_error());
        exit(1);
    }
    return t;
}

/* A tensor holding v (logical order, rounded to f32) in dtype and format; NULL (the
 * library's message set) when a conversion fails. */
static TH_UNUSED dlt_tensor *th_tensor_from_f64(dlt_ctx *ctx, const double *v, const int64_t *shape,
                                                int32_t ndim, int32_t dtype, int32_t fmt) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    float *f = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    dlt_tensor *t = th_tensor_f32(ctx, f, shape, ndim), *u = NULL;
    free(f);
    if (dtype != DLT_F32) {
        dlt_status st = dlt_tensor_cast(t, dtype, &u);
        dlt_tensor_release(t);
        if (st != DLT_OK) return NULL;
        t = u;
    }
    if (fmt != DLT_FORMAT_CONTIGUOUS) {
        dlt_status st = dlt_tensor_to_format(t, fmt, &u);
        dlt_tensor_release(t);
        if (st != DLT_OK) return NULL;
        t = u;
    }
    return t;
}

/* Makes p's gradient exactly vals (memory order): zero-grad to none, then a backward seeded
 * on the leaf itself overwrites the gradient buffer. */
static TH_UNUSED void th_set_grad(dlt_tensor *p, const float *vals) {
    int64_t shape[8];
    int32_t nd = dlt_tensor_shape(p, shape, 8);
    dlt_tensor *g = NULL;
    CHECK_OK(dlt_tensor_empty(dlt_tensor_ctx(p), DLT_F32, shape, nd, dlt_tensor_format(p), &g));
    CHECK_OK(dlt_tensor_copy_from_host(g, vals, dlt_tensor_nbytes(p)));
    CHECK_OK(dlt_zero_grad(&p, 1, 1));
    CHECK_OK(dlt_backward(p, g));
    dlt_tensor_release(g);
}

/* DLT_TEST_GROUPS=a,b runs only the named groups of a program (compute-sanitizer then
 * checks them as separate processes); unset or empty: all. */
static TH_UNUSED int th_group_on(const char *name) {
    const char *g = getenv("DLT_TEST_GROUPS");
    if (!g || !*g) return 1;
    size_t n = strlen(name);
    for (const char *p = g; (p = strstr(p, name)) != NULL; p += n)
        if ((p == g || p[-1] == ',') && (p[n] == '\0' || p[n] == ',')) return 1;
    return 0;
}

/* Reads any tensor as f32 values in logical (NCHW) order; the caller frees. */
static TH_UNUSED float *th_read_f32(const dlt_tensor *t) {
    dlt_tensor *a = NULL, *b = NULL;
    const dlt_tensor *src = t;
    if (dlt_tensor_format(t) != DLT_FORMAT_CONTIGUOUS) {
        if (dlt_tensor_to_format(src, DLT_FORMAT_CONTIGUOUS, &a) != DLT_OK) return NULL;
        src = a;
    }
    if (dlt_tensor_dtype(src) != DLT_F32) {
        if (dlt_tensor_cast(src, DLT_F32, &b) != DLT_OK) {
            dlt_tensor_release(a);
            return NULL;
        }
        src = b;
    }
    int64_t n = dlt_tensor_numel(src);
    float *out = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (dlt_tensor_copy_to_host(src, out, (size_t)n * sizeof(float)) != DLT_OK) {
        free(out);
        out = NULL;
    }
    dlt_tensor_release(a);
    dlt_tensor_release(b);
    return out;
}

/* Every state entry's gradient of module m as f32 host arrays in g[0 .. n) (NULL where an
 * entry has none; the caller frees them). Returns n, or -1 when m has more than max
 * entries (nothing read then). */
static TH_UNUSED int32_t th_read_grads(dlt_module *m, float **g, int32_t max) {
    const int32_t n = dlt_module_num_state(m);
    if (n > max) return -1;
    for (int32_t i = 0; i < n; i++) {
        dlt_tensor *t = NULL;
        g[i] = dlt_module_state_entry(m, i, NULL, &t, NULL) == DLT_OK && dlt_tensor_grad(t)
                   ? th_read_f32(dlt_tensor_grad(t))
                   : NULL;
    }
    return n;
}

/* x (any float dtype/format) against reference floats in logical order, bit for bit, the
 * reference rounded by the library's cast when x is f16/bf16 (made on ctx). Returns the
 * mismatches (the first three printed as TAP comments), -1 when it cannot compare. */
static TH_UNUSED int64_t th_compare_bits(dlt_ctx *ctx, const dlt_tensor *x, const float *ref) {
    int64_t shape[8];
    const int32_t nd = dlt_tensor_shape(x, shape, 8);
    const int64_t n = dlt_tensor_numel(x);
    dlt_tensor *r32 = NULL, *rc = NULL;
    if (dlt_tensor_from_host(ctx, DLT_F32, shape, nd, DLT_FORMAT_CONTIGUOUS, ref, (size_t)n * sizeof(float), &r32) !=
        DLT_OK)
        return -1;
    const dlt_tensor *want_t = r32;
    if (dlt_tensor_dtype(x) != DLT_F32) {
        if (dlt_tensor_cast(r32, dlt_tensor_dtype(x), &rc) != DLT_OK) {
            dlt_tensor_release(r32);
            return -1;
        }
        want_t = rc;
    }
    float *want = th_read_f32(want_t), *got = th_read_f32(x);
    int64_t bad = want && got ? 0 : -1;
    for (int64_t i = 0; bad >= 0 && i < n; i++)
        if (memcmp(&want[i], &got[i], sizeof(float)) != 0) {
            if (bad < 3) printf("# element %lld: got %.9g want %.9g\n", (long long)i, (double)got[i], (double)want[i]);
            bad++;
        }
    free(want);
    free(got);
    dlt_tensor_release(r32);
    dlt_tensor_release(rc);
    return bad;
}

/* a and b (one dtype and element count, any contexts) element by element, bit for bit: the
 * number of differing elements (the first printed as a TAP comment), -1 when they cannot be
 * compared. */
static TH_UNUSED int64_t th_diff_bits(const dlt_tensor *a, const dlt_tensor *b) {
    const int64_t n = dlt_tensor_numel(a);
    const size_t nbytes = dlt_tensor_nbytes(a);
    if (dlt_tensor_dtype(b) != dlt_tensor_dtype(a) || dlt_tensor_numel(b) != n) return -1;
    char *x = malloc(nbytes ? nbytes : 1), *y = malloc(nbytes ? nbytes : 1);
    int64_t bad = x && y && dlt_tensor_copy_to_host(a, x, nbytes) == DLT_OK &&
                          dlt_tensor_copy_to_host(b, y, nbytes) == DLT_OK
                      ? 0
                      : -1;
    const size_t es = n > 0 ? nbytes / (size_t)n : 1;
    for (int64_t i = 0; bad >= 0 && i < n; i++)
        if (memcmp(x + i * es, y + i * es, es) != 0 && bad++ == 0)
            printf("# first differing element: %lld of %lld\n", (long long)i, (long long)n);
    free(x);
    free(y);
    return bad;
}

/* Relative norm error ||a - b|| / ||b|| (b the reference); 0 when both are zero. */
static TH_UNUSED double th_rel_err(const float *a, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        if (a[i] != a[i]) return INFINITY;
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

static TH_UNUSED double th_rel_err_f(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        if (a[i] != a[i] || b[i] != b[i]) return INFINITY;
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

/* ---- hostile paths: every file reader against names that exist but cannot be read ----
 *
 * A reader must treat each of these as "present and unreadable": DLT_ERR_IO with a message
 * naming the path, never as absent (a silently skipped file) and never hang. Plant one kind
 * at a path with th_hostile_make, call the reader, undo it with th_hostile_undo; or let
 * th_hostile_check run a reader over all kinds, with a symlink to a good file as a control
 * that must read. The permission kinds need an unprivileged user: as root (CI), the reader
 * runs with the effective uid and gid of "nobody" (65534; seteuid, so root's permission
 * override is dropped and restored after), which needs the test's directories searchable by
 * others (th_hostile_check makes path's directory 0755). */
enum {
    TH_HOSTILE_LOOP,             /* path -> path.loop -> path: ELOOP */
    TH_HOSTILE_DANGLING,         /* a symlink to a file that does not exist: ENOENT */
    TH_HOSTILE_NO_PERMISSION,    /* a regular file of mode 000: EACCES */
    TH_HOSTILE_UNSEARCHABLE_DIR, /* path's directory made 0600 (listable, not searchable) */
    TH_HOSTILE_DIRECTORY,        /* a directory */
    TH_HOSTILE_FIFO,             /* a FIFO: opening it must not wait for a writer */
    TH_HOSTILE_COUNT
};

static TH_UNUSED const char *th_hostile_name(int kind) {
    static const char *names[TH_HOSTILE_COUNT] = {"symlink loop", "dangling symlink", "permission denied",
                                                  "unsearchable directory", "directory", "FIFO"};
    return kind >= 0 && kind < TH_HOSTILE_COUNT ? names[kind] : "?";
}

/* path's directory into buf ("." when none). */
static TH_UNUSED void th_dirname(const char *path, char *buf, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, n, ".");
    else if (slash == path) snprintf(buf, n, "/");
    else snprintf(buf, n, "%.*s", (int)(slash - path), path);
}

/* Plants kind at path (nothing may be there). 0, or -1 with the reason in th_skip_reason. */
static TH_UNUSED int th_hostile_make(int kind, const char *path) {
    char other[1024], dir[1024];
    int rc = -1;
    switch (kind) {
    case TH_HOSTILE_LOOP:
        snprintf(other, sizeof other, "%s.loop", path);
        rc = symlink(other, path) == 0 && symlink(path, other) == 0 ? 0 : -1;
        break;
    case TH_HOSTILE_DANGLING:
        snprintf(other, sizeof other, "%s.missing-target", path);
        rc = symlink(other, path);
        break;
    case TH_HOSTILE_NO_PERMISSION: {
        FILE *f = fopen(path, "wb");
        rc = f && fputs("unreadable", f) >= 0 && fclose(f) == 0 && chmod(path, 0) == 0 ? 0 : -1;
        break;
    }
    case TH_HOSTILE_UNSEARCHABLE_DIR:
        th_dirname(path, dir, sizeof dir);
        rc = chmod(dir, 0600);
        break;
    case TH_HOSTILE_DIRECTORY: rc = mkdir(path, 0755); break;
    case TH_HOSTILE_FIFO: rc = mkfifo(path, 0644); break;
    default: break;
    }
    if (rc != 0)
        snprintf(th_skip_reason, sizeof th_skip_reason, "cannot plant a %s at %s: %s", th_hostile_name(kind),
                 path, strerror(errno));
    return rc;
}

/* Removes what th_hostile_make planted (and makes the directory searchable again). */
static TH_UNUSED void th_hostile_undo(int kind, const char *path) {
    char other[1024], dir[1024];
    switch (kind) {
    case TH_HOSTILE_LOOP:
        snprintf(other, sizeof other, "%s.loop", path);
        unlink(other);
        unlink(path);
        break;
    case TH_HOSTILE_UNSEARCHABLE_DIR:
        th_dirname(path, dir, sizeof dir);
        (void)chmod(dir, 0755);
        break;
    case TH_HOSTILE_DIRECTORY: rmdir(path); break;
    default: unlink(path); break;
    }
}

/* Permission kinds as root: run as "nobody" until th_hostile_restore. 1 when the identity
 * was changed, 0 when nothing was needed, -1 when it could not be (reason in
 * th_skip_reason). */
static TH_UNUSED int th_hostile_drop(int kind) {
    if (geteuid() != 0 || (kind != TH_HOSTILE_NO_PERMISSION && kind != TH_HOSTILE_UNSEARCHABLE_DIR)) return 0;
    if (setegid(65534) != 0 || seteuid(65534) != 0) {
        snprintf(th_skip_reason, sizeof th_skip_reason, "running as root and cannot become nobody: %s",
                 strerror(errno));
        if (getegid() != 0) (void)setegid(0);
        return -1;
    }
    return 1;
}
static TH_UNUSED void th_hostile_restore(int dropped) {
    if (dropped != 1) return;
    if (seteuid(0) != 0 || setegid(0) != 0) {
        printf("# cannot become root again: %s\n", strerror(errno));
        exit(1);
    }
}

/* A reader under test: opens `path` (or what contains it) and returns its status; its own
 * checks (nothing created, nothing changed) go inside with CHECK. */
typedef dlt_status (*th_reader_fn)(const char *path, void *arg);

/* Runs reader once per hostile kind planted at path, expecting DLT_ERR_IO with a message
 * that names the path's directory and, except for the unsearchable directory (where the
 * reader may stop at another file of it), the path's own name; then once with path a
 * symlink to `good` (a readable file), expecting DLT_OK. `what` names the reader in
 * failures. Returns the number of kinds skipped (root without seteuid). */
static TH_UNUSED int th_hostile_check(const char *path, const char *good, th_reader_fn reader, void *arg,
                                      const char *what) {
    char dir[1024];
    th_dirname(path, dir, sizeof dir);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    (void)chmod(dir, 0755); /* "nobody" must reach the directory */
    int skipped = 0;
    for (int kind = 0; kind < TH_HOSTILE_COUNT; kind++) {
        if (th_hostile_make(kind, path) != 0) {
            th_fail(__FILE__, __LINE__, "%s: %s", what, th_skip_reason);
            th_hostile_undo(kind, path);
            continue;
        }
        int dropped = th_hostile_drop(kind);
        if (dropped < 0) {
            printf("# %s, %s: skipped (%s)\n", what, th_hostile_name(kind), th_skip_reason);
            skipped++;
            th_hostile_undo(kind, path);
            continue;
        }
        dlt_clear_error();
        dlt_status st = reader(path, arg);
        th_hostile_restore(dropped);
        const char *msg = dlt_last_error();
        if (st != DLT_ERR_IO)
            th_fail(__FILE__, __LINE__, "%s, %s at %s: status %d (%s), expected DLT_ERR_IO; message: %s", what,
                    th_hostile_name(kind), path, st, dlt_status_string(st), msg);
        else if (!strstr(msg, dir) || (kind != TH_HOSTILE_UNSEARCHABLE_DIR && !strstr(msg, base)))
            th_fail(__FILE__, __LINE__, "%s, %s: the message does not name %s: %s", what, th_hostile_name(kind),
                    path, msg);
        th_hostile_undo(kind, path);
    }
    /* the control: a symlink to a readable file reads as the file */
    if (symlink(good, path) != 0) {
        th_fail(__FILE__, __LINE__, "%s: cannot make a symlink: %s", what, strerror(errno));
        return skipped;
    }
    dlt_status st = reader(path, arg);
    if (st != DLT_OK)
        th_fail(__FILE__, __LINE__, "%s through a symlink to a good file: status %d: %s", what, st, dlt_last_error());
    unlink(path);
    return skipped;
}

#endif
