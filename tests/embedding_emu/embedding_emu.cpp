// embedding_emu.cpp - cuda/embedding.cu's backward kernels run on the CPU by run.sh, without a
// GPU: a std::thread per CUDA thread (256 per block, blocks one after another), barriers for
// __syncthreads and the warp collectives, __shared__ as statics. For each case (dtype, V, D,
// index multiset, padding_idx, beta) it compares, bit for bit:
//   - what the launcher's choice runs (bwd_vec_ok: the vector kernel, or the scalar one),
//     the vector kernel forced (also where the launcher would not pick it, and with other
//     slice groupings and fewer blocks on y than groups, so that it strides), and
//   - the scalar kernel as it ran before the vector kernel came (the same launch: the
//     baseline whose bits must not change),
// against a host f32 sum in the documented order (runs of <= EMB_SHORT rows: the old value,
// then the rows in position order; longer runs: eight strided partial sums from 0.0f, added
// to the old value in order). dy holds values of mixed magnitudes and signed zeros, so
// another order of additions shows in the bits. Built with AddressSanitizer: an index past
// a buffer fails too. It cannot check timing or the real warp scheduler: cuda_op_table does
// that on a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "dltrain.h"

#undef __device__
#undef __forceinline__
#undef __global__
#undef __shared__
#define __device__
#define __forceinline__ inline
#define __global__
#define __shared__ static
#define __launch_bounds__(...)

struct Idx3 {
    unsigned x = 0, y = 0, z = 0;
};
static thread_local Idx3 threadIdx, blockIdx;
static Idx3 gridDim;
static std::barrier<> *block_bar;
static std::barrier<> *warp_bar[8];
static void __syncthreads() { block_bar->arrive_and_wait(); }

// the warp's lanes exchange 64-bit values through one array
static uint64_t xch[8][32];
template <typename V> static V warp_exchange(V v, int from) {
    static_assert(sizeof(V) <= 8, "64-bit exchanges only");
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    xch[w][l] = bits;
    warp_bar[w]->arrive_and_wait();
    V r;
    memcpy(&r, &xch[w][from], sizeof r);
    warp_bar[w]->arrive_and_wait();
    return r;
}
template <typename V> static V __shfl_up_sync(unsigned, V v, int d) {
    const int l = threadIdx.x & 31;
    return warp_exchange(v, l >= d ? l - d : l); // lanes below d keep their own value (PTX)
}
static unsigned __ballot_sync(unsigned, bool p) {
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    xch[w][l] = p;
    warp_bar[w]->arrive_and_wait();
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= (xch[w][i] ? 1u : 0u) << i;
    warp_bar[w]->arrive_and_wait();
    return r;
}
static int __ffs(unsigned x) { return __builtin_ffs((int)x); }
static int __popc(unsigned x) { return __builtin_popcount(x); }
template <typename P> static P __ldg(const P *p) { return *p; }

namespace dlt {
#include HELPERS /* to_f, from_f, Vec16, vec16_ok, ld_dt, st_dt: cut from cuda/common.cuh, nd.cuh */
} // namespace dlt
using namespace dlt;

namespace {
#include KERNELS /* the backward of cuda/embedding.cu, cut out by run.sh */
} // namespace

static constexpr int THREADS = EMB_WARPS * 32;

// Runs f as a kernel of THREADS threads per block over grid (blocks in order, one at a time).
template <typename F> static void launch(dim3 grid, F f) {
    gridDim.x = grid.x, gridDim.y = grid.y, gridDim.z = 1;
    std::barrier<> bb(THREADS);
    std::vector<std::unique_ptr<std::barrier<>>> wb;
    for (int w = 0; w < EMB_WARPS; w++) wb.emplace_back(new std::barrier<>(32)), warp_bar[w] = wb.back().get();
    block_bar = &bb;
    std::vector<std::thread> th;
    for (int i = 0; i < THREADS; i++)
        th.emplace_back([&, i] {
            threadIdx.x = i;
            for (unsigned y = 0; y < grid.y; y++)
                for (unsigned x = 0; x < grid.x; x++) {
                    blockIdx.x = x, blockIdx.y = y;
                    bb.arrive_and_wait(); // the last block's threads are done with its shared memory
                    f();
                }
        });
    for (auto &t : th) t.join();
}

template <typename T> struct Name;
template <> struct Name<float> { static constexpr const char *s = "f32"; static constexpr int dt = DLT_F32; };
template <> struct Name<__half> { static constexpr const char *s = "f16"; static constexpr int dt = DLT_F16; };
template <> struct Name<__nv_bfloat16> { static constexpr const char *s = "bf16"; static constexpr int dt = DLT_BF16; };

template <typename T> static uint32_t bits_of(T v) {
    uint32_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}

struct Case {
    const char *name;
    int64_t V, D;
    std::vector<int64_t> idx; // may hold out-of-range values (sorted as V, skipped)
    int64_t padding_idx;      // -1: none
    int beta;
};

static int failures = 0, checks = 0;

template <typename T> static void compare(const char *what, const Case &c, const std::vector<T> &got,
                                          const std::vector<T> &want) {
    checks++;
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < want.size(); i++)
        if (bits_of(got[i]) != bits_of(want[i])) {
            if (first < 0) first = (int64_t)i;
            bad++;
        }
    if (bad) {
        failures++;
        printf("FAIL %s %s: %s: %lld of %zu elements differ, first at row %lld col %lld: %08x, want %08x\n",
               Name<T>::s, c.name, what, (long long)bad, want.size(), (long long)(first / c.D),
               (long long)(first % c.D), bits_of(got[first]), bits_of(want[first]));
    }
}

template <typename T> static void run_case(const Case &c, std::mt19937_64 &rng) {
    const int64_t V = c.V, D = c.D, n = (int64_t)c.idx.size();
    const int wv = Vec16<T>::N;
    // dy: mixed magnitudes (2^-12 .. 2^12) and some signed zeros, so the order of additions shows
    std::vector<T> dy((size_t)(n * D) + 8), dw0((size_t)(V * D));
    std::uniform_real_distribution<double> U(-1, 1);
    std::uniform_int_distribution<int> E(-12, 12), Z(0, 15);
    for (auto &x : dy) {
        const int z = Z(rng);
        x = from_f<T>(z == 0 ? -0.0f : z == 1 ? 0.0f : (float)std::ldexp(U(rng), E(rng)));
    }
    for (auto &x : dw0) {
        const int z = Z(rng);
        x = from_f<T>(!c.beta ? 0.0f : z == 0 ? -0.0f : (float)std::ldexp(U(rng), E(rng)));
    }
    // keys and positions as iota_keys_kernel and CUB's stable radix sort leave them
    std::vector<int64_t> keys(n);
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; i++) keys[i] = c.idx[i] >= 0 && c.idx[i] < V ? c.idx[i] : V, pos[i] = (int32_t)i;
    std::stable_sort(pos.begin(), pos.end(), [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
    std::vector<int64_t> skeys(n);
    for (int64_t i = 0; i < n; i++) skeys[i] = keys[pos[i]];

    // the host reference: the order the kernels document
    std::vector<T> want = dw0;
    {
        std::vector<std::vector<int64_t>> rows((size_t)V);
        for (int64_t i = 0; i < n; i++)
            if (c.idx[i] >= 0 && c.idx[i] < V && c.idx[i] != c.padding_idx) rows[(size_t)c.idx[i]].push_back(i);
        for (int64_t v = 0; v < V; v++) {
            const auto &r = rows[(size_t)v];
            if (r.empty()) continue;
            for (int64_t j = 0; j < D; j++) {
                float acc = c.beta ? to_f<T>(dw0[(size_t)(v * D + j)]) : 0.0f;
                if ((int64_t)r.size() <= EMB_SHORT) {
                    for (int64_t p : r) acc += to_f<T>(dy[(size_t)(p * D + j)]);
                } else {
                    float part[EMB_WARPS] = {0};
                    for (size_t k = 0; k < r.size(); k++) part[k % EMB_WARPS] += to_f<T>(dy[(size_t)(r[k] * D + j)]);
                    for (int w = 0; w < EMB_WARPS; w++) acc += part[w];
                }
                want[(size_t)(v * D + j)] = from_f<T>(acc);
            }
        }
    }

    // the scalar kernel as launched before the vector kernel: memset, then beta = 1
    std::vector<T> old = dw0;
    const int tpb = bwd_tiles_per_block(n, V);
    launch(bwd_grid(n, D, tpb), [&] {
        embedding_bwd_kernel<T>(old.data(), Name<T>::dt, dy.data(), skeys.data(), pos.data(), n, V, D, c.padding_idx,
                                1, tpb);
    });
    compare("scalar kernel (the baseline) vs the host order", c, old, want);

    auto vec = [&](dim3 grid, int g, std::vector<T> &out, const T *dyp) {
        launch(grid, [&] {
            embedding_bwd_vec_kernel<T>((uint4 *)out.data(), (const uint4 *)dyp, skeys.data(), pos.data(), n, V,
                                        D / wv, c.padding_idx, c.beta, g);
        });
    };
    // the launcher's choice
    std::vector<T> chosen = dw0;
    const bool use_vec = bwd_vec_ok(n, V, D, wv, Name<T>::dt, Name<T>::dt, chosen.data(), dy.data());
    const int64_t nvec = D / wv, slices = (nvec + 31) / 32;
    if (use_vec) {
        const int g = bwd_vec_group(n, V, slices);
        vec(bwd_vec_grid(n, slices, g), g, chosen, dy.data());
    } else {
        launch(bwd_grid(n, D, tpb), [&] {
            embedding_bwd_kernel<T>(chosen.data(), Name<T>::dt, dy.data(), skeys.data(), pos.data(), n, V, D,
                                    c.padding_idx, 1, tpb);
        });
    }
    char what[160];
    snprintf(what, sizeof what, "launcher's choice (%s kernel)", use_vec ? "vector" : "scalar");
    compare(what, c, chosen, old);
    printf("%-4s %-58s n %5lld V %5lld D %4lld beta %d pad %3lld: %s kernel\n", Name<T>::s, c.name, (long long)n,
           (long long)V, (long long)D, c.beta, (long long)c.padding_idx, use_vec ? "vector" : "scalar");
    // dy at an address 16-byte vectors cannot read (a view at an odd offset): the scalar kernel
    if (n > 0 && bwd_vec_ok(n, V, D, wv, Name<T>::dt, Name<T>::dt, chosen.data(), dy.data() + 1)) {
        failures++;
        printf("FAIL %s %s: bwd_vec_ok accepts dy one element off its alignment\n", Name<T>::s, c.name);
    }
    if (n == 0 || D % wv) return;
    // the vector kernel forced: every slice grouping up to 3, and y-grids smaller than the groups
    for (int g = 1; g <= 3 && g <= slices; g++) {
        const int64_t groups = (slices + g - 1) / g;
        std::vector<int64_t> ys = {groups};
        for (int64_t gy = 1; gy <= 2 && gy < groups; gy++) ys.push_back(gy);
        for (int64_t gy : ys) {
            std::vector<T> forced = dw0;
            vec(dim3((unsigned)((n + EMB_CHUNK - 1) / EMB_CHUNK), (unsigned)gy), g, forced, dy.data());
            snprintf(what, sizeof what, "vector kernel, g %d, grid.y %lld of %lld groups", g, (long long)gy,
                     (long long)groups);
            compare(what, c, forced, old);
        }
    }
}

// idx: values 0.. with the given counts, in a random order of positions
static std::vector<int64_t> multiset(const std::vector<int64_t> &counts, std::mt19937_64 &rng,
                                     const std::vector<int64_t> &values = {}) {
    std::vector<int64_t> idx;
    for (size_t v = 0; v < counts.size(); v++)
        for (int64_t k = 0; k < counts[v]; k++) idx.push_back(values.empty() ? (int64_t)v : values[v]);
    std::shuffle(idx.begin(), idx.end(), rng);
    return idx;
}
static std::vector<int64_t> uniform(int64_t n, int64_t lo, int64_t hi, std::mt19937_64 &rng) {
    std::uniform_int_distribution<int64_t> U(lo, hi - 1);
    std::vector<int64_t> idx((size_t)n);
    for (auto &x : idx) x = U(rng);
    return idx;
}

int main() {
    std::mt19937_64 rng(20261203);
    std::vector<Case> cases;
    // GPT-2's word embedding in small: runs of one or two over 6 slices (f32), 3 (16-bit)
    cases.push_back({"words: runs of ~1, D 768", 5000, 768, uniform(700, 0, 5000, rng), -1, 1});
    cases.push_back({"words, beta 0", 5000, 768, uniform(300, 0, 5000, rng), -1, 0});
    // GPT-2's positions: every row 16 times (n = 16 V: the vector kernel, runs of exactly
    // EMB_SHORT), slices grouped
    {
        std::vector<int64_t> idx;
        for (int b = 0; b < 16; b++)
            for (int t = 0; t < 64; t++) idx.push_back(t);
        cases.push_back({"positions: 64 rows x 16, D 96", 64, 96, idx, -1, 1});
    }
    // runs of every length around EMB_SHORT and EMB_CHUNK, crossing chunks at many offsets
    cases.push_back({"runs of 1..40 and 300, D 64", 60, 64,
                     multiset({1, 16, 17, 2, 31, 33, 48, 15, 300, 1, 16, 17, 32, 64, 65, 3, 5, 8, 9, 40, 1, 1, 1, 2,
                               18, 34, 7, 6, 4, 12},
                              rng),
                     -1, 1});
    cases.push_back({"runs of 1..40 and 300, padding 8 (the 300), beta 0", 60, 40,
                     multiset({1, 16, 17, 2, 31, 33, 48, 15, 300, 1, 16, 17, 32, 64, 65, 3}, rng), 8, 0});
    // mixed short and long runs (n / V just under 16), padding on a short-run row
    cases.push_back({"uniform n/V 15.6, padding 3, D 136", 64, 136, uniform(1000, 0, 64, rng), 3, 1});
    // long runs of hundreds in the vector kernel (n <= 16 V, indices in a few rows): staged
    // positions over several rounds of 256
    cases.push_back({"3 of 64 rows hit ~330 times, D 40", 64, 40, uniform(1000, 0, 3, rng), -1, 1});
    // out-of-range indices (sorted as V, skipped) and the last row as padding
    {
        auto idx = uniform(500, 0, 100, rng);
        for (int i = 0; i < 40; i++) idx[(size_t)(i * 11)] = i % 2 ? -1 : 100 + i;
        cases.push_back({"out-of-range indices, padding 99, D 48", 100, 48, idx, 99, 1});
    }
    // mostly long runs (n > 16 V: the launcher keeps the scalar kernel, the vector one forced)
    cases.push_back({"Shakespeare-like: 5 rows, n 2000, D 72", 5, 72, uniform(2000, 0, 5, rng), -1, 1});
    // many slices (f32 8, bf16 4) and a partial last slice
    cases.push_back({"D 1032: 8/9 slices, the last partial", 300, 1032, uniform(200, 0, 300, rng), -1, 1});
    // D not a multiple of 4 (or 8): the scalar kernel
    cases.push_back({"D 130: scalar fallback", 400, 130, uniform(300, 0, 400, rng), -1, 1});
    cases.push_back({"D 12: vector in f32 only", 40, 12, uniform(300, 0, 40, rng), 5, 1});
    // tiny: fewer positions than a chunk, one position, a second chunk of one
    cases.push_back({"n 5, D 8", 9, 8, uniform(5, 0, 9, rng), -1, 1});
    cases.push_back({"n 1, D 8", 9, 8, {4}, -1, 1});
    cases.push_back({"n 33 (a chunk and one), D 16", 50, 16, uniform(33, 0, 50, rng), -1, 1});
    cases.push_back({"n 33, every index the same (a long run over two chunks)", 50, 16, std::vector<int64_t>(33, 7),
                     -1, 1});
    cases.push_back({"every index padding", 10, 16, std::vector<int64_t>(40, 2), 2, 1});
    for (const Case &c : cases) {
        run_case<float>(c, rng);
        run_case<__half>(c, rng);
        run_case<__nv_bfloat16>(c, rng);
    }
    printf("%s: %d comparisons, %d failed\n", failures ? "FAIL" : "ok", checks, failures);
    return failures ? 1 : 0;
}
