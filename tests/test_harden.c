/*
 * test_harden.c - failure injection, durability, resume and determinism, on the CPU and
 * (the injection, resume and determinism cases again, deterministic mode on) on CUDA.
 *
 *  - A whole training step (loader, conv/BN/ReLU/BasicBlocks/pool/linear model under fp16
 *    autocast, cross-entropy, GradScaler, SGD with momentum, weight decay and an lr schedule)
 *    is run once per allocation it makes with that allocation failing
 *    (dlt_testing_fail_alloc), both as the very first step (momentum buffers, gradient
 *    buffers and fp16 weight copies are created then) and as a later one. Every failure
 *    must be a clean out-of-memory status with a message, leave no tensor, memory or tape
 *    node behind, and leave model, optimizer and scaler usable: retrying the step succeeds
 *    and the following steps give bitwise the losses, parameters, momentum buffers, scaler
 *    and optimizer state of a run that never failed.
 *  - Checkpoint saves over a good checkpoint fail at every file operation in turn (each
 *    write of data, the fsync, the close, the rename: dlt_testing_fail_write): the old file
 *    stays byte-identical and loads, no temporary file is left, and the next save works.
 *  - Resuming from a checkpoint (at an epoch boundary and in the middle of an epoch, into
 *    fresh objects and into the objects that kept training) reproduces the uninterrupted
 *    run bitwise: losses, parameters, BatchNorm buffers, momentum buffers, lr schedule,
 *    step count and scaler state.
 *  - Two identical runs give bitwise-identical losses, with and without
 *    dlt_ctx_set_deterministic.
 *  - API misuse: objects from another context for every entry taking two objects (nothing
 *    changes), zero-size dimensions for every op (forward and backward), and dimensions or
 *    op arguments whose size arithmetic overflows (DLT_ERR_INVALID_ARGUMENT or a shape
 *    error, never a crash or undefined behaviour: the sanitizer build checks that).
 */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "harness.h"

static char g_dir[256];

#define RETURN_IF_FAILED(call)                                                                \
    do {                                                                                      \
        dlt_status st_ = (call);                                                              \
        if (st_ != DLT_OK) return st_;                                                        \
    } while (0)

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

/* ---------------------------------------------------------------------------------------
 * A small training rig: synthetic data, a ResNet-like model, SGD + GradScaler + schedule.
 * ------------------------------------------------------------------------------------- */

#define RIG_IMAGES 12
#define RIG_BATCH 4 /* 3 batches per epoch */
#define RIG_MAX_PARAMS 64

typedef struct rig {
    dlt_ctx *ctx;
    dlt_dataset *ds;
    dlt_loader *ld;
    dlt_module *model;
    dlt_optimizer *opt;
    dlt_grad_scaler *scaler;
    dlt_tensor *params[RIG_MAX_PARAMS];
    int32_t np;
    dlt_tensor *x, *y; /* batch taken but not yet trained on (borrowed from the loader) */
    int32_t amp;       /* DLT_F16, or -1 for fp32 */
} rig;

/* Where rigs run. CPU: a fresh context per rig. CUDA: one context shared by every rig of a
 * case, because a fresh one would rebuild its cuDNN plans (seconds) for each of the hundreds
 * of injection runs; each rig frees all it made, so its memory counts are still its own. */
static dlt_ctx *g_shared_ctx;
/* Determinism for rigs that do not choose: off on the CPU (it changes nothing there), on
 * for CUDA, where bitwise comparisons need deterministic cuDNN engines. */
static int32_t g_det_default;

static dlt_status add_child(dlt_module *seq, dlt_status st, dlt_module *child) {
    if (st != DLT_OK) return st;
    return dlt_sequential_append(seq, NULL, child);
}

/* conv(3->8, s4) bn relu maxpool BasicBlock(8,8) BasicBlock(8,16,s2) gap flatten fc(16->10):
 * 32x32 -> 8x8 -> 4x4 -> 4x4 -> 2x2 -> 1x1 (small maps: the sweeps below run thousands of
 * steps). */
static dlt_status build_model(dlt_ctx *ctx, dlt_module **out) {
    dlt_module *seq = NULL, *m = NULL;
    dlt_status st = dlt_sequential_create(ctx, &seq);
    if (st != DLT_OK) return st;
#define ADD(call) (st == DLT_OK ? (st = (call), st = add_child(seq, st, m)) : st)
    ADD(dlt_conv2d_create(ctx, 3, 8, 3, 3, 4, 1, 1, 1, 0, &m));
    ADD(dlt_batchnorm2d_create(ctx, 8, 1e-5, 0.1, &m));
    ADD(dlt_relu_create(ctx, &m));
    ADD(dlt_max_pool2d_create(ctx, 3, 2, 1, &m));
    ADD(dlt_basic_block_create(ctx, 8, 8, 1, &m));
    ADD(dlt_basic_block_create(ctx, 8, 16, 2, &m));
    ADD(dlt_global_avg_pool2d_create(ctx, &m));
    ADD(dlt_flatten_create(ctx, &m));
    ADD(dlt_linear_create(ctx, 16, 10, 1, &m));
#undef ADD
    if (st != DLT_OK) {
        dlt_module_destroy(seq);
        return st;
    }
    *out = seq;
    return DLT_OK;
}

/* Everything from seeds: two rigs made with the same arguments are identical. */
static void rig_init(rig *r, int32_t amp, double init_scale, int32_t deterministic) {
    memset(r, 0, sizeof *r);
    r->amp = amp;
    r->ctx = g_shared_ctx ? g_shared_ctx : th_cpu_ctx();
    CHECK_OK(dlt_ctx_set_deterministic(r->ctx, deterministic < 0 ? g_det_default : deterministic));
    CHECK_OK(dlt_ctx_set_seed(r->ctx, 1234));
    CHECK_OK(dlt_synthetic_dataset_create(r->ctx, RIG_IMAGES, 10, 77, 1, &r->ds));
    CHECK_OK(dlt_loader_create(r->ds, RIG_BATCH, 1, 0, 99, &r->ld));
    CHECK_OK(dlt_loader_set_augment(r->ld, 4, 1));
    const float mean[3] = {0.49f, 0.48f, 0.45f}, std[3] = {0.25f, 0.24f, 0.26f};
    CHECK_OK(dlt_loader_set_normalize(r->ld, mean, std));
    CHECK_OK(build_model(r->ctx, &r->model));
    CHECK_OK(dlt_module_params(r->model, r->params, RIG_MAX_PARAMS, &r->np));
    REQUIRE(r->np > 0 && r->np <= RIG_MAX_PARAMS, "%d params", r->np);
    CHECK_OK(dlt_sgd_create(r->params, r->np, 0.05, 0.9, 0.0, 5e-4, 0, 0, &r->opt));
    CHECK_OK(dlt_lr_schedule_warmup(r->opt, 3, 0.25));
    CHECK_OK(dlt_lr_schedule_cosine(r->opt, 40, 0.001));
    /* a small growth interval so the scale moves (growth and, early on, backoff) */
    CHECK_OK(dlt_grad_scaler_create(r->ctx, init_scale, 2.0, 0.5, 2, amp == DLT_F16, &r->scaler));
}

static void rig_fini(rig *r) {
    dlt_grad_scaler_destroy(r->scaler);
    dlt_optimizer_destroy(r->opt);
    dlt_module_destroy(r->model);
    dlt_loader_destroy(r->ld);
    dlt_dataset_destroy(r->ds);
    if (r->ctx != g_shared_ctx) dlt_ctx_destroy(r->ctx);
    memset(r, 0, sizeof *r);
}

enum { PH_LOADER, PH_FORWARD, PH_BACKWARD, PH_STEP, PH_UPDATE, PH_READ, PH_DONE };
static const char *const PHASE_NAMES[] = {"loader", "forward", "backward", "step", "update", "read", "done"};

/* One training step as examples/train.c runs it. On failure everything the step made is
 * released, the autocast region is closed, and r->x/r->y keep the batch when the loader had
 * delivered it (so a retry trains on the same batch). *phase says where it stopped. */
static dlt_status rig_step(rig *r, double *loss_out, int *phase) {
    dlt_status st = DLT_OK;
    dlt_tensor *logits = NULL, *loss = NULL, *scaled = NULL;
    int in_autocast = 0;
#define STEP_TRY(call)                                                                        \
    do {                                                                                      \
        st = (call);                                                                          \
        if (st != DLT_OK) goto done;                                                          \
    } while (0)
    *phase = PH_LOADER;
    if (!r->x) {
        int32_t has = 0;
        STEP_TRY(dlt_loader_next(r->ld, &r->x, &r->y, &has));
        if (!has) STEP_TRY(dlt_loader_next(r->ld, &r->x, &r->y, &has)); /* next epoch */
        if (!has) {
            st = DLT_ERR_INTERNAL;
            goto done;
        }
    }
    *phase = PH_FORWARD;
    STEP_TRY(dlt_optimizer_zero_grad(r->opt, 1));
    if (r->amp >= 0) {
        STEP_TRY(dlt_autocast_begin(r->ctx, r->amp));
        in_autocast = 1;
    }
    STEP_TRY(dlt_module_forward(r->model, r->x, &logits));
    STEP_TRY(dlt_cross_entropy(logits, r->y, -100, DLT_REDUCTION_MEAN, &loss));
    if (in_autocast) {
        in_autocast = 0;
        STEP_TRY(dlt_autocast_end(r->ctx));
    }
    dlt_tensor_release(logits);
    logits = NULL;
    *phase = PH_BACKWARD;
    STEP_TRY(dlt_grad_scaler_scale(r->scaler, loss, &scaled));
    STEP_TRY(dlt_backward(scaled, NULL));
    *phase = PH_STEP;
    STEP_TRY(dlt_grad_scaler_step(r->scaler, r->opt));
    *phase = PH_UPDATE;
    STEP_TRY(dlt_grad_scaler_update(r->scaler));
    r->x = r->y = NULL; /* trained on */
    *phase = PH_READ;
    STEP_TRY(dlt_tensor_item(loss, loss_out));
    *phase = PH_DONE;
done:
    if (in_autocast && dlt_autocast_end(r->ctx) != DLT_OK) st = DLT_ERR_INTERNAL;
    dlt_tensor_release(logits);
    dlt_tensor_release(loss);
    dlt_tensor_release(scaled);
    if (st != DLT_OK && *phase == PH_LOADER) r->x = r->y = NULL;
    return st;
#undef STEP_TRY
}

/* Runs n steps that must succeed, appending the losses. */
static void rig_steps(rig *r, int n, double *losses) {
    for (int i = 0; i < n; i++) {
        int ph = 0;
        dlt_status st = rig_step(r, &losses[i], &ph);
        REQUIRE(st == DLT_OK, "step %d failed in %s: %s", i, PHASE_NAMES[ph], dlt_last_error());
    }
}

/* ---- state snapshots: what "bitwise the same" compares ---- */

typedef struct snap {
    unsigned char *p;
    size_t n, cap;
} snap;

static void snap_put(snap *s, const void *src, size_t n) {
    if (s->n + n > s->cap) {
        s->cap = (s->n + n) * 2 + 64;
        s->p = realloc(s->p, s->cap);
        REQUIRE(s->p != NULL);
    }
    memcpy(s->p + s->n, src, n);
    s->n += n;
}

static void snap_tensor(snap *s, const dlt_tensor *t) {
    size_t nb = dlt_tensor_nbytes(t);
    unsigned char *buf = malloc(nb + 1);
    CHECK_OK(dlt_tensor_copy_to_host(t, buf, nb));
    snap_put(s, &nb, sizeof nb);
    snap_put(s, buf, nb);
    free(buf);
}

/* Parameters, momentum buffers, lr, applied steps, scaler state, and (buffers = 1) the
 * module's buffers (BatchNorm running statistics and num_batches_tracked). */
static snap rig_snapshot(rig *r, int buffers) {
    snap s = {0};
    int32_t ns = dlt_module_num_state(r->model);
    for (int32_t i = 0; i < ns; i++) {
        dlt_tensor *t = NULL;
        int32_t is_param = 0;
        CHECK_OK(dlt_module_state_entry(r->model, i, NULL, &t, &is_param));
        if (is_param || buffers) snap_tensor(&s, t);
    }
    for (int32_t i = 0; i < r->np; i++) {
        dlt_tensor *b = dlt_optimizer_momentum_buffer(r->opt, i);
        int32_t has = b != NULL;
        snap_put(&s, &has, sizeof has);
        if (b) snap_tensor(&s, b);
    }
    double lr = 0;
    int64_t steps = 0;
    CHECK_OK(dlt_optimizer_get_lr(r->opt, &lr));
    CHECK_OK(dlt_optimizer_step_count(r->opt, &steps));
    snap_put(&s, &lr, sizeof lr);
    snap_put(&s, &steps, sizeof steps);
    if (dlt_grad_scaler_is_enabled(r->scaler)) {
        double scale = 0;
        int32_t tracker = 0;
        CHECK_OK(dlt_grad_scaler_get_state(r->scaler, &scale, NULL, NULL, NULL, &tracker));
        snap_put(&s, &scale, sizeof scale);
        snap_put(&s, &tracker, sizeof tracker);
    }
    return s;
}

static int snap_equal(const snap *a, const snap *b) {
    return a->n == b->n && memcmp(a->p, b->p, a->n) == 0;
}

typedef struct mem_state {
    uint64_t bytes, count;
    int64_t nodes;
} mem_state;

/* Live bytes and allocations of the context, and its live tape nodes: a leak shows here. */
static mem_state ctx_mem(dlt_ctx *ctx) {
    mem_state m = {0, 0, 0};
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_ALLOCATED, &m.bytes));
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_ALLOC_COUNT, &m.count));
    CHECK_OK(dlt_tape_live_nodes(ctx, &m.nodes));
    return m;
}
static mem_state rig_mem(rig *r) { return ctx_mem(r->ctx); }

static int mem_equal(mem_state a, mem_state b) {
    return a.bytes == b.bytes && a.count == b.count && a.nodes == b.nodes;
}

/* ---------------------------------------------------------------------------------------
 * 1. Allocation failures over a whole training step
 * ------------------------------------------------------------------------------------- */

/* Low enough that the first step is applied (an inf skip would hide a step that used
 * gradients still scaled), high enough to be a real loss scale. */
#define INJ_SCALE 4096.0
#define INJ_AFTER 1 /* steps run after the recovered one and compared with the reference */

/* The run without failure: losses, final state, memory before/after the step under test
 * (the one after `warm` steps) and at the end, and that step's number of allocations. */
typedef struct inj_ref {
    double losses[16];
    snap final;
    mem_state mem_before, mem_after, mem_end;
    int64_t allocs;
} inj_ref;

static void inj_reference(int warm, inj_ref *ref) {
    rig r;
    if (g_shared_ctx) {
        /* a first run fills the shared context's caches (cuDNN plans, workspace), so the
         * reference counts the allocations the injection runs make; the context-level ones
         * of a context's very first step are not injected here */
        double l[16];
        rig_init(&r, DLT_F16, INJ_SCALE, -1);
        rig_steps(&r, warm + 1 + INJ_AFTER, l);
        rig_fini(&r);
    }
    rig_init(&r, DLT_F16, INJ_SCALE, -1);
    rig_steps(&r, warm, ref->losses);
    ref->mem_before = rig_mem(&r);
    int64_t a0 = 0, a1 = 0;
    CHECK_OK(dlt_testing_alloc_count(r.ctx, &a0));
    rig_steps(&r, 1, ref->losses + warm);
    CHECK_OK(dlt_testing_alloc_count(r.ctx, &a1));
    ref->allocs = a1 - a0;
    ref->mem_after = rig_mem(&r);
    rig_steps(&r, INJ_AFTER, ref->losses + warm + 1);
    ref->mem_end = rig_mem(&r);
    ref->final = rig_snapshot(&r, 0);
    rig_fini(&r);
}

/* Runs `warm` steps, then the step under test with its n-th allocation failing, retries it
 * if it failed, runs INJ_AFTER more steps, and compares with the reference. Returns 1 when
 * the step failed (the n-th allocation was reached), 0 when it succeeded. */
static int inj_run(int warm, int64_t n, const inj_ref *ref, int *fail_phase) {
    rig r;
    double losses[16];
    int failed = 0;
    rig_init(&r, DLT_F16, INJ_SCALE, -1);
    rig_steps(&r, warm, losses);
    /* the step's zero_grad(set_to_none) releases the gradients, so a step that fails after
     * it holds less than before: memory is compared from after it (called here first; the
     * step's own call then changes nothing, and allocates nothing either way) */
    CHECK_OK(dlt_optimizer_zero_grad(r.opt, 1));
    mem_state before = rig_mem(&r);
    CHECK_OK(dlt_testing_fail_alloc(r.ctx, n));
    int ph = 0;
    dlt_clear_error();
    dlt_status st = rig_step(&r, &losses[warm], &ph);
    CHECK_OK(dlt_testing_fail_alloc(r.ctx, 0)); /* a step that did not reach n leaves it armed */
    *fail_phase = ph;
    if (st != DLT_OK) {
        failed = 1;
        /* host allocations say OUT_OF_MEMORY, device memory DEVICE_OUT_OF_MEMORY */
        CHECK(st == DLT_ERR_OUT_OF_MEMORY || (g_shared_ctx && st == DLT_ERR_DEVICE_OUT_OF_MEMORY),
              "n=%lld (%s): status %d (%s): %s", (long long)n,
              PHASE_NAMES[ph], st, dlt_status_string(st), dlt_last_error());
        CHECK(dlt_last_error()[0] != '\0', "n=%lld: no message", (long long)n);
        /* a step must not fail once the optimizer has changed the parameters */
        CHECK(ph <= PH_STEP, "n=%lld failed in %s", (long long)n, PHASE_NAMES[ph]);
        CHECK(dlt_autocast_dtype(r.ctx) == -1);
        mem_state m = rig_mem(&r);
        CHECK(m.nodes == 0, "n=%lld (%s): %lld tape nodes alive after the failed step",
              (long long)n, PHASE_NAMES[ph], (long long)m.nodes);
        if (warm > 0) {
            /* every lasting buffer exists already: nothing may remain once the gradient
             * buffers a failed backward created (its parameters') are released again */
            CHECK_OK(dlt_optimizer_zero_grad(r.opt, 1));
            m = rig_mem(&r);
        }
        if (warm > 0)
            CHECK(mem_equal(m, before), "n=%lld (%s): %llu bytes in %llu allocations, %llu in %llu before",
                  (long long)n, PHASE_NAMES[ph], (unsigned long long)m.bytes,
                  (unsigned long long)m.count, (unsigned long long)before.bytes,
                  (unsigned long long)before.count);
        else
            CHECK(m.bytes <= ref->mem_after.bytes && m.count <= ref->mem_after.count,
                  "n=%lld (%s): %llu bytes in %llu allocations after a failed first step; a "
                  "successful one leaves %llu in %llu",
                  (long long)n, PHASE_NAMES[ph], (unsigned long long)m.bytes,
                  (unsigned long long)m.count, (unsigned long long)ref->mem_after.bytes,
                  (unsigned long long)ref->mem_after.count);
        /* retry: the same batch again, from the start of the step */
        st = rig_step(&r, &losses[warm], &ph);
        CHECK(st == DLT_OK, "n=%lld: the retry failed in %s: %s", (long long)n, PHASE_NAMES[ph],
              dlt_last_error());
    }
    if (st == DLT_OK) {
        CHECK(mem_equal(rig_mem(&r), ref->mem_after), "n=%lld: memory after the step differs",
              (long long)n);
        rig_steps(&r, INJ_AFTER, losses + warm + 1);
        for (int i = warm; i <= warm + INJ_AFTER; i++)
            CHECK(losses[i] == ref->losses[i], "n=%lld (%s): loss %d %.9g vs %.9g", (long long)n,
                  PHASE_NAMES[*fail_phase], i, losses[i], ref->losses[i]);
        snap s = rig_snapshot(&r, 0);
        CHECK(snap_equal(&s, &ref->final), "n=%lld (failed in %s): state after %d more steps differs "
              "from the run without failure", (long long)n, PHASE_NAMES[*fail_phase], INJ_AFTER);
        CHECK(mem_equal(rig_mem(&r), ref->mem_end), "n=%lld: memory at the end differs", (long long)n);
        free(s.p);
    }
    rig_fini(&r);
    return failed;
}

static void inj_sweep(int warm) {
    inj_ref ref;
    memset(&ref, 0, sizeof ref);
    inj_reference(warm, &ref);
    REQUIRE(ref.allocs > 10, "%lld allocations", (long long)ref.allocs);
    CHECK(mem_equal(ref.mem_before, ref.mem_after) || warm == 0, "a later step keeps memory");
    int64_t failed = 0, phases[PH_DONE + 1] = {0};
    for (int64_t n = 1; n <= ref.allocs + 1; n++) {
        int ph = 0;
        int f = inj_run(warm, n, &ref, &ph);
        failed += f;
        if (f) phases[ph]++;
        if (n <= ref.allocs) CHECK(f, "n=%lld: the step did not fail", (long long)n);
        else CHECK(!f, "n=%lld is past the step's allocations but it failed", (long long)n);
        if (th_case_failed) break; /* one broken point is enough to report */
    }
    printf("# %s, step %d: %lld allocations, each failed in turn (%lld failures: loader %lld, forward "
           "%lld, backward %lld, optimizer/scaler %lld)\n",
           g_shared_ctx ? "CUDA" : "CPU", warm + 1, (long long)ref.allocs, (long long)failed,
           (long long)phases[PH_LOADER],
           (long long)phases[PH_FORWARD], (long long)phases[PH_BACKWARD], (long long)phases[PH_STEP]);
    free(ref.final.p);
}

static void test_inject_first_step(void) { inj_sweep(0); }
static void test_inject_later_step(void) { inj_sweep(1); }

/* ---- the same for every op on its own: forward and backward ----
 * A failed forward must change nothing (no output, no tape node, no memory, inputs and
 * running statistics as they were); a failed backward must free everything it made. */

typedef struct op_env {
    dlt_ctx *ctx;
    dlt_tensor *x4, *x4cl, *w, *b, *res, *gamma, *beta, *rm, *rv, *x2, *w2, *b2, *s, *logits, *tgt;
} op_env;

typedef dlt_status (*op_fn)(op_env *e, dlt_tensor **out);

static dlt_status op_conv(op_env *e, dlt_tensor **o) { return dlt_conv2d(e->x4, e->w, e->b, 1, 1, 1, 1, 1, 1, 1, o); }
static dlt_status op_conv_amp(op_env *e, dlt_tensor **o) {
    RETURN_IF_FAILED(dlt_autocast_begin(e->ctx, DLT_F16));
    dlt_status st = dlt_conv2d(e->x4cl, e->w, e->b, 2, 1, 1, 0, 1, 2, 1, o);
    dlt_status st2 = dlt_autocast_end(e->ctx);
    return st != DLT_OK ? st : st2;
}
static dlt_status op_bn_train(op_env *e, dlt_tensor **o) {
    return dlt_batch_norm2d_act(e->x4, e->res, 1, e->gamma, e->beta, e->rm, e->rv, 1, 0.1, 1e-5, o);
}
static dlt_status op_bn_eval(op_env *e, dlt_tensor **o) {
    return dlt_batch_norm2d(e->x4cl, e->gamma, e->beta, e->rm, e->rv, 0, 0.1, 1e-5, o);
}
static dlt_status op_relu(op_env *e, dlt_tensor **o) { return dlt_relu(e->x4, o); }
static dlt_status op_maxpool(op_env *e, dlt_tensor **o) { return dlt_max_pool2d(e->x4cl, 3, 3, 2, 2, 1, 1, o); }
static dlt_status op_gap(op_env *e, dlt_tensor **o) { return dlt_global_avg_pool2d(e->x4, o); }
static dlt_status op_linear(op_env *e, dlt_tensor **o) { return dlt_linear(e->x2, e->w2, e->b2, o); }
static dlt_status op_linear_amp(op_env *e, dlt_tensor **o) {
    RETURN_IF_FAILED(dlt_autocast_begin(e->ctx, DLT_BF16));
    dlt_status st = dlt_linear(e->x2, e->w2, e->b2, o);
    dlt_status st2 = dlt_autocast_end(e->ctx);
    return st != DLT_OK ? st : st2;
}
static dlt_status op_add(op_env *e, dlt_tensor **o) { return dlt_add(e->x4, e->res, o); }
static dlt_status op_mul(op_env *e, dlt_tensor **o) { return dlt_mul_scalar(e->x4, e->s, 0.5, o); }
static dlt_status op_sum(op_env *e, dlt_tensor **o) { return dlt_sum(e->x4, o); }
static dlt_status op_mean(op_env *e, dlt_tensor **o) { return dlt_mean(e->x4cl, o); }
static dlt_status op_reshape(op_env *e, dlt_tensor **o) {
    const int64_t shape[2] = {2, -1};
    return dlt_reshape(e->x4cl, shape, 2, o); /* channels-last: a differentiable copy first */
}
static dlt_status op_flatten(op_env *e, dlt_tensor **o) { return dlt_flatten(e->x4, 1, -1, o); }
static dlt_status op_cast(op_env *e, dlt_tensor **o) { return dlt_cast(e->x4, DLT_BF16, o); }
static dlt_status op_ce(op_env *e, dlt_tensor **o) {
    return dlt_cross_entropy(e->logits, e->tgt, 1, DLT_REDUCTION_MEAN, o);
}

static dlt_tensor *env_tensor(op_env *e, const int64_t *shape, int32_t nd, int32_t format, int grad,
                              double lo, double hi) {
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_tensor_empty(e->ctx, DLT_F32, shape, nd, format, &t));
    CHECK_OK(dlt_tensor_rand_uniform(t, lo, hi));
    if (grad) CHECK_OK(dlt_tensor_set_requires_grad(t, 1));
    return t;
}

static void env_init(op_env *e) {
    memset(e, 0, sizeof *e);
    e->ctx = th_cpu_ctx();
    const int64_t s4[4] = {2, 3, 5, 5}, sw[4] = {4, 3, 3, 3}, s4b[1] = {4}, sc[1] = {3};
    const int64_t s2[2] = {3, 6}, sw2[2] = {4, 6}, sb2[1] = {4}, s1[1] = {1}, sl[2] = {4, 5};
    e->x4 = env_tensor(e, s4, 4, DLT_FORMAT_CONTIGUOUS, 1, -1, 1);
    e->x4cl = env_tensor(e, s4, 4, DLT_FORMAT_CHANNELS_LAST, 1, -1, 1);
    e->res = env_tensor(e, s4, 4, DLT_FORMAT_CONTIGUOUS, 1, -1, 1);
    e->w = env_tensor(e, sw, 4, DLT_FORMAT_CONTIGUOUS, 1, -0.5, 0.5);
    e->b = env_tensor(e, s4b, 1, DLT_FORMAT_CONTIGUOUS, 1, -0.5, 0.5);
    e->gamma = env_tensor(e, sc, 1, DLT_FORMAT_CONTIGUOUS, 1, 0.5, 1.5);
    e->beta = env_tensor(e, sc, 1, DLT_FORMAT_CONTIGUOUS, 1, -0.5, 0.5);
    e->rm = env_tensor(e, sc, 1, DLT_FORMAT_CONTIGUOUS, 0, -0.5, 0.5);
    e->rv = env_tensor(e, sc, 1, DLT_FORMAT_CONTIGUOUS, 0, 0.5, 1.5);
    e->x2 = env_tensor(e, s2, 2, DLT_FORMAT_CONTIGUOUS, 1, -1, 1);
    e->w2 = env_tensor(e, sw2, 2, DLT_FORMAT_CONTIGUOUS, 1, -1, 1);
    e->b2 = env_tensor(e, sb2, 1, DLT_FORMAT_CONTIGUOUS, 1, -1, 1);
    e->s = env_tensor(e, s1, 1, DLT_FORMAT_CONTIGUOUS, 0, 1, 2);
    e->logits = env_tensor(e, sl, 2, DLT_FORMAT_CONTIGUOUS, 1, -2, 2);
    const int64_t tv[4] = {0, 1, 4, 2};
    CHECK_OK(dlt_tensor_from_host(e->ctx, DLT_I64, sl, 1, DLT_FORMAT_CONTIGUOUS, tv, sizeof tv, &e->tgt));
}

static void env_fini(op_env *e) {
    dlt_tensor *all[] = {e->x4, e->x4cl, e->w, e->b, e->res, e->gamma, e->beta, e->rm, e->rv,
                         e->x2, e->w2, e->b2, e->s, e->logits, e->tgt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dlt_tensor_release(all[i]);
    dlt_ctx_destroy(e->ctx);
}

/* Every input's bytes (with stats = 1 the running statistics too: a forward that succeeds
 * in training mode moves them). */
static snap env_snapshot(op_env *e, int stats) {
    snap s = {0};
    dlt_tensor *all[] = {e->x4, e->x4cl, e->w, e->b, e->res, e->gamma, e->beta, e->x2, e->w2,
                         e->b2, e->s, e->logits, e->tgt, e->rm, e->rv};
    size_t n = sizeof all / sizeof all[0] - (stats ? 0 : 2);
    for (size_t i = 0; i < n; i++) snap_tensor(&s, all[i]);
    return s;
}

/* The op's forward, then (grad = 1) backward from the sum of its result. */
static dlt_status op_run(op_env *e, op_fn fn, int backward) {
    dlt_tensor *y = NULL, *l = NULL;
    dlt_status st = fn(e, &y);
    if (st == DLT_OK && backward) {
        st = dlt_tensor_numel(y) == 1 ? DLT_OK : dlt_sum(y, &l);
        if (st == DLT_OK) st = dlt_backward(l ? l : y, NULL);
    }
    dlt_tensor_release(l);
    dlt_tensor_release(y);
    return st;
}

static void test_inject_ops(void) {
    static const struct {
        const char *name;
        op_fn fn;
    } ops[] = {
        {"conv2d", op_conv},   {"conv2d fp16 channels-last", op_conv_amp},
        {"batch_norm2d_act train", op_bn_train}, {"batch_norm2d eval", op_bn_eval},
        {"relu", op_relu},     {"max_pool2d", op_maxpool}, {"global_avg_pool2d", op_gap},
        {"linear", op_linear}, {"linear bf16", op_linear_amp}, {"add", op_add},
        {"mul_scalar", op_mul}, {"sum", op_sum}, {"mean", op_mean}, {"reshape", op_reshape},
        {"flatten", op_flatten}, {"cast", op_cast}, {"cross_entropy", op_ce},
    };
    int64_t points = 0;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        op_env e;
        env_init(&e);
        /* warm up: leaf gradient buffers and autocast copies exist from here on */
        CHECK_OK(op_run(&e, ops[k].fn, 1));
        for (int backward = 0; backward < 2; backward++) {
            int64_t a0 = 0, a1 = 0;
            CHECK_OK(dlt_testing_alloc_count(e.ctx, &a0));
            CHECK_OK(op_run(&e, ops[k].fn, backward));
            CHECK_OK(dlt_testing_alloc_count(e.ctx, &a1));
            CHECK(a1 > a0, "%s: no allocation", ops[k].name);
            for (int64_t n = 1; n <= a1 - a0; n++) {
                snap before = env_snapshot(&e, !backward);
                mem_state m0 = ctx_mem(e.ctx);
                dlt_tensor *y = NULL;
                CHECK_OK(dlt_testing_fail_alloc(e.ctx, n));
                dlt_status st;
                if (backward) {
                    st = op_run(&e, ops[k].fn, 1);
                } else {
                    st = ops[k].fn(&e, &y);
                    CHECK(y == NULL, "%s: an output after a failure", ops[k].name);
                }
                CHECK_OK(dlt_testing_fail_alloc(e.ctx, 0));
                CHECK(st == DLT_ERR_OUT_OF_MEMORY && dlt_last_error()[0],
                      "%s%s n=%lld: %d %s", ops[k].name, backward ? " backward" : "", (long long)n,
                      st, dlt_last_error());
                CHECK(dlt_autocast_dtype(e.ctx) == -1);
                CHECK(mem_equal(ctx_mem(e.ctx), m0), "%s%s n=%lld: memory or tape nodes left",
                      ops[k].name, backward ? " backward" : "", (long long)n);
                snap after = env_snapshot(&e, !backward);
                /* values only: gradients are unspecified after a failed backward */
                CHECK(snap_equal(&before, &after), "%s%s n=%lld: a failure changed an input",
                      ops[k].name, backward ? " backward" : "", (long long)n);
                free(before.p), free(after.p);
                points++;
                if (th_case_failed) break;
            }
            /* and afterwards it works */
            CHECK_OK(op_run(&e, ops[k].fn, 1));
        }
        env_fini(&e);
        if (th_case_failed) break;
    }
    printf("# %lld injection points over %zu ops (forward, and forward + backward)\n",
           (long long)points, sizeof ops / sizeof ops[0]);
}

/* ---------------------------------------------------------------------------------------
 * 2. Checkpoint durability: a save failing at each file operation in turn
 * ------------------------------------------------------------------------------------- */

/* Loads path into a fresh rig and snapshots what it holds. */
static snap load_fresh(const char *path, int64_t *epoch, int64_t *step) {
    rig q;
    rig_init(&q, DLT_F16, INJ_SCALE, -1);
    CHECK_OK(dlt_checkpoint_load(path, q.model, q.opt, q.scaler, epoch, step));
    snap s = rig_snapshot(&q, 1);
    rig_fini(&q);
    return s;
}

/* dlt_checkpoint_save with its n-th file operation failing (n = 0: none fails). */
static dlt_status save_failing_at(rig *r, const char *path, int64_t n, int64_t epoch, int64_t step) {
    CHECK_OK(dlt_testing_fail_write(n));
    dlt_clear_error();
    dlt_status st = dlt_checkpoint_save(path, r->model, r->opt, r->scaler, epoch, step);
    CHECK_OK(dlt_testing_fail_write(0));
    return st;
}

static void test_save_failures(void) {
    rig r;
    double losses[8];
    rig_init(&r, DLT_F16, INJ_SCALE, -1);
    rig_steps(&r, 2, losses);
    char path[512];
    path_in(path, sizeof path, "durable.safetensors");
    /* no earlier file: a failed save leaves nothing at all */
    int64_t ops_first = -1;
    for (int64_t n = 1; n < 1000 && ops_first < 0; n++) {
        dlt_status st = save_failing_at(&r, path, n, 0, 2);
        if (st == DLT_OK) {
            ops_first = n - 1;
            break;
        }
        CHECK(st == DLT_ERR_IO && strstr(dlt_last_error(), "durable.safetensors"), "n=%lld: %d %s",
              (long long)n, st, dlt_last_error());
        CHECK(th_count_files(g_dir, "durable.safetensors") == 0, "n=%lld: %d files left", (long long)n,
              th_count_files(g_dir, "durable.safetensors"));
    }
    REQUIRE(ops_first > 3, "%lld file operations", (long long)ops_first);
    /* the good checkpoint: its bytes, and what loads from it */
    size_t na = 0;
    unsigned char *good = th_read_file(path, &na);
    REQUIRE(good != NULL);
    int64_t ep = -1, sp = -1;
    snap sa = load_fresh(path, &ep, &sp);
    CHECK(ep == 0 && sp == 2);
    /* train on, then fail every operation of the save that would replace it */
    rig_steps(&r, 1, losses);
    int64_t ops = -1, writes = 0, flushes = 0, closes = 0, renames = 0;
    for (int64_t n = 1; n < 1000 && ops < 0; n++) {
        dlt_status st = save_failing_at(&r, path, n, 1, 3);
        if (st == DLT_OK) {
            ops = n - 1;
            break;
        }
        const char *msg = dlt_last_error();
        CHECK(st == DLT_ERR_IO, "n=%lld: %d %s", (long long)n, st, msg);
        if (strstr(msg, "cannot write") && strstr(msg, strerror(ENOSPC))) writes++;
        else if (strstr(msg, "cannot flush")) flushes++;
        else if (strstr(msg, "cannot close")) closes++;
        else if (strstr(msg, "cannot rename")) renames++;
        else CHECK(0, "n=%lld: unexpected message %s", (long long)n, msg);
        size_t nb = 0;
        unsigned char *now = th_read_file(path, &nb);
        CHECK(now && nb == na && memcmp(now, good, na) == 0, "n=%lld: the previous checkpoint changed",
              (long long)n);
        free(now);
        CHECK(th_count_files(g_dir, "durable.safetensors") == 1,
              "n=%lld: %d files (a temporary was left)", (long long)n,
              th_count_files(g_dir, "durable.safetensors"));
        ep = sp = -1;
        snap sl = load_fresh(path, &ep, &sp);
        CHECK(snap_equal(&sl, &sa) && ep == 0 && sp == 2, "n=%lld: the previous checkpoint loads "
              "differently", (long long)n);
        free(sl.p);
        if (th_case_failed) break;
    }
    CHECK(ops == ops_first, "%lld operations, %lld for the first save", (long long)ops,
          (long long)ops_first);
    CHECK(writes == ops - 3 && flushes == 1 && closes == 1 && renames == 1,
          "%lld writes, %lld flushes, %lld closes, %lld renames", (long long)writes,
          (long long)flushes, (long long)closes, (long long)renames);
    printf("# a checkpoint save is %lld file operations (%lld writes, fsync, close, rename); each "
           "failed in turn, twice\n", (long long)ops, (long long)writes);
    /* the save that went through holds the new state */
    snap sr = rig_snapshot(&r, 1);
    ep = sp = -1;
    snap sn = load_fresh(path, &ep, &sp);
    CHECK(snap_equal(&sn, &sr) && ep == 1 && sp == 3, "the new checkpoint does not hold the state");
    CHECK(!snap_equal(&sn, &sa), "the state did not move");
    /* the same path for module saves and plain safetensors files */
    CHECK_OK(dlt_testing_fail_write(2));
    CHECK_STATUS(dlt_module_save(r.model, path), DLT_ERR_IO);
    CHECK_OK(dlt_testing_fail_write(1));
    dlt_tensor *p0 = r.params[0];
    const char *name = "w";
    CHECK_STATUS(dlt_safetensors_save(path, &name, &p0, 1), DLT_ERR_IO);
    CHECK_OK(dlt_testing_fail_write(0));
    snap s2 = load_fresh(path, &ep, &sp);
    CHECK(snap_equal(&s2, &sr), "a failed module or tensor save changed the checkpoint");
    CHECK(th_count_files(g_dir, "durable.safetensors") == 1);
    free(s2.p), free(sn.p), free(sr.p), free(sa.p), free(good);
    unlink(path);
    rig_fini(&r);
}

/* ---------------------------------------------------------------------------------------
 * 3. Resume: bitwise the run that was not interrupted
 * ------------------------------------------------------------------------------------- */

#define RESUME_STEPS 10

/* Puts the loader where `step` steps of RIG_BATCH leave it: the epoch's order depends only
 * on the loader's seed and the epoch, so starting the epoch and taking (step mod batches)
 * batches gives exactly the uninterrupted run's position. */
static void seek_loader(rig *r, int64_t epoch, int64_t step) {
    int64_t nb = dlt_loader_num_batches(r->ld);
    CHECK(epoch == step / nb, "epoch %lld at step %lld", (long long)epoch, (long long)step);
    CHECK_OK(dlt_loader_start_epoch(r->ld, epoch));
    for (int64_t i = 0; i < step % nb; i++) {
        dlt_tensor *x = NULL, *y = NULL;
        int32_t has = 0;
        CHECK_OK(dlt_loader_next(r->ld, &x, &y, &has));
        CHECK(has);
    }
    r->x = r->y = NULL;
}

/* init_scale large: the first steps overflow in fp16 and are skipped, so momentum buffers
 * that exist without data, the scale's backoff and the applied-step count all matter. */
static void resume_case(double init_scale, int32_t amp, int64_t k, int into_same) {
    double ref[RESUME_STEPS], got[RESUME_STEPS];
    rig a;
    rig_init(&a, amp, init_scale, -1);
    rig_steps(&a, RESUME_STEPS, ref);
    snap sref = rig_snapshot(&a, 1);
    int64_t applied = 0;
    CHECK_OK(dlt_optimizer_step_count(a.opt, &applied));
    rig_fini(&a);

    char path[512];
    path_in(path, sizeof path, "resume.safetensors");
    rig b, c;
    rig_init(&b, amp, init_scale, -1);
    rig_steps(&b, (int)k, got);
    const int64_t nb = dlt_loader_num_batches(b.ld);
    CHECK_OK(dlt_checkpoint_save(path, b.model, b.opt, b.scaler, k / nb, k));
    rig *r = &b;
    if (into_same) { /* roll back objects that trained on */
        double more[4];
        rig_steps(&b, 3, more);
    } else {
        rig_init(&c, amp, init_scale, -1);
        r = &c;
    }
    int64_t epoch = -1, step = -1;
    CHECK_OK(dlt_checkpoint_load(path, r->model, r->opt, r->scaler, &epoch, &step));
    CHECK(step == k);
    seek_loader(r, epoch, step);
    rig_steps(r, RESUME_STEPS - (int)k, got + k);
    for (int i = (int)k; i < RESUME_STEPS; i++)
        CHECK(got[i] == ref[i], "resume at %lld (%s): loss %d %.9g vs %.9g", (long long)k,
              into_same ? "same objects" : "fresh objects", i, got[i], ref[i]);
    snap s = rig_snapshot(r, 1);
    CHECK(snap_equal(&s, &sref), "resume at %lld (%s, scale %g): final state differs", (long long)k,
          into_same ? "same objects" : "fresh objects", init_scale);
    free(s.p), free(sref.p);
    if (!into_same) rig_fini(&c);
    rig_fini(&b);
    unlink(path);
    if (!th_case_failed)
        printf("# resume at step %lld of %d into %s objects (%s, init scale %g, %lld steps applied): "
           "bitwise\n", (long long)k, RESUME_STEPS, into_same ? "used" : "fresh",
           amp == DLT_F16 ? "fp16" : "fp32", init_scale, (long long)applied);
}

static void test_resume(void) {
    const double big = 65536.0 * 64; /* the first steps overflow and are skipped */
    for (int into_same = 0; into_same < 2; into_same++) {
        resume_case(INJ_SCALE, DLT_F16, 6, into_same); /* epoch boundary */
        resume_case(INJ_SCALE, DLT_F16, 4, into_same); /* mid-epoch */
        resume_case(big, DLT_F16, 1, into_same);       /* after a skipped step */
        resume_case(big, DLT_F16, 5, into_same);
        resume_case(1.0, -1, 3, into_same);            /* fp32, scaler disabled */
    }
}

/* ---------------------------------------------------------------------------------------
 * 4. Determinism
 * ------------------------------------------------------------------------------------- */

/* Runs off, off, on, on. The CPU must give the same bits in all four; CUDA in the two runs
 * with the switch on (whether the runs without it agree is printed: it depends on the
 * engines cuDNN picks). */
static void test_determinism(void) {
    double l[4][RESUME_STEPS];
    snap s[4];
    for (int amp_i = 0; amp_i < 2; amp_i++) {
        const int32_t amp = amp_i ? DLT_F16 : -1;
        const char *prec = amp_i ? "fp16" : "fp32";
        for (int run = 0; run < 4; run++) { /* deterministic off, off, on, on */
            rig r;
            rig_init(&r, amp, INJ_SCALE, run >= 2);
            rig_steps(&r, RESUME_STEPS, l[run]);
            s[run] = rig_snapshot(&r, 1);
            rig_fini(&r);
        }
        for (int run = 1; run < 4; run++) {
            int same = memcmp(l[run], l[0], sizeof l[0]) == 0 && snap_equal(&s[run], &s[0]);
            if (!g_shared_ctx) {
                CHECK(memcmp(l[run], l[0], sizeof l[0]) == 0, "%s run %d: losses differ", prec, run);
                CHECK(snap_equal(&s[run], &s[0]), "%s run %d: final state differs", prec, run);
            } else if (run == 3) {
                CHECK(memcmp(l[3], l[2], sizeof l[0]) == 0, "%s: deterministic runs: losses differ", prec);
                CHECK(snap_equal(&s[3], &s[2]), "%s: deterministic runs: final state differs", prec);
            } else {
                printf("# CUDA %s: run %d (%s) vs run 0 (switch off): %s\n", prec, run,
                       run == 1 ? "switch off" : "switch on", same ? "bitwise equal" : "differs");
            }
        }
        CHECK(l[0][RESUME_STEPS - 1] < l[0][0], "%s: the loss does not fall (%g -> %g)", prec,
              l[0][0], l[0][RESUME_STEPS - 1]);
        for (int run = 0; run < 4; run++) free(s[run].p);
    }
}

/* The same cases on a CUDA context (skipped without one), deterministic mode on. */
static void cuda_case(void (*fn)(void)) {
    if (g_shared_ctx) dlt_ctx_destroy(g_shared_ctx); /* left by a case that stopped early */
    g_shared_ctx = th_cuda_ctx();
    g_det_default = 0;
    if (!g_shared_ctx) {
        th_case_skipped = 1; /* th_cuda_ctx wrote the reason */
        longjmp(th_jmp, 1);
    }
    g_det_default = 1;
    fn();
    dlt_ctx_destroy(g_shared_ctx);
    g_shared_ctx = NULL;
    g_det_default = 0;
}
static void test_cuda_inject_first_step(void) { cuda_case(test_inject_first_step); }
static void test_cuda_inject_later_step(void) { cuda_case(test_inject_later_step); }
static void test_cuda_resume(void) { cuda_case(test_resume); }
static void test_cuda_determinism(void) { cuda_case(test_determinism); }

/* ---------------------------------------------------------------------------------------
 * 5. API misuse: zero-size dimensions, overflowing sizes, objects of another context
 * ------------------------------------------------------------------------------------- */

static int g_misuse_cases;

/* A call that must be refused with `code`, leaving its output (the caller's local `y`)
 * untouched; counted as a misuse case. */
#define REFUSED(call, code)                                                                   \
    do {                                                                                      \
        y = NULL;                                                                             \
        CHECK_STATUS(call, code);                                                             \
        CHECK(y == NULL);                                                                     \
        g_misuse_cases++;                                                                     \
    } while (0)

/* An f32 leaf of the given shape whose gradient buffer holds NaN and is marked absent, so
 * a backward that does not write it leaves NaN (caught below). */
static dlt_tensor *zleaf(dlt_ctx *ctx, const int64_t *shape, int32_t nd, int32_t format) {
    dlt_tensor *t = NULL, *nan = NULL;
    CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, shape, nd, format, &t));
    CHECK_OK(dlt_tensor_rand_uniform(t, -1, 1));
    CHECK_OK(dlt_tensor_set_requires_grad(t, 1));
    CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, shape, nd, format, &nan));
    CHECK_OK(dlt_tensor_fill(nan, NAN));
    CHECK_OK(dlt_backward(t, nan));
    CHECK_OK(dlt_zero_grad(&t, 1, 1));
    dlt_tensor_release(nan);
    return t;
}

/* Checks an op's result on zero-size inputs: the status, the output shape, then backward
 * from sum(y) and every leaf's gradient: its shape, and its values (each element equal to
 * want[i], or only finite when want[i] is NaN). An empty output's sum is 0, so every
 * gradient of it is 0. */
static void zcheck(const char *name, dlt_status st, dlt_status want_st, dlt_tensor *y,
                   const int64_t *yshape, int32_t ynd, dlt_tensor **leaves, int32_t nl,
                   const double *want) {
    g_misuse_cases++;
    CHECK(st == want_st, "%s: status %d, expected %d: %s", name, st, want_st, dlt_last_error());
    if (st != DLT_OK) {
        CHECK(dlt_last_error()[0] != '\0', "%s: no message", name);
        CHECK(y == NULL, "%s: an output after a failure", name);
        return;
    }
    if (st != want_st) {
        dlt_tensor_release(y);
        return;
    }
    int64_t sh[DLT_MAX_DIMS];
    int32_t nd = dlt_tensor_shape(y, sh, DLT_MAX_DIMS);
    int same = nd == ynd;
    for (int32_t i = 0; same && i < nd; i++) same = sh[i] == yshape[i];
    CHECK(same, "%s: wrong output shape (%d-D)", name, nd);
    dlt_tensor *l = NULL;
    CHECK_OK(dlt_sum(y, &l));
    double v = -1;
    CHECK_OK(dlt_tensor_item(l, &v));
    if (dlt_tensor_numel(y) == 0) CHECK(v == 0, "%s: sum of an empty output %g", name, v);
    CHECK_OK(dlt_backward(l, NULL));
    dlt_tensor_release(l);
    dlt_tensor_release(y);
    for (int32_t i = 0; i < nl; i++) {
        dlt_tensor *g = dlt_tensor_grad(leaves[i]);
        if (dlt_tensor_numel(leaves[i]) == 0) {
            CHECK(!g || dlt_tensor_numel(g) == 0, "%s: leaf %d", name, i);
            continue;
        }
        REQUIRE(g != NULL, "%s: leaf %d got no gradient", name, i);
        float *f = th_read_f32(g);
        int64_t n = dlt_tensor_numel(g), bad = 0;
        for (int64_t k = 0; k < n; k++)
            bad += isnan(want[i]) ? !isfinite(f[k]) : f[k] != (float)want[i];
        CHECK(bad == 0, "%s: leaf %d: %lld of %lld gradient values wrong (first %g, want %g)", name,
              i, (long long)bad, (long long)n, (double)f[0], want[i]);
        free(f);
    }
}

static void test_zero_size(void) {
    dlt_ctx *ctx = th_cpu_ctx();
    const double Z = 0.0;
    for (int32_t fmt = 0; fmt < 2; fmt++) {
        /* conv2d: N = 0, C = 0 (y = bias: db = N*P*Q), K = 0 */
        const int64_t cases[3][5] = {{0, 3, 5, 5, 4}, {2, 0, 5, 5, 4}, {2, 3, 5, 5, 0}};
        for (int c = 0; c < 3; c++) {
            const int64_t N = cases[c][0], C = cases[c][1], K = cases[c][4];
            const int64_t xs[4] = {N, C, 5, 5}, ws[4] = {K, C, 3, 3}, ys[4] = {N, K, 5, 5};
            dlt_tensor *l[3] = {zleaf(ctx, xs, 4, fmt), zleaf(ctx, ws, 4, 0), zleaf(ctx, &K, 1, 0)};
            dlt_tensor *y = NULL;
            char name[64];
            snprintf(name, sizeof name, "conv2d [%lld,%lld,5,5] K=%lld fmt %d", (long long)N,
                     (long long)C, (long long)K, fmt);
            const double want[3] = {Z, Z, (double)(N * 25)};
            dlt_status st = dlt_conv2d(l[0], l[1], l[2], 1, 1, 1, 1, 1, 1, 1, &y);
            zcheck(name, st, DLT_OK, y, ys, 4, l, 3, want);
            for (int i = 0; i < 3; i++) dlt_tensor_release(l[i]);
        }
        /* batchnorm: C = 0 (train and eval), N = 0 (eval; training refuses: no values) */
        for (int c = 0; c < 3; c++) {
            const int64_t N = c == 0 ? 2 : 0, C = c == 0 ? 0 : 3;
            const int32_t training = c == 1;
            const int64_t xs[4] = {N, C, 4, 4};
            dlt_tensor *l[4] = {zleaf(ctx, xs, 4, fmt), zleaf(ctx, xs, 4, fmt), zleaf(ctx, &C, 1, 0),
                                zleaf(ctx, &C, 1, 0)};
            dlt_tensor *rm = NULL, *rv = NULL, *y = NULL;
            CHECK_OK(dlt_tensor_zeros(ctx, DLT_F32, &C, 1, 0, &rm));
            CHECK_OK(dlt_tensor_zeros(ctx, DLT_F32, &C, 1, 0, &rv));
            char name[64];
            snprintf(name, sizeof name, "batch_norm2d [%lld,%lld,4,4] training %d fmt %d",
                     (long long)N, (long long)C, training, fmt);
            const double want[4] = {Z, Z, Z, Z};
            dlt_status st = dlt_batch_norm2d_act(l[0], l[1], 1, l[2], l[3], rm, rv, training, 0.1, 1e-5, &y);
            zcheck(name, st, training && N == 0 ? DLT_ERR_SHAPE : DLT_OK, y, xs, 4, l, 4, want);
            for (int i = 0; i < 4; i++) dlt_tensor_release(l[i]);
            dlt_tensor_release(rm), dlt_tensor_release(rv);
        }
        /* elementwise, pooling, reductions, views, casts over N = 0 and C = 0 */
        for (int c = 0; c < 2; c++) {
            const int64_t xs[4] = {c ? 2 : 0, c ? 0 : 3, 6, 6};
            dlt_tensor *a = zleaf(ctx, xs, 4, fmt), *b = zleaf(ctx, xs, 4, fmt), *y = NULL;
            dlt_tensor *l[2] = {a, b};
            const double want[2] = {Z, Z};
            const int64_t ps[4] = {xs[0], xs[1], 3, 3}, gs[4] = {xs[0], xs[1], 1, 1};
            const int64_t fs[2] = {xs[0], xs[1] * 36}, rs[2] = {0, 7};
            char name[96];
#define ZC(what, call, st, shape, nd, nl)                                                     \
    do {                                                                                      \
        y = NULL;                                                                             \
        snprintf(name, sizeof name, "%s [%lld,%lld,6,6] fmt %d", what, (long long)xs[0],       \
                 (long long)xs[1], fmt);                                                      \
        dlt_status st_ = (call);                                                              \
        zcheck(name, st_, st, y, shape, nd, l, nl, want);                                     \
    } while (0)
            ZC("relu", dlt_relu(a, &y), DLT_OK, xs, 4, 1);
            ZC("max_pool2d", dlt_max_pool2d(a, 3, 3, 2, 2, 1, 1, &y), DLT_OK, ps, 4, 1);
            ZC("global_avg_pool2d", dlt_global_avg_pool2d(a, &y), DLT_OK, gs, 4, 1);
            ZC("add", dlt_add(a, b, &y), DLT_OK, xs, 4, 2);
            ZC("mul_scalar", dlt_mul_scalar(a, NULL, 3.0, &y), DLT_OK, xs, 4, 1);
            ZC("sum", dlt_sum(a, &y), DLT_OK, NULL, 0, 1);
            ZC("flatten", dlt_flatten(a, 1, -1, &y), DLT_OK, fs, 2, 1);
            ZC("reshape", dlt_reshape(a, rs, 2, &y), DLT_OK, rs, 2, 1);
            ZC("cast", dlt_cast(a, DLT_BF16, &y), DLT_OK, xs, 4, 1);
            ZC("to contiguous", dlt_cast(a, DLT_F32, &y), DLT_OK, xs, 4, 1);
            const int64_t bad[2] = {-1, 0};
            ZC("reshape -1 with 0", dlt_reshape(a, bad, 2, &y), DLT_ERR_SHAPE, NULL, 0, 0);
            /* mean of nothing is NaN (PyTorch) */
            y = NULL;
            CHECK_OK(dlt_mean(a, &y));
            double v = 0;
            CHECK_OK(dlt_tensor_item(y, &v));
            CHECK(isnan(v), "mean of nothing %g", v);
            dlt_tensor_release(y);
            g_misuse_cases++;
            /* empty spatial maps: no window, no average */
            const int64_t es[4] = {2, 3, 0, 6};
            dlt_tensor *e = zleaf(ctx, es, 4, fmt);
            CHECK_STATUS(dlt_max_pool2d(e, 3, 3, 1, 1, 1, 1, &y), DLT_ERR_SHAPE);
            CHECK_STATUS(dlt_global_avg_pool2d(e, &y), DLT_ERR_SHAPE);
            CHECK_STATUS(dlt_conv2d(e, e, NULL, 1, 1, 0, 0, 1, 1, 1, &y), DLT_ERR_SHAPE);
            g_misuse_cases += 3;
            dlt_tensor_release(e);
            dlt_tensor_release(a), dlt_tensor_release(b);
#undef ZC
        }
    }
    /* linear: M = 0, K = 0 (y = 0, or the bias repeated over the rows), N = 0 */
    const int64_t lc[3][3] = {{0, 4, 3}, {2, 0, 3}, {2, 4, 0}};
    for (int c = 0; c < 3; c++) {
        for (int bias = 0; bias < 2; bias++) {
            const int64_t M = lc[c][0], K = lc[c][1], N = lc[c][2];
            const int64_t xs[2] = {M, K}, ws[2] = {N, K}, ys[2] = {M, N};
            dlt_tensor *l[3] = {zleaf(ctx, xs, 2, 0), zleaf(ctx, ws, 2, 0), zleaf(ctx, &N, 1, 0)};
            dlt_tensor *y = NULL;
            char name[64];
            snprintf(name, sizeof name, "linear M=%lld K=%lld N=%lld bias %d", (long long)M,
                     (long long)K, (long long)N, bias);
            const double want[3] = {Z, Z, (double)M};
            dlt_status st = dlt_linear(l[0], l[1], bias ? l[2] : NULL, &y);
            zcheck(name, st, DLT_OK, y, ys, 2, l,
                   bias ? 3 : 2, want);
            for (int i = 0; i < 3; i++) dlt_tensor_release(l[i]);
        }
    }
    /* cross-entropy over no rows: mean NaN (as PyTorch), sum 0; no classes: refused */
    for (int red = 0; red < 2; red++) {
        const int64_t ls[2] = {0, 5}, n0 = 0;
        dlt_tensor *lg = zleaf(ctx, ls, 2, 0), *t = NULL, *y = NULL;
        CHECK_OK(dlt_tensor_zeros(ctx, DLT_I64, &n0, 1, 0, &t));
        CHECK_OK(dlt_cross_entropy(lg, t, -100, red, &y));
        double v = 0;
        CHECK_OK(dlt_tensor_item(y, &v));
        CHECK(red == DLT_REDUCTION_MEAN ? isnan(v) : v == 0, "cross-entropy of no rows: %g", v);
        if (red == DLT_REDUCTION_SUM) CHECK_OK(dlt_backward(y, NULL));
        dlt_tensor_release(y), dlt_tensor_release(t), dlt_tensor_release(lg);
        const int64_t ks[2] = {3, 0}, n3 = 3;
        lg = zleaf(ctx, ks, 2, 0);
        CHECK_OK(dlt_tensor_zeros(ctx, DLT_I64, &n3, 1, 0, &t));
        CHECK_STATUS(dlt_cross_entropy(lg, t, -100, red, &y), DLT_ERR_SHAPE);
        dlt_tensor_release(t), dlt_tensor_release(lg);
        g_misuse_cases += 2;
    }
    int64_t live = -1;
    CHECK_OK(dlt_tape_live_nodes(ctx, &live));
    CHECK(live == 0, "%lld tape nodes left", (long long)live);
    dlt_ctx_destroy(ctx);
    printf("# %d zero-size cases\n", g_misuse_cases);
}

/* Sizes whose arithmetic overflows int64: refused with a status, never computed. Empty
 * tensors may have huge other dimensions, so ops see such sizes without any allocation. */
static void test_size_overflow(void) {
    dlt_ctx *ctx = th_cpu_ctx();
    const int64_t M = INT64_MAX, B = INT64_MAX / 2, G = (int64_t)1 << 40;
    dlt_tensor *t = NULL, *y = NULL;
    int n0 = g_misuse_cases;
    /* tensors */
    const int64_t s_gg[2] = {G, G}, s_m2[2] = {M, 2}, s_m[1] = {M}, s_61[1] = {(int64_t)1 << 61};
    REFUSED(dlt_tensor_empty(ctx, DLT_F32, s_gg, 2, 0, &t), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_tensor_empty(ctx, DLT_F32, s_m2, 2, 0, &t), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_tensor_empty(ctx, DLT_F32, s_m, 1, 0, &t), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_tensor_zeros(ctx, DLT_I64, s_61, 1, 0, &t), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_tensor_from_host(ctx, DLT_U8, s_gg, 2, 0, "", 0, &t), DLT_ERR_INVALID_ARGUMENT);
    /* empty tensors with huge dimensions are valid */
    const int64_t s_e[4] = {0, 1, B, B}, s_w[4] = {1, 1, 1, 1}, s_x[4] = {1, 1, 4, 4};
    dlt_tensor *e = NULL, *ecl = NULL, *w = NULL, *w3 = NULL, *x = NULL, *g1 = NULL, *r1 = NULL;
    CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, s_e, 4, 0, &e));
    CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, s_e, 4, 1, &ecl));
    CHECK_OK(dlt_tensor_set_requires_grad(e, 1));
    CHECK_OK(dlt_tensor_zeros(ctx, DLT_F32, s_w, 4, 0, &w));
    const int64_t s_w3[4] = {1, 1, 3, 3}, s_1[1] = {1};
    CHECK_OK(dlt_tensor_zeros(ctx, DLT_F32, s_w3, 4, 0, &w3));
    CHECK_OK(dlt_tensor_zeros(ctx, DLT_F32, s_x, 4, 0, &x));
    CHECK_OK(dlt_tensor_zeros(ctx, DLT_F32, s_1, 1, 0, &g1));
    CHECK_OK(dlt_tensor_zeros(ctx, DLT_F32, s_1, 1, 0, &r1));
    /* conv2d: padding, dilation and groups whose size arithmetic overflows */
    REFUSED(dlt_conv2d(x, w, NULL, 1, 1, B, B, 1, 1, 1, &y), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_conv2d(x, w, NULL, 1, 1, M, 0, 1, 1, 1, &y), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_conv2d(x, w3, NULL, 1, 1, 1, 1, M, 1, 1, &y), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_conv2d(x, w3, NULL, 1, 1, 1, 1, 1, B + 1, 1, &y), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_conv2d(e, w3, NULL, 1, 1, B, B, 1, 1, 1, &y), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_conv2d(x, w, NULL, 1, 1, G, G, 1, 1, 1, &y), DLT_ERR_INVALID_ARGUMENT); /* y's size */
    {
        const int64_t s_c0[4] = {2, 0, 4, 4}, s_k0[4] = {0, 5, 1, 1};
        dlt_tensor *c0 = NULL, *k0 = NULL;
        CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, s_c0, 4, 0, &c0));
        CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, s_k0, 4, 0, &k0));
        REFUSED(dlt_conv2d(c0, k0, NULL, 1, 1, 0, 0, 1, 1, (int64_t)1 << 62, &y), DLT_ERR_SHAPE);
        dlt_tensor_release(c0), dlt_tensor_release(k0);
    }
    /* ... while an empty input with huge sizes gives an empty output, and a backward */
    y = NULL;
    CHECK_OK(dlt_conv2d(e, w3, NULL, 1, 1, 1, 1, 1, 1, 1, &y));
    CHECK(dlt_tensor_dim(y, 2) == B && dlt_tensor_numel(y) == 0);
    dlt_tensor *l = NULL;
    CHECK_OK(dlt_sum(y, &l));
    CHECK_OK(dlt_backward(l, NULL));
    dlt_tensor_release(l), dlt_tensor_release(y);
    g_misuse_cases++;
    /* pooling */
    REFUSED(dlt_max_pool2d(x, M, M, 1, 1, B, B, &y), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_max_pool2d(e, M - 1, 3, 1, 1, B, 1, &y), DLT_ERR_INVALID_ARGUMENT);
    y = NULL;
    CHECK_OK(dlt_max_pool2d(e, 3, 3, 1, 1, 1, 1, &y));
    dlt_tensor_release(y);
    y = NULL;
    CHECK_OK(dlt_global_avg_pool2d(ecl, &y));
    CHECK(dlt_tensor_dim(y, 2) == 1 && dlt_tensor_numel(y) == 0);
    dlt_tensor_release(y);
    g_misuse_cases += 2;
    /* batchnorm: values per channel of an empty tensor */
    REFUSED(dlt_batch_norm2d(e, g1, g1, r1, r1, 1, 0.1, 1e-5, &y), DLT_ERR_SHAPE);
    y = NULL;
    CHECK_OK(dlt_batch_norm2d(ecl, g1, g1, r1, r1, 0, 0.1, 1e-5, &y));
    dlt_tensor_release(y);
    g_misuse_cases++;
    /* views */
    REFUSED(dlt_flatten(e, 1, -1, &y), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_flatten(ecl, 2, 3, &y), DLT_ERR_INVALID_ARGUMENT);
    y = NULL;
    CHECK_OK(dlt_flatten(ecl, 0, 3, &y)); /* 0 * 1 * B * B = 0 fits */
    CHECK(dlt_tensor_ndim(y) == 1 && dlt_tensor_dim(y, 0) == 0);
    dlt_tensor_release(y);
    g_misuse_cases++;
    REFUSED(dlt_reshape(x, s_m2, 2, &y), DLT_ERR_INVALID_ARGUMENT);
    const int64_t s_gm[3] = {G, G, M}, s_9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 16};
    REFUSED(dlt_reshape(e, s_gm, 3, &y), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_reshape(x, s_9, 9, &y), DLT_ERR_INVALID_ARGUMENT);
    y = NULL;
    const int64_t s_r[3] = {B, 0, B};
    CHECK_OK(dlt_reshape(ecl, s_r, 3, &y));
    dlt_tensor_release(y);
    g_misuse_cases++;
    /* linear and cross-entropy over empty batches with huge inner sizes */
    {
        const int64_t s_xm[2] = {0, M}, s_t[1] = {0};
        dlt_tensor *xm = NULL, *tg = NULL;
        CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, s_xm, 2, 0, &xm));
        CHECK_OK(dlt_tensor_zeros(ctx, DLT_I64, s_t, 1, 0, &tg));
        y = NULL;
        CHECK_OK(dlt_linear(xm, xm, NULL, &y));
        CHECK(dlt_tensor_numel(y) == 0);
        dlt_tensor_release(y);
        y = NULL;
        CHECK_OK(dlt_cross_entropy(xm, tg, -100, DLT_REDUCTION_SUM, &y));
        dlt_tensor_release(y);
        g_misuse_cases += 2;
        dlt_tensor_release(xm), dlt_tensor_release(tg);
    }
    /* modules, data and optimizer arguments */
    dlt_module *m = NULL;
    CHECK_STATUS(dlt_conv2d_create(ctx, G, G, 3, 3, 1, 1, 1, 1, 0, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_conv2d_create(ctx, 1, 1, M, M, 1, 1, 1, 1, 0, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_linear_create(ctx, G, G, 1, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_batchnorm2d_create(ctx, M, 1e-5, 0.1, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_basic_block_create(ctx, G, G, 1, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_bottleneck_create(ctx, 4, M / 4 + 1, 1, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_resnet_create(ctx, 18, M, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK(m == NULL);
    CHECK_OK(dlt_max_pool2d_create(ctx, M, M, B, &m)); /* no state: refused at the forward */
    CHECK_STATUS(dlt_module_forward(m, x, &y), DLT_ERR_INVALID_ARGUMENT);
    dlt_module_destroy(m);
    g_misuse_cases += 8;
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    CHECK_STATUS(dlt_synthetic_dataset_create(ctx, M, 10, 0, 1, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK_OK(dlt_synthetic_dataset_create(ctx, 8, 10, 0, 1, &ds));
    CHECK_STATUS(dlt_loader_create(ds, M, 0, 0, 0, &ld), DLT_ERR_INVALID_ARGUMENT);
    CHECK_OK(dlt_loader_create(ds, 4, 1, 0, 0, &ld));
    int64_t order[8];
    CHECK_STATUS(dlt_loader_epoch_order(ld, M, order, 8), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_start_epoch(ld, (int64_t)INT32_MAX + 1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_set_augment(ld, INT32_MAX, 0), DLT_ERR_INVALID_ARGUMENT);
    g_misuse_cases += 5;
    dlt_loader_destroy(ld), dlt_dataset_destroy(ds);
    dlt_tensor *p = NULL;
    CHECK_OK(dlt_tensor_zeros(ctx, DLT_F32, s_1, 1, 0, &p));
    CHECK_OK(dlt_tensor_set_requires_grad(p, 1));
    dlt_optimizer *opt = NULL;
    CHECK_STATUS(dlt_sgd_create(&p, -1, 0.1, 0, 0, 0, 0, 0, &opt), DLT_ERR_INVALID_ARGUMENT);
    CHECK_OK(dlt_sgd_create(&p, 1, 0.1, 0, 0, 0, 0, 0, &opt));
    int64_t ms[40];
    for (int i = 0; i < 40; i++) ms[i] = i + 1;
    CHECK_STATUS(dlt_lr_schedule_multistep(opt, ms, 40, 0.1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_multistep(opt, ms, INT32_MAX, 0.1), DLT_ERR_INVALID_ARGUMENT);
    /* a huge step size or horizon is valid: the schedule stays finite */
    CHECK_OK(dlt_lr_schedule_step(opt, M, 0.5));
    CHECK_OK(dlt_lr_schedule_cosine(opt, M, 0.0));
    CHECK_OK(dlt_lr_schedule_warmup(opt, M, 0.5));
    double lr = -1;
    CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
    CHECK(lr == (double)(float)0.05, "lr %g", lr);
    g_misuse_cases += 6;
    dlt_optimizer_destroy(opt);
    const char *names[1] = {"p"};
    CHECK_STATUS(dlt_safetensors_save("/tmp/never-written", names, &p, -1), DLT_ERR_INVALID_ARGUMENT);
    g_misuse_cases++;
    dlt_tensor_release(p);
    dlt_tensor *all[] = {e, ecl, w, w3, x, g1, r1};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dlt_tensor_release(all[i]);
    int64_t live = -1;
    CHECK_OK(dlt_tape_live_nodes(ctx, &live));
    CHECK(live == 0, "%lld tape nodes left", (long long)live);
    dlt_ctx_destroy(ctx);
    printf("# %d overflow cases\n", g_misuse_cases - n0);
}

/* Objects of two contexts mixed in every entry that takes two objects: refused with
 * DLT_ERR_CONTEXT_MISMATCH (or, where the API matches objects by identity, INVALID_ARGUMENT),
 * and nothing changes in either context. */
static void test_context_mismatch(void) {
    op_env a, b;
    env_init(&a);
    env_init(&b);
    dlt_module *conv = NULL, *seq = NULL, *child = NULL;
    CHECK_OK(dlt_conv2d_create(a.ctx, 3, 4, 3, 3, 1, 1, 1, 1, 1, &conv));
    CHECK_OK(dlt_sequential_create(a.ctx, &seq));
    CHECK_OK(dlt_relu_create(b.ctx, &child));
    dlt_tensor *pa[2] = {a.w2, a.b2}, *pb[2] = {b.w2, b.b2}, *mixed[2] = {a.w2, b.b2};
    dlt_optimizer *oa = NULL, *ob = NULL, *om = NULL;
    CHECK_OK(dlt_sgd_create(pa, 2, 0.1, 0.9, 0, 0, 0, 0, &oa));
    CHECK_OK(dlt_sgd_create(pb, 2, 0.1, 0.9, 0, 0, 0, 0, &ob));
    dlt_grad_scaler *sa = NULL;
    CHECK_OK(dlt_grad_scaler_create(a.ctx, 1024.0, 2.0, 0.5, 2, 1, &sa));
    /* gradients on b's parameters (what a wrong unscale/step would touch) */
    dlt_tensor *yb = NULL, *lb = NULL;
    CHECK_OK(dlt_linear(b.x2, b.w2, b.b2, &yb));
    CHECK_OK(dlt_sum(yb, &lb));
    CHECK_OK(dlt_backward(lb, NULL));
    dlt_tensor_release(yb), dlt_tensor_release(lb);
    /* a loader on b, a model on a */
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    CHECK_OK(dlt_synthetic_dataset_create(b.ctx, 8, 10, 3, 1, &ds));
    CHECK_OK(dlt_loader_create(ds, 4, 1, 0, 5, &ld));
    char path[512];
    path_in(path, sizeof path, "mismatch.safetensors");
    CHECK_OK(dlt_checkpoint_save(path, conv, NULL, NULL, 0, 0));

    snap s0a = env_snapshot(&a, 1), s0b = env_snapshot(&b, 1);
    mem_state m0a = ctx_mem(a.ctx), m0b = ctx_mem(b.ctx);
    snap g0 = {0};
    snap_tensor(&g0, dlt_tensor_grad(b.w2));
    snap_tensor(&g0, dlt_tensor_grad(b.b2));
    int n0 = g_misuse_cases;
    dlt_tensor *y = NULL;
    REFUSED(dlt_conv2d(a.x4, b.w, a.b, 1, 1, 1, 1, 1, 1, 1, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_conv2d(a.x4, a.w, b.b, 1, 1, 1, 1, 1, 1, 1, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_batch_norm2d_act(a.x4, b.res, 1, a.gamma, a.beta, a.rm, a.rv, 1, 0.1, 1e-5, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_batch_norm2d(a.x4, b.gamma, a.beta, a.rm, a.rv, 1, 0.1, 1e-5, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_batch_norm2d(a.x4, a.gamma, b.beta, a.rm, a.rv, 1, 0.1, 1e-5, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_batch_norm2d(a.x4, a.gamma, a.beta, b.rm, a.rv, 1, 0.1, 1e-5, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_batch_norm2d(a.x4, a.gamma, a.beta, a.rm, b.rv, 1, 0.1, 1e-5, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_linear(a.x2, b.w2, NULL, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_linear(a.x2, a.w2, b.b2, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_add(a.x4, b.res, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_mul_scalar(a.x4, b.s, 1.0, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_cross_entropy(a.logits, b.tgt, -100, 0, &y), DLT_ERR_CONTEXT_MISMATCH);
    {
        dlt_tensor *ra = NULL, *gb = NULL;
        CHECK_OK(dlt_sum(a.x4, &ra));
        CHECK_OK(dlt_tensor_zeros(b.ctx, DLT_F32, NULL, 0, 0, &gb));
        REFUSED(dlt_backward(ra, gb), DLT_ERR_CONTEXT_MISMATCH);
        dlt_tensor_release(ra), dlt_tensor_release(gb);
    }
    REFUSED(dlt_module_forward(conv, b.x4, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_sequential_append(seq, NULL, child), DLT_ERR_CONTEXT_MISMATCH); /* child destroyed */
    CHECK(dlt_module_num_state(seq) == 0);
    REFUSED(dlt_sgd_create(mixed, 2, 0.1, 0, 0, 0, 0, 0, &om), DLT_ERR_CONTEXT_MISMATCH);
    CHECK(om == NULL);
    REFUSED(dlt_grad_scaler_scale(sa, b.x4, &y), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_grad_scaler_unscale(sa, ob), DLT_ERR_CONTEXT_MISMATCH);
    REFUSED(dlt_grad_scaler_step(sa, ob), DLT_ERR_CONTEXT_MISMATCH);
    int32_t found = -1;
    REFUSED(dlt_grad_scaler_found_inf(sa, ob, &found), DLT_ERR_CONTEXT_MISMATCH);
    CHECK(found == -1);
    double acc = -1;
    REFUSED(dlt_evaluate_accuracy(conv, ld, &acc), DLT_ERR_CONTEXT_MISMATCH);
    CHECK(acc == -1 && dlt_module_is_training(conv) == 1);
    /* checkpoints match the optimizer's parameters to the module's by identity */
    REFUSED(dlt_checkpoint_save(path, conv, ob, NULL, 0, 0), DLT_ERR_INVALID_ARGUMENT);
    REFUSED(dlt_checkpoint_load(path, conv, ob, NULL, NULL, NULL), DLT_ERR_INVALID_ARGUMENT);
    /* nothing changed: values, memory, tape, gradients, scaler, optimizers, loader */
    snap s1a = env_snapshot(&a, 1), s1b = env_snapshot(&b, 1), g1 = {0};
    CHECK(snap_equal(&s0a, &s1a) && snap_equal(&s0b, &s1b), "a tensor changed");
    CHECK(mem_equal(ctx_mem(a.ctx), m0a) && mem_equal(ctx_mem(b.ctx), m0b), "memory or tape changed");
    snap_tensor(&g1, dlt_tensor_grad(b.w2));
    snap_tensor(&g1, dlt_tensor_grad(b.b2));
    CHECK(snap_equal(&g0, &g1), "b's gradients changed");
    double scale = 0;
    CHECK_OK(dlt_grad_scaler_get_scale(sa, &scale));
    CHECK(scale == 1024.0);
    int64_t steps = -1;
    CHECK_OK(dlt_optimizer_step_count(ob, &steps));
    CHECK(steps == 0 && dlt_optimizer_momentum_buffer(ob, 0) == NULL);
    /* the loader was not moved: its first batch is the one a twin loader gives */
    {
        dlt_loader *twin = NULL;
        dlt_tensor *x1 = NULL, *y1 = NULL, *x2 = NULL, *y2 = NULL;
        int32_t h1 = 0, h2 = 0;
        CHECK_OK(dlt_loader_create(ds, 4, 1, 0, 5, &twin));
        CHECK_OK(dlt_loader_next(twin, &x1, &y1, &h1));
        snap t1 = {0}, t2 = {0};
        snap_tensor(&t1, x1);
        CHECK_OK(dlt_loader_next(twin, &x1, &y1, &h1)); /* the second batch must differ */
        snap_tensor(&t2, x1);
        CHECK(!snap_equal(&t1, &t2));
        free(t2.p);
        t2 = (snap){0};
        CHECK_OK(dlt_loader_next(ld, &x2, &y2, &h2));
        snap_tensor(&t2, x2);
        CHECK(h1 && h2 && snap_equal(&t1, &t2), "the loader moved");
        free(t1.p), free(t2.p);
        dlt_loader_destroy(twin);
    }
    /* and everything still works on its own context */
    CHECK_OK(dlt_grad_scaler_step(sa, oa));
    CHECK_OK(dlt_grad_scaler_update(sa));
    free(s0a.p), free(s0b.p), free(s1a.p), free(s1b.p), free(g0.p), free(g1.p);
    unlink(path);
    dlt_loader_destroy(ld), dlt_dataset_destroy(ds);
    dlt_grad_scaler_destroy(sa);
    dlt_optimizer_destroy(oa), dlt_optimizer_destroy(ob);
    dlt_module_destroy(seq), dlt_module_destroy(conv);
    env_fini(&a), env_fini(&b);
    printf("# %d context-mismatch cases; %d misuse cases in all\n", g_misuse_cases - n0, g_misuse_cases);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/dlt_harden_XXXXXX");
    if (!mkdtemp(g_dir)) {
        printf("# cannot create a temporary directory\n");
        return 1;
    }
    if (th_group_on("cpu")) {
        RUN(test_inject_first_step);
        RUN(test_inject_later_step);
        RUN(test_inject_ops);
        RUN(test_save_failures);
        RUN(test_resume);
        RUN(test_determinism);
        RUN(test_zero_size);
        RUN(test_size_overflow);
        RUN(test_context_mismatch);
    }
    if (th_group_on("cuda")) {
        RUN(test_cuda_inject_first_step);
        RUN(test_cuda_inject_later_step);
        RUN(test_cuda_resume);
        RUN(test_cuda_determinism);
    }
    rmdir(g_dir);
    return th_done();
}
