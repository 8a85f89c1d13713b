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
 *  module's names (extra entries under "optimizer." and "scaler." are ignored) with the same
 *  dtypes and shapes; the first mismatch is reported by name (DLT_ERR_FORMAT). Corrupt
 *  files give DLT_ERR_FORMAT, unreadable ones DLT_ERR_IO. Nothing changes on failure. */
DLT_API DLT_NODISCARD dlt_status dlt_module_load(dlt_module *m, const char *path);

/**
 * A training checkpoint: the module's state, plus (when given) the optimizer's momentum
 * buffers ("optimizer.momentum_buffer.<param name>") and state ("optimizer.lr",
 * "optimizer.step_count"), the scaler's five fields ("scaler.scale", "scaler.growth_factor",
 * "scaler.backoff_factor", "scaler.growth_interval", "scaler._growth_tracker") and the
 * position ("train.epoch", "train.step"), all as tensors. opt and scaler may be NULL.
 * The optimizer's parameters must be the module's (matched by identity).
 */
DLT_API DLT_NODISCARD dlt_status dlt_checkpoint_save(const char *path, const dlt_module *m,
                                                     dlt_optimizer *opt, dlt_grad_scaler *scaler,
                                                     int64_t epoch, int64_t step);
/** Loads what dlt_checkpoint_save wrote into the given objects (each may be NULL except m;
 *  epoch/step may be NULL). All-or-nothing as dlt_module_load. */
DLT_API DLT_NODISCARD dlt_status dlt_checkpoint_load(const char *path, dlt_module *m, dlt_optimizer *opt,
                                                     dlt_grad_scaler *scaler, int64_t *epoch,
                                                     int64_t *step);

/** Writes n named tensors (any context) as one safetensors file, atomically as above. */
DLT_API DLT_NODISCARD dlt_status dlt_safetensors_save(const char *path, const char *const *names,
                                                      dlt_tensor *const *tensors, int32_t n);

#ifdef __cplusplus
}
#endif
#endif
