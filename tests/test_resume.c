/*
 * test_resume.c - what an exactly resumable training run needs from the library (issue 17,
 * examples/gpt_train.c): the generator's whole state (dlt_ctx_get_rng_state /
 * dlt_ctx_set_rng_state) and a checkpoint carrying the program's own entries
 * (dlt_checkpoint_save_ex). The example's own bitwise resume test is
 * tests/scripts/gpt_examples.sh; here the two functions are checked on their own.
 */
#include "harness.h"

static dlt_ctx *g_ctx;

static dlt_tensor *filled(int64_t n, double v) {
    dlt_tensor *t = NULL;
    int64_t s[1] = {n};
    if (dlt_tensor_empty(g_ctx, DLT_F32, s, 1, 0, &t) != DLT_OK || dlt_tensor_fill(t, v) != DLT_OK) return NULL;
    return t;
}

/* dropout(ones(n), 0.5) as 0/1 keep flags */
static void dropout_mask(dlt_tensor *ones, uint8_t *keep, int64_t n) {
    dlt_tensor *y = NULL;
    CHECK_OK(dlt_dropout(ones, 0.5, 1, &y));
    float *v = malloc((size_t)n * sizeof *v);
    REQUIRE(v != NULL);
    CHECK_OK(dlt_tensor_copy_to_host(y, v, (size_t)n * sizeof *v));
    for (int64_t i = 0; i < n; i++) keep[i] = v[i] != 0.0f;
    free(v);
    dlt_tensor_release(y);
}

static void test_rng_state_round_trip(void) {
    enum { N = 4096 };
    static uint8_t a[N], b[N], c[N];
    dlt_tensor *ones = filled(N, 1.0);
    REQUIRE(ones != NULL);
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 1337));
    dropout_mask(ones, a, N); /* advances the offset */
    uint64_t seed = 0, off = 0, seed0 = 0, off0 = 0;
    CHECK_OK(dlt_ctx_get_rng_state(g_ctx, &seed, &off));
    CHECK_OK(dlt_ctx_get_seed(g_ctx, &seed0, &off0));
    CHECK(seed == 1337 && off == off0 && off > 0, "state %llu/%llu, get_seed %llu/%llu", (unsigned long long)seed,
          (unsigned long long)off, (unsigned long long)seed0, (unsigned long long)off0);
    dropout_mask(ones, b, N); /* the draw after the read */
    /* another seed and offset in between, then the state back: the same draw again */
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 99));
    dropout_mask(ones, c, N);
    CHECK_OK(dlt_ctx_set_rng_state(g_ctx, seed, off));
    dropout_mask(ones, c, N);
    CHECK(memcmp(b, c, N) == 0, "the restored state draws another mask");
    CHECK(memcmp(a, b, N) != 0, "consecutive draws gave the same mask");
    /* a fresh context at the same state draws the same mask too (what a resumed process does) */
    dlt_ctx *other = NULL;
    CHECK_OK(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &other));
    CHECK_OK(dlt_ctx_set_rng_state(other, seed, off));
    dlt_tensor *o1 = NULL, *y = NULL;
    int64_t s[1] = {N};
    CHECK_OK(dlt_tensor_empty(other, DLT_F32, s, 1, 0, &o1));
    CHECK_OK(dlt_tensor_fill(o1, 1.0));
    CHECK_OK(dlt_dropout(o1, 0.5, 1, &y));
    float *v = malloc(N * sizeof *v);
    CHECK_OK(dlt_tensor_copy_to_host(y, v, N * sizeof *v));
    int same = 1;
    for (int i = 0; i < N; i++) same &= (v[i] != 0.0f) == b[i];
    CHECK(same, "another context at the same state drew another mask");
    free(v);
    dlt_tensor_release(y);
    dlt_tensor_release(o1);
    dlt_ctx_destroy(other);
    dlt_tensor_release(ones);
}

static void test_rng_state_errors(void) {
    uint64_t s = 7, o = 9;
    CHECK_STATUS(dlt_ctx_get_rng_state(NULL, &s, &o), DLT_ERR_NULL_POINTER);
    CHECK(s == 7 && o == 9, "outputs written on failure");
    CHECK_STATUS(dlt_ctx_set_rng_state(NULL, 1, 2), DLT_ERR_NULL_POINTER);
    CHECK_OK(dlt_ctx_get_rng_state(g_ctx, NULL, NULL)); /* both outputs optional */
}

static void path_in(char *buf, size_t n, const char *name) {
    const char *dir = getenv("TMPDIR");
    snprintf(buf, n, "%s/dlt_test_resume_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(), name);
}

static void test_checkpoint_extras(void) {
    dlt_module *m = NULL, *m2 = NULL;
    CHECK_OK(dlt_linear_create(g_ctx, 3, 2, 1, &m));
    CHECK_OK(dlt_linear_create(g_ctx, 3, 2, 1, &m2));
    dlt_tensor *p[2];
    CHECK_OK(dlt_module_params(m, p, 2, NULL));
    dlt_adamw_options ao;
    dlt_adamw_options_default(&ao);
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_adamw_create_ex(p, 2, &ao, &opt));
    int64_t it = 1234567890123LL, one = 1;
    float best = 1.4640f;
    dlt_tensor *t_it = NULL, *t_best = NULL;
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I64, &one, 0, 0, &it, sizeof it, &t_it));
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_F32, &one, 0, 0, &best, sizeof best, &t_best));
    const char *names[2] = {"train.iter", "train.best_val_loss"};
    dlt_tensor *extra[2] = {t_it, t_best};
    char path[512];
    path_in(path, sizeof path, "ckpt.safetensors");
    CHECK_OK(dlt_checkpoint_save_ex(path, m, opt, NULL, 0, 5, names, extra, 2));
    /* the entries read back as written */
    dlt_safetensors *f = NULL;
    CHECK_OK(dlt_safetensors_open(path, &f));
    dlt_tensor *r = NULL;
    CHECK_OK(dlt_safetensors_get(f, g_ctx, "train.iter", &r));
    int64_t it2 = 0;
    CHECK_OK(dlt_tensor_copy_to_host(r, &it2, sizeof it2));
    CHECK(it2 == it && dlt_tensor_dtype(r) == DLT_I64 && dlt_tensor_ndim(r) == 0, "train.iter %lld",
          (long long)it2);
    dlt_tensor_release(r);
    CHECK_OK(dlt_safetensors_get(f, g_ctx, "train.best_val_loss", &r));
    float b2 = 0;
    CHECK_OK(dlt_tensor_copy_to_host(r, &b2, sizeof b2));
    CHECK(b2 == best, "best %g", b2);
    dlt_tensor_release(r);
    dlt_safetensors_close(f);
    /* loads ignore them */
    int64_t ep = -1, st = -1;
    CHECK_OK(dlt_checkpoint_load(path, m2, NULL, NULL, &ep, &st));
    CHECK(ep == 0 && st == 5, "position %lld/%lld", (long long)ep, (long long)st);
    CHECK_OK(dlt_module_load(m2, path));
    /* misuse: nothing is written */
    char bad[512];
    path_in(bad, sizeof bad, "bad.safetensors");
    const char *wrong[1] = {"iter"}, *reserved[1] = {"train.step"}, *twice[2] = {"train.a", "train.a"},
               *empty[1] = {"train."};
    CHECK_STATUS(dlt_checkpoint_save_ex(bad, m, opt, NULL, 0, 5, wrong, extra, 1), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "train.") != NULL, "message: %s", dlt_last_error());
    CHECK_STATUS(dlt_checkpoint_save_ex(bad, m, opt, NULL, 0, 5, reserved, extra, 1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_checkpoint_save_ex(bad, m, opt, NULL, 0, 5, empty, extra, 1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_checkpoint_save_ex(bad, m, opt, NULL, 0, 5, twice, extra, 2), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_checkpoint_save_ex(bad, m, opt, NULL, 0, 5, names, NULL, 2), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_checkpoint_save_ex(bad, m, opt, NULL, 0, 5, names, extra, -1), DLT_ERR_INVALID_ARGUMENT);
    dlt_tensor *holes[2] = {t_it, NULL};
    CHECK_STATUS(dlt_checkpoint_save_ex(bad, m, opt, NULL, 0, 5, names, holes, 2), DLT_ERR_NULL_POINTER);
    struct stat sb;
    CHECK(stat(bad, &sb) != 0, "a refused save left a file");
    /* n_extra 0 is dlt_checkpoint_save */
    CHECK_OK(dlt_checkpoint_save_ex(bad, m, opt, NULL, 0, 5, NULL, NULL, 0));
    unlink(bad);
    unlink(path);
    dlt_tensor_release(t_it);
    dlt_tensor_release(t_best);
    dlt_optimizer_destroy(opt);
    dlt_module_destroy(m);
    dlt_module_destroy(m2);
}

int main(void) {
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &g_ctx) != DLT_OK) {
        printf("Bail out! no CPU context: %s\n", dlt_last_error());
        return 1;
    }
    RUN(test_rng_state_round_trip);
    RUN(test_rng_state_errors);
    RUN(test_checkpoint_extras);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
