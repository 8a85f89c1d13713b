/*
 * dltrain/io.h - checkpoints in the safetensors format.
 *
 * File layout (https://github.com/huggingface/safetensors): an 8-byte little-endian header
 * length, a JSON header mapping each tensor name to {dtype, shape, data_offsets} (plus an
 * optional "__metadata__" string map), then the raw little-endian data. Names are PyTorch's
 * state_dict names, so `safetensors.torch.load_file` + `load_state_dict(strict=True)` reads
 * a model we wrote, and a file PyTorch wrote loads into our model.
 *
 * Saving writes "<path>.tmp-<pid>", flushes and fsyncs it, then renames it over path: an
 * interrupted save never destroys an earlier checkpoint. Loading validates the whole file
 * (header, offsets, names, dtypes, shapes) before changing anything: on any error the
 * model, optimizer and scaler are left untouched.
 */
#ifndef DLTRAIN_IO_H
#define DLTRAIN_IO_H

#include "amp.h"
#include "nn.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Saves every state entry of the module (parameters and buffers). Synchronises.
 *  @return DLT_OK, DLT_ERR_NULL_POINTER, DLT_ERR_IO (the message names the path and the
 *  system error), out of memory. */
DLT_API DLT_NODISCARD dlt_status dlt_module_save(const dlt_module *m, const char *path);
/** Loads every state entry of the module from path. The file must hold exactly the
 *  module's names (extra entries under "optimizer.", "scaler." and "train." are ignored)
 *  with the same dtypes and shapes; the first mismatch is reported by name
 *  (DLT_ERR_FORMAT). Corrupt files give DLT_ERR_FORMAT, unreadable ones DLT_ERR_IO. Nothing
 *  changes on failure. Channels-last weights (dlt_module_set_format) load from the
 *  file's logical order. Synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_module_load(dlt_module *m, const char *path);

/**
 * A training checkpoint: the module's state, plus (when given) the optimizer's momentum
 * buffers ("optimizer.momentum_buffer.<param name>", f32, for buffers that hold data) and
 * state ("optimizer.lr" F64, "optimizer.step_count" I64), the scaler's five fields
 * ("scaler.scale" F32, "scaler.growth_factor" F64, "scaler.backoff_factor" F64,
 * "scaler.growth_interval" I32, "scaler._growth_tracker" I32; written only when the scaler
 * is enabled) and the position ("train.epoch", "train.step", I64), all as 0-D tensors.
 * opt and scaler may be NULL. The optimizer's parameters must be the module's (matched by
 * identity; DLT_ERR_INVALID_ARGUMENT otherwise). Synchronises.
 */
DLT_API DLT_NODISCARD dlt_status dlt_checkpoint_save(const char *path, const dlt_module *m,
                                                     dlt_optimizer *opt, dlt_grad_scaler *scaler,
                                                     int64_t epoch, int64_t step);
/** Loads what dlt_checkpoint_save wrote into the given objects (each may be NULL except m;
 *  epoch/step may be NULL). All-or-nothing as dlt_module_load: every entry the given
 *  objects need must be present (a missing one is DLT_ERR_FORMAT, by name). A disabled
 *  scaler ignores the scaler entries, as PyTorch's does. The optimizer's state is replaced
 *  as by PyTorch's load_state_dict: a momentum buffer the file lacks (none held data at the
 *  save) is emptied, and the next applied step starts it afresh. Synchronises (as
 *  dlt_module_load). */
DLT_API DLT_NODISCARD dlt_status dlt_checkpoint_load(const char *path, dlt_module *m, dlt_optimizer *opt,
                                                     dlt_grad_scaler *scaler, int64_t *epoch,
                                                     int64_t *step);

/** Writes n named tensors (any context, dtype and format; stored in logical order) as one
 *  safetensors file, atomically as above. Names must be unique, non-empty UTF-8 and not
 *  "__metadata__" (DLT_ERR_INVALID_ARGUMENT). Synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_safetensors_save(const char *path, const char *const *names,
                                                      dlt_tensor *const *tensors, int32_t n);
/** Reads the tensor `name` of a safetensors file into a new contiguous tensor on ctx (the
 *  file's dtype and shape). The whole file is validated first, as dlt_module_load does.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_IO; DLT_ERR_FORMAT (corrupt file);
 *  DLT_ERR_INVALID_ARGUMENT (no tensor of that name); DLT_ERR_DTYPE (a safetensors dtype
 *  libdltrain tensors lack, such as F64); out of memory. */
DLT_API DLT_NODISCARD dlt_status dlt_safetensors_load_tensor(dlt_ctx *ctx, const char *path,
                                                             const char *name, dlt_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
