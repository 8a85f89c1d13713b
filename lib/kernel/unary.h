/*
 * math_ref.h - the scalar math of the unary ops and their derivatives, in double, for the
 * CPU backend. Written from PyTorch's definitions (aten's activation and unary kernels):
 * the CUDA kernels implement the same formulas in fp32 (cuda/pointwise.cu).
 */
#ifndef DLT_CPU_MATH_REF_H
#define DLT_CPU_MATH_REF_H

#include <math.h>

#include "nd.h"

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
    default: return NAN;
    }
}

#endif
