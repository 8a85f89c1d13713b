/*
 * test_nn_custom_train.c - custom modules at work, on the CPU: a custom module written in C
 * (nn_custom_common.h's MLP) trained by SGD with its gradients and first step checked against
 * float64 loops written here; state names and order (parameters, buffers, children, nesting,
 * tied weights); checkpoint round trips; train/eval and memory formats reaching custom
 * modules; dlt_module_forward_ex with several inputs and outputs. Misuse and allocation
 * failures: test_nn_custom_misuse.c.
 */
#include "../lib/core/status.h" /* DLT_CHECK (two_forward): internal, not a public macro */
#include "nn_custom_common.h"

static char g_dir[64];

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
    RUN(test_forward_ex);
    rmdir(g_dir);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
