/*
 * test_op_table.c - the op table (tests/ops/) on the CPU backend: every row's f32 forward
 * against its float64 reference (mode ref), its gradients against central finite
 * differences of that reference (mode grad: L = sum(u * y), u random; then a second
 * forward/backward without zeroing must give exactly twice the gradients, the accumulate
 * path of every kernel), and every error row (status, message, untouched out-pointer,
 * nothing left on the tape). See tests/ops/op_table.h for the schema and how to add an op.
 */
#include <stdint.h>

#include "harness.h"
#include "ops/op_common.h"

#define FD_STEP 1e-6
#define FD_MAX_POINTS 192
#define FWD_TOL 1e-5
#define GRAD_TOL 1e-4

static dlt_ctx *g_ctx;
static const ot_case *g_case;
static const ot_err *g_err;

static const ot_stem *const STEMS[] = {
#define OT_REF(s) &ot_stem_##s,
    OT_STEMS(OT_REF)
#undef OT_REF
};

/* L = sum(u * ref(in)) for the float64 reference */
static double loss_of(const ot_case *c, double *const *in, const double *u, double *scratch) {
    c->ref(c, in, scratch);
    double l = 0.0;
    const int64_t n = ot_out_numel(c);
    for (int64_t i = 0; i < n; i++) l += u[i] * scratch[i];
    return l;
}

static void run_case(void) {
    const ot_case *c = g_case;
    double *vals[OT_MAX_IN] = {NULL};
    dlt_tensor *in[OT_MAX_IN] = {NULL}, *y = NULL, *ut = NULL;
    int64_t nv[OT_MAX_IN] = {0};
    const int64_t ny = ot_out_numel(c);
    double *yref = malloc((size_t)(ny > 0 ? ny : 1) * sizeof *yref);
    double *scratch = malloc((size_t)(ny > 0 ? ny : 1) * sizeof *scratch);
    double *u = ot_random(ot_hash(c->name) ^ 0x5eed, ny, -1.0, 1.0, DLT_F32);
    for (int i = 0; i < c->n_in; i++) {
        vals[i] = ot_values(c, i, DLT_F32, &nv[i]);
        if (c->in[i].kind != OT_NULL) {
            in[i] = ot_tensor(g_ctx, c, i, DLT_F32, vals[i]);
            REQUIRE(in[i] != NULL, "input %d: %s", i, dlt_last_error());
        }
    }
    /* forward: shape, dtype, values */
    CHECK_OK(c->fwd(c, in, &y));
    REQUIRE(dlt_tensor_ndim(y) == c->out_ndim, "%s: ndim %d, expected %d", c->name, dlt_tensor_ndim(y), c->out_ndim);
    for (int32_t d = 0; d < c->out_ndim; d++)
        CHECK(dlt_tensor_dim(y, d) == c->out_shape[d], "%s: dim %d is %lld, expected %lld", c->name, d,
              (long long)dlt_tensor_dim(y, d), (long long)c->out_shape[d]);
    const int32_t want_dt = c->out_dtype >= 0 ? c->out_dtype : DLT_F32;
    CHECK(dlt_tensor_dtype(y) == want_dt, "%s: dtype %s, expected %s", c->name, dlt_dtype_name(dlt_tensor_dtype(y)),
          dlt_dtype_name(want_dt));
    if (!(c->flags & OT_NO_REF)) {
        double *yv = ot_read(y);
        c->ref(c, vals, yref);
        const double err = ot_relnorm(yv, yref, ny), tol = c->tol > 0 ? c->tol : FWD_TOL;
        CHECK(err <= tol, "%s: forward rel err %.3g > %.3g (first: got %.9g want %.9g)", c->name, err, tol,
              ny ? yv[0] : 0.0, ny ? yref[0] : 0.0);
        free(yv);
    }
    if (!(c->flags & OT_NO_GRAD)) {
        {
            float *uf = malloc((size_t)(ny > 0 ? ny : 1) * sizeof *uf);
            for (int64_t i = 0; i < ny; i++) uf[i] = (float)u[i];
            CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_F32, c->out_shape, c->out_ndim, DLT_FORMAT_CONTIGUOUS, uf,
                                          (size_t)ny * sizeof(float), &ut));
            free(uf);
            if (dlt_tensor_dtype(y) != DLT_F32) {
                dlt_tensor *t = NULL;
                CHECK_OK(dlt_tensor_cast(ut, dlt_tensor_dtype(y), &t));
                dlt_tensor_release(ut);
                ut = t;
            }
        }
        CHECK_OK(dlt_backward(y, ut));
        double *g1[OT_MAX_IN] = {NULL};
        for (int i = 0; i < c->n_in; i++) {
            if (c->in[i].kind != OT_X && c->in[i].kind != OT_P) continue;
            dlt_tensor *g = dlt_tensor_grad(in[i]);
            REQUIRE(g != NULL, "%s: input %d has no gradient", c->name, i);
            g1[i] = ot_read(g);
            if (c->flags & (OT_NO_REF | OT_NO_FD)) continue;
            /* finite differences on a spread subset */
            const int64_t n = nv[i], pts = n < FD_MAX_POINTS ? n : FD_MAX_POINTS;
            double *fd = malloc((size_t)(pts > 0 ? pts : 1) * sizeof *fd);
            double *an = malloc((size_t)(pts > 0 ? pts : 1) * sizeof *an);
            for (int64_t p = 0; p < pts; p++) {
                const int64_t j = pts == n ? p : p * n / pts;
                const double v0 = vals[i][j];
                vals[i][j] = v0 + FD_STEP;
                const double lp = loss_of(c, vals, u, scratch);
                vals[i][j] = v0 - FD_STEP;
                const double lm = loss_of(c, vals, u, scratch);
                vals[i][j] = v0;
                fd[p] = (lp - lm) / (2 * FD_STEP);
                an[p] = g1[i][j];
            }
            const double err = ot_relnorm(an, fd, pts), tol = c->tol > 0 ? 10 * c->tol : GRAD_TOL;
            CHECK(err <= tol, "%s: gradient of input %d rel err %.3g > %.3g (first: got %.9g want %.9g)", c->name, i,
                  err, tol, pts ? an[0] : 0.0, pts ? fd[0] : 0.0);
            free(fd);
            free(an);
        }
        /* again without zeroing: the leaves accumulate */
        dlt_tensor_release(y);
        y = NULL;
        CHECK_OK(c->fwd(c, in, &y));
        CHECK_OK(dlt_backward(y, ut));
        for (int i = 0; i < c->n_in; i++) {
            if (!g1[i]) continue;
            double *g2 = ot_read(dlt_tensor_grad(in[i]));
            for (int64_t j = 0; j < nv[i]; j++) g1[i][j] *= 2.0;
            const double err = ot_relnorm(g2, g1[i], nv[i]);
            CHECK(err <= 1e-6, "%s: accumulated gradient of input %d rel err %.3g (not twice the first)", c->name, i,
                  err);
            free(g2);
            free(g1[i]);
        }
    }
    dlt_tensor_release(y);
    dlt_tensor_release(ut);
    for (int i = 0; i < c->n_in; i++) {
        dlt_tensor_release(in[i]);
        free(vals[i]);
    }
    free(yref);
    free(scratch);
    free(u);
    int64_t live = -1;
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live));
    CHECK(live == 0, "%s: %lld tape nodes alive after release", c->name, (long long)live);
}

static void run_err(void) {
    int touched = 0;
    dlt_clear_error();
    const dlt_status st = g_err->call(g_ctx, &touched);
    CHECK(st == g_err->expect, "%s: status %d (%s), expected %d (%s): %s", g_err->name, st, dlt_status_string(st),
          g_err->expect, dlt_status_string(g_err->expect), dlt_last_error());
    if (st != DLT_OK) CHECK(strncmp(dlt_last_error(), "dlt_", 4) == 0, "%s: message does not name the function: '%s'",
                            g_err->name, dlt_last_error());
    CHECK(!touched, "%s: the out-pointer was written on failure", g_err->name);
    int64_t live = -1;
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live));
    CHECK(live == 0, "%s: %lld tape nodes alive", g_err->name, (long long)live);
}

int main(void) {
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &g_ctx) != DLT_OK) {
        printf("Bail out! no CPU context: %s\n", dlt_last_error());
        return 1;
    }
    char label[160];
    for (size_t s = 0; s < sizeof STEMS / sizeof STEMS[0]; s++) {
        const ot_stem *st = STEMS[s];
        for (int i = 0; i < st->n_cases; i++) {
            g_case = &st->cases[i];
            snprintf(label, sizeof label, "%s/%s (ref+grad)", st->stem, g_case->name);
            th_run(run_case, label);
        }
        for (int i = 0; i < st->n_errors; i++) {
            g_err = &st->errors[i];
            snprintf(label, sizeof label, "%s/error: %s", st->stem, g_err->name);
            th_run(run_err, label);
        }
    }
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
