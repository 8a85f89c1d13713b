/*
 * block.c - torchvision's residual blocks as module kinds, "basic_block" and "bottleneck"
 * (V1.5: stride on the 3x3 conv, expansion 4), with torchvision's module tree, state_dict
 * names and initialisation (pytorch/vision torchvision/models/resnet.py).
 *
 * Module trees (children in registration order; those in brackets hold no state):
 *   BasicBlock: conv1 (3x3, stride), bn1, [relu], conv2 (3x3), bn2, downsample
 *   Bottleneck: conv1 (1x1), bn1, conv2 (3x3, stride), bn2, conv3 (1x1, x4), bn3, [relu],
 *               downsample
 *   downsample: Sequential("0": conv 1x1 with the block's stride, "1": BN), present when
 *               stride != 1 or in_channels != planes*expansion
 * The forward fuses what PyTorch runs as separate ops into dlt_batch_norm2d_act calls:
 * every BN followed by ReLU is one call, and the block's last BN takes the identity as its
 * residual with relu=1 (bn3(conv3) + identity, then ReLU). The downsample BN has no ReLU.
 * A block made by the public constructors keeps its parameters in one storage (the arena
 * of dlt__module_pack_params); inside a ResNet, the ResNet packs them.
 */
#include <stdio.h>

#include "nn_internal.h"

typedef struct block_attrs { /* borrowed pointers to children, for the fused forward */
    dlt_module *conv1, *bn1, *conv2, *bn2, *conv3, *bn3, *downsample;
} block_attrs;

static dlt_status block_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in,
                                dlt_tensor **out, int32_t n_out) {
    (void)n_in, (void)n_out;
    const block_attrs *k = DLT__IMPL(m, block_attrs);
    dlt_tensor *x = in[0], *a = NULL, *b = NULL, *identity = NULL, *y = NULL;
    dlt_status st;
    /* conv1 -> bn1+relu -> conv2 -> (bottleneck: bn2+relu -> conv3) */
    DLT_CHECK_GOTO(st, dlt__module_forward(k->conv1, x, &a), done);
    DLT_CHECK_GOTO(st, dlt__batchnorm_forward_act(k->bn1, a, NULL, 1, &b), done);
    dlt_tensor_release(a);
    a = NULL;
    DLT_CHECK_GOTO(st, dlt__module_forward(k->conv2, b, &a), done);
    dlt_tensor_release(b);
    b = NULL;
    dlt_module *last_bn = k->bn2;
    if (k->conv3) {
        DLT_CHECK_GOTO(st, dlt__batchnorm_forward_act(k->bn2, a, NULL, 1, &b), done);
        dlt_tensor_release(a);
        a = NULL;
        DLT_CHECK_GOTO(st, dlt__module_forward(k->conv3, b, &a), done);
        dlt_tensor_release(b);
        b = NULL;
        last_bn = k->bn3;
    }
    /* identity: x, or downsample(x) = BN(conv1x1(x)) without ReLU */
    if (k->downsample) {
        dlt_module *ds = k->downsample;
        DLT_CHECK_GOTO(st, dlt__module_forward(ds->children[0], x, &b), done);
        DLT_CHECK_GOTO(st, dlt__batchnorm_forward_act(ds->children[1], b, NULL, 0, &identity), done);
        dlt_tensor_release(b);
        b = NULL;
    } else {
        identity = dlt_tensor_retain(x);
    }
    /* relu(bn(a) + identity) in one call */
    DLT_CHECK_GOTO(st, dlt__batchnorm_forward_act(last_bn, a, identity, 1, &y), done);
    out[0] = y;
done:
    dlt_tensor_release(a);
    dlt_tensor_release(b);
    dlt_tensor_release(identity);
    return st;
}

static const dlt__module_kind basic_block_kind = {
    .name = "basic_block",
    .impl_size = sizeof(block_attrs),
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = block_forward,
};

static const dlt__module_kind bottleneck_kind = {
    .name = "bottleneck",
    .impl_size = sizeof(block_attrs),
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = block_forward,
};

#define ADD(m, name, call, slot) DLT__ADD_CHILD(m, name, call, slot, func)

/* conv3x3: padding 1; conv1x1: padding 0; never a bias */
static dlt_status conv_new(dlt_ctx *ctx, int64_t in, int64_t out, int64_t k, int64_t stride,
                           const char *func, dlt_module **m) {
    dlt_conv2d_options o;
    dlt_conv2d_options_default(&o);
    o.stride[0] = o.stride[1] = stride;
    o.padding[0] = o.padding[1] = k / 2;
    o.bias = 0;
    return dlt__conv2d_new(ctx, in, out, k, k, &o, func, m);
}

static dlt_status bn_new(dlt_ctx *ctx, int64_t c, const char *func, dlt_module **m) {
    return dlt__batchnorm2d_new(ctx, c, 1e-5, 0.1, func, m);
}

static dlt_status block_fill(dlt_module *m, int bottleneck, int64_t inplanes, int64_t planes,
                             int64_t stride, const char *func) {
    dlt_ctx *ctx = m->ctx;
    block_attrs *k = DLT__IMPL(m, block_attrs);
    const int64_t outc = planes * (bottleneck ? 4 : 1);
    if (bottleneck) {
        ADD(m, "conv1", conv_new(ctx, inplanes, planes, 1, 1, func, &c_), &k->conv1);
        ADD(m, "bn1", bn_new(ctx, planes, func, &c_), &k->bn1);
        ADD(m, "conv2", conv_new(ctx, planes, planes, 3, stride, func, &c_), &k->conv2);
        ADD(m, "bn2", bn_new(ctx, planes, func, &c_), &k->bn2);
        ADD(m, "conv3", conv_new(ctx, planes, outc, 1, 1, func, &c_), &k->conv3);
        ADD(m, "bn3", bn_new(ctx, outc, func, &c_), &k->bn3);
        ADD(m, "relu", dlt__module_new(ctx, &dlt__kind_relu, func, &c_), NULL);
    } else {
        ADD(m, "conv1", conv_new(ctx, inplanes, planes, 3, stride, func, &c_), &k->conv1);
        ADD(m, "bn1", bn_new(ctx, planes, func, &c_), &k->bn1);
        ADD(m, "relu", dlt__module_new(ctx, &dlt__kind_relu, func, &c_), NULL);
        ADD(m, "conv2", conv_new(ctx, planes, planes, 3, 1, func, &c_), &k->conv2);
        ADD(m, "bn2", bn_new(ctx, planes, func, &c_), &k->bn2);
    }
    if (stride != 1 || inplanes != outc) {
        ADD(m, "downsample", dlt__module_new(ctx, &dlt__kind_sequential, func, &c_), &k->downsample);
        ADD(k->downsample, "0", conv_new(ctx, inplanes, outc, 1, stride, func, &c_), NULL);
        ADD(k->downsample, "1", bn_new(ctx, outc, func, &c_), NULL);
    }
    return DLT_OK;
}

dlt_status dlt__block_new(dlt_ctx *ctx, int bottleneck, int64_t inplanes, int64_t planes,
                          int64_t stride, const char *func, dlt_module **out) {
    if (inplanes < 1 || planes < 1 || stride < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "inplanes (%lld), planes (%lld) and stride (%lld) must be >= 1",
                        (long long)inplanes, (long long)planes, (long long)stride);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, bottleneck ? &bottleneck_kind : &basic_block_kind, func, &m));
    dlt_status st = block_fill(m, bottleneck, inplanes, planes, stride, func);
    if (st != DLT_OK) {
        dlt_module_destroy(m);
        return st;
    }
    *out = m;
    return DLT_OK;
}

static dlt_status block_create(dlt_ctx *ctx, int bottleneck, int64_t inplanes, int64_t planes,
                               int64_t stride, const char *func, dlt_module **out) {
    DLT_NULL_CHECK(ctx, func);
    DLT_NULL_CHECK(out, func);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__block_new(ctx, bottleneck, inplanes, planes, stride, func, &m));
    dlt_status st = dlt__module_pack_params(m, func);
    if (st != DLT_OK) {
        dlt_module_destroy(m);
        return st;
    }
    *out = m;
    return DLT_OK;
}

dlt_status dlt_basic_block_create(dlt_ctx *ctx, int64_t inplanes, int64_t planes, int64_t stride,
                                  dlt_module **out) {
    return block_create(ctx, 0, inplanes, planes, stride, "dlt_basic_block_create", out);
}

dlt_status dlt_bottleneck_create(dlt_ctx *ctx, int64_t inplanes, int64_t planes, int64_t stride,
                                 dlt_module **out) {
    return block_create(ctx, 1, inplanes, planes, stride, "dlt_bottleneck_create", out);
}
