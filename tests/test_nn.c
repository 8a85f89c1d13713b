/*
 * test_nn.c - modules on the CPU: torchvision's ResNets (state_dict names, order, shapes,
 * parameter counts, initialisation statistics, forward against a float64 reference written
 * here from torchvision's definition), the residual blocks, BatchNorm running statistics
 * and num_batches_tracked, train/eval recursion, a network built by hand from the layers
 * that trains, the Sequential BN+ReLU fusion, the parameter arena, memory formats, memory
 * release, allocation failures and error statuses.
 *
 * Fixtures: tests/fixtures/resnet{50_1000,50_10,18_1000}.txt list torchvision's state_dict
 * ("name dtype d0,d1,..." per line, "-" for a 0-D shape), written by
 * tests/fixtures/gen_resnet_fixture.py where PyTorch is installed. The cases that need them
 * skip until they exist; the expected layout is also generated here independently.
 */
#include <stdint.h>

#include "../lib/core/internal.h" /* the arena test inspects storage and offsets */
#include "harness.h"
#include "ref.h"

static dlt_ctx *g_ctx;

/* ---- deterministic data (splitmix64) ---- */
static uint64_t g_rng = 1;
static void seed(uint64_t s) { g_rng = s * 0x9e3779b97f4a7c15ull + 1; }
static double urand(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}
/* an f32 tensor of uniform values in [lo, hi); vals (may be NULL) receives them as doubles */
static dlt_tensor *rand_tensor(const int64_t *shape, int32_t ndim, double lo, double hi, double **vals) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    float *f = malloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)(lo + (hi - lo) * urand());
    dlt_tensor *t = th_tensor_f32(g_ctx, f, shape, ndim);
    if (vals) {
        *vals = malloc((size_t)n * sizeof(double));
        for (int64_t i = 0; i < n; i++) (*vals)[i] = f[i];
    }
    free(f);
    return t;
}
/* a tensor's values (logical order) as doubles; the caller frees */
static double *read_d(const dlt_tensor *t) {
    float *f = th_read_f32(t);
    if (!f) return NULL;
    int64_t n = dlt_tensor_numel(t);
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
    free(f);
    return d;
}
static double rel_err_d(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (a[i] != a[i]) return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den == 0 ? sqrt(num) : sqrt(num / den);
}
static dlt_tensor *find(const dlt_module *m, const char *name) {
    dlt_tensor *t = NULL;
    if (dlt_module_find(m, name, &t) != DLT_OK) {
        printf("# find(%s): %s\n", name, dlt_last_error());
        return NULL;
    }
    return t;
}
static double *findv(const dlt_module *m, const char *name) {
    dlt_tensor *t = find(m, name);
    return t ? read_d(t) : NULL;
}
static double item(const dlt_tensor *t) {
    double v = NAN;
    if (dlt_tensor_item(t, &v) != DLT_OK) printf("# item: %s\n", dlt_last_error());
    return v;
}

/* ---- the expected torchvision layout, generated from resnet.py's rules ---- */

typedef struct exp_entry {
    char name[128];
    int32_t dtype;
    int32_t ndim;
    int64_t shape[4];
    int32_t is_param;
} exp_entry;

static void e_add(exp_entry *e, int *n, const char *name, int32_t dtype, int32_t ndim,
                  int64_t a, int64_t b, int64_t c, int64_t d, int32_t is_param) {
    exp_entry *x = &e[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->dtype = dtype;
    x->ndim = ndim;
    x->shape[0] = a, x->shape[1] = b, x->shape[2] = c, x->shape[3] = d;
    x->is_param = is_param;
}
static void e_conv(exp_entry *e, int *n, const char *p, int64_t o, int64_t i, int64_t k) {
    char s[120];
    snprintf(s, sizeof s, "%s.weight", p);
    e_add(e, n, s, DLT_F32, 4, o, i, k, k, 1);
}
static void e_bn(exp_entry *e, int *n, const char *p, int64_t c) {
    static const char *names[5] = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
    for (int j = 0; j < 5; j++) {
        char s[120];
        snprintf(s, sizeof s, "%s.%s", p, names[j]);
        if (j < 4) e_add(e, n, s, DLT_F32, 1, c, 0, 0, 0, j < 2);
        else e_add(e, n, s, DLT_I64, 0, 0, 0, 0, 0, 0);
    }
}
/* torchvision.models.resnet: _make_layer, BasicBlock / Bottleneck */
static int expected_layout(int depth, int64_t classes, exp_entry *e) {
    static const int L18[4] = {2, 2, 2, 2}, L34[4] = {3, 4, 6, 3}, L101[4] = {3, 4, 23, 3},
                     L152[4] = {3, 8, 36, 3};
    const int *L = depth == 18 ? L18 : depth == 34 || depth == 50 ? L34 : depth == 101 ? L101 : L152;
    const int bottle = depth >= 50;
    const int64_t exp = bottle ? 4 : 1;
    int n = 0;
    e_conv(e, &n, "conv1", 64, 3, 7);
    e_bn(e, &n, "bn1", 64);
    int64_t inplanes = 64;
    for (int l = 0; l < 4; l++) {
        int64_t planes = 64 << l, stride = l ? 2 : 1;
        for (int b = 0; b < L[l]; b++) {
            char p[64], q[80];
            snprintf(p, sizeof p, "layer%d.%d", l + 1, b);
            if (bottle) {
                snprintf(q, sizeof q, "%s.conv1", p), e_conv(e, &n, q, planes, inplanes, 1);
                snprintf(q, sizeof q, "%s.bn1", p), e_bn(e, &n, q, planes);
                snprintf(q, sizeof q, "%s.conv2", p), e_conv(e, &n, q, planes, planes, 3);
                snprintf(q, sizeof q, "%s.bn2", p), e_bn(e, &n, q, planes);
                snprintf(q, sizeof q, "%s.conv3", p), e_conv(e, &n, q, planes * 4, planes, 1);
                snprintf(q, sizeof q, "%s.bn3", p), e_bn(e, &n, q, planes * 4);
            } else {
                snprintf(q, sizeof q, "%s.conv1", p), e_conv(e, &n, q, planes, inplanes, 3);
                snprintf(q, sizeof q, "%s.bn1", p), e_bn(e, &n, q, planes);
                snprintf(q, sizeof q, "%s.conv2", p), e_conv(e, &n, q, planes, planes, 3);
                snprintf(q, sizeof q, "%s.bn2", p), e_bn(e, &n, q, planes);
            }
            if (b == 0 && (stride != 1 || inplanes != planes * exp)) {
                snprintf(q, sizeof q, "%s.downsample.0", p), e_conv(e, &n, q, planes * exp, inplanes, 1);
                snprintf(q, sizeof q, "%s.downsample.1", p), e_bn(e, &n, q, planes * exp);
            }
            inplanes = planes * exp;
        }
    }
    e_add(e, &n, "fc.weight", DLT_F32, 2, classes, 512 * exp, 0, 0, 1);
    e_add(e, &n, "fc.bias", DLT_F32, 1, classes, 0, 0, 0, 1);
    return n;
}

/* Compares every state entry of m with the expected list. */
static void check_layout(const dlt_module *m, const exp_entry *e, int n, const char *what) {
    CHECK(dlt_module_num_state(m) == n, "%s: %d state entries, expected %d", what,
          dlt_module_num_state(m), n);
    int bad = 0;
    for (int i = 0; i < n && i < dlt_module_num_state(m) && bad < 5; i++) {
        const char *name = NULL;
        dlt_tensor *t = NULL;
        int32_t is_param = -1;
        CHECK_OK(dlt_module_state_entry(m, i, &name, &t, &is_param));
        int ok = strcmp(name, e[i].name) == 0 && dlt_tensor_dtype(t) == e[i].dtype &&
                 dlt_tensor_ndim(t) == e[i].ndim && is_param == e[i].is_param;
        for (int32_t d = 0; ok && d < e[i].ndim; d++) ok = dlt_tensor_dim(t, d) == e[i].shape[d];
        if (!ok) {
            bad++;
            CHECK(0, "%s: entry %d is '%s' (%s, %d-D, param %d), expected '%s' (%s, %d-D, param %d)",
                  what, i, name, dlt_dtype_name(dlt_tensor_dtype(t)), dlt_tensor_ndim(t), is_param,
                  e[i].name, dlt_dtype_name(e[i].dtype), e[i].ndim, e[i].is_param);
        }
    }
}

static exp_entry g_exp[1200];

/* Parameter counts (torchvision's figures) and the whole state layout of each depth. */
static void test_param_counts_and_layout(void) {
    static const struct {
        int depth;
        int64_t classes, params;
    } cases[] = {
        {50, 1000, 25557032}, {50, 10, 23528522}, {18, 1000, 11689512},
        {34, 1000, 21797672}, {101, 1000, 44549160},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dlt_module *m = NULL;
        CHECK_OK(dlt_resnet_create(g_ctx, cases[i].depth, cases[i].classes, &m));
        CHECK(dlt_module_param_count(m) == cases[i].params, "resnet%d(%lld): %lld parameters",
              cases[i].depth, (long long)cases[i].classes, (long long)dlt_module_param_count(m));
        int n = expected_layout(cases[i].depth, cases[i].classes, g_exp), np = 0;
        for (int k = 0; k < n; k++) np += g_exp[k].is_param;
        CHECK(dlt_module_num_params(m) == np, "resnet%d: %d parameter tensors, expected %d",
              cases[i].depth, dlt_module_num_params(m), np);
        CHECK(strcmp(dlt_module_kind(m), "resnet") == 0);
        char what[48];
        snprintf(what, sizeof what, "resnet%d(%lld)", cases[i].depth, (long long)cases[i].classes);
        check_layout(m, g_exp, n, what);
        if (cases[i].depth == 50)
            CHECK(dlt_module_num_params(m) == 161 && dlt_module_num_state(m) == 320, "%d params, %d state",
                  dlt_module_num_params(m), dlt_module_num_state(m));
        dlt_module_destroy(m);
    }
}

static void test_state_names(void) {
    /* spot checks written out by hand */
    dlt_module *m = NULL;
    CHECK_OK(dlt_resnet50_create(g_ctx, 1000, &m));
    const char *name;
    dlt_tensor *t;
    int32_t is_param;
    CHECK_OK(dlt_module_state_entry(m, 0, &name, &t, &is_param));
    CHECK(strcmp(name, "conv1.weight") == 0 && is_param == 1 && dlt_tensor_dim(t, 3) == 7);
    CHECK_OK(dlt_module_state_entry(m, 5, &name, &t, &is_param));
    CHECK(strcmp(name, "bn1.num_batches_tracked") == 0 && is_param == 0 &&
          dlt_tensor_dtype(t) == DLT_I64 && dlt_tensor_ndim(t) == 0 && dlt_tensor_numel(t) == 1);
    CHECK_OK(dlt_module_state_entry(m, 319, &name, &t, &is_param));
    CHECK(strcmp(name, "fc.bias") == 0 && dlt_tensor_dim(t, 0) == 1000);
    t = find(m, "layer1.0.downsample.0.weight");
    REQUIRE(t);
    CHECK(dlt_tensor_dim(t, 0) == 256 && dlt_tensor_dim(t, 1) == 64 && dlt_tensor_dim(t, 2) == 1);
    t = find(m, "layer4.2.bn3.running_var");
    REQUIRE(t);
    CHECK(dlt_tensor_dim(t, 0) == 2048);
    dlt_tensor *none = NULL;
    CHECK_STATUS(dlt_module_find(m, "layer1.1.downsample.0.weight", &none), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "layer1.1.downsample.0.weight") != NULL, "%s", dlt_last_error());
    dlt_module_destroy(m);
}

/* ---- fixtures written by gen_resnet_fixture.py ---- */

static void check_fixture(const char *file, int depth, int64_t classes) {
    const char *root = getenv("DLT_SOURCE_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/%s", root ? root : ".", file);
    FILE *f = fopen(path, "r");
    if (!f) SKIP("fixture %.150s not present (run tests/fixtures/gen_resnet_fixture.py with torch)", path);
    dlt_module *m = NULL;
    CHECK_OK(dlt_resnet_create(g_ctx, depth, classes, &m));
    char line[512];
    int i = 0;
    int64_t nparams = 0;
    while (fgets(line, sizeof line, f)) {
        char name[256], dtype[32], shape[128];
        if (sscanf(line, "%255s %31s %127s", name, dtype, shape) != 3) continue;
        const char *mname = NULL;
        dlt_tensor *t = NULL;
        int32_t is_param = 0;
        if (dlt_module_state_entry(m, i, &mname, &t, &is_param) != DLT_OK) {
            CHECK(0, "%s: the model has no entry %d ('%s' in the fixture)", file, i, name);
            break;
        }
        CHECK(strcmp(mname, name) == 0, "%s: entry %d is '%s', torchvision has '%s'", file, i, mname, name);
        int32_t want = strcmp(dtype, "float32") == 0 ? DLT_F32 : strcmp(dtype, "int64") == 0 ? DLT_I64 : -1;
        CHECK(dlt_tensor_dtype(t) == want, "%s: '%s' is %s, torchvision has %s", file, name,
              dlt_dtype_name(dlt_tensor_dtype(t)), dtype);
        int64_t dims[8];
        int nd = 0;
        if (strcmp(shape, "-") != 0) {
            char *p = shape;
            while (*p && nd < 8) {
                dims[nd++] = strtoll(p, &p, 10);
                if (*p == ',') p++;
            }
        }
        int ok = nd == dlt_tensor_ndim(t);
        int64_t numel = 1;
        for (int d = 0; ok && d < nd; d++) ok = dims[d] == dlt_tensor_dim(t, d), numel *= dims[d];
        CHECK(ok, "%s: '%s' shape differs from torchvision's %s", file, name, shape);
        if (want == DLT_F32 && !strstr(name, "running_")) nparams += numel;
        i++;
    }
    fclose(f);
    CHECK(i == dlt_module_num_state(m), "%s: %d fixture lines, %d model entries", file, i,
          dlt_module_num_state(m));
    CHECK(nparams == dlt_module_param_count(m), "%s: fixture parameters %lld vs %lld", file,
          (long long)nparams, (long long)dlt_module_param_count(m));
    dlt_module_destroy(m);
}
static void test_fixture_resnet50_1000(void) { check_fixture("resnet50_1000.txt", 50, 1000); }
static void test_fixture_resnet50_10(void) { check_fixture("resnet50_10.txt", 50, 10); }
static void test_fixture_resnet18_1000(void) { check_fixture("resnet18_1000.txt", 18, 1000); }

/* ---- initialisation ---- */

static void test_init_statistics(void) {
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 1234));
    dlt_module *m = NULL;
    CHECK_OK(dlt_resnet50_create(g_ctx, 1000, &m));
    int convs = 0, bns = 0;
    for (int32_t i = 0; i < dlt_module_num_state(m); i++) {
        const char *name;
        dlt_tensor *t;
        int32_t is_param;
        CHECK_OK(dlt_module_state_entry(m, i, &name, &t, &is_param));
        CHECK(dlt_tensor_requires_grad(t) == is_param, "%s requires_grad", name);
        int64_t n = dlt_tensor_numel(t);
        if (dlt_tensor_ndim(t) == 4) { /* conv: N(0, 2/fan_out), fan_out = out*kh*kw */
            double *v = read_d(t);
            double fan_out = (double)dlt_tensor_dim(t, 0) * dlt_tensor_dim(t, 2) * dlt_tensor_dim(t, 3);
            double sd = sqrt(2.0 / fan_out), s = 0, s2 = 0, s4 = 0;
            for (int64_t k = 0; k < n; k++) s += v[k];
            double mean = s / n;
            for (int64_t k = 0; k < n; k++) {
                double d = v[k] - mean;
                s2 += d * d;
                s4 += d * d * d * d;
            }
            double var = s2 / (n - 1), kurt = (s4 / n) / (var * var);
            /* 5-sigma sampling bounds: mean sd/sqrt(n); std sd/sqrt(2n) */
            CHECK(fabs(mean) < 5 * sd / sqrt((double)n), "%s mean %g (sd %g, n %lld)", name, mean, sd, (long long)n);
            CHECK(fabs(sqrt(var) - sd) < 5 * sd / sqrt(2.0 * n), "%s std %g, expected %g", name, sqrt(var), sd);
            if (n > 5000) CHECK(fabs(kurt - 3) < 0.3, "%s kurtosis %g (normal: 3)", name, kurt);
            free(v);
            convs++;
        } else if (strstr(name, "bn") || strstr(name, "downsample.1")) {
            double *v = read_d(t);
            double want = strstr(name, ".weight") || strstr(name, "running_var") ? 1.0 : 0.0;
            int ok = 1;
            for (int64_t k = 0; k < n; k++) ok &= v[k] == want;
            CHECK(ok, "%s is not all %g", name, want);
            free(v);
            bns += strstr(name, "num_batches_tracked") != NULL;
        }
    }
    CHECK(convs == 53 && bns == 53, "%d convs, %d BNs", convs, bns);
    /* fc: U(-1/sqrt(2048), 1/sqrt(2048)) for weight and bias: bounds, mean, variance b^2/3 */
    const char *fc[2] = {"fc.weight", "fc.bias"};
    const double b = 1 / sqrt(2048.0);
    for (int j = 0; j < 2; j++) {
        dlt_tensor *t = find(m, fc[j]);
        REQUIRE(t);
        double *v = read_d(t);
        int64_t n = dlt_tensor_numel(t);
        double s = 0, s2 = 0, lo = 1, hi = -1;
        for (int64_t k = 0; k < n; k++) {
            s += v[k];
            s2 += v[k] * v[k];
            lo = fmin(lo, v[k]);
            hi = fmax(hi, v[k]);
        }
        double mean = s / n, var = s2 / n - mean * mean, sdu = b / sqrt(3.0);
        CHECK(lo >= -b && hi < b, "%s range [%g, %g] outside +-%g", fc[j], lo, hi, b);
        CHECK(lo < -0.9 * b && hi > 0.9 * b, "%s range [%g, %g] does not fill +-%g", fc[j], lo, hi, b);
        CHECK(fabs(mean) < 5 * sdu / sqrt((double)n), "%s mean %g", fc[j], mean);
        /* var of a uniform: b^2/3; its sampling sd is b^2*sqrt(4/45)/sqrt(n) */
        CHECK(fabs(var - b * b / 3) < 5 * b * b * sqrt(4.0 / 45.0) / sqrt((double)n), "%s var %g, expected %g",
              fc[j], var, b * b / 3);
        free(v);
    }
    /* same seed, same weights; another seed, other weights */
    dlt_module *m1 = NULL, *m2 = NULL, *m3 = NULL;
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 1234));
    CHECK_OK(dlt_resnet_create(g_ctx, 18, 10, &m1));
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 1234));
    CHECK_OK(dlt_resnet_create(g_ctx, 18, 10, &m2));
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 99));
    CHECK_OK(dlt_resnet_create(g_ctx, 18, 10, &m3));
    const char *nm[2] = {"layer3.1.conv2.weight", "fc.bias"};
    for (int j = 0; j < 2; j++) {
        int64_t n = dlt_tensor_numel(find(m1, nm[j]));
        double *a = findv(m1, nm[j]), *b2 = findv(m2, nm[j]), *c = findv(m3, nm[j]);
        CHECK(memcmp(a, b2, (size_t)n * sizeof(double)) == 0, "%s: same seed gives other weights", nm[j]);
        CHECK(memcmp(a, c, (size_t)n * sizeof(double)) != 0, "%s: another seed gives the same weights", nm[j]);
        free(a), free(b2), free(c);
    }
    dlt_module_destroy(m1);
    dlt_module_destroy(m);
    dlt_module_destroy(m2);
    dlt_module_destroy(m3);
}

/* ---- float64 reference forward of torchvision's ResNet, driven by state names ---- */

typedef struct rt {
    double *v;
    int64_t n, c, h, w;
} rt;

typedef struct ref_ctx {
    const dlt_module *m;
    int training;
    /* expected running stats after a training forward */
    char names[128][96];
    double *stats[128];
    int64_t nstats[128];
    int n;
} ref_ctx;

static rt r_conv(ref_ctx *R, rt x, const char *name, int64_t stride) {
    char s[96];
    snprintf(s, sizeof s, "%s.weight", name);
    dlt_tensor *t = find(R->m, s);
    double *w = read_d(t);
    int64_t K = dlt_tensor_dim(t, 0), k = dlt_tensor_dim(t, 2), pad = k / 2;
    rt y = {NULL, x.n, K, ref_conv_out(x.h, k, stride, pad, 1), ref_conv_out(x.w, k, stride, pad, 1)};
    y.v = malloc((size_t)(y.n * y.c * y.h * y.w) * sizeof(double));
    ref_conv2d(x.v, x.n, x.c, x.h, x.w, w, K, k, k, NULL, stride, stride, pad, pad, 1, 1, 1, y.v);
    free(w);
    return y;
}
/* bn(x) [+ residual] [then ReLU]; consumes nothing */
static rt r_bn(ref_ctx *R, rt x, const char *name, const double *residual, int relu) {
    char s[4][96];
    const char *parts[4] = {"weight", "bias", "running_mean", "running_var"};
    double *p[4];
    for (int j = 0; j < 4; j++) {
        snprintf(s[j], sizeof s[j], "%s.%s", name, parts[j]);
        p[j] = findv(R->m, s[j]);
    }
    rt y = x;
    y.v = malloc((size_t)(x.n * x.c * x.h * x.w) * sizeof(double));
    if (R->training) {
        double *mean = malloc((size_t)x.c * sizeof(double)), *var = malloc((size_t)x.c * sizeof(double));
        ref_batchnorm_train(x.v, x.n, x.c, x.h, x.w, p[0], p[1], residual, relu, 1e-5, y.v, mean, var);
        ref_batchnorm_running_update(p[2], p[3], mean, var, x.c, x.n * x.h * x.w, 0.1);
        for (int j = 2; j < 4; j++) { /* expected new running stats */
            snprintf(R->names[R->n], sizeof R->names[0], "%s", s[j]);
            R->stats[R->n] = p[j];
            R->nstats[R->n++] = x.c;
            p[j] = NULL;
        }
        free(mean);
        free(var);
    } else {
        ref_batchnorm_eval(x.v, x.n, x.c, x.h, x.w, p[0], p[1], p[2], p[3], residual, relu, 1e-5, y.v);
    }
    for (int j = 0; j < 4; j++) free(p[j]);
    return y;
}
/* one block under prefix p ("layer1.0", or "" for a standalone block) */
static rt r_block(ref_ctx *R, rt x, const char *p, int bottleneck, int64_t stride) {
    char s[96], pre[64];
    snprintf(pre, sizeof pre, "%s%s", p, p[0] ? "." : "");
    rt a, b, c, d;
    snprintf(s, sizeof s, "%sconv1", pre);
    a = r_conv(R, x, s, bottleneck ? 1 : stride); /* V1.5: the stride is on the 3x3 conv */
    snprintf(s, sizeof s, "%sbn1", pre);
    b = r_bn(R, a, s, NULL, 1);
    free(a.v);
    snprintf(s, sizeof s, "%sconv2", pre);
    a = r_conv(R, b, s, bottleneck ? stride : 1);
    free(b.v);
    if (bottleneck) {
        snprintf(s, sizeof s, "%sbn2", pre);
        b = r_bn(R, a, s, NULL, 1);
        free(a.v);
        snprintf(s, sizeof s, "%sconv3", pre);
        a = r_conv(R, b, s, 1);
        free(b.v);
    }
    /* identity: downsample when the state has one */
    snprintf(s, sizeof s, "%sdownsample.0.weight", pre);
    dlt_tensor *ds = NULL;
    int has_ds = dlt_module_find(R->m, s, &ds) == DLT_OK;
    rt id = x;
    if (has_ds) {
        snprintf(s, sizeof s, "%sdownsample.0", pre);
        c = r_conv(R, x, s, stride);
        snprintf(s, sizeof s, "%sdownsample.1", pre);
        id = r_bn(R, c, s, NULL, 0);
        free(c.v);
    }
    snprintf(s, sizeof s, "%sbn%d", pre, bottleneck ? 3 : 2);
    d = r_bn(R, a, s, id.v, 1);
    free(a.v);
    if (has_ds) free(id.v);
    return d;
}
/* logits [N, classes] of the model (as a flat array) */
static double *ref_resnet(ref_ctx *R, const double *xin, int64_t N, int64_t H, int64_t W, int bottleneck,
                          const int *blocks, int64_t *classes) {
    rt x = {(double *)xin, N, 3, H, W};
    rt a = r_conv(R, x, "conv1", 2);
    rt b = r_bn(R, a, "bn1", NULL, 1);
    free(a.v);
    rt p = {NULL, N, 64, ref_conv_out(b.h, 3, 2, 1, 1), ref_conv_out(b.w, 3, 2, 1, 1)};
    p.v = malloc((size_t)(p.n * p.c * p.h * p.w) * sizeof(double));
    int64_t *idx = malloc((size_t)(p.n * p.c * p.h * p.w) * sizeof(int64_t));
    ref_max_pool2d(b.v, N, 64, b.h, b.w, 3, 3, 2, 2, 1, 1, p.v, idx);
    free(idx);
    free(b.v);
    for (int l = 0; l < 4; l++)
        for (int k = 0; k < blocks[l]; k++) {
            char s[32];
            snprintf(s, sizeof s, "layer%d.%d", l + 1, k);
            rt y = r_block(R, p, s, bottleneck, k == 0 && l > 0 ? 2 : 1);
            free(p.v);
            p = y;
        }
    double *g = malloc((size_t)(N * p.c) * sizeof(double));
    ref_global_avg_pool2d(p.v, N, p.c, p.h, p.w, g);
    free(p.v);
    dlt_tensor *fw = find(R->m, "fc.weight");
    double *w = read_d(fw), *bias = findv(R->m, "fc.bias");
    *classes = dlt_tensor_dim(fw, 0);
    double *y = malloc((size_t)(N * *classes) * sizeof(double));
    ref_linear(g, N, dlt_tensor_dim(fw, 1), w, *classes, bias, y);
    free(g), free(w), free(bias);
    return y;
}

static void check_resnet_forward(int depth, int64_t classes, int64_t N, int64_t H) {
    static const int B18[4] = {2, 2, 2, 2}, B50[4] = {3, 4, 6, 3};
    CHECK_OK(dlt_ctx_set_seed(g_ctx, (uint64_t)depth));
    dlt_module *m = NULL;
    CHECK_OK(dlt_resnet_create(g_ctx, depth, classes, &m));
    seed(7);
    int64_t xs[4] = {N, 3, H, H};
    double *xv = NULL;
    dlt_tensor *x = rand_tensor(xs, 4, 0.0, 1.0, &xv);
    for (int training = 1; training >= 0; training--) {
        CHECK_OK(dlt_module_set_training(m, training));
        ref_ctx *R = calloc(1, sizeof *R);
        R->m = m;
        R->training = training;
        int64_t K = 0;
        double *want = ref_resnet(R, xv, N, H, H, depth >= 50, depth >= 50 ? B50 : B18, &K);
        dlt_tensor *y = NULL;
        CHECK_OK(dlt_module_forward(m, x, &y));
        CHECK(dlt_tensor_ndim(y) == 2 && dlt_tensor_dim(y, 0) == N && dlt_tensor_dim(y, 1) == classes &&
                  dlt_tensor_dtype(y) == DLT_F32,
              "logits shape");
        double *got = read_d(y);
        int finite = 1;
        for (int64_t i = 0; i < N * classes; i++) finite &= isfinite(got[i]);
        CHECK(finite, "resnet%d %s: logits not finite", depth, training ? "train" : "eval");
        double e = rel_err_d(got, want, N * classes);
        CHECK(e < 1e-4, "resnet%d %s: logits relative error %g", depth, training ? "train" : "eval", e);
        /* training: running stats moved as PyTorch moves them; eval: nothing to check here */
        double worst = 0;
        for (int i = 0; i < R->n; i++) {
            double *v = findv(m, R->names[i]);
            double ei = rel_err_d(v, R->stats[i], R->nstats[i]);
            if (ei > worst) worst = ei;
            free(v);
            free(R->stats[i]);
        }
        CHECK(worst < 1e-4, "resnet%d: running statistics relative error %g", depth, worst);
        CHECK(!training || R->n == (depth >= 50 ? 106 : 40), "%d running stats compared", R->n);
        free(got), free(want), free(R);
        dlt_tensor_release(y);
    }
    free(xv);
    dlt_tensor_release(x);
    dlt_module_destroy(m);
}
static void test_resnet18_forward_reference(void) { check_resnet_forward(18, 10, 2, 48); }
static void test_resnet50_forward_reference(void) { check_resnet_forward(50, 1000, 2, 48); }

static void test_resnet50_forward_32(void) {
    /* CIFAR-sized input at batch 2: layer4 is 1x1, BN populations of 2 */
    dlt_module *m = NULL;
    CHECK_OK(dlt_resnet50_create(g_ctx, 10, &m));
    seed(3);
    int64_t xs[4] = {2, 3, 32, 32};
    dlt_tensor *x = rand_tensor(xs, 4, 0.0, 1.0, NULL);
    for (int training = 1; training >= 0; training--) {
        CHECK_OK(dlt_module_set_training(m, training));
        dlt_tensor *y = NULL;
        CHECK_OK(dlt_module_forward(m, x, &y));
        CHECK(dlt_tensor_dim(y, 0) == 2 && dlt_tensor_dim(y, 1) == 10);
        double *v = read_d(y);
        int finite = 1;
        for (int i = 0; i < 20; i++) finite &= isfinite(v[i]);
        CHECK(finite, "%s logits not finite", training ? "train" : "eval");
        free(v);
        dlt_tensor_release(y);
    }
    dlt_tensor_release(x);
    dlt_module_destroy(m);
}

/* ---- blocks ---- */

static void test_blocks(void) {
    static const struct {
        int bottleneck;
        int64_t in, planes, stride;
        int has_ds;
    } cases[] = {
        {1, 64, 64, 1, 1}, {1, 256, 64, 1, 0}, {1, 256, 128, 2, 1},
        {0, 64, 64, 1, 0}, {0, 64, 128, 2, 1}, {0, 32, 64, 1, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dlt_module *m = NULL;
        if (cases[c].bottleneck)
            CHECK_OK(dlt_bottleneck_create(g_ctx, cases[c].in, cases[c].planes, cases[c].stride, &m));
        else
            CHECK_OK(dlt_basic_block_create(g_ctx, cases[c].in, cases[c].planes, cases[c].stride, &m));
        CHECK(strcmp(dlt_module_kind(m), cases[c].bottleneck ? "bottleneck" : "basic_block") == 0);
        const int per = cases[c].bottleneck ? 3 : 2;
        CHECK(dlt_module_num_state(m) == per * 6 + (cases[c].has_ds ? 6 : 0), "case %zu: %d entries", c,
              dlt_module_num_state(m));
        dlt_tensor *t = NULL;
        dlt_status ds = dlt_module_find(m, "downsample.1.running_mean", &t);
        CHECK((ds == DLT_OK) == cases[c].has_ds, "case %zu: downsample presence", c);
        /* random BN parameters and running stats so that every term matters */
        for (int32_t i = 0; i < dlt_module_num_state(m); i++) {
            const char *name;
            CHECK_OK(dlt_module_state_entry(m, i, &name, &t, NULL));
            if (dlt_tensor_ndim(t) != 1) continue;
            int var = strstr(name, "running_var") != NULL, w = strstr(name, ".weight") != NULL;
            CHECK_OK(dlt_tensor_rand_uniform(t, var || w ? 0.5 : -0.5, var || w ? 1.5 : 0.5));
        }
        seed(11 + c);
        const int64_t N = 2, H = 7;
        int64_t xs[4] = {N, cases[c].in, H, H};
        double *xv = NULL;
        dlt_tensor *x = rand_tensor(xs, 4, -1.0, 1.0, &xv);
        for (int training = 1; training >= 0; training--) {
            CHECK_OK(dlt_module_set_training(m, training));
            ref_ctx *R = calloc(1, sizeof *R);
            R->m = m;
            R->training = training;
            rt in = {xv, N, cases[c].in, H, H};
            rt want = r_block(R, in, "", cases[c].bottleneck, cases[c].stride);
            dlt_tensor *y = NULL;
            CHECK_OK(dlt_module_forward(m, x, &y));
            int64_t P = ref_conv_out(H, 3, cases[c].stride, 1, 1);
            const int64_t outc = cases[c].planes * (cases[c].bottleneck ? 4 : 1);
            CHECK(dlt_tensor_dim(y, 1) == outc && dlt_tensor_dim(y, 2) == P && dlt_tensor_dim(y, 3) == P,
                  "case %zu: output shape", c);
            double *got = read_d(y);
            double e = rel_err_d(got, want.v, N * outc * P * P);
            CHECK(e < 1e-5, "case %zu %s: block output relative error %g", c, training ? "train" : "eval", e);
            for (int i = 0; i < R->n; i++) free(R->stats[i]);
            free(got), free(want.v), free(R);
            dlt_tensor_release(y);
        }
        free(xv);
        dlt_tensor_release(x);
        dlt_module_destroy(m);
    }
}

/* ---- train/eval, running statistics, num_batches_tracked ---- */

static void test_batchnorm_running_stats(void) {
    dlt_module *bn = NULL;
    CHECK_OK(dlt_batchnorm2d_create(g_ctx, 3, 1e-5, 0.1, &bn));
    CHECK(strcmp(dlt_module_kind(bn), "batchnorm2d") == 0 && dlt_module_is_training(bn) == 1);
    seed(5);
    int64_t xs[4] = {4, 3, 5, 5};
    double *xv = NULL;
    dlt_tensor *x = rand_tensor(xs, 4, -2.0, 3.0, &xv);
    dlt_tensor *y = NULL;
    CHECK_OK(dlt_module_forward(bn, x, &y));
    double rm[3] = {0, 0, 0}, rv[3] = {1, 1, 1}, mean[3], var[3];
    double *want = malloc(300 * sizeof(double));
    ref_batchnorm_train(xv, 4, 3, 5, 5, NULL, NULL, NULL, 0, 1e-5, want, mean, var);
    ref_batchnorm_running_update(rm, rv, mean, var, 3, 100, 0.1);
    double *got = read_d(y), *grm = findv(bn, "running_mean"), *grv = findv(bn, "running_var");
    CHECK(rel_err_d(got, want, 300) < 1e-5, "train output error %g", rel_err_d(got, want, 300));
    CHECK(rel_err_d(grm, rm, 3) < 1e-5 && rel_err_d(grv, rv, 3) < 1e-5, "running stats %g %g / %g %g",
          grm[0], rm[0], grv[0], rv[0]);
    CHECK(item(find(bn, "num_batches_tracked")) == 1);
    free(got), free(grm), free(grv);
    dlt_tensor_release(y);
    /* eval: normalises with the running stats and leaves them alone */
    CHECK_OK(dlt_module_set_training(bn, 0));
    CHECK(dlt_module_is_training(bn) == 0);
    CHECK_OK(dlt_module_forward(bn, x, &y));
    ref_batchnorm_eval(xv, 4, 3, 5, 5, NULL, NULL, rm, rv, NULL, 0, 1e-5, want);
    got = read_d(y), grm = findv(bn, "running_mean"), grv = findv(bn, "running_var");
    CHECK(rel_err_d(got, want, 300) < 1e-5, "eval output error %g", rel_err_d(got, want, 300));
    CHECK(rel_err_d(grm, rm, 3) < 1e-6 && rel_err_d(grv, rv, 3) < 1e-6, "eval changed running stats");
    CHECK(item(find(bn, "num_batches_tracked")) == 1, "eval counted a batch");
    free(got), free(grm), free(grv), free(want), free(xv);
    dlt_tensor_release(y);
    dlt_tensor_release(x);
    dlt_module_destroy(bn);
}

static void test_set_training_recursion(void) {
    dlt_module *outer = NULL, *inner = NULL, *bn = NULL, *relu = NULL;
    CHECK_OK(dlt_sequential_create(g_ctx, &outer));
    CHECK_OK(dlt_sequential_create(g_ctx, &inner));
    CHECK_OK(dlt_batchnorm2d_create(g_ctx, 2, 1e-5, 0.1, &bn));
    CHECK_OK(dlt_relu_create(g_ctx, &relu));
    CHECK_OK(dlt_sequential_append(inner, "bn", bn));
    CHECK_OK(dlt_sequential_append(outer, NULL, relu));
    CHECK_OK(dlt_sequential_append(outer, "inner", inner));
    const char *name;
    CHECK_OK(dlt_module_state_entry(outer, 2, &name, NULL, NULL));
    CHECK(strcmp(name, "inner.bn.running_mean") == 0, "%s", name);
    seed(9);
    int64_t xs[4] = {3, 2, 4, 4};
    dlt_tensor *x = rand_tensor(xs, 4, 1.0, 2.0, NULL), *y = NULL;
    CHECK_OK(dlt_module_set_training(outer, 0));
    CHECK(dlt_module_is_training(outer) == 0 && dlt_module_is_training(inner) == 0 &&
          dlt_module_is_training(bn) == 0);
    CHECK_OK(dlt_module_forward(outer, x, &y));
    dlt_tensor_release(y);
    CHECK(item(find(outer, "inner.bn.num_batches_tracked")) == 0);
    double *rm = findv(outer, "inner.bn.running_mean");
    CHECK(rm[0] == 0 && rm[1] == 0, "eval forward moved the running mean");
    free(rm);
    CHECK_OK(dlt_module_set_training(outer, 1));
    CHECK(dlt_module_is_training(bn) == 1);
    CHECK_OK(dlt_module_forward(outer, x, &y));
    dlt_tensor_release(y);
    rm = findv(outer, "inner.bn.running_mean");
    CHECK(rm[0] > 0.1 && rm[1] > 0.1, "training forward did not move the running mean (%g)", rm[0]);
    free(rm);
    CHECK(item(find(outer, "inner.bn.num_batches_tracked")) == 1);
    dlt_tensor_release(x);
    dlt_module_destroy(outer);
}

static void test_num_batches_tracked(void) {
    dlt_module *m = NULL;
    CHECK_OK(dlt_resnet_create(g_ctx, 18, 10, &m));
    seed(21);
    int64_t xs[4] = {2, 3, 32, 32};
    dlt_tensor *x = rand_tensor(xs, 4, 0.0, 1.0, NULL), *y = NULL;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(dlt_module_forward(m, x, &y));
        dlt_tensor_release(y);
    }
    CHECK_OK(dlt_module_set_training(m, 0));
    CHECK_OK(dlt_module_forward(m, x, &y));
    dlt_tensor_release(y);
    int n = 0;
    for (int32_t i = 0; i < dlt_module_num_state(m); i++) {
        const char *name;
        dlt_tensor *t;
        CHECK_OK(dlt_module_state_entry(m, i, &name, &t, NULL));
        if (!strstr(name, "num_batches_tracked")) continue;
        n++;
        CHECK(dlt_tensor_dtype(t) == DLT_I64 && dlt_tensor_ndim(t) == 0);
        CHECK(item(t) == 3, "%s = %g after 3 training forwards and 1 eval", name, item(t));
    }
    CHECK(n == 20, "%d BatchNorms", n);
    /* a value written from outside is the base of later counts */
    dlt_tensor *t = find(m, "layer2.0.downsample.1.num_batches_tracked");
    REQUIRE(t);
    CHECK_OK(dlt_tensor_fill(t, 100));
    CHECK_OK(dlt_module_set_training(m, 1));
    CHECK_OK(dlt_module_forward(m, x, &y));
    dlt_tensor_release(y);
    CHECK(item(find(m, "layer2.0.downsample.1.num_batches_tracked")) == 101);
    CHECK(item(find(m, "bn1.num_batches_tracked")) == 4);
    int64_t raw = 0;
    CHECK_OK(dlt_tensor_copy_to_host(find(m, "layer4.1.bn2.num_batches_tracked"), &raw, 8));
    CHECK(raw == 4, "raw int64 %lld", (long long)raw);
    dlt_tensor_release(x);
    dlt_module_destroy(m);
}

/* ---- a network built by hand ---- */

static dlt_module *custom_net(void) {
    dlt_module *seq = NULL, *c = NULL;
    if (dlt_sequential_create(g_ctx, &seq) != DLT_OK) return NULL;
    dlt_status st = dlt_conv2d_create(g_ctx, 3, 8, 3, 3, 1, 1, 1, 1, 1, &c);
    if (st == DLT_OK) st = dlt_sequential_append(seq, NULL, c);
    if (st == DLT_OK) st = dlt_batchnorm2d_create(g_ctx, 8, 1e-5, 0.1, &c);
    if (st == DLT_OK) st = dlt_sequential_append(seq, NULL, c);
    if (st == DLT_OK) st = dlt_relu_create(g_ctx, &c);
    if (st == DLT_OK) st = dlt_sequential_append(seq, NULL, c);
    if (st == DLT_OK) st = dlt_max_pool2d_create(g_ctx, 2, 2, 0, &c);
    if (st == DLT_OK) st = dlt_sequential_append(seq, NULL, c);
    if (st == DLT_OK) st = dlt_flatten_create(g_ctx, &c);
    if (st == DLT_OK) st = dlt_sequential_append(seq, NULL, c);
    if (st == DLT_OK) st = dlt_linear_create(g_ctx, 8 * 4 * 4, 5, 1, &c);
    if (st == DLT_OK) st = dlt_sequential_append(seq, NULL, c);
    if (st != DLT_OK) {
        printf("# custom_net: %s\n", dlt_last_error());
        dlt_module_destroy(seq);
        return NULL;
    }
    return seq;
}

static void test_custom_network_trains(void) {
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 5));
    dlt_module *m = custom_net();
    REQUIRE(m);
    static const char *names[] = {"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                  "1.running_var", "1.num_batches_tracked", "5.weight", "5.bias"};
    REQUIRE(dlt_module_num_state(m) == 9);
    for (int i = 0; i < 9; i++) {
        const char *name;
        CHECK_OK(dlt_module_state_entry(m, i, &name, NULL, NULL));
        CHECK(strcmp(name, names[i]) == 0, "entry %d is %s, expected %s", i, name, names[i]);
    }
    /* conv bias starts at 0 (torchvision's convention for conv biases) */
    double *cb = findv(m, "0.bias");
    CHECK(cb[0] == 0 && cb[7] == 0);
    free(cb);
    dlt_tensor *params[4];
    int32_t np = 0;
    CHECK_OK(dlt_module_params(m, params, 4, &np));
    REQUIRE(np == 6, "%d params", np);
    dlt_tensor *all[6];
    CHECK_OK(dlt_module_params(m, all, 6, NULL));
    CHECK(all[0] == params[0] && all[3] == params[3]);
    seed(77);
    int64_t xs[4] = {8, 3, 8, 8};
    dlt_tensor *x = rand_tensor(xs, 4, -1.0, 1.0, NULL);
    int32_t tv[8] = {0, 1, 2, 3, 4, 0, 1, 2};
    int64_t ts = 8;
    dlt_tensor *tg = NULL;
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I32, &ts, 1, 0, tv, sizeof tv, &tg));
    double first = 0, last = 0;
    for (int step = 0; step < 15; step++) {
        CHECK_OK(dlt_zero_grad(all, 6, 1));
        dlt_tensor *y = NULL, *loss = NULL;
        CHECK_OK(dlt_module_forward(m, x, &y));
        CHECK_OK(dlt_cross_entropy(y, tg, -100, DLT_REDUCTION_MEAN, &loss));
        CHECK_OK(dlt_backward(loss, NULL));
        double l = item(loss);
        if (step == 0) first = l;
        last = l;
        dlt_tensor_release(y);
        dlt_tensor_release(loss);
        for (int i = 0; i < 6; i++) { /* p -= 0.5 * grad, by hand */
            dlt_tensor *g = dlt_tensor_grad(all[i]);
            REQUIRE(g, "parameter %d has no gradient", i);
            int64_t n = dlt_tensor_numel(all[i]);
            float *pv = th_read_f32(all[i]), *gv = th_read_f32(g);
            double gn = 0;
            int finite = 1;
            for (int64_t k = 0; k < n; k++) {
                finite &= isfinite(gv[k]);
                gn += (double)gv[k] * gv[k];
                pv[k] -= 0.5f * gv[k];
            }
            CHECK(finite && gn > 0, "parameter %d: gradient norm %g", i, sqrt(gn));
            CHECK_OK(dlt_tensor_copy_from_host(all[i], pv, (size_t)n * sizeof(float)));
            free(pv), free(gv);
        }
    }
    CHECK(last < 0.5 * first, "loss %g -> %g does not decrease", first, last);
    CHECK(item(find(m, "1.num_batches_tracked")) == 15);
    int64_t live = -1;
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live));
    CHECK(live == 0, "%lld tape nodes alive after backward", (long long)live);
    dlt_tensor_release(x);
    dlt_tensor_release(tg);
    dlt_module_destroy(m);
}

/* A Sequential runs BN followed by ReLU as one fused call: same values and gradients as
 * the two layers apart (the ReLU hidden in an inner Sequential is not fused). */
static void test_sequential_bn_relu_fusion(void) {
    dlt_module *a = NULL, *b = NULL, *inner = NULL, *c = NULL;
    CHECK_OK(dlt_sequential_create(g_ctx, &a));
    CHECK_OK(dlt_sequential_create(g_ctx, &b));
    CHECK_OK(dlt_sequential_create(g_ctx, &inner));
    CHECK_OK(dlt_batchnorm2d_create(g_ctx, 4, 1e-5, 0.1, &c));
    CHECK_OK(dlt_sequential_append(a, NULL, c));
    CHECK_OK(dlt_relu_create(g_ctx, &c));
    CHECK_OK(dlt_sequential_append(a, NULL, c));
    CHECK_OK(dlt_batchnorm2d_create(g_ctx, 4, 1e-5, 0.1, &c));
    CHECK_OK(dlt_sequential_append(b, NULL, c));
    CHECK_OK(dlt_relu_create(g_ctx, &c));
    CHECK_OK(dlt_sequential_append(inner, NULL, c));
    CHECK_OK(dlt_sequential_append(b, NULL, inner));
    seed(31);
    int64_t xs[4] = {2, 4, 3, 3};
    dlt_tensor *x = rand_tensor(xs, 4, -1.0, 1.0, NULL);
    CHECK_OK(dlt_tensor_set_requires_grad(x, 1));
    double *out[2], *dx[2], *dg[2];
    dlt_module *nets[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        dlt_tensor *y = NULL, *s = NULL;
        CHECK_OK(dlt_module_forward(nets[k], x, &y));
        CHECK_OK(dlt_sum(y, &s));
        CHECK_OK(dlt_backward(s, NULL));
        out[k] = read_d(y);
        dx[k] = read_d(dlt_tensor_grad(x));
        dg[k] = read_d(dlt_tensor_grad(find(nets[k], "0.weight")));
        CHECK_OK(dlt_zero_grad(&x, 1, 1));
        dlt_tensor_release(y);
        dlt_tensor_release(s);
    }
    CHECK(rel_err_d(out[0], out[1], 72) < 1e-6, "fused output differs");
    CHECK(rel_err_d(dx[0], dx[1], 72) < 1e-5, "fused dx differs: %g", rel_err_d(dx[0], dx[1], 72));
    CHECK(rel_err_d(dg[0], dg[1], 4) < 1e-5, "fused dgamma differs");
    int zeros = 0;
    for (int i = 0; i < 72; i++) zeros += out[0][i] == 0;
    CHECK(zeros > 10 && zeros < 62, "ReLU was not applied (%d zeros)", zeros);
    for (int k = 0; k < 2; k++) free(out[k]), free(dx[k]), free(dg[k]);
    dlt_tensor_release(x);
    dlt_module_destroy(a);
    dlt_module_destroy(b);
}

/* ---- the parameter arena and memory formats ---- */

static void test_param_arena(void) {
    dlt_module *m = NULL;
    CHECK_OK(dlt_resnet_create(g_ctx, 18, 10, &m));
    dlt_tensor *p[161];
    int32_t n = 0;
    CHECK_OK(dlt_module_params(m, p, 161, &n));
    REQUIRE(n == 62, "%d parameters", n);
    size_t prev_end = 0;
    for (int32_t i = 0; i < n; i++) {
        CHECK(p[i]->storage == p[0]->storage, "parameter %d is in another storage", i);
        CHECK(p[i]->offset % 256 == 0, "parameter %d at offset %zu", i, p[i]->offset);
        CHECK(p[i]->offset >= prev_end, "parameter %d overlaps the previous one", i);
        CHECK(p[i]->offset - prev_end < 256, "parameter %d leaves a gap of %zu", i, p[i]->offset - prev_end);
        CHECK(dlt_tensor_requires_grad(p[i]));
        prev_end = p[i]->offset + dlt_tensor_nbytes(p[i]);
    }
    CHECK(p[0]->storage->nbytes == prev_end, "arena of %zu bytes, parameters end at %zu",
          p[0]->storage->nbytes, prev_end);
    /* values survived the move: BN weights are ones, conv weights have the init's spread */
    double *w = findv(m, "layer1.0.bn1.weight");
    CHECK(w[0] == 1 && w[63] == 1);
    free(w);
    /* buffers are not in the arena */
    CHECK(find(m, "bn1.running_mean")->storage != p[0]->storage);
    dlt_module_destroy(m);
    /* a standalone block is packed too */
    CHECK_OK(dlt_bottleneck_create(g_ctx, 64, 16, 2, &m));
    CHECK_OK(dlt_module_params(m, p, 161, &n));
    for (int32_t i = 1; i < n; i++) CHECK(p[i]->storage == p[0]->storage);
    dlt_module_destroy(m);
}

static void test_set_format(void) {
    dlt_module *m = NULL;
    CHECK_OK(dlt_bottleneck_create(g_ctx, 32, 16, 2, &m));
    CHECK_OK(dlt_module_set_training(m, 0));
    for (int32_t i = 0; i < dlt_module_num_state(m); i++) {
        dlt_tensor *t;
        CHECK_OK(dlt_module_state_entry(m, i, NULL, &t, NULL));
        if (dlt_tensor_ndim(t) == 1) CHECK_OK(dlt_tensor_rand_uniform(t, 0.5, 1.5));
    }
    seed(41);
    int64_t xs[4] = {2, 32, 9, 9};
    dlt_tensor *x = rand_tensor(xs, 4, -1.0, 1.0, NULL), *y0 = NULL, *y1 = NULL, *xcl = NULL;
    CHECK_OK(dlt_module_forward(m, x, &y0));
    /* a backward first, so that gradient buffers exist and must follow */
    dlt_tensor *s = NULL;
    CHECK_OK(dlt_sum(y0, &s));
    CHECK_OK(dlt_backward(s, NULL));
    dlt_tensor_release(s);
    dlt_tensor *w = find(m, "conv2.weight");
    REQUIRE(w);
    double *before = read_d(w), *gbefore = read_d(dlt_tensor_grad(w));
    void *data = dlt__data(w);
    unsigned char raw[16 * 16 * 9 * 4];
    CHECK_OK(dlt_tensor_copy_to_host(w, raw, sizeof raw));
    CHECK_OK(dlt_module_set_format(m, DLT_FORMAT_CHANNELS_LAST));
    CHECK(dlt_tensor_format(w) == DLT_FORMAT_CHANNELS_LAST && dlt__data(w) == data,
          "converted out of place");
    CHECK(dlt_tensor_format(dlt_tensor_grad(w)) == DLT_FORMAT_CHANNELS_LAST, "gradient format");
    double *after = read_d(w), *gafter = read_d(dlt_tensor_grad(w));
    CHECK(memcmp(before, after, 16 * 16 * 9 * sizeof(double)) == 0, "values changed");
    CHECK(memcmp(gbefore, gafter, 16 * 16 * 9 * sizeof(double)) == 0, "gradient values changed");
    unsigned char raw2[sizeof raw];
    CHECK_OK(dlt_tensor_copy_to_host(w, raw2, sizeof raw2));
    CHECK(memcmp(raw, raw2, sizeof raw) != 0, "memory order did not change");
    CHECK(dlt_tensor_format(find(m, "bn1.weight")) == DLT_FORMAT_CONTIGUOUS);
    CHECK_OK(dlt_tensor_to_format(x, DLT_FORMAT_CHANNELS_LAST, &xcl));
    CHECK_OK(dlt_module_forward(m, xcl, &y1));
    double *a = read_d(y0), *b = read_d(y1);
    int64_t n = dlt_tensor_numel(y0);
    CHECK(rel_err_d(b, a, n) < 1e-5, "channels-last forward differs: %g", rel_err_d(b, a, n));
    CHECK_OK(dlt_module_set_format(m, DLT_FORMAT_CONTIGUOUS));
    CHECK_OK(dlt_tensor_copy_to_host(w, raw2, sizeof raw2));
    CHECK(memcmp(raw, raw2, sizeof raw) == 0, "round trip changed the bytes");
    CHECK_STATUS(dlt_module_set_format(m, 7), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_set_format(NULL, 0), DLT_ERR_NULL_POINTER);
    free(before), free(after), free(gbefore), free(gafter), free(a), free(b);
    dlt_tensor_release(x), dlt_tensor_release(xcl), dlt_tensor_release(y0), dlt_tensor_release(y1);
    dlt_module_destroy(m);
}

/* ---- memory ---- */

static void test_forward_releases_memory(void) {
    dlt_module *m = NULL;
    CHECK_OK(dlt_resnet_create(g_ctx, 18, 10, &m));
    seed(2);
    int64_t xs[4] = {2, 3, 32, 32};
    dlt_tensor *x = rand_tensor(xs, 4, 0.0, 1.0, NULL), *y = NULL;
    uint64_t base = 0, now = 0, cnt0 = 0, cnt1 = 0;
    CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_ALLOCATED, &base));
    CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_ALLOC_COUNT, &cnt0));
    for (int grad = 0; grad < 2; grad++) {
        CHECK_OK(dlt_grad_set_enabled(g_ctx, grad, NULL));
        CHECK_OK(dlt_module_forward(m, x, &y));
        dlt_tensor_release(y);
        CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_ALLOCATED, &now));
        CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_ALLOC_COUNT, &cnt1));
        CHECK(now == base && cnt1 == cnt0, "grad %d: %llu bytes in %llu allocations left (was %llu in %llu)",
              grad, (unsigned long long)now, (unsigned long long)cnt1, (unsigned long long)base,
              (unsigned long long)cnt0);
        int64_t live = -1;
        CHECK_OK(dlt_tape_live_nodes(g_ctx, &live));
        CHECK(live == 0, "%lld tape nodes alive", (long long)live);
    }
    dlt_tensor_release(x);
    dlt_module_destroy(m);
}

static void test_alloc_failures(void) {
    uint64_t base = 0, now = 0;
    CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_ALLOCATED, &base));
    int failures = 0;
    for (int64_t k = 1; k < 2000; k++) {
        dlt_module *m = NULL;
        CHECK_OK(dlt_testing_fail_alloc(g_ctx, k));
        dlt_status st = dlt_bottleneck_create(g_ctx, 32, 8, 2, &m);
        CHECK_OK(dlt_testing_fail_alloc(g_ctx, 0));
        if (st == DLT_OK) {
            dlt_module_destroy(m);
            break;
        }
        failures++;
        CHECK(st == DLT_ERR_OUT_OF_MEMORY && m == NULL, "k=%lld: status %d", (long long)k, st);
        CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_ALLOCATED, &now));
        CHECK(now == base, "k=%lld: %llu bytes leaked", (long long)k, (unsigned long long)(now - base));
    }
    CHECK(failures > 20, "only %d allocation points", failures);
    /* forward under failures: fails cleanly, and the next forward works */
    dlt_module *m = NULL;
    CHECK_OK(dlt_bottleneck_create(g_ctx, 32, 8, 2, &m));
    seed(8);
    int64_t xs[4] = {2, 32, 6, 6};
    dlt_tensor *x = rand_tensor(xs, 4, 0.0, 1.0, NULL), *y = NULL;
    CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_ALLOCATED, &base));
    for (int64_t k = 1; k < 200; k++) {
        CHECK_OK(dlt_testing_fail_alloc(g_ctx, k));
        dlt_status st = dlt_module_forward(m, x, &y);
        CHECK_OK(dlt_testing_fail_alloc(g_ctx, 0));
        if (st == DLT_OK) {
            dlt_tensor_release(y);
            break;
        }
        CHECK(st == DLT_ERR_OUT_OF_MEMORY, "forward k=%lld: %d %s", (long long)k, st, dlt_last_error());
        CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_ALLOCATED, &now));
        CHECK(now == base, "forward k=%lld: %llu bytes leaked", (long long)k, (unsigned long long)(now - base));
    }
    dlt_tensor_release(x);
    dlt_module_destroy(m);
}

/* ---- errors ---- */

static void test_errors(void) {
    dlt_module *m = (dlt_module *)0x1;
    CHECK_STATUS(dlt_conv2d_create(NULL, 3, 8, 3, 3, 1, 1, 1, 1, 0, &m), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_conv2d_create(g_ctx, 3, 8, 3, 3, 1, 1, 1, 1, 0, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_conv2d_create(g_ctx, 3, 8, 3, 3, 1, 1, 1, 2, 0, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "groups") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_conv2d_create(g_ctx, 3, 8, 3, 3, 0, 1, 1, 1, 0, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_conv2d_create(g_ctx, 3, 8, 3, 3, 1, -1, 1, 1, 0, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_conv2d_create(g_ctx, 0, 8, 3, 3, 1, 1, 1, 1, 0, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_batchnorm2d_create(g_ctx, 0, 1e-5, 0.1, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_batchnorm2d_create(g_ctx, 4, NAN, 0.1, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_batchnorm2d_create(g_ctx, 4, 1e-5, 1.5, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_linear_create(g_ctx, 0, 4, 1, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_max_pool2d_create(g_ctx, 3, 2, 2, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_max_pool2d_create(g_ctx, 0, 1, 0, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_relu_create(NULL, &m), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_resnet_create(g_ctx, 42, 10, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "42") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_resnet50_create(g_ctx, 0, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_bottleneck_create(g_ctx, 64, 0, 1, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_basic_block_create(g_ctx, 64, 64, 0, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK(m == (dlt_module *)0x1, "out-pointer written on failure");

    /* Sequential.append: the container owns the child in every case ... */
    dlt_module *seq = NULL, *c = NULL, *lin = NULL;
    CHECK_OK(dlt_sequential_create(g_ctx, &seq));
    CHECK_OK(dlt_relu_create(g_ctx, &c));
    CHECK_OK(dlt_sequential_append(seq, "act", c));
    CHECK_OK(dlt_relu_create(g_ctx, &c));
    CHECK_STATUS(dlt_sequential_append(seq, "act", c), DLT_ERR_INVALID_ARGUMENT); /* c freed */
    CHECK(strstr(dlt_last_error(), "act") != NULL, "%s", dlt_last_error());
    CHECK_OK(dlt_relu_create(g_ctx, &c));
    CHECK_STATUS(dlt_sequential_append(seq, "a.b", c), DLT_ERR_INVALID_ARGUMENT);
    CHECK_OK(dlt_relu_create(g_ctx, &c));
    CHECK_STATUS(dlt_sequential_append(seq, "", c), DLT_ERR_INVALID_ARGUMENT);
    CHECK_OK(dlt_relu_create(g_ctx, &c));
    CHECK_OK(dlt_relu_create(g_ctx, &lin));
    CHECK_STATUS(dlt_sequential_append(lin, NULL, c), DLT_ERR_INVALID_ARGUMENT); /* not a sequential */
    CHECK_OK(dlt_relu_create(g_ctx, &c));
    CHECK_STATUS(dlt_sequential_append(NULL, NULL, c), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_sequential_append(seq, NULL, NULL), DLT_ERR_NULL_POINTER);
    dlt_ctx *other = th_cpu_ctx();
    CHECK_OK(dlt_relu_create(other, &c));
    CHECK_STATUS(dlt_sequential_append(seq, NULL, c), DLT_ERR_CONTEXT_MISMATCH);
    /* ... except when it is not the caller's to give: already owned, or a cycle */
    dlt_module *inner = NULL;
    CHECK_OK(dlt_sequential_create(g_ctx, &inner));
    CHECK_OK(dlt_sequential_append(seq, "inner", inner));
    CHECK_STATUS(dlt_sequential_append(lin, NULL, inner), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_sequential_append(inner, NULL, seq), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_sequential_append(seq, NULL, seq), DLT_ERR_INVALID_ARGUMENT);
    CHECK(dlt_module_num_state(seq) == 0 && strcmp(dlt_module_kind(seq), "sequential") == 0);
    dlt_module_destroy(lin);

    /* forward, state access */
    dlt_tensor *y = NULL, *t = NULL;
    int64_t xs[4] = {1, 2, 3, 3};
    dlt_tensor *x = rand_tensor(xs, 4, 0.0, 1.0, NULL), *xo = NULL;
    CHECK_OK(dlt_tensor_to_ctx(x, other, &xo));
    CHECK_STATUS(dlt_module_forward(seq, xo, &y), DLT_ERR_CONTEXT_MISMATCH);
    CHECK_STATUS(dlt_module_forward(NULL, x, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_forward(seq, NULL, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_forward(seq, x, NULL), DLT_ERR_NULL_POINTER);
    dlt_module *conv = NULL;
    CHECK_OK(dlt_conv2d_create(g_ctx, 5, 4, 1, 1, 1, 0, 1, 1, 0, &conv));
    CHECK_STATUS(dlt_module_forward(conv, x, &y), DLT_ERR_SHAPE); /* 2 channels, not 5 */
    CHECK(strstr(dlt_last_error(), "dlt_module_forward") != NULL, "%s", dlt_last_error());
    CHECK(y == NULL);
    CHECK_STATUS(dlt_module_state_entry(conv, 1, NULL, &t, NULL), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_state_entry(conv, -1, NULL, &t, NULL), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_state_entry(NULL, 0, NULL, &t, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_find(conv, "bias", &t), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_find(conv, NULL, &t), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_params(conv, NULL, 1, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_params(conv, &t, -1, NULL), DLT_ERR_INVALID_ARGUMENT);
    int32_t n = -1;
    CHECK_OK(dlt_module_params(conv, NULL, 0, &n));
    CHECK(n == 1);
    CHECK(dlt_module_num_state(NULL) == 0 && dlt_module_num_params(NULL) == 0 &&
          dlt_module_param_count(NULL) == 0 && dlt_module_is_training(NULL) == 0);
    CHECK_STATUS(dlt_module_set_training(NULL, 1), DLT_ERR_NULL_POINTER);
    dlt_module_destroy(NULL);
    /* an empty Sequential passes its input through */
    dlt_module *empty = NULL;
    CHECK_OK(dlt_sequential_create(g_ctx, &empty));
    CHECK_OK(dlt_module_forward(empty, x, &y));
    CHECK(y == x);
    dlt_tensor_release(y);
    dlt_module_destroy(empty);
    dlt_tensor_release(x);
    dlt_tensor_release(xo);
    dlt_module_destroy(conv);
    dlt_module_destroy(seq);
    dlt_ctx_destroy(other);
}

int main(void) {
    g_ctx = th_cpu_ctx();
    RUN(test_param_counts_and_layout);
    RUN(test_state_names);
    RUN(test_fixture_resnet50_1000);
    RUN(test_fixture_resnet50_10);
    RUN(test_fixture_resnet18_1000);
    RUN(test_init_statistics);
    RUN(test_resnet18_forward_reference);
    RUN(test_resnet50_forward_reference);
    RUN(test_resnet50_forward_32);
    RUN(test_blocks);
    RUN(test_batchnorm_running_stats);
    RUN(test_set_training_recursion);
    RUN(test_num_batches_tracked);
    RUN(test_custom_network_trains);
    RUN(test_sequential_bn_relu_fusion);
    RUN(test_param_arena);
    RUN(test_set_format);
    RUN(test_forward_releases_memory);
    RUN(test_alloc_failures);
    RUN(test_errors);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
