/*
 * tensor.h - storage and tensor objects (lib/tensor/tensor.c): reference counts, shapes
 * and formats, the autograd fields of a tensor, and the validation helpers of the op front
 * doors. Part of lib/core/internal.h.
 */
#ifndef DLT_CORE_TENSOR_H
#define DLT_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "dltrain/tensor.h"
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlt_node dlt_node;
typedef struct dlt_storage dlt_storage;

/* ---------------------------------------------------------------------------------------
 * Storage and tensors
 * ------------------------------------------------------------------------------------- */
struct dlt_storage {
    int32_t refcount;
    dlt_ctx *ctx;
    void *data; /* device pointer for CUDA, host pointer for the CPU */
    size_t nbytes;
    int32_t external; /* not owned: never freed */
};

struct dlt_tensor {
    int32_t refcount;
    dlt_ctx *ctx;
    int32_t dtype;
    int32_t ndim;
    int32_t format;
    int64_t shape[DLT_MAX_DIMS];
    int64_t numel;
    dlt_storage *storage;
    size_t offset; /* bytes into storage */

    /* autograd */
    int32_t requires_grad;     /* leaf that accumulates a gradient */
    dlt_tensor *grad;          /* leaf gradient buffer (zero-grad(set_to_none) lets it go: tape.c) */
    int32_t grad_defined;      /* 0 after zero-grad(set_to_none): next backward overwrites */
    dlt_node *grad_fn;         /* node that produced this tensor (strong reference) */
    int32_t grad_fn_output;    /* which output of grad_fn */
    int32_t graph_consumed;    /* backward already ran through this tensor's node */
    int32_t grad_pending;      /* a deferred accumulation into this leaf's grad is queued */

    /* parameters: version bumped by in-place updates; autocast low-precision copies */
    uint64_t version;
    dlt_tensor *lp_copy[2];      /* [0] f16, [1] bf16 */
    uint64_t lp_version[2];
    /* written inside a graph capture by a copy, fill, load or collective: replays write it
     * without moving version, so autocast casts it again at every use (lib/ops/autocast.c) */
    int32_t graph_written;

    /* dist: uses of this leaf left in the running backward (tape hooks), valid when
     * hook_gen is the tape's current generation */
    uint64_t hook_gen;
    int32_t hook_uses;
};

static inline void *dlt__data(const dlt_tensor *t) {
    return t->storage ? (char *)t->storage->data + t->offset : NULL;
}
size_t dlt__dtype_size(int32_t dtype);
static inline int dlt__is_float(int32_t dtype) {
    return dtype == DLT_F32 || dtype == DLT_F16 || dtype == DLT_BF16;
}
static inline size_t dlt__nbytes(const dlt_tensor *t) {
    return (size_t)t->numel * dlt__dtype_size(t->dtype);
}

/* Allocates a tensor on ctx (uninitialised). func names the public caller for messages. */
dlt_status dlt__tensor_new(dlt_ctx *ctx, int32_t dtype, const int64_t *shape, int32_t ndim,
                           int32_t format, const char *func, dlt_tensor **out);
/* New tensor with the shape/format of `like` and the given dtype. */
dlt_status dlt__tensor_new_like(const dlt_tensor *like, int32_t dtype, const char *func,
                                dlt_tensor **out);
/* A view sharing t's storage with a new shape (contiguous tensors only). */
dlt_status dlt__tensor_view(dlt_tensor *t, const int64_t *shape, int32_t ndim, int32_t format,
                            const char *func, dlt_tensor **out);
/* A view of `nbytes` of a storage at `offset` (used for flat parameter arenas). */
dlt_status dlt__tensor_from_storage(dlt_storage *s, size_t offset, int32_t dtype,
                                    const int64_t *shape, int32_t ndim, int32_t format,
                                    const char *func, dlt_tensor **out);
dlt_status dlt__storage_new(dlt_ctx *ctx, size_t nbytes, const char *func, dlt_storage **out);
void dlt__storage_release(dlt_storage *s);

/* Shape helpers. */
int dlt__same_shape(const dlt_tensor *a, const dlt_tensor *b);
/* Writes "[2,3,4]" into buf. Returns buf. */
const char *dlt__shape_str(const dlt_tensor *t, char *buf, size_t n);
/* Logical 4-D index helpers: element (n,c,h,w) offset in elements for t's format. */
static inline int64_t dlt__off4(const dlt_tensor *t, int64_t n, int64_t c, int64_t h, int64_t w) {
    const int64_t C = t->shape[1], H = t->shape[2], W = t->shape[3];
    if (t->format == DLT_FORMAT_CHANNELS_LAST) return ((n * H + h) * W + w) * C + c;
    return ((n * C + c) * H + h) * W + w;
}

/* Validation helpers for op front doors (messages name func and the argument). */
dlt_status dlt__check_tensor(const dlt_tensor *t, const char *func, const char *arg);
dlt_status dlt__check_same_ctx(const dlt_tensor *a, const dlt_tensor *b, const char *func,
                               const char *arg_a, const char *arg_b);
dlt_status dlt__check_float(const dlt_tensor *t, const char *func, const char *arg);
dlt_status dlt__check_ndim(const dlt_tensor *t, int32_t ndim, const char *func, const char *arg);

#ifdef __cplusplus
}
#endif
#endif
