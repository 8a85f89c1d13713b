/*
 * splitmix.h - the tests' deterministic data: splitmix64 over a per-program state (each test
 * program is one .c file and gets its own copy); seed(s) restarts it, urand() gives a double
 * in [0, 1).
 */
#ifndef DLT_TEST_SPLITMIX_H
#define DLT_TEST_SPLITMIX_H

#include <stdint.h>

#include "harness.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static TH_UNUSED void seed(uint64_t s) { g_rng = s * 0x9e3779b97f4a7c15ull + 1; }
static TH_UNUSED double urand(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

#endif
