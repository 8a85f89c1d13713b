/*
 * attention_flash.cu - scaled dot-product attention on tensor cores for f16/bf16, the
 * algorithm of FlashAttention-2 (Dao, 2023): tiles of queries and keys in shared memory,
 * mma.sync m16n8k16 with fp32 accumulation, online softmax, no T x S matrix in memory.
 * Same contract as the reference kernels of attention.cu (lib/kernel/nd.h dlt_sdpa_params):
 * q [B,H,T,D], k, v [B,H,S,D], o like q, lse f32 [B,H,T] = m + log l of each query row, so
 * a forward of one path and a backward of the other mix; causal is top-left (key j visible
 * to query i iff j <= i); dropout keeps weight (b,h,i,j) iff Philox element
 * ((b*H+h)*T+i)*S+j at offset + *base is >= p and scales it by 1/(1-p); the normaliser l
 * counts the weights before dropout (PyTorch). Deterministic: no atomics. The packed
 * layouts of dlt_scaled_dot_product_attention_qkvpacked (p.qkv_packed: q, k, v and their
 * gradients rows of [B,T,3,H,D], o and dO rows of [B,T,H,D]) are read and written in place
 * through per-tensor batch, head and row strides (flash_layout), no unpacking copies.
 *
 * Tiles: a block is 4 warps; each warp owns 16 rows of a 64-row tile (queries in the
 * forward and dq kernels, keys in the dk/dv kernel). The head dim is padded to DP = 64 or
 * 128 in shared memory (zeros past D; D a multiple of 16), rows padded by 8 elements so the
 * 32-bit fragment loads of a warp hit 32 distinct banks.
 *   forward  per key tile of 64: S = Q K^T (16x64 per warp, registers), scale and mask,
 *            m_new = max(m, rowmax S), P = exp(S - m_new), l = l exp(m - m_new) + rowsum P,
 *            O = O exp(m - m_new) + (P * Z) V; at the end o = O / l, lse = m + log l.
 *            Shared: K and V tiles, 2 x 64 x (DP+8) x 2 bytes (Q passes through them once
 *            on its way to registers).
 *   backward delta_i = dO_i . O_i (attention.cu's reference kernel), then
 *            dq kernel   per 64 queries, loop over key tiles: P = exp(scale Q K^T - lse),
 *                        dP = dO V^T, dS = P (dP Z - delta), dQ += dS K; dQ *= scale.
 *                        Shared: Q, dO, K, V tiles, 4 x 64 x (DP+8) x 2 bytes.
 *            dk/dv kernel per 64 keys, loop over query tiles of 32 (registers: two
 *                        16 x DP accumulators per warp): the same P, dP, dS transposed,
 *                        dV += (P Z)^T dO, dK += dS^T Q; dK *= scale. Shared: K, V
 *                        (64 rows), Q, dO (32 rows), lse and delta of the query tile.
 *            P and dS are rounded to the input dtype before their products (FlashAttention's
 *            choice); every sum is fp32.
 * Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane =
 * 4 g + t: A (16x16, row) regs a0..a3 hold (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..),
 * (g+8, 2t+8..); B (16x8, col) b0, b1 hold (k 2t..2t+1, n g), (k 2t+8.., n g); C/D (16x8
 * f32) c0, c1 = (g, 2t..2t+1), c2, c3 = (g+8, 2t..2t+1). A C tile pair (n-blocks 2c, 2c+1)
 * is therefore the A fragment of k-chunk c: P feeds the next product from registers.
 *
 * The kernel bodies need sm_80 (bf16 mma): compiled empty below it, and the launcher runs
 * them only where the code the driver chose was compiled for sm_80+ (dlt__cuda_flash_sdp_ok).
 * On by default (dlt_ctx_set_flash_sdp) since its first H200 run (2026-12-02: the op table
 * against the CPU, memcheck and racecheck clean; scripts/device/gpu_check.sh's `flash`).
 */
#include <string.h>

#include "../lib/kernel/philox.h"
#include "attention_flash.h"
#include "common.cuh"

using namespace dlt;

namespace {

constexpr int NT = 128;  /* threads per block: 4 warps */
constexpr int BR = 64;   /* rows of a block's own tile (queries; keys in dk/dv) */
constexpr int BC = 64;   /* rows of the tiles the forward and dq kernels loop over (keys) */
constexpr int BQ = 32;   /* query rows per step of the dk/dv kernel */
constexpr int PAD = 8;   /* row padding in shared memory, elements */
static_assert(BR <= BC, "the forward kernel stages its Q tile in a K buffer");
/* blocks per SM the register allocation must allow: three at DP 64 (<= 170 registers, no
 * spills; the dq kernel took 232 and so ran two), what fits at DP 128 */
template <int DP> constexpr int MIN_BLOCKS = DP == 64 ? 3 : 1;

/* Where the rows of head (b, h) lie: element (b, h, row, d) at b sb + h sh + row sr + d,
 * for q and dq, for k, v, dk and dv, and for o and dO. Contiguous [B,H,T,D] tensors and the
 * packed qkv / o of dlt_scaled_dot_product_attention_qkvpacked ([B,T,3,H,D], [B,T,H,D]),
 * which the kernels then read and write in place, without unpacking copies. */
struct flash_layout {
    int64_t sb, sh, sr;
};
struct flash_layouts {
    flash_layout q, kv, o;
};

/* Device code exists for sm_80+ only: the helpers and the kernel bodies (empty below). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define DLT_FLASH_BODY 1
#endif

#ifdef DLT_FLASH_BODY

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    uint32_t r;
    memcpy(&r, &h, 4);
    return r;
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    uint32_t r;
    memcpy(&r, &h, 4);
    return r;
}

/* c += a b for one 16x8 tile */
template <typename T> __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Fragment loads from shared memory (16-bit elements as raw bits, leading dimension ld,
 * even; lane = 4 g + t). "row": the operand's rows are the smem rows (32-bit loads of two
 * neighbours); "col": stored transposed (two 16-bit loads). */
__device__ __forceinline__ uint32_t ld32(const uint16_t *p) { return *(const uint32_t *)p; }
__device__ __forceinline__ uint32_t ld2x16(const uint16_t *lo, const uint16_t *hi) {
    return (uint32_t)*lo | ((uint32_t)*hi << 16);
}
/* A[r][k] = s[r ld + k], the 16x16 tile at (r0, k0) */
__device__ __forceinline__ void lda_row(uint32_t (&a)[4], const uint16_t *s, int ld, int r0, int k0, int lane) {
    const uint16_t *p = s + (r0 + (lane >> 2)) * ld + k0 + 2 * (lane & 3);
    a[0] = ld32(p);
    a[1] = ld32(p + 8 * ld);
    a[2] = ld32(p + 8);
    a[3] = ld32(p + 8 * ld + 8);
}
/* B[k][n] = s[n ld + k] (each n a stored row: K in Q K^T), the 16x8 tile at (k0, n0) */
__device__ __forceinline__ void ldb_row(uint32_t &b0, uint32_t &b1, const uint16_t *s, int ld, int k0, int n0,
                                        int lane) {
    const uint16_t *p = s + (n0 + (lane >> 2)) * ld + k0 + 2 * (lane & 3);
    b0 = ld32(p);
    b1 = ld32(p + 8);
}
/* B[k][n] = s[k ld + n] (each k a stored row: V in P V) */
__device__ __forceinline__ void ldb_col(uint32_t &b0, uint32_t &b1, const uint16_t *s, int ld, int k0, int n0,
                                        int lane) {
    const uint16_t *p = s + (k0 + 2 * (lane & 3)) * ld + n0 + (lane >> 2);
    b0 = ld2x16(p, p + ld);
    b1 = ld2x16(p + 8 * ld, p + 9 * ld);
}
/* The A fragment of k-chunk c from accumulator n-blocks 2c, 2c+1 (see the layouts above) */
template <typename T>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
    a[0] = pack2<T>(c0[0], c0[1]);
    a[1] = pack2<T>(c0[2], c0[3]);
    a[2] = pack2<T>(c1[0], c1[1]);
    a[3] = pack2<T>(c1[2], c1[3]);
}

/* rows x DP elements into s (leading dimension DP + PAD) from rows row0.. of g (rows sr
 * elements apart, D used, nrows rows): 16-byte asynchronous copies, zeros past nrows and
 * past D (D and sr multiples of 8); in flight until cp_async_wait, visible to the block
 * after the __syncthreads after it */
template <int DP>
__device__ __forceinline__ void load_tile_async(uint16_t *s, const uint16_t *g, int64_t row0, int rows,
                                                int64_t nrows, int D, int64_t sr) {
    constexpr int CH = DP / 8;
    for (int c = threadIdx.x; c < rows * CH; c += NT) {
        const int r = c / CH, d = (c % CH) * 8;
        const bool valid = row0 + r < nrows && d < D;
        cp_async16(s + r * (DP + PAD) + d, valid ? g + (row0 + r) * sr + d : g, valid);
    }
}

/* the first element of head (b, h) = bh in a layout */
__device__ __forceinline__ int64_t head_at(const flash_layout &l, const dlt_sdpa_params &p, int64_t bh) {
    const int64_t b = bh / p.H;
    return b * l.sb + (bh - b * p.H) * l.sh;
}

/* the dropout multiplier of weight (i, j) of head bh (the reference's numbering) */
__device__ __forceinline__ float zmul(const dlt_sdpa_params &p, uint64_t off, int64_t bh, int64_t i, int64_t j,
                                      float keep_scale) {
    const uint64_t e = (uint64_t)((bh * p.T + i) * p.S + j);
    return dlt__philox_uniform(p.seed, off, e) >= (float)p.dropout_p ? keep_scale : 0.0f;
}

/* The dropout multipliers z[e] of a lane's four C-fragment weights, e = 2 r + c: query row
 * ri[r], key column j + c (j = the lane's first column, even). With S % 4 == 0 a row starts
 * on a Philox block and the columns of lanes t and t^1 fill one block: the even lane
 * computes row 0's block, the odd lane row 1's, and each hands its partner the two words
 * it needs, one Philox per lane where zmul would run four. All 32 lanes must call it. */
__device__ __forceinline__ void zmul_rows(const dlt_sdpa_params &p, uint64_t off, int64_t bh, const int64_t ri[2],
                                          int64_t j, int t, float keep_scale, float z[4]) {
    if ((p.S & 3) != 0) {
#pragma unroll
        for (int e = 0; e < 4; e++) z[e] = zmul(p, off, bh, ri[e >> 1], j + (e & 1), keep_scale);
        return;
    }
    const bool odd = (t & 1) != 0;
    const int64_t i = odd ? ri[1] : ri[0], jb = j & ~(int64_t)3;
    const dlt_philox_out o = dlt__philox(p.seed, off + (uint64_t)((bh * p.T + i) * p.S + jb) / 4);
    const uint32_t mine0 = odd ? o.v[2] : o.v[0], mine1 = odd ? o.v[3] : o.v[1];
    const uint32_t got0 = __shfl_xor_sync(0xffffffffu, odd ? o.v[0] : o.v[2], 1);
    const uint32_t got1 = __shfl_xor_sync(0xffffffffu, odd ? o.v[1] : o.v[3], 1);
    const uint32_t w[4] = {odd ? got0 : mine0, odd ? got1 : mine1, odd ? mine0 : got0, odd ? mine1 : got1};
#pragma unroll
    for (int e = 0; e < 4; e++) z[e] = dlt__u32_to_unit(w[e]) >= (float)p.dropout_p ? keep_scale : 0.0f;
}

/* The same for the dk/dv kernel's transposed fragment: slot e = 2 r + c is key row rj[r],
 * query column i + c. The keys of lanes 4g + t with g = 4a .. 4a+3 fill one block for a
 * query, so the lane's four weights lie in four blocks (one per slot): lane q = g % 4
 * computes slot q's block and the four lanes swap words, a 4 x 4 transpose by shuffles
 * over lanes 4, 8 and 12 apart. All 32 lanes must call it. */
__device__ __forceinline__ void zmul_cols(const dlt_sdpa_params &p, uint64_t off, int64_t bh, int64_t i,
                                          const int64_t rj[2], int lane, float keep_scale, float z[4]) {
    if ((p.S & 3) != 0) {
#pragma unroll
        for (int e = 0; e < 4; e++) z[e] = zmul(p, off, bh, i + (e & 1), rj[e >> 1], keep_scale);
        return;
    }
    const uint32_t q = (uint32_t)(lane >> 2) & 3u;
    const int64_t jb = ((q >> 1) ? rj[1] : rj[0]) - (int64_t)q; /* the block's first key */
    const dlt_philox_out o = dlt__philox(p.seed, off + (uint64_t)((bh * p.T + i + (q & 1)) * p.S + jb) / 4);
    /* round d sends word q^d of my block to the lane whose q is q^d: r.v[d] is slot q^d */
    dlt_philox_out r;
    r.v[0] = dlt__philox_word(&o, q);
    r.v[1] = __shfl_xor_sync(0xffffffffu, dlt__philox_word(&o, q ^ 1u), 4);
    r.v[2] = __shfl_xor_sync(0xffffffffu, dlt__philox_word(&o, q ^ 2u), 8);
    r.v[3] = __shfl_xor_sync(0xffffffffu, dlt__philox_word(&o, q ^ 3u), 12);
#pragma unroll
    for (int e = 0; e < 4; e++)
        z[e] = dlt__u32_to_unit(dlt__philox_word(&r, q ^ (uint32_t)e)) >= (float)p.dropout_p ? keep_scale : 0.0f;
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
#endif /* DLT_FLASH_BODY */

/* the tiles a kernel loops over are double-buffered: two stages */
template <int DP> constexpr size_t fwd_smem() { return (size_t)2 * 2 * BC * (DP + PAD) * 2; }
template <int DP> constexpr size_t dq_smem() { return (size_t)(2 * BR + 2 * 2 * BC) * (DP + PAD) * 2; }
template <int DP> constexpr size_t dkv_smem() {
    return (size_t)(2 * BR + 2 * 2 * BQ) * (DP + PAD) * 2 + 2 * 2 * BQ * 4;
}

/* grid: one block per (b*H+h, 64-query tile), heaviest causal tiles first */
template <typename T, int DP>
__global__ void __launch_bounds__(NT, MIN_BLOCKS<DP>) flash_fwd_kernel(T *o, float *lse, const T *q, const T *k, const T *v,
                                                       dlt_sdpa_params p, flash_layouts L, const uint64_t *base,
                                                       float keep_scale) {
#ifdef DLT_FLASH_BODY
    extern __shared__ uint4 smem[];
    constexpr int LD = DP + PAD, KC = DP / 16, DN = DP / 8, NB = BC / 8;
    /* two stages, each a K tile then a V tile (pointer arithmetic, not a pointer array: a
     * run-time index into a local array would live in local memory) */
    uint16_t *const s0 = (uint16_t *)smem;
    constexpr int STAGE = 2 * BC * LD;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
    const int64_t nqt = (p.T + BR - 1) / BR;
    const int64_t bh = blockIdx.x / nqt, q0 = (nqt - 1 - blockIdx.x % nqt) * BR;
    const int D = (int)p.D;
    const float scale = (float)p.scale;
    const bool drop = p.dropout_p > 0.0;
    const uint64_t off = p.offset + (drop ? *base : 0);
    const uint16_t *qg = (const uint16_t *)q + head_at(L.q, p, bh), *kg = (const uint16_t *)k + head_at(L.kv, p, bh),
                   *vg = (const uint16_t *)v + head_at(L.kv, p, bh);
    const int64_t kend = p.causal ? (q0 + BR < p.S ? q0 + BR : p.S) : p.S; /* keys j < kend */

    /* Q through stage 1's K buffer into registers, beside the first key tile's copies */
    load_tile_async<DP>(s0 + STAGE, qg, q0, BR, p.T, D, L.q.sr);
    load_tile_async<DP>(s0, kg, 0, BC, p.S, D, L.kv.sr);
    load_tile_async<DP>(s0 + BC * LD, vg, 0, BC, p.S, D, L.kv.sr);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[KC][4];
#pragma unroll
    for (int kc = 0; kc < KC; kc++) lda_row(qf[kc], s0 + STAGE, LD, warp * 16, kc * 16, lane);
    __syncthreads(); /* stage 1 takes the second key tile next */

    int64_t ri[2];
    ri[0] = q0 + warp * 16 + (lane >> 2);
    ri[1] = ri[0] + 8;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[DN][4];
#pragma unroll
    for (int dn = 0; dn < DN; dn++) acc[dn][0] = acc[dn][1] = acc[dn][2] = acc[dn][3] = 0.0f;
    for (int64_t j0 = 0, it = 0; j0 < kend; j0 += BC, it++) {
        /* the next tile's copies fly while this one is used */
        if (j0 + BC < kend) {
            uint16_t *nk = s0 + ((it + 1) & 1) * STAGE;
            load_tile_async<DP>(nk, kg, j0 + BC, BC, p.S, D, L.kv.sr);
            load_tile_async<DP>(nk + BC * LD, vg, j0 + BC, BC, p.S, D, L.kv.sr);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const uint16_t *sK = s0 + (it & 1) * STAGE, *sV = sK + BC * LD;
        /* masks only where a key can be past S or after a query (causal) */
        const bool edge = j0 + BC > p.S || (p.causal && j0 + BC - 1 > q0);
        float s[NB][4];
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
            for (int kc = 0; kc < KC; kc++) {
                uint32_t b0, b1;
                ldb_row(b0, b1, sK, LD, kc * 16, nb * 8, lane);
                mma<T>(s[nb], qf[kc], b0, b1);
            }
        }
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                const int64_t j = j0 + nb * 8 + 2 * t + (e & 1);
                const float x = (edge && (j >= p.S || (p.causal && j > ri[r]))) ? -INFINITY : s[nb][e] * scale;
                s[nb][e] = x;
                mx[r] = fmaxf(mx[r], x);
            }
        float corr[2], mb[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = quad_max(mx[r]);
            /* a row with no visible key yet keeps everything at zero (no inf - inf) */
            corr[r] = mx[r] == -INFINITY ? 1.0f : expf(m[r] - mx[r]);
            mb[r] = mx[r] == -INFINITY ? 0.0f : mx[r];
            m[r] = mx[r];
        }
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            float z[4] = {1.0f, 1.0f, 1.0f, 1.0f};
            if (drop) zmul_rows(p, off, bh, ri, j0 + nb * 8 + 2 * t, t, keep_scale, z);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                float pv = expf(s[nb][e] - mb[r]);
                rs[r] += pv;
                if (drop) {
                    const int64_t j = j0 + nb * 8 + 2 * t + (e & 1);
                    pv = (ri[r] < p.T && j < p.S) ? pv * z[e] : 0.0f;
                }
                s[nb][e] = pv;
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + rs[r]; /* per-lane part; summed at the end */
#pragma unroll
        for (int dn = 0; dn < DN; dn++) {
            acc[dn][0] *= corr[0], acc[dn][1] *= corr[0];
            acc[dn][2] *= corr[1], acc[dn][3] *= corr[1];
        }
#pragma unroll
        for (int kc = 0; kc < BC / 16; kc++) {
            uint32_t a[4];
            acc_to_a<T>(a, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
            for (int dn = 0; dn < DN; dn++) {
                uint32_t b0, b1;
                ldb_col(b0, b1, sV, LD, kc * 16, dn * 8, lane);
                mma<T>(acc[dn], a, b0, b1);
            }
        }
        __syncthreads(); /* the next tile overwrites sK, sV */
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float lt = quad_sum(l[r]);
        if (ri[r] >= p.T) continue;
        const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
        uint32_t *orow = (uint32_t *)((uint16_t *)o + head_at(L.o, p, bh) + ri[r] * L.o.sr);
#pragma unroll
        for (int dn = 0; dn < DN; dn++) {
            const int d = dn * 8 + 2 * t;
            if (d < D) orow[d / 2] = pack2<T>(acc[dn][2 * r] * inv, acc[dn][2 * r + 1] * inv);
        }
        if (t == 0) lse[bh * p.T + ri[r]] = m[r] + logf(lt);
    }
#else
    (void)o, (void)lse, (void)q, (void)k, (void)v, (void)p, (void)L, (void)base, (void)keep_scale;
#endif
}

/* grid: one block per (b*H+h, 64-query tile) */
template <typename T, int DP>
__global__ void __launch_bounds__(NT, MIN_BLOCKS<DP>) flash_dq_kernel(T *dq, const T *dout, const T *q, const T *k, const T *v,
                                                      const float *lse, const float *delta, dlt_sdpa_params p,
                                                      flash_layouts L, const uint64_t *base, float keep_scale) {
#ifdef DLT_FLASH_BODY
    extern __shared__ uint4 smem[];
    constexpr int LD = DP + PAD, KC = DP / 16, DN = DP / 8, NB = BC / 8;
    /* Q, dO, then two stages of a K tile and a V tile */
    uint16_t *sQ = (uint16_t *)smem, *sO = sQ + BR * LD, *s0 = sO + BR * LD;
    constexpr int STAGE = 2 * BC * LD;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
    const int64_t nqt = (p.T + BR - 1) / BR;
    const int64_t bh = blockIdx.x / nqt, q0 = (nqt - 1 - blockIdx.x % nqt) * BR;
    const int D = (int)p.D;
    const float scale = (float)p.scale;
    const bool drop = p.dropout_p > 0.0;
    const uint64_t off = p.offset + (drop ? *base : 0);
    const uint16_t *kg = (const uint16_t *)k + head_at(L.kv, p, bh), *vg = (const uint16_t *)v + head_at(L.kv, p, bh);
    load_tile_async<DP>(sQ, (const uint16_t *)q + head_at(L.q, p, bh), q0, BR, p.T, D, L.q.sr);
    load_tile_async<DP>(sO, (const uint16_t *)dout + head_at(L.o, p, bh), q0, BR, p.T, D, L.o.sr);
    load_tile_async<DP>(s0, kg, 0, BC, p.S, D, L.kv.sr);
    load_tile_async<DP>(s0 + BC * LD, vg, 0, BC, p.S, D, L.kv.sr);
    cp_async_commit();

    int64_t ri[2];
    ri[0] = q0 + warp * 16 + (lane >> 2);
    ri[1] = ri[0] + 8;
    float ls[2], dl[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        ls[r] = ri[r] < p.T ? lse[bh * p.T + ri[r]] : 0.0f;
        dl[r] = ri[r] < p.T ? delta[bh * p.T + ri[r]] : 0.0f;
    }
    float g[DN][4];
#pragma unroll
    for (int dn = 0; dn < DN; dn++) g[dn][0] = g[dn][1] = g[dn][2] = g[dn][3] = 0.0f;
    const int64_t kend = p.causal ? (q0 + BR < p.S ? q0 + BR : p.S) : p.S;
    for (int64_t j0 = 0, it = 0; j0 < kend; j0 += BC, it++) {
        if (j0 + BC < kend) {
            uint16_t *nk = s0 + ((it + 1) & 1) * STAGE;
            load_tile_async<DP>(nk, kg, j0 + BC, BC, p.S, D, L.kv.sr);
            load_tile_async<DP>(nk + BC * LD, vg, j0 + BC, BC, p.S, D, L.kv.sr);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* (the first pass also publishes sQ, sO) */
        const uint16_t *sK = s0 + (it & 1) * STAGE, *sV = sK + BC * LD;
        const bool edge = j0 + BC > p.S || q0 + BR > p.T || (p.causal && j0 + BC - 1 > q0);
        float s[NB][4], dp[NB][4];
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nb][e] = dp[nb][e] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KC; kc++) {
            uint32_t aq[4], ao[4];
            lda_row(aq, sQ, LD, warp * 16, kc * 16, lane);
            lda_row(ao, sO, LD, warp * 16, kc * 16, lane);
#pragma unroll
            for (int nb = 0; nb < NB; nb++) {
                uint32_t b0, b1;
                ldb_row(b0, b1, sK, LD, kc * 16, nb * 8, lane);
                mma<T>(s[nb], aq, b0, b1);
                ldb_row(b0, b1, sV, LD, kc * 16, nb * 8, lane);
                mma<T>(dp[nb], ao, b0, b1);
            }
        }
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            float zz[4] = {1.0f, 1.0f, 1.0f, 1.0f};
            if (drop) zmul_rows(p, off, bh, ri, j0 + nb * 8 + 2 * t, t, keep_scale, zz);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                const int64_t j = j0 + nb * 8 + 2 * t + (e & 1);
                const bool vis = !edge || (ri[r] < p.T && j < p.S && !(p.causal && j > ri[r]));
                const float pv = vis ? expf(s[nb][e] * scale - ls[r]) : 0.0f;
                const float z = (drop && vis) ? zz[e] : 1.0f;
                s[nb][e] = pv * (dp[nb][e] * z - dl[r]); /* dS */
            }
        }
#pragma unroll
        for (int kc = 0; kc < BC / 16; kc++) {
            uint32_t a[4];
            acc_to_a<T>(a, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
            for (int dn = 0; dn < DN; dn++) {
                uint32_t b0, b1;
                ldb_col(b0, b1, sK, LD, kc * 16, dn * 8, lane);
                mma<T>(g[dn], a, b0, b1);
            }
        }
        __syncthreads();
    }
    cp_async_wait<0>(); /* nothing in flight at exit (no key tile) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (ri[r] >= p.T) continue;
        uint32_t *row = (uint32_t *)((uint16_t *)dq + head_at(L.q, p, bh) + ri[r] * L.q.sr);
#pragma unroll
        for (int dn = 0; dn < DN; dn++) {
            const int d = dn * 8 + 2 * t;
            if (d < D) row[d / 2] = pack2<T>(g[dn][2 * r] * scale, g[dn][2 * r + 1] * scale);
        }
    }
#else
    (void)dq, (void)dout, (void)q, (void)k, (void)v, (void)lse, (void)delta, (void)p, (void)L, (void)base,
        (void)keep_scale;
#endif
}

/* grid: one block per (b*H+h, 64-key tile); rows of the warp's accumulators are keys */
template <typename T, int DP>
__global__ void __launch_bounds__(NT, MIN_BLOCKS<DP>) flash_dkv_kernel(T *dk, T *dv, const T *dout, const T *q, const T *k,
                                                       const T *v, const float *lse, const float *delta,
                                                       dlt_sdpa_params p, flash_layouts L, const uint64_t *base,
                                                       float keep_scale) {
#ifdef DLT_FLASH_BODY
    extern __shared__ uint4 smem[];
    constexpr int LD = DP + PAD, KC = DP / 16, DN = DP / 8, NB = BQ / 8;
    /* K, V, then two stages of a Q tile and a dO tile; then the stages' lse and delta */
    uint16_t *sK = (uint16_t *)smem, *sV = sK + BR * LD, *s0 = sV + BR * LD;
    constexpr int STAGE = 2 * BQ * LD;
    float *sL0 = (float *)(s0 + 2 * STAGE); /* stage x: lse at sL0 + 2 x BQ, delta BQ after */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
    const int64_t nkt = (p.S + BR - 1) / BR;
    const int64_t bh = blockIdx.x / nkt, j0 = (blockIdx.x % nkt) * BR; /* low j0 first: most work when causal */
    const int D = (int)p.D;
    const float scale = (float)p.scale;
    const bool drop = p.dropout_p > 0.0;
    const uint64_t off = p.offset + (drop ? *base : 0);
    const uint16_t *qg = (const uint16_t *)q + head_at(L.q, p, bh), *og = (const uint16_t *)dout + head_at(L.o, p, bh);
    load_tile_async<DP>(sK, (const uint16_t *)k + head_at(L.kv, p, bh), j0, BR, p.S, D, L.kv.sr);
    load_tile_async<DP>(sV, (const uint16_t *)v + head_at(L.kv, p, bh), j0, BR, p.S, D, L.kv.sr);
    cp_async_commit();

    int64_t rj[2];
    rj[0] = j0 + warp * 16 + (lane >> 2);
    rj[1] = rj[0] + 8;
    float gk[DN][4], gv[DN][4];
#pragma unroll
    for (int dn = 0; dn < DN; dn++)
#pragma unroll
        for (int e = 0; e < 4; e++) gk[dn][e] = gv[dn][e] = 0.0f;
    /* causal: queries i >= j0 only; a key past the last query gets zero gradients */
    const int64_t i_first = p.causal ? (j0 / BQ) * BQ : 0;
    /* stage x of query tile i0: Q, dO copies in flight, lse and delta stored */
    auto load_q = [&](int x, int64_t i0) {
        uint16_t *sq = s0 + x * STAGE;
        load_tile_async<DP>(sq, qg, i0, BQ, p.T, D, L.q.sr);
        load_tile_async<DP>(sq + BQ * LD, og, i0, BQ, p.T, D, L.o.sr);
        cp_async_commit();
        if (threadIdx.x < BQ) {
            const int64_t i = i0 + threadIdx.x;
            sL0[2 * x * BQ + threadIdx.x] = i < p.T ? lse[bh * p.T + i] : 0.0f;
            sL0[2 * x * BQ + BQ + threadIdx.x] = i < p.T ? delta[bh * p.T + i] : 0.0f;
        }
    };
    if (i_first < p.T) load_q(0, i_first);
    for (int64_t i0 = i_first, it = 0; i0 < p.T; i0 += BQ, it++) {
        if (i0 + BQ < p.T) {
            load_q((int)((it + 1) & 1), i0 + BQ);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* (the first pass also publishes sK, sV) */
        const int x = (int)(it & 1);
        const uint16_t *sQ = s0 + x * STAGE, *sO = sQ + BQ * LD;
        const float *sL = sL0 + 2 * x * BQ, *sD = sL + BQ;
        const bool edge = i0 + BQ > p.T || j0 + BR > p.S || (p.causal && j0 + BR - 1 > i0);
        float s[NB][4], dp[NB][4]; /* S^T and dP^T: 16 keys x BQ queries */
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nb][e] = dp[nb][e] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KC; kc++) {
            uint32_t ak[4], av[4];
            lda_row(ak, sK, LD, warp * 16, kc * 16, lane);
            lda_row(av, sV, LD, warp * 16, kc * 16, lane);
#pragma unroll
            for (int nb = 0; nb < NB; nb++) {
                uint32_t b0, b1;
                ldb_row(b0, b1, sQ, LD, kc * 16, nb * 8, lane);
                mma<T>(s[nb], ak, b0, b1);
                ldb_row(b0, b1, sO, LD, kc * 16, nb * 8, lane);
                mma<T>(dp[nb], av, b0, b1);
            }
        }
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            float zz[4] = {1.0f, 1.0f, 1.0f, 1.0f};
            if (drop) zmul_cols(p, off, bh, i0 + nb * 8 + 2 * t, rj, lane, keep_scale, zz);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, c = nb * 8 + 2 * t + (e & 1);
                const int64_t i = i0 + c, j = rj[r];
                const bool vis = !edge || (i < p.T && j < p.S && !(p.causal && j > i));
                const float pv = vis ? expf(s[nb][e] * scale - sL[c]) : 0.0f;
                const float z = (drop && vis) ? zz[e] : 1.0f;
                s[nb][e] = pv * (dp[nb][e] * z - sD[c]); /* dS^T */
                dp[nb][e] = pv * z;                      /* (P Z)^T */
            }
        }
#pragma unroll
        for (int kc = 0; kc < BQ / 16; kc++) {
            uint32_t ap[4], as[4];
            acc_to_a<T>(ap, dp[2 * kc], dp[2 * kc + 1]);
            acc_to_a<T>(as, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
            for (int dn = 0; dn < DN; dn++) {
                uint32_t b0, b1;
                ldb_col(b0, b1, sO, LD, kc * 16, dn * 8, lane);
                mma<T>(gv[dn], ap, b0, b1);
                ldb_col(b0, b1, sQ, LD, kc * 16, dn * 8, lane);
                mma<T>(gk[dn], as, b0, b1);
            }
        }
        __syncthreads(); /* the tile after next overwrites this stage */
    }
    cp_async_wait<0>(); /* nothing in flight at exit (no query tile: K, V unused) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (rj[r] >= p.S) continue;
        uint32_t *rk = (uint32_t *)((uint16_t *)dk + head_at(L.kv, p, bh) + rj[r] * L.kv.sr);
        uint32_t *rv = (uint32_t *)((uint16_t *)dv + head_at(L.kv, p, bh) + rj[r] * L.kv.sr);
#pragma unroll
        for (int dn = 0; dn < DN; dn++) {
            const int d = dn * 8 + 2 * t;
            if (d < D) {
                rk[d / 2] = pack2<T>(gk[dn][2 * r] * scale, gk[dn][2 * r + 1] * scale);
                rv[d / 2] = pack2<T>(gv[dn][2 * r], gv[dn][2 * r + 1]);
            }
        }
    }
#else
    (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)lse, (void)delta, (void)p, (void)L,
        (void)base, (void)keep_scale;
#endif
}

float keep_scale_of(const dlt_sdpa_params *p) { return p->dropout_p < 1.0 ? (float)(1.0 / (1.0 - p->dropout_p)) : 0.0f; }

/* The layouts of a call: contiguous heads, or with p->qkv_packed rows of [B,T,3,H,D] for
 * q/k/v (and their gradients) and of [B,T,H,D] for o and dO. */
flash_layouts layouts_of(const dlt_sdpa_params *p) {
    flash_layouts L;
    if (p->qkv_packed) {
        const int64_t C = p->H * p->D;
        L.q = {p->T * 3 * C, p->D, 3 * C};
        L.kv = L.q;
        L.o = {p->T * C, p->D, C};
    } else {
        L.q = {p->H * p->T * p->D, p->T * p->D, p->D};
        L.kv = {p->H * p->S * p->D, p->S * p->D, p->D};
        L.o = L.q;
    }
    return L;
}

/* The data of head tensor `part` (0 q, 1 k, 2 v): t's, or its part of a packed qkv. */
const void *part_of(const dlt_sdpa_params *p, const dlt_tensor *t, int part) {
    return (const char *)dlt__data(t) + (size_t)dlt__sdpa_part_offset(p, part) * dlt__dtype_size(t->dtype);
}

/* Calls the body with DP (the padded head dim) and T (the element type) as constants. */
#define DLT_FLASH_DISPATCH(dtype, D, ...)                                                     \
    do {                                                                                      \
        if ((dtype) == DLT_F16) {                                                             \
            typedef __half T;                                                                 \
            if ((D) <= 64) { constexpr int DP = 64; __VA_ARGS__; }                            \
            else { constexpr int DP = 128; __VA_ARGS__; }                                     \
        } else {                                                                              \
            typedef __nv_bfloat16 T;                                                          \
            if ((D) <= 64) { constexpr int DP = 64; __VA_ARGS__; }                            \
            else { constexpr int DP = 128; __VA_ARGS__; }                                     \
        }                                                                                     \
    } while (0)

/* Dynamic shared memory above 48 KB needs the kernel's opt-in (set on every launch, as
 * FlashAttention does: cheap, host-side, allowed during graph capture). */
template <typename K> dlt_status smem_opt_in(dlt_ctx *ctx, K *kernel, size_t bytes, const char *F) {
    if (bytes > 48 * 1024)
        DLT_CU(ctx, cudaFuncSetAttribute((const void *)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), F);
    return DLT_OK;
}

} // namespace

extern "C" {

int dlt__cuda_flash_sdp_ok(dlt_ctx *ctx, int32_t dtype, const dlt_sdpa_params *p, const void *const *ptrs,
                           int n_ptrs) {
    if (!ctx->flash_sdp) return 0;
    if (dtype != DLT_F16 && dtype != DLT_BF16) return 0;
    if (p->D <= 0 || p->D > 128 || p->D % 16 != 0) return 0;
    for (int i = 0; i < n_ptrs; i++)
        if (((uintptr_t)ptrs[i] & 15) != 0) return 0;
    /* one block per (head, 64-row tile): the grid's x limit */
    const int64_t tiles = (p->T > p->S ? p->T : p->S) / BR + 1;
    if (p->B * p->H > (int64_t)INT32_MAX / tiles) return 0;
    dlt_cuda_state *s = dlt__cu(ctx);
    if (s->flash_arch == 0) {
        /* the virtual architecture of the code the driver runs for this device: sm_75 code
         * (a cubin, or PTX compiled for compute_75) has the bodies compiled out */
        cudaFuncAttributes a;
        memset(&a, 0, sizeof a);
        const cudaError_t e = cudaFuncGetAttributes(&a, (const void *)flash_fwd_kernel<__half, 64>);
        if (e != cudaSuccess) (void)cudaGetLastError();
        s->flash_arch = (e == cudaSuccess && a.ptxVersion >= 80) ? 1 : -1;
    }
    return s->flash_arch > 0;
}

dlt_status dlt__cuda_flash_sdp_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *q,
                                   const dlt_tensor *k, const dlt_tensor *v, const dlt_sdpa_params *p) {
    static const char *F = "dlt_scaled_dot_product_attention";
    const unsigned grid = (unsigned)(p->B * p->H * ((p->T + BR - 1) / BR));
    const flash_layouts L = layouts_of(p);
    const uint64_t *base = (const uint64_t *)ctx->rng_base;
    const float ks = keep_scale_of(p);
    cudaStream_t st = dlt__stream(ctx);
    DLT_FLASH_DISPATCH(q->dtype, p->D, {
        constexpr size_t sm = fwd_smem<DP>();
        DLT_CHECK(smem_opt_in(ctx, flash_fwd_kernel<T, DP>, sm, F));
        flash_fwd_kernel<T, DP><<<grid, NT, sm, st>>>((T *)dlt__data(o), (float *)dlt__data(lse),
                                                      (const T *)part_of(p, q, 0), (const T *)part_of(p, k, 1),
                                                      (const T *)part_of(p, v, 2), *p, L, base, ks);
    });
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

dlt_status dlt__cuda_flash_sdp_bwd(dlt_ctx *ctx, dlt_tensor *dq, dlt_tensor *dk, dlt_tensor *dv,
                                   const dlt_tensor *dout, const dlt_tensor *q, const dlt_tensor *k,
                                   const dlt_tensor *v, const dlt_tensor *lse, const float *delta,
                                   const dlt_sdpa_params *p) {
    static const char *F = "dlt_backward(scaled_dot_product_attention)";
    const unsigned grid_q = (unsigned)(p->B * p->H * ((p->T + BR - 1) / BR));
    const unsigned grid_k = (unsigned)(p->B * p->H * ((p->S + BR - 1) / BR));
    const flash_layouts L = layouts_of(p);
    const uint64_t *base = (const uint64_t *)ctx->rng_base;
    const float ks = keep_scale_of(p);
    cudaStream_t st = dlt__stream(ctx);
    DLT_FLASH_DISPATCH(q->dtype, p->D, {
        constexpr size_t smq = dq_smem<DP>(), smk = dkv_smem<DP>();
        DLT_CHECK(smem_opt_in(ctx, flash_dq_kernel<T, DP>, smq, F));
        DLT_CHECK(smem_opt_in(ctx, flash_dkv_kernel<T, DP>, smk, F));
        flash_dq_kernel<T, DP><<<grid_q, NT, smq, st>>>(
            (T *)part_of(p, dq, 0), (const T *)dlt__data(dout), (const T *)part_of(p, q, 0),
            (const T *)part_of(p, k, 1), (const T *)part_of(p, v, 2), (const float *)dlt__data(lse), delta, *p, L,
            base, ks);
        DLT_CU_LAUNCHED(ctx, F);
        flash_dkv_kernel<T, DP><<<grid_k, NT, smk, st>>>(
            (T *)part_of(p, dk, 1), (T *)part_of(p, dv, 2), (const T *)dlt__data(dout), (const T *)part_of(p, q, 0),
            (const T *)part_of(p, k, 1), (const T *)part_of(p, v, 2), (const float *)dlt__data(lse), delta, *p, L,
            base, ks);
    });
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

} // extern "C"
