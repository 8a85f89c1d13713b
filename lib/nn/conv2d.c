/*
 * conv2d.c - the Conv2d module kind: "weight" [out, in/groups, kh, kw] and an optional
 * "bias" [out], run by dlt_conv2d (lib/ops/conv2d.c).
 *
 * Initialisation is torchvision's ResNet initialisation (reference/pytorch-semantics.md
 * §4.1), drawn from the context's generator: weight N(0, 2/(out_channels*kh*kw))
 * (kaiming_normal_, fan_out, ReLU gain), bias 0 (as torchvision's models set conv biases).
 */
#include <math.h>
#include <stdio.h>

#include "../core/options.h"
#include "nn_internal.h"

typedef struct conv_attrs {
    int64_t stride[2], pad[2], dil[2], groups;
    int32_t bias;
} conv_attrs;

static dlt_status conv_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in,
                               dlt_tensor **out, int32_t n_out) {
    (void)n_in, (void)n_out;
    const conv_attrs *a = DLT__IMPL(m, conv_attrs);
    return dlt_conv2d(in[0], m->state[0].t, a->bias ? m->state[1].t : NULL, a->stride[0],
                      a->stride[1], a->pad[0], a->pad[1], a->dil[0], a->dil[1], a->groups,
                      &out[0]);
}

/* PyTorch's Conv2d.extra_repr: stride always, the rest when not the default. */
static int conv_describe(const dlt_module *m, char *buf, size_t n) {
    const conv_attrs *a = DLT__IMPL(m, conv_attrs);
    const int64_t *ws = m->state[0].t->shape;
    char pad[64] = "", dil[64] = "", groups[32] = "";
    if (a->pad[0] || a->pad[1])
        snprintf(pad, sizeof pad, ", padding=(%lld, %lld)", (long long)a->pad[0],
                 (long long)a->pad[1]);
    if (a->dil[0] != 1 || a->dil[1] != 1)
        snprintf(dil, sizeof dil, ", dilation=(%lld, %lld)", (long long)a->dil[0],
                 (long long)a->dil[1]);
    if (a->groups != 1) snprintf(groups, sizeof groups, ", groups=%lld", (long long)a->groups);
    return snprintf(buf, n, "%lld, %lld, kernel_size=(%lld, %lld), stride=(%lld, %lld)%s%s%s%s",
                    (long long)(ws[1] * a->groups), (long long)ws[0], (long long)ws[2],
                    (long long)ws[3], (long long)a->stride[0], (long long)a->stride[1], pad, dil,
                    groups, a->bias ? "" : ", bias=False");
}

static const dlt__module_kind conv2d_kind = {
    .name = "conv2d",
    .impl_size = sizeof(conv_attrs),
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = conv_forward,
    .describe = conv_describe,
};

static const dlt_conv2d_options CONV2D_DEFAULTS = {
    .size = sizeof(dlt_conv2d_options), .bias = 1, .stride = {1, 1}, .padding = {0, 0}, .dilation = {1, 1},
    .groups = 1};
/* the first release's struct ends after groups */
#define CONV2D_OPTIONS_V1 DLT__FIELD_END(dlt_conv2d_options, groups)

void dlt_conv2d_options_init(dlt_conv2d_options *o, uint32_t size) {
    dlt__options_fill(o, size, &CONV2D_DEFAULTS, sizeof CONV2D_DEFAULTS, CONV2D_OPTIONS_V1);
}

#define CHECK_ARG(cond, ...)                                                                  \
    do {                                                                                      \
        if (!(cond)) return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, __VA_ARGS__);            \
    } while (0)

dlt_status dlt__conv2d_new(dlt_ctx *ctx, int64_t in, int64_t out_ch, int64_t kh, int64_t kw,
                           const dlt_conv2d_options *user, const char *func, dlt_module **out) {
    dlt_conv2d_options o = CONV2D_DEFAULTS;
    DLT_CHECK(dlt__options_read(&o, sizeof o, user, CONV2D_OPTIONS_V1, "dlt_conv2d_options", func));
    CHECK_ARG(in >= 1 && out_ch >= 1, "channels must be >= 1, got in=%lld out=%lld",
              (long long)in, (long long)out_ch);
    CHECK_ARG(kh >= 1 && kw >= 1, "kernel must be >= 1, got %lldx%lld", (long long)kh,
              (long long)kw);
    for (int d = 0; d < 2; d++) {
        CHECK_ARG(o.stride[d] >= 1 && o.dilation[d] >= 1,
                  "stride (%lld) and dilation (%lld) must be >= 1", (long long)o.stride[d],
                  (long long)o.dilation[d]);
        CHECK_ARG(o.padding[d] >= 0, "padding %lld is negative", (long long)o.padding[d]);
    }
    CHECK_ARG(o.groups >= 1 && in % o.groups == 0 && out_ch % o.groups == 0,
              "groups %lld must be >= 1 and divide in_channels %lld and out_channels %lld",
              (long long)o.groups, (long long)in, (long long)out_ch);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, &conv2d_kind, func, &m));
    conv_attrs *a = DLT__IMPL(m, conv_attrs);
    for (int d = 0; d < 2; d++) {
        a->stride[d] = o.stride[d];
        a->pad[d] = o.padding[d];
        a->dil[d] = o.dilation[d];
    }
    a->groups = o.groups;
    a->bias = o.bias != 0;
    const int64_t ws[4] = {out_ch, in / o.groups, kh, kw};
    /* kaiming_normal_(mode='fan_out', nonlinearity='relu'): std = sqrt(2 / fan_out) */
    const double std = sqrt(2.0 / ((double)out_ch * (double)kh * (double)kw));
    dlt_status st = dlt__module_add_new_state(m, "weight", ws, 4, DLT_F32, DLT__INIT_NORMAL, std, 1,
                                              func);
    if (st == DLT_OK && a->bias)
        st = dlt__module_add_new_state(m, "bias", &out_ch, 1, DLT_F32, DLT__INIT_ZEROS, 0, 1, func);
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
    dlt_conv2d_options o;
    dlt_conv2d_options_default(&o);
    o.stride[0] = o.stride[1] = stride;
    o.padding[0] = o.padding[1] = padding;
    o.dilation[0] = o.dilation[1] = dilation;
    o.groups = groups;
    o.bias = bias;
    return dlt__conv2d_new(ctx, in_channels, out_channels, kernel_h, kernel_w, &o, F, out);
}

dlt_status dlt_conv2d_create_ex(dlt_ctx *ctx, int64_t in_channels, int64_t out_channels,
                                int64_t kernel_h, int64_t kernel_w, const dlt_conv2d_options *o,
                                dlt_module **out) {
    static const char *F = "dlt_conv2d_create_ex";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    return dlt__conv2d_new(ctx, in_channels, out_channels, kernel_h, kernel_w, o, F, out);
}
