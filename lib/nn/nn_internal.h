/*
 * nn_internal.h - the module object and the table of module kinds, shared by lib/nn and
 * lib/io (checkpoints walk the flattened state).
 *
 * A module is generic: a context, a train/eval flag, its own state tensors (parameters,
 * then buffers, as PyTorch's state_dict lists them), named children in registration order,
 * and a pointer to its kind. Everything a kind does differently is in its row of the kind
 * table (dlt__module_kind): its name, the size of its attributes (allocated with the module),
 * its forward, and optional hooks. module.c calls a kind only through that row, so adding a
 * kind is one new file (lib/nn/<kind>.c: a dlt__module_kind, a constructor, a forward) plus
 * its public constructor in nn.h and its line in meson.build: no switch to extend, no union
 * to grow. Kinds that build on others call those kinds' internal constructors and run their
 * children through dlt__module_forward (or a kind's own exported function, as the ResNet
 * blocks call dlt__batchnorm_forward_act): arrows only point down, never back into module.c.
 *
 * Full state_dict names ("layer1.0.downsample.1.running_mean") are built on demand into a
 * cache held by the module that was asked; structural changes invalidate the caches of the
 * module and all its ancestors.
 *
 * Host-side state: a kind may keep state on the host and write it into a buffer only when
 * the state is read (BatchNorm counts num_batches_tracked this way, batchnorm.c): module.c
 * calls its sync hook before a buffer of that module is read (state entries, find, saves),
 * its loaded hook after a checkpoint load overwrote the buffers, and its replayed hook for
 * forwards that ran as a replayed CUDA graph (which runs no host code).
 */
#ifndef DLT_NN_INTERNAL_H
#define DLT_NN_INTERNAL_H

#include <stddef.h>

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parameters in an arena start at multiples of this many bytes (vector loads, cuBLASLt and
 * cuDNN alignment, and room for a flat-buffer optimizer). */
#define DLT__ARENA_ALIGN 256

/* One row of the kind table. Only name and forward are required. */
typedef struct dlt__module_kind {
    const char *name;  /* dlt_module_kind() and summaries (a custom module may override it) */
    size_t impl_size;  /* bytes of per-module attributes, zeroed, reached with DLT__IMPL */
    int32_t n_inputs;  /* what forward takes and gives (module.c checks the counts before */
    int32_t n_outputs; /* calling it); -1: any number, the forward checks */
    /* Runs the module. in[] are borrowed, non-NULL, on m's context; out[] are NULL on entry
     * and each must hold a new reference on success. On failure the caller releases any
     * output that was set. Intermediates are released (the tape keeps what backward needs). */
    dlt_status (*forward)(dlt_module *m, dlt_tensor *const *in, int32_t n_in, dlt_tensor **out,
                          int32_t n_out);
    /* Optional: forward followed by a ReLU in one call (a Sequential fuses "m, relu"). */
    dlt_status (*forward_relu)(dlt_module *m, dlt_tensor *x, dlt_tensor **out);
    /* Optional: frees what the attributes point to (state and children are module.c's). */
    void (*destroy)(dlt_module *m);
    /* Optional: writes host-side state into the module's buffers (may synchronise). */
    dlt_status (*sync)(dlt_module *m, const char *func);
    /* Optional: the module's buffers were overwritten from outside (checkpoint load). */
    void (*loaded)(dlt_module *m);
    /* Optional: k forwards ran as a replayed CUDA graph (no host code ran). */
    void (*replayed)(dlt_module *m, int64_t k);
    /* Optional: the arguments shown in summaries ("3, 8, kernel_size=(3, 3)"), written as
     * snprintf does (returns the full length). */
    int (*describe)(const dlt_module *m, char *buf, size_t n);
} dlt__module_kind;

/* One state tensor of a module. */
typedef struct dlt__state {
    char *name;       /* owned, unique among the module's state and children, no '.' */
    dlt_tensor *t;    /* owned reference */
    int32_t is_param; /* parameters come before buffers */
} dlt__state;

/* One entry of the flattened state_dict. */
typedef struct dlt__state_entry {
    char *name;          /* full name, owned by the cache */
    dlt_tensor *tensor;  /* borrowed from owner */
    int32_t is_param;
    dlt_module *owner;   /* module whose state[slot] holds the tensor */
    int32_t slot;
} dlt__state_entry;

struct dlt_module {
    const dlt__module_kind *kind;
    const char *kind_name; /* kind->name, or a custom module's own name (owned by it) */
    dlt_ctx *ctx;
    int32_t training;
    dlt_module *parent; /* the module holding this one as a child, or NULL */

    /* own state: parameters first, then buffers */
    int32_t n_state, cap_state;
    dlt__state *state;

    /* children in registration order */
    int32_t n_children, cap_children;
    dlt_module **children; /* owned */
    char **child_names;    /* owned */

    void *impl; /* the kind's attributes (kind->impl_size bytes, in the same allocation) */

    /* flattened state cache (names built on demand) */
    dlt__state_entry *flat;
    int32_t n_flat;
    int32_t flat_valid;
};

#define DLT__IMPL(m, type) ((type *)(m)->impl)

/* ---- the module tree (module.c) ---- */

/* A new module of a kind, in training mode, with zeroed attributes. */
dlt_status dlt__module_new(dlt_ctx *ctx, const dlt__module_kind *kind, const char *func,
                           dlt_module **out);
/* Registers a state tensor under a copy of name (takes the reference, also on failure);
 * parameters go after the last parameter, buffers at the end. No name checks. */
dlt_status dlt__module_add_state(dlt_module *m, const char *name, dlt_tensor *t, int32_t is_param,
                                 const char *func);
/* Creates an fp32/int64 tensor, fills it (DLT__INIT_*, a: the std or the bound) and
 * registers it on m (parameters require grad). m is left to the caller on failure. */
enum { DLT__INIT_ZEROS, DLT__INIT_ONES, DLT__INIT_NORMAL, DLT__INIT_UNIFORM };
dlt_status dlt__module_add_new_state(dlt_module *m, const char *name, const int64_t *shape,
                                     int32_t ndim, int32_t dtype, int init, double a,
                                     int32_t is_param, const char *func);
/* Appends a child under name (takes ownership of child, also on failure). No name checks. */
dlt_status dlt__module_add_child(dlt_module *m, const char *name, dlt_module *child,
                                 const char *func);
/* The same, but on failure child stays the caller's and m is unchanged. */
dlt_status dlt__module_attach_child(dlt_module *m, const char *name, dlt_module *child,
                                    const char *func);
/* Adds a child that a constructor call just made: created is that call's status (passed
 * on when it failed), slot (may be NULL) receives the borrowed child. Kinds that build
 * their children use it through DLT__ADD_CHILD:
 *     DLT__ADD_CHILD(m, "fc", dlt__linear_new(ctx, 512, 10, 1, func, &c_), &attrs->fc, func);
 * where c_ is the macro's own variable receiving the new child. */
dlt_status dlt__module_adopt(dlt_module *m, const char *name, dlt_status created,
                             dlt_module *child, dlt_module **slot, const char *func);
#define DLT__ADD_CHILD(m, name, call, slot, func)                                             \
    do {                                                                                      \
        dlt_module *c_ = NULL;                                                                \
        dlt_status s_ = (call);                                                               \
        DLT_CHECK(dlt__module_adopt((m), (name), s_, c_, (slot), (func)));                    \
    } while (0)
/* Checks what adopting child under name needs (child free and not an ancestor of m, one
 * context, name non-empty, without '.', unused on m); changes nothing. */
dlt_status dlt__module_check_child(const dlt_module *m, const char *name, const dlt_module *child,
                                   const char *func);
/* Checks a new state or child name (non-empty, no '.', unused on m). */
dlt_status dlt__module_check_name(const dlt_module *m, const char *name, const char *func);
/* Drops the state caches of m and its ancestors. */
void dlt__module_invalidate(dlt_module *m);
/* The forward dispatch (no argument checks beyond the counts): the one indirect call. */
dlt_status dlt__module_forward_n(dlt_module *m, dlt_tensor *const *in, int32_t n_in,
                                 dlt_tensor **out, int32_t n_out);
/* One input, one output. */
dlt_status dlt__module_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out);

/* ---- state (state.c) ---- */

/* Builds the flattened state cache if needed. */
dlt_status dlt__module_flat(dlt_module *m, const char *func);
/* Runs the sync hook of every module under m (may synchronise). */
dlt_status dlt__module_sync_buffers(dlt_module *m, const char *func);
/* Runs the loaded hook of every module under m (after a checkpoint load). */
void dlt__module_reset_tracked(dlt_module *m);
/* Runs the replayed hook of every module under m (k forwards replayed from a CUDA graph). */
void dlt__module_add_tracked(dlt_module *m, int64_t k);
/* Moves every parameter under m into one storage (offsets aligned to DLT__ARENA_ALIGN, in
 * state order, a tied parameter once), keeping values and requires_grad. On failure
 * nothing changes. */
dlt_status dlt__module_pack_params(dlt_module *m, const char *func);

/* ---- kinds other kinds build on ---- */

extern const dlt__module_kind dlt__kind_relu;       /* relu.c */
extern const dlt__module_kind dlt__kind_sequential; /* sequential.c */
extern const dlt__module_kind dlt__kind_global_avg_pool2d; /* pool.c */

/* Constructors with the public ones' validation, for kinds that build children. */
dlt_status dlt__conv2d_new(dlt_ctx *ctx, int64_t in, int64_t out_ch, int64_t kh, int64_t kw,
                           const dlt_conv2d_options *o, const char *func, dlt_module **out);
dlt_status dlt__batchnorm2d_new(dlt_ctx *ctx, int64_t c, double eps, double momentum,
                                const char *func, dlt_module **out);
dlt_status dlt__linear_new(dlt_ctx *ctx, int64_t in, int64_t out_features, int32_t bias,
                           const char *func, dlt_module **out);
dlt_status dlt__max_pool2d_new(dlt_ctx *ctx, int64_t kernel, int64_t stride, int64_t padding,
                               const char *func, dlt_module **out);
/* Transformer layers (embedding.c, layer_norm.c, dropout.c); the GPT family (gpt.c) builds
 * on them. */
dlt_status dlt__embedding_new(dlt_ctx *ctx, int64_t num, int64_t dim, int64_t padding_idx, const char *func,
                              dlt_module **out);
dlt_status dlt__layernorm_new(dlt_ctx *ctx, int64_t dim, double eps, int32_t affine, int32_t bias, const char *func,
                              dlt_module **out);
/* The LayerNorm module m run as dlt_layer_norm_to (output in dtype); another kind of module
 * runs its own forward. */
dlt_status dlt__layernorm_forward_to(dlt_module *m, dlt_tensor *x, int32_t dtype, dlt_tensor **out);
/* sum = x + b and the LayerNorm module m of sum in dtype, one op (dlt__add_layer_norm_to);
 * *sum = *out = NULL and DLT_OK when m is not a LayerNorm over x's last dimension or the op
 * declines: the caller runs dlt_add and the module. */
dlt_status dlt__layernorm_add_forward_to(dlt_module *m, dlt_tensor *x, dlt_tensor *b, int32_t dtype, dlt_tensor **sum,
                                        dlt_tensor **out);
dlt_status dlt__dropout_new(dlt_ctx *ctx, double p, const char *func, dlt_module **out);
/* Whether m is a GPT (gpt.c). */
int dlt__is_gpt(const dlt_module *m);
/* Generation with a KV cache (gpt.c, for gpt_generate.c): the last position's logits [B, 1,
 * V'] of idx [B, T] placed at positions pos0.., with cache[2i], cache[2i + 1] the keys and
 * values of block i ([B, H, pos0, D]; NULL before the prompt), grown by T positions. The
 * prompt goes first (pos0 = 0, causal among its tokens), then one token at a time, all within
 * block_size. dlt__gpt_cache_len: the cache's entries (2 per block). */
dlt_status dlt__gpt_forward_cached(dlt_module *gpt, dlt_tensor *idx, int64_t pos0, dlt_tensor **cache,
                                   dlt_tensor **last_logits);
int32_t dlt__gpt_cache_len(const dlt_module *gpt);
/* torchvision's BasicBlock/Bottleneck, unpacked (block.c; resnet.c packs the whole net). */
dlt_status dlt__block_new(dlt_ctx *ctx, int bottleneck, int64_t inplanes, int64_t planes,
                          int64_t stride, const char *func, dlt_module **out);
/* A BatchNorm2d module's forward with dlt_batch_norm2d_act's fused residual add and ReLU;
 * counts the batch when training (batchnorm.c). */
dlt_status dlt__batchnorm_forward_act(dlt_module *bn, dlt_tensor *x, dlt_tensor *residual,
                                      int32_t relu, dlt_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
