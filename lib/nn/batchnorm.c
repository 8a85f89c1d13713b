/*
 * batchnorm.c - the BatchNorm2d module kind: "weight" (ones), "bias" (zeros),
 * "running_mean" (zeros), "running_var" (ones), "num_batches_tracked" (int64, shape [] as
 * in PyTorch), run by dlt_batch_norm2d_act (lib/ops/batchnorm.c), which also takes a fused
 * residual add and ReLU (a Sequential's "BN, ReLU" and the ResNet blocks use them).
 *
 * num_batches_tracked: a training forward must count, but writing the count into the
 * (device) tensor on every forward would cost a kernel or a host round trip per BN. Each
 * BN counts on the host (pending) and the sync hook writes the count into the tensor when
 * state is read (state entries, find, save). synced_version is the tensor's version after
 * our last write: if it differs, someone else wrote the tensor (a user copy) and its device
 * value is read back (a synchronisation, only then). After a checkpoint load the loaded hook
 * forgets the pending count and forces that read-back. A CUDA graph replay runs no host
 * code, so replayed forwards are added by the replayed hook.
 */
#include <math.h>
#include <stdio.h>

#include "../core/options.h"
#include "nn_internal.h"

enum { BN_WEIGHT, BN_BIAS, BN_MEAN, BN_VAR, BN_TRACKED };

typedef struct bn_attrs {
    double eps, momentum;
    int64_t pending;         /* training forwards not yet written into the tensor */
    int64_t value;           /* the count the tensor holds when synced_version matches */
    uint64_t synced_version; /* tensor version after our last write */
} bn_attrs;

dlt_status dlt__batchnorm_forward_act(dlt_module *bn, dlt_tensor *x, dlt_tensor *residual,
                                      int32_t relu, dlt_tensor **out) {
    bn_attrs *a = DLT__IMPL(bn, bn_attrs);
    const dlt__state *s = bn->state;
    DLT_CHECK(dlt_batch_norm2d_act(x, residual, relu, s[BN_WEIGHT].t, s[BN_BIAS].t, s[BN_MEAN].t,
                                   s[BN_VAR].t, bn->training, a->momentum, a->eps, out));
    if (bn->training) a->pending++;
    return DLT_OK;
}

static dlt_status bn_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in, dlt_tensor **out,
                             int32_t n_out) {
    (void)n_in, (void)n_out;
    return dlt__batchnorm_forward_act(m, in[0], NULL, 0, &out[0]);
}

static dlt_status bn_forward_relu(dlt_module *m, dlt_tensor *x, dlt_tensor **out) {
    return dlt__batchnorm_forward_act(m, x, NULL, 1, out);
}

static dlt_status bn_sync(dlt_module *m, const char *func) {
    bn_attrs *a = DLT__IMPL(m, bn_attrs);
    if (a->pending == 0) return DLT_OK;
    dlt_tensor *t = m->state[BN_TRACKED].t;
    int64_t v = a->value;
    if (t->version != a->synced_version) {
        /* written by someone else since our last write: its value is the base */
        dlt_status st = dlt_tensor_copy_to_host(t, &v, sizeof v);
        if (st != DLT_OK) return dlt__err_wrap(st, func);
    }
    v += a->pending;
    dlt_status st = dlt_tensor_copy_from_host(t, &v, sizeof v);
    if (st != DLT_OK) return dlt__err_wrap(st, func);
    a->value = v;
    a->pending = 0;
    a->synced_version = t->version;
    return DLT_OK;
}

static void bn_loaded(dlt_module *m) {
    bn_attrs *a = DLT__IMPL(m, bn_attrs);
    a->pending = 0;
    /* force a read-back before the next write: the tensor holds the loaded count */
    a->synced_version = m->state[BN_TRACKED].t->version - 1;
}

static void bn_replayed(dlt_module *m, int64_t k) {
    if (m->training) DLT__IMPL(m, bn_attrs)->pending += k;
}

static int bn_describe(const dlt_module *m, char *buf, size_t n) {
    const bn_attrs *a = DLT__IMPL(m, bn_attrs);
    return snprintf(buf, n, "%lld, eps=%g, momentum=%g", (long long)m->state[BN_WEIGHT].t->shape[0],
                    a->eps, a->momentum);
}

static const dlt__module_kind batchnorm2d_kind = {
    .name = "batchnorm2d",
    .impl_size = sizeof(bn_attrs),
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = bn_forward,
    .forward_relu = bn_forward_relu,
    .sync = bn_sync,
    .loaded = bn_loaded,
    .replayed = bn_replayed,
    .describe = bn_describe,
};

#define CHECK_ARG(cond, ...)                                                                  \
    do {                                                                                      \
        if (!(cond)) return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, __VA_ARGS__);            \
    } while (0)

dlt_status dlt__batchnorm2d_new(dlt_ctx *ctx, int64_t c, double eps, double momentum,
                                const char *func, dlt_module **out) {
    CHECK_ARG(c >= 1, "num_features must be >= 1, got %lld", (long long)c);
    CHECK_ARG(isfinite(eps) && eps >= 0, "eps %g must be finite and >= 0", eps);
    CHECK_ARG(isfinite(momentum) && momentum >= 0 && momentum <= 1,
              "momentum %g must be in [0, 1]", momentum);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, &batchnorm2d_kind, func, &m));
    bn_attrs *a = DLT__IMPL(m, bn_attrs);
    a->eps = eps;
    a->momentum = momentum;
    dlt_status st = dlt__module_add_new_state(m, "weight", &c, 1, DLT_F32, DLT__INIT_ONES, 0, 1, func);
    if (st == DLT_OK)
        st = dlt__module_add_new_state(m, "bias", &c, 1, DLT_F32, DLT__INIT_ZEROS, 0, 1, func);
    if (st == DLT_OK)
        st = dlt__module_add_new_state(m, "running_mean", &c, 1, DLT_F32, DLT__INIT_ZEROS, 0, 0, func);
    if (st == DLT_OK)
        st = dlt__module_add_new_state(m, "running_var", &c, 1, DLT_F32, DLT__INIT_ONES, 0, 0, func);
    if (st == DLT_OK)
        st = dlt__module_add_new_state(m, "num_batches_tracked", NULL, 0, DLT_I64, DLT__INIT_ZEROS,
                                       0, 0, func);
    if (st != DLT_OK) {
        dlt_module_destroy(m);
        return st;
    }
    a->synced_version = m->state[BN_TRACKED].t->version;
    *out = m;
    return DLT_OK;
}

dlt_status dlt_batchnorm2d_create(dlt_ctx *ctx, int64_t num_features, double eps,
                                  double momentum, dlt_module **out) {
    static const char *F = "dlt_batchnorm2d_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    return dlt__batchnorm2d_new(ctx, num_features, eps, momentum, F, out);
}

static const dlt_batchnorm2d_options BN_DEFAULTS = {.size = sizeof(dlt_batchnorm2d_options), .eps = 1e-5,
                                                    .momentum = 0.1};
/* the first release's struct ends after momentum */
#define BN_OPTIONS_V1 DLT__FIELD_END(dlt_batchnorm2d_options, momentum)

void dlt_batchnorm2d_options_init(dlt_batchnorm2d_options *o, uint32_t size) {
    dlt__options_fill(o, size, &BN_DEFAULTS, sizeof BN_DEFAULTS, BN_OPTIONS_V1);
}

dlt_status dlt_batchnorm2d_create_ex(dlt_ctx *ctx, int64_t num_features,
                                     const dlt_batchnorm2d_options *o, dlt_module **out) {
    static const char *F = "dlt_batchnorm2d_create_ex";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    dlt_batchnorm2d_options opt = BN_DEFAULTS;
    DLT_CHECK(dlt__options_read(&opt, sizeof opt, o, BN_OPTIONS_V1, "dlt_batchnorm2d_options", F));
    return dlt__batchnorm2d_new(ctx, num_features, opt.eps, opt.momentum, F, out);
}
