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
    RUN(test_item12_backward_grad_dtype);
    dlt_ctx_destroy(g_ctx);
    rmdir(g_dir);
    return th_done();
}
