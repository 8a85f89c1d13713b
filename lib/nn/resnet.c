/*
 * resnet.c - torchvision's residual blocks (BasicBlock, Bottleneck V1.5) and ResNets
 * 18/34/50/101/152, with torchvision's module tree, state_dict names and initialisation
 * (pytorch/vision torchvision/models/resnet.py; reference/pytorch-semantics.md §4.1).
 *
 * Module trees (children in registration order; those in brackets hold no state):
 *   BasicBlock: conv1 (3x3, stride), bn1, [relu], conv2 (3x3), bn2, downsample
 *   Bottleneck: conv1 (1x1), bn1, conv2 (3x3, stride), bn2, conv3 (1x1, x4), bn3, [relu],
 *               downsample
 *   downsample: Sequential("0": conv 1x1 with the block's stride, "1": BN), present when
 *               stride != 1 or in_channels != planes*expansion
 *   ResNet:     conv1 (7x7/2, pad 3), bn1, [relu], [maxpool 3/2 pad 1], layer1..layer4
 *               (Sequentials of blocks "0", "1", ...; planes 64/128/256/512, strides
 *               1/2/2/2), [avgpool], fc (Linear 512*expansion -> num_classes)
 * Forwards fuse what PyTorch runs as separate ops into dlt_batch_norm2d_act calls: every
 * BN followed by ReLU is one call, and the block's last BN takes the identity as its
 * residual with relu=1 (bn3(conv3) + identity, then ReLU). The downsample BN has no ReLU.
 *
 * The ResNet's and the blocks' parameters live in one storage (the arena of
 * dlt__module_pack_params), in state order, so an optimizer can treat them as one buffer.
 */
#include <stdio.h>

#include "nn_internal.h"

/* Adds a freshly created child (or returns the creation's failure). */
static dlt_status add(dlt_module *m, const char *name, dlt_status created, dlt_module *child,
                      const char *func) {
    if (created != DLT_OK) return created;
    return dlt__module_add_child(m, name, child, func);
}

#define ADD(m, name, call, func)                                                              \
    do {                                                                                      \
        dlt_module *c_ = NULL;                                                                \
        dlt_status s_ = (call);                                                               \
        DLT_CHECK(add((m), (name), s_, c_, (func)));                                          \
    } while (0)

static dlt_status conv_new(dlt_ctx *ctx, int64_t in, int64_t out, int64_t k, int64_t stride,
                           const char *func, dlt_module **m) {
    /* conv3x3: padding 1; conv1x1: padding 0; never a bias */
    return dlt__conv2d_new(ctx, in, out, k, k, stride, k / 2, 1, 1, 0, func, m);
}

static dlt_status bn_new(dlt_ctx *ctx, int64_t c, const char *func, dlt_module **m) {
    return dlt__batchnorm2d_new(ctx, c, 1e-5, 0.1, func, m);
}

/* Last child added to m (a borrowed pointer for the fused forwards). */
static dlt_module *last(dlt_module *m) { return m->children[m->n_children - 1]; }

static dlt_status block_fill(dlt_module *m, int bottleneck, int64_t inplanes, int64_t planes,
                             int64_t stride, const char *func) {
    dlt_ctx *ctx = m->ctx;
    const int64_t expansion = bottleneck ? 4 : 1, outc = planes * expansion;
    if (bottleneck) {
        ADD(m, "conv1", conv_new(ctx, inplanes, planes, 1, 1, func, &c_), func);
        m->u.block.conv1 = last(m);
        ADD(m, "bn1", bn_new(ctx, planes, func, &c_), func);
        m->u.block.bn1 = last(m);
        ADD(m, "conv2", conv_new(ctx, planes, planes, 3, stride, func, &c_), func);
        m->u.block.conv2 = last(m);
        ADD(m, "bn2", bn_new(ctx, planes, func, &c_), func);
        m->u.block.bn2 = last(m);
        ADD(m, "conv3", conv_new(ctx, planes, outc, 1, 1, func, &c_), func);
        m->u.block.conv3 = last(m);
        ADD(m, "bn3", bn_new(ctx, outc, func, &c_), func);
        m->u.block.bn3 = last(m);
        ADD(m, "relu", dlt__module_new(ctx, DLT__MOD_RELU, "relu", func, &c_), func);
    } else {
        ADD(m, "conv1", conv_new(ctx, inplanes, planes, 3, stride, func, &c_), func);
        m->u.block.conv1 = last(m);
        ADD(m, "bn1", bn_new(ctx, planes, func, &c_), func);
        m->u.block.bn1 = last(m);
        ADD(m, "relu", dlt__module_new(ctx, DLT__MOD_RELU, "relu", func, &c_), func);
        ADD(m, "conv2", conv_new(ctx, planes, planes, 3, 1, func, &c_), func);
        m->u.block.conv2 = last(m);
        ADD(m, "bn2", bn_new(ctx, planes, func, &c_), func);
        m->u.block.bn2 = last(m);
    }
    if (stride != 1 || inplanes != outc) {
        ADD(m, "downsample", dlt__module_new(ctx, DLT__MOD_SEQUENTIAL, "sequential", func, &c_),
            func);
        dlt_module *ds = last(m);
        m->u.block.downsample = ds;
        ADD(ds, "0", conv_new(ctx, inplanes, outc, 1, stride, func, &c_), func);
        ADD(ds, "1", bn_new(ctx, outc, func, &c_), func);
    }
    return DLT_OK;
}

static dlt_status block_new(dlt_ctx *ctx, int bottleneck, int64_t inplanes, int64_t planes,
                            int64_t stride, const char *func, dlt_module **out) {
    if (inplanes < 1 || planes < 1 || stride < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "inplanes (%lld), planes (%lld) and stride (%lld) must be >= 1",
                        (long long)inplanes, (long long)planes, (long long)stride);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, bottleneck ? DLT__MOD_BOTTLENECK : DLT__MOD_BASIC_BLOCK,
                              bottleneck ? "bottleneck" : "basic_block", func, &m));
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
    DLT_CHECK(block_new(ctx, bottleneck, inplanes, planes, stride, func, &m));
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

dlt_status dlt__block_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out) {
    const int bottleneck = m->type == DLT__MOD_BOTTLENECK;
    dlt_tensor *a = NULL, *b = NULL, *identity = NULL, *y = NULL;
    dlt_status st;
    /* conv1 -> bn1+relu -> conv2 -> (bottleneck: bn2+relu -> conv3) */
    DLT_CHECK_GOTO(st, dlt__module_forward(m->u.block.conv1, x, &a), done);
    DLT_CHECK_GOTO(st, dlt__bn_forward(m->u.block.bn1, a, NULL, 1, &b), done);
    dlt_tensor_release(a);
    a = NULL;
    DLT_CHECK_GOTO(st, dlt__module_forward(m->u.block.conv2, b, &a), done);
    dlt_tensor_release(b);
    b = NULL;
    dlt_module *last_bn = m->u.block.bn2;
    if (bottleneck) {
        DLT_CHECK_GOTO(st, dlt__bn_forward(m->u.block.bn2, a, NULL, 1, &b), done);
        dlt_tensor_release(a);
        a = NULL;
        DLT_CHECK_GOTO(st, dlt__module_forward(m->u.block.conv3, b, &a), done);
        dlt_tensor_release(b);
        b = NULL;
        last_bn = m->u.block.bn3;
    }
    /* identity: x, or downsample(x) = BN(conv1x1(x)) without ReLU */
    if (m->u.block.downsample) {
        dlt_module *ds = m->u.block.downsample;
        DLT_CHECK_GOTO(st, dlt__module_forward(ds->children[0], x, &b), done);
        DLT_CHECK_GOTO(st, dlt__bn_forward(ds->children[1], b, NULL, 0, &identity), done);
        dlt_tensor_release(b);
        b = NULL;
    } else {
        identity = dlt_tensor_retain(x);
    }
    /* relu(bn(a) + identity) in one call */
    DLT_CHECK_GOTO(st, dlt__bn_forward(last_bn, a, identity, 1, &y), done);
    *out = y;
done:
    dlt_tensor_release(a);
    dlt_tensor_release(b);
    dlt_tensor_release(identity);
    return st;
}

/* ---- ResNet ---- */

static dlt_status resnet_fill(dlt_module *m, int bottleneck, const int *blocks,
                              int64_t num_classes, const char *func) {
    dlt_ctx *ctx = m->ctx;
    const int64_t expansion = bottleneck ? 4 : 1;
    ADD(m, "conv1", dlt__conv2d_new(ctx, 3, 64, 7, 7, 2, 3, 1, 1, 0, func, &c_), func);
    m->u.resnet.conv1 = last(m);
    ADD(m, "bn1", bn_new(ctx, 64, func, &c_), func);
    m->u.resnet.bn1 = last(m);
    ADD(m, "relu", dlt__module_new(ctx, DLT__MOD_RELU, "relu", func, &c_), func);
    ADD(m, "maxpool", dlt__module_new(ctx, DLT__MOD_MAXPOOL2D, "max_pool2d", func, &c_), func);
    m->u.resnet.maxpool = last(m);
    m->u.resnet.maxpool->u.pool.kernel = 3;
    m->u.resnet.maxpool->u.pool.stride = 2;
    m->u.resnet.maxpool->u.pool.pad = 1;
    int64_t inplanes = 64;
    for (int l = 0; l < 4; l++) {
        char name[16];
        snprintf(name, sizeof name, "layer%d", l + 1);
        ADD(m, name, dlt__module_new(ctx, DLT__MOD_SEQUENTIAL, "sequential", func, &c_), func);
        dlt_module *layer = last(m);
        m->u.resnet.layer[l] = layer;
        const int64_t planes = (int64_t)64 << l, stride = l == 0 ? 1 : 2;
        for (int b = 0; b < blocks[l]; b++) {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", b);
            ADD(layer, idx,
                block_new(ctx, bottleneck, inplanes, planes, b == 0 ? stride : 1, func, &c_),
                func);
            inplanes = planes * expansion;
        }
    }
    ADD(m, "avgpool",
        dlt__module_new(ctx, DLT__MOD_GAVGPOOL2D, "global_avg_pool2d", func, &c_), func);
    m->u.resnet.avgpool = last(m);
    ADD(m, "fc", dlt_linear_create(ctx, 512 * expansion, num_classes, 1, &c_), func);
    m->u.resnet.fc = last(m);
    return DLT_OK;
}

dlt_status dlt_resnet_create(dlt_ctx *ctx, int32_t depth, int64_t num_classes, dlt_module **out) {
    static const char *F = "dlt_resnet_create";
    static const int B18[4] = {2, 2, 2, 2}, B34[4] = {3, 4, 6, 3}, B101[4] = {3, 4, 23, 3},
                     B152[4] = {3, 8, 36, 3};
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    const int *blocks;
    int bottleneck;
    switch (depth) {
    case 18: blocks = B18, bottleneck = 0; break;
    case 34: blocks = B34, bottleneck = 0; break;
    case 50: blocks = B34, bottleneck = 1; break;
    case 101: blocks = B101, bottleneck = 1; break;
    case 152: blocks = B152, bottleneck = 1; break;
    default:
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "depth %d is not one of 18, 34, 50, 101, 152",
                        depth);
    }
    if (num_classes < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "num_classes %lld must be >= 1",
                        (long long)num_classes);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, DLT__MOD_RESNET, "resnet", F, &m));
    dlt_status st = resnet_fill(m, bottleneck, blocks, num_classes, F);
    if (st == DLT_OK) st = dlt__module_pack_params(m, F);
    if (st != DLT_OK) {
        dlt_module_destroy(m);
        return st;
    }
    *out = m;
    return DLT_OK;
}

dlt_status dlt_resnet50_create(dlt_ctx *ctx, int64_t num_classes, dlt_module **out) {
    return dlt_resnet_create(ctx, 50, num_classes, out);
}

dlt_status dlt__resnet_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out) {
    dlt_tensor *a = NULL, *b = NULL;
    dlt_status st;
    /* stem: conv1 -> bn1+relu -> maxpool */
    DLT_CHECK_GOTO(st, dlt__module_forward(m->u.resnet.conv1, x, &a), done);
    DLT_CHECK_GOTO(st, dlt__bn_forward(m->u.resnet.bn1, a, NULL, 1, &b), done);
    dlt_tensor_release(a);
    a = NULL;
    DLT_CHECK_GOTO(st, dlt__module_forward(m->u.resnet.maxpool, b, &a), done);
    dlt_tensor_release(b);
    b = NULL;
    for (int l = 0; l < 4; l++) {
        DLT_CHECK_GOTO(st, dlt__module_forward(m->u.resnet.layer[l], a, &b), done);
        dlt_tensor_release(a);
        a = b;
        b = NULL;
    }
    /* avgpool -> flatten(1) -> fc */
    DLT_CHECK_GOTO(st, dlt__module_forward(m->u.resnet.avgpool, a, &b), done);
    dlt_tensor_release(a);
    a = NULL;
    DLT_CHECK_GOTO(st, dlt_flatten(b, 1, -1, &a), done);
    dlt_tensor_release(b);
    b = NULL;
    DLT_CHECK_GOTO(st, dlt__module_forward(m->u.resnet.fc, a, &b), done);
    *out = b;
    b = NULL;
done:
    dlt_tensor_release(a);
    dlt_tensor_release(b);
    return st;
}
