/*
 * test_regress.c - one regression case per defect of issue 20 ("hardening round 2") that
 * lives in the library: each case failed before its fix (the commit that fixed the defect
 * says how) and checks the fixed behaviour with real values. The examples' items (10, 13
 * and the example's half of 6) are checked by tests/scripts/examples.sh, the file-reader
 * items again by test_paths (every reader against symlinks, permissions, dangling links,
 * unsearchable directories) and by the fuzz corpus.
 *
 *   3  a checkpoint's optimizer.step_count of INT64_MAX: the next step must not overflow
 *   4  dlt_tensor_fill of an integer tensor with NaN, inf or an out-of-range value
 *   5  every optimizer/scaler state the API can reach round-trips through a checkpoint
 *      (scale 0 after many skipped steps, lr at FLT_MAX, a schedule that overflows), and an
 *      lr fp32 cannot hold is refused where it is set
 *   6  train.epoch / train.step negative: refused on save and on load, naming the file
 *   7  the save's temporary file: exclusive, never through a planted symlink
 *   8  the header is read and checked before the data (an 8 GiB file with a "{}" header)
 *   9  a control character (NUL) inside a JSON key
 *  11  a dangling symlink under a CIFAR-10 batch name
 *  12  dlt_backward with an integer gradient
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static dlt_ctx *g_ctx;
static char g_dir[256];

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

/* A Linear(3 -> 2) with bias and known weights. */
static dlt_module *small_linear(void) {
    dlt_module *m = NULL;
    if (dlt_linear_create(g_ctx, 3, 2, 1, &m) != DLT_OK) {
        printf("# linear: %s\n", dlt_last_error());
        exit(1);
    }
    const float w[6] = {0.5f, -1.0f, 0.25f, 2.0f, 0.0f, -0.5f}, b[2] = {0.125f, -0.25f};
    dlt_tensor *t = NULL;
    if (dlt_module_find(m, "weight", &t) != DLT_OK || dlt_tensor_copy_from_host(t, w, sizeof w) != DLT_OK ||
        dlt_module_find(m, "bias", &t) != DLT_OK || dlt_tensor_copy_from_host(t, b, sizeof b) != DLT_OK) {
        printf("# linear init: %s\n", dlt_last_error());
        exit(1);
    }
    return m;
}

/* loss = sum(m(x)) for x = [[1, 2, 3]] (or inf in every element): backward. */
static void forward_backward(dlt_module *m, dlt_grad_scaler *sc, int poison) {
    const int64_t xs[2] = {1, 3};
    const float xv[3] = {1.0f, 2.0f, 3.0f}, xinf[3] = {INFINITY, INFINITY, INFINITY};
    dlt_tensor *x = th_tensor_f32(g_ctx, poison ? xinf : xv, xs, 2), *y = NULL, *loss = NULL, *scaled = NULL;
    CHECK_OK(dlt_module_forward(m, x, &y));
    CHECK_OK(dlt_sum(y, &loss));
    if (sc) {
        CHECK_OK(dlt_grad_scaler_scale(sc, loss, &scaled));
        CHECK_OK(dlt_backward(scaled, NULL));
    } else {
        CHECK_OK(dlt_backward(loss, NULL));
    }
    dlt_tensor_release(scaled);
    dlt_tensor_release(loss);
    dlt_tensor_release(y);
    dlt_tensor_release(x);
}

static dlt_optimizer *sgd_over(dlt_module *m, double lr, double momentum) {
    dlt_tensor *p[2];
    int32_t np = 0;
    dlt_optimizer *opt = NULL;
    if (dlt_module_params(m, p, 2, &np) != DLT_OK ||
        dlt_sgd_create(p, np, lr, momentum, 0, 0, 0, 0, &opt) != DLT_OK) {
        printf("# sgd: %s\n", dlt_last_error());
        exit(1);
    }
    return opt;
}

/* A 0-D tensor of one value (f32, i64). */
static dlt_tensor *scalar_f32(float v) {
    dlt_tensor *t = NULL;
    if (dlt_tensor_from_host(g_ctx, DLT_F32, NULL, 0, 0, &v, sizeof v, &t) != DLT_OK) exit(1);
    return t;
}
static dlt_tensor *scalar_i64(int64_t v) {
    dlt_tensor *t = NULL;
    if (dlt_tensor_from_host(g_ctx, DLT_I64, NULL, 0, 0, &v, sizeof v, &t) != DLT_OK) exit(1);
    return t;
}

/* A training checkpoint of small_linear's state with the given optimizer and position
 * entries, written with dlt_safetensors_save (so any value can be stored). */
static void write_checkpoint(const char *path, float lr, int64_t step_count, int64_t epoch, int64_t step) {
    dlt_module *m = small_linear();
    dlt_tensor *w = NULL, *b = NULL;
    CHECK_OK(dlt_module_find(m, "weight", &w));
    CHECK_OK(dlt_module_find(m, "bias", &b));
    const char *names[6] = {"weight", "bias", "optimizer.lr", "optimizer.step_count", "train.epoch", "train.step"};
    dlt_tensor *ts[6] = {w, b, scalar_f32(lr), scalar_i64(step_count), scalar_i64(epoch), scalar_i64(step)};
    CHECK_OK(dlt_safetensors_save(path, names, ts, 6));
    for (int i = 2; i < 6; i++) dlt_tensor_release(ts[i]);
    dlt_module_destroy(m);
}

/* ---- 3: a step count of INT64_MAX ---- */
static void test_item03_step_count_saturates(void) {
    char path[512];
    path_in(path, sizeof path, "steps.safetensors");
    write_checkpoint(path, 0.5f, INT64_MAX, 1, 7);
    dlt_module *m = small_linear();
    dlt_optimizer *opt = sgd_over(m, 0.1, 0.0);
    CHECK_OK(dlt_checkpoint_load(path, m, opt, NULL, NULL, NULL));
    int64_t steps = 0;
    CHECK_OK(dlt_optimizer_step_count(opt, &steps));
    CHECK(steps == INT64_MAX, "loaded step count %lld", (long long)steps);
    /* the next step: the update is applied (lr 0.5, d sum(Wx+b)/dW = x) and the count stays
     * at INT64_MAX instead of wrapping to INT64_MIN (signed overflow before the fix) */
    forward_backward(m, NULL, 0);
    CHECK_OK(dlt_optimizer_step(opt));
    CHECK_OK(dlt_optimizer_step_count(opt, &steps));
    CHECK(steps == INT64_MAX, "step count after one more step: %lld", (long long)steps);
    dlt_tensor *w = NULL;
    CHECK_OK(dlt_module_find(m, "weight", &w));
    float wv[6];
    CHECK_OK(dlt_tensor_copy_to_host(w, wv, sizeof wv));
    CHECK(wv[0] == 0.5f - 0.5f * 1.0f && wv[2] == 0.25f - 0.5f * 3.0f && wv[4] == 0.0f - 0.5f * 2.0f,
          "w = %g %g %g", wv[0], wv[2], wv[4]);
    /* and the saturated state saves and loads again */
    CHECK_OK(dlt_checkpoint_save(path, m, opt, NULL, 2, 8));
    dlt_optimizer_destroy(opt);
    opt = sgd_over(m, 0.1, 0.0);
    CHECK_OK(dlt_checkpoint_load(path, m, opt, NULL, NULL, NULL));
    CHECK_OK(dlt_optimizer_step_count(opt, &steps));
    CHECK(steps == INT64_MAX, "reloaded step count %lld", (long long)steps);
    dlt_optimizer_destroy(opt);
    dlt_module_destroy(m);
    unlink(path);
}

/* ---- 4: fill values an integer dtype cannot hold ---- */
static void test_item04_fill_range(void) {
    const int64_t n = 3;
    static const struct {
        int32_t dtype;
        double v;
    } refused[] = {
        {DLT_I32, NAN},  {DLT_I32, INFINITY}, {DLT_I32, -INFINITY}, {DLT_I32, 2147483648.0},
        {DLT_I32, -2147483649.0}, {DLT_I32, 1e20}, {DLT_I64, NAN}, {DLT_I64, INFINITY},
        {DLT_I64, 9223372036854775808.0}, {DLT_I64, -1e19}, {DLT_U8, NAN}, {DLT_U8, 256.0},
        {DLT_U8, -256.0}, {DLT_U8, 255.5}, {DLT_U8, -INFINITY}, {DLT_F32, 1e39}, {DLT_F16, 65505.0},
        {DLT_F16, -1e5}, {DLT_BF16, 3.4e38},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        dlt_tensor *t = NULL;
        CHECK_OK(dlt_tensor_zeros(g_ctx, refused[i].dtype, &n, 1, 0, &t));
        CHECK_STATUS(dlt_tensor_fill(t, refused[i].v), DLT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(dlt_last_error(), "without overflow") != NULL, "%s", dlt_last_error());
        double v = -1;
        CHECK_OK(dlt_tensor_get(t, 1, &v));
        CHECK(v == 0.0, "%s filled with %g: a refused fill changed the tensor (%g)",
              dlt_dtype_name(refused[i].dtype), refused[i].v, v);
        dlt_tensor_release(t);
    }
    /* what fits: truncated toward zero as C and PyTorch do, uint8 wrapping -255..-1 */
    static const struct {
        int32_t dtype;
        double v, want;
    } ok[] = {
        {DLT_I32, 2147483647.0, 2147483647.0}, {DLT_I32, -2147483648.0, -2147483648.0},
        {DLT_I32, -2.75, -2.0}, {DLT_I64, -9223372036854775808.0, -9223372036854775808.0},
        {DLT_I64, 1e18, 1e18}, {DLT_U8, 255.0, 255.0}, {DLT_U8, -1.0, 255.0}, {DLT_U8, -255.0, 1.0},
        {DLT_U8, 7.5, 7.0}, {DLT_F16, 65504.0, 65504.0}, {DLT_F16, INFINITY, INFINITY},
        {DLT_F32, -INFINITY, -INFINITY}, {DLT_F32, FLT_MAX, FLT_MAX},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        dlt_tensor *t = NULL;
        CHECK_OK(dlt_tensor_zeros(g_ctx, ok[i].dtype, &n, 1, 0, &t));
        CHECK_OK(dlt_tensor_fill(t, ok[i].v));
        double v = -1;
        CHECK_OK(dlt_tensor_get(t, 2, &v));
        CHECK(v == ok[i].want, "%s filled with %.17g holds %.17g, expected %.17g",
              dlt_dtype_name(ok[i].dtype), ok[i].v, v, ok[i].want);
        dlt_tensor_release(t);
    }
    /* NaN fills a floating tensor */
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_BF16, &n, 1, 0, &t));
    CHECK_OK(dlt_tensor_fill(t, NAN));
    double v = 0;
    CHECK_OK(dlt_tensor_get(t, 0, &v));
    CHECK(v != v, "bf16 NaN fill gave %g", v);
    dlt_tensor_release(t);
}

/* ---- 5: every reachable state round-trips; lr beyond fp32 refused where set ---- */

typedef struct train_state {
    double lr, scale, gf, bf;
    int64_t steps;
    int32_t gi, gt, buf_init;
    float w0;
} train_state;

static train_state read_state(dlt_module *m, dlt_optimizer *opt, dlt_grad_scaler *sc) {
    train_state s;
    memset(&s, 0, sizeof s);
    CHECK_OK(dlt_optimizer_get_lr(opt, &s.lr));
    CHECK_OK(dlt_optimizer_step_count(opt, &s.steps));
    if (dlt_grad_scaler_is_enabled(sc))
        CHECK_OK(dlt_grad_scaler_get_state(sc, &s.scale, &s.gf, &s.bf, &s.gi, &s.gt));
    s.buf_init = dlt_optimizer_momentum_buffer(opt, 0) != NULL;
    dlt_tensor *w = NULL;
    CHECK_OK(dlt_module_find(m, "weight", &w));
    double d = 0;
    CHECK_OK(dlt_tensor_get(w, 0, &d));
    s.w0 = (float)d;
    return s;
}

/* Saves the objects, loads the file into fresh ones made alike, and compares. */
static void round_trip(const char *what, dlt_module *m, dlt_optimizer *opt, dlt_grad_scaler *sc,
                       double momentum, int64_t epoch, int64_t step) {
    char path[512];
    path_in(path, sizeof path, "state.safetensors");
    train_state a = read_state(m, opt, sc);
    CHECK_OK(dlt_checkpoint_save(path, m, opt, sc, epoch, step));
    dlt_module *m2 = small_linear();
    dlt_optimizer *o2 = sgd_over(m2, 0.01, momentum);
    dlt_grad_scaler *s2 = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 8.0, 2.0, 0.5, 3, dlt_grad_scaler_is_enabled(sc), &s2));
    int64_t e2 = -1, p2 = -1;
    dlt_status st = dlt_checkpoint_load(path, m2, o2, s2, &e2, &p2);
    CHECK(st == DLT_OK, "%s: the library refused a checkpoint it wrote: %s", what, dlt_last_error());
    if (st == DLT_OK) {
        train_state b = read_state(m2, o2, s2);
        CHECK(a.lr == b.lr && a.steps == b.steps && a.scale == b.scale && a.gf == b.gf && a.bf == b.bf &&
                  a.gi == b.gi && a.gt == b.gt && a.w0 == b.w0 && e2 == epoch && p2 == step,
              "%s: lr %g/%g steps %lld/%lld scale %g/%g tracker %d/%d w %g/%g epoch %lld step %lld",
              what, a.lr, b.lr, (long long)a.steps, (long long)b.steps, a.scale, b.scale, a.gt, b.gt,
              a.w0, b.w0, (long long)e2, (long long)p2);
    }
    dlt_grad_scaler_destroy(s2);
    dlt_optimizer_destroy(o2);
    dlt_module_destroy(m2);
    unlink(path);
}

static void test_item05_reachable_states_round_trip(void) {
    /* an lr fp32 cannot hold is refused where it is set (before the fix SGD(lr=1e39) was
     * accepted, stored as inf and saved into a file the loader refused) */
    dlt_module *m = small_linear();
    dlt_tensor *p[2];
    int32_t np = 0;
    CHECK_OK(dlt_module_params(m, p, 2, &np));
    dlt_optimizer *opt = NULL;
    CHECK_STATUS(dlt_sgd_create(p, np, 1e39, 0, 0, 0, 0, 0, &opt), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "learning rate") != NULL && opt == NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_sgd_create(p, np, INFINITY, 0, 0, 0, 0, 0, &opt), DLT_ERR_INVALID_ARGUMENT);
    opt = sgd_over(m, 0.25, 0.9);
    const double bad_lr[3] = {1e308, INFINITY, NAN};
    for (int i = 0; i < 3; i++) {
        CHECK_STATUS(dlt_optimizer_set_lr(opt, bad_lr[i]), DLT_ERR_INVALID_ARGUMENT);
        double lr = 0;
        CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
        CHECK(lr == 0.25, "a refused set_lr(%g) changed the lr to %g", bad_lr[i], lr);
    }
    dlt_grad_scaler *sc = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 65536.0, 2.0, 0.5, 3, 1, &sc));

    /* a momentum buffer that exists without data (the first step with a gradient was
     * skipped), the growth tracker part-way */
    forward_backward(m, sc, 1);
    CHECK_OK(dlt_grad_scaler_step(sc, opt));
    CHECK_OK(dlt_grad_scaler_update(sc));
    CHECK(dlt_optimizer_momentum_buffer(opt, 0) != NULL, "no buffer after a skipped step");
    CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
    forward_backward(m, sc, 0);
    CHECK_OK(dlt_grad_scaler_step(sc, opt));
    CHECK_OK(dlt_grad_scaler_update(sc));
    CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
    round_trip("buffer, tracker 1", m, opt, sc, 0.9, 0, 2);

    /* the scale backed off to 0: 65536 = 2^16, 2^-149 is the smallest fp32, so 166 skipped
     * steps in a row reach 0 (PyTorch's GradScaler gets there too). Before the fix the file
     * saved at this point was refused: "invalid scaler state (scale 0 ...)". */
    int skipped = 0;
    double scale = 1;
    while (skipped < 400) {
        forward_backward(m, sc, 1);
        CHECK_OK(dlt_grad_scaler_step(sc, opt));
        CHECK_OK(dlt_grad_scaler_update(sc));
        CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
        skipped++;
        CHECK_OK(dlt_grad_scaler_get_scale(sc, &scale));
        if (scale == 0) break;
    }
    CHECK(scale == 0 && skipped == 165, "scale %g after %d skipped steps", scale, skipped);
    round_trip("scale 0", m, opt, sc, 0.9, 3, 170);

    /* the largest scale (growth stops short of inf), the largest lr, the largest counts */
    CHECK_OK(dlt_grad_scaler_update_to(sc, FLT_MAX));
    CHECK_OK(dlt_optimizer_set_lr(opt, FLT_MAX));
    round_trip("scale and lr FLT_MAX, epoch and step INT64_MAX", m, opt, sc, 0.9, INT64_MAX, INT64_MAX);
    CHECK_OK(dlt_optimizer_set_lr(opt, 0.0));
    round_trip("lr 0", m, opt, sc, 0.9, 0, 0);
    dlt_optimizer_destroy(opt);

    /* a schedule that grows the lr past fp32: it stops at FLT_MAX (inf before the fix) */
    opt = sgd_over(m, 1e37, 0.0);
    CHECK_OK(dlt_lr_schedule_step(opt, 1, 100.0));
    for (int i = 0; i < 2; i++) {
        forward_backward(m, NULL, 0);
        CHECK_OK(dlt_optimizer_step(opt));
        CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
    }
    double lr = 0;
    CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
    CHECK(lr == FLT_MAX, "scheduled lr %g", lr);
    dlt_grad_scaler *off = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 65536.0, 2.0, 0.5, 2000, 0, &off));
    round_trip("scheduled lr at FLT_MAX, scaler disabled", m, opt, off, 0.0, 1, 2);
    dlt_grad_scaler_destroy(off);
    dlt_grad_scaler_destroy(sc);
    dlt_optimizer_destroy(opt);
    dlt_module_destroy(m);
}

/* ---- 6: negative positions ---- */
static void test_item06_position_validated(void) {
    char path[512];
    path_in(path, sizeof path, "pos.safetensors");
    dlt_module *m = small_linear();
    dlt_optimizer *opt = sgd_over(m, 0.1, 0.0);
    /* never written: the loader would refuse it */
    CHECK_STATUS(dlt_checkpoint_save(path, m, opt, NULL, -1, 0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_checkpoint_save(path, m, opt, NULL, 0, -5), DLT_ERR_INVALID_ARGUMENT);
    CHECK(access(path, F_OK) != 0, "a refused save wrote %s", path);
    static const struct {
        int64_t epoch, step;
        const char *name;
    } cases[] = {{-1, 0, "train.epoch"}, {0, -5, "train.step"}, {INT64_MIN, INT64_MIN, "train.epoch"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_checkpoint(path, 0.5f, 3, cases[i].epoch, cases[i].step);
        int64_t e = 77, s = 78, steps = -1;
        /* before the fix both loaded: -5 made `--steps 3` run 8 steps */
        CHECK_STATUS(dlt_checkpoint_load(path, m, opt, NULL, &e, &s), DLT_ERR_FORMAT);
        CHECK(strstr(dlt_last_error(), cases[i].name) != NULL && strstr(dlt_last_error(), path) != NULL &&
                  strstr(dlt_last_error(), "negative") != NULL,
              "%s", dlt_last_error());
        CHECK(e == 77 && s == 78, "a refused load wrote epoch %lld step %lld", (long long)e, (long long)s);
        CHECK_OK(dlt_optimizer_step_count(opt, &steps));
        CHECK(steps == 0, "a refused load set the step count to %lld", (long long)steps);
    }
    /* the largest positions load */
    write_checkpoint(path, 0.5f, 3, INT64_MAX, INT64_MAX);
    int64_t e = 0, s = 0;
    CHECK_OK(dlt_checkpoint_load(path, m, opt, NULL, &e, &s));
    CHECK(e == INT64_MAX && s == INT64_MAX, "epoch %lld step %lld", (long long)e, (long long)s);
    dlt_optimizer_destroy(opt);
    dlt_module_destroy(m);
    unlink(path);
}

/* ---- 7: the save's temporary file ---- */
static void test_item07_temp_file_not_followed(void) {
    char path[512], victim[512], planted[600];
    path_in(path, sizeof path, "ckpt.safetensors");
    path_in(victim, sizeof victim, "victim.txt");
    FILE *f = fopen(victim, "w");
    REQUIRE(f != NULL);
    fputs("precious", f);
    fclose(f);
    /* the name the save used before the fix: "<path>.tmp-<pid>", planted as a symlink to
     * the victim (the attack of the issue: the save wrote through it and left path a
     * symlink to the victim) */
    snprintf(planted, sizeof planted, "%s.tmp-%ld", path, (long)getpid());
    REQUIRE(symlink(victim, planted) == 0, "symlink: %s", strerror(errno));
    dlt_module *m = small_linear();
    CHECK_OK(dlt_module_save(m, path));
    size_t n = 0;
    unsigned char *v = th_read_file(victim, &n);
    CHECK(v && n == 8 && memcmp(v, "precious", 8) == 0, "the victim was overwritten (%zu bytes)", n);
    free(v);
    struct stat sb;
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode), "%s is not a regular file after the save", path);
    CHECK(lstat(planted, &sb) == 0 && S_ISLNK(sb.st_mode), "the planted link was touched");
    /* the file is the checkpoint, and no temporary file is left beside it */
    dlt_module *m2 = small_linear();
    CHECK_OK(dlt_module_load(m2, path));
    CHECK(th_count_files(g_dir, "ckpt.safetensors.tmp-") == 1, "%d temporary names left",
          th_count_files(g_dir, "ckpt.safetensors.tmp-"));
    /* a save over a path that is a symlink replaces the link, never writes its target */
    unlink(path);
    REQUIRE(symlink(victim, path) == 0);
    CHECK_OK(dlt_module_save(m, path));
    v = th_read_file(victim, &n);
    CHECK(v && n == 8 && memcmp(v, "precious", 8) == 0, "the link's target was written");
    free(v);
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode), "the link at %s was not replaced", path);
    dlt_module_destroy(m2);
    dlt_module_destroy(m);
    unlink(planted);
    unlink(path);
    unlink(victim);
}

/* Writes a safetensors file: the 8-byte length, header, then ndata data bytes (zeros) or,
 * with sparse_size, a file of that size (a hole after the header). */
static void write_raw(const char *path, const char *header, size_t ndata, uint64_t sparse_size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) exit(1);
    uint64_t hl = strlen(header);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hl >> (8 * i));
    unsigned char *zeros = calloc(ndata + 1, 1);
    int ok = write(fd, len8, 8) == 8 && write(fd, header, hl) == (ssize_t)hl &&
             write(fd, zeros, ndata) == (ssize_t)ndata;
    if (sparse_size) ok = ok && ftruncate(fd, (off_t)sparse_size) == 0;
    free(zeros);
    close(fd);
    if (!ok) exit(1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- 8: the header is checked before the data is read ---- */
static void test_item08_header_before_data(void) {
    char path[512];
    path_in(path, sizeof path, "huge.safetensors");
    /* a 2 GiB file (a hole: nothing on disk) with an empty header. Before the fix the
     * loaders read it whole first (the 8 GiB took 52 s and 8.2 GiB); now the header
     * says no tensor covers the 2 GiB of data and the file is refused at once. */
    const uint64_t size = (uint64_t)2 << 30;
    write_raw(path, "{}      ", 0, size);
    dlt_module *m = small_linear();
    dlt_optimizer *opt = sgd_over(m, 0.1, 0.0);
    dlt_tensor *t = NULL;
    double t0 = now_s();
    CHECK_STATUS(dlt_module_load(m, path), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "the data section has") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_checkpoint_load(path, m, opt, NULL, NULL, NULL), DLT_ERR_FORMAT);
    CHECK_STATUS(dlt_safetensors_load_tensor(g_ctx, path, "weight", &t), DLT_ERR_FORMAT);
    double dt = now_s() - t0;
    CHECK(dt < 1.0, "three refusals of a 2 GiB file took %.2f s", dt);
    /* offsets beyond the end of the file: refused from the header alone */
    write_raw(path, "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 8, 0);
    CHECK_STATUS(dlt_module_load(m, path), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "out of range") != NULL, "%s", dlt_last_error());
    /* a header length past the file, and one past the 100 MB limit */
    write_raw(path, "{}", 0, 0);
    FILE *f = fopen(path, "r+b");
    REQUIRE(f != NULL);
    const unsigned char big[8] = {0x00, 0xe1, 0xf5, 0x05, 0x01, 0, 0, 0}; /* 4395630848 */
    fwrite(big, 1, 8, f);
    fclose(f);
    CHECK_STATUS(dlt_module_load(m, path), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "bad header length") != NULL, "%s", dlt_last_error());
    dlt_optimizer_destroy(opt);
    dlt_module_destroy(m);
    unlink(path);
}

/* ---- 9: names every reader reads the same way ---- */
static void test_item09_control_characters_in_names(void) {
    char path[512];
    path_in(path, sizeof path, "names.safetensors");
    dlt_module *m = small_linear();
    float before[6], after[6];
    dlt_tensor *w = NULL;
    CHECK_OK(dlt_module_find(m, "weight", &w));
    CHECK_OK(dlt_tensor_copy_to_host(w, before, sizeof before));
    static const struct {
        const char *what, *weight_key, *weight_fields;
    } cases[] = {
        /* cJSON decodes \u0000 to a NUL: the name read "weight" here and "weight\0evil" in
         * Python. Before the fix this loaded into "weight". */
        {"a NUL escape in a key", "weight\\u0000evil", "\"dtype\":\"F32\""},
        {"a raw NUL byte in a key", "weight\0evil", "\"dtype\":\"F32\""},
        /* cJSON decodes a malformed \u escape as a NUL too (found by fuzzing this round) */
        {"a malformed \\u escape in a key", "weight\\u0zzz", "\"dtype\":\"F32\""},
        {"a control escape in a key", "weight\\u0007", "\"dtype\":\"F32\""},
        {"a raw control byte in a key", "weight\x01", "\"dtype\":\"F32\""},
        {"a C1 control in a key", "weight\\u0085", "\"dtype\":\"F32\""},
        /* cJSON takes the first of two equal fields, Python and serde the last (F16 needs 12
         * bytes, not 24): before the fix this loaded as F32 */
        {"a field twice", "weight", "\"dtype\":\"F32\",\"dtype\":\"F16\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char header[512];
        int hl = snprintf(header, sizeof header,
                          "{\"%s\":{%s,\"shape\":[2,3],\"data_offsets\":[0,24]},"
                          "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]}}",
                          cases[i].weight_key, cases[i].weight_fields);
        if (strstr(cases[i].what, "raw NUL")) { /* snprintf stopped at the NUL: build by hand */
            const char *tail = "evil\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                               "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]}}";
            hl = snprintf(header, sizeof header, "{\"weight");
            header[hl++] = '\0';
            memcpy(header + hl, tail, strlen(tail) + 1);
            hl += (int)strlen(tail);
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        REQUIRE(fd >= 0);
        unsigned char len8[8] = {(unsigned char)hl, 0, 0, 0, 0, 0, 0, 0};
        float data[8] = {9, 9, 9, 9, 9, 9, 9, 9};
        REQUIRE(write(fd, len8, 8) == 8 && write(fd, header, (size_t)hl) == hl &&
                write(fd, data, sizeof data) == (ssize_t)sizeof data);
        close(fd);
        CHECK_STATUS(dlt_module_load(m, path), DLT_ERR_FORMAT);
        CHECK(strstr(dlt_last_error(), "NUL") || strstr(dlt_last_error(), "control") ||
                  strstr(dlt_last_error(), "twice") || strstr(dlt_last_error(), "malformed"),
              "%s: %s", cases[i].what, dlt_last_error());
        CHECK_OK(dlt_tensor_copy_to_host(w, after, sizeof after));
        CHECK(memcmp(before, after, sizeof before) == 0, "%s: the model changed", cases[i].what);
    }
    /* NUL in a metadata value, a metadata key twice */
    write_raw(path, "{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, 0);
    CHECK_STATUS(dlt_module_load(m, path), DLT_ERR_FORMAT);
    write_raw(path, "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, 0);
    CHECK_STATUS(dlt_module_load(m, path), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "twice") != NULL, "%s", dlt_last_error());
    /* and such names are never written */
    const char *bad[3] = {"weight\x01", "a\x7f", "b\xc2\x85"};
    for (int i = 0; i < 3; i++) {
        const char *nm = bad[i];
        CHECK_STATUS(dlt_safetensors_save(path, &nm, &w, 1), DLT_ERR_INVALID_ARGUMENT);
    }
    dlt_module_destroy(m);
    unlink(path);
}

/* ---- 11: a dangling symlink under a CIFAR-10 batch name ---- */
static void test_item11_dangling_batch_link(void) {
    char dir[512], p1[600], p2[600];
    path_in(dir, sizeof dir, "cifar");
    REQUIRE(mkdir(dir, 0755) == 0);
    snprintf(p1, sizeof p1, "%s/data_batch_1.bin", dir);
    snprintf(p2, sizeof p2, "%s/data_batch_2.bin", dir);
    unsigned char rec[2 * 3073];
    memset(rec, 7, sizeof rec);
    rec[0] = 1;
    rec[3073] = 2;
    FILE *f = fopen(p1, "wb");
    REQUIRE(f && fwrite(rec, 1, sizeof rec, f) == sizeof rec);
    fclose(f);
    REQUIRE(symlink("/nonexistent/batch", p2) == 0);
    dlt_dataset *ds = NULL;
    /* before the fix: DLT_OK with the records of data_batch_1.bin only */
    CHECK_STATUS(dlt_cifar10_open(g_ctx, dir, DLT_SPLIT_TRAIN, &ds), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), "data_batch_2.bin") != NULL && strstr(dlt_last_error(), "symlink"),
          "%s", dlt_last_error());
    CHECK(ds == NULL, "a refused open made a dataset");
    /* a name that is really absent is still skipped */
    unlink(p2);
    CHECK_OK(dlt_cifar10_open(g_ctx, dir, DLT_SPLIT_TRAIN, &ds));
    CHECK(dlt_dataset_size(ds) == 2, "%lld records", (long long)dlt_dataset_size(ds));
    dlt_dataset_destroy(ds);
    unlink(p1);
    rmdir(dir);
}

/* ---- 12: integer gradients ---- */
static void test_item12_backward_grad_dtype(void) {
    const int64_t shape[2] = {2, 2};
    const float v[4] = {1.0f, -2.0f, 3.5f, 0.25f};
    dlt_tensor *leaf = th_tensor_f32(g_ctx, v, shape, 2), *y = NULL;
    CHECK_OK(dlt_tensor_set_requires_grad(leaf, 1));
    const int32_t refused[3] = {DLT_I32, DLT_I64, DLT_U8};
    for (int i = 0; i < 3; i++) {
        dlt_tensor *g = NULL;
        CHECK_OK(dlt_tensor_zeros(g_ctx, refused[i], shape, 2, 0, &g));
        CHECK_OK(dlt_tensor_fill(g, 1.0));
        CHECK_OK(dlt_mul_scalar(leaf, NULL, 3.0, &y));
        /* before the fix this returned DLT_OK and converted the integers */
        CHECK_STATUS(dlt_backward(y, g), DLT_ERR_DTYPE);
        CHECK(strstr(dlt_last_error(), dlt_dtype_name(refused[i])) != NULL, "%s", dlt_last_error());
        CHECK(dlt_tensor_grad(leaf) == NULL, "a refused backward made a gradient");
        CHECK_STATUS(dlt_backward(leaf, g), DLT_ERR_DTYPE); /* the leaf-root path too */
        dlt_tensor_release(y);
        dlt_tensor_release(g);
    }
    /* floating gradients of another dtype are converted (PyTorch's grad.to(dtype)): f16
     * and bf16 values that are exact in both give exactly 3 * g */
    const float gv[4] = {0.5f, -1.5f, 2.0f, 0.125f};
    const int32_t conv[2] = {DLT_F16, DLT_BF16};
    for (int i = 0; i < 2; i++) {
        dlt_tensor *g32 = th_tensor_f32(g_ctx, gv, shape, 2), *g = NULL;
        CHECK_OK(dlt_tensor_cast(g32, conv[i], &g));
        CHECK_OK(dlt_zero_grad(&leaf, 1, 1));
        CHECK_OK(dlt_mul_scalar(leaf, NULL, 3.0, &y));
        CHECK_OK(dlt_backward(y, g));
        float out[4];
        REQUIRE(dlt_tensor_grad(leaf) != NULL);
        CHECK_OK(dlt_tensor_copy_to_host(dlt_tensor_grad(leaf), out, sizeof out));
        for (int k = 0; k < 4; k++)
            CHECK(out[k] == 3.0f * gv[k], "%s grad[%d] = %g, expected %g", dlt_dtype_name(conv[i]), k,
                  out[k], 3.0f * gv[k]);
        dlt_tensor_release(y);
        dlt_tensor_release(g);
        dlt_tensor_release(g32);
    }
    dlt_tensor_release(leaf);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/dlt_regress_XXXXXX");
    if (!mkdtemp(g_dir)) {
        printf("# cannot create a temporary directory\n");
        return 1;
    }
    g_ctx = th_cpu_ctx();
    RUN(test_item03_step_count_saturates);
    RUN(test_item04_fill_range);
    RUN(test_item05_reachable_states_round_trip);
    RUN(test_item06_position_validated);
    RUN(test_item07_temp_file_not_followed);
    RUN(test_item08_header_before_data);
    RUN(test_item09_control_characters_in_names);
    RUN(test_item11_dangling_batch_link);
    RUN(test_item12_backward_grad_dtype);
    dlt_ctx_destroy(g_ctx);
    rmdir(g_dir);
    return th_done();
}
