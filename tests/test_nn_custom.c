/*
 * test_nn_custom.c - modules beyond the built-in layers, on the CPU: a custom module written
 * in C (an MLP whose forward callback runs dlt_linear/dlt_relu on its registered parameters)
 * trained by SGD with its gradients and first step checked against float64 loops written
 * here; state names and order (parameters, buffers, children, nesting, tied weights);
 * checkpoint round trips; train/eval and memory formats reaching custom modules; misuse
 * (NULL callback, bad and duplicate names, other contexts, built-in targets, failing
 * callbacks: status, message, nothing leaked); dlt_module_forward_ex; the module summary
 * text, exactly; the layer option structs (defaults, non-square convolutions, older
 * callers' sizes); tree queries.
 */
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "../lib/core/internal.h" /* reference counts: a failed registration keeps none */
#include "harness.h"

static dlt_ctx *g_ctx;
static char g_dir[64];

/* ---- deterministic data (splitmix64) ---- */
static uint64_t g_rng = 1;
static void seed(uint64_t s) { g_rng = s * 0x9e3779b97f4a7c15ull + 1; }
static double urand(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}
/* an f32 tensor of uniform values in [-a, a); vals (may be NULL) receives them as doubles */
static dlt_tensor *rand_tensor(const int64_t *shape, int32_t ndim, double a, double *vals) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    for (int64_t i = 0; i < n; i++) {
        f[i] = (float)(a * (2 * urand() - 1));
        if (vals) vals[i] = f[i];
    }
    dlt_tensor *t = th_tensor_f32(g_ctx, f, shape, ndim);
    free(f);
    return t;
}
static void read_d(const dlt_tensor *t, double *out) {
    float *f = th_read_f32(t);
    for (int64_t i = 0; i < dlt_tensor_numel(t); i++) out[i] = f[i];
    free(f);
}
static double rel_err(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (a[i] != a[i]) return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den == 0 ? sqrt(num) : sqrt(num / den);
}
static uint64_t allocated(void) {
    uint64_t v = 0;
    if (dlt_memory_stat(g_ctx, DLT_MEM_ALLOCATED, &v) != DLT_OK) printf("# memory_stat failed\n");
    return v;
}
static int64_t live_nodes(void) {
    int64_t n = -1;
    if (dlt_tape_live_nodes(g_ctx, &n) != DLT_OK) printf("# tape_live_nodes failed\n");
    return n;
}

/* ---- the custom MLP: x [N, D] -> linear(w1, b1) -> relu -> linear(w2, b2) -> [N, C] ---- */

enum { D = 4, H = 8, C = 3, N = 6 };

typedef struct mlp {
    dlt_tensor *w1, *b1, *w2, *b2; /* own references, released by mlp_free */
    int calls, last_training, *freed;
} mlp;

static dlt_status mlp_forward(dlt_module *m, void *user, dlt_tensor *const *in, int32_t n_in,
                              dlt_tensor **out, int32_t n_out) {
    mlp *p = user;
    if (n_in != 1 || n_out != 1)
        return dlt_set_error(DLT_ERR_INVALID_ARGUMENT, "mlp: takes one input, gives one output");
    p->calls++;
    p->last_training = dlt_module_is_training(m);
    dlt_tensor *h = NULL, *a = NULL;
    dlt_status st = dlt_linear(in[0], p->w1, p->b1, &h);
    if (st == DLT_OK) st = dlt_relu(h, &a);
    dlt_tensor_release(h);
    if (st == DLT_OK) st = dlt_linear(a, p->w2, p->b2, &out[0]);
    dlt_tensor_release(a);
    return st;
}

static void mlp_free(void *user) {
    mlp *p = user;
    dlt_tensor_release(p->w1), dlt_tensor_release(p->b1);
    dlt_tensor_release(p->w2), dlt_tensor_release(p->b2);
    if (p->freed) (*p->freed)++;
    free(p);
}

/* w1, b1, w2, b2 as doubles (may be NULL) */
typedef struct mlp_vals {
    double w1[H * D], b1[H], w2[C * H], b2[C];
} mlp_vals;

static dlt_module *mlp_create(uint64_t s, mlp_vals *v, int *freed, mlp **pp) {
    seed(s);
    mlp *p = calloc(1, sizeof *p);
    mlp_vals tmp;
    if (!v) v = &tmp;
    const int64_t s_w1[2] = {H, D}, s_b1[1] = {H}, s_w2[2] = {C, H}, s_b2[1] = {C};
    p->w1 = rand_tensor(s_w1, 2, 0.5, v->w1);
    p->b1 = rand_tensor(s_b1, 1, 0.5, v->b1);
    p->w2 = rand_tensor(s_w2, 2, 0.5, v->w2);
    p->b2 = rand_tensor(s_b2, 1, 0.5, v->b2);
    p->freed = freed;
    dlt_module *m = NULL;
    if (dlt_custom_module_create(g_ctx, "mlp", mlp_forward, p, mlp_free, &m) != DLT_OK) {
        printf("# mlp_create: %s\n", dlt_last_error());
        mlp_free(p);
        return NULL;
    }
    dlt_status st = dlt_module_register_parameter(m, "w1", p->w1);
    if (st == DLT_OK) st = dlt_module_register_parameter(m, "b1", p->b1);
    if (st == DLT_OK) st = dlt_module_register_parameter(m, "w2", p->w2);
    if (st == DLT_OK) st = dlt_module_register_parameter(m, "b2", p->b2);
    if (st != DLT_OK) {
        printf("# mlp_create: %s\n", dlt_last_error());
        dlt_module_destroy(m);
        return NULL;
    }
    if (pp) *pp = p;
    return m;
}

/* float64 forward and backward of the MLP with mean cross-entropy; g receives the
 * gradients, returns the loss */
static double mlp_reference(const mlp_vals *v, const double *x, const int32_t *y, mlp_vals *g) {
    double hp[N][H], h[N][H], z[N][C], dz[N][C], loss = 0;
    memset(g, 0, sizeof *g);
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < H; j++) {
            double s = v->b1[j];
            for (int d = 0; d < D; d++) s += x[n * D + d] * v->w1[j * D + d];
            hp[n][j] = s;
            h[n][j] = s > 0 ? s : 0;
        }
        double mx = -INFINITY, se = 0;
        for (int c = 0; c < C; c++) {
            double s = v->b2[c];
            for (int j = 0; j < H; j++) s += h[n][j] * v->w2[c * H + j];
            z[n][c] = s;
            mx = fmax(mx, s);
        }
        for (int c = 0; c < C; c++) se += exp(z[n][c] - mx);
        loss += (mx + log(se) - z[n][y[n]]) / N;
        for (int c = 0; c < C; c++) dz[n][c] = (exp(z[n][c] - mx) / se - (c == y[n])) / N;
    }
    for (int n = 0; n < N; n++) {
        double dh[H] = {0};
        for (int c = 0; c < C; c++) {
            g->b2[c] += dz[n][c];
            for (int j = 0; j < H; j++) {
                g->w2[c * H + j] += dz[n][c] * h[n][j];
                dh[j] += dz[n][c] * v->w2[c * H + j];
            }
        }
        for (int j = 0; j < H; j++) {
            double dp = hp[n][j] > 0 ? dh[j] : 0;
            g->b1[j] += dp;
            for (int d = 0; d < D; d++) g->w1[j * D + d] += dp * x[n * D + d];
        }
    }
    return loss;
}

static dlt_tensor *targets(const int32_t *y) {
    int64_t n = N;
    dlt_tensor *t = NULL;
    if (dlt_tensor_from_host(g_ctx, DLT_I32, &n, 1, DLT_FORMAT_CONTIGUOUS, y, N * sizeof *y, &t) != DLT_OK)
        printf("# targets: %s\n", dlt_last_error());
    return t;
}

static double loss_of(dlt_module *m, dlt_tensor *x, dlt_tensor *t, int backward) {
    dlt_tensor *z = NULL, *loss = NULL;
    double l = NAN;
    if (dlt_module_forward(m, x, &z) == DLT_OK &&
        dlt_cross_entropy(z, t, -100, DLT_REDUCTION_MEAN, &loss) == DLT_OK &&
        (!backward || dlt_backward(loss, NULL) == DLT_OK) && dlt_tensor_item(loss, &l) == DLT_OK) {
    } else {
        printf("# loss_of: %s\n", dlt_last_error());
    }
    dlt_tensor_release(z);
    dlt_tensor_release(loss);
    return l;
}

static void test_custom_mlp_trains_like_float64(void) {
    int freed = 0;
    mlp_vals v, g, after;
    mlp *p = NULL;
    dlt_module *m = mlp_create(3, &v, &freed, &p);
    REQUIRE(m);
    CHECK(strcmp(dlt_module_kind(m), "mlp") == 0 && dlt_module_user_data(m) == p);
    CHECK(dlt_module_ctx(m) == g_ctx);
    CHECK(dlt_module_num_params(m) == 4 && dlt_module_param_count(m) == H * D + H + C * H + C);
    double xv[N * D];
    const int64_t xs[2] = {N, D};
    dlt_tensor *x = rand_tensor(xs, 2, 1.0, xv);
    const int32_t yv[N] = {0, 1, 2, 2, 1, 0};
    dlt_tensor *t = targets(yv);
    dlt_tensor *params[4];
    int32_t np = 0;
    CHECK_OK(dlt_module_params(m, params, 4, &np));
    REQUIRE(np == 4);
    CHECK(params[0] == p->w1 && params[1] == p->b1 && params[2] == p->w2 && params[3] == p->b2);
    CHECK(dlt_tensor_requires_grad(p->w1) && dlt_tensor_requires_grad(p->b2),
          "registration did not make the tensors parameters");
    const double lr = 0.1;
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(params, 4, lr, 0.0, 0.0, 0.0, 0, 0, &opt));

    /* one step: loss and every gradient against float64, then the update */
    const double ref_loss = mlp_reference(&v, xv, yv, &g);
    CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
    double l0 = loss_of(m, x, t, 1);
    CHECK(fabs(l0 - ref_loss) < 1e-5 * fabs(ref_loss), "loss %.9g, float64 %.9g", l0, ref_loss);
    CHECK(p->calls == 1 && p->last_training == 1);
    double *ref[4] = {g.w1, g.b1, g.w2, g.b2};
    const int64_t sizes[4] = {H * D, H, C * H, C};
    for (int i = 0; i < 4; i++) {
        double got[H * D];
        REQUIRE(dlt_tensor_grad(params[i]), "parameter %d has no gradient", i);
        read_d(dlt_tensor_grad(params[i]), got);
        double e = rel_err(got, ref[i], sizes[i]);
        CHECK(e < 1e-5, "gradient %d: relative error %g", i, e);
    }
    CHECK_OK(dlt_optimizer_step(opt));
    read_d(p->w1, after.w1), read_d(p->b1, after.b1), read_d(p->w2, after.w2), read_d(p->b2, after.b2);
    double *before[4] = {v.w1, v.b1, v.w2, v.b2}, *now[4] = {after.w1, after.b1, after.w2, after.b2};
    for (int i = 0; i < 4; i++) {
        double want[H * D];
        for (int64_t k = 0; k < sizes[i]; k++) want[k] = before[i][k] - lr * ref[i][k];
        double e = rel_err(now[i], want, sizes[i]);
        CHECK(e < 1e-6, "parameter %d after one step: relative error %g", i, e);
    }
    /* more steps at a larger rate: the loss falls, the tape is empty after each backward */
    CHECK_OK(dlt_optimizer_set_lr(opt, 1.0));
    double last = l0;
    for (int step = 0; step < 40; step++) {
        CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
        last = loss_of(m, x, t, 1);
        CHECK_OK(dlt_optimizer_step(opt));
    }
    CHECK(last < 0.5 * l0, "loss %g -> %g after 40 steps", l0, last);
    CHECK(live_nodes() == 0, "%lld tape nodes alive", (long long)live_nodes());
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(x);
    dlt_tensor_release(t);
    CHECK(freed == 0);
    dlt_module_destroy(m);
    CHECK(freed == 1, "the destroy callback ran %d times", freed);
}

/* ---- state names and order ---- */

static dlt_status identity_forward(dlt_module *m, void *user, dlt_tensor *const *in, int32_t n_in,
                                   dlt_tensor **out, int32_t n_out) {
    (void)m, (void)user;
    for (int32_t i = 0; i < n_out && i < n_in; i++) out[i] = dlt_tensor_retain(in[i]);
    return DLT_OK;
}

static dlt_module *custom(const char *kind) {
    dlt_module *m = NULL;
    if (dlt_custom_module_create(g_ctx, kind, identity_forward, NULL, NULL, &m) != DLT_OK)
        printf("# custom: %s\n", dlt_last_error());
    return m;
}

static dlt_tensor *zeros(int32_t dtype, const int64_t *shape, int32_t ndim) {
    dlt_tensor *t = NULL;
    if (dlt_tensor_zeros(g_ctx, dtype, shape, ndim, DLT_FORMAT_CONTIGUOUS, &t) != DLT_OK)
        printf("# zeros: %s\n", dlt_last_error());
    return t;
}

static void check_names(const dlt_module *m, const char *const *names, const int32_t *is_param,
                        int n) {
    CHECK(dlt_module_num_state(m) == n, "%d state entries, expected %d", dlt_module_num_state(m), n);
    for (int i = 0; i < n && i < dlt_module_num_state(m); i++) {
        const char *name = NULL;
        int32_t ip = -1;
        CHECK_OK(dlt_module_state_entry(m, i, &name, NULL, &ip));
        CHECK(strcmp(name, names[i]) == 0 && ip == is_param[i], "entry %d is '%s' (param %d), expected '%s' (%d)",
              i, name, ip, names[i], is_param[i]);
    }
}

static void test_state_names_and_order(void) {
    /* registration order buffer, param, child, param, buffer: PyTorch's state_dict puts the
     * module's parameters first, then its buffers, then each child's state */
    dlt_module *m = custom("net"), *inner = custom(NULL), *lin = NULL;
    REQUIRE(m && inner);
    CHECK(strcmp(dlt_module_kind(inner), "custom") == 0 && dlt_module_user_data(inner) == NULL);
    const int64_t s4[1] = {4}, s23[2] = {2, 3};
    dlt_tensor *steps = zeros(DLT_I64, NULL, 0), *a = zeros(DLT_F32, s23, 2), *b = zeros(DLT_F32, s4, 1),
               *stats = zeros(DLT_F32, s4, 1), *e = zeros(DLT_F32, s4, 1);
    CHECK_OK(dlt_module_register_buffer(m, "steps", steps));
    CHECK_OK(dlt_module_register_parameter(m, "a", a));
    CHECK_OK(dlt_linear_create(g_ctx, 3, 2, 1, &lin));
    CHECK_OK(dlt_module_register_module(m, "fc", lin));
    CHECK_OK(dlt_module_register_parameter(m, "b", b));
    CHECK_OK(dlt_module_register_buffer(m, "stats", stats));
    CHECK_OK(dlt_module_register_parameter(inner, "e", e));
    CHECK_OK(dlt_module_register_module(m, "inner", inner));
    static const char *names[] = {"a", "b", "steps", "stats", "fc.weight", "fc.bias", "inner.e"};
    static const int32_t isp[] = {1, 1, 0, 0, 1, 1, 1};
    check_names(m, names, isp, 7);
    CHECK(!dlt_tensor_requires_grad(steps) && !dlt_tensor_requires_grad(stats), "buffers turned into parameters");
    dlt_tensor *ps[8];
    int32_t n = 0;
    CHECK_OK(dlt_module_params(m, ps, 8, &n));
    CHECK(n == 5 && ps[0] == a && ps[1] == b && ps[4] == e, "%d params", n);
    dlt_tensor *found = NULL;
    CHECK_OK(dlt_module_find(m, "inner.e", &found));
    CHECK(found == e);
    /* inside a Sequential, under its index */
    dlt_module *seq = NULL;
    CHECK_OK(dlt_sequential_create(g_ctx, &seq));
    CHECK_OK(dlt_sequential_append(seq, NULL, m));
    CHECK_OK(dlt_module_find(seq, "0.fc.bias", &found));
    CHECK_OK(dlt_module_find(seq, "0.steps", &found));
    CHECK(found == steps);
    /* tied weights: one tensor under two names is two state entries and one parameter */
    dlt_module *tied = custom("tied");
    REQUIRE(tied);
    CHECK_OK(dlt_module_register_parameter(tied, "embed", a));
    CHECK_OK(dlt_module_register_parameter(tied, "head", a));
    CHECK_OK(dlt_module_register_module(inner, "tied", tied));
    static const char *names2[] = {"0.a", "0.b", "0.steps", "0.stats", "0.fc.weight", "0.fc.bias",
                                   "0.inner.e", "0.inner.tied.embed", "0.inner.tied.head"};
    static const int32_t isp2[] = {1, 1, 0, 0, 1, 1, 1, 1, 1};
    check_names(seq, names2, isp2, 9);
    CHECK(dlt_module_num_params(seq) == 5, "%d params with a tie", dlt_module_num_params(seq));
    CHECK(dlt_module_param_count(seq) == 6 + 4 + 6 + 2 + 4, "%lld", (long long)dlt_module_param_count(seq));
    CHECK(dlt_module_num_params(tied) == 1 && dlt_module_param_count(tied) == 6);
    /* the module holds its own references: the caller's go now */
    dlt_tensor_release(steps), dlt_tensor_release(a), dlt_tensor_release(b);
    dlt_tensor_release(stats), dlt_tensor_release(e);
    CHECK_OK(dlt_module_find(seq, "0.inner.tied.head", &found));
    CHECK(dlt_tensor_numel(found) == 6);
    dlt_module_destroy(seq);
}

/* ---- checkpoints ---- */

static void test_checkpoint_round_trip(void) {
    char path[128], ckpt[128];
    snprintf(path, sizeof path, "%s/mlp.safetensors", g_dir);
    snprintf(ckpt, sizeof ckpt, "%s/train.safetensors", g_dir);
    mlp_vals v1, v2;
    dlt_module *a = mlp_create(11, &v1, NULL, NULL), *b = mlp_create(12, &v2, NULL, NULL);
    REQUIRE(a && b);
    dlt_tensor *steps = zeros(DLT_I64, NULL, 0);
    int64_t seven = 7;
    CHECK_OK(dlt_tensor_copy_from_host(steps, &seven, sizeof seven));
    CHECK_OK(dlt_module_register_buffer(a, "steps", steps));
    dlt_tensor_release(steps);
    CHECK_OK(dlt_module_register_buffer(b, "steps", (steps = zeros(DLT_I64, NULL, 0))));
    dlt_tensor_release(steps);
    CHECK_OK(dlt_module_save(a, path));
    /* the file holds the state_dict names, loadable one by one */
    dlt_tensor *w2 = NULL;
    CHECK_OK(dlt_safetensors_load_tensor(g_ctx, path, "w2", &w2));
    double got[H * D]; /* the largest of the four */
    read_d(w2, got);
    CHECK(rel_err(got, v1.w2, C * H) == 0);
    dlt_tensor_release(w2);
    CHECK_OK(dlt_module_load(b, path));
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_module_find(b, "w1", &t));
    read_d(t, got);
    CHECK(rel_err(got, v1.w1, H * D) == 0, "w1 not loaded");
    CHECK_OK(dlt_module_find(b, "steps", &t));
    int64_t s = 0;
    CHECK_OK(dlt_tensor_copy_to_host(t, &s, sizeof s));
    CHECK(s == 7, "buffer loaded as %lld", (long long)s);
    /* a training checkpoint with the optimizer's momentum, into a third module */
    dlt_tensor *ps[4];
    CHECK_OK(dlt_module_params(a, ps, 4, NULL));
    dlt_optimizer *opt = NULL, *opt2 = NULL;
    CHECK_OK(dlt_sgd_create(ps, 4, 0.05, 0.9, 0.0, 0.0, 0, 0, &opt));
    const int64_t xs[2] = {N, D};
    dlt_tensor *x = rand_tensor(xs, 2, 1.0, NULL);
    const int32_t yv[N] = {2, 1, 0, 0, 1, 2};
    dlt_tensor *y = targets(yv);
    for (int i = 0; i < 2; i++) {
        CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
        (void)loss_of(a, x, y, 1);
        CHECK_OK(dlt_optimizer_step(opt));
    }
    CHECK_OK(dlt_checkpoint_save(ckpt, a, opt, NULL, 1, 2));
    dlt_module *c = mlp_create(13, NULL, NULL, NULL);
    REQUIRE(c);
    CHECK_OK(dlt_module_register_buffer(c, "steps", (steps = zeros(DLT_I64, NULL, 0))));
    dlt_tensor_release(steps);
    dlt_tensor *pc[4];
    CHECK_OK(dlt_module_params(c, pc, 4, NULL));
    CHECK_OK(dlt_sgd_create(pc, 4, 0.05, 0.9, 0.0, 0.0, 0, 0, &opt2));
    int64_t epoch = -1, step = -1;
    CHECK_OK(dlt_checkpoint_load(ckpt, c, opt2, NULL, &epoch, &step));
    CHECK(epoch == 1 && step == 2);
    /* one more step on both gives the same parameters */
    for (int k = 0; k < 2; k++) {
        dlt_module *mm = k ? c : a;
        dlt_optimizer *oo = k ? opt2 : opt;
        CHECK_OK(dlt_optimizer_zero_grad(oo, 1));
        (void)loss_of(mm, x, y, 1);
        CHECK_OK(dlt_optimizer_step(oo));
    }
    for (int i = 0; i < 4; i++) {
        double u[H * D], w[H * D];
        read_d(ps[i], u), read_d(pc[i], w);
        CHECK(rel_err(w, u, dlt_tensor_numel(ps[i])) == 0, "parameter %d differs after resuming", i);
    }
    /* a module with another layout refuses the file, by name */
    dlt_module *other = custom("other");
    CHECK_STATUS(dlt_module_load(other, path), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "which the model does not have") != NULL, "%s", dlt_last_error());
    dlt_module_destroy(other);
    dlt_optimizer_destroy(opt), dlt_optimizer_destroy(opt2);
    dlt_tensor_release(x), dlt_tensor_release(y);
    dlt_module_destroy(a), dlt_module_destroy(b), dlt_module_destroy(c);
    unlink(path), unlink(ckpt);
}

/* ---- train/eval and memory formats ---- */

static void test_training_mode_and_format(void) {
    mlp *p = NULL;
    dlt_module *m = mlp_create(5, NULL, NULL, &p), *seq = NULL, *conv = NULL;
    REQUIRE(m);
    /* a registered 4-D parameter follows set_format; the child conv too */
    const int64_t ws[4] = {4, 2, 3, 3}, xs[2] = {N, D};
    dlt_tensor *k = rand_tensor(ws, 4, 1.0, NULL);
    CHECK_OK(dlt_module_register_parameter(m, "kernel", k));
    CHECK_OK(dlt_conv2d_create(g_ctx, 2, 2, 1, 1, 1, 0, 1, 1, 0, &conv));
    CHECK_OK(dlt_module_register_module(m, "conv", conv));
    CHECK_OK(dlt_sequential_create(g_ctx, &seq));
    CHECK_OK(dlt_sequential_append(seq, "mlp", m));
    dlt_tensor *x = rand_tensor(xs, 2, 1.0, NULL), *y = NULL;
    CHECK_OK(dlt_module_set_training(seq, 0));
    CHECK(!dlt_module_is_training(m) && !dlt_module_is_training(conv));
    CHECK_OK(dlt_module_forward(seq, x, &y));
    CHECK(p->last_training == 0, "the callback saw training mode %d", p->last_training);
    dlt_tensor_release(y);
    CHECK_OK(dlt_module_set_training(seq, 1));
    CHECK_OK(dlt_module_forward(seq, x, &y));
    CHECK(p->last_training == 1);
    dlt_tensor_release(y);
    double before[4 * 2 * 9], after[4 * 2 * 9];
    read_d(k, before);
    CHECK_OK(dlt_module_set_format(seq, DLT_FORMAT_CHANNELS_LAST));
    dlt_tensor *cw = NULL;
    CHECK_OK(dlt_module_find(seq, "mlp.conv.weight", &cw));
    CHECK(dlt_tensor_format(k) == DLT_FORMAT_CHANNELS_LAST && dlt_tensor_format(cw) == DLT_FORMAT_CHANNELS_LAST);
    CHECK(dlt_tensor_format(p->w1) == DLT_FORMAT_CONTIGUOUS);
    read_d(k, after);
    CHECK(memcmp(before, after, sizeof before) == 0, "values changed with the format");
    dlt_tensor_release(k);
    dlt_tensor_release(x);
    dlt_module_destroy(seq);
}

/* ---- misuse ---- */

typedef struct failing {
    int mode; /* 0: op failure, 1: dlt_set_error, 2: bare status, 3: output then failure,
               * 4: OK without output */
    dlt_tensor *w;
} failing;

static dlt_status failing_forward(dlt_module *m, void *user, dlt_tensor *const *in, int32_t n_in,
                                  dlt_tensor **out, int32_t n_out) {
    (void)m, (void)n_in, (void)n_out;
    failing *f = user;
    switch (f->mode) {
    case 0: return dlt_linear(in[0], f->w, NULL, &out[0]); /* w has the wrong width */
    case 1: return dlt_set_error(DLT_ERR_SHAPE, "failing: wants a [*, 5] input");
    case 2: return DLT_ERR_NOT_SUPPORTED;
    case 3: {
        dlt_status st = dlt_relu(in[0], &out[0]);
        return st == DLT_OK ? dlt_set_error(DLT_ERR_INVALID_STATE, "failing: after the output") : st;
    }
    default: return DLT_OK;
    }
}

static void test_misuse(void) {
    dlt_module *m = (dlt_module *)0x1;
    CHECK_STATUS(dlt_custom_module_create(g_ctx, "x", NULL, NULL, NULL, &m), DLT_ERR_NULL_POINTER);
    CHECK(strstr(dlt_last_error(), "forward") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_custom_module_create(NULL, "x", identity_forward, NULL, NULL, &m), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_custom_module_create(g_ctx, "x", identity_forward, NULL, NULL, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_custom_module_create(g_ctx, "", identity_forward, NULL, NULL, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK(m == (dlt_module *)0x1, "out-pointer written on failure");
    int freed = 0;
    mlp *p = NULL;
    m = mlp_create(9, NULL, &freed, &p);
    REQUIRE(m);
    const int64_t s4[1] = {4};
    dlt_tensor *t = zeros(DLT_F32, s4, 1);
    const int32_t rc = t->refcount, n0 = dlt_module_num_state(m);
#define UNCHANGED(what)                                                                       \
    CHECK(dlt_module_num_state(m) == n0 && t->refcount == rc, "%s changed the module", what)
    /* names: taken (by a parameter, a buffer, a child), empty, dotted, NULL */
    CHECK_STATUS(dlt_module_register_parameter(m, "w1", t), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "'w1'") != NULL && strstr(dlt_last_error(), "parameter"), "%s",
          dlt_last_error());
    CHECK_STATUS(dlt_module_register_buffer(m, "b2", t), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_register_parameter(m, "", t), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_register_parameter(m, "a.b", t), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "'a.b'") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_module_register_buffer(m, ".", t), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_register_parameter(m, NULL, t), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_register_parameter(m, "t", NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_register_parameter(NULL, "t", t), DLT_ERR_NULL_POINTER);
    UNCHANGED("bad names");
    CHECK(!dlt_tensor_requires_grad(t), "a refused parameter requires grad");
    /* a tensor of another context; an op's output; an integer parameter */
    dlt_ctx *other = th_cpu_ctx();
    dlt_tensor *foreign = NULL, *derived = NULL, *ints = zeros(DLT_I32, s4, 1);
    CHECK_OK(dlt_tensor_zeros(other, DLT_F32, s4, 1, DLT_FORMAT_CONTIGUOUS, &foreign));
    CHECK_STATUS(dlt_module_register_parameter(m, "f", foreign), DLT_ERR_CONTEXT_MISMATCH);
    CHECK_STATUS(dlt_module_register_buffer(m, "f", foreign), DLT_ERR_CONTEXT_MISMATCH);
    CHECK_OK(dlt_relu(p->b1, &derived)); /* recorded: b1 requires grad */
    CHECK_STATUS(dlt_module_register_parameter(m, "d", derived), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "leaf") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_module_register_parameter(m, "i", ints), DLT_ERR_DTYPE);
    CHECK_OK(dlt_module_register_buffer(m, "i", ints)); /* any dtype as a buffer */
    dlt_tensor_release(ints);
    CHECK(dlt_module_num_state(m) == n0 + 1);
    dlt_tensor_release(derived);
    /* registration on a built-in kind */
    dlt_module *conv = NULL, *c2 = NULL, *child = custom("child");
    CHECK_OK(dlt_conv2d_create(g_ctx, 2, 2, 1, 1, 1, 0, 1, 1, 0, &conv));
    CHECK_STATUS(dlt_module_register_parameter(conv, "extra", t), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "conv2d") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_module_register_module(conv, "c", child), DLT_ERR_INVALID_ARGUMENT);
    CHECK(dlt_module_num_state(conv) == 1 && dlt_module_num_children(conv) == 0);
    /* children: taken name, another context, already owned, cycles; each stays the caller's */
    CHECK_STATUS(dlt_module_register_module(m, "w2", child), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_register_module(m, "c.d", child), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_register_module(m, "c", NULL), DLT_ERR_NULL_POINTER);
    CHECK_OK(dlt_relu_create(other, &c2));
    CHECK_STATUS(dlt_module_register_module(m, "c", c2), DLT_ERR_CONTEXT_MISMATCH);
    dlt_module_destroy(c2);
    CHECK_OK(dlt_module_register_module(m, "c", child));
    CHECK_STATUS(dlt_module_register_module(m, "c2", child), DLT_ERR_INVALID_ARGUMENT); /* owned */
    CHECK_STATUS(dlt_module_register_module(child, "up", m), DLT_ERR_INVALID_ARGUMENT);  /* cycle */
    CHECK_STATUS(dlt_module_register_module(m, "self", m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_register_parameter(m, "c", t), DLT_ERR_INVALID_ARGUMENT); /* a child's name */
    CHECK(strstr(dlt_last_error(), "child") != NULL, "%s", dlt_last_error());
    CHECK(dlt_module_num_children(m) == 1 && t->refcount == rc);
    dlt_module_destroy(conv);
    dlt_module_destroy(m);
    CHECK(freed == 1);

    /* failing callbacks: status and message passed on, outputs released, nothing leaked */
    const int64_t xs[2] = {2, 4}, ws[2] = {3, 5};
    dlt_tensor *x = rand_tensor(xs, 2, 1.0, NULL);
    CHECK_OK(dlt_tensor_set_requires_grad(x, 1)); /* the op records, then must release */
    failing f = {0, rand_tensor(ws, 2, 1.0, NULL)};
    dlt_module *fm = NULL;
    CHECK_OK(dlt_custom_module_create(g_ctx, "failing", failing_forward, &f, NULL, &fm));
    const uint64_t base = allocated();
    static const dlt_status want[5] = {DLT_ERR_SHAPE, DLT_ERR_SHAPE, DLT_ERR_NOT_SUPPORTED,
                                       DLT_ERR_INVALID_STATE, DLT_ERR_INVALID_STATE};
    static const char *msg[5] = {"dlt_linear", "failing: wants a [*, 5] input", "not supported",
                                 "failing: after the output", "without setting output 0"};
    for (int mode = 0; mode < 5; mode++) {
        f.mode = mode;
        dlt_tensor *y = (dlt_tensor *)0x1;
        CHECK_STATUS(dlt_module_forward(fm, x, &y), want[mode]);
        const char *e = dlt_last_error();
        CHECK(strstr(e, msg[mode]) != NULL && strncmp(e, "dlt_module_forward: ", 20) == 0,
              "mode %d: %s", mode, e);
        CHECK(y == (dlt_tensor *)0x1, "mode %d: output written on failure", mode);
        CHECK(allocated() == base && live_nodes() == 0, "mode %d: %llu bytes, %lld nodes left", mode,
              (unsigned long long)(allocated() - base), (long long)live_nodes());
    }
    CHECK(strstr(dlt_last_error(), "failing module") != NULL, "%s", dlt_last_error());
    /* dlt_set_error refuses misuse */
    CHECK_STATUS(dlt_set_error(DLT_ERR_SHAPE, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_set_error(DLT_OK, "fine"), DLT_ERR_INVALID_ARGUMENT);
    CHECK(dlt_set_error(DLT_ERR_IO, "disk") == DLT_ERR_IO && strcmp(dlt_last_error(), "disk") == 0 &&
          dlt_last_error_code() == DLT_ERR_IO);
    dlt_module_destroy(fm);
    dlt_tensor_release(f.w), dlt_tensor_release(x), dlt_tensor_release(t), dlt_tensor_release(foreign);
    dlt_ctx_destroy(other);
#undef UNCHANGED
}

/* Host allocation failures at every point of registration, summaries and several-output
 * forwards: DLT_ERR_OUT_OF_MEMORY, the module as it was, the child still the caller's. */
static void test_alloc_failures(void) {
    const int64_t s4[1] = {4};
    dlt_tensor *t = zeros(DLT_F32, s4, 1);
    dlt_module *m = custom("m");
    REQUIRE(m);
    int points = 0;
    for (int what = 0; what < 5; what++) {
        for (int64_t k = 1; k < 50; k++) {
            dlt_module *child = custom("child");
            REQUIRE(child);
            const int32_t ns = dlt_module_num_state(m), nc = dlt_module_num_children(m), rc = t->refcount;
            char name[32], buf[64];
            snprintf(name, sizeof name, "n%d_%lld", what, (long long)k);
            dlt_tensor *outs[2] = {NULL, NULL}, *ins[2] = {t, t};
            CHECK_OK(dlt_testing_fail_alloc(g_ctx, k));
            dlt_status st;
            switch (what) {
            case 0: st = dlt_module_register_parameter(m, name, t); break;
            case 1: st = dlt_module_register_buffer(m, name, t); break;
            case 2: st = dlt_module_register_module(m, name, child); break;
            case 3: st = dlt_module_summary(m, buf, sizeof buf, NULL); break;
            default: st = dlt_module_forward_ex(m, ins, 2, outs, 2); /* a scratch array */
            }
            CHECK_OK(dlt_testing_fail_alloc(g_ctx, 0));
            if (st == DLT_OK) {
                if (what != 2) dlt_module_destroy(child);
                dlt_tensor_release(outs[0]), dlt_tensor_release(outs[1]);
                break;
            }
            points++;
            CHECK(st == DLT_ERR_OUT_OF_MEMORY, "case %d, k=%lld: %d %s", what, (long long)k, st,
                  dlt_last_error());
            CHECK(dlt_module_num_state(m) == ns && dlt_module_num_children(m) == nc && t->refcount == rc,
                  "case %d, k=%lld: the module changed", what, (long long)k);
            CHECK(outs[0] == NULL && outs[1] == NULL);
            dlt_module_destroy(child); /* still ours: a double free shows under ASan */
        }
    }
    CHECK(points >= 8, "only %d allocation points", points);
    dlt_tensor_release(t);
    dlt_module_destroy(m);
}

/* ---- several inputs and outputs ---- */

/* outputs: x + y, then x */
static dlt_status two_forward(dlt_module *m, void *user, dlt_tensor *const *in, int32_t n_in,
                              dlt_tensor **out, int32_t n_out) {
    (void)m, (void)user;
    if (n_in != 2 || n_out != 2) return dlt_set_error(DLT_ERR_INVALID_ARGUMENT, "two: 2 in, 2 out");
    DLT_CHECK(dlt_add(in[0], in[1], &out[0]));
    out[1] = dlt_tensor_retain(in[0]);
    return DLT_OK;
}

static void test_forward_ex(void) {
    dlt_module *m = NULL, *relu = NULL;
    CHECK_OK(dlt_custom_module_create(g_ctx, "two", two_forward, NULL, NULL, &m));
    const int64_t s[1] = {3};
    double xv[3], yv[3], got[3];
    dlt_tensor *in[2] = {rand_tensor(s, 1, 1.0, xv), rand_tensor(s, 1, 1.0, yv)}, *out[2] = {NULL, NULL};
    CHECK_OK(dlt_module_forward_ex(m, in, 2, out, 2));
    read_d(out[0], got);
    for (int i = 0; i < 3; i++) CHECK(got[i] == (double)(float)(xv[i] + yv[i]), "x+y[%d]", i);
    CHECK(out[1] == in[0]);
    dlt_tensor_release(out[0]), dlt_tensor_release(out[1]);
    /* the callback's own check, through dlt_module_forward (one in, one out) */
    dlt_tensor *y = NULL;
    CHECK_STATUS(dlt_module_forward(m, in[0], &y), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "two: 2 in, 2 out") != NULL, "%s", dlt_last_error());
    /* a built-in kind takes one and gives one */
    CHECK_OK(dlt_relu_create(g_ctx, &relu));
    out[0] = out[1] = (dlt_tensor *)0x1;
    CHECK_STATUS(dlt_module_forward_ex(relu, in, 2, out, 1), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "relu module takes 1 input") != NULL, "%s", dlt_last_error());
    CHECK(out[0] == (dlt_tensor *)0x1);
    CHECK_OK(dlt_module_forward_ex(relu, in, 1, out, 1));
    dlt_tensor_release(out[0]);
    dlt_tensor *with_null[2] = {in[0], NULL};
    CHECK_STATUS(dlt_module_forward_ex(m, with_null, 2, out, 2), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_forward_ex(m, NULL, 2, out, 2), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_forward_ex(m, in, 2, NULL, 2), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_forward_ex(m, in, -1, out, 2), DLT_ERR_INVALID_ARGUMENT);
    dlt_ctx *other = th_cpu_ctx();
    dlt_tensor *xo = NULL;
    CHECK_OK(dlt_tensor_to_ctx(in[1], other, &xo));
    dlt_tensor *mixed[2] = {in[0], xo};
    CHECK_STATUS(dlt_module_forward_ex(m, mixed, 2, out, 2), DLT_ERR_CONTEXT_MISMATCH);
    CHECK(strstr(dlt_last_error(), "inputs[1]") != NULL, "%s", dlt_last_error());
    dlt_tensor_release(xo);
    dlt_ctx_destroy(other);
    dlt_tensor_release(in[0]), dlt_tensor_release(in[1]);
    dlt_module_destroy(m), dlt_module_destroy(relu);
}

/* ---- the summary ---- */

static char *summary(const dlt_module *m) {
    size_t need = 0;
    if (dlt_module_summary(m, NULL, 0, &need) != DLT_OK) return NULL;
    char *s = malloc(need);
    if (dlt_module_summary(m, s, need, NULL) != DLT_OK) {
        free(s);
        return NULL;
    }
    return s;
}

static void check_text(const char *got, const char *want) {
    if (!got || strcmp(got, want) != 0) {
        CHECK(0, "summary differs");
        printf("# got:\n%s# want:\n%s", got ? got : "(null)\n", want);
    }
}

static void test_summary_text(void) {
    dlt_module *seq = NULL, *c = NULL;
    CHECK_OK(dlt_sequential_create(g_ctx, &seq));
    CHECK_OK(dlt_conv2d_create(g_ctx, 3, 8, 3, 3, 1, 1, 1, 1, 1, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_batchnorm2d_create(g_ctx, 8, 1e-5, 0.1, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_relu_create(g_ctx, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_max_pool2d_create(g_ctx, 2, 2, 0, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_flatten_create(g_ctx, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_linear_create(g_ctx, 128, 5, 1, &c));
    CHECK_OK(dlt_sequential_append(seq, "head", c));
    char *s = summary(seq);
    /* 216 + 8 conv, 8 + 8 BN, 640 + 5 linear = 885; buffers 8 + 8 + 1 */
    check_text(s,
               "name         kind / shape                                                     params\n"
               "-----------  ---------------------------------------------------------------  ------\n"
               "(root)       sequential                                                          885\n"
               "0            conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))     224\n"
               "0.weight     [8, 3, 3, 3]                                                        216\n"
               "0.bias       [8]                                                                   8\n"
               "1            batchnorm2d(8, eps=1e-05, momentum=0.1)                              16\n"
               "1.weight     [8]                                                                   8\n"
               "1.bias       [8]                                                                   8\n"
               "2            relu                                                                  0\n"
               "3            max_pool2d(kernel_size=2, stride=2, padding=0)                        0\n"
               "4            flatten(start_dim=1, end_dim=-1)                                      0\n"
               "head         linear(in_features=128, out_features=5, bias=True)                  645\n"
               "head.weight  [5, 128]                                                            640\n"
               "head.bias    [5]                                                                   5\n"
               "parameters: 885 in 6 tensors, 885 trainable\n"
               "buffers: 17 elements in 3 tensors\n");
    /* truncation and sizing */
    size_t need = 0, need2 = 0;
    CHECK_OK(dlt_module_summary(seq, NULL, 0, &need));
    CHECK(s && need == strlen(s) + 1, "needed %zu for %zu characters", need, s ? strlen(s) : 0);
    char small[12];
    memset(small, 'x', sizeof small);
    CHECK_OK(dlt_module_summary(seq, small, sizeof small, &need2));
    CHECK(need2 == need && memcmp(small, "name       ", 11) == 0 && small[11] == '\0', "%.12s", small);
    CHECK_STATUS(dlt_module_summary(seq, NULL, 5, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_summary(NULL, small, sizeof small, NULL), DLT_ERR_NULL_POINTER);
    free(s);
    dlt_module_destroy(seq);

    /* a custom module: its own name, a tie, a frozen parameter, an f16 one, a nested child */
    dlt_module *m = custom("gpt"), *blk = custom("block"), *conv = NULL;
    REQUIRE(m && blk);
    const int64_t se[2] = {10, 4}, sb[1] = {4};
    dlt_tensor *wte = zeros(DLT_F32, se, 2), *scale = zeros(DLT_F16, sb, 1), *frozen = zeros(DLT_F32, sb, 1),
               *mask = zeros(DLT_F32, sb, 1);
    CHECK_OK(dlt_module_register_parameter(m, "wte", wte));
    CHECK_OK(dlt_module_register_buffer(m, "mask", mask));
    CHECK_OK(dlt_module_register_parameter(blk, "scale", scale));
    CHECK_OK(dlt_module_register_parameter(blk, "frozen", frozen));
    CHECK_OK(dlt_tensor_set_requires_grad(frozen, 0));
    dlt_conv2d_options o;
    dlt_conv2d_options_default(&o);
    o.stride[1] = 2, o.dilation[0] = 2, o.groups = 2, o.bias = 0;
    CHECK_OK(dlt_conv2d_create_ex(g_ctx, 4, 6, 1, 3, &o, &conv));
    CHECK_OK(dlt_module_register_module(blk, "conv", conv));
    CHECK_OK(dlt_module_register_module(m, "h0", blk));
    CHECK_OK(dlt_module_register_parameter(m, "lm_head", wte));
    s = summary(m);
    /* wte 40 (lm_head tied, once) + h0: scale 4, frozen 4, conv 6*2*1*3 = 36 -> 84 */
    check_text(s,
               "name            kind / shape                                                                            params\n"
               "--------------  --------------------------------------------------------------------------------------  ------\n"
               "(root)          gpt                                                                                         84\n"
               "wte             [10, 4]                                                                                     40\n"
               "lm_head         [10, 4] tied to wte                                                                          -\n"
               "h0              block                                                                                       44\n"
               "h0.scale        [4] f16                                                                                      4\n"
               "h0.frozen       [4]                                                                                          4\n"
               "h0.conv         conv2d(4, 6, kernel_size=(1, 3), stride=(1, 2), dilation=(2, 1), groups=2, bias=False)      36\n"
               "h0.conv.weight  [6, 2, 1, 3]                                                                                36\n"
               "parameters: 84 in 4 tensors, 80 trainable\n"
               "buffers: 4 elements in 1 tensor\n");
    free(s);
    dlt_tensor_release(wte), dlt_tensor_release(scale), dlt_tensor_release(frozen), dlt_tensor_release(mask);
    dlt_module_destroy(m);

    /* ResNet50's totals are torchvision's (25,557,032 parameters; 53 BNs: 3 buffers each) */
    dlt_module *r = NULL;
    CHECK_OK(dlt_resnet50_create(g_ctx, 1000, &r));
    s = summary(r);
    REQUIRE(s);
    CHECK(strstr(s, "\nparameters: 25,557,032 in 161 tensors, 25,557,032 trainable\n") != NULL);
    CHECK(strstr(s, "in 159 tensors\n") != NULL);
    CHECK(strstr(s, "\nlayer4.2.downsample") == NULL && strstr(s, "\nlayer4.0.downsample.0.weight ") != NULL);
    CHECK(strstr(s, "\nlayer1.0.conv1 ") != NULL && strstr(s, "conv2d(64, 64, kernel_size=(1, 1), stride=(1, 1), bias=False)"));
    int lines = 0;
    for (const char *q = s; *q; q++) lines += *q == '\n';
    /* header 2 + modules (1 + 4 stem + 4 layers + 16 blocks * 8 + 4 downsamples * 3 + avgpool + fc
     * = 151) + 161 parameters + 2 totals */
    CHECK(lines == 2 + 151 + 161 + 2, "%d lines", lines);
    free(s);
    dlt_module_destroy(r);
}

/* ---- option structs ---- */

static void test_option_structs(void) {
    dlt_conv2d_options o;
    memset(&o, 0x55, sizeof o);
    dlt_conv2d_options_default(&o);
    CHECK(o.size == sizeof o && o.bias == 1 && o.stride[0] == 1 && o.stride[1] == 1 && o.padding[0] == 0 &&
          o.padding[1] == 0 && o.dilation[0] == 1 && o.dilation[1] == 1 && o.groups == 1);
    CHECK(sizeof o == offsetof(dlt_conv2d_options, groups) + sizeof o.groups, "trailing padding");
    dlt_conv2d_options_default(NULL);
    /* the old constructor and the options give the same module (and the same draws) */
    dlt_module *a = NULL, *b = NULL;
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 21));
    CHECK_OK(dlt_conv2d_create(g_ctx, 4, 6, 3, 3, 2, 1, 1, 2, 0, &a));
    o.stride[0] = o.stride[1] = 2, o.padding[0] = o.padding[1] = 1, o.groups = 2, o.bias = 0;
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 21));
    CHECK_OK(dlt_conv2d_create_ex(g_ctx, 4, 6, 3, 3, &o, &b));
    dlt_tensor *wa = NULL, *wb = NULL;
    CHECK_OK(dlt_module_find(a, "weight", &wa));
    CHECK_OK(dlt_module_find(b, "weight", &wb));
    double va[6 * 2 * 9], vb[6 * 2 * 9];
    read_d(wa, va), read_d(wb, vb);
    CHECK(dlt_module_num_state(b) == 1 && memcmp(va, vb, sizeof va) == 0);
    dlt_module_destroy(a), dlt_module_destroy(b);
    /* non-square stride, padding and dilation: the module runs dlt_conv2d with them */
    dlt_conv2d_options_default(&o);
    o.stride[0] = 1, o.stride[1] = 2, o.padding[0] = 2, o.padding[1] = 0, o.dilation[0] = 2;
    CHECK_OK(dlt_conv2d_create_ex(g_ctx, 2, 3, 3, 2, &o, &a));
    CHECK(dlt_module_num_state(a) == 2, "bias by default");
    const int64_t xs[4] = {1, 2, 5, 6};
    dlt_tensor *x = rand_tensor(xs, 4, 1.0, NULL), *y = NULL, *y2 = NULL, *w = NULL, *bias = NULL;
    CHECK_OK(dlt_module_find(a, "weight", &w));
    CHECK_OK(dlt_module_find(a, "bias", &bias));
    CHECK_OK(dlt_tensor_rand_uniform(bias, -1, 1));
    CHECK_OK(dlt_module_forward(a, x, &y));
    CHECK_OK(dlt_conv2d(x, w, bias, 1, 2, 2, 0, 2, 1, 1, &y2));
    /* H: (5 + 4 - 2*2 - 1)/1 + 1 = 5; W: (6 - 2)/2 + 1 = 3 */
    CHECK(dlt_tensor_dim(y, 2) == 5 && dlt_tensor_dim(y, 3) == 3, "%lldx%lld", (long long)dlt_tensor_dim(y, 2),
          (long long)dlt_tensor_dim(y, 3));
    double v1[3 * 15], v2[3 * 15];
    read_d(y, v1), read_d(y2, v2);
    CHECK(memcmp(v1, v2, sizeof v1) == 0);
    dlt_tensor_release(y), dlt_tensor_release(y2), dlt_tensor_release(x);
    dlt_module_destroy(a);
    /* a struct below the first release's size is refused (test_options covers the rule) */
    dlt_conv2d_options old;
    dlt_conv2d_options_default(&old);
    old.size = 0;
    a = (dlt_module *)0x1;
    CHECK_STATUS(dlt_conv2d_create_ex(g_ctx, 4, 4, 1, 1, &old, &a), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "dlt_conv2d_options_default") != NULL, "%s", dlt_last_error());
    CHECK(a == (dlt_module *)0x1);
    CHECK_OK(dlt_conv2d_create_ex(g_ctx, 4, 4, 3, 3, NULL, &a)); /* all defaults */
    CHECK(dlt_module_num_state(a) == 2);
    dlt_module_destroy(a);
    dlt_conv2d_options_default(&o);
    o.groups = 3;
    CHECK_STATUS(dlt_conv2d_create_ex(g_ctx, 4, 4, 1, 1, &o, &a), DLT_ERR_INVALID_ARGUMENT);
    o.groups = 1, o.padding[1] = -1;
    CHECK_STATUS(dlt_conv2d_create_ex(g_ctx, 4, 4, 1, 1, &o, &a), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_conv2d_create_ex(NULL, 4, 4, 1, 1, NULL, &a), DLT_ERR_NULL_POINTER);

    /* BatchNorm2d: eps and momentum reach the forward (running_mean = momentum * batch mean) */
    dlt_batchnorm2d_options bo;
    dlt_batchnorm2d_options_default(&bo);
    CHECK(bo.size == sizeof bo && bo.eps == 1e-5 && bo.momentum == 0.1);
    bo.momentum = 0.5;
    CHECK_OK(dlt_batchnorm2d_create_ex(g_ctx, 2, &bo, &a));
    const int64_t bs[4] = {2, 2, 1, 2};
    double xv[8];
    x = rand_tensor(bs, 4, 1.0, xv);
    CHECK_OK(dlt_module_forward(a, x, &y));
    dlt_tensor *rm = NULL;
    CHECK_OK(dlt_module_find(a, "running_mean", &rm));
    double got[2];
    read_d(rm, got);
    for (int c = 0; c < 2; c++) {
        double mean = (xv[c * 2] + xv[c * 2 + 1] + xv[4 + c * 2] + xv[4 + c * 2 + 1]) / 4;
        CHECK(fabs(got[c] - 0.5 * mean) < 1e-6, "running_mean[%d] %g, want %g", c, got[c], 0.5 * mean);
    }
    dlt_tensor_release(y), dlt_tensor_release(x);
    dlt_module_destroy(a);
    bo.momentum = 2;
    CHECK_STATUS(dlt_batchnorm2d_create_ex(g_ctx, 2, &bo, &a), DLT_ERR_INVALID_ARGUMENT);
    CHECK_OK(dlt_batchnorm2d_create_ex(g_ctx, 2, NULL, &a));
    dlt_module_destroy(a);
    bo.size = 0;
    CHECK_STATUS(dlt_batchnorm2d_create_ex(g_ctx, 2, &bo, &a), DLT_ERR_INVALID_ARGUMENT);
    /* Linear */
    dlt_linear_options lo;
    dlt_linear_options_default(&lo);
    CHECK(lo.size == sizeof lo && lo.bias == 1);
    lo.bias = 0;
    CHECK_OK(dlt_linear_create_ex(g_ctx, 3, 2, &lo, &a));
    CHECK(dlt_module_num_state(a) == 1);
    dlt_module_destroy(a);
    CHECK_OK(dlt_linear_create_ex(g_ctx, 3, 2, NULL, &a));
    CHECK(dlt_module_num_state(a) == 2);
    dlt_module_destroy(a);
    CHECK_STATUS(dlt_linear_create_ex(g_ctx, 0, 2, NULL, &a), DLT_ERR_INVALID_ARGUMENT);
}

/* ---- tree queries ---- */

static void test_tree_queries(void) {
    dlt_module *r = NULL, *sub = NULL, *child = NULL;
    CHECK_OK(dlt_resnet_create(g_ctx, 18, 10, &r));
    CHECK(dlt_module_num_children(r) == 10, "%d children", dlt_module_num_children(r));
    const char *name = NULL;
    CHECK_OK(dlt_module_child(r, 4, &name, &child));
    CHECK(strcmp(name, "layer1") == 0 && strcmp(dlt_module_kind(child), "sequential") == 0);
    CHECK_OK(dlt_module_get_submodule(r, "layer2.0.downsample.1", &sub));
    CHECK(strcmp(dlt_module_kind(sub), "batchnorm2d") == 0);
    CHECK_OK(dlt_module_get_submodule(r, "", &sub));
    CHECK(sub == r);
    CHECK_OK(dlt_module_get_submodule(r, "layer1", &sub));
    CHECK(sub == child);
    CHECK_STATUS(dlt_module_get_submodule(r, "layer1.7.conv1", &sub), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "'layer1' has no child '7'") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_module_get_submodule(r, "layer1.", &sub), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_get_submodule(r, "fc.weight", &sub), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_child(r, 10, &name, NULL), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_child(NULL, 0, &name, NULL), DLT_ERR_NULL_POINTER);
    CHECK(dlt_module_num_children(NULL) == 0 && dlt_module_ctx(NULL) == NULL &&
          dlt_module_user_data(r) == NULL && dlt_module_user_data(NULL) == NULL);
    dlt_module_destroy(r);
}

int main(void) {
    g_ctx = th_cpu_ctx();
    snprintf(g_dir, sizeof g_dir, "/tmp/dlt_custom_XXXXXX");
    if (!mkdtemp(g_dir)) {
        printf("# cannot create a temporary directory\n");
        return 1;
    }
    RUN(test_custom_mlp_trains_like_float64);
    RUN(test_state_names_and_order);
    RUN(test_checkpoint_round_trip);
    RUN(test_training_mode_and_format);
    RUN(test_misuse);
    RUN(test_alloc_failures);
    RUN(test_forward_ex);
    RUN(test_summary_text);
    RUN(test_option_structs);
    RUN(test_tree_queries);
    rmdir(g_dir);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
