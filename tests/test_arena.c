/*
 * test_arena.c - the block placement behind whole-step graphs' memory (lib/core/arena.c),
 * compiled into this program on its own: exact offsets for small hand-worked sequences,
 * and random sequences checked against a brute-force model (no two live blocks overlap,
 * byte counts, the highest offset), plus the property cuda/graph.c relies on: the same
 * sequence, replayed with the limit set to the first run's highest offset, lands at the
 * same offsets and fits.
 */
#include <stdint.h>

#include "../lib/core/arena.h"
#include "harness.h"

#define K 256 /* the CUDA allocator's granularity */

static uint64_t place(dlt_arena *a, uint64_t size) {
    uint64_t off = UINT64_MAX;
    CHECK(dlt__arena_alloc(a, size, &off) == 0, "alloc %llu", (unsigned long long)size);
    return off;
}

static void test_sequential_then_reuse(void) {
    dlt_arena *a = dlt__arena_create(UINT64_MAX);
    REQUIRE(a);
    CHECK(place(a, 2 * K) == 0);
    CHECK(place(a, K) == 2 * K);
    CHECK(place(a, 4 * K) == 3 * K);
    CHECK(dlt__arena_high(a) == 7 * K);
    CHECK(dlt__arena_live(a) == 7 * K);
    /* a freed middle block is reused by a block that fits; a larger one goes on top */
    CHECK(dlt__arena_free(a, 2 * K, K) == 0);
    CHECK(place(a, 2 * K) == 7 * K);
    CHECK(place(a, K) == 2 * K);
    CHECK(dlt__arena_high(a) == 9 * K);
    CHECK(dlt__arena_live_peak(a) == 9 * K);
    dlt__arena_destroy(a);
}

static void test_best_fit_and_ties(void) {
    dlt_arena *a = dlt__arena_create(UINT64_MAX);
    REQUIRE(a);
    /* holes of 3K at 0, 1K at 4K, 2K at 6K, 1K at 9K (blocks between them stay) */
    const uint64_t sizes[] = {3 * K, K, K, K, 2 * K, K, K, K};
    uint64_t offs[8];
    for (int i = 0; i < 8; i++) offs[i] = place(a, sizes[i]);
    CHECK(offs[7] == 10 * K);
    CHECK(dlt__arena_free(a, offs[0], 3 * K) == 0);
    CHECK(dlt__arena_free(a, offs[2], K) == 0);
    CHECK(dlt__arena_free(a, offs[4], 2 * K) == 0);
    CHECK(dlt__arena_free(a, offs[6], K) == 0);
    CHECK(place(a, 2 * K) == 6 * K, "best fit: the 2K hole, not the first 3K one");
    CHECK(place(a, K) == 4 * K, "tie between 1K holes: the lowest offset");
    CHECK(place(a, K) == 9 * K);
    CHECK(place(a, K) == 0, "only the 3K hole is left");
    CHECK(place(a, 2 * K) == K, "the rest of it");
    CHECK(dlt__arena_high(a) == 11 * K, "nothing grew");
    dlt__arena_destroy(a);
}

static void test_merging_and_top(void) {
    dlt_arena *a = dlt__arena_create(UINT64_MAX);
    REQUIRE(a);
    for (int i = 0; i < 5; i++) CHECK(place(a, K) == (uint64_t)i * K);
    /* free 1, 3, then 2: one hole 1K..4K */
    CHECK(dlt__arena_free(a, K, K) == 0);
    CHECK(dlt__arena_free(a, 3 * K, K) == 0);
    CHECK(dlt__arena_free(a, 2 * K, K) == 0);
    CHECK(place(a, 3 * K) == K, "the three merged into one 3K hole");
    CHECK(dlt__arena_free(a, K, 3 * K) == 0);
    /* freeing the top block gives the top back, together with the hole below it */
    CHECK(dlt__arena_free(a, 4 * K, K) == 0);
    CHECK(place(a, 8 * K) == K, "grows from the free span that reaches the top");
    CHECK(dlt__arena_high(a) == 9 * K);
    CHECK(dlt__arena_live(a) == 9 * K);
    dlt__arena_destroy(a);
}

static void test_limit_and_bad_frees(void) {
    dlt_arena *a = dlt__arena_create(4 * K);
    REQUIRE(a);
    uint64_t off = 7;
    CHECK(dlt__arena_alloc(a, 5 * K, &off) == -1 && off == 7, "larger than the limit");
    CHECK(place(a, 3 * K) == 0);
    CHECK(dlt__arena_alloc(a, 2 * K, &off) == -1, "over the limit");
    CHECK(place(a, K) == 3 * K, "exactly up to the limit");
    CHECK(dlt__arena_alloc(a, 0, &off) == -1, "zero bytes");
    CHECK(dlt__arena_free(a, 4 * K, K) == -1, "beyond the used region");
    CHECK(dlt__arena_free(a, 3 * K, 2 * K) == -1, "runs past the used region");
    CHECK(dlt__arena_live(a) == 4 * K, "bad frees changed nothing");
    CHECK(dlt__arena_free_key(a, 12345) == -1, "unknown key");
    dlt__arena_destroy(a);
    CHECK(dlt__arena_alloc(NULL, K, &off) == -1);
    dlt__arena_destroy(NULL);
}

/* ---- random sequences against a brute-force model ---- */

typedef struct {
    uint64_t key, off, size;
} live_block;

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* Runs one random sequence (seeded) of alloc_key/free_key on `a`, checking the invariants
 * as it goes; writes the offsets placed, in order, to offs (n_ops entries, UINT64_MAX for
 * frees). Returns the number of failed placements. */
static int run_sequence(dlt_arena *a, uint64_t seed, int n_ops, uint64_t *offs) {
    live_block blocks[200];
    int n = 0, fails = 0;
    uint64_t s = seed, live = 0, peak = 0, top = 0;
    for (int op = 0; op < n_ops; op++) {
        offs[op] = UINT64_MAX;
        const int do_free = n == 200 || (n > 0 && lcg(&s) % 100 < 45);
        if (do_free) {
            const int i = (int)(lcg(&s) % (uint64_t)n);
            CHECK(dlt__arena_free_key(a, blocks[i].key) == 0);
            live -= blocks[i].size;
            blocks[i] = blocks[--n];
        } else {
            /* sizes like a network's: many small, some large */
            const uint64_t size = (lcg(&s) % 8 == 0 ? 1 + lcg(&s) % 4096 : 1 + lcg(&s) % 64) * K;
            const uint64_t key = 0x7f0000000000ULL + (uint64_t)op * 4096;
            uint64_t off;
            if (dlt__arena_alloc_key(a, key, size, &off) != 0) {
                fails++;
                continue;
            }
            for (int j = 0; j < n; j++)
                CHECK(off + size <= blocks[j].off || blocks[j].off + blocks[j].size <= off,
                      "op %d: [%llu,+%llu) overlaps a live block", op, (unsigned long long)off,
                      (unsigned long long)size);
            blocks[n].key = key;
            blocks[n].off = off;
            blocks[n].size = size;
            n++;
            live += size;
            if (live > peak) peak = live;
            if (off + size > top) top = off + size;
            offs[op] = off;
        }
        CHECK(dlt__arena_live(a) == live, "op %d", op);
    }
    CHECK(dlt__arena_live_peak(a) == peak);
    CHECK(dlt__arena_high(a) == top, "high %llu, model %llu", (unsigned long long)dlt__arena_high(a),
          (unsigned long long)top);
    CHECK(dlt__arena_high(a) >= peak);
    while (n > 0) CHECK(dlt__arena_free_key(a, blocks[--n].key) == 0);
    CHECK(dlt__arena_live(a) == 0);
    return fails;
}

static void test_random_sequences_replay(void) {
    enum { OPS = 3000 };
    static uint64_t first[OPS], second[OPS];
    double worst = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        dlt_arena *sizing = dlt__arena_create(UINT64_MAX);
        REQUIRE(sizing);
        CHECK(run_sequence(sizing, seed, OPS, first) == 0);
        const uint64_t high = dlt__arena_high(sizing);
        const double ratio = (double)high / (double)dlt__arena_live_peak(sizing);
        if (ratio > worst) worst = ratio;
        dlt__arena_destroy(sizing);
        /* the same sequence in a buffer of exactly that size: same offsets, nothing fails */
        dlt_arena *real = dlt__arena_create(high);
        REQUIRE(real);
        CHECK(run_sequence(real, seed, OPS, second) == 0, "seed %llu", (unsigned long long)seed);
        CHECK(memcmp(first, second, sizeof first) == 0, "seed %llu: offsets differ", (unsigned long long)seed);
        dlt__arena_destroy(real);
        /* one block less room: the sequence no longer fits */
        real = dlt__arena_create(high - K);
        REQUIRE(real);
        CHECK(run_sequence(real, seed, OPS, second) > 0, "seed %llu", (unsigned long long)seed);
        dlt__arena_destroy(real);
    }
    printf("# highest offset / most live at once, worst of 20 random sequences: %.3f\n", worst);
}

static void test_keys_reused(void) {
    dlt_arena *a = dlt__arena_create(UINT64_MAX);
    REQUIRE(a);
    uint64_t off = 0;
    /* the same device pointer comes back after a free; thousands of keys grow the map */
    for (int round = 0; round < 3; round++) {
        for (uint64_t k = 1; k <= 5000; k++) CHECK(dlt__arena_alloc_key(a, k * 512, K, &off) == 0);
        CHECK(dlt__arena_live(a) == 5000ULL * K);
        for (uint64_t k = 1; k <= 5000; k++) CHECK(dlt__arena_free_key(a, k * 512) == 0);
        CHECK(dlt__arena_free_key(a, 512) == -1, "freed twice");
        CHECK(dlt__arena_live(a) == 0);
    }
    CHECK(dlt__arena_high(a) == 5000ULL * K);
    dlt__arena_destroy(a);
}

int main(void) {
    RUN(test_sequential_then_reuse);
    RUN(test_best_fit_and_ties);
    RUN(test_merging_and_top);
    RUN(test_limit_and_bad_frees);
    RUN(test_random_sequences_replay);
    RUN(test_keys_reused);
    return th_done();
}
