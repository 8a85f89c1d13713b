/*
 * unary.h - the unary elementwise ops (backend entries `unary` and `unary_bwd`): their codes
 * and their math with its derivative, written from PyTorch's definitions (aten's activation
 * and unary kernels), once in double for the CPU backend (lib/cpu/pointwise.c, rounded once
 * to the dtype) and once in fp32 for the CUDA kernels (cuda/pointwise.cu, erff, tanhf, expf,
 * log1pf), side by side so that an op's two versions are read and changed together. A new
 * unary op is a code below, a case in each of the four switches, and its front door in
 * lib/ops/pointwise.c (tests/ops/op_table.h has the whole checklist).
 */
#ifndef DLT_KERNEL_UNARY_H
#define DLT_KERNEL_UNARY_H

#include <math.h>
#include <stdint.h>

/* Unary elementwise ops (entries `unary`, `unary_bwd`). alpha is the op's scalar. The
 * backward reads x (or y where the derivative is cheaper from the output: sigmoid, tanh,
 * exp, sqrt, rsqrt). */
enum {
    DLT_UN_NEG = 0,
    DLT_UN_EXP = 1,
    DLT_UN_LOG = 2,
    DLT_UN_SQRT = 3,
    DLT_UN_RSQRT = 4,
    DLT_UN_ABS = 5,
    DLT_UN_POW = 6,        /* x ^ alpha */
    DLT_UN_ADD_SCALAR = 7, /* x + alpha */
    DLT_UN_GELU = 8,       /* 0.5 x (1 + erf(x / sqrt 2)) */
    DLT_UN_GELU_TANH = 9,  /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    DLT_UN_SILU = 10,      /* x * sigmoid(x) */
    DLT_UN_SIGMOID = 11,
    DLT_UN_TANH = 12,
    DLT_UN_SOFTPLUS = 13,  /* log(1 + exp(x)), stable */
    DLT_UN_LEAKY_RELU = 14, /* x > 0 ? x : alpha x (alpha: negative_slope) */
    DLT_UN_COUNT = 15
};

/* ---- double: the CPU backend ---- */

static inline double dlt__un_f(int32_t op, double x, double a) {
    switch (op) {
    case DLT_UN_NEG: return -x;
    case DLT_UN_EXP: return exp(x);
    case DLT_UN_LOG: return log(x);
    case DLT_UN_SQRT: return sqrt(x);
    case DLT_UN_RSQRT: return 1.0 / sqrt(x);
    case DLT_UN_ABS: return fabs(x);
    case DLT_UN_POW: return pow(x, a);
    case DLT_UN_ADD_SCALAR: return x + a;
    case DLT_UN_GELU: return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
    case DLT_UN_GELU_TANH: {
        const double k = 0.79788456080286535588; /* sqrt(2/pi) */
        return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
    }
    case DLT_UN_SILU: return x / (1.0 + exp(-x));
    case DLT_UN_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case DLT_UN_TANH: return tanh(x);
    case DLT_UN_SOFTPLUS: return x > 20.0 ? x : log1p(exp(x)); /* PyTorch's threshold 20 */
    case DLT_UN_LEAKY_RELU: return x > 0.0 ? x : x * a; /* NaN * a stays NaN */
    default: return NAN;
    }
}

/* du * f'(x), with y = f(x) for the ops whose derivative reads the output. */
static inline double dlt__un_df(int32_t op, double du, double x, double y, double a) {
    switch (op) {
    case DLT_UN_NEG: return -du;
    case DLT_UN_EXP: return du * y;
    case DLT_UN_LOG: return du / x;
    case DLT_UN_SQRT: return du / (2.0 * y);
    case DLT_UN_RSQRT: return -0.5 * du * y * y * y;
    case DLT_UN_ABS: return x > 0 ? du : x < 0 ? -du : 0.0 * du;
    case DLT_UN_POW: return a == 0.0 ? 0.0 : du * a * pow(x, a - 1.0);
    case DLT_UN_ADD_SCALAR: return du;
    case DLT_UN_GELU: {
        const double cdf = 0.5 * (1.0 + erf(x * 0.70710678118654752440));
        const double pdf = exp(-0.5 * x * x) * 0.39894228040143267794; /* 1/sqrt(2 pi) */
        return du * (cdf + x * pdf);
    }
    case DLT_UN_GELU_TANH: {
        const double k = 0.79788456080286535588, c = 0.044715;
        const double inner = k * (x + c * x * x * x);
        const double t = tanh(inner);
        const double left = 0.5 * x, right = 1.0 + t;
        const double dinner = k * (1.0 + 3.0 * c * x * x);
        return du * (0.5 * right + left * (1.0 - t * t) * dinner);
    }
    case DLT_UN_SILU: {
        const double s = 1.0 / (1.0 + exp(-x));
        return du * s * (1.0 + x * (1.0 - s));
    }
    case DLT_UN_SIGMOID: return du * y * (1.0 - y);
    case DLT_UN_TANH: return du * (1.0 - y * y);
    case DLT_UN_SOFTPLUS: return x > 20.0 ? du : du / (1.0 + exp(-x));
    case DLT_UN_LEAKY_RELU: return x > 0.0 ? du : du * a; /* the slope at 0, as PyTorch */
    default: return NAN;
    }
}

/* ---- fp32: the CUDA kernels ---- */
#if defined(__CUDACC__)
static __device__ __forceinline__ float dlt__un_f32(int32_t op, float x, float a) {
    switch (op) {
    case DLT_UN_NEG: return -x;
    case DLT_UN_EXP: return expf(x);
    case DLT_UN_LOG: return logf(x);
    case DLT_UN_SQRT: return sqrtf(x);
    case DLT_UN_RSQRT: return rsqrtf(x);
    case DLT_UN_ABS: return fabsf(x);
    case DLT_UN_POW: return powf(x, a);
    case DLT_UN_ADD_SCALAR: return x + a;
    case DLT_UN_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
    case DLT_UN_GELU_TANH: {
        const float k = 0.79788456080286535588f;
        return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
    case DLT_UN_SILU: return x / (1.0f + expf(-x));
    case DLT_UN_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case DLT_UN_TANH: return tanhf(x);
    case DLT_UN_LEAKY_RELU: return x > 0.0f ? x : x * a;
    default: return x > 20.0f ? x : log1pf(expf(x)); /* softplus */
    }
}

static __device__ __forceinline__ float dlt__un_df32(int32_t op, float du, float x, float y, float a) {
    switch (op) {
    case DLT_UN_NEG: return -du;
    case DLT_UN_EXP: return du * y;
    case DLT_UN_LOG: return du / x;
    case DLT_UN_SQRT: return du / (2.0f * y);
    case DLT_UN_RSQRT: return -0.5f * du * y * y * y;
    case DLT_UN_ABS: return x > 0.0f ? du : x < 0.0f ? -du : 0.0f * du;
    case DLT_UN_POW: return a == 0.0f ? 0.0f : du * a * powf(x, a - 1.0f);
    case DLT_UN_ADD_SCALAR: return du;
    case DLT_UN_GELU: {
        const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
        const float pdf = expf(-0.5f * x * x) * 0.39894228040143267794f;
        return du * (cdf + x * pdf);
    }
    case DLT_UN_GELU_TANH: {
        const float k = 0.79788456080286535588f, c = 0.044715f;
        const float t = tanhf(k * (x + c * x * x * x));
        return du * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x));
    }
    case DLT_UN_SILU: {
        const float s = 1.0f / (1.0f + expf(-x));
        return du * s * (1.0f + x * (1.0f - s));
    }
    case DLT_UN_SIGMOID: return du * y * (1.0f - y);
    case DLT_UN_TANH: return du * (1.0f - y * y);
    case DLT_UN_LEAKY_RELU: return x > 0.0f ? du : du * a;
    default: return x > 20.0f ? du : du / (1.0f + expf(-x)); /* softplus */
    }
}
#endif

#endif
