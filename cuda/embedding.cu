/*
 * embedding.cu - CUDA embedding (lib/ops/embedding.c).
 *   forward   the row read at its index: one thread per 16 bytes of output when rows are
 *             whole 16-byte vectors and the pointers aligned (one index load and a 32-bit
 *             division per vector; one thread per element, with a 64-bit division each,
 *             gathered 16384 rows of 768 f32 at ~1.4 TB/s on an H200), else one thread per
 *             element; an index outside [0, V) cannot be reported without a host sync, so
 *             its row is NaN (the loss then is NaN, as cross-entropy does with a bad target);
 *   backward  deterministic whatever the mode: the indices are sorted with their positions
 *             (CUB radix sort, stable, so equal indices keep position order), then each run
 *             of equal indices v adds its gradient rows into dW[v] in f32, rounded once: a
 *             run of at most 16 rows adds dW's old value (0 when beta is 0: the memset
 *             before) then the rows in sorted order; a longer one sums rows w, w + 8, ...
 *             for w = 0..7 and adds the old value then the eight sums in order. No
 *             atomics: the same bits every run, whichever kernel:
 *               vector  where most runs are short (n <= 16 V: GPT-2) and rows are whole
 *                       16-byte vectors at aligned addresses: a block per 32 sorted positions
 *                       (their keys and positions read at once) and 32 vectors per row, 16
 *                       bytes per lane; GPT-2's 16384 x 768 f32 took 121 us on an H200 with
 *                       the scalar kernel (4 bytes per lane behind a chain of dependent loads
 *                       per position, ~3x its 150 MB's time at bandwidth);
 *               scalar  any D, pointer or dW dtype, and mostly long runs (Shakespeare's,
 *                       whose measured speed it keeps): a block per run and 32-column tiles.
 *             padding_idx and out-of-range indices are skipped.
 * The sort's buffers come from the context's scratch (sized in warm-up before a capture).
 */
#include <cub/device/device_radix_sort.cuh>

#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

template <typename T, typename I>
__global__ void embedding_fwd_kernel(T *y, const T *w, const I *idx, int64_t n, int64_t V, int64_t D) {
    DLT_GRID_STRIDE(e, n * D) {
        const int64_t i = e / D, j = e - i * D;
        const int64_t v = (int64_t)idx[i];
        y[e] = (v >= 0 && v < V) ? w[v * D + j] : from_f<T>(NAN);
    }
}

/* nv = n * D / W vectors of W = 16 / sizeof(T) values, D a multiple of W, dv = D / W per
 * row: vector e is vector j of output row i. The same bits as embedding_fwd_kernel (a copy,
 * or NaN); 32-bit index math (the launcher keeps nv below 2^31). */
template <typename T, typename I>
__global__ void embedding_fwd_vec_kernel(uint4 *y, const uint4 *w, const I *idx, uint32_t nv, int64_t V, uint32_t dv) {
    Vec16<T> nan_row;
#pragma unroll
    for (int k = 0; k < Vec16<T>::N; k++) nan_row.v[k] = from_f<T>(NAN);
    for (uint32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < nv; e += gridDim.x * blockDim.x) {
        const uint32_t i = e / dv, j = e - i * dv;
        const int64_t v = (int64_t)idx[i];
        y[e] = (v >= 0 && v < V) ? w[v * dv + j] : nan_row.raw;
    }
}

template <typename I> __global__ void iota_keys_kernel(int64_t *keys, int32_t *pos, const I *idx, int64_t n, int64_t V) {
    DLT_GRID_STRIDE(i, n) {
        const int64_t v = (int64_t)idx[i];
        keys[i] = (v >= 0 && v < V) ? v : V; /* out of range sorts last and is skipped */
        pos[i] = (int32_t)i;
    }
}

/* ---- backward (tests/embedding_emu/run.sh cuts from here to the end of the namespace) ---- */

constexpr int EMB_WARPS = 8, EMB_SHORT = 16;

/* The end of the run of key v that holds sorted position s (keys[s] == v): gallop, then
 * bisect; a run of one reads one key. */
__device__ __forceinline__ int64_t run_end(const int64_t *keys, int64_t n, int64_t s, int64_t v) {
    int64_t step = 1;
    while (s + step < n && keys[s + step] == v) step <<= 1;
    int64_t lo = s + (step >> 1) + 1, hi = s + step < n ? s + step : n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid] == v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The scalar kernel: any D, any pointers, dW of any float dtype; the one for mostly long
 * runs (it is the one Shakespeare's step was measured with), and the fallback of the vector
 * kernel below.
 * A block per run of equal sorted indices and group of `tpb` 32-column tiles (blockIdx.y).
 * A short run (at most EMB_SHORT rows, GPT-2's words): warp w adds the run's rows in order
 * for tile w of the group on its own, no barrier. A long run (a 65-character vocabulary:
 * hundreds of rows): for each tile of the group, warp w adds rows w, w + 8, ... and warp 0
 * adds the eight partial sums in warp order. The order depends on the run's length only
 * (not on tpb): deterministic. tpb is EMB_WARPS where most runs are short, so that a word's
 * block has a tile per warp, and 1 where most are long, so that a run's tiles are spread
 * over blocks rather than taken one after another (bwd_tiles_per_block). Blocks stride over
 * sorted positions and skip those that do not start a run (block-uniform, as is the path,
 * so the barriers are safe). */
template <typename T>
__global__ void __launch_bounds__(EMB_WARPS * 32) embedding_bwd_kernel(void *dw, int tdw, const T *dy, const int64_t *keys,
                                                                    const int32_t *pos, int64_t n, int64_t V, int64_t D,
                                                                    int64_t padding_idx, int beta, int tpb) {
    __shared__ float part[EMB_WARPS][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t tiles = (D + 31) / 32;
    for (int64_t s = blockIdx.x; s < n; s += gridDim.x) {
        const int64_t v = keys[s];
        if (v >= V || v == padding_idx || (s > 0 && keys[s - 1] == v)) continue;
        const int64_t lo = run_end(keys, n, s, v);
        const bool shortrun = lo - s <= EMB_SHORT;
        for (int64_t g = (int64_t)blockIdx.y * tpb; g < tiles; g += (int64_t)gridDim.y * tpb) {
            if (shortrun) {
                const int64_t j = (g + warp) * 32 + lane;
                if (warp < tpb && j < D) {
                    float acc = beta ? ld_dt(dw, tdw, v * D + j) : 0.0f;
                    for (int64_t r = s; r < lo; r++) acc += to_f<T>(dy[(int64_t)pos[r] * D + j]);
                    st_dt(dw, tdw, v * D + j, acc);
                }
                continue;
            }
            for (int64_t t = g; t < g + tpb && t < tiles; t++) {
                const int64_t j = t * 32 + lane;
                float acc = 0.0f;
                if (j < D)
                    for (int64_t r = s + warp; r < lo; r += EMB_WARPS) acc += to_f<T>(dy[(int64_t)pos[r] * D + j]);
                part[warp][lane] = acc;
                __syncthreads();
                if (warp == 0 && j < D) {
                    float sum = beta ? ld_dt(dw, tdw, v * D + j) : 0.0f;
#pragma unroll
                    for (int w = 0; w < EMB_WARPS; w++) sum += part[w][lane];
                    st_dt(dw, tdw, v * D + j, sum);
                }
                __syncthreads(); /* part is rewritten next */
            }
        }
    }
}

/* The vector kernel: rows of nvec 16-byte vectors of W = 16 / sizeof(T) values, dy and dW
 * of type T, 16-byte aligned; where most runs are short (GPT-2). The scalar kernel moved 4
 * bytes per lane behind a chain of dependent loads (keys, the run's end, pos, dy) for each
 * sorted position: 121 us for GPT-2's 16384 x 768 f32 (H200), ~3x its bytes' time. Here a
 * block takes EMB_CHUNK sorted positions and a group of `g` slices of 32 vectors per row
 * (blockIdx.y): warp 0 reads the chunk's keys and positions at once (plus EMB_SHORT
 * positions after it: a short run that starts in the chunk ends within them) and lists the
 * runs that start in it (one that started before belongs to an earlier block); then
 *   short runs (<= EMB_SHORT rows): a warp per run and slice, lane l adds vector l of the
 *     slice: dW's old value (or 0.0f when beta is 0: the bits the memset left), then the
 *     rows in sorted order, EMB_BATCH rows loaded before they are added;
 *   long runs: per slice, the eight warps over the run's rows (warp w: w, w + 8, ... from
 *     0.0f; positions staged in shared memory 256 at a time), then warp 0 adds the old value
 *     and the eight sums in warp order;
 * element by element the additions and their order are the scalar kernel's (only which
 * thread does them and how elements are grouped into loads change): the same bits.
 * g (bwd_vec_group) gives the warps a task each when runs are long enough that a chunk holds
 * few (GPT-2's positions, 16 per row: two runs per chunk). EMB_BATCH 2 keeps the registers
 * at 32 (f32: eight blocks per SM) and 40 (f16/bf16: six): GPT-2's runs of one have two
 * 16-byte loads in flight per thread (old dW, the row), and occupancy hides their latency;
 * 3 or 4 took 40-48. */
constexpr int EMB_CHUNK = 32, EMB_BATCH = 2;
template <typename T>
__global__ void __launch_bounds__(EMB_WARPS * 32)
    embedding_bwd_vec_kernel(uint4 *dw, const uint4 *__restrict__ dy, const int64_t *__restrict__ keys,
                             const int32_t *__restrict__ pos, int64_t n, int64_t V, int64_t nvec, int64_t padding_idx,
                             int beta, int g) {
    constexpr int W = Vec16<T>::N;
    __shared__ int32_t sh_pos[EMB_CHUNK + EMB_SHORT];
    __shared__ int32_t sh_beg[EMB_CHUNK], sh_end[EMB_CHUNK]; /* short runs, then long ones */
    __shared__ int64_t sh_key[EMB_CHUNK];
    __shared__ int sh_ns, sh_nl;
    __shared__ int32_t sh_lpos[EMB_WARPS * 32];
    __shared__ float part[EMB_WARPS][W][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t base = (int64_t)blockIdx.x * EMB_CHUNK; /* < n: the grid has ceil(n / EMB_CHUNK) */
    if (warp == 0) {
        const int64_t i = base + lane;
        const bool in = i < n;
        const int64_t k = in ? keys[i] : -1;
        /* the key after the chunk, loaded with the others rather than after them */
        const int64_t next = base + EMB_CHUNK < n ? keys[base + EMB_CHUNK] : -1;
        int64_t prev = __shfl_up_sync(0xffffffffu, k, 1);
        if (lane == 0) prev = base > 0 ? keys[base - 1] : -1; /* keys are >= 0 */
        sh_pos[lane] = in ? pos[i] : 0;
        if (lane < EMB_SHORT) sh_pos[EMB_CHUNK + lane] = i + EMB_CHUNK < n ? pos[i + EMB_CHUNK] : 0;
        const bool starts = in && k != prev;
        const bool ok = starts && k < V && k != padding_idx; /* out of range sorted as V */
        const unsigned b = __ballot_sync(0xffffffffu, starts);
        const unsigned later = lane < 31 ? b & (0xffffffffu << (lane + 1)) : 0u;
        int64_t end = 0; /* a run ends where the next starts; the chunk's last may go on past it */
        if (ok) {
            if (later) end = base + __ffs(later) - 1;
            else if (base + EMB_CHUNK >= n) end = n;
            else if (next != k) end = base + EMB_CHUNK;
            else end = run_end(keys, n, base + EMB_CHUNK, k);
        }
        const bool shrt = ok && end - i <= EMB_SHORT;
        const unsigned ms = __ballot_sync(0xffffffffu, shrt), ml = __ballot_sync(0xffffffffu, ok && !shrt);
        const unsigned below = (1u << lane) - 1u;
        if (ok) {
            const int at = shrt ? __popc(ms & below) : __popc(ms) + __popc(ml & below);
            sh_beg[at] = (int32_t)i; /* n <= INT32_MAX (the launcher) */
            sh_end[at] = (int32_t)end;
            sh_key[at] = k;
        }
        if (lane == 0) sh_ns = __popc(ms), sh_nl = __popc(ml);
    }
    __syncthreads();
    const int ns = sh_ns, nl = sh_nl;
    const int64_t slices = (nvec + 31) / 32;
    /* the short runs' loop over slice groups, then the long runs' (one loop for both kept
     * more values live: 48 registers where each alone takes 32 (f32) or 40) */
    for (int64_t q0 = (int64_t)blockIdx.y * g; q0 < slices; q0 += (int64_t)gridDim.y * g) {
        const int gq = slices - q0 < g ? (int)(slices - q0) : g; /* slices in this group */
#pragma unroll 1
        for (int t = warp; t < ns * gq; t += EMB_WARPS) { /* task t: run t % ns, slice t / ns */
            const int run = t % ns;
            const int64_t c = (q0 + t / ns) * 32 + lane;
            if (c >= nvec) continue;
            const uint32_t s = (uint32_t)sh_beg[run], e = (uint32_t)sh_end[run]; /* r + 1 <= 2^31: no wrap */
            uint4 *out = dw + sh_key[run] * nvec + c;
            Vec16<T> o;
            float acc[W];
            if (beta) o.raw = *out;
#pragma unroll
            for (int k = 0; k < W; k++) acc[k] = beta ? to_f<T>(o.v[k]) : 0.0f;
#pragma unroll 1
            for (uint32_t r = s; r < e; r += EMB_BATCH) {
                Vec16<T> d[EMB_BATCH];
#pragma unroll
                for (int u = 0; u < EMB_BATCH; u++)
                    if (r + u < e) d[u].raw = __ldg(dy + (int64_t)sh_pos[r + u - (uint32_t)base] * nvec + c);
#pragma unroll
                for (int u = 0; u < EMB_BATCH; u++)
                    if (r + u < e)
#pragma unroll
                        for (int k = 0; k < W; k++) acc[k] += to_f<T>(d[u].v[k]);
            }
#pragma unroll
            for (int k = 0; k < W; k++) o.v[k] = from_f<T>(acc[k]);
            *out = o.raw;
        }
    }
    /* block-uniform (nl, gq, each run's rows): the barriers are safe */
    for (int64_t q0 = (int64_t)blockIdx.y * g; nl > 0 && q0 < slices; q0 += (int64_t)gridDim.y * g) {
        const int gq = slices - q0 < g ? (int)(slices - q0) : g;
        for (int t = ns; t < ns + nl; t++)
            for (int qq = 0; qq < gq; qq++) {
                const int64_t s = sh_beg[t], e = sh_end[t], c = (q0 + qq) * 32 + lane;
                const bool col = c < nvec;
                float acc[W];
#pragma unroll
                for (int k = 0; k < W; k++) acc[k] = 0.0f;
                for (int64_t r0 = s; r0 < e; r0 += EMB_WARPS * 32) { /* r0 - s: a multiple of 8 */
                    __syncthreads(); /* the last round's positions are read */
                    if (r0 + threadIdx.x < e) sh_lpos[threadIdx.x] = pos[r0 + threadIdx.x];
                    __syncthreads();
                    const int rows = e - r0 < EMB_WARPS * 32 ? (int)(e - r0) : EMB_WARPS * 32;
                    if (col)
#pragma unroll 1
                        for (int j = warp; j < rows; j += EMB_WARPS * EMB_BATCH) {
                            Vec16<T> d[EMB_BATCH];
#pragma unroll
                            for (int u = 0; u < EMB_BATCH; u++)
                                if (j + u * EMB_WARPS < rows)
                                    d[u].raw = __ldg(dy + (int64_t)sh_lpos[j + u * EMB_WARPS] * nvec + c);
#pragma unroll
                            for (int u = 0; u < EMB_BATCH; u++)
                                if (j + u * EMB_WARPS < rows)
#pragma unroll
                                    for (int k = 0; k < W; k++) acc[k] += to_f<T>(d[u].v[k]);
                        }
                }
#pragma unroll
                for (int k = 0; k < W; k++) part[warp][k][lane] = acc[k];
                __syncthreads();
                if (warp == 0 && col) {
                    uint4 *out = dw + sh_key[t] * nvec + c;
                    Vec16<T> o;
                    float sum[W];
                    if (beta) o.raw = *out;
#pragma unroll
                    for (int k = 0; k < W; k++) sum[k] = beta ? to_f<T>(o.v[k]) : 0.0f;
#pragma unroll
                    for (int w = 0; w < EMB_WARPS; w++)
#pragma unroll
                        for (int k = 0; k < W; k++) sum[k] += part[w][k][lane];
#pragma unroll
                    for (int k = 0; k < W; k++) o.v[k] = from_f<T>(sum[k]);
                    *out = o.raw;
                }
                __syncthreads(); /* part is rewritten next */
            }
    }
}

/* Tiles per block: 1 when the average run is long (more than EMB_SHORT indices per
 * vocabulary row: the 65-character vocabulary's runs of hundreds, whose tiles f6d5fb9
 * spread over blocks; 6b3b530 had one block take eight of them one after another, and the
 * Shakespeare iteration measured 6.98 ms after it against 6.70 before, the likely cause,
 * not yet measured apart), else a tile per warp (GPT-2's runs of one or a few). The latter
 * case is also the vector kernel's (bwd_vec_ok). */
static int bwd_tiles_per_block(int64_t n, int64_t V) { return n > (int64_t)EMB_SHORT * V ? 1 : EMB_WARPS; }

/* blocks over sorted positions (at most 4096: each strides over n / 4096 of them) times
 * groups of tpb 32-column tiles (at most 65535 groups: the kernel strides over the rest) */
static dim3 bwd_grid(int64_t n, int64_t D, int tpb) {
    const int64_t x = n < 4096 ? (n > 0 ? n : 1) : 4096, tiles = D > 0 ? (D + 31) / 32 : 1,
                  y = (tiles + tpb - 1) / tpb;
    return dim3((unsigned)x, (unsigned)(y < 65535 ? y : 65535));
}

/* The vector kernel serves where most runs are short (the scalar kernel keeps the long-run
 * case it was measured with), dy and dW share the dtype, and rows are whole 16-byte vectors
 * at 16-byte-aligned addresses (a view at an odd offset falls back). */
static bool bwd_vec_ok(int64_t n, int64_t V, int64_t D, int width, int32_t tdw, int32_t tdy, const void *dw,
                       const void *dy) {
    return n > 0 && D > 0 && bwd_tiles_per_block(n, V) == EMB_WARPS && tdw == tdy && vec16_ok(D, width, dw, dy);
}

/* Slices of 32 vectors per block of the vector kernel: enough that its eight warps have a
 * short-run task each if the indices are spread evenly (n / V per row: a chunk then holds
 * about EMB_CHUNK / (n / V) runs; GPT-2's positions, 16 per row: two), evened out over the
 * groups. Only the speed depends on it. */
static int bwd_vec_group(int64_t n, int64_t V, int64_t slices) {
    const int64_t per_row = V > 0 ? n / V : n, runs = per_row > 1 ? (EMB_CHUNK + per_row - 1) / per_row : EMB_CHUNK;
    int64_t g = (EMB_WARPS + runs - 1) / runs;
    if (g > slices) g = slices;
    const int64_t groups = (slices + g - 1) / g;
    return (int)((slices + groups - 1) / groups);
}

/* a block per EMB_CHUNK sorted positions (n <= INT32_MAX: at most 2^26) times a group of g
 * slices (at most 65535 groups: the kernel strides over the rest) */
static dim3 bwd_vec_grid(int64_t n, int64_t slices, int g) {
    const int64_t x = (n + EMB_CHUNK - 1) / EMB_CHUNK, y = (slices + g - 1) / g;
    return dim3((unsigned)x, (unsigned)(y < 65535 ? y : 65535));
}

} // namespace

extern "C" {

dlt_status dlt__cuda_embedding_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *w, const dlt_tensor *idx) {
    const int64_t n = idx->numel, V = w->shape[0], D = w->shape[1];
    cudaStream_t st = dlt__stream(ctx);
    DLT_CHECK(same_dtype("dlt_embedding", w->dtype, y));
    const bool i64 = idx->dtype == DLT_I64;
    DLT_DISPATCH_FLOAT(w->dtype, T, {
        const int wv = Vec16<T>::N;
        const int64_t nv = n * D / wv;
        /* below 2^31 vectors, the index plus the grid stride stays within 32 bits */
        if (vec16_ok(D, wv, dlt__data(y), dlt__data(w)) && nv < ((int64_t)1 << 31)) {
            uint4 *yp = (uint4 *)dlt__data(y);
            const uint4 *wp = (const uint4 *)dlt__data(w);
            if (i64)
                embedding_fwd_vec_kernel<T, int64_t><<<grid_for(nv, 256), 256, 0, st>>>(
                    yp, wp, (const int64_t *)dlt__data(idx), (uint32_t)nv, V, (uint32_t)(D / wv));
            else
                embedding_fwd_vec_kernel<T, int32_t><<<grid_for(nv, 256), 256, 0, st>>>(
                    yp, wp, (const int32_t *)dlt__data(idx), (uint32_t)nv, V, (uint32_t)(D / wv));
        } else if (i64) {
            embedding_fwd_kernel<T, int64_t><<<grid_for(n * D, 256), 256, 0, st>>>(
                (T *)dlt__data(y), (const T *)dlt__data(w), (const int64_t *)dlt__data(idx), n, V, D);
        } else {
            embedding_fwd_kernel<T, int32_t><<<grid_for(n * D, 256), 256, 0, st>>>(
                (T *)dlt__data(y), (const T *)dlt__data(w), (const int32_t *)dlt__data(idx), n, V, D);
        }
    });
    DLT_CU_LAUNCHED(ctx, "dlt_embedding");
    return DLT_OK;
}

dlt_status dlt__cuda_embedding_bwd(dlt_ctx *ctx, dlt_tensor *dw, const dlt_tensor *dy, const dlt_tensor *idx,
                                   int64_t padding_idx, int32_t beta) {
    static const char *F = "dlt_backward(embedding)";
    const int64_t n = idx->numel, V = dw->shape[0], D = dw->shape[1];
    if (n > INT32_MAX) return dlt__err(DLT_ERR_NOT_SUPPORTED, F, "more than 2^31 indices");
    cudaStream_t st = dlt__stream(ctx);
    /* scratch: keys in/out (int64), positions in/out (int32), then CUB's temporary space */
    int end_bit = 1;
    while (end_bit < 63 && ((int64_t)1 << end_bit) <= V) end_bit++; /* keys are in [0, V] */
    size_t temp = 0;
    DLT_CU(ctx, cub::DeviceRadixSort::SortPairs(nullptr, temp, (const int64_t *)nullptr, (int64_t *)nullptr,
                                                (const int32_t *)nullptr, (int32_t *)nullptr, (int)n, 0, end_bit, st),
           F);
    const size_t keys_b = ((size_t)n * 8 + 255) & ~(size_t)255, pos_b = ((size_t)n * 4 + 255) & ~(size_t)255;
    void *scratch = NULL;
    DLT_CHECK(dlt__cuda_scratch(ctx, 2 * keys_b + 2 * pos_b + temp, &scratch));
    char *p = (char *)scratch;
    int64_t *keys_in = (int64_t *)p, *keys_out = (int64_t *)(p + keys_b);
    int32_t *pos_in = (int32_t *)(p + 2 * keys_b), *pos_out = (int32_t *)(p + 2 * keys_b + pos_b);
    void *cub_temp = p + 2 * keys_b + 2 * pos_b;
    if (idx->dtype == DLT_I64)
        iota_keys_kernel<int64_t><<<grid_for(n, 256), 256, 0, st>>>(keys_in, pos_in, (const int64_t *)dlt__data(idx), n, V);
    else
        iota_keys_kernel<int32_t><<<grid_for(n, 256), 256, 0, st>>>(keys_in, pos_in, (const int32_t *)dlt__data(idx), n, V);
    DLT_CU_LAUNCHED(ctx, F);
    DLT_CU(ctx, cub::DeviceRadixSort::SortPairs(cub_temp, temp, keys_in, keys_out, pos_in, pos_out, (int)n, 0, end_bit, st),
           F);
    if (!beta) DLT_CU(ctx, cudaMemsetAsync(dlt__data(dw), 0, dlt__nbytes(dw), st), F);
    const int tpb = bwd_tiles_per_block(n, V);
    DLT_DISPATCH_FLOAT(dy->dtype, T, {
        const int wv = Vec16<T>::N;
        if (bwd_vec_ok(n, V, D, wv, dw->dtype, dy->dtype, dlt__data(dw), dlt__data(dy))) {
            const int64_t nvec = D / wv, slices = (nvec + 31) / 32;
            const int g = bwd_vec_group(n, V, slices);
            /* beta as given: with 0, the sums start from 0.0f, the bits the memset left */
            embedding_bwd_vec_kernel<T><<<bwd_vec_grid(n, slices, g), EMB_WARPS * 32, 0, st>>>(
                (uint4 *)dlt__data(dw), (const uint4 *)dlt__data(dy), keys_out, pos_out, n, V, nvec, padding_idx,
                beta, g);
        } else {
            embedding_bwd_kernel<T><<<bwd_grid(n, D, tpb), EMB_WARPS * 32, 0, st>>>(
                dlt__data(dw), dw->dtype, (const T *)dlt__data(dy), keys_out, pos_out, n, V, D, padding_idx, 1, tpb);
        }
    });
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

} // extern "C"
