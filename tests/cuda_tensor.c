/*
 * cuda_tensor.c - CUDA tensor basics against the CPU backend: host <-> device copies and
 * copies between devices/contexts (byte checks), dtype casts bit-identical to the CPU
 * (every f16 and bf16 bit pattern, a million random f32 patterns, integer edge values),
 * memory-format conversion, fills, Philox random fills (uniform bit-identical, normal within
 * 1e-6), element reads, memory statistics (allocated/peak/reserved/count, reset, trimming)
 * and an out-of-memory refusal that leaves the context usable.
 *
 * The CPU backend is the reference: both sides get the same input bytes and their output
 * bytes are compared. NaN results only need to be NaN on both sides (the payload of a
 * converted NaN is not part of the contract: the CPU produces 0x7e00-style quiet NaNs,
 * CUDA's intrinsics may produce 0x7fff). Every case skips without a CUDA device.
 */
#include <stdint.h>

#include "harness.h"

static dlt_ctx *g_cpu, *g_cuda;
static char g_no_cuda[256];

#define NEED_CUDA()                                                                           \
    do {                                                                                      \
        if (!g_cuda) SKIP("%s", g_no_cuda);                                                   \
    } while (0)

static const int32_t ALL_DTYPES[6] = {DLT_F32, DLT_F16, DLT_BF16, DLT_I32, DLT_I64, DLT_U8};

/* ---- helpers ---- */

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint64_t rnd64(void) { /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("# out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* Raw bytes of a tensor (memory order); the caller frees. */
static void *read_bytes(const dlt_tensor *t) {
    size_t n = dlt_tensor_nbytes(t);
    void *p = xmalloc(n);
    dlt_status s = dlt_tensor_copy_to_host(t, p, n);
    if (s != DLT_OK) {
        printf("# read_bytes: %s\n", dlt_last_error());
        free(p);
        return NULL;
    }
    return p;
}

static int is_nan_bits(const unsigned char *p, int32_t dtype) {
    uint32_t u32;
    uint16_t u16;
    switch (dtype) {
    case DLT_F32: memcpy(&u32, p, 4); return (u32 & 0x7fffffffu) > 0x7f800000u;
    case DLT_F16: memcpy(&u16, p, 2); return (u16 & 0x7fffu) > 0x7c00u;
    case DLT_BF16: memcpy(&u16, p, 2); return (u16 & 0x7fffu) > 0x7f80u;
    default: return 0;
    }
}

/* Number of elements whose bytes differ (NaN == NaN whatever the payload). *nan_payload
 * (may be NULL) counts NaN pairs whose bits differ; *first receives the first bad index. */
static int64_t count_diff(const void *a, const void *b, int64_t n, int32_t dtype, int64_t *nan_payload,
                          int64_t *first) {
    const size_t es = dlt_dtype_size(dtype);
    const unsigned char *pa = a, *pb = b;
    int64_t bad = 0, nanp = 0;
    if (first) *first = -1;
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *ea = pa + (size_t)i * es, *eb = pb + (size_t)i * es;
        if (memcmp(ea, eb, es) == 0) continue;
        if (is_nan_bits(ea, dtype) && is_nan_bits(eb, dtype)) {
            nanp++;
            continue;
        }
        if (first && *first < 0) *first = i;
        bad++;
    }
    if (nan_payload) *nan_payload = nanp;
    return bad;
}

/* Element i of a raw buffer as hex, for messages. */
static unsigned long long elem_bits(const void *p, int64_t i, int32_t dtype) {
    const size_t es = dlt_dtype_size(dtype);
    unsigned long long v = 0;
    memcpy(&v, (const unsigned char *)p + (size_t)i * es, es); /* little-endian */
    return v;
}

/* The same bytes as a tensor on the CPU and on the CUDA context. */
static void make_pair(int32_t dtype, const int64_t *shape, int32_t ndim, int32_t format, const void *bytes,
                      size_t nbytes, dlt_tensor **cpu, dlt_tensor **cuda) {
    *cpu = *cuda = NULL;
    CHECK_OK(dlt_tensor_from_host(g_cpu, dtype, shape, ndim, format, bytes, nbytes, cpu));
    CHECK_OK(dlt_tensor_from_host(g_cuda, dtype, shape, ndim, format, bytes, nbytes, cuda));
}

/* Casts the pair to `to` on both devices and compares the result bytes. Returns the number
 * of mismatches (NaN payloads excluded). */
static int64_t cast_and_compare(const dlt_tensor *cpu, const dlt_tensor *cuda, int32_t to, const char *what) {
    dlt_tensor *a = NULL, *b = NULL;
    CHECK_OK(dlt_tensor_cast(cpu, to, &a));
    CHECK_OK(dlt_tensor_cast(cuda, to, &b));
    void *pa = read_bytes(a), *pb = read_bytes(b);
    int64_t bad = -1, first = -1, nanp = 0;
    if (pa && pb) {
        bad = count_diff(pa, pb, dlt_tensor_numel(a), to, &nanp, &first);
        CHECK(bad == 0, "%s %s->%s: %lld of %lld elements differ; first at %lld: cpu %llx cuda %llx", what,
              dlt_dtype_name(dlt_tensor_dtype(cpu)), dlt_dtype_name(to), (long long)bad,
              (long long)dlt_tensor_numel(a), (long long)first, first >= 0 ? elem_bits(pa, first, to) : 0ull,
              first >= 0 ? elem_bits(pb, first, to) : 0ull);
        if (nanp) printf("# %s %s->%s: %lld NaN results differ only in payload\n", what,
                         dlt_dtype_name(dlt_tensor_dtype(cpu)), dlt_dtype_name(to), (long long)nanp);
    } else {
        CHECK(0, "could not read the cast results back");
    }
    free(pa);
    free(pb);
    dlt_tensor_release(a);
    dlt_tensor_release(b);
    return bad;
}

/* ---- copies ---- */

static void test_copy_host_device(void) {
    NEED_CUDA();
    int64_t shape[4] = {3, 5, 7, 9};
    const int64_t n = 3 * 5 * 7 * 9;
    for (int d = 0; d < 6; d++) {
        const int32_t dt = ALL_DTYPES[d];
        const size_t nb = (size_t)n * dlt_dtype_size(dt);
        unsigned char *src = xmalloc(nb), *back = xmalloc(nb);
        for (size_t i = 0; i < nb; i++) src[i] = (unsigned char)rnd64(); /* any bits: copies are raw */
        memset(back, 0xA5, nb);
        dlt_tensor *t = NULL;
        CHECK_OK(dlt_tensor_from_host(g_cuda, dt, shape, 4, DLT_FORMAT_CONTIGUOUS, src, nb, &t));
        CHECK(dlt_tensor_device_type(t) == DLT_DEVICE_CUDA && dlt_tensor_ctx(t) == g_cuda);
        CHECK_OK(dlt_tensor_copy_to_host(t, back, nb));
        CHECK(memcmp(src, back, nb) == 0, "%s: host -> device -> host changed bytes", dlt_dtype_name(dt));
        /* overwrite in place, read again */
        for (size_t i = 0; i < nb; i++) src[i] = (unsigned char)(src[i] ^ 0x5a);
        CHECK_OK(dlt_tensor_copy_from_host(t, src, nb));
        CHECK_OK(dlt_tensor_copy_to_host(t, back, nb));
        CHECK(memcmp(src, back, nb) == 0, "%s: copy_from_host", dlt_dtype_name(dt));
        CHECK_STATUS(dlt_tensor_copy_to_host(t, back, nb - 1), DLT_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(dlt_tensor_copy_from_host(t, src, nb + 1), DLT_ERR_INVALID_ARGUMENT);
        free(src);
        free(back);
        dlt_tensor_release(t);
    }
}

static void test_copy_between_contexts(void) {
    NEED_CUDA();
    dlt_ctx *other = NULL;
    CHECK_OK(dlt_ctx_create(DLT_DEVICE_CUDA, 0, DLT_ABI_VERSION, &other));
    int64_t shape[4] = {2, 3, 5, 4};
    const int64_t n = 120;
    float v[120];
    for (int i = 0; i < n; i++) v[i] = (float)i * 0.25f - 7.0f;
    dlt_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL, *h = NULL, *e = NULL;
    CHECK_OK(dlt_tensor_from_host(g_cuda, DLT_F32, shape, 4, DLT_FORMAT_CONTIGUOUS, v, sizeof v, &a));
    /* device -> device on another context (same format) */
    CHECK_OK(dlt_tensor_to_ctx(a, other, &b));
    CHECK(dlt_tensor_ctx(b) == other && dlt_tensor_format(b) == DLT_FORMAT_CONTIGUOUS);
    float back[120];
    CHECK_OK(dlt_tensor_copy_to_host(b, back, sizeof back));
    CHECK(memcmp(back, v, sizeof v) == 0, "cross-context device copy changed bytes");
    /* across contexts into channels-last: the values land in NHWC order */
    CHECK_OK(dlt_tensor_empty(other, DLT_F32, shape, 4, DLT_FORMAT_CHANNELS_LAST, &c));
    CHECK_OK(dlt_tensor_copy(c, a));
    CHECK_OK(dlt_tensor_copy_to_host(c, back, sizeof back));
    int bad = 0;
    for (int64_t nn = 0; nn < 2; nn++)
        for (int64_t cc = 0; cc < 3; cc++)
            for (int64_t hh = 0; hh < 5; hh++)
                for (int64_t ww = 0; ww < 4; ww++)
                    if (back[((nn * 5 + hh) * 4 + ww) * 3 + cc] != v[((nn * 3 + cc) * 5 + hh) * 4 + ww]) bad++;
    CHECK(bad == 0, "%d elements misplaced by the cross-context format copy", bad);
    /* channels-last device -> contiguous device on the first context, same context */
    CHECK_OK(dlt_tensor_empty(g_cuda, DLT_F32, shape, 4, DLT_FORMAT_CONTIGUOUS, &d));
    CHECK_OK(dlt_tensor_copy(d, c));
    CHECK_OK(dlt_tensor_copy_to_host(d, back, sizeof back));
    CHECK(memcmp(back, v, sizeof v) == 0, "channels-last round trip across contexts");
    /* CUDA -> CPU and CPU -> CUDA through dlt_tensor_to_ctx */
    CHECK_OK(dlt_tensor_to_ctx(c, g_cpu, &h));
    CHECK(dlt_tensor_device_type(h) == DLT_DEVICE_CPU && dlt_tensor_format(h) == DLT_FORMAT_CHANNELS_LAST);
    float hb[120];
    CHECK_OK(dlt_tensor_copy_to_host(h, hb, sizeof hb));
    CHECK_OK(dlt_tensor_copy_to_host(c, back, sizeof back));
    CHECK(memcmp(hb, back, sizeof hb) == 0, "CUDA -> CPU copy changed bytes");
    CHECK_OK(dlt_tensor_to_ctx(h, g_cuda, &e));
    CHECK_OK(dlt_tensor_copy_to_host(e, back, sizeof back));
    CHECK(memcmp(hb, back, sizeof hb) == 0, "CPU -> CUDA copy changed bytes");
    /* refusals */
    dlt_tensor *wrong = NULL;
    int64_t s2[4] = {2, 3, 4, 5};
    CHECK_OK(dlt_tensor_empty(other, DLT_F32, s2, 4, DLT_FORMAT_CONTIGUOUS, &wrong));
    CHECK_STATUS(dlt_tensor_copy(wrong, a), DLT_ERR_SHAPE);
    dlt_tensor_release(wrong);
    CHECK_OK(dlt_tensor_empty(other, DLT_F16, shape, 4, DLT_FORMAT_CONTIGUOUS, &wrong));
    CHECK_STATUS(dlt_tensor_copy(wrong, a), DLT_ERR_DTYPE);
    dlt_tensor_release(wrong);
    CHECK_OK(dlt_ctx_synchronize(other));
    CHECK_OK(dlt_ctx_check(g_cuda));
    dlt_tensor_release(a);
    dlt_tensor_release(b);
    dlt_tensor_release(c);
    dlt_tensor_release(d);
    dlt_tensor_release(h);
    dlt_tensor_release(e);
    dlt_ctx_destroy(other);
}

/* ---- casts ---- */

static void test_cast_f16_exhaustive(void) {
    NEED_CUDA();
    static uint16_t bits[65536];
    for (int i = 0; i < 65536; i++) bits[i] = (uint16_t)i;
    int64_t shape[1] = {65536};
    dlt_tensor *c16 = NULL, *g16 = NULL;
    make_pair(DLT_F16, shape, 1, DLT_FORMAT_CONTIGUOUS, bits, sizeof bits, &c16, &g16);
    REQUIRE(c16 && g16);
    cast_and_compare(c16, g16, DLT_F32, "every f16");
    cast_and_compare(c16, g16, DLT_BF16, "every f16");
    /* f16 -> f32 -> f16 on the device is the identity (NaNs stay NaN) */
    dlt_tensor *f = NULL, *back = NULL;
    CHECK_OK(dlt_tensor_cast(g16, DLT_F32, &f));
    CHECK_OK(dlt_tensor_cast(f, DLT_F16, &back));
    uint16_t *rb = read_bytes(back);
    REQUIRE(rb);
    int64_t first = -1, bad = count_diff(rb, bits, 65536, DLT_F16, NULL, &first);
    CHECK(bad == 0, "%lld f16 values change on the device round trip (first %04llx -> %04x)", (long long)bad,
          (unsigned long long)first, first >= 0 ? (unsigned)rb[first] : 0u);
    free(rb);
    dlt_tensor_release(f);
    dlt_tensor_release(back);
    dlt_tensor_release(c16);
    dlt_tensor_release(g16);
}

static void test_cast_bf16_exhaustive(void) {
    NEED_CUDA();
    static uint16_t bits[65536];
    for (int i = 0; i < 65536; i++) bits[i] = (uint16_t)i;
    int64_t shape[1] = {65536};
    dlt_tensor *cb = NULL, *gb = NULL;
    make_pair(DLT_BF16, shape, 1, DLT_FORMAT_CONTIGUOUS, bits, sizeof bits, &cb, &gb);
    REQUIRE(cb && gb);
    cast_and_compare(cb, gb, DLT_F32, "every bf16");
    cast_and_compare(cb, gb, DLT_F16, "every bf16");
    dlt_tensor_release(cb);
    dlt_tensor_release(gb);
}

/* f32 -> f16/bf16 rounding: random bit patterns over every exponent, plus hand-picked ties
 * and the overflow/subnormal edges. */
static void test_cast_f32_rounding(void) {
    NEED_CUDA();
    enum { N = 1 << 20 };
    uint32_t *bits = xmalloc(N * sizeof(uint32_t));
    for (int i = 0; i < N; i++) bits[i] = (uint32_t)rnd64();
    /* half of them near the f16 range, where rounding matters most */
    for (int i = 0; i < N / 2; i++) bits[i] = (bits[i] & 0x807fffffu) | ((uint32_t)(100 + (bits[i] >> 23) % 60) << 23);
    const float edges[] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65519.0f, 65520.0f, 65504.0f,
                           5.9604645e-8f, 2.9802322e-8f, 8.9406967e-8f, 6.1035156e-5f, 6.1028e-5f,
                           1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 3.3895314e38f, -0.0f, 1e-45f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) memcpy(&bits[i], &edges[i], 4);
    int64_t shape[1] = {N};
    dlt_tensor *c = NULL, *g = NULL;
    make_pair(DLT_F32, shape, 1, DLT_FORMAT_CONTIGUOUS, bits, (size_t)N * 4, &c, &g);
    REQUIRE(c && g);
    cast_and_compare(c, g, DLT_F16, "random f32");
    cast_and_compare(c, g, DLT_BF16, "random f32");
    dlt_tensor_release(c);
    dlt_tensor_release(g);
    free(bits);
}

/* Integer casts and float -> integer truncation/saturation, both devices. */
static void test_cast_integers(void) {
    NEED_CUDA();
    /* in-range values for every integer target (no UB on either side) */
    const float fv[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, -2.5f, 0.99f, -0.99f, 127.5f, 254.9f, 255.0f,
                        1000.75f, -1000.75f, 16777216.0f, 2147483520.0f, -2147483648.0f, 3.0e9f,
                        -3.0e9f, 1.0e15f, -1.0e15f};
    const int nf = (int)(sizeof fv / sizeof fv[0]);
    int64_t shape[1] = {nf};
    dlt_tensor *c = NULL, *g = NULL;
    make_pair(DLT_F32, shape, 1, DLT_FORMAT_CONTIGUOUS, fv, sizeof fv, &c, &g);
    REQUIRE(c && g);
    cast_and_compare(c, g, DLT_I64, "finite f32");
    cast_and_compare(c, g, DLT_I32, "finite f32");
    cast_and_compare(c, g, DLT_U8, "finite f32");
    dlt_tensor_release(c);
    dlt_tensor_release(g);
    /* saturation of non-finite values into i32 and u8 (NaN -> 0) */
    const float sat[] = {INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 256.0f, -1.0f};
    int64_t s2[1] = {7};
    make_pair(DLT_F32, s2, 1, DLT_FORMAT_CONTIGUOUS, sat, sizeof sat, &c, &g);
    REQUIRE(c && g);
    cast_and_compare(c, g, DLT_I32, "saturating f32");
    cast_and_compare(c, g, DLT_U8, "saturating f32");
    dlt_tensor *u = NULL;
    CHECK_OK(dlt_tensor_cast(g, DLT_U8, &u));
    uint8_t ub[7];
    CHECK_OK(dlt_tensor_copy_to_host(u, ub, sizeof ub));
    CHECK(ub[0] == 255 && ub[1] == 0 && ub[2] == 0 && ub[3] == 255 && ub[4] == 0 && ub[5] == 255 && ub[6] == 0,
          "u8 saturation: %u %u %u %u %u %u %u", ub[0], ub[1], ub[2], ub[3], ub[4], ub[5], ub[6]);
    dlt_tensor_release(u);
    dlt_tensor_release(c);
    dlt_tensor_release(g);
    /* integers -> floats (rounding of large values) and integer narrowing */
    const int64_t iv[] = {0, 1, -1, 7, 200, 255, 16777217, -16777217, 2049, 65505, 65519, 65520,
                          2147483647, -2147483647 - 1, INT64_C(1) << 40, (INT64_C(1) << 53) + 1,
                          INT64_C(9007199254740993), -INT64_C(123456789012345)};
    const int ni = (int)(sizeof iv / sizeof iv[0]);
    int64_t s3[1] = {ni};
    make_pair(DLT_I64, s3, 1, DLT_FORMAT_CONTIGUOUS, iv, sizeof iv, &c, &g);
    REQUIRE(c && g);
    cast_and_compare(c, g, DLT_F32, "i64");
    cast_and_compare(c, g, DLT_F16, "i64");
    cast_and_compare(c, g, DLT_BF16, "i64");
    cast_and_compare(c, g, DLT_I32, "i64");
    dlt_tensor_release(c);
    dlt_tensor_release(g);
    int32_t i32v[] = {0, 1, -1, 100, 255, 16777217, -16777217, 2147483647, -2147483647 - 1, 65520};
    int64_t s4[1] = {10};
    make_pair(DLT_I32, s4, 1, DLT_FORMAT_CONTIGUOUS, i32v, sizeof i32v, &c, &g);
    REQUIRE(c && g);
    cast_and_compare(c, g, DLT_F32, "i32");
    cast_and_compare(c, g, DLT_F16, "i32");
    cast_and_compare(c, g, DLT_I64, "i32");
    dlt_tensor_release(c);
    dlt_tensor_release(g);
    uint8_t u8v[] = {0, 1, 2, 127, 128, 200, 254, 255};
    int64_t s5[1] = {8};
    make_pair(DLT_U8, s5, 1, DLT_FORMAT_CONTIGUOUS, u8v, sizeof u8v, &c, &g);
    REQUIRE(c && g);
    for (int d = 0; d < 6; d++)
        if (ALL_DTYPES[d] != DLT_U8) cast_and_compare(c, g, ALL_DTYPES[d], "u8");
    dlt_tensor_release(c);
    dlt_tensor_release(g);
}

/* i32 values outside 0..255 cast to u8: PyTorch (and the CUDA kernel) wrap modulo 256 like
 * a C cast. Kept apart so a backend disagreement is named by itself. */
static void test_cast_i32_to_u8_wraps(void) {
    NEED_CUDA();
    int32_t v[] = {-3, 256, 300, -256, 1000, 255, 0};
    int64_t s[1] = {7};
    dlt_tensor *c = NULL, *g = NULL;
    make_pair(DLT_I32, s, 1, DLT_FORMAT_CONTIGUOUS, v, sizeof v, &c, &g);
    REQUIRE(c && g);
    cast_and_compare(c, g, DLT_U8, "out-of-range i32");
    dlt_tensor *u = NULL;
    CHECK_OK(dlt_tensor_cast(g, DLT_U8, &u));
    uint8_t ub[7];
    CHECK_OK(dlt_tensor_copy_to_host(u, ub, sizeof ub));
    CHECK(ub[0] == 253 && ub[1] == 0 && ub[2] == 44 && ub[3] == 0 && ub[4] == 232 && ub[5] == 255,
          "cuda i32->u8: %u %u %u %u %u %u", ub[0], ub[1], ub[2], ub[3], ub[4], ub[5]);
    dlt_tensor_release(u);
    dlt_tensor_release(c);
    dlt_tensor_release(g);
}

/* ---- formats ---- */

static void test_formats(void) {
    NEED_CUDA();
    const int64_t shapes[][4] = {{2, 3, 5, 7}, {1, 16, 1, 1}, {3, 1, 4, 4}, {1, 5, 9, 2}};
    const int32_t dts[4] = {DLT_F32, DLT_F16, DLT_BF16, DLT_I64};
    for (int si = 0; si < 4; si++)
        for (int di = 0; di < 4; di++) {
            const int32_t dt = dts[di];
            const int64_t n = shapes[si][0] * shapes[si][1] * shapes[si][2] * shapes[si][3];
            const size_t nb = (size_t)n * dlt_dtype_size(dt);
            unsigned char *src = xmalloc(nb);
            for (size_t i = 0; i < nb; i++) src[i] = (unsigned char)rnd64();
            dlt_tensor *c = NULL, *g = NULL, *ccl = NULL, *gcl = NULL, *gback = NULL;
            make_pair(dt, shapes[si], 4, DLT_FORMAT_CONTIGUOUS, src, nb, &c, &g);
            CHECK_OK(dlt_tensor_to_format(c, DLT_FORMAT_CHANNELS_LAST, &ccl));
            CHECK_OK(dlt_tensor_to_format(g, DLT_FORMAT_CHANNELS_LAST, &gcl));
            CHECK(dlt_tensor_format(gcl) == DLT_FORMAT_CHANNELS_LAST);
            /* random bytes include NaNs, whose payload a float conversion may canonicalise */
            void *pc = read_bytes(ccl), *pg = read_bytes(gcl);
            int64_t first = -1;
            CHECK(pc && pg && count_diff(pc, pg, n, dt, NULL, &first) == 0,
                  "%s [%lld,%lld,%lld,%lld] to channels-last differs at %lld", dlt_dtype_name(dt),
                  (long long)shapes[si][0], (long long)shapes[si][1], (long long)shapes[si][2],
                  (long long)shapes[si][3], (long long)first);
            free(pc);
            free(pg);
            CHECK_OK(dlt_tensor_to_format(gcl, DLT_FORMAT_CONTIGUOUS, &gback));
            void *pb = read_bytes(gback);
            CHECK(pb && count_diff(pb, src, n, dt, NULL, &first) == 0,
                  "%s channels-last round trip changed element %lld", dlt_dtype_name(dt), (long long)first);
            free(pb);
            /* format change and cast together (f16 contiguous -> f32 channels-last) */
            if (dt == DLT_F16) {
                dlt_tensor *cf = NULL, *gf = NULL;
                CHECK_OK(dlt_tensor_cast(ccl, DLT_F32, &cf));
                CHECK_OK(dlt_tensor_empty(g_cuda, DLT_F32, shapes[si], 4, DLT_FORMAT_CONTIGUOUS, &gf));
                dlt_tensor *gtmp = NULL;
                CHECK_OK(dlt_tensor_cast(g, DLT_F32, &gtmp));
                CHECK_OK(dlt_tensor_copy(gf, gtmp)); /* same format: plain copy */
                dlt_tensor *gfcl = NULL;
                CHECK_OK(dlt_tensor_to_format(gf, DLT_FORMAT_CHANNELS_LAST, &gfcl));
                void *x1 = read_bytes(cf), *x2 = read_bytes(gfcl);
                CHECK(x1 && x2 && count_diff(x1, x2, n, DLT_F32, NULL, &first) == 0, "cast+format, first bad %lld",
                      (long long)first);
                free(x1);
                free(x2);
                dlt_tensor_release(cf);
                dlt_tensor_release(gf);
                dlt_tensor_release(gtmp);
                dlt_tensor_release(gfcl);
            }
            free(src);
            dlt_tensor_release(c);
            dlt_tensor_release(g);
            dlt_tensor_release(ccl);
            dlt_tensor_release(gcl);
            dlt_tensor_release(gback);
        }
}

/* ---- fills, random fills, element reads ---- */

static void test_fill(void) {
    NEED_CUDA();
    const double vals[] = {0.0, 3.0, -2.75, 0.1, 65519.0, 1e-8, 300.0, -1e20};
    int64_t shape[4] = {2, 3, 4, 5};
    for (int d = 0; d < 6; d++)
        for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
            const int32_t dt = ALL_DTYPES[d];
            const double v = vals[k];
            /* integer fills take values the integer type holds (a C cast would be undefined) */
            if (dt == DLT_U8 && (v < 0 || v > 255)) continue;
            if ((dt == DLT_I32 || dt == DLT_I64) && fabs(v) > 2e9) continue;
            /* nor finite values beyond fp16's largest (refused, as by PyTorch's fill_) */
            if (dt == DLT_F16 && fabs(v) > 65504.0) continue;
            dlt_tensor *c = NULL, *g = NULL;
            CHECK_OK(dlt_tensor_empty(g_cpu, dt, shape, 4, DLT_FORMAT_CHANNELS_LAST, &c));
            CHECK_OK(dlt_tensor_empty(g_cuda, dt, shape, 4, DLT_FORMAT_CHANNELS_LAST, &g));
            CHECK_OK(dlt_tensor_fill(c, v));
            CHECK_OK(dlt_tensor_fill(g, v));
            void *pc = read_bytes(c), *pg = read_bytes(g);
            int64_t first = -1;
            CHECK(pc && pg && count_diff(pc, pg, 120, dt, NULL, &first) == 0, "%s fill(%g) differs at %lld",
                  dlt_dtype_name(dt), v, (long long)first);
            free(pc);
            free(pg);
            double got = 0;
            CHECK_OK(dlt_tensor_get(g, 119, &got));
            double want = 0;
            CHECK_OK(dlt_tensor_get(c, 119, &want));
            CHECK(got == want || (got != got && want != want), "%s get after fill: %g vs %g", dlt_dtype_name(dt),
                  got, want);
            dlt_tensor_release(c);
            dlt_tensor_release(g);
        }
}

static void test_rand(void) {
    NEED_CUDA();
    const int64_t shapes[2][4] = {{4, 7, 9, 11}, {1, 3, 1, 1}};
    const int32_t dts[3] = {DLT_F32, DLT_F16, DLT_BF16};
    for (int si = 0; si < 2; si++)
        for (int di = 0; di < 3; di++)
            for (int fmt = 0; fmt < 2; fmt++) {
                const int32_t dt = dts[di];
                const int64_t n = shapes[si][0] * shapes[si][1] * shapes[si][2] * shapes[si][3];
                dlt_tensor *cu = NULL, *gu = NULL, *cn = NULL, *gn = NULL;
                CHECK_OK(dlt_ctx_set_seed(g_cpu, 1234 + (uint64_t)si));
                CHECK_OK(dlt_ctx_set_seed(g_cuda, 1234 + (uint64_t)si));
                CHECK_OK(dlt_tensor_empty(g_cpu, dt, shapes[si], 4, fmt, &cu));
                CHECK_OK(dlt_tensor_empty(g_cuda, dt, shapes[si], 4, fmt, &gu));
                CHECK_OK(dlt_tensor_empty(g_cpu, DLT_F32, shapes[si], 4, fmt, &cn));
                CHECK_OK(dlt_tensor_empty(g_cuda, DLT_F32, shapes[si], 4, fmt, &gn));
                /* advance the offset once so a non-zero offset is exercised */
                CHECK_OK(dlt_tensor_rand_uniform(cn, 0, 1));
                CHECK_OK(dlt_tensor_rand_uniform(gn, 0, 1));
                CHECK_OK(dlt_tensor_rand_uniform(cu, -3.0, 5.0));
                CHECK_OK(dlt_tensor_rand_uniform(gu, -3.0, 5.0));
                CHECK_OK(dlt_tensor_rand_normal(cn, 0.5, 2.0));
                CHECK_OK(dlt_tensor_rand_normal(gn, 0.5, 2.0));
                uint64_t oc = 0, og = 1;
                CHECK_OK(dlt_ctx_get_seed(g_cpu, NULL, &oc));
                CHECK_OK(dlt_ctx_get_seed(g_cuda, NULL, &og));
                CHECK(oc == og, "offsets differ: cpu %llu cuda %llu", (unsigned long long)oc, (unsigned long long)og);
                void *pc = read_bytes(cu), *pg = read_bytes(gu);
                int64_t first = -1;
                CHECK(pc && pg && count_diff(pc, pg, n, dt, NULL, &first) == 0,
                      "uniform %s fmt %d differs at %lld", dlt_dtype_name(dt), fmt, (long long)first);
                free(pc);
                free(pg);
                float *fc = th_read_f32(cn), *fg = th_read_f32(gn);
                REQUIRE(fc && fg);
                int bad = 0;
                double worst = 0;
                for (int64_t i = 0; i < n; i++) {
                    double e = fabs((double)fc[i] - (double)fg[i]);
                    if (e > worst) worst = e;
                    if (!(e <= 1e-6 * (1.0 + fabs((double)fc[i])))) bad++;
                }
                CHECK(bad == 0, "normal: %d of %lld values differ by more than 1e-6 (worst %g)", bad, (long long)n,
                      worst);
                free(fc);
                free(fg);
                dlt_tensor_release(cu);
                dlt_tensor_release(gu);
                dlt_tensor_release(cn);
                dlt_tensor_release(gn);
            }
}

static void test_get(void) {
    NEED_CUDA();
    int64_t shape[4] = {2, 3, 4, 5};
    float v[120];
    for (int i = 0; i < 120; i++) v[i] = (float)i - 60.5f;
    dlt_tensor *f = NULL, *cl = NULL, *h = NULL, *i64 = NULL;
    CHECK_OK(dlt_tensor_from_host(g_cuda, DLT_F32, shape, 4, DLT_FORMAT_CONTIGUOUS, v, sizeof v, &f));
    CHECK_OK(dlt_tensor_to_format(f, DLT_FORMAT_CHANNELS_LAST, &cl));
    CHECK_OK(dlt_tensor_cast(cl, DLT_F16, &h));
    CHECK_OK(dlt_tensor_cast(f, DLT_I64, &i64));
    const int64_t idx[] = {0, 1, 5, 20, 59, 60, 61, 119};
    for (size_t k = 0; k < sizeof idx / sizeof idx[0]; k++) {
        double a = 0, b = 0, c = 0, d = 0;
        CHECK_OK(dlt_tensor_get(f, idx[k], &a));
        CHECK_OK(dlt_tensor_get(cl, idx[k], &b));
        CHECK_OK(dlt_tensor_get(h, idx[k], &c));
        CHECK_OK(dlt_tensor_get(i64, idx[k], &d));
        CHECK(a == v[idx[k]] && b == v[idx[k]] && c == v[idx[k]], "element %lld: %g %g %g want %g",
              (long long)idx[k], a, b, c, (double)v[idx[k]]);
        CHECK(d == (double)(int64_t)v[idx[k]], "i64 element %lld: %g", (long long)idx[k], d);
    }
    double x;
    CHECK_STATUS(dlt_tensor_get(f, 120, &x), DLT_ERR_INVALID_ARGUMENT);
    dlt_tensor *s = NULL;
    CHECK_OK(dlt_tensor_zeros(g_cuda, DLT_BF16, NULL, 0, DLT_FORMAT_CONTIGUOUS, &s));
    CHECK_OK(dlt_tensor_fill(s, -1.5));
    CHECK_OK(dlt_tensor_item(s, &x));
    CHECK(x == -1.5, "item %g", x);
    dlt_tensor_release(s);
    dlt_tensor_release(f);
    dlt_tensor_release(cl);
    dlt_tensor_release(h);
    dlt_tensor_release(i64);
}

/* ---- memory ---- */

static uint64_t stat_of(int32_t which) {
    uint64_t v = 0;
    dlt_status s = dlt_memory_stat(g_cuda, which, &v);
    CHECK(s == DLT_OK, "dlt_memory_stat(%d): %s", which, dlt_last_error());
    return v;
}

static void test_memory_stats(void) {
    NEED_CUDA();
    const uint64_t MiB = 1u << 20;
    CHECK_OK(dlt_ctx_synchronize(g_cuda));
    const uint64_t a0 = stat_of(DLT_MEM_ALLOCATED), c0 = stat_of(DLT_MEM_ALLOC_COUNT);
    int64_t big[1] = {16 * 1024 * 1024}; /* 64 MiB of f32 */
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_tensor_empty(g_cuda, DLT_F32, big, 1, DLT_FORMAT_CONTIGUOUS, &t));
    const uint64_t a1 = stat_of(DLT_MEM_ALLOCATED), c1 = stat_of(DLT_MEM_ALLOC_COUNT);
    const uint64_t p1 = stat_of(DLT_MEM_PEAK_ALLOCATED), r1 = stat_of(DLT_MEM_RESERVED);
    CHECK(a1 >= a0 + 64 * MiB, "allocated %llu -> %llu after a 64 MiB tensor", (unsigned long long)a0,
          (unsigned long long)a1);
    CHECK(c1 == c0 + 1, "allocation count %llu -> %llu", (unsigned long long)c0, (unsigned long long)c1);
    CHECK(p1 >= a1, "peak %llu < allocated %llu", (unsigned long long)p1, (unsigned long long)a1);
    CHECK(r1 >= a1, "reserved %llu < allocated %llu", (unsigned long long)r1, (unsigned long long)a1);
    dlt_tensor_release(t);
    CHECK_OK(dlt_ctx_synchronize(g_cuda));
    const uint64_t a2 = stat_of(DLT_MEM_ALLOCATED), c2 = stat_of(DLT_MEM_ALLOC_COUNT);
    const uint64_t p2 = stat_of(DLT_MEM_PEAK_ALLOCATED), r2 = stat_of(DLT_MEM_RESERVED);
    CHECK(a2 == a0, "allocated %llu after release, %llu before the tensor", (unsigned long long)a2,
          (unsigned long long)a0);
    CHECK(c2 == c0, "allocation count %llu after release, %llu before", (unsigned long long)c2,
          (unsigned long long)c0);
    CHECK(p2 >= a1, "the peak forgot the 64 MiB tensor: %llu", (unsigned long long)p2);
    CHECK(r2 >= a2 + 64 * MiB, "the pool should cache the freed block: reserved %llu, allocated %llu",
          (unsigned long long)r2, (unsigned long long)a2);
    /* reset: the peak drops to (about) the current allocation and follows new allocations */
    CHECK_OK(dlt_memory_reset_peak(g_cuda));
    const uint64_t p3 = stat_of(DLT_MEM_PEAK_ALLOCATED);
    CHECK(p3 < a1 && p3 <= a2 + MiB, "peak after reset %llu (allocated %llu, old peak %llu)",
          (unsigned long long)p3, (unsigned long long)a2, (unsigned long long)p2);
    int64_t small[1] = {256 * 1024}; /* 1 MiB */
    CHECK_OK(dlt_tensor_empty(g_cuda, DLT_F32, small, 1, DLT_FORMAT_CONTIGUOUS, &t));
    const uint64_t a4 = stat_of(DLT_MEM_ALLOCATED), p4 = stat_of(DLT_MEM_PEAK_ALLOCATED);
    CHECK(a4 >= a2 + MiB && p4 >= a4 && p4 < a1, "after 1 MiB: allocated %llu peak %llu",
          (unsigned long long)a4, (unsigned long long)p4);
    dlt_tensor_release(t);
    /* trimming returns the cached block */
    CHECK_OK(dlt_empty_cache(g_cuda));
    const uint64_t r5 = stat_of(DLT_MEM_RESERVED), a5 = stat_of(DLT_MEM_ALLOCATED);
    CHECK(r5 < r2 && r5 + 32 * MiB <= r2, "empty_cache: reserved %llu -> %llu", (unsigned long long)r2,
          (unsigned long long)r5);
    CHECK(r5 >= a5, "reserved %llu < allocated %llu after trimming", (unsigned long long)r5,
          (unsigned long long)a5);
}

static void test_out_of_memory(void) {
    NEED_CUDA();
    int64_t shape[1] = {1000};
    float v[1000];
    for (int i = 0; i < 1000; i++) v[i] = (float)i * 0.5f;
    dlt_tensor *keep = NULL;
    CHECK_OK(dlt_tensor_from_host(g_cuda, DLT_F32, shape, 1, DLT_FORMAT_CONTIGUOUS, v, sizeof v, &keep));
    CHECK_OK(dlt_ctx_synchronize(g_cuda));
    const uint64_t a0 = stat_of(DLT_MEM_ALLOCATED), c0 = stat_of(DLT_MEM_ALLOC_COUNT);
    int64_t huge[1] = {INT64_C(1) << 44}; /* 2^46 bytes = 64 TiB */
    dlt_tensor *t = (dlt_tensor *)0x1;
    CHECK_STATUS(dlt_tensor_empty(g_cuda, DLT_F32, huge, 1, DLT_FORMAT_CONTIGUOUS, &t),
                 DLT_ERR_DEVICE_OUT_OF_MEMORY);
    CHECK(t == (dlt_tensor *)0x1, "out-pointer untouched on failure");
    /* the context is not poisoned and everything still works */
    CHECK_OK(dlt_ctx_check(g_cuda));
    CHECK_OK(dlt_ctx_synchronize(g_cuda));
    float back[1000];
    CHECK_OK(dlt_tensor_copy_to_host(keep, back, sizeof back));
    CHECK(memcmp(back, v, sizeof v) == 0, "an existing tensor changed after the refusal");
    CHECK(stat_of(DLT_MEM_ALLOCATED) == a0 && stat_of(DLT_MEM_ALLOC_COUNT) == c0,
          "the refused allocation left memory accounted");
    dlt_tensor *w = NULL, *w2 = NULL;
    CHECK_OK(dlt_tensor_zeros(g_cuda, DLT_F32, shape, 1, DLT_FORMAT_CONTIGUOUS, &w));
    CHECK_OK(dlt_tensor_fill(w, 2.0));
    CHECK_OK(dlt_tensor_cast(w, DLT_F16, &w2));
    double x = 0;
    CHECK_OK(dlt_tensor_get(w2, 999, &x));
    CHECK(x == 2.0, "work after the refusal: %g", x);
    dlt_tensor_release(w);
    dlt_tensor_release(w2);
    dlt_tensor_release(keep);
}

int main(void) {
    g_cpu = th_cpu_ctx();
    g_cuda = th_cuda_ctx();
    if (!g_cuda) snprintf(g_no_cuda, sizeof g_no_cuda, "%s", th_skip_reason);
    RUN(test_copy_host_device);
    RUN(test_copy_between_contexts);
    RUN(test_cast_f16_exhaustive);
    RUN(test_cast_bf16_exhaustive);
    RUN(test_cast_f32_rounding);
    RUN(test_cast_integers);
    RUN(test_cast_i32_to_u8_wraps);
    RUN(test_formats);
    RUN(test_fill);
    RUN(test_rand);
    RUN(test_get);
    RUN(test_memory_stats);
    RUN(test_out_of_memory);
    dlt_ctx_destroy(g_cuda);
    dlt_ctx_destroy(g_cpu);
    return th_done();
}
