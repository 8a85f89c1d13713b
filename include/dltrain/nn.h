/*
 * dltrain/nn.h - modules: layers that own their parameters and buffers, containers, and
 * torchvision's ResNets.
 *
 * A module owns its parameters (fp32 leaves that require grad) and buffers (BatchNorm's
 * running statistics and num_batches_tracked), and its children. State entries are listed in
 * PyTorch's registration order under PyTorch's state_dict names ("conv1.weight",
 * "layer1.0.downsample.1.running_mean", "fc.bias"), so checkpoints interchange with
 * torch.load_state_dict (io.h).
 *
 * Ownership: create functions give a module owned by the caller (dlt_module_destroy). A
 * module passed to dlt_sequential_append is owned by the container from then on (also when
 * the call fails: then it is destroyed). Tensors returned by getters are borrowed from the
 * module and live as long as it does.
 *
 * Initialisation follows torchvision: conv weights kaiming-normal (fan_out, ReLU gain:
 * N(0, 2/(out_channels*kh*kw))), conv biases 0, BatchNorm weight 1 / bias 0 / running_mean
 * 0 / running_var 1, Linear weight and bias uniform(+-1/sqrt(fan_in)). Random values come
 * from the context's generator (dlt_ctx_set_seed), in creation order, so a seed gives the
 * same model on the CPU and on CUDA.
 *
 * num_batches_tracked (int64, shape [] as in PyTorch) counts the training-mode forwards of
 * its BatchNorm. The count is kept on the host and written into the tensor when the state
 * is read (dlt_module_state_entry/find of the buffer, saves), so a forward never waits for
 * the device; those reads may synchronise.
 *
 * The parameters of a ResNet (and of a block made by dlt_*_block_create) live in one device
 * allocation, in state order at 256-byte aligned offsets, so an optimizer can treat them as
 * one flat buffer.
 */
#ifndef DLTRAIN_NN_H
#define DLTRAIN_NN_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlt_module dlt_module;

/** Frees a module and its children. NULL is a no-op. */
DLT_API void dlt_module_destroy(dlt_module *m);

/** Runs the module. out receives a new reference owned by the caller; the intermediates are
 *  released (in grad mode the tape keeps what backward needs). DLT_ERR_CONTEXT_MISMATCH
 *  when x is on another context than the module; an op's failure is passed on with its
 *  status and message. */
DLT_API DLT_NODISCARD dlt_status dlt_module_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out);

/** Train (1) or evaluation (0) mode, recursively (BatchNorm uses batch or running stats). */
DLT_API DLT_NODISCARD dlt_status dlt_module_set_training(dlt_module *m, int32_t training);
/** 1 in training mode (the default), 0 in evaluation mode (0 for NULL). */
DLT_API int32_t dlt_module_is_training(const dlt_module *m);

/** Kind name: "conv2d", "batchnorm2d", "linear", "relu", "max_pool2d",
 *  "global_avg_pool2d", "flatten", "sequential", "basic_block", "bottleneck", "resnet". */
DLT_API const char *dlt_module_kind(const dlt_module *m);

/** Number of state entries (parameters and buffers, recursively). */
DLT_API int32_t dlt_module_num_state(const dlt_module *m);
/**
 * State entry i in registration order.
 * @param name     receives a borrowed NUL-terminated name (may be NULL)
 * @param tensor   receives the borrowed tensor (may be NULL)
 * @param is_param receives 1 for a parameter, 0 for a buffer (may be NULL)
 */
DLT_API DLT_NODISCARD dlt_status dlt_module_state_entry(const dlt_module *m, int32_t i, const char **name,
                                                        dlt_tensor **tensor, int32_t *is_param);
/** State tensor by name (borrowed), DLT_ERR_INVALID_ARGUMENT if there is none. */
DLT_API DLT_NODISCARD dlt_status dlt_module_find(const dlt_module *m, const char *name, dlt_tensor **out);
/** Number of parameter tensors. */
DLT_API int32_t dlt_module_num_params(const dlt_module *m);
/** Copies up to cap borrowed parameter pointers in registration order into out; *n (may be
 *  NULL) receives the total number. */
DLT_API DLT_NODISCARD dlt_status dlt_module_params(const dlt_module *m, dlt_tensor **out, int32_t cap,
                                                   int32_t *n);
/** Total number of parameter elements (25,557,032 for resnet50 with 1000 classes). */
DLT_API int64_t dlt_module_param_count(const dlt_module *m);

/** Converts the 4-D parameters (conv weights) and their gradients to a memory format, in
 *  place (same allocation, so the parameter arena stays as it is). Use channels-last with
 *  channels-last inputs for the tensor-core path on CUDA. Call it before creating an
 *  optimizer: existing momentum buffers keep their format. All-or-nothing. */
DLT_API DLT_NODISCARD dlt_status dlt_module_set_format(dlt_module *m, int32_t format);

/* ---------------------------------------------------------------------------------------
 * Layers
 * ------------------------------------------------------------------------------------- */
/** Conv2d(in, out, kernel, stride, padding, dilation, groups, bias): "weight"
 *  [out, in/groups, kh, kw] [, "bias" [out]]. */
DLT_API DLT_NODISCARD dlt_status dlt_conv2d_create(dlt_ctx *ctx, int64_t in_channels, int64_t out_channels,
                                                   int64_t kernel_h, int64_t kernel_w, int64_t stride,
                                                   int64_t padding, int64_t dilation, int64_t groups,
                                                   int32_t bias, dlt_module **out);
/** BatchNorm2d(num_features, eps, momentum): "weight", "bias", "running_mean",
 *  "running_var", "num_batches_tracked". */
DLT_API DLT_NODISCARD dlt_status dlt_batchnorm2d_create(dlt_ctx *ctx, int64_t num_features, double eps,
                                                        double momentum, dlt_module **out);
/** Linear(in, out, bias): "weight" [out,in] [, "bias"]. */
DLT_API DLT_NODISCARD dlt_status dlt_linear_create(dlt_ctx *ctx, int64_t in_features, int64_t out_features,
                                                   int32_t bias, dlt_module **out);
/** ReLU (no state). */
DLT_API DLT_NODISCARD dlt_status dlt_relu_create(dlt_ctx *ctx, dlt_module **out);
/** MaxPool2d(kernel, stride, padding) with square windows (no state). */
DLT_API DLT_NODISCARD dlt_status dlt_max_pool2d_create(dlt_ctx *ctx, int64_t kernel, int64_t stride,
                                                       int64_t padding, dlt_module **out);
/** AdaptiveAvgPool2d((1,1)). */
DLT_API DLT_NODISCARD dlt_status dlt_global_avg_pool2d_create(dlt_ctx *ctx, dlt_module **out);
/** Flatten(start_dim=1). */
DLT_API DLT_NODISCARD dlt_status dlt_flatten_create(dlt_ctx *ctx, dlt_module **out);

/** An empty Sequential. Its forward runs the children in order; a BatchNorm2d directly
 *  followed by a ReLU runs as one fused dlt_batch_norm2d_act call (same result). */
DLT_API DLT_NODISCARD dlt_status dlt_sequential_create(dlt_ctx *ctx, dlt_module **out);
/** Appends child under name (NULL: its index, as PyTorch names Sequential children). The
 *  container takes ownership of child in every case (on failure it is destroyed), except
 *  when child already belongs to a container or would contain seq: then the call fails with
 *  DLT_ERR_INVALID_ARGUMENT and child stays where it was. Names must be unique, non-empty and
 *  free of '.' (DLT_ERR_INVALID_ARGUMENT); seq must be a Sequential; both on one context
 *  (DLT_ERR_CONTEXT_MISMATCH). The child keeps its own train/eval mode. */
DLT_API DLT_NODISCARD dlt_status dlt_sequential_append(dlt_module *seq, const char *name, dlt_module *child);

/** torchvision BasicBlock(inplanes, planes, stride) with a 1x1-conv+BN downsample when
 *  stride != 1 or inplanes != planes. */
DLT_API DLT_NODISCARD dlt_status dlt_basic_block_create(dlt_ctx *ctx, int64_t inplanes, int64_t planes,
                                                        int64_t stride, dlt_module **out);
/** torchvision Bottleneck (V1.5: stride on the 3x3 conv, expansion 4) with a downsample when
 *  stride != 1 or inplanes != 4*planes. */
DLT_API DLT_NODISCARD dlt_status dlt_bottleneck_create(dlt_ctx *ctx, int64_t inplanes, int64_t planes,
                                                       int64_t stride, dlt_module **out);

/** torchvision resnet{18,34,50,101,152}(num_classes). depth selects the variant;
 *  DLT_ERR_INVALID_ARGUMENT for another depth or num_classes < 1. */
DLT_API DLT_NODISCARD dlt_status dlt_resnet_create(dlt_ctx *ctx, int32_t depth, int64_t num_classes,
                                                   dlt_module **out);
/** dlt_resnet_create(ctx, 50, num_classes, out). */
DLT_API DLT_NODISCARD dlt_status dlt_resnet50_create(dlt_ctx *ctx, int64_t num_classes, dlt_module **out);

#ifdef __cplusplus
}
#endif
#endif
