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
 * the call fails: then it is destroyed); one passed to dlt_module_register_module is owned
 * by the custom module when the call succeeds and stays the caller's when it fails. Tensors
 * and modules returned by getters are borrowed from the module and live as long as it does.
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
 *
 * Your own modules (PyTorch's nn.Module subclass, in C): dlt_custom_module_create makes a
 * module whose forward is a callback of yours, run on the parameters, buffers and child
 * modules you register by name (any number of each). Registered state is named as PyTorch
 * names it ("fc1.weight", a child's state under "<child>."), listed own parameters first,
 * then own buffers, then each child's state in registration order, and takes part in
 * everything a built-in module does: dlt_module_params (optimizers), checkpoints (io.h),
 * dlt_module_set_training, dlt_module_set_format, dlt_module_summary. The callback asks
 * dlt_module_is_training(m) for train/eval behaviour and dlt_module_ctx(m) for the context
 * to create tensors on. A tensor registered under several names (tied weights) has one
 * state entry per name, as in PyTorch's state_dict, and is one parameter.
 *
 * Option structs (the library's one pattern for long constructors; the rule is in core.h):
 * fill one with its _default call (PyTorch's defaults), change fields, pass it to the
 * _create_ex constructor; o == NULL means all defaults.
 */
#ifndef DLTRAIN_NN_H
#define DLTRAIN_NN_H

#include "ops.h" /* DLT_NO_PADDING_IDX, DLT_GELU_* */

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
 *  "global_avg_pool2d", "flatten", "sequential", "basic_block", "bottleneck", "resnet", or
 *  a custom module's own name (dlt_custom_module_create). Borrowed, lives as long as m. */
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
/** Number of parameter tensors (a tensor registered under several names counts once). */
DLT_API int32_t dlt_module_num_params(const dlt_module *m);
/** Copies up to cap borrowed parameter pointers in registration order into out; *n (may be
 *  NULL) receives the total number. As PyTorch's parameters(), a tensor registered under
 *  several names (tied weights) is listed once, at its first name. */
DLT_API DLT_NODISCARD dlt_status dlt_module_params(const dlt_module *m, dlt_tensor **out, int32_t cap,
                                                   int32_t *n);
/** Total number of parameter elements (25,557,032 for resnet50 with 1000 classes); tied
 *  parameters count once. */
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


/* ---------------------------------------------------------------------------------------
 * Option structs for the layer constructors (see the top of this file)
 * ------------------------------------------------------------------------------------- */

/** Conv2d's options beside its channels and kernel. */
typedef struct dlt_conv2d_options {
    uint32_t size;        /**< sizeof(dlt_conv2d_options), set by dlt_conv2d_options_default */
    int32_t bias;         /**< 1: a learnable bias "bias" [out] (default 1, as PyTorch) */
    int64_t stride[2];    /**< (h, w), default (1, 1) */
    int64_t padding[2];   /**< zero padding (h, w), default (0, 0) */
    int64_t dilation[2];  /**< (h, w), default (1, 1) */
    int64_t groups;       /**< default 1; must divide both channel counts */
} dlt_conv2d_options;

/** Fills the first `size` bytes of o (core.h: option structs) with PyTorch's nn.Conv2d
 *  defaults. NULL is a no-op. */
DLT_API void dlt_conv2d_options_init(dlt_conv2d_options *o, uint32_t size);
/** dlt_conv2d_options_init(o, sizeof *o): the call C and C++ programs make. */
static inline void dlt_conv2d_options_default(dlt_conv2d_options *o) {
    dlt_conv2d_options_init(o, (uint32_t)sizeof *o);
}
/** Conv2d(in_channels, out_channels, (kernel_h, kernel_w), **o): "weight"
 *  [out, in/groups, kh, kw] [, "bias" [out]]; stride, padding and dilation may differ
 *  between height and width. Initialisation as dlt_conv2d_create. o == NULL: defaults.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER (ctx, out); DLT_ERR_INVALID_ARGUMENT (a value out
 *          of range, named in the message, or o->size below the first release's struct);
 *          DLT_ERR_NOT_SUPPORTED (a newer header's field set); out of memory. */
DLT_API DLT_NODISCARD dlt_status dlt_conv2d_create_ex(dlt_ctx *ctx, int64_t in_channels,
                                                      int64_t out_channels, int64_t kernel_h,
                                                      int64_t kernel_w, const dlt_conv2d_options *o,
                                                      dlt_module **out);

/** BatchNorm2d's options beside num_features. */
typedef struct dlt_batchnorm2d_options {
    uint32_t size;   /**< sizeof(dlt_batchnorm2d_options), set by the _default function */
    double eps;      /**< added to the variance, default 1e-5 */
    double momentum; /**< running statistics update weight in [0, 1], default 0.1 */
} dlt_batchnorm2d_options;

/** Fills the first `size` bytes of o (core.h: option structs) with PyTorch's nn.BatchNorm2d
 *  defaults. NULL is a no-op. */
DLT_API void dlt_batchnorm2d_options_init(dlt_batchnorm2d_options *o, uint32_t size);
/** dlt_batchnorm2d_options_init(o, sizeof *o): the call C and C++ programs make. */
static inline void dlt_batchnorm2d_options_default(dlt_batchnorm2d_options *o) {
    dlt_batchnorm2d_options_init(o, (uint32_t)sizeof *o);
}
/** BatchNorm2d(num_features, **o), as dlt_batchnorm2d_create. o == NULL: defaults.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT; out of memory. */
DLT_API DLT_NODISCARD dlt_status dlt_batchnorm2d_create_ex(dlt_ctx *ctx, int64_t num_features,
                                                           const dlt_batchnorm2d_options *o,
                                                           dlt_module **out);

/** Linear's options beside its feature counts. */
typedef struct dlt_linear_options {
    uint32_t size; /**< sizeof(dlt_linear_options), set by dlt_linear_options_default */
    int32_t bias;  /**< 1: a learnable bias "bias" [out] (default 1) */
} dlt_linear_options;

/** Fills the first `size` bytes of o (core.h: option structs) with PyTorch's nn.Linear
 *  defaults. NULL is a no-op. */
DLT_API void dlt_linear_options_init(dlt_linear_options *o, uint32_t size);
/** dlt_linear_options_init(o, sizeof *o): the call C and C++ programs make. */
static inline void dlt_linear_options_default(dlt_linear_options *o) {
    dlt_linear_options_init(o, (uint32_t)sizeof *o);
}
/** Linear(in_features, out_features, **o), as dlt_linear_create. o == NULL: defaults.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT; out of memory. */
DLT_API DLT_NODISCARD dlt_status dlt_linear_create_ex(dlt_ctx *ctx, int64_t in_features,
                                                      int64_t out_features,
                                                      const dlt_linear_options *o, dlt_module **out);

/* ---------------------------------------------------------------------------------------
 * Your own modules (see the top of this file)
 * ------------------------------------------------------------------------------------- */

/**
 * A custom module's forward. inputs[0..n_inputs) are borrowed (dlt_module_forward passes
 * one input and asks for one output; dlt_module_forward_ex passes what its caller gives);
 * outputs[0..n_outputs) are NULL on entry and must each receive a new reference owned by
 * the caller (a tensor the callback made, or dlt_tensor_retain of an input). Return DLT_OK,
 * or a failure status: the library then releases any output already set and passes the
 * status on with the thread's last error message (the failing op's message, or yours: see
 * dlt_set_error). Use the public ops on the registered tensors (they record the tape) and
 * dlt_module_forward on children. The callback must not destroy m or run m itself.
 */
typedef dlt_status (*dlt_module_forward_fn)(dlt_module *m, void *user, dlt_tensor *const *inputs,
                                            int32_t n_inputs, dlt_tensor **outputs,
                                            int32_t n_outputs);
/** Frees a custom module's user pointer when the module is destroyed. */
typedef void (*dlt_user_destroy_fn)(void *user);

/**
 * A custom module with no state yet, in training mode.
 * @param kind     its kind name for dlt_module_kind and summaries (copied; NULL: "custom")
 * @param forward  the forward callback (required)
 * @param user     passed to forward, returned by dlt_module_user_data
 * @param destroy  called with user when the module is destroyed (may be NULL); not called
 *                 when this function fails (user stays yours then)
 * @return DLT_OK; DLT_ERR_NULL_POINTER (ctx, forward, out); DLT_ERR_INVALID_ARGUMENT (an
 *         empty kind); out of memory.
 */
DLT_API DLT_NODISCARD dlt_status dlt_custom_module_create(dlt_ctx *ctx, const char *kind,
                                                          dlt_module_forward_fn forward, void *user,
                                                          dlt_user_destroy_fn destroy,
                                                          dlt_module **out);
/** The user pointer of a custom module (NULL for other kinds and for NULL). */
DLT_API void *dlt_module_user_data(const dlt_module *m);
/**
 * Registers t as a parameter named name (PyTorch's register_parameter). The module takes
 * its own reference (release yours when you no longer need it; the module's keeps t alive)
 * and turns requires_grad on, as nn.Parameter does. t must be a floating leaf on the
 * module's context. The same tensor may be registered under several names (tied weights).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (m is not a custom module;
 *         a name that is empty, contains '.', or is already a parameter, buffer or child of
 *         m; t produced by an op: detach it first); DLT_ERR_DTYPE (not f32/f16/bf16);
 *         DLT_ERR_CONTEXT_MISMATCH; out of memory. On failure nothing changes.
 */
DLT_API DLT_NODISCARD dlt_status dlt_module_register_parameter(dlt_module *m, const char *name,
                                                               dlt_tensor *t);
/** Registers t as a buffer named name (PyTorch's register_buffer, persistent): state that
 *  is saved and loaded but not trained (any dtype; requires_grad is left as it is). The
 *  module takes its own reference. Statuses as dlt_module_register_parameter, without the
 *  dtype and leaf rules. */
DLT_API DLT_NODISCARD dlt_status dlt_module_register_buffer(dlt_module *m, const char *name,
                                                            dlt_tensor *t);
/** Adds child under name (PyTorch's register_module / add_module). On success m owns child
 *  (dlt_module_destroy(m) frees it); on failure nothing changes and child stays yours.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (m not a custom module;
 *          name empty, with '.', or taken; child already in a container, or m itself or one
 *          of its ancestors); DLT_ERR_CONTEXT_MISMATCH; out of memory. */
DLT_API DLT_NODISCARD dlt_status dlt_module_register_module(dlt_module *m, const char *name,
                                                            dlt_module *child);

/** The context a module was created on (borrowed; NULL for NULL). */
DLT_API dlt_ctx *dlt_module_ctx(const dlt_module *m);
/** Number of direct children. */
DLT_API int32_t dlt_module_num_children(const dlt_module *m);
/** Direct child i in registration order: its name and the module, both borrowed from m
 *  (either out-pointer may be NULL). DLT_ERR_INVALID_ARGUMENT when i is out of range. */
DLT_API DLT_NODISCARD dlt_status dlt_module_child(const dlt_module *m, int32_t i, const char **name,
                                                  dlt_module **child);
/** The module at a dotted path of child names ("layer1.0.conv1"; "" is m itself), borrowed
 *  (PyTorch's get_submodule). DLT_ERR_INVALID_ARGUMENT names the first missing part. */
DLT_API DLT_NODISCARD dlt_status dlt_module_get_submodule(const dlt_module *m, const char *path,
                                                          dlt_module **out);

/**
 * Runs a module on several inputs giving several outputs. Built-in kinds take one input and
 * give one output (dlt_module_forward); a custom module's callback receives the arrays as
 * given. outputs[0..n_outputs) receive new references; on failure none is written.
 * @return DLT_OK; DLT_ERR_NULL_POINTER (m, inputs or an input, outputs); DLT_ERR_INVALID_ARGUMENT
 *         (counts the kind does not take, or negative); DLT_ERR_CONTEXT_MISMATCH; the
 *         forward's failure with its message.
 */
DLT_API DLT_NODISCARD dlt_status dlt_module_forward_ex(dlt_module *m, dlt_tensor *const *inputs,
                                                       int32_t n_inputs, dlt_tensor **outputs,
                                                       int32_t n_outputs);

/**
 * A text summary of the module tree, one row per line in three columns as wide as their
 * longest entry ("name", "kind / shape", "params"; a header line, then a rule of dashes):
 * each module in state order (its path of child names, "(root)" for m; its kind with the
 * arguments PyTorch's repr shows, e.g. "conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1),
 * padding=(1, 1))"; the parameter elements under it), followed by a row per own parameter
 * (full state_dict name; shape such as "[8, 3, 3, 3]", with the dtype when not f32; element
 * count, with thousands separators). A parameter tied to an earlier name shows "tied to
 * <name>" and "-", and counts once. Two lines end it: "parameters: N in T tensors, N
 * trainable" and "buffers: N elements in T tensors". Reads no tensor data: never
 * synchronises. docs/guide.md shows one.
 * @param buf     receives the text, NUL-terminated when n > 0, truncated to fit
 * @param needed  receives the buffer size the whole text needs, NUL included (may be NULL);
 *                call with buf NULL and n 0 to size buf
 * @return DLT_OK; DLT_ERR_NULL_POINTER (m, or buf NULL with n > 0); out of memory.
 */
DLT_API DLT_NODISCARD dlt_status dlt_module_summary(const dlt_module *m, char *buf, size_t n,
                                                    size_t *needed);

/* ---------------------------------------------------------------------------------------
 * Transformer layers (PyTorch's nn.Embedding, nn.LayerNorm, nn.Dropout, nn.GELU). The GPT
 * family built from them is in dltrain/gpt.h.
 * ------------------------------------------------------------------------------------- */
/** Embedding(num_embeddings, embedding_dim, padding_idx): "weight" [num, dim] N(0, 1) (the
 *  padding row zeroed; DLT_NO_PADDING_IDX for none). Forward: integer indices of any shape
 *  -> [*idx, dim] (dlt_embedding). */
DLT_API DLT_NODISCARD dlt_status dlt_embedding_create(dlt_ctx *ctx, int64_t num_embeddings, int64_t embedding_dim,
                                                      int64_t padding_idx, dlt_module **out);
/** LayerNorm over a last dimension of normalized_size (eps, elementwise_affine: "weight" ones,
 *  and "bias" zeros when bias != 0: nanoGPT's LayerNorm(bias=False) is affine without bias). */
DLT_API DLT_NODISCARD dlt_status dlt_layernorm_create(dlt_ctx *ctx, int64_t normalized_size, double eps,
                                                      int32_t elementwise_affine, int32_t bias, dlt_module **out);
/** Dropout(p): zeroes with probability p in training mode (the module's flag), identity in
 *  evaluation mode (dlt_dropout). */
DLT_API DLT_NODISCARD dlt_status dlt_dropout_create(dlt_ctx *ctx, double p, dlt_module **out);
/** GELU(approximate): DLT_GELU_NONE or DLT_GELU_TANH (dlt_gelu). */
DLT_API DLT_NODISCARD dlt_status dlt_gelu_create(dlt_ctx *ctx, int32_t approximate, dlt_module **out);

#ifdef __cplusplus
}
#endif
#endif
