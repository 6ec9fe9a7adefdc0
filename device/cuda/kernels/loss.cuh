// Loss kernels. The forward kernels run as one block of TL_BLOCK threads:
// thread t handles rows t, t+TL_BLOCK, ... in order, and the per-thread sums
// are combined in a fixed tree, so the statistics are bit-reproducible. Row
// statistics are computed in double and added to the float statistics
// buffer once. The gradient kernels run on a grid; every block computes the
// valid-row count itself, in the same order.
#pragma once
#include "common.cuh"

// probs = softmax(logits) per row. Rows with mask w != 0 add w*loss to
// stats[loss], w to stats[count] and w to stats[correct] when the arg-max
// (first maximum) is the label; rows with w == 0 add nothing, whatever their
// label. A counted row whose label is not a class index makes the loss NaN,
// so that the data bug shows.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_softmax_xent(int rows, int cols, const float *logits,
                const float *labels, const float *mask,
                float *probs, float *stats) {
    __shared__ double sh[TL_BLOCK];
    double loss = 0.0, correct = 0.0, count = 0.0;
    for (int r = threadIdx.x; r < rows; r += TL_BLOCK) {
        const float *x = logits + (long long)r * cols;
        int arg = 0;
        for (int c = 1; c < cols; ++c)
            if (x[c] > x[arg]) arg = c;
        const double top = (double)x[arg];
        double sum = 0.0;
        for (int c = 0; c < cols; ++c) sum += exp((double)x[c] - top);
        const double logSum = log(sum);
        const double w = (double)mask[r];
        if (w != 0.0) {
            const int label = tl_class(labels[r], cols);
            count += w;
            if (label < 0) {
                loss += nan("");
            } else {
                loss += w * (top - (double)x[label] + logSum);
                if (label == arg) correct += w;
            }
        }
        // Written after the loss, so that probs may alias logits.
        float *p = probs + (long long)r * cols;
        for (int c = 0; c < cols; ++c) p[c] = (float)exp((double)x[c] - top - logSum);
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

// dlogits = mask*(probs - onehot(labels))/n, n = max(1, sum(mask)). Rows
// with mask 0 get zeros; a counted row whose label is not a class index gets
// NaNs, as in tl_softmax_xent.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_softmax_xent_grad(int rows, int cols, const float *probs,
                     const float *labels, const float *mask,
                     float *dlogits) {
    __shared__ double sh[TL_BLOCK];
    const double n = tl_mask_count(rows, mask, sh);
    const long long total = (long long)rows * cols;
    TL_FOR_EACH(i, total) {
        const int r = (int)(i / cols), c = (int)(i % cols);
        const double w = (double)mask[r];
        if (w == 0.0) {
            dlogits[i] = 0.0f;
            continue;
        }
        const int label = tl_class(labels[r], cols);
        double g = (double)probs[i];
        if (label < 0) {
            g = nan("");
        } else if (c == label) {
            g -= 1.0;
        }
        dlogits[i] = (float)(g * (w / n));
    }
}

// stats[loss] += sum over rows of mask * mean_c (pred-target)^2;
// stats[count] += sum(mask). Rows with mask 0 are not read.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_mse(int rows, int cols, const float *pred, const float *target,
       const float *mask, float *stats) {
    __shared__ double sh[TL_BLOCK];
    double loss = 0.0, count = 0.0;
    for (int r = threadIdx.x; r < rows; r += TL_BLOCK) {
        const double w = (double)mask[r];
        if (w == 0.0) continue;
        const float *p = pred + (long long)r * cols, *t = target + (long long)r * cols;
        double s = 0.0;
        for (int c = 0; c < cols; ++c) {
            const double d = (double)p[c] - (double)t[c];
            s += d * d;
        }
        loss += w * s / (double)cols;
        count += w;
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
tl_mse_grad(int rows, int cols, const float *pred, const float *target,
            const float *mask, float *dpred) {
    __shared__ double sh[TL_BLOCK];
    const double n = tl_mask_count(rows, mask, sh);
    const long long total = (long long)rows * cols;
    TL_FOR_EACH(i, total) {
        const double w = (double)mask[i / cols];
        if (w == 0.0) {
            dpred[i] = 0.0f;
            continue;
        }
        const double s = 2.0 * w / ((double)cols * n);
        dpred[i] = (float)(((double)pred[i] - (double)target[i]) * s);
    }
}
