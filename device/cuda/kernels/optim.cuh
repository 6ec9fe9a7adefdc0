// Optimizer updates, elementwise in float32 in the order the contract
// writes them (nothing fused: the PTX is built with -fmad=false). The
// learning rate and bias corrections are read from the hyper buffer so a
// captured update follows the schedule the host writes into it.
#pragma once
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_sgd_momentum(long long n, float *p, const float *g,
                float *vel, const float *hyper, float momentum,
                float weightDecay, int nesterov) {
    const float lr = hyper[0];
    TL_FOR_EACH(i, n) {
        const float w = p[i];
        const float gi = g[i] + weightDecay * w;
        const float v = momentum * vel[i] + gi;
        vel[i] = v;
        p[i] = nesterov ? w - lr * (gi + momentum * v) : w - lr * v;
    }
}

extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_adamw(long long n, float *p, const float *g, float *m,
         float *v, const float *hyper, float beta1, float beta2,
         float eps, float weightDecay) {
    const float lr = hyper[0], bias1 = hyper[1], bias2 = hyper[2];
    TL_FOR_EACH(i, n) {
        const float w = p[i], gi = g[i];
        const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = w - lr * (weightDecay * w + (mi / bias1) / (sqrtf(vi / bias2) + eps));
    }
}
