/*
 * layers.c - the leaf layers (Conv2d, BatchNorm2d, Linear, ReLU, MaxPool2d,
 * AdaptiveAvgPool2d((1,1)), Flatten) and the Sequential container.
 *
 * Parameters are fp32 contiguous leaves that require grad. Initialisation is torchvision's
 * ResNet initialisation (reference/pytorch-semantics.md §4.1), drawn from the context's
 * Philox generator in creation order:
 *   conv weight  N(0, 2/(out_channels*kh*kw))   (kaiming_normal_, fan_out, ReLU gain)
 *   conv bias    0                               (as torchvision's models set conv biases)
 *   BN           weight 1, bias 0, running_mean 0, running_var 1, num_batches_tracked 0
 *   linear       weight and bias U(-1/sqrt(in), +1/sqrt(in))   (nn.Linear's default)
 * Forwards call the public ops only; each releases its intermediates. A Sequential runs a
 * BatchNorm2d followed directly by a ReLU as one fused dlt_batch_norm2d_act call (same
 * values and gradients, one kernel less).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn_internal.h"

/* A new fp32 contiguous tensor; init 0: zeros, 1: ones, 2: normal(0, a), 3: uniform(-a, a). */
static dlt_status param_new(dlt_ctx *ctx, const int64_t *shape, int32_t ndim, int32_t dtype,
                            int init, double a, int32_t requires_grad, const char *func,
                            dlt_tensor **out) {
    dlt_tensor *t = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, dtype, shape, ndim, DLT_FORMAT_CONTIGUOUS, func, &t));
    dlt_status st;
    switch (init) {
    case 0: st = dlt_tensor_fill(t, 0.0); break;
    case 1: st = dlt_tensor_fill(t, 1.0); break;
    case 2: st = dlt_tensor_rand_normal(t, 0.0, a); break;
    default: st = dlt_tensor_rand_uniform(t, -a, a); break;
    }
    if (st == DLT_OK && requires_grad) st = dlt_tensor_set_requires_grad(t, 1);
    if (st != DLT_OK) {
        dlt_tensor_release(t);
        return dlt__err_wrap(st, func);
    }
    *out = t;
    return DLT_OK;
}

/* Creates a tensor and registers it on m (the module is destroyed by the caller on error). */
static dlt_status add_tensor(dlt_module *m, const char *name, const int64_t *shape,
                             int32_t ndim, int32_t dtype, int init, double a, int32_t is_param,
                             const char *func) {
    dlt_tensor *t = NULL;
    DLT_CHECK(param_new(m->ctx, shape, ndim, dtype, init, a, is_param, func, &t));
    return dlt__module_add_state(m, name, t, is_param, func);
}

#define CHECK_ARG(cond, ...)                                                                  \
    do {                                                                                      \
        if (!(cond)) return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, __VA_ARGS__);            \
    } while (0)

/* ---- Conv2d ---- */

dlt_status dlt__conv2d_new(dlt_ctx *ctx, int64_t in, int64_t out_ch, int64_t kh, int64_t kw,
                           int64_t stride, int64_t pad, int64_t dil, int64_t groups,
                           int32_t bias, const char *func, dlt_module **out) {
    CHECK_ARG(in >= 1 && out_ch >= 1, "channels must be >= 1, got in=%lld out=%lld",
              (long long)in, (long long)out_ch);
    CHECK_ARG(kh >= 1 && kw >= 1, "kernel must be >= 1, got %lldx%lld", (long long)kh,
              (long long)kw);
    CHECK_ARG(stride >= 1 && dil >= 1, "stride (%lld) and dilation (%lld) must be >= 1",
              (long long)stride, (long long)dil);
    CHECK_ARG(pad >= 0, "padding %lld is negative", (long long)pad);
    CHECK_ARG(groups >= 1 && in % groups == 0 && out_ch % groups == 0,
              "groups %lld must be >= 1 and divide in_channels %lld and out_channels %lld",
              (long long)groups, (long long)in, (long long)out_ch);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, DLT__MOD_CONV2D, "conv2d", func, &m));
    m->u.conv.stride = stride;
    m->u.conv.pad = pad;
    m->u.conv.dil = dil;
    m->u.conv.groups = groups;
    const int64_t ws[4] = {out_ch, in / groups, kh, kw};
    /* kaiming_normal_(mode='fan_out', nonlinearity='relu'): std = sqrt(2 / fan_out) */
    const double std = sqrt(2.0 / ((double)out_ch * (double)kh * (double)kw));
    dlt_status st = add_tensor(m, "weight", ws, 4, DLT_F32, 2, std, 1, func);
    if (st == DLT_OK && bias) st = add_tensor(m, "bias", &out_ch, 1, DLT_F32, 0, 0, 1, func);
    if (st != DLT_OK) {
        dlt_module_destroy(m);
        return st;
    }
    *out = m;
    return DLT_OK;
}

dlt_status dlt_conv2d_create(dlt_ctx *ctx, int64_t in_channels, int64_t out_channels,
                             int64_t kernel_h, int64_t kernel_w, int64_t stride, int64_t padding,
                             int64_t dilation, int64_t groups, int32_t bias, dlt_module **out) {
    static const char *F = "dlt_conv2d_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    return dlt__conv2d_new(ctx, in_channels, out_channels, kernel_h, kernel_w, stride, padding,
                           dilation, groups, bias, F, out);
}

/* ---- BatchNorm2d ---- */

dlt_status dlt__batchnorm2d_new(dlt_ctx *ctx, int64_t c, double eps, double momentum,
                                const char *func, dlt_module **out) {
    CHECK_ARG(c >= 1, "num_features must be >= 1, got %lld", (long long)c);
    CHECK_ARG(isfinite(eps) && eps >= 0, "eps %g must be finite and >= 0", eps);
    CHECK_ARG(isfinite(momentum) && momentum >= 0 && momentum <= 1,
              "momentum %g must be in [0, 1]", momentum);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, DLT__MOD_BATCHNORM2D, "batchnorm2d", func, &m));
    m->u.bn.eps = eps;
    m->u.bn.momentum = momentum;
    dlt_status st = add_tensor(m, "weight", &c, 1, DLT_F32, 1, 0, 1, func);
    if (st == DLT_OK) st = add_tensor(m, "bias", &c, 1, DLT_F32, 0, 0, 1, func);
    if (st == DLT_OK) st = add_tensor(m, "running_mean", &c, 1, DLT_F32, 0, 0, 0, func);
    if (st == DLT_OK) st = add_tensor(m, "running_var", &c, 1, DLT_F32, 1, 0, 0, func);
    /* int64 scalar, shape [] as in PyTorch */
    if (st == DLT_OK) st = add_tensor(m, "num_batches_tracked", NULL, 0, DLT_I64, 0, 0, 0, func);
    if (st != DLT_OK) {
        dlt_module_destroy(m);
        return st;
    }
    m->u.bn.synced_version = m->state[4]->version;
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

/* ---- Linear ---- */

dlt_status dlt_linear_create(dlt_ctx *ctx, int64_t in_features, int64_t out_features,
                             int32_t bias, dlt_module **out) {
    static const char *func = "dlt_linear_create";
    DLT_NULL_CHECK(ctx, func);
    DLT_NULL_CHECK(out, func);
    CHECK_ARG(in_features >= 1 && out_features >= 1,
              "features must be >= 1, got in=%lld out=%lld", (long long)in_features,
              (long long)out_features);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, DLT__MOD_LINEAR, "linear", func, &m));
    /* kaiming_uniform_(a=sqrt(5)) gives bound 1/sqrt(fan_in); the bias uses the same bound */
    const double bound = 1.0 / sqrt((double)in_features);
    const int64_t ws[2] = {out_features, in_features};
    dlt_status st = add_tensor(m, "weight", ws, 2, DLT_F32, 3, bound, 1, func);
    if (st == DLT_OK && bias) st = add_tensor(m, "bias", &out_features, 1, DLT_F32, 3, bound, 1, func);
    if (st != DLT_OK) {
        dlt_module_destroy(m);
        return st;
    }
    *out = m;
    return DLT_OK;
}

/* ---- stateless layers ---- */

static dlt_status simple_new(dlt_ctx *ctx, dlt_module **out, int32_t type, const char *kind,
                             const char *func) {
    DLT_NULL_CHECK(ctx, func);
    DLT_NULL_CHECK(out, func);
    return dlt__module_new(ctx, type, kind, func, out);
}

dlt_status dlt_relu_create(dlt_ctx *ctx, dlt_module **out) {
    return simple_new(ctx, out, DLT__MOD_RELU, "relu", "dlt_relu_create");
}

dlt_status dlt_max_pool2d_create(dlt_ctx *ctx, int64_t kernel, int64_t stride, int64_t padding,
                                 dlt_module **out) {
    static const char *func = "dlt_max_pool2d_create";
    DLT_NULL_CHECK(ctx, func);
    DLT_NULL_CHECK(out, func);
    CHECK_ARG(kernel >= 1 && stride >= 1, "kernel (%lld) and stride (%lld) must be >= 1",
              (long long)kernel, (long long)stride);
    CHECK_ARG(padding >= 0 && padding <= kernel / 2,
              "padding %lld must be between 0 and half the kernel (%lld)", (long long)padding,
              (long long)kernel);
    DLT_CHECK(dlt__module_new(ctx, DLT__MOD_MAXPOOL2D, "max_pool2d", func, out));
    (*out)->u.pool.kernel = kernel;
    (*out)->u.pool.stride = stride;
    (*out)->u.pool.pad = padding;
    return DLT_OK;
}

dlt_status dlt_global_avg_pool2d_create(dlt_ctx *ctx, dlt_module **out) {
    return simple_new(ctx, out, DLT__MOD_GAVGPOOL2D, "global_avg_pool2d",
                      "dlt_global_avg_pool2d_create");
}

dlt_status dlt_flatten_create(dlt_ctx *ctx, dlt_module **out) {
    return simple_new(ctx, out, DLT__MOD_FLATTEN, "flatten", "dlt_flatten_create");
}

/* ---- Sequential ---- */

dlt_status dlt_sequential_create(dlt_ctx *ctx, dlt_module **out) {
    return simple_new(ctx, out, DLT__MOD_SEQUENTIAL, "sequential", "dlt_sequential_create");
}

dlt_status dlt_sequential_append(dlt_module *seq, const char *name, dlt_module *child) {
    static const char *F = "dlt_sequential_append";
    if (!child) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'child' is NULL");
    /* A child that is already owned elsewhere (or would form a cycle) is not ours to free. */
    if (child->parent)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the %s module already belongs to a container", child->kind);
    for (const dlt_module *a = seq; a; a = a->parent)
        if (a == child)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                            "cannot append a module to itself or to one of its own children");
    dlt_status st = DLT_OK;
    char idx[24];
    if (!seq) {
        st = dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'seq' is NULL");
    } else if (seq->type != DLT__MOD_SEQUENTIAL) {
        st = dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the container is a %s, not a sequential",
                      seq->kind);
    } else if (child->ctx != seq->ctx) {
        st = dlt__err(DLT_ERR_CONTEXT_MISMATCH, F,
                      "the %s module belongs to another context than the sequential", child->kind);
    } else {
        if (!name) {
            snprintf(idx, sizeof idx, "%d", seq->n_children);
            name = idx;
        }
        if (!name[0] || strchr(name, '.'))
            st = dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                          "child name '%s' must be non-empty and contain no '.'", name);
        for (int32_t i = 0; st == DLT_OK && i < seq->n_children; i++)
            if (strcmp(seq->child_names[i], name) == 0)
                st = dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the sequential already has a child '%s'",
                              name);
    }
    if (st != DLT_OK) {
        dlt_module_destroy(child); /* ownership passed to us in every case */
        return st;
    }
    /* the child keeps its own train/eval mode, as with PyTorch's Sequential.append */
    return dlt__module_add_child(seq, name, child, F);
}

static dlt_status sequential_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out) {
    dlt_tensor *cur = x;
    int owned = 0;
    for (int32_t i = 0; i < m->n_children; i++) {
        dlt_module *c = m->children[i];
        dlt_tensor *next = NULL;
        dlt_status st;
        if (c->type == DLT__MOD_BATCHNORM2D && i + 1 < m->n_children &&
            m->children[i + 1]->type == DLT__MOD_RELU) {
            st = dlt__bn_forward(c, cur, NULL, 1, &next); /* BN + ReLU in one call */
            i++;
        } else {
            st = dlt__module_forward(c, cur, &next);
        }
        if (owned) dlt_tensor_release(cur);
        if (st != DLT_OK) return st;
        cur = next;
        owned = 1;
    }
    *out = owned ? cur : dlt_tensor_retain(x);
    return DLT_OK;
}

/* ---- forward of the leaf layers ---- */

dlt_status dlt__layer_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out) {
    switch (m->type) {
    case DLT__MOD_CONV2D: {
        const int64_t s = m->u.conv.stride, p = m->u.conv.pad, d = m->u.conv.dil;
        return dlt_conv2d(x, m->state[0], m->n_state > 1 ? m->state[1] : NULL, s, s, p, p, d, d,
                          m->u.conv.groups, out);
    }
    case DLT__MOD_BATCHNORM2D: return dlt__bn_forward(m, x, NULL, 0, out);
    case DLT__MOD_LINEAR:
        return dlt_linear(x, m->state[0], m->n_state > 1 ? m->state[1] : NULL, out);
    case DLT__MOD_RELU: return dlt_relu(x, out);
    case DLT__MOD_MAXPOOL2D: {
        const int64_t k = m->u.pool.kernel, s = m->u.pool.stride, p = m->u.pool.pad;
        return dlt_max_pool2d(x, k, k, s, s, p, p, out);
    }
    case DLT__MOD_GAVGPOOL2D: return dlt_global_avg_pool2d(x, out);
    case DLT__MOD_FLATTEN: return dlt_flatten(x, 1, -1, out);
    case DLT__MOD_SEQUENTIAL: return sequential_forward(m, x, out);
    default:
        return dlt__err(DLT_ERR_INTERNAL, "dlt_module_forward", "no forward for module kind %s",
                        m->kind);
    }
}
