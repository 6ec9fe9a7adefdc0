// Loss kernels. tl_mse runs as one block of TL_BLOCK threads: thread t
// handles rows t, t+TL_BLOCK, ... in order, and the per-thread sums are
// combined in a fixed tree, so the statistics are bit-reproducible;
// tl_softmax_xent spreads its rows over blocks (see there). Row
// statistics are computed in double and added to the float statistics
// buffer once. The gradient kernels run on a grid; every block computes the
// valid-row count itself, in the same order.
#pragma once
#include "common.cuh"

// tl_lane_argmax returns, to every lane of row lane threadIdx.y, the index
// of the first maximum of x[0..cols) as a left-to-right scan finds it (arg
// starts at 0 and moves only to a strictly larger value): lane tx scans
// columns tx, tx+TL_TILE, ... ignoring NaN, the lanes' candidates meet in a
// fixed tree (the larger value, on a tie the smaller index), and a row with
// no candidate, or whose first element is NaN, gives 0. Every
// thread of the block must call it; live says whether its row exists.
__device__ __forceinline__ int tl_lane_argmax(bool live, int cols, const float *x, float (*shv)[TL_TILE],
                                              int (*shi)[TL_TILE]) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    float best = 0.0f;
    int arg = cols;  // cols: no candidate yet
    if (live)
        for (int c = tx; c < cols; c += TL_TILE)
            if (x[c] == x[c] && (arg == cols || x[c] > best)) best = x[c], arg = c;
    shv[ty][tx] = best;
    shi[ty][tx] = arg;
    __syncthreads();
#pragma unroll
    for (int h = TL_TILE / 2; h > 0; h >>= 1) {
        if (tx < h) {
            const float v = shv[ty][tx + h], b = shv[ty][tx];
            const int i = shi[ty][tx + h], bi = shi[ty][tx];
            if (i < cols && (bi == cols || v > b || (v == b && i < bi))) shv[ty][tx] = v, shi[ty][tx] = i;
        }
        __syncthreads();
    }
    int r = shi[ty][0];
    __syncthreads();
    if (!live || r >= cols || x[0] != x[0]) r = 0;
    return r;
}

// probs = softmax(logits) per row. Rows with mask w != 0 add w*loss to
// stats[loss], w to stats[count] and w to stats[correct] when the arg-max
// (first maximum) is the label; rows with w == 0 add nothing, whatever their
// label. A counted row whose label is not a class index makes the loss NaN,
// so that the data bug shows.
//
// A block of TL_TILE×TL_TILE_ROWS threads takes groups of TL_TILE_ROWS rows
// (group blockIdx.x, then + gridDim.x, ...), a row to each threadIdx.y, its
// TL_TILE lanes each taking columns tx, tx+TL_TILE, ...: the arg-max, the
// sum of exp(x - max) in double (tl_lane_sum's fixed tree), then the
// probabilities. Lane 0 of each row lane keeps its rows' loss, correct and
// count in double; the block adds its row lanes in a fixed tree. With one
// block the sums are added to stats; with more, block b writes them to
// ws[3b..3b+2] (doubles) and tl_loss_parts_sum adds the blocks in order.
// The grid depends on the shape alone, so the bits do not depend on timing.
extern "C" __global__ void __launch_bounds__(TL_TILE * TL_TILE_ROWS)
tl_softmax_xent(int rows, int cols, const float *logits, const float *labels, const float *mask, float *probs,
                float *stats, double *ws) {
    __shared__ double sh[TL_TILE_ROWS][TL_TILE];
    __shared__ float shv[TL_TILE_ROWS][TL_TILE];
    __shared__ int shi[TL_TILE_ROWS][TL_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int groups = (rows + TL_TILE_ROWS - 1) / TL_TILE_ROWS;
    double loss = 0.0, correct = 0.0, count = 0.0;
    for (int g = blockIdx.x; g < groups; g += gridDim.x) {
        const int r = g * TL_TILE_ROWS + ty;
        const bool live = r < rows;
        const float *x = logits + (long long)r * cols;
        const int arg = tl_lane_argmax(live, cols, x, shv, shi);
        const double top = live ? (double)x[arg] : 0.0;
        // The label's logit is read before the sum's barriers, so that no
        // lane reads x after another has started writing probs over it.
        double w = 0.0, xl = 0.0;
        int label = -1;
        if (live) {
            w = (double)mask[r];
            if (w != 0.0) {
                label = tl_class(labels[r], cols);
                if (label >= 0) xl = (double)x[label];
            }
        }
        double part = 0.0;
        if (live)
            for (int c = tx; c < cols; c += TL_TILE) part += exp((double)x[c] - top);
        const double logSum = log(tl_lane_sum(part, sh));
        if (!live) continue;
        if (tx == 0 && w != 0.0) {
            count += w;
            if (label < 0) {
                loss += nan("");
            } else {
                loss += w * (top - xl + logSum);
                if (label == arg) correct += w;
            }
        }
        float *p = probs + (long long)r * cols;
        for (int c = tx; c < cols; c += TL_TILE) p[c] = (float)exp((double)x[c] - top - logSum);
    }
    // Row lane ty's sums (lane 0's; the other lanes hold zeros) in a fixed tree.
    double *out = sh[0];
    for (int q = 0; q < 3; ++q) {
        const double v = q == 0 ? loss : (q == 1 ? correct : count);
        if (tx == 0) sh[ty][0] = v;
        __syncthreads();
#pragma unroll
        for (int h = TL_TILE_ROWS / 2; h > 0; h >>= 1) {
            if (tx == 0 && ty < h) sh[ty][0] += sh[ty + h][0];
            __syncthreads();
        }
        if (tx == 0 && ty == 0) {
            if (gridDim.x == 1) {
                stats[q] = (float)((double)stats[q] + out[0]);
            } else {
                ws[3LL * blockIdx.x + q] = out[0];
            }
        }
        __syncthreads();
    }
}

// tl_loss_parts_sum finishes a loss kernel run over parts blocks: stats[q]
// += the sum of ws[3p+q] over p in increasing order (double), for loss (0),
// correct (1) and count (2). One thread per statistic.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_loss_parts_sum(int parts, const double *ws, float *stats) {
    const int q = threadIdx.x;
    if (q >= 3) return;
    double s = 0.0;
    for (int p = 0; p < parts; ++p) s += ws[3LL * p + q];
    stats[q] = (float)((double)stats[q] + s);
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
