/*
 * test_nn_summary.c - describing and building module trees, on the CPU: the module summary
 * text, exactly (built-in layers, a custom module with a tie, a frozen and an f16 parameter,
 * ResNet50's totals against torchvision's); the layer option structs (defaults, non-square
 * convolutions, older callers' sizes); tree queries.
 */
#include "nn_custom_common.h"

/* ---- the summary ---- */

static char *summary(const dlt_module *m) {
    size_t need = 0;
    if (dlt_module_summary(m, NULL, 0, &need) != DLT_OK) return NULL;
    char *s = malloc(need);
    if (dlt_module_summary(m, s, need, NULL) != DLT_OK) {
        free(s);
        return NULL;
    }
    return s;
}

static void check_text(const char *got, const char *want) {
    if (!got || strcmp(got, want) != 0) {
        CHECK(0, "summary differs");
        printf("# got:\n%s# want:\n%s", got ? got : "(null)\n", want);
    }
}

static void test_summary_text(void) {
    dlt_module *seq = NULL, *c = NULL;
    CHECK_OK(dlt_sequential_create(g_ctx, &seq));
    CHECK_OK(dlt_conv2d_create(g_ctx, 3, 8, 3, 3, 1, 1, 1, 1, 1, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_batchnorm2d_create(g_ctx, 8, 1e-5, 0.1, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_relu_create(g_ctx, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_max_pool2d_create(g_ctx, 2, 2, 0, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_flatten_create(g_ctx, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_linear_create(g_ctx, 128, 5, 1, &c));
    CHECK_OK(dlt_sequential_append(seq, "head", c));
    char *s = summary(seq);
    /* 216 + 8 conv, 8 + 8 BN, 640 + 5 linear = 885; buffers 8 + 8 + 1 */
    check_text(s,
               "name         kind / shape                                                     params\n"
               "-----------  ---------------------------------------------------------------  ------\n"
               "(root)       sequential                                                          885\n"
               "0            conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))     224\n"
               "0.weight     [8, 3, 3, 3]                                                        216\n"
               "0.bias       [8]                                                                   8\n"
               "1            batchnorm2d(8, eps=1e-05, momentum=0.1)                              16\n"
               "1.weight     [8]                                                                   8\n"
               "1.bias       [8]                                                                   8\n"
               "2            relu                                                                  0\n"
               "3            max_pool2d(kernel_size=2, stride=2, padding=0)                        0\n"
               "4            flatten(start_dim=1, end_dim=-1)                                      0\n"
               "head         linear(in_features=128, out_features=5, bias=True)                  645\n"
               "head.weight  [5, 128]                                                            640\n"
               "head.bias    [5]                                                                   5\n"
               "parameters: 885 in 6 tensors, 885 trainable\n"
               "buffers: 17 elements in 3 tensors\n");
    /* truncation and sizing */
    size_t need = 0, need2 = 0;
    CHECK_OK(dlt_module_summary(seq, NULL, 0, &need));
    CHECK(s && need == strlen(s) + 1, "needed %zu for %zu characters", need, s ? strlen(s) : 0);
    char small[12];
    memset(small, 'x', sizeof small);
    CHECK_OK(dlt_module_summary(seq, small, sizeof small, &need2));
    CHECK(need2 == need && memcmp(small, "name       ", 11) == 0 && small[11] == '\0', "%.12s", small);
    CHECK_STATUS(dlt_module_summary(seq, NULL, 5, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_summary(NULL, small, sizeof small, NULL), DLT_ERR_NULL_POINTER);
    free(s);
    dlt_module_destroy(seq);

    /* a custom module: its own name, a tie, a frozen parameter, an f16 one, a nested child */
    dlt_module *m = custom("gpt"), *blk = custom("block"), *conv = NULL;
    REQUIRE(m && blk);
    const int64_t se[2] = {10, 4}, sb[1] = {4};
    dlt_tensor *wte = zeros(DLT_F32, se, 2), *scale = zeros(DLT_F16, sb, 1), *frozen = zeros(DLT_F32, sb, 1),
               *mask = zeros(DLT_F32, sb, 1);
    CHECK_OK(dlt_module_register_parameter(m, "wte", wte));
    CHECK_OK(dlt_module_register_buffer(m, "mask", mask));
    CHECK_OK(dlt_module_register_parameter(blk, "scale", scale));
    CHECK_OK(dlt_module_register_parameter(blk, "frozen", frozen));
    CHECK_OK(dlt_tensor_set_requires_grad(frozen, 0));
    dlt_conv2d_options o;
    dlt_conv2d_options_default(&o);
    o.stride[1] = 2, o.dilation[0] = 2, o.groups = 2, o.bias = 0;
    CHECK_OK(dlt_conv2d_create_ex(g_ctx, 4, 6, 1, 3, &o, &conv));
    CHECK_OK(dlt_module_register_module(blk, "conv", conv));
    CHECK_OK(dlt_module_register_module(m, "h0", blk));
    CHECK_OK(dlt_module_register_parameter(m, "lm_head", wte));
    s = summary(m);
    /* wte 40 (lm_head tied, once) + h0: scale 4, frozen 4, conv 6*2*1*3 = 36 -> 84 */
    check_text(s,
               "name            kind / shape                                                                            params\n"
               "--------------  --------------------------------------------------------------------------------------  ------\n"
               "(root)          gpt                                                                                         84\n"
               "wte             [10, 4]                                                                                     40\n"
               "lm_head         [10, 4] tied to wte                                                                          -\n"
               "h0              block                                                                                       44\n"
               "h0.scale        [4] f16                                                                                      4\n"
               "h0.frozen       [4]                                                                                          4\n"
               "h0.conv         conv2d(4, 6, kernel_size=(1, 3), stride=(1, 2), dilation=(2, 1), groups=2, bias=False)      36\n"
               "h0.conv.weight  [6, 2, 1, 3]                                                                                36\n"
               "parameters: 84 in 4 tensors, 80 trainable\n"
               "buffers: 4 elements in 1 tensor\n");
    free(s);
    dlt_tensor_release(wte), dlt_tensor_release(scale), dlt_tensor_release(frozen), dlt_tensor_release(mask);
    dlt_module_destroy(m);

    /* ResNet50's totals are torchvision's (25,557,032 parameters; 53 BNs: 3 buffers each) */
    dlt_module *r = NULL;
    CHECK_OK(dlt_resnet50_create(g_ctx, 1000, &r));
    s = summary(r);
    REQUIRE(s);
    CHECK(strstr(s, "\nparameters: 25,557,032 in 161 tensors, 25,557,032 trainable\n") != NULL);
    CHECK(strstr(s, "in 159 tensors\n") != NULL);
    CHECK(strstr(s, "\nlayer4.2.downsample") == NULL && strstr(s, "\nlayer4.0.downsample.0.weight ") != NULL);
    CHECK(strstr(s, "\nlayer1.0.conv1 ") != NULL && strstr(s, "conv2d(64, 64, kernel_size=(1, 1), stride=(1, 1), bias=False)"));
    int lines = 0;
    for (const char *q = s; *q; q++) lines += *q == '\n';
    /* header 2 + modules (1 + 4 stem + 4 layers + 16 blocks * 8 + 4 downsamples * 3 + avgpool + fc
     * = 151) + 161 parameters + 2 totals */
    CHECK(lines == 2 + 151 + 161 + 2, "%d lines", lines);
    free(s);
    dlt_module_destroy(r);
}

/* ---- option structs ---- */

static void test_option_structs(void) {
    dlt_conv2d_options o;
    memset(&o, 0x55, sizeof o);
    dlt_conv2d_options_default(&o);
    CHECK(o.size == sizeof o && o.bias == 1 && o.stride[0] == 1 && o.stride[1] == 1 && o.padding[0] == 0 &&
          o.padding[1] == 0 && o.dilation[0] == 1 && o.dilation[1] == 1 && o.groups == 1);
    CHECK(sizeof o == offsetof(dlt_conv2d_options, groups) + sizeof o.groups, "trailing padding");
    dlt_conv2d_options_default(NULL);
    /* the old constructor and the options give the same module (and the same draws) */
    dlt_module *a = NULL, *b = NULL;
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 21));
    CHECK_OK(dlt_conv2d_create(g_ctx, 4, 6, 3, 3, 2, 1, 1, 2, 0, &a));
    o.stride[0] = o.stride[1] = 2, o.padding[0] = o.padding[1] = 1, o.groups = 2, o.bias = 0;
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 21));
    CHECK_OK(dlt_conv2d_create_ex(g_ctx, 4, 6, 3, 3, &o, &b));
    dlt_tensor *wa = NULL, *wb = NULL;
    CHECK_OK(dlt_module_find(a, "weight", &wa));
    CHECK_OK(dlt_module_find(b, "weight", &wb));
    double va[6 * 2 * 9], vb[6 * 2 * 9];
    read_d(wa, va), read_d(wb, vb);
    CHECK(dlt_module_num_state(b) == 1 && memcmp(va, vb, sizeof va) == 0);
    dlt_module_destroy(a), dlt_module_destroy(b);
    /* non-square stride, padding and dilation: the module runs dlt_conv2d with them */
    dlt_conv2d_options_default(&o);
    o.stride[0] = 1, o.stride[1] = 2, o.padding[0] = 2, o.padding[1] = 0, o.dilation[0] = 2;
    CHECK_OK(dlt_conv2d_create_ex(g_ctx, 2, 3, 3, 2, &o, &a));
    CHECK(dlt_module_num_state(a) == 2, "bias by default");
    const int64_t xs[4] = {1, 2, 5, 6};
    dlt_tensor *x = rand_tensor(xs, 4, 1.0, NULL), *y = NULL, *y2 = NULL, *w = NULL, *bias = NULL;
    CHECK_OK(dlt_module_find(a, "weight", &w));
    CHECK_OK(dlt_module_find(a, "bias", &bias));
    CHECK_OK(dlt_tensor_rand_uniform(bias, -1, 1));
    CHECK_OK(dlt_module_forward(a, x, &y));
    CHECK_OK(dlt_conv2d(x, w, bias, 1, 2, 2, 0, 2, 1, 1, &y2));
    /* H: (5 + 4 - 2*2 - 1)/1 + 1 = 5; W: (6 - 2)/2 + 1 = 3 */
    CHECK(dlt_tensor_dim(y, 2) == 5 && dlt_tensor_dim(y, 3) == 3, "%lldx%lld", (long long)dlt_tensor_dim(y, 2),
          (long long)dlt_tensor_dim(y, 3));
    double v1[3 * 15], v2[3 * 15];
    read_d(y, v1), read_d(y2, v2);
    CHECK(memcmp(v1, v2, sizeof v1) == 0);
    dlt_tensor_release(y), dlt_tensor_release(y2), dlt_tensor_release(x);
    dlt_module_destroy(a);
    /* a struct below the first release's size is refused (test_options covers the rule) */
    dlt_conv2d_options old;
    dlt_conv2d_options_default(&old);
    old.size = 0;
    a = (dlt_module *)0x1;
    CHECK_STATUS(dlt_conv2d_create_ex(g_ctx, 4, 4, 1, 1, &old, &a), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "dlt_conv2d_options_default") != NULL, "%s", dlt_last_error());
    CHECK(a == (dlt_module *)0x1);
    CHECK_OK(dlt_conv2d_create_ex(g_ctx, 4, 4, 3, 3, NULL, &a)); /* all defaults */
    CHECK(dlt_module_num_state(a) == 2);
    dlt_module_destroy(a);
    dlt_conv2d_options_default(&o);
    o.groups = 3;
    CHECK_STATUS(dlt_conv2d_create_ex(g_ctx, 4, 4, 1, 1, &o, &a), DLT_ERR_INVALID_ARGUMENT);
    o.groups = 1, o.padding[1] = -1;
    CHECK_STATUS(dlt_conv2d_create_ex(g_ctx, 4, 4, 1, 1, &o, &a), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_conv2d_create_ex(NULL, 4, 4, 1, 1, NULL, &a), DLT_ERR_NULL_POINTER);

    /* BatchNorm2d: eps and momentum reach the forward (running_mean = momentum * batch mean) */
    dlt_batchnorm2d_options bo;
    dlt_batchnorm2d_options_default(&bo);
    CHECK(bo.size == sizeof bo && bo.eps == 1e-5 && bo.momentum == 0.1);
    bo.momentum = 0.5;
    CHECK_OK(dlt_batchnorm2d_create_ex(g_ctx, 2, &bo, &a));
    const int64_t bs[4] = {2, 2, 1, 2};
    double xv[8];
    x = rand_tensor(bs, 4, 1.0, xv);
    CHECK_OK(dlt_module_forward(a, x, &y));
    dlt_tensor *rm = NULL;
    CHECK_OK(dlt_module_find(a, "running_mean", &rm));
    double got[2];
    read_d(rm, got);
    for (int c = 0; c < 2; c++) {
        double mean = (xv[c * 2] + xv[c * 2 + 1] + xv[4 + c * 2] + xv[4 + c * 2 + 1]) / 4;
        CHECK(fabs(got[c] - 0.5 * mean) < 1e-6, "running_mean[%d] %g, want %g", c, got[c], 0.5 * mean);
    }
    dlt_tensor_release(y), dlt_tensor_release(x);
    dlt_module_destroy(a);
    bo.momentum = 2;
    CHECK_STATUS(dlt_batchnorm2d_create_ex(g_ctx, 2, &bo, &a), DLT_ERR_INVALID_ARGUMENT);
    CHECK_OK(dlt_batchnorm2d_create_ex(g_ctx, 2, NULL, &a));
    dlt_module_destroy(a);
    bo.size = 0;
    CHECK_STATUS(dlt_batchnorm2d_create_ex(g_ctx, 2, &bo, &a), DLT_ERR_INVALID_ARGUMENT);
    /* Linear */
    dlt_linear_options lo;
    dlt_linear_options_default(&lo);
    CHECK(lo.size == sizeof lo && lo.bias == 1);
    lo.bias = 0;
    CHECK_OK(dlt_linear_create_ex(g_ctx, 3, 2, &lo, &a));
    CHECK(dlt_module_num_state(a) == 1);
    dlt_module_destroy(a);
    CHECK_OK(dlt_linear_create_ex(g_ctx, 3, 2, NULL, &a));
    CHECK(dlt_module_num_state(a) == 2);
    dlt_module_destroy(a);
    CHECK_STATUS(dlt_linear_create_ex(g_ctx, 0, 2, NULL, &a), DLT_ERR_INVALID_ARGUMENT);
}

/* ---- tree queries ---- */

static void test_tree_queries(void) {
    dlt_module *r = NULL, *sub = NULL, *child = NULL;
    CHECK_OK(dlt_resnet_create(g_ctx, 18, 10, &r));
    CHECK(dlt_module_num_children(r) == 10, "%d children", dlt_module_num_children(r));
    const char *name = NULL;
    CHECK_OK(dlt_module_child(r, 4, &name, &child));
    CHECK(strcmp(name, "layer1") == 0 && strcmp(dlt_module_kind(child), "sequential") == 0);
    CHECK_OK(dlt_module_get_submodule(r, "layer2.0.downsample.1", &sub));
    CHECK(strcmp(dlt_module_kind(sub), "batchnorm2d") == 0);
    CHECK_OK(dlt_module_get_submodule(r, "", &sub));
    CHECK(sub == r);
    CHECK_OK(dlt_module_get_submodule(r, "layer1", &sub));
    CHECK(sub == child);
    CHECK_STATUS(dlt_module_get_submodule(r, "layer1.7.conv1", &sub), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "'layer1' has no child '7'") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_module_get_submodule(r, "layer1.", &sub), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_get_submodule(r, "fc.weight", &sub), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_child(r, 10, &name, NULL), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_module_child(NULL, 0, &name, NULL), DLT_ERR_NULL_POINTER);
    CHECK(dlt_module_num_children(NULL) == 0 && dlt_module_ctx(NULL) == NULL &&
          dlt_module_user_data(r) == NULL && dlt_module_user_data(NULL) == NULL);
    dlt_module_destroy(r);
}

int main(void) {
    g_ctx = th_cpu_ctx();
    RUN(test_summary_text);
    RUN(test_option_structs);
    RUN(test_tree_queries);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
