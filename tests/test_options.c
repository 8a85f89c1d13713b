/*
 * test_options.c - the option-struct rule (core.h: "Option structs"), through the public
 * calls, with structs of other sizes standing in for programs built against an older or a
 * newer header:
 *  - _init writes exactly the caller's size (canary bytes beyond it survive), zeroes the
 *    bytes of a newer header's fields and keeps the caller's size; below the first
 *    release's size it writes nothing;
 *  - a create call reads a newer caller's struct when its unknown fields are zero, and
 *    refuses one that sets them (DLT_ERR_NOT_SUPPORTED) or one below the first release
 *    (DLT_ERR_INVALID_ARGUMENT naming the _default call);
 *  - the getters (dlt_adamw_get_options, dlt_gpt_get_config) write within the caller's size;
 *  - every public option struct's _default matches its _init with sizeof, and a preset is a
 *    default plus the preset's fields.
 */
#include <stddef.h>
#include <string.h>

#include "harness.h"

#define CANARY 0xA5

static dlt_ctx *g_ctx;

/* a program built against a newer header: the struct has 16 more bytes */
typedef struct newer_sgd {
    dlt_sgd_options base;
    int64_t extra[2];
} newer_sgd;

static int all_bytes(const void *p, size_t n, unsigned char v) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != v) return 0;
    return 1;
}

static void test_init_writes_the_callers_size(void) {
    unsigned char buf[sizeof(dlt_sgd_options) + 32];
    /* exactly sizeof: the canary after it survives */
    memset(buf, CANARY, sizeof buf);
    dlt_sgd_options_init((dlt_sgd_options *)buf, (uint32_t)sizeof(dlt_sgd_options));
    dlt_sgd_options o;
    memcpy(&o, buf, sizeof o);
    CHECK(o.size == sizeof o && o.lr == 1e-3 && o.momentum == 0 && o.nesterov == 0 && o.maximize == 0);
    CHECK(all_bytes(buf + sizeof o, sizeof buf - sizeof o, CANARY), "wrote past the caller's struct");
    /* a newer header's struct: our fields, its own zeroed, its size kept, nothing beyond */
    memset(buf, CANARY, sizeof buf);
    dlt_sgd_options_init((dlt_sgd_options *)buf, (uint32_t)sizeof(newer_sgd));
    newer_sgd n;
    memcpy(&n, buf, sizeof n);
    CHECK(n.base.size == sizeof n && n.base.lr == 1e-3 && n.extra[0] == 0 && n.extra[1] == 0);
    CHECK(all_bytes(buf + sizeof n, sizeof buf - sizeof n, CANARY));
    /* below the first release: nothing written; NULL: nothing happens */
    memset(buf, CANARY, sizeof buf);
    dlt_sgd_options_init((dlt_sgd_options *)buf, 8);
    CHECK(all_bytes(buf, sizeof buf, CANARY), "a too-small size was written");
    dlt_sgd_options_init(NULL, (uint32_t)sizeof(dlt_sgd_options));
    /* the inline _default is _init with the compiler's sizeof */
    dlt_sgd_options a, b;
    memset(&a, 1, sizeof a), memset(&b, 2, sizeof b);
    dlt_sgd_options_default(&a);
    dlt_sgd_options_init(&b, (uint32_t)sizeof b);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
}

static dlt_tensor *param(void) {
    dlt_tensor *p = NULL;
    const int64_t n = 3;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, &n, 1, DLT_FORMAT_CONTIGUOUS, &p));
    CHECK_OK(dlt_tensor_set_requires_grad(p, 1));
    return p;
}

static void test_create_reads_the_callers_size(void) {
    dlt_tensor *p = param();
    dlt_optimizer *opt = NULL;
    /* a newer program that leaves its new fields at their defaults (zero): accepted */
    newer_sgd n;
    dlt_sgd_options_init(&n.base, (uint32_t)sizeof n);
    n.base.lr = 0.25;
    n.base.momentum = 0.5;
    CHECK_OK(dlt_sgd_create_ex(&p, 1, &n.base, &opt));
    double lr = 0, mom = -1;
    CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
    CHECK_OK(dlt_sgd_get_options(opt, &mom, NULL, NULL, NULL, NULL));
    CHECK(lr == 0.25 && mom == 0.5, "lr %g momentum %g", lr, mom);
    dlt_optimizer_destroy(opt);
    opt = NULL;
    /* ... that sets one: refused, not silently ignored */
    n.extra[1] = 7;
    dlt_optimizer *keep = (dlt_optimizer *)0x1;
    opt = keep;
    CHECK_STATUS(dlt_sgd_create_ex(&p, 1, &n.base, &opt), DLT_ERR_NOT_SUPPORTED);
    CHECK(strstr(dlt_last_error(), "newer header") && strstr(dlt_last_error(), "dlt_sgd_options"), "%s",
          dlt_last_error());
    CHECK(opt == keep, "out changed on failure");
    /* below the first release's struct */
    dlt_sgd_options small;
    dlt_sgd_options_default(&small);
    small.size = 12;
    CHECK_STATUS(dlt_sgd_create_ex(&p, 1, &small, &opt), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "dlt_sgd_options_default"), "%s", dlt_last_error());
    /* the same rule on another area's struct */
    dlt_linear_options lo;
    dlt_linear_options_default(&lo);
    lo.size = 2;
    dlt_module *m = NULL;
    CHECK_STATUS(dlt_linear_create_ex(g_ctx, 2, 2, &lo, &m), DLT_ERR_INVALID_ARGUMENT);
    CHECK(m == NULL);
    dlt_tensor_release(p);
}

static void test_getters_write_within_the_callers_size(void) {
    dlt_tensor *p = param();
    dlt_optimizer *opt = NULL;
    dlt_adamw_options o;
    dlt_adamw_options_default(&o);
    o.beta2 = 0.95;
    CHECK_OK(dlt_adamw_create_ex(&p, 1, &o, &opt));
    unsigned char buf[sizeof(dlt_adamw_options) + 16];
    memset(buf, CANARY, sizeof buf);
    dlt_adamw_options_init((dlt_adamw_options *)buf, (uint32_t)sizeof(dlt_adamw_options));
    CHECK_OK(dlt_adamw_get_options(opt, (dlt_adamw_options *)buf));
    dlt_adamw_options got;
    memcpy(&got, buf, sizeof got);
    CHECK(got.size == sizeof got && got.beta2 == 0.95 && got.weight_decay == 1e-2);
    CHECK(all_bytes(buf + sizeof got, 16, CANARY), "wrote past the caller's struct");
    /* a newer caller's larger struct keeps its size and its own bytes */
    memset(buf, CANARY, sizeof buf);
    dlt_adamw_options_init((dlt_adamw_options *)buf, (uint32_t)sizeof buf);
    CHECK_OK(dlt_adamw_get_options(opt, (dlt_adamw_options *)buf));
    memcpy(&got, buf, sizeof got);
    CHECK(got.size == sizeof buf && got.beta2 == 0.95 && all_bytes(buf + sizeof got, 16, 0));
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);

    dlt_gpt_config c;
    CHECK_OK(dlt_gpt_config_preset("tiny", &c));
    dlt_module *gpt = NULL;
    CHECK_OK(dlt_gpt_create(g_ctx, &c, &gpt));
    unsigned char cb[sizeof(dlt_gpt_config) + 8];
    memset(cb, CANARY, sizeof cb);
    dlt_gpt_config_init((dlt_gpt_config *)cb, (uint32_t)sizeof(dlt_gpt_config));
    CHECK_OK(dlt_gpt_get_config(gpt, (dlt_gpt_config *)cb));
    dlt_gpt_config g;
    memcpy(&g, cb, sizeof g);
    CHECK(g.n_layer == 2 && g.n_embd == 32 && g.vocab_size == 65 && g.padded_vocab_size == 65);
    CHECK(all_bytes(cb + sizeof g, 8, CANARY));
    g.size = 4;
    CHECK_STATUS(dlt_gpt_get_config(gpt, &g), DLT_ERR_INVALID_ARGUMENT);
    dlt_module_destroy(gpt);
}

static void test_presets_and_defaults(void) {
    /* a preset writes within the caller's size too */
    unsigned char cb[sizeof(dlt_gpt_config) + 8];
    memset(cb, CANARY, sizeof cb);
    CHECK_OK(dlt_gpt_config_preset_init("gpt2-medium", (dlt_gpt_config *)cb, (uint32_t)sizeof(dlt_gpt_config)));
    dlt_gpt_config g, d;
    memcpy(&g, cb, sizeof g);
    dlt_gpt_config_default(&d);
    CHECK(all_bytes(cb + sizeof g, 8, CANARY));
    CHECK(g.n_layer == 24 && g.n_head == 16 && g.n_embd == 1024 && g.vocab_size == d.vocab_size &&
          g.block_size == d.block_size && g.size == sizeof g);
    memset(cb, CANARY, sizeof cb);
    CHECK_STATUS(dlt_gpt_config_preset_init("gpt2", (dlt_gpt_config *)cb, 16), DLT_ERR_INVALID_ARGUMENT);
    CHECK(all_bytes(cb, sizeof cb, CANARY));
    /* every struct's defaults: spot values PyTorch documents */
    dlt_conv2d_options co;
    dlt_conv2d_options_default(&co);
    CHECK(co.size == sizeof co && co.groups == 1 && co.bias == 1 && co.dilation[1] == 1);
    dlt_batchnorm2d_options bo;
    dlt_batchnorm2d_options_default(&bo);
    CHECK(bo.size == sizeof bo && bo.eps == 1e-5 && bo.momentum == 0.1);
    dlt_adamw_options ao;
    dlt_adam_options_default(&ao);
    CHECK(ao.size == sizeof ao && ao.weight_decay == 0 && ao.decoupled_weight_decay == 0 && ao.beta2 == 0.999);
    dlt_tensor_dataset_options to;
    dlt_tensor_dataset_options_default(&to);
    CHECK(to.size == sizeof to && to.image == 0 && to.num_classes == 0);
    dlt_record_file_options ro;
    dlt_record_file_options_default(&ro);
    CHECK(ro.size == sizeof ro && ro.record_bytes == 3073 && ro.image_offset == 1 && ro.channels == 3);
    dlt_module_load_options mo;
    dlt_module_load_options_default(&mo);
    CHECK(mo.size == sizeof mo && mo.strict == 1 && mo.file_prefix == NULL);
}

int main(void) {
    g_ctx = th_cpu_ctx();
    RUN(test_init_writes_the_callers_size);
    RUN(test_create_reads_the_callers_size);
    RUN(test_getters_write_within_the_callers_size);
    RUN(test_presets_and_defaults);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
