/*
 * dltrain/dist.h - data-parallel training over several processes, as torch.distributed and
 * DistributedDataParallel do it: one process per GPU (NCCL advises it when steps are
 * captured as CUDA graphs), each holding a full replica of the model.
 *
 * A communicator (dlt_comm) joins the processes of a job. It is made on a context and
 * works on that context's tensors: CUDA tensors go through NCCL (loaded at run time with
 * dlopen, libnccl.so.2; no link-time dependency), CPU tensors through libdltrain's own TCP
 * transport (a ring between the processes; docs/distributed.md says why not MPI). The
 * processes find each other the way torchrun sets them up: RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT in the environment (mpirun's OMPI_COMM_WORLD_RANK/SIZE work too); rank 0
 * listens on MASTER_PORT and hands every rank the others' addresses (and, on CUDA, the
 * NCCL unique id). dltrain-run (examples/dltrain_run.c) starts N local processes so.
 *
 * Failures: every wait on other processes has a timeout (30 minutes by default, PyTorch's;
 * DLT_DIST_TIMEOUT or the options change it). A process that dies, exits or disagrees (a
 * different collective, shape or dtype) ends the others' pending and later calls with
 * DLT_ERR_DIST, a silent one with DLT_ERR_DIST_TIMEOUT, each with a message naming the
 * rank. After a failure the communicator is aborted (its connections closed, NCCL's
 * communicator aborted, so no peer waits on it either) and every later call on it returns
 * that status again; destroy it and end the process.
 *
 * Collectives are called by every rank in the same order with matching tensors (same
 * dtype and element count; the root the same everywhere), as in torch.distributed. CPU
 * collectives block until done; CUDA ones are enqueued on the context's stream (and
 * captured into a CUDA graph when called during capture) and return.
 *
 * Threads: a communicator belongs to its context's thread.
 */
#ifndef DLTRAIN_DIST_H
#define DLTRAIN_DIST_H

#include "amp.h"
#include "data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reduction operations (torch.distributed.ReduceOp). AVG is SUM divided by the world size
 * (floating-point tensors only). MAX and MIN propagate NaN on the CPU. */
#define DLT_REDUCE_SUM 0
#define DLT_REDUCE_AVG 1
#define DLT_REDUCE_MAX 2
#define DLT_REDUCE_MIN 3

/** Bytes of an NCCL unique id (NCCL_UNIQUE_ID_BYTES). */
#define DLT_NCCL_UNIQUE_ID_BYTES 128

typedef struct dlt_comm dlt_comm;

/**
 * This process's place in the job as its launcher describes it, without connecting:
 * RANK, WORLD_SIZE and LOCAL_RANK (torchrun, dltrain-run), else OMPI_COMM_WORLD_RANK,
 * OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_LOCAL_RANK (mpirun). Unset: rank 0 of 1 (a
 * plain run). LOCAL_RANK unset: the rank. Use local_rank to pick the CUDA device before
 * creating the context. Any out-pointer may be NULL, but not all three.
 * @return DLT_OK; DLT_ERR_NULL_POINTER (all three NULL); DLT_ERR_INVALID_ARGUMENT (a value
 *         that is not a number, rank outside 0..world-1, world < 1: the message names the
 *         variable).
 */
DLT_API DLT_NODISCARD dlt_status dlt_dist_env(int32_t *rank, int32_t *world_size, int32_t *local_rank);

/** Options of dlt_comm_create_ex (fill with dlt_comm_options_default; core.h: "Option
 *  structs"). */
typedef struct dlt_comm_options {
    uint32_t size;           /**< sizeof(dlt_comm_options), set by _default */
    int32_t rank;            /**< -1 (default): from the environment (dlt_dist_env) */
    int32_t world_size;      /**< -1 (default): from the environment */
    int32_t master_port;     /**< 0 (default): DLT_MASTER_PORT, else MASTER_PORT (+1 under
                              *   torchrun, whose agent holds that port), else 29500 */
    int64_t timeout_ms;      /**< 0 (default): DLT_DIST_TIMEOUT seconds, else 1800000 */
    const char *master_addr; /**< NULL (default): MASTER_ADDR, else "127.0.0.1" (copied) */
} dlt_comm_options;

/** Fills the first `size` bytes of o (core.h: option structs) with the defaults
 *  (everything from the environment). NULL is a no-op. */
DLT_API void dlt_comm_options_init(dlt_comm_options *o, uint32_t size);
/** dlt_comm_options_init(o, sizeof *o): the call C and C++ programs make. */
static inline void dlt_comm_options_default(dlt_comm_options *o) {
    dlt_comm_options_init(o, (uint32_t)sizeof *o);
}

/**
 * torch.distributed.init_process_group("env://"): joins the job's other processes. Every
 * rank calls it (within the timeout of each other); rank 0 listens on the master port, the
 * others connect to it (retrying until it listens) and then to their ring neighbours. On a
 * CUDA context the ranks also build an NCCL communicator on the context's device (rank 0
 * makes the unique id and hands it out). World size 1 needs no network.
 * @param ctx  the context whose tensors the communicator moves (borrowed; it must outlive
 *             the communicator).
 * @param o    options, NULL for all defaults.
 * @param out  receives the communicator, owned by the caller (dlt_comm_destroy).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (rank/world out of range,
 *         an environment variable that is not a number, a bad address or port, o->size 0);
 *         DLT_ERR_IO (the master port cannot be bound, e.g. in use); DLT_ERR_DIST (a rank
 *         joined with another world size or backend, twice with one rank, or left);
 *         DLT_ERR_DIST_TIMEOUT (ranks missing at the timeout: the message names them);
 *         DLT_ERR_NCCL (NCCL cannot be loaded or fails); out of memory.
 */
DLT_API DLT_NODISCARD dlt_status dlt_comm_create_ex(dlt_ctx *ctx, const dlt_comm_options *o,
                                                    dlt_comm **out);
/** dlt_comm_create_ex(ctx, NULL, out): everything from the environment. */
DLT_API DLT_NODISCARD dlt_status dlt_comm_create(dlt_ctx *ctx, dlt_comm **out);

/**
 * A communicator over an NCCL unique id that the caller distributed itself (MPI_Bcast,
 * a shared file), as ncclCommInitRank: CUDA contexts only. It has no TCP connections, so
 * it moves CUDA tensors only; dlt_comm_barrier runs through NCCL.
 * @param unique_id id_bytes (>= DLT_NCCL_UNIQUE_ID_BYTES) bytes from dlt_nccl_unique_id.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (rank, world, id_bytes);
 *         DLT_ERR_NOT_SUPPORTED (a CPU context, a build without CUDA); DLT_ERR_NCCL.
 */
DLT_API DLT_NODISCARD dlt_status dlt_comm_create_nccl(dlt_ctx *ctx, int32_t rank, int32_t world_size,
                                                      const uint8_t *unique_id, size_t id_bytes,
                                                      dlt_comm **out);
/** ncclGetUniqueId into out (n >= DLT_NCCL_UNIQUE_ID_BYTES), for dlt_comm_create_nccl. Needs
 *  no GPU. DLT_ERR_NOT_SUPPORTED without CUDA in this build; DLT_ERR_NCCL when libnccl.so.2
 *  (DLT_NCCL_LIBRARY) cannot be loaded (the message says why) or fails. */
DLT_API DLT_NODISCARD dlt_status dlt_nccl_unique_id(uint8_t *out, size_t n);
/** The loaded NCCL's version code (22809 for 2.28.9); errors as dlt_nccl_unique_id. */
DLT_API DLT_NODISCARD dlt_status dlt_nccl_version(int32_t *out);

/** Closes the connections (and the NCCL communicator, aborting it after a failure). The
 *  context's pending work is not waited for on the CPU; on CUDA destroy waits for it.
 *  Detach scalers first (they hold the communicator borrowed). NULL is a no-op. */
DLT_API void dlt_comm_destroy(dlt_comm *c);
/** Rank of this process (-1 for NULL). */
DLT_API int32_t dlt_comm_rank(const dlt_comm *c);
/** Number of processes (0 for NULL). */
DLT_API int32_t dlt_comm_world_size(const dlt_comm *c);
/** The context the communicator works on (borrowed; NULL for NULL). */
DLT_API dlt_ctx *dlt_comm_ctx(const dlt_comm *c);
/** "nccl" (CUDA contexts) or "tcp" (CPU contexts); "" for NULL. */
DLT_API const char *dlt_comm_backend(const dlt_comm *c);
/** DLT_OK, or the failure that aborted the communicator (its message set again); on CUDA
 *  also NCCL's asynchronous error (ncclCommGetAsyncError). Does not wait. */
DLT_API DLT_NODISCARD dlt_status dlt_comm_check(dlt_comm *c);

/**
 * all_reduce(t, op): t (any dtype on the communicator's context, contiguous) becomes the
 * reduction of every rank's t, in place, with the same bits on every rank. Floating-point
 * sums run in fp32 (fp16/bf16 rounded at each step, as NCCL does).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (unknown op);
 *         DLT_ERR_DTYPE (AVG of an integer tensor); DLT_ERR_CONTEXT_MISMATCH (t elsewhere);
 *         DLT_ERR_SHAPE / DLT_ERR_DTYPE (another rank passed another element count, dtype
 *         or collective: every rank gets the same message, CPU); DLT_ERR_DIST;
 *         DLT_ERR_DIST_TIMEOUT; DLT_ERR_NCCL.
 */
DLT_API DLT_NODISCARD dlt_status dlt_comm_all_reduce(dlt_comm *c, dlt_tensor *t, int32_t op);
/** broadcast(t, src=root): every rank's t becomes root's. Errors as all_reduce, plus
 *  DLT_ERR_INVALID_ARGUMENT for a root outside 0..world-1. */
DLT_API DLT_NODISCARD dlt_status dlt_comm_broadcast(dlt_comm *c, dlt_tensor *t, int32_t root);
/** all_gather_into_tensor(out, in): out (world * numel(in) elements, in's dtype) holds
 *  every rank's in, by rank. DLT_ERR_SHAPE when out's size is not world times in's. */
DLT_API DLT_NODISCARD dlt_status dlt_comm_all_gather(dlt_comm *c, dlt_tensor *out, const dlt_tensor *in);
/** reduce_scatter_tensor(out, in, op): in holds world blocks of numel(out) elements; rank r's
 *  out becomes the reduction of block r over every rank. DLT_ERR_SHAPE when in's size is not
 *  world times out's. */
DLT_API DLT_NODISCARD dlt_status dlt_comm_reduce_scatter(dlt_comm *c, dlt_tensor *out,
                                                         const dlt_tensor *in, int32_t op);
/** barrier(): returns when every rank has called it (on CUDA after the context's queued
 *  work is done too). DLT_ERR_DIST / DLT_ERR_DIST_TIMEOUT as above. */
DLT_API DLT_NODISCARD dlt_status dlt_comm_barrier(dlt_comm *c);

/**
 * Makes the GradScaler reduce (max) its found-inf flag across the communicator's ranks
 * after every unscale, on the device (no host synchronisation; captured with the step), so
 * an inf/NaN gradient on any rank makes every rank skip the same step and back off the same
 * scale. DDP's gradient averaging alone spreads most infs, but not ones produced after it
 * (clipping, a custom unscale path) nor with no_sync; this makes the agreement certain.
 * c NULL detaches. The communicator is borrowed: detach before destroying it. A disabled
 * scaler accepts and ignores it.
 * @return DLT_OK; DLT_ERR_NULL_POINTER (s); DLT_ERR_CONTEXT_MISMATCH (other contexts).
 */
DLT_API DLT_NODISCARD dlt_status dlt_grad_scaler_set_comm(dlt_grad_scaler *s, dlt_comm *c);

/**
 * A checkpoint written once (dlt_checkpoint_save on rank 0, atomically), with every rank
 * returning rank 0's outcome (a failed write fails every rank with rank 0's message), so
 * no rank goes on believing a save succeeded. The replicas of DDP are identical, so the
 * file loads with dlt_checkpoint_load on any number of ranks (each rank loads the same
 * file), and into a plain one-process run. Synchronises.
 * @return as dlt_checkpoint_save on rank 0; DLT_ERR_DIST / DLT_ERR_DIST_TIMEOUT.
 */
DLT_API DLT_NODISCARD dlt_status dlt_comm_checkpoint_save(dlt_comm *c, const char *path, const dlt_module *m,
                                                          dlt_optimizer *opt, dlt_grad_scaler *scaler,
                                                          int64_t epoch, int64_t step);

/* ---------------------------------------------------------------------------------------
 * DistributedDataParallel
 * ------------------------------------------------------------------------------------- */
typedef struct dlt_ddp dlt_ddp;

/** Options of dlt_ddp_create_ex (fill with dlt_ddp_options_default; core.h: "Option
 *  structs"). */
typedef struct dlt_ddp_options {
    uint32_t size;             /**< sizeof(dlt_ddp_options), set by _default */
    int32_t broadcast_buffers; /**< 1 (default): dlt_ddp_forward first broadcasts the buffers
                                *   (BatchNorm statistics) from rank 0, as DDP does */
    double bucket_cap_mb;      /**< gradient bucket size in MiB, default 25 (DDP's) */
    double first_bucket_mb;    /**< the bucket of the first parameters, default 1 (DDP's
                                *   _DEFAULT_FIRST_BUCKET_BYTES) */
} dlt_ddp_options;

/** Fills the first `size` bytes of o (core.h: option structs) with DDP's defaults. NULL is
 *  a no-op. */
DLT_API void dlt_ddp_options_init(dlt_ddp_options *o, uint32_t size);
/** dlt_ddp_options_init(o, sizeof *o): the call C and C++ programs make. */
static inline void dlt_ddp_options_default(dlt_ddp_options *o) {
    dlt_ddp_options_init(o, (uint32_t)sizeof *o);
}

/**
 * DistributedDataParallel(m): m's parameters and buffers are broadcast from rank 0 (all
 * replicas start equal; the ranks first check that they hold the same parameter shapes),
 * and every later backward through m averages the gradients of the parameters that require
 * a gradient (frozen ones are left alone, as in DDP) over the ranks:
 *  - parameters are put into buckets as DDP does: in m's parameter order, closing a bucket
 *    when it reaches first_bucket_mb (the first one) or bucket_cap_mb (later ones), then
 *    reduced in reverse order (the order backward produces gradients);
 *  - the gradients of a bucket live in one flat buffer (DDP's gradient_as_bucket_view), and
 *    a bucket is all-reduced (AVG) as soon as the backward has produced every gradient in
 *    it, while the rest of the backward runs: on CUDA through NCCL on a side stream (events
 *    order it, so a captured step captures it too), on the CPU at once;
 *  - buckets are reduced in the same order on every rank; a parameter that got no gradient
 *    on this rank contributes zeros (and receives the average);
 *  - after dlt_backward returns (CUDA: in stream order) the gradients are averaged.
 * m stays usable as before (dlt_module_forward, optimizers over its parameters); m and c
 * are borrowed and must outlive the DDP object. One context holds at most 4 DDP objects.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_CONTEXT_MISMATCH (m on another context);
 *         DLT_ERR_INVALID_ARGUMENT (bucket sizes not positive, broadcast_buffers not 0/1, a
 *         module without parameters); DLT_ERR_SHAPE (another rank's model differs: the
 *         message names the first parameter that differs); DLT_ERR_INVALID_STATE (4 DDP
 *         objects on the context, a backward running); DLT_ERR_DIST...; out of memory.
 */
DLT_API DLT_NODISCARD dlt_status dlt_ddp_create_ex(dlt_comm *c, dlt_module *m, const dlt_ddp_options *o,
                                                   dlt_ddp **out);
/** dlt_ddp_create_ex(c, m, NULL, out). */
DLT_API DLT_NODISCARD dlt_status dlt_ddp_create(dlt_comm *c, dlt_module *m, dlt_ddp **out);
/** Stops reducing (the gradients stay in their bucket buffers, valid). NULL is a no-op. */
DLT_API void dlt_ddp_destroy(dlt_ddp *d);
/** DDP's forward: broadcasts the buffers from rank 0 when broadcast_buffers is on (a
 *  collective: every rank calls it), then dlt_module_forward(m, x, out). */
DLT_API DLT_NODISCARD dlt_status dlt_ddp_forward(dlt_ddp *d, dlt_tensor *x, dlt_tensor **out);
/** DDP's no_sync(): on = 1 makes the following backwards accumulate gradients locally
 *  without communication (gradient accumulation's micro-steps); on = 0 ends it, and the
 *  next backward averages everything accumulated. DLT_ERR_INVALID_STATE during backward. */
DLT_API DLT_NODISCARD dlt_status dlt_ddp_no_sync(dlt_ddp *d, int32_t on);
/** Number of gradient buckets (0 for NULL). */
DLT_API int32_t dlt_ddp_num_buckets(const dlt_ddp *d);
/** Bucket i in reduction order (0 is reduced first): the indices of its parameters in
 *  dlt_module_params order (up to cap of them into idx; idx may be NULL when cap is 0),
 *  their count (*n) and its size in bytes (*bytes); n and bytes may be NULL.
 *  DLT_ERR_INVALID_ARGUMENT for i out of range. */
DLT_API DLT_NODISCARD dlt_status dlt_ddp_bucket(const dlt_ddp *d, int32_t i, int32_t *idx, int32_t cap,
                                                int32_t *n, int64_t *bytes);

/** How the last synchronising backward launched its buckets: *during receives the number
 *  launched while the backward still ran (overlapping it), *after those launched when it
 *  ended (their last gradient came with the backward's final node, or a parameter got no
 *  gradient). Either may be NULL. */
DLT_API DLT_NODISCARD dlt_status dlt_ddp_overlap(const dlt_ddp *d, int32_t *during, int32_t *after);

/* ---------------------------------------------------------------------------------------
 * Data: each rank's share of an epoch
 * ------------------------------------------------------------------------------------- */
/**
 * torch.utils.data.DistributedSampler(dataset, num_replicas, rank, shuffle, seed, drop_last)
 * for a loader: from the next epoch on the loader hands out only rank's share of the epoch.
 * The epoch's order (the loader's shuffle and seed: the same on every rank) is padded to a
 * multiple of num_replicas by repeating its start (drop_last = 0) or cut to one (drop_last
 * = 1, only when the size does not divide), and rank takes every num_replicas-th sample
 * from position rank on: shards are disjoint (but for the padding) and together cover the
 * epoch; each holds ceil(size / num_replicas) samples (drop_last: floor). The loader's own
 * drop_last still applies to the shard's last batch. Augmentation draws follow the
 * sample's position in the whole epoch, so N ranks with batch b see exactly the batches
 * (and crops) of one rank with batch N*b. num_replicas 1, rank 0 undoes it.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (num_replicas < 1, rank
 *         outside 0..num_replicas-1, drop_last not 0/1, a shard smaller than the batch
 *         with the loader's drop_last); DLT_ERR_INVALID_STATE (capturing); out of memory.
 */
DLT_API DLT_NODISCARD dlt_status dlt_loader_set_distributed(dlt_loader *ld, int32_t num_replicas,
                                                            int32_t rank, int32_t drop_last);
/** Samples per epoch this loader hands out: its shard's size when distributed, else the
 *  dataset's size (0 for NULL). dlt_loader_epoch_order writes this many entries. */
DLT_API int64_t dlt_loader_num_samples(const dlt_loader *ld);
/**
 * Random-window batches for one rank of num_replicas: row b of draw s is the window that
 * row rank * batch_size + b of draw s would be in a loader of num_replicas * batch_size
 * rows with the same seed, so the ranks draw distinct windows and together exactly what
 * one process with the global batch draws. num_replicas 1, rank 0 undoes it.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (num_replicas < 1, rank
 *         out of range, num_replicas * batch_size above 2^31-1); DLT_ERR_INVALID_STATE
 *         (capturing).
 */
DLT_API DLT_NODISCARD dlt_status dlt_token_loader_set_distributed(dlt_token_loader *ld, int32_t num_replicas,
                                                                  int32_t rank);

#ifdef __cplusplus
}
#endif
#endif /* DLTRAIN_DIST_H */
