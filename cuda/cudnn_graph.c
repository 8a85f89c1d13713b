/*
 * cudnn_graph.c - cuDNN backend-API plumbing shared by conv2d.cu, batchnorm.cu and
 * attention_cudnn.c: plan building with engine filtering and optional autotuning, the
 * per-context plan cache and plan execution (the graphs themselves are described with
 * cudnn_builder.c). See cudnn_graph.h for the life of a plan.
 *
 * The cache is an open-addressing hash table (linear probing, power-of-two capacity, kept
 * at most half full) from dlt_cudnn_key to heap-allocated plans, so a plan pointer stays
 * valid while the table grows. It belongs to the context (dlt_cuda_state->plans) and is
 * freed by context destruction through plans_free, after the context's stream has drained
 * (a plan may still be executing when the user destroys the context).
 *
 * Only cuDNN 9.0-9.14 API is used (the GPU machine runs 9.14): no kernel cache, no
 * device-property descriptors, no native CUDA-graph population.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cudnn_graph.h"

static _Thread_local cudnnHandle_t tl_handle; /* set on background build threads */

#define MAX_CONFIGS_PER_MODE 64
#define MAX_AUTOTUNE_CANDIDATES 24
#define AUTOTUNE_REPS 3

typedef struct cache_slot {
    uint64_t hash;
    dlt_cudnn_key key;
    dlt_cudnn_plan *plan; /* NULL: empty slot */
} cache_slot;

struct dlt_cuda_plan_cache {
    dlt_cudnn_settings settings;
    cudaStream_t stream;
    size_t cap, count;
    cache_slot *slots;
    int64_t built[2]; /* plans built: [0] convolutions, [1] BatchNorm */
    double build_s[2];
};

/* ---------------------------------------------------------------------------------------
 * Settings and the cache
 * ------------------------------------------------------------------------------------- */
void dlt__cudnn_plan_release(dlt_cudnn_plan *p) {
    if (!p) return;
    if (p->vpack) cudnnBackendDestroyDescriptor(p->vpack);
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    for (int32_t i = p->n_owned - 1; i >= 0; i--)
        if (p->owned[i]) cudnnBackendDestroyDescriptor(p->owned[i]);
    p->vpack = NULL;
    p->plan = NULL;
    p->n_owned = 0;
}

static void cache_free(dlt_cuda_plan_cache *c) {
    if (!c) return;
    /* plans may still run on the stream: let them finish before their descriptors go */
    if (c->stream) (void)cudaStreamSynchronize(c->stream);
    (void)cudaGetLastError();
    if (c->built[0] + c->built[1] > 0)
        dlt__log(DLT_LOG_INFO, "dlt: cuDNN plans built by this context: %lld convolution plans in %.2f s, "
                 "%lld BatchNorm plans in %.2f s", (long long)c->built[0], c->build_s[0],
                 (long long)c->built[1], c->build_s[1]);
    for (size_t i = 0; i < c->cap; i++)
        if (c->slots[i].plan) {
            dlt__cudnn_plan_release(c->slots[i].plan);
            free(c->slots[i].plan);
        }
    free(c->slots);
    free(c);
}

static dlt_status cache_get(dlt_ctx *ctx, dlt_cuda_plan_cache **out) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (!s->plans) {
        dlt_cuda_plan_cache *c = dlt__host_calloc(ctx, 1, sizeof *c);
        if (!c) return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_cudnn", "cannot allocate the plan cache");
        c->cap = 64;
        c->slots = dlt__host_calloc(ctx, c->cap, sizeof *c->slots);
        if (!c->slots) {
            free(c);
            return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_cudnn", "cannot allocate the plan cache");
        }
        c->stream = s->stream;
        /* the context's environment (lib/core/env.c), read when it was created */
        const int64_t *env = ctx->env.v;
        c->settings.conv_impl = (int32_t)env[DLT__ENV_CONV_IMPL];
        c->settings.bn_impl = (int32_t)env[DLT__ENV_BN_IMPL];
        c->settings.gemm_autotune = (int32_t)env[DLT__ENV_GEMM_AUTOTUNE];
        c->settings.conv_gemm = (int32_t)env[DLT__ENV_CONV_GEMM];
        c->settings.conv_pad = (int32_t)env[DLT__ENV_CONV_PAD_CHANNELS];
        /* cuDNN updates the running statistics in its BN graph (unbiased variance, checked
         * against PyTorch on the H200 by tests/cuda_conv_bn.c): one kernel less per BN.
         * DLT_BN_CUDNN_RUNNING_STATS=0 uses our kernel instead. */
        c->settings.bn_cudnn_running = (int32_t)env[DLT__ENV_BN_CUDNN_RUNNING_STATS];
        c->settings.bn_native_max = env[DLT__ENV_BN_NATIVE_MAX];
        c->settings.bn_native_max_bwd = env[DLT__ENV_BN_NATIVE_MAX_BWD];
        c->settings.bn_one_kernel = (int32_t)env[DLT__ENV_BN_ONE_KERNEL];
        c->settings.workspace_max = env[DLT__ENV_WORKSPACE_MAX];
        c->settings.bn_async_plans = (int32_t)env[DLT__ENV_BN_ASYNC_PLANS];
        c->settings.bn_plan_threads = (int32_t)env[DLT__ENV_BN_PLAN_THREADS];
        s->plans = c;
        s->plans_free = cache_free;
    }
    *out = s->plans;
    return DLT_OK;
}

dlt_status dlt__cudnn_settings(dlt_ctx *ctx, const dlt_cudnn_settings **out) {
    dlt_cuda_plan_cache *c = NULL;
    DLT_CHECK(cache_get(ctx, &c));
    *out = &c->settings;
    return DLT_OK;
}

static uint64_t key_hash(const dlt_cudnn_key *k) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the 64-bit words */
    for (int32_t i = 0; i < k->n; i++) {
        h ^= (uint64_t)k->v[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

int dlt__cudnn_key_equal(const dlt_cudnn_key *a, const dlt_cudnn_key *b) {
    const int32_t n = a->n < DLT_CUDNN_KEY_MAX ? a->n : DLT_CUDNN_KEY_MAX;
    return a->n == b->n && memcmp(a->v, b->v, (size_t)n * sizeof a->v[0]) == 0;
}

static dlt_status key_check(const dlt_cudnn_key *key) {
    if (key->n <= 0 || key->n > DLT_CUDNN_KEY_MAX)
        return dlt__err(DLT_ERR_INTERNAL, "dlt_cudnn", "plan key of %d words (max %d)", key->n,
                        DLT_CUDNN_KEY_MAX);
    return DLT_OK;
}

dlt_status dlt__cudnn_cache_find(dlt_ctx *ctx, const dlt_cudnn_key *key, dlt_cudnn_plan **out) {
    dlt_cuda_plan_cache *c = NULL;
    *out = NULL;
    DLT_CHECK(key_check(key));
    DLT_CHECK(cache_get(ctx, &c));
    uint64_t h = key_hash(key);
    for (size_t i = (size_t)h & (c->cap - 1);; i = (i + 1) & (c->cap - 1)) {
        cache_slot *sl = &c->slots[i];
        if (!sl->plan) return DLT_OK;
        if (sl->hash == h && dlt__cudnn_key_equal(&sl->key, key)) {
            *out = sl->plan;
            return DLT_OK;
        }
    }
}

static void slot_place(cache_slot *slots, size_t cap, uint64_t h, const dlt_cudnn_key *key,
                       dlt_cudnn_plan *p) {
    size_t i = (size_t)h & (cap - 1);
    while (slots[i].plan) i = (i + 1) & (cap - 1);
    slots[i].hash = h;
    slots[i].key = *key;
    slots[i].plan = p;
}

dlt_status dlt__cudnn_cache_insert(dlt_ctx *ctx, const dlt_cudnn_key *key, dlt_cudnn_plan *plan,
                                   dlt_cudnn_plan **out) {
    dlt_cuda_plan_cache *c = NULL;
    dlt_status st = key_check(key);
    if (st == DLT_OK) st = cache_get(ctx, &c);
    if (st != DLT_OK) {
        dlt__cudnn_plan_release(plan);
        return st;
    }
    if (2 * (c->count + 1) > c->cap) {
        size_t ncap = c->cap * 2;
        cache_slot *ns = dlt__host_calloc(ctx, ncap, sizeof *ns);
        if (!ns) {
            dlt__cudnn_plan_release(plan);
            return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_cudnn", "cannot grow the plan cache to %zu entries",
                            ncap);
        }
        for (size_t i = 0; i < c->cap; i++)
            if (c->slots[i].plan)
                slot_place(ns, ncap, c->slots[i].hash, &c->slots[i].key, c->slots[i].plan);
        free(c->slots);
        c->slots = ns;
        c->cap = ncap;
    }
    dlt_cudnn_plan *p = dlt__host_alloc(ctx, sizeof *p);
    if (!p) {
        dlt__cudnn_plan_release(plan);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_cudnn", "cannot allocate a plan cache entry");
    }
    *p = *plan;
    memset(plan, 0, sizeof *plan); /* the cache owns the descriptors now */
    slot_place(c->slots, c->cap, key_hash(key), key, p);
    c->count++;
    *out = p;
    return DLT_OK;
}

/* ---------------------------------------------------------------------------------------
 * Plan building
 * ------------------------------------------------------------------------------------- */

/* Reads the engine behind cfg: its global index and whether its numerical notes are
 * allowed under this context's settings. Writes a reason into why when not. */
static int engine_allowed(dlt_ctx *ctx, cudnnBackendDescriptor_t cfg, int fp32_io,
                          int64_t *engine_id, char *why, size_t why_n) {
    cudnnBackendDescriptor_t eng = NULL;
    int ok = 0;
    *engine_id = -1;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) {
        snprintf(why, why_n, "cannot create an engine descriptor");
        return 0;
    }
    int64_t n = 0;
    cudnnStatus_t s = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng);
    if (s != CUDNN_STATUS_SUCCESS || n < 1) {
        dlt__cudnn_status_text(s, "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINECFG_ENGINE)", why, why_n);
        goto done;
    }
    (void)cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                   engine_id);
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT + 4];
    n = 0;
    s = cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes);
    if (s != CUDNN_STATUS_SUCCESS) {
        dlt__cudnn_status_text(s, "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE)", why, why_n);
        goto done;
    }
    if (n > CUDNN_NUMERICAL_NOTE_TYPE_COUNT) n = CUDNN_NUMERICAL_NOTE_TYPE_COUNT;
    ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        switch (notes[i]) {
        case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
            snprintf(why, why_n, "engine %lld down-converts inputs", (long long)*engine_id);
            ok = 0;
            break;
        case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
            if (fp32_io && !ctx->allow_tf32) {
                snprintf(why, why_n, "engine %lld uses TF32 tensor cores (allow_tf32 is off)",
                         (long long)*engine_id);
                ok = 0;
            }
            break;
        case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
            if (ctx->deterministic) {
                snprintf(why, why_n, "engine %lld is nondeterministic (deterministic mode)",
                         (long long)*engine_id);
                ok = 0;
            }
            break;
        default: break;
        }
    }
done:
    cudnnBackendDestroyDescriptor(eng);
    return ok;
}

typedef struct candidate {
    cudnnBackendDescriptor_t cfg, plan;
    int64_t workspace, engine;
    float ms;
    int usable;
} candidate;

/* Creates a variant pack for trial executions (autotuning). */
static cudnnStatus_t make_pack(const int64_t *uids, int32_t n, void *const *ptrs, void *ws,
                               cudnnBackendDescriptor_t *out) {
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n,
                                     ptrs);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(vp);
    if (s != CUDNN_STATUS_SUCCESS) {
        if (vp) cudnnBackendDestroyDescriptor(vp);
        vp = NULL;
    }
    *out = vp;
    return s;
}

/* Times each usable candidate (a few executes between two events) and returns the index of
 * the fastest, or -1. Synchronises: only called outside capture, at plan-building time. */
static dlt_status autotune(dlt_cudnn_builder *b, candidate *cands, int32_t nc, const int64_t *uids,
                           int32_t n_uids, const dlt_cudnn_plan_opts *opts, int32_t *best) {
    dlt_ctx *ctx = b->ctx;
    dlt_cuda_state *cs = dlt__cu(ctx);
    size_t maxws = 0;
    *best = -1;
    for (int32_t i = 0; i < nc; i++)
        if ((size_t)cands[i].workspace > maxws) maxws = (size_t)cands[i].workspace;
    void *ws = NULL;
    DLT_CHECK(dlt__cuda_workspace(ctx, dlt__cudnn_round256(maxws) + dlt__cudnn_round256(opts->out_bytes),
                                  &ws));
    void *ptrs[DLT_CUDNN_MAX_UIDS];
    for (int32_t i = 0; i < n_uids; i++) ptrs[i] = opts->trial_ptrs[i];
    ptrs[opts->out_slot] = (char *)ws + dlt__cudnn_round256(maxws);
    cudaEvent_t e0 = NULL, e1 = NULL;
    DLT_CU(ctx, cudaEventCreate(&e0), b->func);
    cudaError_t ce = cudaEventCreate(&e1);
    if (ce != cudaSuccess) {
        cudaEventDestroy(e0);
        return dlt__cuda_fail(ctx, ce, b->func, "cudaEventCreate");
    }
    dlt_status st = DLT_OK;
    float best_ms = 0.0f;
    for (int32_t i = 0; i < nc; i++) {
        cudnnBackendDescriptor_t vp = NULL;
        if (make_pack(uids, n_uids, ptrs, ws, &vp) != CUDNN_STATUS_SUCCESS) continue;
        /* warm-up: first-use module loading must not count */
        cudnnStatus_t s = cudnnBackendExecute(cs->cudnn, cands[i].plan, vp);
        if (s == CUDNN_STATUS_SUCCESS && cudaEventRecord(e0, cs->stream) == cudaSuccess) {
            for (int r = 0; r < AUTOTUNE_REPS && s == CUDNN_STATUS_SUCCESS; r++)
                s = cudnnBackendExecute(cs->cudnn, cands[i].plan, vp);
            ce = cudaEventRecord(e1, cs->stream);
            if (ce == cudaSuccess) ce = cudaEventSynchronize(e1);
            if (ce != cudaSuccess) {
                cudnnBackendDestroyDescriptor(vp);
                st = dlt__cuda_fail(ctx, ce, b->func, "autotuning (cudaEventSynchronize)");
                break;
            }
            float ms = 0.0f;
            if (s == CUDNN_STATUS_SUCCESS && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess) {
                cands[i].ms = ms;
                if (*best < 0 || ms < best_ms) {
                    *best = i;
                    best_ms = ms;
                }
            }
        }
        (void)cudaGetLastError();
        cudnnBackendDestroyDescriptor(vp);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (st == DLT_OK && *best >= 0)
        dlt__log(DLT_LOG_INFO, "dlt: cuDNN autotune for %s: engine %lld, %.4f ms per execute (%d candidates)",
                 b->what, (long long)cands[*best].engine, (double)(best_ms / AUTOTUNE_REPS), (int)nc);
    return st;
}

/* Asks heuristics in one mode and appends the configs it returns (owned by the caller). */
static void heuristics(dlt_cudnn_builder *b, cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                       cudnnBackendDescriptor_t *cfgs, int32_t *n_cfgs, int32_t cap, char *why,
                       size_t why_n) {
    cudnnBackendDescriptor_t heur = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    if (s != CUDNN_STATUS_SUCCESS) {
        dlt__cudnn_status_text(s, "cudnnBackendCreateDescriptor(ENGINEHEUR)", why, why_n);
        return;
    }
    if (dlt__cudnn_builder_own(b, heur) != 0) return; /* kept alive with the plan */
    s = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(heur);
    int64_t count = 0;
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
    if (s != CUDNN_STATUS_SUCCESS) {
        dlt__cudnn_status_text(s, mode == CUDNN_HEUR_MODE_A ? "heuristics (mode A)" : "heuristics (fallback)",
                    why, why_n);
        return;
    }
    if (count > MAX_CONFIGS_PER_MODE) count = MAX_CONFIGS_PER_MODE;
    if (count > cap - *n_cfgs) count = cap - *n_cfgs;
    if (count <= 0) return;
    cudnnBackendDescriptor_t got[MAX_CONFIGS_PER_MODE];
    int64_t made = 0;
    for (; made < count; made++)
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &got[made]) !=
            CUDNN_STATUS_SUCCESS)
            break;
    int64_t filled = 0;
    s = made > 0 ? cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, made, &filled, got)
                 : CUDNN_STATUS_NOT_SUPPORTED;
    if (s != CUDNN_STATUS_SUCCESS) {
        dlt__cudnn_status_text(s, "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)", why, why_n);
        filled = 0;
    }
    if (filled > made) filled = made;
    for (int64_t i = 0; i < made; i++) {
        if (i < filled)
            cfgs[(*n_cfgs)++] = got[i];
        else
            cudnnBackendDestroyDescriptor(got[i]);
    }
}

static dlt_status build_plan(dlt_cudnn_builder *b, const cudnnBackendDescriptor_t *ops,
                             int32_t n_ops, const int64_t *uids, int32_t n_uids,
                             const dlt_cudnn_plan_opts *opts, dlt_cudnn_plan *out) {
    dlt_ctx *ctx = b->ctx;
    cudnnHandle_t handle = tl_handle ? tl_handle : dlt__cu(ctx)->cudnn;
    const dlt_cudnn_settings *set = NULL;
    memset(out, 0, sizeof *out);
    out->engine = -1;
    dlt_status st = dlt__cudnn_settings(ctx, &set);
    if (st != DLT_OK) {
        dlt__cudnn_builder_discard(b);
        return st;
    }
    if (n_uids > DLT_CUDNN_MAX_UIDS) {
        dlt__cudnn_builder_discard(b);
        return dlt__err(DLT_ERR_INTERNAL, b->func, "%s: %d tensors bound (max %d)", b->what, n_uids,
                        DLT_CUDNN_MAX_UIDS);
    }
    out->n_uids = n_uids;
    memcpy(out->uids, uids, (size_t)n_uids * sizeof *uids);

    /* the operation graph */
    cudnnBackendDescriptor_t graph = dlt__cudnn_make(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    DLT_CUDNN_SET(b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops);
    /* optional since 9.8, still needed by 9.14's engines for some graphs */
    DLT_CUDNN_SET(b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    DLT_CUDNN_FINALIZE(b, graph);
    if (b->status != CUDNN_STATUS_SUCCESS) {
        /* cuDNN refused the description itself: a negative entry with its message */
        out->why_status = b->status;
        snprintf(out->why, sizeof out->why, "%s", b->failed);
        out->n_owned = b->n_owned;
        memcpy(out->owned, b->owned, (size_t)b->n_owned * sizeof b->owned[0]);
        b->n_owned = 0;
        return DLT_OK;
    }

    /* engine configs: heuristics mode A, then the fallback list */
    cudnnBackendDescriptor_t cfgs[2 * MAX_CONFIGS_PER_MODE];
    int32_t n_cfgs = 0;
    char heur_why[400] = "", last_why[400] = "";
    heuristics(b, graph, CUDNN_HEUR_MODE_A, cfgs, &n_cfgs, 2 * MAX_CONFIGS_PER_MODE, heur_why,
               sizeof heur_why);
    heuristics(b, graph, CUDNN_HEUR_MODE_FALLBACK, cfgs, &n_cfgs, 2 * MAX_CONFIGS_PER_MODE,
               heur_why, sizeof heur_why);

    const int tune = ctx->cudnn_benchmark && !ctx->capturing && opts && opts->trial_ptrs;
    candidate cands[MAX_AUTOTUNE_CANDIDATES];
    candidate backup; /* the first config over the workspace limit, used when none fits */
    memset(&backup, 0, sizeof backup);
    int32_t nc = 0, filtered = 0, rejected = 0;
    for (int32_t i = 0; i < n_cfgs; i++) {
        if (nc >= (tune ? MAX_AUTOTUNE_CANDIDATES : 1)) break;
        int64_t engine = -1;
        char why[200] = "";
        if (!engine_allowed(ctx, cfgs[i], opts ? opts->fp32_io : 0, &engine, why, sizeof why)) {
            filtered++;
            snprintf(last_why, sizeof last_why, "%s", why);
            continue;
        }
        cudnnBackendDescriptor_t plan = NULL;
        cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                         &handle);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(plan);
        /* A config that cuDNN rejects can leave a CUDA runtime error behind (e.g. an invalid
         * launch attribute tried internally); it is cuDNN's and handled, so it must not be
         * picked up by our next launch check. Measured on the H200: cudaErrorInvalidValue. */
        (void)cudaGetLastError();
        int64_t ws = 0, nws = 0;
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                         CUDNN_TYPE_INT64, 1, &nws, &ws);
        if (s != CUDNN_STATUS_SUCCESS) {
            /* NOT_SUPPORTED here is normal: the next config may work */
            char call[80];
            snprintf(call, sizeof call, "execution plan for engine %lld", (long long)engine);
            dlt__cudnn_status_text(s, call, last_why, sizeof last_why);
            if (plan) cudnnBackendDestroyDescriptor(plan);
            rejected++;
            continue;
        }
        if (ws > set->workspace_max) {
            if (!backup.plan) {
                backup.cfg = cfgs[i];
                backup.plan = plan;
                backup.workspace = ws;
                backup.engine = engine;
                backup.usable = 1;
                cfgs[i] = NULL;
            } else {
                cudnnBackendDestroyDescriptor(plan);
            }
            continue;
        }
        cands[nc].cfg = cfgs[i];
        cands[nc].plan = plan;
        cands[nc].workspace = ws < 0 ? 0 : ws;
        cands[nc].engine = engine;
        cands[nc].ms = 0.0f;
        cands[nc].usable = 1;
        cfgs[i] = NULL; /* now owned by the candidate */
        nc++;
    }

    if (backup.plan && nc == 0) {
        cands[nc++] = backup;
    } else if (backup.plan) {
        cudnnBackendDestroyDescriptor(backup.plan);
        cudnnBackendDestroyDescriptor(backup.cfg);
    }
    int32_t chosen = nc > 0 ? 0 : -1;
    if (tune && nc > 1) {
        st = autotune(b, cands, nc, uids, n_uids, opts, &chosen);
        if (st != DLT_OK) chosen = -1;
        else if (chosen < 0) chosen = 0; /* no trial timed: keep the heuristics' order */
    }

    /* keep the chosen plan and its config; destroy everything else */
    for (int32_t i = 0; i < nc; i++) {
        if (i == chosen) continue;
        cudnnBackendDestroyDescriptor(cands[i].plan);
        cudnnBackendDestroyDescriptor(cands[i].cfg);
    }
    for (int32_t i = 0; i < n_cfgs; i++)
        if (cfgs[i]) cudnnBackendDestroyDescriptor(cfgs[i]);
    if (chosen >= 0) {
        if (dlt__cudnn_builder_own(b, cands[chosen].cfg) != 0) {
            cudnnBackendDestroyDescriptor(cands[chosen].plan);
            chosen = -1;
        }
    }
    out->n_owned = b->n_owned;
    memcpy(out->owned, b->owned, (size_t)b->n_owned * sizeof b->owned[0]);
    b->n_owned = 0;
    if (st != DLT_OK) {
        dlt__cudnn_plan_release(out);
        return st;
    }
    if (chosen < 0) {
        out->why_status = CUDNN_STATUS_NOT_SUPPORTED;
        snprintf(out->why, sizeof out->why,
                 "no usable engine config (%d from heuristics, %d filtered by numerical notes, %d "
                 "failed to finalize); last reason: %s%s%s",
                 (int)n_cfgs, (int)filtered, (int)rejected, last_why[0] ? last_why : "none",
                 heur_why[0] ? "; heuristics: " : "", heur_why);
        return DLT_OK;
    }
    out->supported = 1;
    out->plan = cands[chosen].plan;
    out->workspace = cands[chosen].workspace;
    out->engine = cands[chosen].engine;
    if (!tl_handle)
        dlt__log(DLT_LOG_INFO, "dlt: cuDNN plan for %s: engine %lld, workspace %lld bytes", b->what,
                 (long long)out->engine, (long long)out->workspace);
    return DLT_OK;
}

void dlt__cudnn_set_thread_handle(cudnnHandle_t h) { tl_handle = h; }

void dlt__cudnn_note_builds(dlt_ctx *ctx, int kind, int64_t n, double seconds) {
    dlt_cuda_plan_cache *c = dlt__cu(ctx)->plans;
    if (!c || kind < 0 || kind > 1) return;
    c->built[kind] += n;
    c->build_s[kind] += seconds;
}

double dlt__cudnn_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Times each build: where a context's first step spends its time (logged when the context
 * is destroyed, see cache_free). */
dlt_status dlt__cudnn_build_plan(dlt_cudnn_builder *b, const cudnnBackendDescriptor_t *ops,
                                 int32_t n_ops, const int64_t *uids, int32_t n_uids,
                                 const dlt_cudnn_plan_opts *opts, dlt_cudnn_plan *out) {
    const double t0 = dlt__cudnn_now_s();
    dlt_status st = build_plan(b, ops, n_ops, uids, n_uids, opts, out);
    dlt_cuda_plan_cache *c = dlt__cu(b->ctx)->plans;
    if (c && !tl_handle) {
        const int kind = strstr(b->func, "conv") ? 0 : 1;
        c->built[kind]++;
        c->build_s[kind] += dlt__cudnn_now_s() - t0;
    }
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Execution
 * ------------------------------------------------------------------------------------- */
static dlt_status exec_fail(dlt_ctx *ctx, cudnnStatus_t s, const char *func, const char *what,
                            const char *call) {
    char buf[600];
    snprintf(buf, sizeof buf, "%s: %s", what, call);
    return dlt__cudnn_fail(ctx, s, func, buf);
}

dlt_status dlt__cudnn_execute(dlt_ctx *ctx, dlt_cudnn_plan *p, void *const *ptrs, void *ws,
                              const char *func, const char *what) {
    dlt_cuda_state *cs = dlt__cu(ctx);
    if (!p->supported || !p->plan) return dlt__cudnn_plan_error(p, func, what);
    int same = p->vpack && p->vp_ws == ws &&
               memcmp(p->vp_ptrs, ptrs, (size_t)p->n_uids * sizeof(void *)) == 0;
    if (!same) {
        if (p->vpack) {
            cudnnBackendDestroyDescriptor(p->vpack);
            p->vpack = NULL;
        }
        cudnnBackendDescriptor_t vp = NULL;
        cudnnStatus_t s = make_pack(p->uids, p->n_uids, ptrs, ws, &vp);
        if (s != CUDNN_STATUS_SUCCESS) return exec_fail(ctx, s, func, what, "variant pack");
        p->vpack = vp;
        memcpy(p->vp_ptrs, ptrs, (size_t)p->n_uids * sizeof(void *));
        p->vp_ws = ws;
    }
    cudnnStatus_t s = cudnnBackendExecute(cs->cudnn, p->plan, p->vpack);
    if (s != CUDNN_STATUS_SUCCESS) return exec_fail(ctx, s, func, what, "cudnnBackendExecute");
    /* launch errors of cuDNN's own kernels are reported through its status; a runtime error
     * left over from its internals must not surface at our next launch check */
    (void)cudaGetLastError();
    return DLT_OK;
}

dlt_status dlt__cudnn_plan_error(const dlt_cudnn_plan *p, const char *func, const char *what) {
    dlt_status code = ((int)p->why_status / 1000 == 3) ? DLT_ERR_NOT_SUPPORTED : DLT_ERR_CUDNN;
    return dlt__err(code, func, "%s: no cuDNN execution plan: %s", what, p->why);
}
