// Loss kernels. The forward kernels run as one block of TL_BLOCK threads:
// thread t handles rows t, t+TL_BLOCK, ... in order, and the per-thread sums
// are combined in a fixed tree, so the statistics are bit-reproducible. Row
// statistics are computed in double and added to the float statistics
// buffer once. The gradient kernels run on a grid; every block computes the
// valid-row count itself, in the same order.
#pragma once
#include "common.cuh"

// probs = softmax(logits) per row; for rows with mask != 0 accumulate the
// cross-entropy loss and whether the arg-max (first maximum) equals the
// label; stats[count] += sum(mask). A label outside [0, cols) makes the loss
// NaN, so that the mistake shows.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_softmax_xent(int rows, int cols, const float *__restrict__ logits,
                const float *__restrict__ labels, const float *__restrict__ mask,
                float *__restrict__ probs, float *__restrict__ stats) {
    __shared__ double sh[TL_BLOCK];
    double loss = 0.0, correct = 0.0, count = 0.0;
    for (int r = threadIdx.x; r < rows; r += TL_BLOCK) {
        const float *x = logits + (long long)r * cols;
        float *p = probs + (long long)r * cols;
        float mx = x[0];
        int arg = 0;
        for (int c = 1; c < cols; ++c) {
            if (x[c] > mx) {
                mx = x[c];
                arg = c;
            }
        }
        double sum = 0.0;
        for (int c = 0; c < cols; ++c) sum += exp((double)x[c] - (double)mx);
        for (int c = 0; c < cols; ++c) p[c] = (float)(exp((double)x[c] - (double)mx) / sum);
        const float w = mask[r];
        count += (double)w;
        if (w != 0.0f) {
            const int label = (int)labels[r];
            if (label >= 0 && label < cols) {
                loss += log(sum) - ((double)x[label] - (double)mx);
                if (arg == label) correct += 1.0;
            } else {
                loss += nan("");
            }
        }
    }
    loss = tl_block_sum<TL_BLOCK>(loss, sh);
    correct = tl_block_sum<TL_BLOCK>(correct, sh);
    count = tl_block_sum<TL_BLOCK>(count, sh);
    if (threadIdx.x == 0) {
        stats[0] = (float)((double)stats[0] + loss);
        stats[1] = (float)((double)stats[1] + correct);
        stats[2] = (float)((double)stats[2] + count);
    }
}

// dlogits = mask*(probs - onehot(labels))/n, n = max(1, sum(mask)).
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_softmax_xent_grad(int rows, int cols, const float *__restrict__ probs,
                     const float *__restrict__ labels, const float *__restrict__ mask,
                     float *__restrict__ dlogits) {
    __shared__ double sh[TL_BLOCK];
    const double n = tl_mask_count(rows, mask, sh);
    const long long total = (long long)rows * cols;
    TL_FOR_EACH(i, total) {
        const int r = (int)(i / cols), c = (int)(i % cols);
        const float w = mask[r];
        if (w == 0.0f) {
            dlogits[i] = 0.0f;
            continue;
        }
        const double onehot = c == (int)labels[r] ? 1.0 : 0.0;
        dlogits[i] = (float)((double)w * ((double)probs[i] - onehot) / n);
    }
}

// stats[loss] += sum over rows with mask != 0 of mean_c (pred-target)^2;
// stats[count] += sum(mask).
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_mse(int rows, int cols, const float *__restrict__ pred, const float *__restrict__ target,
       const float *__restrict__ mask, float *__restrict__ stats) {
    __shared__ double sh[TL_BLOCK];
    double loss = 0.0, count = 0.0;
    for (int r = threadIdx.x; r < rows; r += TL_BLOCK) {
        const float w = mask[r];
        count += (double)w;
        if (w == 0.0f) continue;
        const float *p = pred + (long long)r * cols, *t = target + (long long)r * cols;
        double s = 0.0;
        for (int c = 0; c < cols; ++c) {
            const double d = (double)p[c] - (double)t[c];
            s += d * d;
        }
        loss += s / (double)cols;
    }
    loss = tl_block_sum<TL_BLOCK>(loss, sh);
    count = tl_block_sum<TL_BLOCK>(count, sh);
    if (threadIdx.x == 0) {
        stats[0] = (float)((double)stats[0] + loss);
        stats[2] = (float)((double)stats[2] + count);
    }
}

// dpred = mask*2*(pred-target)/(cols*n), n = max(1, sum(mask)).
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_mse_grad(int rows, int cols, const float *__restrict__ pred, const float *__restrict__ target,
            const float *__restrict__ mask, float *__restrict__ dpred) {
    __shared__ double sh[TL_BLOCK];
    const double n = tl_mask_count(rows, mask, sh);
    const double denom = (double)cols * n;
    const long long total = (long long)rows * cols;
    TL_FOR_EACH(i, total) {
        const float w = mask[i / cols];
        if (w == 0.0f) {
            dpred[i] = 0.0f;
            continue;
        }
        dpred[i] = (float)((double)w * 2.0 * ((double)pred[i] - (double)target[i]) / denom);
    }
}
