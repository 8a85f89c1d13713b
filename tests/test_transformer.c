/*
 * test_transformer.c - the Transformer ops together (CPU backend):
 *   - autocast: each op's result dtype in a bf16 region follows PyTorch's CUDA policy
 *     (lower precision for matmul/linear/attention, f32 for softmax/layer_norm/losses,
 *     promotion for the residual add, the input's dtype for the rest);
 *   - a tiny causal language model (embedding + position embedding, one pre-LN block with
 *     attention and a GELU MLP, final layer norm, the head tied to the embedding): every
 *     parameter's gradient against central finite differences of the loss computed by the
 *     library itself in f32 (step 1e-2: truncation ~1e-4, rounding ~1e-5 relative);
 *   - dropout: the same seed gives the same mask twice, another seed another mask.
 */
#include <math.h>
#include <stdint.h>

#include "harness.h"

static dlt_ctx *g_ctx;

static dlt_tensor *rand_t(const int64_t *shape, int32_t nd, double std, int grad) {
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, shape, nd, DLT_FORMAT_CONTIGUOUS, &t));
    CHECK_OK(dlt_tensor_rand_normal(t, 0.0, std));
    if (grad) CHECK_OK(dlt_tensor_set_requires_grad(t, 1));
    return t;
}

/* ---- autocast policy ---------------------------------------------------------------- */

static void expect_dtype(dlt_tensor *t, int32_t dt, const char *what) {
    CHECK(dlt_tensor_dtype(t) == dt, "%s: %s, expected %s", what, dlt_dtype_name(dlt_tensor_dtype(t)),
          dlt_dtype_name(dt));
    dlt_tensor_release(t);
}

static void test_autocast_policy(void) {
    const int64_t xs[3] = {2, 4, 8}, ws[2] = {8, 8}, qs[4] = {1, 2, 4, 4}, es[2] = {10, 8}, is[2] = {2, 4};
    dlt_tensor *x = rand_t(xs, 3, 1.0, 0), *w = rand_t(ws, 2, 0.3, 1), *q = rand_t(qs, 4, 1.0, 0);
    dlt_tensor *emb = rand_t(es, 2, 1.0, 1), *idx = NULL, *xb = NULL, *y = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_I64, is, 2, 0, &idx));
    CHECK_OK(dlt_autocast_begin(g_ctx, DLT_BF16));
    CHECK_OK(dlt_linear(x, w, NULL, &xb));
    CHECK(dlt_tensor_dtype(xb) == DLT_BF16, "linear under bf16 autocast");
    const int64_t tshape[3] = {2, 8, 4};
    dlt_tensor *xt = NULL;
    CHECK_OK(dlt_transpose(x, 1, 2, &xt));
    CHECK(dlt_tensor_dim(xt, 1) == tshape[1], "transpose");
    CHECK_OK(dlt_matmul(x, xt, &y)); expect_dtype(y, DLT_BF16, "matmul");
    CHECK_OK(dlt_scaled_dot_product_attention(q, q, q, 1, 0.0, 0.0, &y)); expect_dtype(y, DLT_BF16, "attention");
    CHECK_OK(dlt_softmax(xb, -1, &y)); expect_dtype(y, DLT_F32, "softmax of bf16");
    CHECK_OK(dlt_log_softmax(xb, -1, &y)); expect_dtype(y, DLT_F32, "log_softmax of bf16");
    const int64_t ns = 8;
    CHECK_OK(dlt_layer_norm(xb, &ns, 1, NULL, NULL, 1e-5, &y)); expect_dtype(y, DLT_F32, "layer_norm of bf16");
    CHECK_OK(dlt_add(x, xb, &y)); expect_dtype(y, DLT_F32, "residual f32 + bf16");
    CHECK_OK(dlt_gelu(xb, DLT_GELU_TANH, &y)); expect_dtype(y, DLT_BF16, "gelu of bf16");
    CHECK_OK(dlt_dropout(xb, 0.1, 1, &y)); expect_dtype(y, DLT_BF16, "dropout of bf16");
    CHECK_OK(dlt_exp(xb, &y)); expect_dtype(y, DLT_F32, "exp of bf16");
    CHECK_OK(dlt_tanh(xb, &y)); expect_dtype(y, DLT_BF16, "tanh of bf16");
    const int32_t d1 = 1;
    CHECK_OK(dlt_sum_dims(xb, &d1, 1, 0, &y)); expect_dtype(y, DLT_F32, "sum of bf16");
    CHECK_OK(dlt_embedding(emb, idx, DLT_NO_PADDING_IDX, &y)); expect_dtype(y, DLT_F32, "embedding of f32 weights");
    const int64_t tg[2] = {2, 4};
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_I64, tg, 2, 0, &t));
    CHECK_OK(dlt_cross_entropy(xb, t, -100, DLT_REDUCTION_MEAN, &y)); expect_dtype(y, DLT_F32, "cross_entropy of bf16");
    CHECK_OK(dlt_autocast_end(g_ctx));
    dlt_tensor *all[] = {x, w, q, emb, idx, xb, xt, t};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dlt_tensor_release(all[i]);
}

/* ---- a tiny causal language model --------------------------------------------------- */

enum { V = 11, C = 16, T = 6, B = 2, NH = 2, HD = C / NH };
enum { P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_LN2W, P_FCW, P_FCB, P_MLPW, P_LNFW, NP };

typedef struct lm {
    dlt_tensor *p[NP];
    dlt_tensor *idx, *tgt, *pos;
} lm;

/* loss = cross_entropy(head(block(wte[idx] + wpe[pos])), tgt); every intermediate released */
static dlt_status lm_loss(const lm *m, dlt_tensor **loss) {
    dlt_tensor *k[64];
    int nk = 0;
    dlt_tensor *t, *x, *h, *qkv, *parts[3], *q, *kk, *v, *a, *o;
    dlt_status st;
    const int64_t cs = C;
#define K(call, out)                                                                          \
    do {                                                                                      \
        if ((st = (call)) != DLT_OK) goto done;                                               \
        k[nk++] = (out);                                                                      \
    } while (0)
    K(dlt_embedding(m->p[P_WTE], m->idx, DLT_NO_PADDING_IDX, &t), t);
    K(dlt_embedding(m->p[P_WPE], m->pos, DLT_NO_PADDING_IDX, &h), h);
    K(dlt_add(t, h, &x), x); /* [B,T,C] + [T,C] */
    /* attention */
    K(dlt_layer_norm(x, &cs, 1, m->p[P_LN1W], m->p[P_LN1B], 1e-5, &h), h);
    K(dlt_linear(h, m->p[P_QKVW], m->p[P_QKVB], &qkv), qkv);
    int32_t n = 0;
    st = dlt_split(qkv, C, 2, parts, 3, &n);
    if (st != DLT_OK) goto done;
    for (int i = 0; i < 3; i++) k[nk++] = parts[i];
    dlt_tensor *heads[3];
    for (int i = 0; i < 3; i++) {
        const int64_t s[4] = {B, T, NH, HD};
        const int32_t perm[4] = {0, 2, 1, 3};
        K(dlt_reshape(parts[i], s, 4, &t), t);
        K(dlt_permute(t, perm, 4, &heads[i]), heads[i]);
    }
    q = heads[0], kk = heads[1], v = heads[2];
    K(dlt_scaled_dot_product_attention(q, kk, v, 1, 0.0, 0.0, &a), a);
    {
        const int32_t perm[4] = {0, 2, 1, 3};
        const int64_t s[3] = {B, T, C};
        K(dlt_permute(a, perm, 4, &t), t);
        K(dlt_reshape(t, s, 3, &o), o);
    }
    K(dlt_linear(o, m->p[P_PROJW], NULL, &t), t);
    K(dlt_add(x, t, &h), h);
    x = h;
    /* MLP */
    K(dlt_layer_norm(x, &cs, 1, m->p[P_LN2W], NULL, 1e-5, &h), h);
    K(dlt_linear(h, m->p[P_FCW], m->p[P_FCB], &t), t);
    K(dlt_gelu(t, DLT_GELU_TANH, &h), h);
    K(dlt_linear(h, m->p[P_MLPW], NULL, &t), t);
    K(dlt_add(x, t, &h), h);
    x = h;
    /* head tied to the embedding */
    K(dlt_layer_norm(x, &cs, 1, m->p[P_LNFW], NULL, 1e-5, &h), h);
    K(dlt_linear(h, m->p[P_WTE], NULL, &t), t); /* [B,T,V] */
    st = dlt_cross_entropy(t, m->tgt, -100, DLT_REDUCTION_MEAN, loss);
#undef K
done:
    for (int i = 0; i < nk; i++) dlt_tensor_release(k[i]);
    return st;
}

static void lm_init(lm *m) {
    const int64_t shapes[NP][2] = {{V, C}, {T, C}, {C, 0}, {C, 0}, {3 * C, C}, {3 * C, 0}, {C, C},
                                   {C, 0}, {4 * C, C}, {4 * C, 0}, {C, 4 * C}, {C, 0}};
    for (int i = 0; i < NP; i++) {
        const int32_t nd = shapes[i][1] ? 2 : 1;
        m->p[i] = rand_t(shapes[i], nd, nd == 1 ? 0.2 : 0.3, 1);
        if (nd == 1 && (i == P_LN1W || i == P_LN2W || i == P_LNFW)) { /* weights near 1 */
            dlt_tensor *one = NULL;
            CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, shapes[i], 1, 0, &one));
            CHECK_OK(dlt_tensor_rand_uniform(one, 0.8, 1.2));
            CHECK_OK(dlt_tensor_copy(m->p[i], one));
            dlt_tensor_release(one);
        }
    }
    int64_t iv[B * T], tv[B * T], pv[T];
    for (int i = 0; i < B * T; i++) iv[i] = (i * 7 + 3) % V, tv[i] = (i * 5 + 1) % V;
    for (int i = 0; i < T; i++) pv[i] = i;
    const int64_t bt[2] = {B, T}, t1 = T;
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I64, bt, 2, 0, iv, sizeof iv, &m->idx));
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I64, bt, 2, 0, tv, sizeof tv, &m->tgt));
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I64, &t1, 1, 0, pv, sizeof pv, &m->pos));
}

static void lm_free(lm *m) {
    for (int i = 0; i < NP; i++) dlt_tensor_release(m->p[i]);
    dlt_tensor_release(m->idx), dlt_tensor_release(m->tgt), dlt_tensor_release(m->pos);
}

static double loss_value(const lm *m) {
    dlt_tensor *l = NULL;
    double v = NAN;
    int32_t prev;
    CHECK_OK(dlt_grad_set_enabled(g_ctx, 0, &prev));
    CHECK_OK(lm_loss(m, &l));
    CHECK_OK(dlt_tensor_item(l, &v));
    dlt_tensor_release(l);
    CHECK_OK(dlt_grad_set_enabled(g_ctx, prev, NULL));
    return v;
}

static void test_block_gradients(void) {
    lm m;
    lm_init(&m);
    dlt_tensor *l = NULL;
    CHECK_OK(lm_loss(&m, &l));
    CHECK_OK(dlt_backward(l, NULL));
    dlt_tensor_release(l);
    const double h = 1e-2;
    for (int i = 0; i < NP; i++) {
        const int64_t n = dlt_tensor_numel(m.p[i]);
        float *w = malloc((size_t)n * sizeof *w), *g = malloc((size_t)n * sizeof *g);
        CHECK_OK(dlt_tensor_copy_to_host(m.p[i], w, (size_t)n * sizeof *w));
        CHECK_OK(dlt_tensor_copy_to_host(dlt_tensor_grad(m.p[i]), g, (size_t)n * sizeof *g));
        double num = 0, den = 0;
        for (int s = 0; s < 10; s++) {
            const int64_t j = (s * 7919) % n;
            const float w0 = w[j];
            w[j] = w0 + (float)h;
            CHECK_OK(dlt_tensor_copy_from_host(m.p[i], w, (size_t)n * sizeof *w));
            const double lp = loss_value(&m);
            w[j] = w0 - (float)h;
            CHECK_OK(dlt_tensor_copy_from_host(m.p[i], w, (size_t)n * sizeof *w));
            const double lm_ = loss_value(&m);
            w[j] = w0;
            CHECK_OK(dlt_tensor_copy_from_host(m.p[i], w, (size_t)n * sizeof *w));
            const double fd = (lp - lm_) / (2 * h);
            num += (fd - g[j]) * (fd - g[j]);
            den += fd * fd;
        }
        const double err = sqrt(num) / (sqrt(den) + 1e-12);
        CHECK(err < 5e-3, "parameter %d: gradient rel err %.3g against finite differences", i, err);
        free(w);
        free(g);
    }
    lm_free(&m);
    int64_t live = -1;
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live));
    CHECK(live == 0, "%lld tape nodes alive", (long long)live);
}

/* ---- dropout determinism ------------------------------------------------------------ */

static void test_dropout_seeds(void) {
    const int64_t n = 4096;
    dlt_tensor *x = NULL, *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, &n, 1, 0, &x));
    CHECK_OK(dlt_tensor_fill(x, 1.0));
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 5));
    CHECK_OK(dlt_dropout(x, 0.5, 1, &a));
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 5));
    CHECK_OK(dlt_dropout(x, 0.5, 1, &b));
    CHECK_OK(dlt_dropout(x, 0.5, 1, &c)); /* the next offset: another mask */
    float *va = malloc(n * 4), *vb = malloc(n * 4), *vc = malloc(n * 4);
    CHECK_OK(dlt_tensor_copy_to_host(a, va, n * 4));
    CHECK_OK(dlt_tensor_copy_to_host(b, vb, n * 4));
    CHECK_OK(dlt_tensor_copy_to_host(c, vc, n * 4));
    int same_ab = 1, diff_ac = 0;
    for (int64_t i = 0; i < n; i++) same_ab &= va[i] == vb[i], diff_ac += va[i] != vc[i];
    CHECK(same_ab, "the same seed gave two masks");
    CHECK(diff_ac > n / 4, "consecutive calls gave nearly the same mask (%d differences)", diff_ac);
    free(va), free(vb), free(vc);
    dlt_tensor_release(x), dlt_tensor_release(a), dlt_tensor_release(b), dlt_tensor_release(c);
}

int main(void) {
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &g_ctx) != DLT_OK) {
        printf("Bail out! %s\n", dlt_last_error());
        return 1;
    }
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 1234));
    RUN(test_autocast_policy);
    RUN(test_block_gradients);
    RUN(test_dropout_seeds);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
