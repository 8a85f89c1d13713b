/*
 * resnet.c - torchvision's ResNets 18/34/50/101/152 as the "resnet" module kind, with
 * torchvision's module tree, state_dict names and initialisation (pytorch/vision
 * torchvision/models/resnet.py; reference/pytorch-semantics.md §4.1).
 *
 * Module tree (children in registration order; those in brackets hold no state):
 *   conv1 (7x7/2, pad 3), bn1, [relu], [maxpool 3/2 pad 1], layer1..layer4 (Sequentials of
 *   blocks "0", "1", ... from block.c; planes 64/128/256/512, strides 1/2/2/2), [avgpool],
 *   fc (Linear 512*expansion -> num_classes)
 * The stem's BN and ReLU run as one dlt_batch_norm2d_act call. All parameters live in one
 * storage (the arena of dlt__module_pack_params), in state order, so an optimizer can treat
 * them as one buffer.
 */
#include <stdio.h>

#include "nn_internal.h"

typedef struct resnet_attrs { /* borrowed pointers to children, for the forward */
    dlt_module *conv1, *bn1, *maxpool, *layer[4], *avgpool, *fc;
} resnet_attrs;

static dlt_status resnet_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in,
                                 dlt_tensor **out, int32_t n_out) {
    (void)n_in, (void)n_out;
    const resnet_attrs *r = DLT__IMPL(m, resnet_attrs);
    dlt_tensor *a = NULL, *b = NULL;
    dlt_status st;
    /* stem: conv1 -> bn1+relu -> maxpool */
    DLT_CHECK_GOTO(st, dlt__module_forward(r->conv1, in[0], &a), done);
    DLT_CHECK_GOTO(st, dlt__batchnorm_forward_act(r->bn1, a, NULL, 1, &b), done);
    dlt_tensor_release(a);
    a = NULL;
    DLT_CHECK_GOTO(st, dlt__module_forward(r->maxpool, b, &a), done);
    dlt_tensor_release(b);
    b = NULL;
    for (int l = 0; l < 4; l++) {
        DLT_CHECK_GOTO(st, dlt__module_forward(r->layer[l], a, &b), done);
        dlt_tensor_release(a);
        a = b;
        b = NULL;
    }
    /* avgpool -> flatten(1) -> fc */
    DLT_CHECK_GOTO(st, dlt__module_forward(r->avgpool, a, &b), done);
    dlt_tensor_release(a);
    a = NULL;
    DLT_CHECK_GOTO(st, dlt_flatten(b, 1, -1, &a), done);
    dlt_tensor_release(b);
    b = NULL;
    DLT_CHECK_GOTO(st, dlt__module_forward(r->fc, a, &b), done);
    out[0] = b;
    b = NULL;
done:
    dlt_tensor_release(a);
    dlt_tensor_release(b);
    return st;
}

static const dlt__module_kind resnet_kind = {
    .name = "resnet",
    .impl_size = sizeof(resnet_attrs),
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = resnet_forward,
};

#define ADD(m, name, call, slot) DLT__ADD_CHILD(m, name, call, slot, func)

static dlt_status resnet_fill(dlt_module *m, int bottleneck, const int *blocks,
                              int64_t num_classes, const char *func) {
    dlt_ctx *ctx = m->ctx;
    resnet_attrs *r = DLT__IMPL(m, resnet_attrs);
    const int64_t expansion = bottleneck ? 4 : 1;
    dlt_conv2d_options stem;
    dlt_conv2d_options_default(&stem);
    stem.stride[0] = stem.stride[1] = 2;
    stem.padding[0] = stem.padding[1] = 3;
    stem.bias = 0;
    ADD(m, "conv1", dlt__conv2d_new(ctx, 3, 64, 7, 7, &stem, func, &c_), &r->conv1);
    ADD(m, "bn1", dlt__batchnorm2d_new(ctx, 64, 1e-5, 0.1, func, &c_), &r->bn1);
    ADD(m, "relu", dlt__module_new(ctx, &dlt__kind_relu, func, &c_), NULL);
    ADD(m, "maxpool", dlt__max_pool2d_new(ctx, 3, 2, 1, func, &c_), &r->maxpool);
    int64_t inplanes = 64;
    for (int l = 0; l < 4; l++) {
        char name[16];
        snprintf(name, sizeof name, "layer%d", l + 1);
        ADD(m, name, dlt__module_new(ctx, &dlt__kind_sequential, func, &c_), &r->layer[l]);
        const int64_t planes = (int64_t)64 << l, stride = l == 0 ? 1 : 2;
        for (int b = 0; b < blocks[l]; b++) {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", b);
            ADD(r->layer[l], idx,
                dlt__block_new(ctx, bottleneck, inplanes, planes, b == 0 ? stride : 1, func, &c_),
                NULL);
            inplanes = planes * expansion;
        }
    }
    ADD(m, "avgpool", dlt__module_new(ctx, &dlt__kind_global_avg_pool2d, func, &c_), &r->avgpool);
    ADD(m, "fc", dlt__linear_new(ctx, 512 * expansion, num_classes, 1, func, &c_), &r->fc);
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
    DLT_CHECK(dlt__module_new(ctx, &resnet_kind, F, &m));
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
