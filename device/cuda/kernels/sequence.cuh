// Sequence kernels (device.SequenceKernels): token embedding and its
// gradient, layer normalisation, the head split and merge of multi-head
// attention, and the causal softmax. The batched product of attention is
// tl_gemm_batched in gemm.cuh.
//
// Determinism without atomics: every output element is written by one
// thread. The embedding's gradient gathers: the thread of table element
// (v, d) walks all n ids in increasing i and adds the dy of the positions
// naming v in float32 from zero, the order and precision the CPU device's
// scatter in increasing i gives. Layer normalisation gives each row TL_TILE
// lanes of one block (TL_TILE_ROWS rows a block): each lane sums a fixed
// strided set of the row's columns in double, and the lanes' sums are added
// in a fixed tree, so the row statistics are reproducible but not summed in
// plain column order. The parameter gradient's column sums run as batch
// normalisation's (a block per TL_TILE columns, TL_BN_ROWS row lanes, a
// fixed tree). The causal softmax gives each row one thread, which sums the
// row's exponentials in double in increasing j, exactly the contract's
// order.
#pragma once
#include "common.cuh"
#include "image.cuh"

// y[i, d] = table[ids[i], d], or NaN when ids[i] is not a token id (an
// integer in [0, vocab)); one thread per element of y.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_embedding(int n, int vocab, int dim, const float *ids, const float *table, float *y) {
    const long long total = (long long)n * dim;
    TL_FOR_EACH(e, total) {
        const long long i = e / dim;
        const int d = (int)(e - i * dim);
        const int v = tl_class(ids[i], vocab);
        y[e] = v < 0 ? (float)nan("") : table[(long long)v * dim + d];
    }
}

// dtable[v, d] = the sum of dy[i, d] over the positions i with ids[i] = v,
// in float32 from zero in increasing i; one thread per element of dtable,
// so a row no position names is zero and an invalid id adds nothing. The
// threads of a warp share v whenever dim >= 32, so their reads of ids are
// one broadcast.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_embedding_grad(int n, int vocab, int dim, const float *ids, const float *dy, float *dtable) {
    const long long total = (long long)vocab * dim;
    TL_FOR_EACH(e, total) {
        const int v = (int)(e / dim), d = (int)(e - (long long)v * dim);
        float s = 0.0f;
        for (int i = 0; i < n; ++i)
            if (tl_class(ids[i], vocab) == v) s += dy[(long long)i * dim + d];
        dtable[e] = s;
    }
}

// Layer normalisation of each row of x (rows×cols). A block of
// TL_TILE×TL_TILE_ROWS threads owns TL_TILE_ROWS rows, one per threadIdx.y;
// lane tx sums columns tx, tx+TL_TILE, ... in double and tl_lane_sum adds
// the lanes: the mean, then the biased variance around it (two passes).
// stats receives the mean and invstd = 1/sqrt(var+eps), each rounded to
// float32, and xhat and y are computed in float32 from those stored values:
// xhat = (x-mean)·invstd, y = gamma·xhat + beta. x is read in full before
// the first write, but the contract keeps xhat and y apart from x anyway.
extern "C" __global__ void __launch_bounds__(TL_TILE * TL_TILE_ROWS)
tl_layernorm(int rows, int cols, float eps, const float *x, const float *params, float *stats, float *xhat, float *y) {
    __shared__ double sh[TL_TILE_ROWS][TL_TILE];
    const int tx = threadIdx.x;
    const int r = blockIdx.x * TL_TILE_ROWS + threadIdx.y;
    const bool live = r < rows;
    const long long base = (long long)r * cols;
    double s = 0.0;
    if (live)
        for (int c = tx; c < cols; c += TL_TILE) s += (double)x[base + c];
    const double mean = tl_lane_sum(s, sh) / (double)cols;
    double q = 0.0;
    if (live)
        for (int c = tx; c < cols; c += TL_TILE) {
            const double d = (double)x[base + c] - mean;
            q += d * d;
        }
    const double var = tl_lane_sum(q, sh) / (double)cols;
    if (!live) return;
    const float m32 = (float)mean, inv32 = (float)(1.0 / sqrt(var + (double)eps));
    if (tx == 0) {
        stats[r] = m32;
        stats[rows + r] = inv32;
    }
    for (int c = tx; c < cols; c += TL_TILE) {
        const float h = (x[base + c] - m32) * inv32;
        xhat[base + c] = h;
        y[base + c] = params[c] * h + params[cols + c];
    }
}

// Layer normalisation's input gradient, rows as tl_layernorm: with g =
// gamma·dy (exact in double), a = mean_cols(g) and b = mean_cols(g·xhat)
// (the sums in double, as tl_layernorm's), dx = invstd·((g - a) - xhat·b)
// in double, rounded to float32 once, as the CPU device computes it. Each
// element of dy and xhat is read before its dx is written, by the same
// thread, so dx may be dy or xhat.
extern "C" __global__ void __launch_bounds__(TL_TILE * TL_TILE_ROWS)
tl_layernorm_grad(int rows, int cols, const float *dy, const float *xhat, const float *params, const float *stats,
                  float *dx) {
    __shared__ double sh[TL_TILE_ROWS][TL_TILE];
    const int tx = threadIdx.x;
    const int r = blockIdx.x * TL_TILE_ROWS + threadIdx.y;
    const bool live = r < rows;
    const long long base = (long long)r * cols;
    double sg = 0.0, sgh = 0.0;
    if (live)
        for (int c = tx; c < cols; c += TL_TILE) {
            const double g = (double)params[c] * (double)dy[base + c];
            sg += g;
            sgh += g * (double)xhat[base + c];
        }
    const double a = tl_lane_sum(sg, sh) / (double)cols;
    const double b = tl_lane_sum(sgh, sh) / (double)cols;
    if (!live) return;
    const double inv = (double)stats[rows + r];
    for (int c = tx; c < cols; c += TL_TILE) {
        const double g = (double)params[c] * (double)dy[base + c];
        dx[base + c] = (float)(inv * ((g - a) - (double)xhat[base + c] * b));
    }
}

// Layer normalisation's parameter gradient: dparams = (dgamma = Σ_rows
// dy·xhat, then dbeta = Σ_rows dy), column sums in double rounded to
// float32 once. A block of TL_TILE×TL_BN_ROWS threads owns TL_TILE columns;
// row lane ty sums rows ty, ty+TL_BN_ROWS, ... and tl_bn_col_sum adds the
// lanes in a fixed tree, as batch normalisation's column sums.
extern "C" __global__ void __launch_bounds__(TL_TILE * TL_BN_ROWS)
tl_layernorm_param_grad(int rows, int cols, const float *dy, const float *xhat, float *dparams) {
    __shared__ double sh[TL_BN_ROWS][TL_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * TL_TILE + tx;
    double g = 0.0, b = 0.0;
    if (c < cols)
        for (int r = ty; r < rows; r += TL_BN_ROWS) {
            const long long i = (long long)r * cols + c;
            const double d = (double)dy[i];
            b += d;
            g += d * (double)xhat[i];
        }
    const double dgamma = tl_bn_col_sum(g, sh), dbeta = tl_bn_col_sum(b, sh);
    if (ty == 0 && c < cols) {
        dparams[c] = (float)dgamma;
        dparams[cols + c] = (float)dbeta;
    }
}

// y[b, h, t, d] = x[b, t, h·size+d]; one thread per element of y.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_split_heads(int batch, int seq, int heads, int size, const float *x, float *y) {
    const long long total = (long long)batch * heads * seq * size;
    TL_FOR_EACH(e, total) {
        const int d = (int)(e % size);
        const long long row = e / size;  // (b·heads + h)·seq + t
        const int t = (int)(row % seq);
        const long long bh = row / seq;
        const int h = (int)(bh % heads);
        const long long b = bh / heads;
        y[e] = x[((b * seq + t) * heads + h) * size + d];
    }
}

// y[b, t, h·size+d] = x[b, h, t, d]; one thread per element of y.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_merge_heads(int batch, int seq, int heads, int size, const float *x, float *y) {
    const long long total = (long long)batch * seq * heads * size;
    TL_FOR_EACH(e, total) {
        const int d = (int)(e % size);
        const long long row = e / size;  // (b·seq + t)·heads + h
        const int h = (int)(row % heads);
        const long long bt = row / heads;
        const int t = (int)(bt % seq);
        const long long b = bt / seq;
        y[e] = x[((b * heads + h) * seq + t) * size + d];
    }
}

// Row t of each seq×seq group: with m = max_{j<=t} x_j (in float32) and
// e_j = exp(scale·(x_j - m)) in double, y_j = e_j / Σ_{j'<=t} e_j' for
// j <= t, the sum in double in increasing j' and each y_j rounded to
// float32 once (the CPU device's steps); 0 for j > t. One thread per row,
// which reads its row in full before writing it, so x may be y. A NaN in
// the row's first t+1 scores makes the row NaN (through the sum).
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_causal_softmax(int groups, int seq, float scale, const float *x, float *y) {
    const long long rows = (long long)groups * seq;
    const double sc = (double)scale;
    TL_FOR_EACH(row, rows) {
        const int t = (int)(row % seq);
        const float *xr = x + row * seq;
        float *yr = y + row * seq;
        float top = xr[0];
        for (int j = 1; j <= t; ++j)
            if (xr[j] > top) top = xr[j];
        const double m = (double)top;
        double sum = 0.0;
        for (int j = 0; j <= t; ++j) sum += exp(sc * ((double)xr[j] - m));
        for (int j = 0; j <= t; ++j) yr[j] = (float)(exp(sc * ((double)xr[j] - m)) / sum);
        for (int j = t + 1; j < seq; ++j) yr[j] = 0.0f;
    }
}

// dx[t, j] = scale·y_j·(dy_j - Σ_{j'<=t} dy_j'·y_j') for j <= t, in double
// (the sum in increasing j', each product exact) and rounded to float32
// once, as on the CPU device; 0 for j > t. One thread per row, which reads
// its row of dy in full before writing dx, so dx may be dy.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_causal_softmax_grad(int groups, int seq, float scale, const float *y, const float *dy, float *dx) {
    const long long rows = (long long)groups * seq;
    const double sc = (double)scale;
    TL_FOR_EACH(row, rows) {
        const int t = (int)(row % seq);
        const float *yr = y + row * seq, *dyr = dy + row * seq;
        float *dxr = dx + row * seq;
        double s = 0.0;
        for (int j = 0; j <= t; ++j) s += (double)dyr[j] * (double)yr[j];
        for (int j = 0; j <= t; ++j) dxr[j] = (float)(sc * (double)yr[j] * ((double)dyr[j] - s));
        for (int j = t + 1; j < seq; ++j) dxr[j] = 0.0f;
    }
}
