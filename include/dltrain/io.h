/*
 * dltrain/io.h - checkpoints in the safetensors format.
 *
 * File layout (https://github.com/huggingface/safetensors): an 8-byte little-endian header
 * length, a JSON header mapping each tensor name to {dtype, shape, data_offsets} (plus an
 * optional "__metadata__" string map), then the raw little-endian data. Names are PyTorch's
 * state_dict names, so `safetensors.torch.load_file` + `load_state_dict(strict=True)` reads
 * a model we wrote, and a file PyTorch wrote loads into our model.
 *
 * Saving writes a new temporary file beside path ("<path>.tmp-<pid>-<n>", created
 * exclusively, never through an existing file or symlink), flushes and fsyncs it, then
 * renames it over path and fsyncs the directory: an interrupted save never destroys an
 * earlier checkpoint. Loading reads and validates the header first (length, JSON, names,
 * dtypes, shapes, offsets inside the file and covering its data exactly), then reads only
 * the tensors it needs, and checks everything against the objects before changing
 * anything: on any error the model, optimizer and scaler are left untouched. Names are
 * UTF-8 without control characters (a NUL inside a JSON name is refused: readers would not
 * agree on the name).
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
/** Loads every state entry of the module from path (PyTorch's load_state_dict with
 *  strict=True). The file must hold exactly the module's names (extra entries under
 *  "optimizer.", "scaler." and "train." are ignored) with the same dtypes and shapes; the
 *  first problem is reported by name: a missing or unexpected name DLT_ERR_FORMAT, a dtype
 *  mismatch DLT_ERR_DTYPE, a shape mismatch DLT_ERR_SHAPE. Corrupt files give
 *  DLT_ERR_FORMAT, unreadable ones DLT_ERR_IO. Nothing changes on failure. Channels-last
 *  weights (dlt_module_set_format) load from the file's logical order. Synchronises.
 *  dlt_module_load_ex loads non-strictly and under prefixes. */
DLT_API DLT_NODISCARD dlt_status dlt_module_load(dlt_module *m, const char *path);

/**
 * A training checkpoint: the module's state, plus (when given) the optimizer's momentum
 * buffers ("optimizer.momentum_buffer.<param name>", f32, for buffers that hold data) and
 * state ("optimizer.lr" F64, "optimizer.step_count" I64), the scaler's five fields
 * ("scaler.scale" F32, "scaler.growth_factor" F64, "scaler.backoff_factor" F64,
 * "scaler.growth_interval" I32, "scaler._growth_tracker" I32; written only when the scaler
 * is enabled) and the position ("train.epoch", "train.step", I64), all as 0-D tensors.
 * opt and scaler may be NULL. The optimizer's parameters must be the module's (matched by
 * identity; DLT_ERR_INVALID_ARGUMENT otherwise). epoch and step must not be negative
 * (DLT_ERR_INVALID_ARGUMENT: the loader refuses negative positions). Synchronises.
 */
DLT_API DLT_NODISCARD dlt_status dlt_checkpoint_save(const char *path, const dlt_module *m,
                                                     dlt_optimizer *opt, dlt_grad_scaler *scaler,
                                                     int64_t epoch, int64_t step);
/** Loads what dlt_checkpoint_save wrote into the given objects (each may be NULL except m;
 *  epoch/step may be NULL). All-or-nothing as dlt_module_load (strict; its statuses): every
 *  entry the given objects need must be present (a missing one is DLT_ERR_FORMAT, by name);
 *  values the objects cannot hold are DLT_ERR_FORMAT (an lr above FLT_MAX, a scale that is
 *  negative or not finite in fp32, a negative step count, epoch or step). A disabled
 *  scaler ignores the scaler entries, as PyTorch's does. The optimizer's state is replaced
 *  as by PyTorch's load_state_dict: a momentum buffer the file lacks (none held data at the
 *  save) is emptied, and the next applied step starts it afresh. Synchronises (as
 *  dlt_module_load). */
DLT_API DLT_NODISCARD dlt_status dlt_checkpoint_load(const char *path, dlt_module *m, dlt_optimizer *opt,
                                                     dlt_grad_scaler *scaler, int64_t *epoch,
                                                     int64_t *step);

/* ---- gptex (issue 17): a training program's own state in its checkpoint ---- */
/** dlt_checkpoint_save plus n_extra entries of the program's own (as PyTorch checkpoints carry
 *  nanoGPT's iter_num and best_val_loss): extra[i] (any dtype, shape and context) is written
 *  under extra_names[i], which must start with "train." and be neither "train.epoch" nor
 *  "train.step". Loads ignore them (dlt_checkpoint_load, dlt_module_load); read them back with
 *  dlt_safetensors_open + dlt_safetensors_get. One file, written atomically as above.
 *  @return as dlt_checkpoint_save; DLT_ERR_NULL_POINTER (a NULL name or tensor);
 *  DLT_ERR_INVALID_ARGUMENT (n_extra < 0, a name outside "train.", two equal names). */
DLT_API DLT_NODISCARD dlt_status dlt_checkpoint_save_ex(const char *path, const dlt_module *m,
                                                        dlt_optimizer *opt, dlt_grad_scaler *scaler,
                                                        int64_t epoch, int64_t step,
                                                        const char *const *extra_names,
                                                        dlt_tensor *const *extra, int32_t n_extra);

/** Writes n named tensors (any context, dtype and format; stored in logical order) as one
 *  safetensors file, atomically as above. Names must be unique, non-empty UTF-8 without
 *  control characters and not "__metadata__" (DLT_ERR_INVALID_ARGUMENT). Synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_safetensors_save(const char *path, const char *const *names,
                                                      dlt_tensor *const *tensors, int32_t n);
/** Reads the tensor `name` of a safetensors file into a new contiguous tensor on ctx (the
 *  file's dtype and shape). The header is validated first, as dlt_module_load does, then
 *  only that tensor is read. To read several tensors of one file, open it once
 *  (dlt_safetensors_open) instead: each call here opens the file and parses its header.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_IO; DLT_ERR_FORMAT (corrupt file);
 *  DLT_ERR_INVALID_ARGUMENT (no tensor of that name); DLT_ERR_DTYPE (a safetensors dtype
 *  libdltrain tensors lack, such as F64); out of memory. */
DLT_API DLT_NODISCARD dlt_status dlt_safetensors_load_tensor(dlt_ctx *ctx, const char *path,
                                                             const char *name, dlt_tensor **out);

/* ---- harden (issue 19): the safetensors file handle, non-strict and filtered loads ---- */

/** An open safetensors file: its header read and validated, its tensors read on demand. */
typedef struct dlt_safetensors dlt_safetensors;

/** Opens a safetensors file: reads its header and validates it against the file's size
 *  (every rule of dlt_module_load; no tensor data is read yet), and keeps the file open
 *  until dlt_safetensors_close (a file renamed or replaced meanwhile is still the one
 *  read). Like PyTorch's safetensors.safe_open.
 *  @param out  receives the handle (owned by the caller: dlt_safetensors_close).
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_IO (cannot open or read, not a regular
 *  file: the message names the path and the system error); DLT_ERR_FORMAT (a bad header,
 *  named with the file); out of memory. */
DLT_API DLT_NODISCARD dlt_status dlt_safetensors_open(const char *path, dlt_safetensors **out);
/** Closes the file and frees the handle. NULL is a no-op. Tensors read from it stay valid. */
DLT_API void dlt_safetensors_close(dlt_safetensors *f);
/** Number of tensors in the file (0 for NULL; "__metadata__" is not a tensor). */
DLT_API int32_t dlt_safetensors_num_tensors(const dlt_safetensors *f);
/** Name of tensor i (0 <= i < num_tensors, in the header's order); NULL when out of range.
 *  Borrowed: valid until dlt_safetensors_close. */
DLT_API const char *dlt_safetensors_name(const dlt_safetensors *f, int32_t i);
/** dtype and shape of the tensor `name` without reading it. *dtype: DLT_F32..DLT_U8, or -1
 *  for a safetensors dtype libdltrain tensors lack (F64, BOOL, I8, ...:
 *  dlt_safetensors_dtype_name says which). shape receives min(ndim, cap) sizes, *ndim the
 *  number of dimensions. dtype, ndim (and shape when cap is 0) may be NULL.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (no such tensor, cap < 0
 *  or shape NULL with cap > 0). */
DLT_API DLT_NODISCARD dlt_status dlt_safetensors_info(const dlt_safetensors *f, const char *name,
                                                      int32_t *dtype, int64_t *shape, int32_t cap,
                                                      int32_t *ndim);
/** The safetensors dtype of tensor `name` as the file spells it ("F32", "BF16", "F64", ...);
 *  NULL when there is no such tensor. Borrowed: valid until dlt_safetensors_close. */
DLT_API const char *dlt_safetensors_dtype_name(const dlt_safetensors *f, const char *name);
/** Value of key in the file's "__metadata__" (e.g. "format" -> "pt"), NULL when absent.
 *  Borrowed: valid until dlt_safetensors_close. */
DLT_API const char *dlt_safetensors_metadata(const dlt_safetensors *f, const char *key);
/** Reads tensor `name` into a new contiguous tensor on ctx (the file's dtype and shape;
 *  owned by the caller). Only that tensor's bytes are read.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (no such tensor);
 *  DLT_ERR_DTYPE (a dtype libdltrain tensors lack); DLT_ERR_IO (the file cannot be read,
 *  or has shrunk since it was opened); out of memory. */
DLT_API DLT_NODISCARD dlt_status dlt_safetensors_get(const dlt_safetensors *f, dlt_ctx *ctx,
                                                     const char *name, dlt_tensor **out);

/** What a non-strict load left out (dlt_load_report_count / _name). */
#define DLT_LOAD_MISSING 0    /**< module entries the file lacks (module names) */
#define DLT_LOAD_UNEXPECTED 1 /**< file entries the module lacks (file names) */
#define DLT_LOAD_MISMATCHED 2 /**< in both, but another dtype or shape (module names) */

/** The names a module load did not load; made by dlt_module_load_ex and
 *  dlt_module_load_safetensors, freed by dlt_load_report_destroy. */
typedef struct dlt_load_report dlt_load_report;

/** Options of dlt_module_load_ex (core.h: option structs). */
typedef struct dlt_module_load_options {
    uint32_t size;             /**< sizeof(dlt_module_load_options), set by _default */
    int32_t strict;            /**< 1 (default): as dlt_module_load, every name, dtype and
                                *   shape must match or nothing loads. 0: what matches
                                *   loads; missing, unexpected and mismatched (dtype or
                                *   shape) names are skipped and reported. PyTorch's
                                *   strict=False still refuses a shape mismatch; skipping
                                *   it is what loads a 1000-class backbone into a 10-class
                                *   model. */
    const char *file_prefix;   /**< only file names starting with it take part; it is
                                *   removed before matching. NULL or "" (default): all */
    const char *module_prefix; /**< only module names starting with it take part; it is
                                *   put in front of each matched name. NULL or "": all */
} dlt_module_load_options;

/** Fills the first `size` bytes of o (core.h: option structs) with the defaults (strict = 1, no
 *  prefixes). */
DLT_API void dlt_module_load_options_init(dlt_module_load_options *o, uint32_t size);
/** dlt_module_load_options_init(o, sizeof *o): the call C and C++ programs make. */
static inline void dlt_module_load_options_default(dlt_module_load_options *o) {
    dlt_module_load_options_init(o, (uint32_t)sizeof *o);
}
/**
 * Loads the module's state from path with options (o == NULL: all defaults, i.e.
 * dlt_module_load). A file entry file_prefix + X loads into the module entry
 * module_prefix + X; entries outside the prefixes are neither loaded nor reported, and the
 * training entries of a checkpoint ("optimizer.", "scaler.", "train.") are never
 * unexpected. Examples: file_prefix "backbone." loads a whole model's backbone into a
 * backbone module; module_prefix "encoder." loads an encoder's own file into a whole model;
 * strict 0 with no prefixes initialises a 10-class model from a 1000-class checkpoint (all
 * but the classifier load; "fc.weight" and "fc.bias" are reported mismatched).
 * All or nothing as dlt_module_load: every entry that loads is checked and read before the
 * module changes; only those entries are read from the file. Synchronises.
 * @param report  when not NULL, receives on success a report of what was not loaded
 *                (owned by the caller: dlt_load_report_destroy; empty after a strict load);
 *                NULL after a failure.
 * @return as dlt_module_load; DLT_ERR_INVALID_ARGUMENT (o->size too small, strict not 0/1);
 *         DLT_ERR_NOT_SUPPORTED (a newer header's field set).
 */
DLT_API DLT_NODISCARD dlt_status dlt_module_load_ex(dlt_module *m, const char *path,
                                                    const dlt_module_load_options *o,
                                                    dlt_load_report **report);
/** dlt_module_load_ex from an open file (dlt_safetensors_open): several modules, or several
 *  parts of one, from one file without reading its header again. */
DLT_API DLT_NODISCARD dlt_status dlt_module_load_safetensors(dlt_module *m, const dlt_safetensors *f,
                                                             const dlt_module_load_options *o,
                                                             dlt_load_report **report);
/** Number of names of one kind (DLT_LOAD_MISSING, _UNEXPECTED, _MISMATCHED) in the report;
 *  0 for NULL or an unknown kind. */
DLT_API int32_t dlt_load_report_count(const dlt_load_report *r, int32_t kind);
/** Name i of one kind (in module order, or file order for unexpected ones); NULL when out
 *  of range. Borrowed: valid until dlt_load_report_destroy. */
DLT_API const char *dlt_load_report_name(const dlt_load_report *r, int32_t kind, int32_t i);
/** Number of module entries the load wrote (0 for NULL). */
DLT_API int32_t dlt_load_report_num_loaded(const dlt_load_report *r);
/** Frees the report. NULL is a no-op. */
DLT_API void dlt_load_report_destroy(dlt_load_report *r);

#ifdef __cplusplus
}
#endif
#endif
