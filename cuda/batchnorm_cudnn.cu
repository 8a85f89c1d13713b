/*
 * batchnorm_cudnn.cu - BatchNorm2d through cuDNN 9's graph API (cudnn_graph.h):
 * NORM_FORWARD (training / inference phase) followed by pointwise ADD and RELU_FWD in the
 * same graph; NORM_BACKWARD preceded by a pointwise RELU_BWD (dy masked by y > 0; the masked
 * dy is also the residual's gradient). When an engine will not take the fused graph, the
 * plain BN graph runs and our kernels do the rest (batchnorm_ref.cu's epilogue, relu.cu's
 * mask). The running statistics are updated by cuDNN in the same graph (EXP_AVG_FACTOR =
 * momentum, running buffers bound in place; its running variance is the unbiased one, as
 * PyTorch's: checked on the H200 by tests/cuda_conv_bn.c); DLT_BN_CUDNN_RUNNING_STATS=0
 * uses our per-channel kernel from cuDNN's saved mean and inverse std instead
 * (var = 1/invstd^2 - eps, corrected by n/(n-1)). Plans are cached per shape and, the first
 * time, built in the background (below).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchnorm.cuh"
#include "plan_pool.h"

using namespace dlt;
using namespace dlt::bn;

namespace {

/* ---------------------------------------------------------------------------------------
 * Graphs
 * ------------------------------------------------------------------------------------- */
const char *const kPhaseName[3] = {"training forward", "inference forward", "backward"};

/* uids of the bound tensors */
enum {
    U_X = 1, U_Y = 2, U_SCALE = 3, U_BIAS = 4, U_MEAN = 5, U_INVSTD = 6, U_EPS = 7, U_MOM = 8,
    U_RM_IN = 9, U_RV_IN = 10, U_RM_OUT = 11, U_RV_OUT = 12, U_RES = 13,
    U_DY = 20, U_DX = 21, U_DSCALE = 22, U_DBIAS = 23, U_DRES = 24,
    U_VIRT_BN = 100, U_VIRT_ADD = 101, U_VIRT_DRELU = 102
};

/* What one BN graph contains, and the pointers bound to it (in uid order). */
struct BnSpec {
    int phase;
    int32_t dtype;
    int cl;
    int64_t dims[4];
    int has_res, relu, fused;   /* forward: residual/ReLU in the graph when fused */
    int running;                /* training forward: cuDNN updates the running stats */
    int dres_real;              /* backward with fused ReLU: the masked dy is an output */
    float eps, momentum;
    int32_t n;
    int64_t uids[DLT_CUDNN_MAX_UIDS];
    void *ptrs[DLT_CUDNN_MAX_UIDS];
};

void bind(BnSpec &s, int64_t uid, void *p) {
    if (s.n < DLT_CUDNN_MAX_UIDS) {
        s.uids[s.n] = uid;
        s.ptrs[s.n] = p;
    }
    s.n++;
}

void describe(char *buf, size_t n, const BnSpec &s) {
    snprintf(buf, n, "batchnorm %s %s %s x[%lld,%lld,%lld,%lld]%s%s%s%s", kPhaseName[s.phase],
             dlt_dtype_name(s.dtype), s.cl ? "channels-last" : "NCHW", (long long)s.dims[0],
             (long long)s.dims[1], (long long)s.dims[2], (long long)s.dims[3],
             s.has_res ? " +residual" : "", s.relu ? " +relu" : "",
             (s.has_res || s.relu) ? (s.fused ? " (fused)" : " (unfused)") : "",
             s.running ? " +running stats" : "");
}

void make_key(dlt_cudnn_key *k, const dlt_ctx *ctx, const BnSpec &s) {
    k->n = 0;
    dlt__cudnn_key_push(k, 2); /* op family: batchnorm */
    dlt__cudnn_key_push(k, s.phase);
    dlt__cudnn_key_push(k, s.dtype);
    dlt__cudnn_key_push(k, s.cl);
    for (int i = 0; i < 4; i++) dlt__cudnn_key_push(k, s.dims[i]);
    dlt__cudnn_key_push(k, s.has_res);
    dlt__cudnn_key_push(k, s.relu);
    dlt__cudnn_key_push(k, s.fused);
    dlt__cudnn_key_push(k, s.running);
    dlt__cudnn_key_push(k, s.dres_real);
    uint32_t eb, mb;
    memcpy(&eb, &s.eps, 4);
    memcpy(&mb, &s.momentum, 4);
    dlt__cudnn_key_push(k, eb); /* by-value operands live in the plan entry */
    dlt__cudnn_key_push(k, mb);
    dlt__cudnn_key_push(k, ctx->deterministic);
    dlt__cudnn_key_push(k, s.n);
    for (int32_t i = 0; i < s.n && i < DLT_CUDNN_MAX_UIDS; i++) {
        dlt__cudnn_key_push(k, s.uids[i]);
        dlt__cudnn_key_push(k, dlt__cudnn_align(s.ptrs[i]));
    }
}

/* A per-channel f32 tensor [1,C,1,1] (the same memory in both layouts). */
cudnnBackendDescriptor_t chan_tensor(dlt_cudnn_builder *b, int64_t uid, int64_t C, const void *p) {
    const int64_t dims[4] = {1, C, 1, 1}, st[4] = {C, 1, C, C};
    return dlt__cudnn_tensor(b, uid, CUDNN_DATA_FLOAT, 4, dims, st, dlt__cudnn_align(p), 0, 0);
}

cudnnBackendDescriptor_t scalar_tensor(dlt_cudnn_builder *b, int64_t uid) {
    const int64_t one[4] = {1, 1, 1, 1};
    return dlt__cudnn_tensor(b, uid, CUDNN_DATA_FLOAT, 4, one, one, 16, 0, 1);
}

const void *ptr_of(const BnSpec &s, int64_t uid) {
    for (int32_t i = 0; i < s.n; i++)
        if (s.uids[i] == uid) return s.ptrs[i];
    return NULL;
}

/* A pointwise op: y = mode(x [, b]); pass b = NULL for unary modes. */
cudnnBackendDescriptor_t pointwise(dlt_cudnn_builder *b, cudnnPointwiseMode_t mode,
                                   cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t bdesc,
                                   cudnnBackendDescriptor_t y) {
    return dlt__cudnn_pointwise(b, "pointwise", mode, x, bdesc, NULL, y, -1);
}

dlt_status build_fwd(dlt_ctx *ctx, const BnSpec &s, const char *what, dlt_cudnn_plan *out) {
    cudnnDataType_t dt;
    if (dlt__cudnn_dtype(s.dtype, &dt) != 0)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F_FWD, "%s: dtype not supported", what);
    dlt_cudnn_builder b;
    dlt__cudnn_builder_init(&b, ctx, F_FWD, what);
    const int64_t C = s.dims[1];
    const int chain = s.fused && (s.has_res || s.relu);
    cudnnBackendDescriptor_t X = dlt__cudnn_tensor4(&b, U_X, dt, s.dims, s.cl, dlt__cudnn_align(ptr_of(s, U_X)), 0);
    cudnnBackendDescriptor_t Y = dlt__cudnn_tensor4(&b, U_Y, dt, s.dims, s.cl, dlt__cudnn_align(ptr_of(s, U_Y)), 0);
    cudnnBackendDescriptor_t BN_OUT = chain ? dlt__cudnn_tensor4(&b, U_VIRT_BN, CUDNN_DATA_FLOAT, s.dims, s.cl, 16, 1) : Y;
    cudnnBackendDescriptor_t SCALE = chan_tensor(&b, U_SCALE, C, ptr_of(s, U_SCALE));
    cudnnBackendDescriptor_t BIAS = chan_tensor(&b, U_BIAS, C, ptr_of(s, U_BIAS));
    cudnnBackendDescriptor_t MEAN = chan_tensor(&b, U_MEAN, C, ptr_of(s, U_MEAN));
    cudnnBackendDescriptor_t INVSTD = chan_tensor(&b, U_INVSTD, C, ptr_of(s, U_INVSTD));

    const cudnnBackendNormMode_t mode = CUDNN_BATCH_NORM;
    const cudnnBackendNormFwdPhase_t phase = s.phase == PH_TRAIN ? CUDNN_NORM_FWD_TRAINING : CUDNN_NORM_FWD_INFERENCE;
    cudnnBackendDescriptor_t ops[3];
    int32_t n_ops = 0;
    cudnnBackendDescriptor_t norm = dlt__cudnn_make(&b, CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
    DLT_CUDNN_SET(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE, 1, &mode);
    DLT_CUDNN_SET(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, 1, &phase);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, X);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, MEAN);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, INVSTD);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, SCALE);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, BIAS);
    if (s.phase == PH_TRAIN) {
        /* epsilon is an input of the training phase only: inference takes inv_variance */
        cudnnBackendDescriptor_t EPS = scalar_tensor(&b, U_EPS);
        DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, EPS);
        if (s.running) {
            cudnnBackendDescriptor_t MOM = scalar_tensor(&b, U_MOM);
            cudnnBackendDescriptor_t RMI = chan_tensor(&b, U_RM_IN, C, ptr_of(s, U_RM_IN));
            cudnnBackendDescriptor_t RVI = chan_tensor(&b, U_RV_IN, C, ptr_of(s, U_RV_IN));
            cudnnBackendDescriptor_t RMO = chan_tensor(&b, U_RM_OUT, C, ptr_of(s, U_RM_OUT));
            cudnnBackendDescriptor_t RVO = chan_tensor(&b, U_RV_OUT, C, ptr_of(s, U_RV_OUT));
            DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC, MOM);
            DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC, RMI);
            DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC, RVI);
            DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC, RMO);
            DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC, RVO);
        }
    }
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, BN_OUT);
    DLT_CUDNN_FINALIZE(&b, norm);
    ops[n_ops++] = norm;
    if (chain) {
        cudnnBackendDescriptor_t cur = BN_OUT;
        if (s.has_res) {
            cudnnBackendDescriptor_t RES = dlt__cudnn_tensor4(&b, U_RES, dt, s.dims, s.cl,
                                                              dlt__cudnn_align(ptr_of(s, U_RES)), 0);
            cudnnBackendDescriptor_t SUM = s.relu ? dlt__cudnn_tensor4(&b, U_VIRT_ADD, CUDNN_DATA_FLOAT, s.dims, s.cl, 16, 1) : Y;
            ops[n_ops++] = pointwise(&b, CUDNN_POINTWISE_ADD, cur, RES, SUM);
            cur = SUM;
        }
        if (s.relu) ops[n_ops++] = pointwise(&b, CUDNN_POINTWISE_RELU_FWD, cur, NULL, Y);
    }
    dlt_cudnn_plan_opts opts;
    memset(&opts, 0, sizeof opts);
    return dlt__cudnn_build_plan(&b, ops, n_ops, s.uids, s.n, &opts, out);
}

dlt_status build_bwd(dlt_ctx *ctx, const BnSpec &s, const char *what, dlt_cudnn_plan *out) {
    cudnnDataType_t dt;
    if (dlt__cudnn_dtype(s.dtype, &dt) != 0)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F_BWD, "%s: dtype not supported", what);
    dlt_cudnn_builder b;
    dlt__cudnn_builder_init(&b, ctx, F_BWD, what);
    const int64_t C = s.dims[1];
    cudnnBackendDescriptor_t X = dlt__cudnn_tensor4(&b, U_X, dt, s.dims, s.cl, dlt__cudnn_align(ptr_of(s, U_X)), 0);
    cudnnBackendDescriptor_t DY = dlt__cudnn_tensor4(&b, U_DY, dt, s.dims, s.cl, dlt__cudnn_align(ptr_of(s, U_DY)), 0);
    cudnnBackendDescriptor_t DX = dlt__cudnn_tensor4(&b, U_DX, dt, s.dims, s.cl, dlt__cudnn_align(ptr_of(s, U_DX)), 0);
    cudnnBackendDescriptor_t SCALE = chan_tensor(&b, U_SCALE, C, ptr_of(s, U_SCALE));
    cudnnBackendDescriptor_t MEAN = chan_tensor(&b, U_MEAN, C, ptr_of(s, U_MEAN));
    cudnnBackendDescriptor_t INVSTD = chan_tensor(&b, U_INVSTD, C, ptr_of(s, U_INVSTD));
    cudnnBackendDescriptor_t DSCALE = chan_tensor(&b, U_DSCALE, C, ptr_of(s, U_DSCALE));
    cudnnBackendDescriptor_t DBIAS = chan_tensor(&b, U_DBIAS, C, ptr_of(s, U_DBIAS));
    cudnnBackendDescriptor_t ops[2];
    int32_t n_ops = 0;
    cudnnBackendDescriptor_t grad_in = DY;
    if (s.relu && s.fused) {
        /* RELU_BWD(dy, y): dy where y > 0 (y is the post-ReLU output: y > 0 iff its input > 0) */
        cudnnBackendDescriptor_t Yd = dlt__cudnn_tensor4(&b, U_Y, dt, s.dims, s.cl, dlt__cudnn_align(ptr_of(s, U_Y)), 0);
        cudnnBackendDescriptor_t D = s.dres_real
            ? dlt__cudnn_tensor4(&b, U_DRES, dt, s.dims, s.cl, dlt__cudnn_align(ptr_of(s, U_DRES)), 0)
            : dlt__cudnn_tensor4(&b, U_VIRT_DRELU, CUDNN_DATA_FLOAT, s.dims, s.cl, 16, 1);
        const cudnnPointwiseMode_t pmode = CUDNN_POINTWISE_RELU_BWD;
        const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
        cudnnBackendDescriptor_t pw = dlt__cudnn_make(&b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        DLT_CUDNN_SET(&b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &pmode);
        DLT_CUDNN_SET(&b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
        DLT_CUDNN_FINALIZE(&b, pw);
        cudnnBackendDescriptor_t op = dlt__cudnn_make(&b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, DY);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, Yd);
        DLT_CUDNN_SET_DESC(&b, op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, D);
        DLT_CUDNN_FINALIZE(&b, op);
        ops[n_ops++] = op;
        grad_in = D;
    }
    const cudnnBackendNormMode_t mode = CUDNN_BATCH_NORM;
    cudnnBackendDescriptor_t norm = dlt__cudnn_make(&b, CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR);
    DLT_CUDNN_SET(&b, norm, CUDNN_ATTR_OPERATION_NORM_BWD_MODE, CUDNN_TYPE_NORM_MODE, 1, &mode);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, X);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, grad_in);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, SCALE);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, MEAN);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, INVSTD);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, DSCALE);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, DBIAS);
    DLT_CUDNN_SET_DESC(&b, norm, CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, DX);
    DLT_CUDNN_FINALIZE(&b, norm);
    ops[n_ops++] = norm;
    dlt_cudnn_plan_opts opts;
    memset(&opts, 0, sizeof opts);
    return dlt__cudnn_build_plan(&b, ops, n_ops, s.uids, s.n, &opts, out);
}

/* The cached plan for spec, or NULL when cuDNN has none (logged once, when first found). */
dlt_status get_plan(dlt_ctx *ctx, const BnSpec &s, const char *what, int quiet, dlt_cudnn_plan **plan) {
    *plan = NULL;
    if (s.n > DLT_CUDNN_MAX_UIDS)
        return dlt__err(DLT_ERR_INTERNAL, s.phase == PH_BWD ? F_BWD : F_FWD, "%s: too many bound tensors", what);
    dlt_cudnn_key key;
    make_key(&key, ctx, s);
    dlt_cudnn_plan *e = NULL;
    DLT_CHECK(dlt__cudnn_cache_find(ctx, &key, &e));
    if (!e) {
        dlt_cudnn_plan built;
        if (s.phase == PH_BWD)
            DLT_CHECK(build_bwd(ctx, s, what, &built));
        else
            DLT_CHECK(build_fwd(ctx, s, what, &built));
        built.scalars[0] = s.eps;
        built.scalars[4] = s.momentum;
        DLT_CHECK(dlt__cudnn_cache_insert(ctx, &key, &built, &e));
        if (!e->supported)
            dlt__log(quiet ? DLT_LOG_INFO : DLT_LOG_WARNING, "dlt: no cuDNN plan for %s (%s)%s", what,
                     e->why, quiet ? "" : "; using libdltrain's kernels");
    }
    if (e->supported) *plan = e;
    return DLT_OK;
}

/* ---------------------------------------------------------------------------------------
 * BN plans built in the background (the pool: plan_pool.h)
 *
 * cuDNN compiles BatchNorm's kernels with NVRTC while it builds a plan: 0.1-0.5 s per graph
 * and 44 graphs for ResNet50 at 32x32, measured on the H200 as 11 s for a process's first
 * step (5 s in a later process, with the driver's JIT cache warm), and as long again for the
 * smaller last batch of an epoch. So the first time a BN graph is needed, the call runs our
 * own kernels and queues the build; worker threads, each with its own cuDNN handle (a
 * handle must not be used by two threads at once), build it; a later call installs the
 * plan in the context's cache and runs cuDNN from then on. Our kernels and cuDNN's agree to
 * rounding (tests/cuda_conv_bn.c) and share the saved-statistics convention, so a forward
 * on one and its backward on the other is fine.
 *
 * Builds stay synchronous (as before) where switching implementation part-way would be
 * wrong: in dlt_graph_create's warm-up steps and its capture (a replayed graph would keep
 * our kernels for good, and the warm-up sizes the workspace the captured plans need: a
 * build already queued is waited for), in deterministic mode (which implementation ran
 * would depend on timing), and with DLT_BN_IMPL=cudnn.
 * DLT_BN_ASYNC_PLANS=0 turns it off; DLT_BN_PLAN_THREADS (1-16, default 4) sets the threads.
 * A job touches no context state but the cuDNN settings (read-only once created): it never
 * uses the plan cache or the context's allocator; the installing call does that.
 * ------------------------------------------------------------------------------------- */
/* One background build: the graph variants to try in order (fused, then unfused). */
struct BnJob {
    dlt_plan_job base; /* first: the pool's part (its key is the first variant's) */
    int n;
    dlt_cudnn_key keys[2];
    BnSpec specs[2];
    char what[2][300];
    int built; /* plans[0..built) hold results (negative entries included) */
    dlt_cudnn_plan plans[2];
    dlt_status st;
    char err[512];
};

void build_job(dlt_ctx *ctx, dlt_plan_job *job) {
    BnJob *j = (BnJob *)job;
    j->st = DLT_OK;
    j->built = 0;
    for (int i = 0; i < j->n; i++) {
        dlt_cudnn_plan p;
        dlt_status st = j->specs[i].phase == PH_BWD ? build_bwd(ctx, j->specs[i], j->what[i], &p)
                                                    : build_fwd(ctx, j->specs[i], j->what[i], &p);
        if (st != DLT_OK) {
            j->st = st;
            snprintf(j->err, sizeof j->err, "%s", dlt_last_error());
            break;
        }
        p.scalars[0] = j->specs[i].eps;
        p.scalars[4] = j->specs[i].momentum;
        j->plans[j->built++] = p;
        if (p.supported) break;
    }
}

void release_job(dlt_plan_job *job) {
    BnJob *j = (BnJob *)job;
    for (int i = 0; i < j->built; i++) dlt__cudnn_plan_release(&j->plans[i]);
    free(j);
}

struct JobRequest {
    const BnSpec *variants;
    int n;
};

dlt_plan_job *make_job(dlt_ctx *ctx, void *user) {
    const JobRequest *r = (const JobRequest *)user;
    BnJob *nj = (BnJob *)calloc(1, sizeof *nj);
    if (!nj) return NULL;
    nj->n = r->n;
    for (int i = 0; i < r->n; i++) {
        nj->specs[i] = r->variants[i];
        make_key(&nj->keys[i], ctx, r->variants[i]);
        describe(nj->what[i], sizeof nj->what[i], r->variants[i]);
    }
    nj->base.key = nj->keys[0];
    nj->base.build = build_job;
    nj->base.release = release_job;
    return &nj->base;
}

/* Moves a finished job's plans into the cache (logging what was found, as a synchronous
 * build does) and frees it. The job is already off the queue. */
dlt_status install(dlt_ctx *ctx, BnJob *j) {
    dlt__cudnn_note_builds(ctx, 1, j->built, j->base.seconds);
    dlt_status st = DLT_OK;
    int i = 0;
    for (; i < j->built && st == DLT_OK; i++) {
        dlt_cudnn_plan *e = NULL;
        st = dlt__cudnn_cache_insert(ctx, &j->keys[i], &j->plans[i], &e); /* releases it on failure */
        if (st != DLT_OK) break;
        if (e->supported)
            dlt__log(DLT_LOG_INFO, "dlt: cuDNN plan for %s (built in the background): engine %lld, workspace %lld bytes",
                     j->what[i], (long long)e->engine, (long long)e->workspace);
        else
            dlt__log(i == 0 && j->n > 1 ? DLT_LOG_INFO : DLT_LOG_WARNING, "dlt: no cuDNN plan for %s (%s)%s",
                     j->what[i], e->why, i == 0 && j->n > 1 ? "" : "; using libdltrain's kernels");
    }
    for (i++; i < j->built; i++) dlt__cudnn_plan_release(&j->plans[i]);
    j->built = 0;
    if (st == DLT_OK && j->st != DLT_OK)
        st = dlt__err(j->st, j->specs[0].phase == PH_BWD ? F_BWD : F_FWD, "%s (background build)", j->err);
    free(j);
    return st;
}

/* Decides whether this call waits for cuDNN: *pending = 1 means the plan for these graph
 * variants (in the order the caller tries them) is being built, run our kernels this time.
 * Otherwise the caller's loop finds or builds the plans as before (a finished background
 * build has been installed by then). */
dlt_status async_gate(dlt_ctx *ctx, const dlt_cudnn_settings *set, const BnSpec *variants, int n,
                      int *pending) {
    *pending = 0;
    dlt_cudnn_key k0;
    make_key(&k0, ctx, variants[0]);
    dlt_cudnn_plan *e = NULL;
    DLT_CHECK(dlt__cudnn_cache_find(ctx, &k0, &e));
    if (e) return DLT_OK;
    const int allowed = set->bn_async_plans && set->bn_impl == DLT_IMPL_AUTO && !ctx->deterministic &&
                        !ctx->capturing && !ctx->graph_warmup;
    JobRequest req = {variants, n};
    dlt_plan_job *done = NULL;
    const int r = dlt__plan_pool_gate(ctx, &k0, allowed, set->bn_plan_threads, make_job, &req, &done);
    if (r == DLT_PLAN_PENDING) *pending = 1;
    if (r == DLT_PLAN_FINISHED) return install(ctx, (BnJob *)done);
    return DLT_OK;
}

/* Pointers for the by-value operands come from the cached entry (stable addresses). */
void bind_scalars(BnSpec &s, dlt_cudnn_plan *p) {
    for (int32_t i = 0; i < s.n; i++) {
        if (s.uids[i] == U_EPS) s.ptrs[i] = &p->scalars[0];
        if (s.uids[i] == U_MOM) s.ptrs[i] = &p->scalars[4];
    }
}

BnSpec spec_base(int phase, const dlt_tensor *x) {
    BnSpec s;
    memset(&s, 0, sizeof s);
    s.phase = phase;
    s.dtype = x->dtype;
    s.cl = x->format == DLT_FORMAT_CHANNELS_LAST;
    for (int i = 0; i < 4; i++) s.dims[i] = x->shape[i];
    return s;
}

/* Fills the forward spec's bindings for a variant (fused or not). */
void spec_fwd(BnSpec &s, int fused, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *res, int relu,
              const dlt_tensor *gamma, const dlt_tensor *beta, void *mean, void *invstd,
              dlt_tensor *rm, dlt_tensor *rv, int running, double momentum, double eps) {
    s.n = 0;
    s.has_res = res != NULL;
    s.relu = relu ? 1 : 0;
    s.fused = fused;
    s.running = running;
    s.eps = (float)eps;
    s.momentum = (float)momentum;
    bind(s, U_X, dlt__data(x));
    bind(s, U_Y, dlt__data(y));
    bind(s, U_SCALE, dlt__data(gamma));
    bind(s, U_BIAS, dlt__data(beta));
    bind(s, U_MEAN, mean);
    bind(s, U_INVSTD, invstd);
    if (s.phase == PH_TRAIN) {
        bind(s, U_EPS, NULL); /* set from the plan entry */
        if (running) {
            bind(s, U_MOM, NULL);
            bind(s, U_RM_IN, dlt__data(rm));
            bind(s, U_RV_IN, dlt__data(rv));
            bind(s, U_RM_OUT, dlt__data(rm)); /* in place */
            bind(s, U_RV_OUT, dlt__data(rv));
        }
    }
    if (fused && res) bind(s, U_RES, dlt__data(res));
}

/* The first of `variants` (best first) that has a plan, described in `what`. *plan NULL:
 * our kernels run instead, because the plans are still being built in the background or
 * because there is none (an error instead with DLT_BN_IMPL=cudnn). */
dlt_status choose_plan(dlt_ctx *ctx, const dlt_cudnn_settings *set, const BnSpec *variants, int nv,
                       const char *func, char *what, size_t what_len, dlt_cudnn_plan **plan,
                       BnSpec *chosen) {
    *plan = NULL;
    int pending = 0;
    DLT_CHECK(async_gate(ctx, set, variants, nv, &pending));
    if (pending) return DLT_OK;
    int vi = 0;
    for (; vi < nv; vi++) {
        describe(what, what_len, variants[vi]);
        DLT_CHECK(get_plan(ctx, variants[vi], what, vi + 1 < nv, plan));
        if (*plan) break;
    }
    *chosen = variants[vi < nv ? vi : nv - 1];
    if (*plan || set->bn_impl != DLT_IMPL_CUDNN) return DLT_OK;
    dlt_cudnn_key key;
    dlt_cudnn_plan *e = NULL;
    make_key(&key, ctx, *chosen);
    DLT_CHECK(dlt__cudnn_cache_find(ctx, &key, &e));
    return e ? dlt__cudnn_plan_error(e, func, what)
             : dlt__err(DLT_ERR_NOT_SUPPORTED, func, "%s: no cuDNN plan", what);
}

void spec_bwd(BnSpec &s, int fused, int relu, const dlt_tensor *x, const void *dy_in, dlt_tensor *dx,
              const dlt_tensor *gamma, const dlt_tensor *save_mean, const dlt_tensor *save_invstd,
              void *dscale, void *dbias, const dlt_tensor *y, dlt_tensor *dres) {
    s.n = 0;
    s.relu = relu;
    s.fused = fused;
    s.dres_real = fused && relu && dres != NULL;
    bind(s, U_X, dlt__data(x));
    bind(s, U_DY, (void *)dy_in);
    bind(s, U_DX, dlt__data(dx));
    bind(s, U_SCALE, dlt__data(gamma));
    bind(s, U_MEAN, dlt__data(save_mean));
    bind(s, U_INVSTD, dlt__data(save_invstd));
    bind(s, U_DSCALE, dscale);
    bind(s, U_DBIAS, dbias);
    if (fused && relu) {
        bind(s, U_Y, dlt__data(y));
        if (dres) bind(s, U_DRES, dlt__data(dres));
    }
}

} // namespace

namespace dlt {
namespace bn {

/* cuDNN forward (training or inference). *done = 0 when the caller must use our kernels. */
dlt_status cudnn_fwd(dlt_ctx *ctx, const dlt_cudnn_settings *set, int phase, dlt_tensor *y,
                     const dlt_tensor *x, const dlt_tensor *res, int relu, const dlt_tensor *gamma,
                     const dlt_tensor *beta, dlt_tensor *rm, dlt_tensor *rv, dlt_tensor *save_mean,
                     dlt_tensor *save_invstd, double momentum, double eps, int *done) {
    *done = 0;
    const int64_t C = x->shape[1];
    const int running = phase == PH_TRAIN && set->bn_cudnn_running && rm && rv;
    const int want_fused = res != NULL || relu;
    char what[300];
    dlt_cudnn_plan *plan = NULL;
    /* mean/invstd: outputs in training; inputs in inference (running mean, computed invstd) */
    void *mean = phase == PH_TRAIN ? dlt__data(save_mean) : dlt__data(rm);
    void *invstd = save_invstd ? dlt__data(save_invstd) : NULL;
    /* the graphs to try, in order: fused first when there is an epilogue */
    BnSpec variants[2];
    int nv = 0;
    for (int attempt = want_fused ? 1 : 0; attempt >= 0; attempt--, nv++) {
        variants[nv] = spec_base(phase, x);
        spec_fwd(variants[nv], attempt, y, x, res, relu, gamma, beta, mean, invstd ? invstd : (void *)16,
                 rm, rv, running, momentum, eps);
    }
    BnSpec s;
    DLT_CHECK(choose_plan(ctx, set, variants, nv, F_FWD, what, sizeof what, &plan, &s));
    if (!plan) return DLT_OK; /* our kernels: the plan is being built, or there is none */
    const int fused = s.fused;
    /* workspace: the plan's, then (inference without save_invstd) C floats for invstd */
    const size_t off = dlt__cudnn_round256((size_t)plan->workspace);
    void *ws = NULL;
    DLT_CHECK(dlt__cuda_workspace(ctx, off + (invstd ? 0 : (size_t)C * sizeof(float)), &ws));
    if (!invstd) invstd = (char *)ws + off;
    if (phase == PH_INFER) {
        DLT_CHECK(launch_eval_prep(ctx, fptr(rm), fptr(rv), fptr(save_mean), (float *)invstd, C, eps));
    }
    spec_fwd(s, fused, y, x, res, relu, gamma, beta, mean, invstd, rm, rv, running, momentum, eps);
    bind_scalars(s, plan);
    DLT_CHECK(dlt__cudnn_execute(ctx, plan, s.ptrs, ws, F_FWD, what));
    if (want_fused && !fused) {
        DLT_CHECK(launch_epilogue(ctx, y, res, relu));
    }
    if (phase == PH_TRAIN && !running && (rm || rv)) {
        DLT_CHECK(launch_running_from_saved(ctx, fptr(save_mean), fptr(save_invstd), fptr(rm), fptr(rv), C,
                                            x->shape[0] * x->shape[2] * x->shape[3], eps, momentum));
    }
    *done = 1;
    return DLT_OK;
}

dlt_status cudnn_bwd(dlt_ctx *ctx, const dlt_cudnn_settings *set, dlt_tensor *dx, dlt_tensor *dres,
                     dlt_tensor *dgamma, dlt_tensor *dbeta, int32_t beta_acc, const dlt_tensor *dy,
                     const dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *gamma,
                     const dlt_tensor *save_mean, const dlt_tensor *save_invstd, int *done) {
    *done = 0;
    const int64_t C = x->shape[1];
    const int relu = y != NULL;
    const int direct_params = dgamma && dbeta && !beta_acc;
    char what[300];
    dlt_cudnn_plan *plan = NULL;
    /* alignment-only stand-ins for the temporaries (the workspace is 256-byte aligned) */
    void *const ws_stand_in = (void *)256;
    BnSpec variants[2];
    int nv = 0;
    for (int attempt = relu ? 1 : 0; attempt >= 0; attempt--, nv++) {
        variants[nv] = spec_base(PH_BWD, x);
        spec_bwd(variants[nv], attempt, relu, x,
                 relu && !attempt && !dres ? ws_stand_in : dlt__data(relu && !attempt ? dres : dy), dx, gamma,
                 save_mean, save_invstd, direct_params ? dlt__data(dgamma) : ws_stand_in,
                 direct_params ? dlt__data(dbeta) : ws_stand_in, y, dres);
    }
    BnSpec s;
    DLT_CHECK(choose_plan(ctx, set, variants, nv, F_BWD, what, sizeof what, &plan, &s));
    if (!plan) return DLT_OK; /* our kernels: the plan is being built, or there is none */
    const int fused = s.fused;
    /* workspace: [plan][dscale][dbias temporaries][masked dy when it has nowhere else to go],
     * each 256-byte aligned (the plan was built for 16-byte aligned temporaries) */
    const size_t off_params = dlt__cudnn_round256((size_t)plan->workspace);
    const size_t chan_bytes = dlt__cudnn_round256((size_t)C * sizeof(float));
    const size_t params_bytes = direct_params ? 0 : 2 * chan_bytes;
    const int need_mask_buf = relu && !fused && !dres;
    const size_t off_mask = off_params + params_bytes;
    void *ws = NULL;
    DLT_CHECK(dlt__cuda_workspace(ctx, off_mask + (need_mask_buf ? dlt__nbytes(dy) : 0), &ws));
    float *tscale = (float *)((char *)ws + off_params);
    float *tbias = (float *)((char *)ws + off_params + chan_bytes);
    const void *dy_in = dlt__data(dy);
    const int64_t n = dy->numel;
    cudaStream_t st = dlt__stream(ctx);
    if (relu && !fused) {
        void *mbuf = dres ? dlt__data(dres) : (char *)ws + off_mask;
        /* d = dy masked by y > 0 before an unfused cuDNN backward: the ReLU backward */
        DLT_CHECK(dlt__cuda_relu_mask(ctx, dy->dtype, mbuf, dlt__data(dy), dlt__data(y), n, F_BWD));
        dy_in = mbuf;
    } else if (!relu && dres) {
        DLT_CU(ctx, cudaMemcpyAsync(dlt__data(dres), dlt__data(dy), dlt__nbytes(dy), cudaMemcpyDeviceToDevice, st),
               F_BWD);
    }
    spec_bwd(s, fused, relu, x, dy_in, dx, gamma, save_mean, save_invstd,
             direct_params ? dlt__data(dgamma) : (void *)tscale,
             direct_params ? dlt__data(dbeta) : (void *)tbias, y, dres);
    DLT_CHECK(dlt__cudnn_execute(ctx, plan, s.ptrs, ws, F_BWD, what));
    if (!direct_params && (dgamma || dbeta)) {
        DLT_CHECK(launch_param_grads(ctx, fptr(dgamma), fptr(dbeta), tscale, tbias, C, beta_acc ? 1 : 0));
    }
    *done = 1;
    return DLT_OK;
}

} // namespace bn
} // namespace dlt
