// Elementwise kernels: activations, fill, scale, axpy. Grid-stride loops of
// TL_BLOCK threads; each element is computed independently.
#pragma once
#include "common.cuh"

__device__ __forceinline__ double tl_act(int act, double z) {
    switch (act) {
    case TL_ACT_RELU:
        return z > 0.0 ? z : 0.0;
    case TL_ACT_GELU:
        return 0.5 * z * (1.0 + tanh(TL_GELU_S * (z + TL_GELU_C * z * z * z)));
    case TL_ACT_TANH:
        return tanh(z);
    default:
        return z;
    }
}

__device__ __forceinline__ double tl_act_deriv(int act, double z) {
    switch (act) {
    case TL_ACT_RELU:
        return z > 0.0 ? 1.0 : 0.0;
    case TL_ACT_GELU: {
        const double t = tanh(TL_GELU_S * (z + TL_GELU_C * z * z * z));
        const double du = TL_GELU_S * (1.0 + 3.0 * TL_GELU_C * z * z);
        return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * du;
    }
    case TL_ACT_TANH: {
        const double t = tanh(z);
        return 1.0 - t * t;
    }
    default:
        return 1.0;
    }
}

// z += bias (per column), then y = act(z). y may be z for TL_ACT_NONE, so no
// pointer is __restrict__.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_bias_act(int act, int rows, int cols, float *z, const float *bias, float *y) {
    const long long n = (long long)rows * cols;
    TL_FOR_EACH(i, n) {
        const float zi = z[i] + bias[i % cols];
        z[i] = zi;
        y[i] = act == TL_ACT_NONE ? zi : (float)tl_act(act, (double)zi);
    }
}

// dz = dy * act'(z). dz may be dy.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_act_grad(int act, int rows, int cols, const float *z, const float *dy, float *dz) {
    const long long n = (long long)rows * cols;
    TL_FOR_EACH(i, n) {
        switch (act) {
        case TL_ACT_NONE:
            dz[i] = dy[i];
            break;
        case TL_ACT_RELU:
            dz[i] = z[i] > 0.0f ? dy[i] : 0.0f;
            break;
        default:
            dz[i] = (float)((double)dy[i] * tl_act_deriv(act, (double)z[i]));
        }
    }
}

extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_fill(long long n, float *x, float v) {
    TL_FOR_EACH(i, n) x[i] = v;
}

extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_scale(long long n, float *x, float alpha) {
    TL_FOR_EACH(i, n) x[i] = x[i] * alpha;
}

// y += alpha*x, rounded after the product and after the sum (the PTX is
// built with -fmad=false, so nothing is fused), as the CPU reference does.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_axpy(long long n, float alpha, const float *x, float *y) {
    TL_FOR_EACH(i, n) y[i] = y[i] + alpha * x[i];
}
