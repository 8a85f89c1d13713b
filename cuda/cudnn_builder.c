/*
 * cudnn_builder.c - describing cuDNN backend graphs (cudnn_graph.h, "building graphs"): the
 * builder that checks every cudnnBackend* call and keeps the first failure with cuDNN's own
 * message, the descriptors it owns, and the tensor and operation nodes the ops compose
 * (convolution, BatchNorm, attention). Turning a described graph into a plan, the plan
 * cache and execution are cudnn_graph.c's.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cudnn_graph.h"

/* ---------------------------------------------------------------------------------------
 * The builder: every call checked, the first failure kept (with cuDNN's own message)
 * ------------------------------------------------------------------------------------- */
void dlt__cudnn_status_text(cudnnStatus_t s, const char *call, char *buf, size_t n) {
    char detail[256] = "";
    cudnnGetLastErrorString(detail, sizeof detail);
    snprintf(buf, n, "%s failed: %s%s%s", call, cudnnGetErrorString(s), detail[0] ? " - " : "",
             detail);
}

/* the first failure only: later calls are skipped, so their errors are consequences */
static void builder_fail(dlt_cudnn_builder *b, cudnnStatus_t s, const char *call) {
    if (b->status != CUDNN_STATUS_SUCCESS) return;
    b->status = s;
    dlt__cudnn_status_text(s, call, b->failed, sizeof b->failed);
}

void dlt__cudnn_builder_init(dlt_cudnn_builder *b, dlt_ctx *ctx, const char *func,
                             const char *what) {
    memset(b, 0, sizeof *b);
    b->ctx = ctx;
    b->func = func;
    b->what = what;
    b->status = CUDNN_STATUS_SUCCESS;
}

void dlt__cudnn_builder_discard(dlt_cudnn_builder *b) {
    for (int32_t i = b->n_owned - 1; i >= 0; i--)
        if (b->owned[i]) cudnnBackendDestroyDescriptor(b->owned[i]);
    b->n_owned = 0;
}

void dlt__cudnn_builder_refuse(dlt_cudnn_builder *b, const char *why) {
    if (b->status != CUDNN_STATUS_SUCCESS) return;
    b->status = CUDNN_STATUS_INTERNAL_ERROR;
    snprintf(b->failed, sizeof b->failed, "libdltrain: %s", why);
}

int dlt__cudnn_builder_own(dlt_cudnn_builder *b, cudnnBackendDescriptor_t d) {
    if (b->n_owned >= DLT_CUDNN_MAX_OWNED) {
        cudnnBackendDestroyDescriptor(d);
        char why[80];
        snprintf(why, sizeof why, "graph needs more than %d descriptors", DLT_CUDNN_MAX_OWNED);
        dlt__cudnn_builder_refuse(b, why);
        return -1;
    }
    b->owned[b->n_owned++] = d;
    return 0;
}

cudnnBackendDescriptor_t dlt__cudnn_make(dlt_cudnn_builder *b, cudnnBackendDescriptorType_t type) {
    if (b->status != CUDNN_STATUS_SUCCESS) return NULL;
    cudnnBackendDescriptor_t d = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(type, &d);
    if (s != CUDNN_STATUS_SUCCESS) {
        char call[64];
        snprintf(call, sizeof call, "cudnnBackendCreateDescriptor(type %d)", (int)type);
        builder_fail(b, s, call);
        return NULL;
    }
    if (dlt__cudnn_builder_own(b, d) != 0) return NULL;
    return d;
}

void dlt__cudnn_set_(dlt_cudnn_builder *b, cudnnBackendDescriptor_t d,
                     cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type,
                     int64_t count, const void *values, const char *attr_name) {
    if (b->status != CUDNN_STATUS_SUCCESS || !d) return;
    cudnnStatus_t s = cudnnBackendSetAttribute(d, attr, type, count, values);
    if (s != CUDNN_STATUS_SUCCESS) {
        char call[128];
        snprintf(call, sizeof call, "cudnnBackendSetAttribute(%s)", attr_name);
        builder_fail(b, s, call);
    }
}

void dlt__cudnn_finalize_(dlt_cudnn_builder *b, cudnnBackendDescriptor_t d, const char *what) {
    if (b->status != CUDNN_STATUS_SUCCESS || !d) return;
    cudnnStatus_t s = cudnnBackendFinalize(d);
    if (s != CUDNN_STATUS_SUCCESS) {
        char call[128];
        snprintf(call, sizeof call, "cudnnBackendFinalize(%s)", what);
        builder_fail(b, s, call);
    }
}

int dlt__cudnn_dtype(int32_t dtype, cudnnDataType_t *out) {
    switch (dtype) {
    case DLT_F32: *out = CUDNN_DATA_FLOAT; return 0;
    case DLT_F16: *out = CUDNN_DATA_HALF; return 0;
    case DLT_BF16: *out = CUDNN_DATA_BFLOAT16; return 0;
    default: return -1;
    }
}

cudnnBackendDescriptor_t dlt__cudnn_tensor(dlt_cudnn_builder *b, int64_t uid, cudnnDataType_t dt,
                                           int32_t nd, const int64_t *dims, const int64_t *strides,
                                           int64_t alignment, int is_virtual, int by_value) {
    cudnnBackendDescriptor_t d = dlt__cudnn_make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    DLT_CUDNN_SET(b, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    DLT_CUDNN_SET(b, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, nd, dims);
    DLT_CUDNN_SET(b, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, nd, strides);
    DLT_CUDNN_SET(b, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    DLT_CUDNN_SET(b, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (is_virtual) {
        bool v = true; /* CUDNN_TYPE_BOOLEAN takes a C bool */
        DLT_CUDNN_SET(b, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    }
    if (by_value) {
        bool v = true;
        DLT_CUDNN_SET(b, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &v);
    }
    DLT_CUDNN_FINALIZE(b, d);
    return b->status == CUDNN_STATUS_SUCCESS ? d : NULL;
}

void dlt__cudnn_strides4(const int64_t dims[4], int channels_last, int64_t st[4]) {
    /* Packed strides computed from the sizes: a size-1 dimension gets the product of the
     * sizes inside it, which is the "packed" stride cuDNN wants (PyTorch has to repair
     * arbitrary size-1 strides with fixSizeOneDimStride; ours are always packed). */
    const int64_t C = dims[1], H = dims[2], W = dims[3];
    if (channels_last) {
        st[1] = 1;
        st[3] = C;
        st[2] = W * C;
        st[0] = H * W * C;
    } else {
        st[3] = 1;
        st[2] = W;
        st[1] = H * W;
        st[0] = C * H * W;
    }
}

cudnnBackendDescriptor_t dlt__cudnn_tensor4(dlt_cudnn_builder *b, int64_t uid, cudnnDataType_t dt,
                                            const int64_t dims[4], int channels_last,
                                            int64_t alignment, int is_virtual) {
    int64_t st[4];
    dlt__cudnn_strides4(dims, channels_last, st);
    return dlt__cudnn_tensor(b, uid, dt, 4, dims, st, alignment, is_virtual, 0);
}

cudnnBackendDescriptor_t dlt__cudnn_pointwise(dlt_cudnn_builder *b, const char *name,
                                              cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                              cudnnBackendDescriptor_t bdesc, cudnnBackendDescriptor_t t,
                                              cudnnBackendDescriptor_t y, int64_t axis) {
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t pw = dlt__cudnn_make(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    DLT_CUDNN_SET(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    DLT_CUDNN_SET(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) DLT_CUDNN_SET(b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    DLT_CUDNN_FINALIZE(b, pw);
    cudnnBackendDescriptor_t op = dlt__cudnn_make(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (bdesc) DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, bdesc);
    if (t) DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    dlt__cudnn_finalize_(b, op, name);
    return b->status == CUDNN_STATUS_SUCCESS ? op : NULL;
}

cudnnBackendDescriptor_t dlt__cudnn_matmul(dlt_cudnn_builder *b, const char *name,
                                           cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t bm,
                                           cudnnBackendDescriptor_t c) {
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = dlt__cudnn_make(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    DLT_CUDNN_SET(b, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    DLT_CUDNN_FINALIZE(b, mm);
    cudnnBackendDescriptor_t op = dlt__cudnn_make(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, bm);
    DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    dlt__cudnn_finalize_(b, op, name);
    return b->status == CUDNN_STATUS_SUCCESS ? op : NULL;
}

cudnnBackendDescriptor_t dlt__cudnn_reduction(dlt_cudnn_builder *b, const char *name,
                                              cudnnReduceTensorOp_t redop, cudnnBackendDescriptor_t x,
                                              cudnnBackendDescriptor_t y) {
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd = dlt__cudnn_make(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    DLT_CUDNN_SET(b, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &redop);
    DLT_CUDNN_SET(b, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    DLT_CUDNN_FINALIZE(b, rd);
    cudnnBackendDescriptor_t op = dlt__cudnn_make(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
    dlt__cudnn_finalize_(b, op, name);
    return b->status == CUDNN_STATUS_SUCCESS ? op : NULL;
}

cudnnBackendDescriptor_t dlt__cudnn_reshape(dlt_cudnn_builder *b, const char *name,
                                            cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = dlt__cudnn_make(b, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    DLT_CUDNN_SET_DESC(b, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    dlt__cudnn_finalize_(b, op, name);
    return b->status == CUDNN_STATUS_SUCCESS ? op : NULL;
}
