/*
 * nn_internal.h - the module object shared by lib/nn (module.c: the tree, state iteration,
 * train/eval, formats, the parameter arena; layers.c: the layers and Sequential; resnet.c:
 * the residual blocks and torchvision's ResNets) and lib/io (checkpoints).
 *
 * A module owns up to DLT__MOD_MAX_STATE state tensors of its own (parameters first, then
 * buffers, as PyTorch's state_dict lists them) and an ordered list of named children. The
 * full state_dict names ("layer1.0.downsample.1.running_mean") are built on demand into a
 * cache held by the module that was asked; structural changes invalidate the caches of the
 * module and all its ancestors.
 *
 * num_batches_tracked: a training forward of a BatchNorm must count, but writing the count
 * into the (device) tensor on every forward would cost a kernel or a host round trip per BN.
 * Each BN counts on the host (bn.pending) and dlt__module_sync_buffers writes the counts
 * into the tensors when state is read (state entries, find, save). bn.synced_version is the
 * tensor's version after our last write: if it differs, someone else wrote the tensor (a
 * load, a user copy) and its device value is read back (a synchronisation, only then).
 * A CUDA graph replay runs no host code, so forwards replayed from a graph do not count;
 * a graph runner can add them with dlt__module_add_tracked.
 */
#ifndef DLT_NN_INTERNAL_H
#define DLT_NN_INTERNAL_H

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    DLT__MOD_CONV2D,
    DLT__MOD_BATCHNORM2D,
    DLT__MOD_LINEAR,
    DLT__MOD_RELU,
    DLT__MOD_MAXPOOL2D,
    DLT__MOD_GAVGPOOL2D,
    DLT__MOD_FLATTEN,
    DLT__MOD_SEQUENTIAL,
    DLT__MOD_BASIC_BLOCK,
    DLT__MOD_BOTTLENECK,
    DLT__MOD_RESNET,
};

#define DLT__MOD_MAX_STATE 5
/* Parameters in an arena start at multiples of this many bytes (vector loads, cuBLASLt and
 * cuDNN alignment, and room for a flat-buffer optimizer). */
#define DLT__ARENA_ALIGN 256

/* One entry of the flattened state_dict. */
typedef struct dlt__state_entry {
    char *name;          /* full name, owned by the cache */
    dlt_tensor *tensor;  /* borrowed from owner */
    int32_t is_param;
    dlt_module *owner;   /* module whose state[slot] holds the tensor */
    int32_t slot;
} dlt__state_entry;

struct dlt_module {
    int32_t type;      /* DLT__MOD_* */
    const char *kind;  /* static string, dlt_module_kind */
    dlt_ctx *ctx;
    int32_t training;
    dlt_module *parent; /* the container holding this module, or NULL */

    /* own state: parameters first, then buffers */
    int32_t n_state;
    const char *state_name[DLT__MOD_MAX_STATE]; /* static strings */
    dlt_tensor *state[DLT__MOD_MAX_STATE];      /* owned references */
    int32_t state_is_param[DLT__MOD_MAX_STATE];

    /* children in registration order */
    int32_t n_children, cap_children;
    dlt_module **children; /* owned */
    char **child_names;    /* owned */

    /* per-kind attributes */
    union {
        struct {
            int64_t stride, pad, dil, groups;
        } conv;
        struct {
            double eps, momentum;
            int64_t pending;         /* training forwards not yet written into the tensor */
            int64_t value;           /* the count the tensor holds when synced_version matches */
            uint64_t synced_version; /* tensor version after our last write */
        } bn;
        struct {
            int64_t kernel, stride, pad;
        } pool;
        struct { /* borrowed pointers to children, for the fused forward */
            dlt_module *conv1, *bn1, *conv2, *bn2, *conv3, *bn3, *downsample;
        } block;
        struct {
            dlt_module *conv1, *bn1, *maxpool, *layer[4], *avgpool, *fc;
        } resnet;
    } u;

    /* flattened state cache (names built on demand) */
    dlt__state_entry *flat;
    int32_t n_flat;
    int32_t flat_valid;
};

/* Module tree (module.c). */
dlt_status dlt__module_new(dlt_ctx *ctx, int32_t type, const char *kind, const char *func,
                           dlt_module **out);
/* Registers a state tensor (takes the reference, also on failure). */
dlt_status dlt__module_add_state(dlt_module *m, const char *name, dlt_tensor *t, int32_t is_param,
                                 const char *func);
/* Appends a child under name (takes ownership of child, also on failure). */
dlt_status dlt__module_add_child(dlt_module *m, const char *name, dlt_module *child,
                                 const char *func);
/* Builds the flattened state cache if needed. */
dlt_status dlt__module_flat(dlt_module *m, const char *func);
/* Drops the state caches of m and its ancestors. */
void dlt__module_invalidate(dlt_module *m);
/* Writes the host-side num_batches_tracked counts of every BatchNorm under m into their
 * tensors (may synchronise, see above). */
dlt_status dlt__module_sync_buffers(dlt_module *m, const char *func);
/* Forgets the pending counts of every BatchNorm under m (after a checkpoint load has
 * overwritten num_batches_tracked). */
void dlt__module_reset_tracked(dlt_module *m);
/* Adds k training forwards to every BatchNorm under m that is in training mode (for
 * forwards that ran as a replayed CUDA graph). */
void dlt__module_add_tracked(dlt_module *m, int64_t k);
/* Moves every parameter under m into one storage (offsets aligned to DLT__ARENA_ALIGN, in
 * registration order), keeping values and requires_grad. On failure nothing changes. */
dlt_status dlt__module_pack_params(dlt_module *m, const char *func);

/* Forward of a BatchNorm module with the fused residual add and ReLU of
 * dlt_batch_norm2d_act; counts the batch when training. */
dlt_status dlt__bn_forward(dlt_module *bn, dlt_tensor *x, dlt_tensor *residual, int32_t relu,
                           dlt_tensor **out);
/* Forward dispatch without argument checks (module.c calls it after checking). */
dlt_status dlt__module_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out);

/* Per-kind forwards (layers.c, resnet.c). */
dlt_status dlt__layer_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out);
dlt_status dlt__block_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out);
dlt_status dlt__resnet_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out);

/* Unchecked layer constructors shared by resnet.c (same validation as the public ones). */
dlt_status dlt__conv2d_new(dlt_ctx *ctx, int64_t in, int64_t out_ch, int64_t kh, int64_t kw,
                           int64_t stride, int64_t pad, int64_t dil, int64_t groups,
                           int32_t bias, const char *func, dlt_module **out);
dlt_status dlt__batchnorm2d_new(dlt_ctx *ctx, int64_t c, double eps, double momentum,
                                const char *func, dlt_module **out);

#ifdef __cplusplus
}
#endif
#endif
