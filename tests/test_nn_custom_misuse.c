/*
 * test_nn_custom_misuse.c - custom modules misused, on the CPU: NULL callback, bad and
 * duplicate names, other contexts, built-in targets, failing callbacks (status, message,
 * nothing leaked); host allocation failures at every point of registration, summaries and
 * several-output forwards.
 */
#include "../lib/core/internal.h" /* reference counts: a failed registration keeps none */
#include "nn_custom_common.h"

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

int main(void) {
    g_ctx = th_cpu_ctx();
    RUN(test_misuse);
    RUN(test_alloc_failures);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
