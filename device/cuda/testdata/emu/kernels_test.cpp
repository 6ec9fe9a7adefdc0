// Checks every kernel in kernels/ against a plain double-precision reference,
// run through the CPU emulation of emu.h. Launch geometry follows geometry.go.
// Prints one line per failure and exits non-zero when any check fails.
#include "emu.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>

#include "tolaria.cu"

namespace {

std::mt19937 rng(1);
int failures = 0;

std::vector<float> uniform(int n, float lo = -1, float hi = 1) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v) x = u(rng);
    return v;
}

void check(const char *what, int i, double got, double want, double tol) {
    bool ok = std::isnan(want) ? std::isnan(got) : std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
    if (!ok && failures++ < 30) std::printf("FAIL %s[%d]: got %.9g, want %.9g\n", what, i, got, want);
}

void sameBits(const char *what, const std::vector<float> &a, const std::vector<float> &b) {
    if (a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) {
        failures++;
        std::printf("FAIL %s: a repeated launch gave different bits\n", what);
    }
}

dim3 stride(long long n) { return {(unsigned)std::min<long long>(std::max<long long>((n + TL_BLOCK - 1) / TL_BLOCK, 1), 8), 1}; }
dim3 tiles(int rows, int cols) { return {(unsigned)((cols + TL_TILE - 1) / TL_TILE), (unsigned)((rows + TL_TILE - 1) / TL_TILE)}; }
const dim3 tileBlock{TL_TILE, TL_TILE_ROWS}, lineBlock{TL_BLOCK, 1}, one{1, 1};

double gelu(double z) { return 0.5 * z * (1 + std::tanh(TL_GELU_S * (z + TL_GELU_C * z * z * z))); }

// gemmAgainstDouble checks a GEMM kernel against the float64 sum for every
// transposition of each shape (m, n, k), beta zero (C must not be read) and
// not, and that a repeated launch gives the same bits. kernel launches one
// product: (tA, tB, m, n, k, alpha, A, B, beta, C).
template <class Kernel>
void gemmAgainstDouble(const char *what, const std::vector<std::array<int, 3>> &shapes, float alpha, float betaT,
                       Kernel kernel) {
    for (auto &s : shapes) {
        for (int tA = 0; tA < 2; ++tA) {
            for (int tB = 0; tB < 2; ++tB) {
                const int m = s[0], n = s[1], k = s[2];
                auto A = uniform(m * k), B = uniform(k * n), C0 = uniform(m * n);
                const float beta = (tA ^ tB) ? betaT : 0.0f;
                if (beta == 0) std::fill(C0.begin(), C0.end(), NAN);  // must not be read
                auto run = [&] {
                    auto C = C0;
                    kernel(tA, tB, m, n, k, alpha, A.data(), B.data(), beta, C.data());
                    return C;
                };
                auto C = run();
                sameBits(what, C, run());
                for (int i = 0; i < m; ++i) {
                    for (int j = 0; j < n; ++j) {
                        double sum = 0;
                        for (int l = 0; l < k; ++l)
                            sum += (double)(tA ? A[l * m + i] : A[i * k + l]) * (double)(tB ? B[j * k + l] : B[l * n + j]);
                        double want = alpha * sum + (beta != 0 ? beta * (double)C0[i * n + j] : 0);
                        check(what, i * n + j, C[i * n + j], want, 1e-6);
                    }
                }
            }
        }
    }
}

void testGemm() {
    gemmAgainstDouble("gemm", {{4, 3, 5}, {37, 29, 45}, {64, 130, 100}, {33, 1, 70}, {1, 65, 33}}, 1.5f, 0.5f,
                      [](int tA, int tB, int m, int n, int k, float alpha, const float *A, const float *B, float beta,
                         float *C) { launch(tiles(m, n), tileBlock, [&] { tl_gemm(tA, tB, m, n, k, alpha, A, B, beta, C); }); });
}

// tl_gemm_klanes with k long and not a multiple of TL_KLANES, a tile's rows
// past m (9 of 32) and partial tiles; in one part, and in three finished by
// tl_gemm_parts_sum.
void testGemmKLanes() {
    const dim3 block{TL_TILE, TL_KLANES};
    for (int parts : {1, 3}) {
        // (The emulation runs a GPU thread as a fiber: a few shapes only.)
        const std::vector<std::array<int, 3>> shapes =
            parts == 1 ? std::vector<std::array<int, 3>>{{9, 32, 2053}, {33, 5, 2050}} : std::vector<std::array<int, 3>>{{9, 32, 2053}};
        gemmAgainstDouble(parts == 1 ? "gemm_klanes" : "gemm_klanes in 3 parts", shapes, 0.75f, -0.5f,
                          [&](int tA, int tB, int m, int n, int k, float alpha, const float *A, const float *B, float beta,
                              float *C) {
                              std::vector<double> ws((size_t)parts * m * n, NAN);
                              dim3 grid = tiles(m, n);
                              grid.y *= parts;
                              launch(grid, block, [&] {
                                  tl_gemm_klanes(tA, tB, m, n, k, alpha, A, B, beta, C, parts, ws.data());
                              });
                              if (parts > 1)
                                  launch(stride((long long)m * n), lineBlock,
                                         [&] { tl_gemm_parts_sum(m, n, parts, alpha, ws.data(), beta, C); });
                          });
    }
}

void testActivations() {
    const int rows = 3, cols = 300, n = rows * cols;
    for (int act = 0; act <= 3; ++act) {
        auto z = uniform(n, -3, 3), bias = uniform(cols), dy = uniform(n);
        auto z0 = z;
        std::vector<float> y(n), dz(n);
        launch(stride(n), lineBlock, [&] { tl_bias_act(act, rows, cols, z.data(), bias.data(), y.data()); });
        launch(stride(n), lineBlock, [&] { tl_act_grad(act, rows, cols, z.data(), dy.data(), dz.data()); });
        for (int i = 0; i < n; ++i) {
            const float zi = z0[i] + bias[i % cols];
            check("bias_act z", i, z[i], zi, 0);
            const double want = act == 0 ? zi : act == 1 ? std::max<double>(zi, 0) : act == 2 ? gelu(zi) : std::tanh((double)zi);
            check("bias_act y", i, y[i], want, 1e-6);
            const double t = std::tanh(TL_GELU_S * (zi + TL_GELU_C * zi * zi * zi));
            const double th = std::tanh((double)zi);
            const double d = act == 0   ? 1
                             : act == 1 ? (zi > 0)
                             : act == 2 ? 0.5 * (1 + t) + 0.5 * zi * (1 - t * t) * TL_GELU_S * (1 + 3 * TL_GELU_C * zi * zi)
                                        : 1 - th * th;
            check("act_grad", i, dz[i], dy[i] * d, 1e-6);
        }
    }
}

// xentLaunch runs tl_softmax_xent as the Go side does: blocks 0 (one
// block, adding to stats itself) or that many blocks, their sums in ws and
// added by tl_loss_parts_sum.
void xentLaunch(int blocks, int rows, int cols, const float *x, const float *labels, const float *mask, float *p,
                float *s) {
    std::vector<double> ws(3 * std::max(blocks, 1), NAN);
    launch({(unsigned)std::max(blocks, 1), 1}, tileBlock, [&] { tl_softmax_xent(rows, cols, x, labels, mask, p, s, ws.data()); });
    if (blocks > 1) launch(one, lineBlock, [&] { tl_loss_parts_sum(blocks, ws.data(), s); });
}

// tl_softmax_xent in one block and over several (fewer than the row
// groups, so each block takes several): each against the double reference,
// with ties inside a lane's columns and across lanes, and a repeated launch
// with the same bits.
void testSoftmaxXent() {
    for (int cols : {7, 70}) {
        for (int blocks : {0, 5}) {
            const int rows = 300, pad = 4;
            auto x = uniform(rows * cols, -4, 4);
            std::vector<float> labels(rows), mask(rows, 1.0f);
            for (int r = 0; r < rows; ++r) labels[r] = (float)(r % cols);
            for (int r = rows - pad; r < rows; ++r) {
                mask[r] = 0;
                labels[r] = (r % 2) ? -1.0f : 99.0f;  // padding: any label
            }
            x[0] = x[1] = 5;  // a tie: the arg-max is 0, so row 0 (label 1) is wrong
            labels[0] = 1;
            if (cols > 64) {
                x[cols + 35] = x[cols + 3] = 9;        // a tie in one lane: 3
                x[2 * cols + 40] = x[2 * cols + 10] = 9;  // across lanes: 10
                labels[1] = 3;
                labels[2] = 40;
            }
            std::vector<float> probs(rows * cols), stats = {1.5f, 2, 3, 42};
            auto run = [&] {
                auto p = probs;
                auto s = stats;
                xentLaunch(blocks, rows, cols, x.data(), labels.data(), mask.data(), p.data(), s.data());
                return std::make_pair(p, s);
            };
            auto [p, s] = run();
            auto [p2, s2] = run();
            sameBits("softmax_xent probs", p, p2);
            sameBits("softmax_xent stats", s, s2);
            double loss = 1.5, correct = 2, count = 3;
            for (int r = 0; r < rows; ++r) {
                const float *xr = &x[r * cols];
                int best = 0;
                for (int c = 1; c < cols; ++c)
                    if (xr[c] > xr[best]) best = c;
                double sum = 0;
                for (int c = 0; c < cols; ++c) sum += std::exp((double)xr[c] - xr[best]);
                for (int c = 0; c < cols; ++c) check("probs", r * cols + c, p[r * cols + c], std::exp((double)xr[c] - xr[best]) / sum, 1e-6);
                if (mask[r] == 0) continue;
                count += 1;
                loss += xr[best] + std::log(sum) - xr[(int)labels[r]];
                if (best == (int)labels[r]) correct += 1;
            }
            check("xent loss", 0, s[0], loss, 1e-6);
            check("xent correct", 1, s[1], correct, 0);
            check("xent count", 2, s[2], count, 0);
            check("xent past stats", 3, s[3], 42, 0);

            // probs may be logits.
            auto xp = x;
            auto s4 = stats;
            xentLaunch(blocks, rows, cols, xp.data(), labels.data(), mask.data(), xp.data(), s4.data());
            sameBits("softmax_xent probs over logits", xp, p);
            sameBits("softmax_xent stats, probs over logits", s4, s);

            std::vector<float> d(rows * cols, NAN);
            launch(stride(rows * cols), lineBlock, [&] { tl_softmax_xent_grad(rows, cols, p.data(), labels.data(), mask.data(), d.data()); });
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < cols; ++c)
                    check("xent grad", r * cols + c, d[r * cols + c], mask[r] == 0 ? 0 : (p[r * cols + c] - (c == (int)labels[r])) / (rows - pad), 1e-6);

            // A counted row with a label that is no class index poisons the loss and its gradient.
            labels[5] = 2.5f;
            std::vector<float> s3 = {0, 0, 0};
            xentLaunch(blocks, rows, cols, x.data(), labels.data(), mask.data(), probs.data(), s3.data());
            check("xent loss with a bad label", 0, s3[0], NAN, 0);
            launch(stride(rows * cols), lineBlock, [&] { tl_softmax_xent_grad(rows, cols, p.data(), labels.data(), mask.data(), d.data()); });
            check("xent grad with a bad label", 5 * cols, d[5 * cols], NAN, 0);
        }
    }
    // The arg-max of a row scanned left to right: a NaN first element keeps
    // 0, later NaNs are passed over, and a row of -inf gives 0.
    const int cols = 40;
    std::vector<float> x(3 * cols, -INFINITY), labels = {0, 39, 0}, mask = {1, 1, 1}, p(3 * cols), st = {0, 0, 0};
    x[0] = NAN;
    x[cols + 5] = NAN;
    x[cols + 39] = 1;
    xentLaunch(0, 3, cols, x.data(), labels.data(), mask.data(), p.data(), st.data());
    check("xent correct with NaN and -inf", 1, st[1], 3, 0);
}

void testMSE() {
    const int rows = 9, cols = 5;
    auto p = uniform(rows * cols), t = uniform(rows * cols);
    std::vector<float> mask(rows, 1), stats = {0, 7, 0};
    mask[8] = 0;
    launch(one, lineBlock, [&] { tl_mse(rows, cols, p.data(), t.data(), mask.data(), stats.data()); });
    double loss = 0;
    for (int r = 0; r < 8; ++r) {
        double s = 0;
        for (int c = 0; c < cols; ++c) s += ((double)p[r * cols + c] - t[r * cols + c]) * ((double)p[r * cols + c] - t[r * cols + c]);
        loss += s / cols;
    }
    check("mse loss", 0, stats[0], loss, 1e-6);
    check("mse correct untouched", 1, stats[1], 7, 0);
    check("mse count", 2, stats[2], 8, 0);
    std::vector<float> d(rows * cols, NAN);
    launch(stride(rows * cols), lineBlock, [&] { tl_mse_grad(rows, cols, p.data(), t.data(), mask.data(), d.data()); });
    for (int i = 0; i < rows * cols; ++i) check("mse grad", i, d[i], i / cols == 8 ? 0 : 2 * ((double)p[i] - t[i]) / (cols * 8.0), 1e-6);
}

void testColSum() {
    const int shapes[][2] = {{1, 1}, {200, 130}, {7, 64}, {9, 33}};
    for (auto &sh : shapes) {
        const int rows = sh[0], cols = sh[1];
        auto x = uniform(rows * cols), out0 = uniform(cols);
        for (float beta : {0.0f, -1.0f}) {
            auto out = out0;
            if (beta == 0) std::fill(out.begin(), out.end(), NAN);
            launch({(unsigned)((cols + TL_TILE - 1) / TL_TILE), 1}, tileBlock, [&] { tl_col_sum(rows, cols, x.data(), beta, out.data()); });
            // Split into parts (the last shorter, or empty for 200 rows in 7).
            const int parts = std::min(rows, 7);
            auto split = [&] {
                auto o = out0;
                if (beta == 0) std::fill(o.begin(), o.end(), NAN);
                std::vector<double> ws(parts * cols, NAN);
                launch({(unsigned)((cols + TL_TILE - 1) / TL_TILE), (unsigned)parts}, tileBlock,
                       [&] { tl_col_parts(0, rows, cols, x.data(), x.data(), parts, ws.data()); });
                launch(stride(cols), lineBlock, [&] { tl_gemm_parts_sum(1, cols, parts, 1.0f, ws.data(), beta, o.data()); });
                return o;
            };
            auto outParts = split();
            sameBits("col_sum in parts", outParts, split());
            for (int j = 0; j < cols; ++j) {
                double s = 0;
                for (int r = 0; r < rows; ++r) s += x[r * cols + j];
                check("col_sum", j, out[j], s + (beta != 0 ? beta * out0[j] : 0), 1e-6);
                check("col_sum in parts", j, outParts[j], s + (beta != 0 ? beta * out0[j] : 0), 1e-6);
            }
        }
    }
}

void testVectors() {
    const int n = 1000;
    auto x = uniform(n), y = uniform(n), x0 = x, y0 = y;
    launch(stride(n), lineBlock, [&] { tl_scale(n, x.data(), -3.0f); });
    launch(stride(n), lineBlock, [&] { tl_axpy(n, 0.25f, x0.data(), y.data()); });
    for (int i = 0; i < n; ++i) {
        check("scale", i, x[i], -3.0 * x0[i], 1e-7);
        check("axpy", i, y[i], y0[i] + 0.25 * x0[i], 1e-6);
    }
    launch(stride(n), lineBlock, [&] { tl_fill(n, x.data(), 2.5f); });
    for (int i = 0; i < n; ++i) check("fill", i, x[i], 2.5, 0);
}

void testClip() {
    for (int n : {1, 37, 3000}) {
        for (double ratio : {0.25, 2.0}) {
            auto x = uniform(n), x0 = x;
            std::vector<float> norm = {-1, 7};
            double ss = 0;
            for (float v : x) ss += (double)v * v;
            const double nrm = std::sqrt(ss);
            const float maxNorm = (float)(nrm * ratio);
            launch(one, {TL_CLIP_BLOCK, 1}, [&] { tl_clip_global_norm(n, x.data(), maxNorm, norm.data()); });
            check("norm", 0, norm[0], nrm, 1e-6);
            check("norm untouched", 1, norm[1], 7, 0);
            const double f = ratio < 1 ? maxNorm / (nrm + 1e-6) : 1;
            for (int i = 0; i < n; ++i) check("clipped", i, x[i], x0[i] * f, 1e-5);
        }
    }
}

void testOptimizers() {
    const int n = 1000;
    const std::vector<float> hyper = {0.05f, 0.271f, 0.003f, NAN};
    for (int nesterov = 0; nesterov < 2; ++nesterov) {
        auto p = uniform(n), g = uniform(n), vel = uniform(n), p0 = p, vel0 = vel;
        launch(stride(n), lineBlock, [&] { tl_sgd_momentum(n, p.data(), g.data(), vel.data(), hyper.data(), 0.9f, 0.01f, nesterov); });
        for (int i = 0; i < n; ++i) {
            const double gi = g[i] + 0.01 * p0[i], v = 0.9 * vel0[i] + gi;
            check("sgd vel", i, vel[i], v, 1e-5);
            check("sgd p", i, p[i], p0[i] - 0.05 * (nesterov ? gi + 0.9 * v : v), 1e-5);
        }
    }
    auto p = uniform(n), g = uniform(n), m = uniform(n, -0.1f, 0.1f), v = uniform(n, 0, 0.01f);
    auto p0 = p, m0 = m, v0 = v;
    launch(stride(n), lineBlock, [&] { tl_adamw(n, p.data(), g.data(), m.data(), v.data(), hyper.data(), 0.9f, 0.999f, 1e-8f, 0.01f); });
    for (int i = 0; i < n; ++i) {
        const double mi = 0.9 * m0[i] + 0.1 * g[i], vi = 0.999 * v0[i] + 0.001 * g[i] * g[i];
        const double step = (mi / 0.271) / (std::sqrt(vi / 0.003) + 1e-8);
        check("adamw m", i, m[i], mi, 1e-5);
        check("adamw v", i, v[i], vi, 1e-5);
        check("adamw p", i, p[i], p0[i] - 0.05 * (0.01 * p0[i] + step), 1e-5);
    }
}


// Image kernels (image.cuh), NHWC. The references loop over the whole
// output grid for each input element, the definitions in device/image.go.
struct Img {
    int N, H, W, C;
    int at(int n, int y, int x, int c) const { return ((n * H + y) * W + x) * C + c; }
    bool inside(int y, int x) const { return y >= 0 && y < H && x >= 0 && x < W; }
};

void testIm2ColCol2Im() {
    // N, H, W, C, KH, KW, stride, pad
    const int shapes[][8] = {{2, 5, 4, 3, 3, 3, 1, 1}, {1, 7, 6, 2, 3, 2, 2, 1}, {3, 4, 4, 1, 1, 1, 1, 0}, {1, 6, 5, 4, 4, 4, 3, 2}};
    for (auto &s : shapes) {
        const Img im{s[0], s[1], s[2], s[3]};
        const int KH = s[4], KW = s[5], st = s[6], pad = s[7];
        const int OH = (im.H + 2 * pad - KH) / st + 1, OW = (im.W + 2 * pad - KW) / st + 1;
        const int ncols = KH * KW * im.C, rows = im.N * OH * OW, inLen = im.N * im.H * im.W * im.C;
        auto x = uniform(inLen), dcols = uniform(rows * ncols);
        std::vector<float> cols(rows * ncols, NAN), dx(inLen, NAN);
        launch(stride((long long)rows * ncols), lineBlock, [&] { tl_im2col(im.N, im.H, im.W, im.C, KH, KW, st, pad, x.data(), cols.data()); });
        auto run = [&] {
            auto d = dx;
            launch(stride(inLen), lineBlock, [&] { tl_col2im(im.N, im.H, im.W, im.C, KH, KW, st, pad, dcols.data(), d.data()); });
            return d;
        };
        dx = run();
        sameBits("col2im", dx, run());
        std::vector<double> want(inLen, 0.0);
        for (int n = 0; n < im.N; ++n)
            for (int oh = 0; oh < OH; ++oh)
                for (int ow = 0; ow < OW; ++ow)
                    for (int kh = 0; kh < KH; ++kh)
                        for (int kw = 0; kw < KW; ++kw)
                            for (int c = 0; c < im.C; ++c) {
                                const int row = (n * OH + oh) * OW + ow, col = (kh * KW + kw) * im.C + c;
                                const int y = oh * st - pad + kh, xx = ow * st - pad + kw;
                                const bool in = im.inside(y, xx);
                                check("im2col", row * ncols + col, cols[row * ncols + col], in ? x[im.at(n, y, xx, c)] : 0.0, 0);
                                if (in) want[im.at(n, y, xx, c)] += dcols[row * ncols + col];
                            }
        for (int i = 0; i < inLen; ++i) check("col2im", i, dx[i], want[i], 1e-6);
    }
}

void testPooling() {
    // N, H, W, C, K, stride, pad
    const int shapes[][7] = {{2, 5, 5, 3, 2, 2, 0}, {1, 7, 6, 2, 3, 2, 1}, {2, 4, 4, 5, 4, 1, 0}, {1, 6, 5, 3, 3, 1, 1}, {1, 1, 1, 2, 1, 1, 0}};
    for (auto &s : shapes) {
        const Img im{s[0], s[1], s[2], s[3]};
        const int K = s[4], st = s[5], pad = s[6];
        const int OH = (im.H + 2 * pad - K) / st + 1, OW = (im.W + 2 * pad - K) / st + 1;
        const int inLen = im.N * im.H * im.W * im.C, outLen = im.N * OH * OW * im.C;
        auto x = uniform(inLen), dy = uniform(outLen);
        if (im.W > 1) x[im.at(0, 0, 1, 0)] = x[im.at(0, 0, 0, 0)];  // a tie: the first position wins
        std::vector<float> y(outLen, NAN), arg(outLen, NAN), avg(outLen, NAN), dxMax(inLen, NAN), dxAvg(inLen, NAN);
        launch(stride(outLen), lineBlock, [&] { tl_max_pool(im.N, im.H, im.W, im.C, K, st, pad, x.data(), y.data(), arg.data()); });
        launch(stride(outLen), lineBlock, [&] { tl_avg_pool(im.N, im.H, im.W, im.C, K, st, pad, x.data(), avg.data()); });
        auto grads = [&] {
            auto a = dxMax, b = dxAvg;
            launch(stride(inLen), lineBlock, [&] { tl_max_pool_grad(im.N, im.H, im.W, im.C, K, st, pad, dy.data(), arg.data(), a.data()); });
            launch(stride(inLen), lineBlock, [&] { tl_avg_pool_grad(im.N, im.H, im.W, im.C, K, st, pad, dy.data(), b.data()); });
            return std::make_pair(a, b);
        };
        auto [gm, ga] = grads();
        auto [gm2, ga2] = grads();
        sameBits("max_pool_grad", gm, gm2);
        sameBits("avg_pool_grad", ga, ga2);
        std::vector<double> wantMax(inLen, 0.0), wantAvg(inLen, 0.0);
        for (int n = 0; n < im.N; ++n)
            for (int oh = 0; oh < OH; ++oh)
                for (int ow = 0; ow < OW; ++ow)
                    for (int c = 0; c < im.C; ++c) {
                        const int o = ((n * OH + oh) * OW + ow) * im.C + c;
                        double best = -INFINITY, sum = 0;
                        int pos = -1;
                        for (int kh = 0; kh < K; ++kh)
                            for (int kw = 0; kw < K; ++kw) {
                                const int yy = oh * st - pad + kh, xx = ow * st - pad + kw;
                                if (!im.inside(yy, xx)) continue;
                                const double v = x[im.at(n, yy, xx, c)];
                                sum += v;
                                wantAvg[im.at(n, yy, xx, c)] += dy[o] / double(K * K);
                                if (v > best) best = v, pos = kh * K + kw;
                            }
                        check("max_pool", o, y[o], best, 0);
                        check("max_pool arg", o, arg[o], pos, 0);
                        check("avg_pool", o, avg[o], sum / (K * K), 1e-6);
                        wantMax[im.at(n, oh * st - pad + pos / K, ow * st - pad + pos % K, c)] += dy[o];
                    }
        for (int i = 0; i < inLen; ++i) {
            check("max_pool_grad", i, gm[i], wantMax[i], 1e-6);
            check("avg_pool_grad", i, ga[i], wantAvg[i], 1e-6);
        }
    }
}

void testBatchNorm() {
    const dim3 bnBlock{TL_TILE, TL_BN_ROWS};
    for (auto [rows, cols, parts] : {std::tuple{2, 1, 1}, std::tuple{37, 5, 1}, std::tuple{300, 40, 1}, std::tuple{37, 5, 4},
                                     std::tuple{300, 40, 7}}) {
        const float eps = 1e-5f, momentum = 0.1f;
        auto x = uniform(rows * cols, 2, 5), params = uniform(2 * cols, 0.5f, 1.5f), running = uniform(2 * cols, 0.5f, 1);
        auto dy = uniform(rows * cols);
        const auto running0 = running;
        std::vector<float> stats(2 * cols, NAN), xhat(rows * cols, NAN), y(rows * cols, NAN), ye(rows * cols, NAN);
        std::vector<float> dx(rows * cols, NAN), dparams(2 * cols, NAN);
        // With parts > 1, as the Go side launches it: tl_col_parts's sums
        // in ws first (modes 0 and 1 for training, 2 for the gradient).
        const dim3 grid{(unsigned)((cols + TL_TILE - 1) / TL_TILE), (unsigned)parts};
        std::vector<double> ws(2 * parts * cols, NAN);
        auto colParts = [&](int mode, const float *a, const float *b) {
            if (parts > 1) launch(grid, tileBlock, [&] { tl_col_parts(mode, rows, cols, a, b, parts, ws.data()); });
        };
        colParts(0, x.data(), x.data());
        colParts(1, x.data(), x.data());
        launch(grid, bnBlock, [&] { tl_batchnorm_train(rows, cols, eps, momentum, x.data(), params.data(), stats.data(), xhat.data(), y.data(), running.data(), parts, ws.data()); });
        launch(stride((long long)rows * cols), lineBlock, [&] { tl_batchnorm_eval(rows, cols, eps, x.data(), params.data(), running.data(), ye.data()); });
        auto grad = [&] {
            auto d = dx, dp = dparams;
            colParts(2, dy.data(), xhat.data());
            launch(grid, bnBlock, [&] { tl_batchnorm_grad(rows, cols, dy.data(), xhat.data(), params.data(), stats.data(), d.data(), dp.data(), parts, ws.data()); });
            return std::make_pair(d, dp);
        };
        auto [g1, dp1] = grad();
        auto [g2, dp2] = grad();
        sameBits("batchnorm_grad dx", g1, g2);
        sameBits("batchnorm_grad dparams", dp1, dp2);
        for (int c = 0; c < cols; ++c) {
            double mean = 0, var = 0;
            for (int r = 0; r < rows; ++r) mean += x[r * cols + c];
            mean /= rows;
            for (int r = 0; r < rows; ++r) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
            var /= rows;
            const double inv = 1 / std::sqrt(var + eps);
            check("batchnorm mean", c, stats[c], mean, 1e-6);
            check("batchnorm invstd", c, stats[cols + c], inv, 1e-6);
            const double rm = (1 - momentum) * running0[c] + momentum * mean;
            const double rv = (1 - momentum) * running0[cols + c] + momentum * var * rows / (rows - 1);
            check("batchnorm running mean", c, running[c], rm, 1e-6);
            check("batchnorm running var", c, running[cols + c], rv, 1e-6);
            const double g = params[c], b = params[cols + c], rinv = 1 / std::sqrt((double)running[cols + c] + eps);
            double dg = 0, db = 0;
            for (int r = 0; r < rows; ++r) {
                const int i = r * cols + c;
                const double h = (x[i] - mean) * inv;
                check("batchnorm xhat", i, xhat[i], h, 1e-5);
                check("batchnorm y", i, y[i], g * h + b, 1e-5);
                check("batchnorm eval", i, ye[i], g * (x[i] - running[c]) * rinv + b, 1e-5);
                dg += (double)dy[i] * xhat[i];
                db += dy[i];
            }
            check("batchnorm dgamma", c, dp1[c], dg, 1e-6);
            check("batchnorm dbeta", c, dp1[cols + c], db, 1e-6);
            for (int r = 0; r < rows; ++r) {
                const int i = r * cols + c;
                check("batchnorm dx", i, g1[i], g * stats[cols + c] * (dy[i] - db / rows - xhat[i] * dg / rows), 1e-5);
            }
        }
    }
}

// philox is Random123's Philox 4x32-10, the reference for tl_philox.
std::array<uint32_t, 4> philox(std::array<uint32_t, 4> c, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; ++r, k0 += 0x9E3779B9u, k1 += 0xBB67AE85u) {
        const uint64_t p0 = uint64_t(0xD2511F53u) * c[0], p1 = uint64_t(0xCD9E8D57u) * c[2];
        c = {uint32_t(p1 >> 32) ^ c[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k1, uint32_t(p0)};
    }
    return c;
}

void testDropout() {
    // Random123's known answers.
    if (philox({0, 0, 0, 0}, 0, 0) != std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8} ||
        philox({~0u, ~0u, ~0u, ~0u}, ~0u, ~0u) != std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}) {
        failures++;
        std::printf("FAIL philox reference: known answers differ\n");
    }
    unsigned kat[4] = {0, 0, 0, 0};
    tl_philox(kat, 0, 0);
    for (int j = 0; j < 4; ++j) check("tl_philox known answer", j, kat[j], philox({0, 0, 0, 0}, 0, 0)[j], 0);
    for (auto [n, p, seed, offset] : {std::tuple{1LL, 0.5f, 1ULL, 0ULL}, std::tuple{1003LL, 0.3f, 0x0123456789abcdefULL, 12345ULL},
                                      std::tuple{200LL, 0.5f, 7ULL, 0x1fffffff0ULL}, std::tuple{64LL, 0.5f, 7ULL, ~0ULL - 3}}) {
        auto x = uniform(n);
        std::vector<uint32_t> rng = {uint32_t(seed), uint32_t(seed >> 32), uint32_t(offset), uint32_t(offset >> 32)};
        std::vector<float> y(n, NAN), mask(n, NAN);
        launch(stride((n + 3) / 4), lineBlock, [&] { tl_dropout(n, p, rng.data(), x.data(), y.data(), mask.data()); });
        const float keep = 1.0f / (1.0f - p);
        for (long long i = 0; i < n; ++i) {
            const uint64_t c = offset + uint64_t(i / 4);
            const uint32_t w = philox({uint32_t(c), uint32_t(c >> 32), 0, 0}, uint32_t(seed), uint32_t(seed >> 32))[i % 4];
            const double m = double(w >> 8) / 16777216.0 >= p ? keep : 0;
            check("dropout mask", (int)i, mask[i], m, 0);
            check("dropout y", (int)i, y[i], x[i] * m, 1e-6);
        }
        launch(one, one, [&] { tl_advance_rng(rng.data(), 5); });
        const uint64_t next = offset + 5;
        check("advance_rng seed lo", 0, rng[0], uint32_t(seed), 0);
        check("advance_rng seed hi", 1, rng[1], uint32_t(seed >> 32), 0);
        check("advance_rng offset lo", 2, rng[2], uint32_t(next), 0);
        check("advance_rng offset hi", 3, rng[3], uint32_t(next >> 32), 0);
    }
    const int n = 1001;
    auto a = uniform(n), b = uniform(n), z = a;
    launch(stride(n), lineBlock, [&] { tl_mul(n, a.data(), b.data(), z.data()); });
    for (int i = 0; i < n; ++i) check("mul", i, z[i], (double)(a[i] * b[i]), 0);
}

// Embedding rows by id (an invalid id gives NaN), and its gradient
// gathered per table element: exactly the float32 sums from zero in
// increasing position, an unnamed row zero, invalid ids adding nothing.
void testEmbedding() {
    const int n = 37, vocab = 11, dim = 40;
    std::uniform_int_distribution<int> tok(0, vocab - 2);  // row vocab-1 is never named
    std::vector<float> ids(n);
    for (auto &id : ids) id = (float)tok(rng);
    ids[3] = -1;
    ids[7] = (float)vocab;
    ids[8] = 2.5f;
    ids[9] = NAN;
    auto table = uniform(vocab * dim), dy = uniform(n * dim);
    std::vector<float> y(n * dim, 7), dtable(vocab * dim, 7);
    launch(stride((long long)n * dim), lineBlock, [&] { tl_embedding(n, vocab, dim, ids.data(), table.data(), y.data()); });
    auto grad = [&] {
        auto d = dtable;
        launch(stride((long long)vocab * dim), lineBlock, [&] { tl_embedding_grad(n, vocab, dim, ids.data(), dy.data(), d.data()); });
        return d;
    };
    auto g = grad();
    sameBits("embedding_grad", g, grad());
    std::vector<float> want(vocab * dim, 0.0f);
    for (int i = 0; i < n; ++i) {
        const float id = ids[i];
        const bool valid = id >= 0 && id < vocab && id == (float)(int)id;
        for (int d = 0; d < dim; ++d) {
            check("embedding", i * dim + d, y[i * dim + d], valid ? table[(int)id * dim + d] : NAN, 0);
            if (valid) want[(int)id * dim + d] += dy[i * dim + d];
        }
    }
    for (int e = 0; e < vocab * dim; ++e) check("embedding_grad", e, g[e], want[e], 0);
}

// Layer normalisation against double statistics, its input gradient
// against the double formula (also in place, dx = dy, with the same bits)
// and its parameter gradient against double column sums.
void testLayerNorm() {
    const dim3 rowBlock{TL_TILE, TL_TILE_ROWS}, colBlock{TL_TILE, TL_BN_ROWS};
    for (auto [rows, cols] : {std::pair{1, 1}, std::pair{5, 7}, std::pair{19, 70}, std::pair{70, 37}}) {
        const float eps = 1e-5f;
        auto x = uniform(rows * cols, -2, 3), params = uniform(2 * cols, 0.5f, 1.5f), dy = uniform(rows * cols);
        std::vector<float> stats(2 * rows, NAN), xhat(rows * cols, NAN), y(rows * cols, NAN);
        const dim3 rowGrid{(unsigned)((rows + TL_TILE_ROWS - 1) / TL_TILE_ROWS), 1};
        const dim3 colGrid{(unsigned)((cols + TL_TILE - 1) / TL_TILE), 1};
        auto forward = [&] {
            launch(rowGrid, rowBlock, [&] { tl_layernorm(rows, cols, eps, x.data(), params.data(), stats.data(), xhat.data(), y.data()); });
            return y;
        };
        auto y1 = forward();
        sameBits("layernorm", y1, forward());
        std::vector<float> dx(rows * cols, NAN), dparams(2 * cols, NAN);
        auto grad = [&] {
            auto d = dx, dp = dparams;
            launch(colGrid, colBlock, [&] { tl_layernorm_param_grad(rows, cols, dy.data(), xhat.data(), dp.data()); });
            launch(rowGrid, rowBlock, [&] { tl_layernorm_grad(rows, cols, dy.data(), xhat.data(), params.data(), stats.data(), d.data()); });
            return std::make_pair(d, dp);
        };
        auto [g1, dp1] = grad();
        auto [g2, dp2] = grad();
        sameBits("layernorm_grad dx", g1, g2);
        sameBits("layernorm_param_grad", dp1, dp2);
        auto inPlace = dy;
        launch(rowGrid, rowBlock, [&] { tl_layernorm_grad(rows, cols, inPlace.data(), xhat.data(), params.data(), stats.data(), inPlace.data()); });
        sameBits("layernorm_grad in place", g1, inPlace);
        for (int r = 0; r < rows; ++r) {
            double mean = 0, var = 0;
            for (int c = 0; c < cols; ++c) mean += x[r * cols + c];
            mean /= cols;
            for (int c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
            var /= cols;
            const double inv = 1 / std::sqrt(var + eps);
            check("layernorm mean", r, stats[r], mean, 1e-6);
            check("layernorm invstd", r, stats[rows + r], inv, 1e-6);
            double a = 0, b = 0;
            for (int c = 0; c < cols; ++c) {
                const int i = r * cols + c;
                const double h = (x[i] - mean) * inv;
                check("layernorm xhat", i, xhat[i], h, 1e-5);
                check("layernorm y", i, y[i], params[c] * h + params[cols + c], 1e-5);
                const double g = (double)params[c] * dy[i];
                a += g;
                b += g * xhat[i];
            }
            a /= cols;
            b /= cols;
            for (int c = 0; c < cols; ++c) {
                const int i = r * cols + c;
                check("layernorm_grad dx", i, g1[i], stats[rows + r] * ((double)params[c] * dy[i] - a - xhat[i] * b), 1e-5);
            }
        }
        for (int c = 0; c < cols; ++c) {
            double dg = 0, db = 0;
            for (int r = 0; r < rows; ++r) {
                dg += (double)dy[r * cols + c] * xhat[r * cols + c];
                db += dy[r * cols + c];
            }
            check("layernorm dgamma", c, dp1[c], dg, 1e-6);
            check("layernorm dbeta", c, dp1[cols + c], db, 1e-6);
        }
    }
}

// The head split moves every element where its index says, and the merge
// undoes it.
void testHeads() {
    const int batch = 2, seq = 3, heads = 4, size = 5, total = batch * seq * heads * size;
    auto x = uniform(total);
    std::vector<float> y(total, NAN), back(total, NAN);
    launch(stride(total), lineBlock, [&] { tl_split_heads(batch, seq, heads, size, x.data(), y.data()); });
    launch(stride(total), lineBlock, [&] { tl_merge_heads(batch, seq, heads, size, y.data(), back.data()); });
    for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h)
            for (int t = 0; t < seq; ++t)
                for (int d = 0; d < size; ++d) {
                    const int i = ((b * heads + h) * seq + t) * size + d;
                    check("split_heads", i, y[i], x[(b * seq + t) * heads * size + h * size + d], 0);
                }
    sameBits("merge_heads undoes split_heads", x, back);
}

// tl_gemm_batched: each product has tl_gemm's bits on the same operands
// (and is within rounding of the double sum), with gaps between the
// matrices (left untouched in C), a shared B (strideB 0) and every
// transposition.
void testGemmBatched() {
    for (auto [m, n, k] : {std::tuple{5, 7, 9}, std::tuple{33, 40, 35}}) {
        for (int tA = 0; tA < 2; ++tA) {
            for (int tB = 0; tB < 2; ++tB) {
                const int count = 3;
                const long long sA = m * k + 3, sB = (tA ^ tB) ? 0 : k * n + 1, sC = m * n + 2;
                const float alpha = 1.25f, beta = tB ? 0.5f : 0.0f;
                auto A = uniform((int)(sA * count)), B = uniform((int)(sB * (count - 1) + k * n)), C0 = uniform((int)(sC * count));
                if (beta == 0)
                    for (int i = 0; i < count; ++i) std::fill(C0.begin() + i * sC, C0.begin() + i * sC + m * n, NAN);
                auto run = [&] {
                    auto C = C0;
                    dim3 grid = tiles(m, n);
                    grid.x *= count;
                    launch(grid, tileBlock, [&] {
                        tl_gemm_batched(tA | tB << 1, m, n, k, alpha, A.data(), sA, B.data(), sB, beta, C.data(), sC);
                    });
                    return C;
                };
                auto C = run();
                sameBits("gemm_batched", C, run());
                for (int i = 0; i < count; ++i) {
                    std::vector<float> one(C0.begin() + i * sC, C0.begin() + i * sC + m * n);
                    launch(tiles(m, n), tileBlock, [&] {
                        tl_gemm(tA, tB, m, n, k, alpha, A.data() + i * sA, B.data() + i * sB, beta, one.data());
                    });
                    sameBits("gemm_batched as tl_gemm", one, std::vector<float>(C.begin() + i * sC, C.begin() + i * sC + m * n));
                    for (int r = 0; r < m; ++r)
                        for (int c = 0; c < n; ++c) {
                            const float *a = A.data() + i * sA, *b = B.data() + i * sB;
                            double sum = 0;
                            for (int l = 0; l < k; ++l)
                                sum += (double)(tA ? a[l * m + r] : a[r * k + l]) * (double)(tB ? b[c * k + l] : b[l * n + c]);
                            const double want = alpha * sum + (beta != 0 ? beta * (double)C0[i * sC + r * n + c] : 0);
                            check("gemm_batched", (int)(i * sC) + r * n + c, C[i * sC + r * n + c], want, 1e-6);
                        }
                    for (long long g = i * sC + m * n; g < (i + 1) * sC; ++g) check("gemm_batched gap", (int)g, C[g], C0[g], 0);
                }
            }
        }
    }
}

// The causal softmax and its gradient against double references, zeros
// above the diagonal, and in place (x = y, dx = dy) with the same bits.
void testCausalSoftmax() {
    for (auto [groups, seq] : {std::pair{3, 1}, std::pair{2, 7}, std::pair{3, 40}}) {
        const float scale = 0.35f;
        const int total = groups * seq * seq;
        auto x = uniform(total, -4, 4), dy = uniform(total);
        std::vector<float> y(total, NAN), dx(total, NAN);
        const long long rows = (long long)groups * seq;
        launch(stride(rows), lineBlock, [&] { tl_causal_softmax(groups, seq, scale, x.data(), y.data()); });
        launch(stride(rows), lineBlock, [&] { tl_causal_softmax_grad(groups, seq, scale, y.data(), dy.data(), dx.data()); });
        auto yIn = x, dxIn = dy;
        launch(stride(rows), lineBlock, [&] { tl_causal_softmax(groups, seq, scale, yIn.data(), yIn.data()); });
        launch(stride(rows), lineBlock, [&] { tl_causal_softmax_grad(groups, seq, scale, y.data(), dxIn.data(), dxIn.data()); });
        sameBits("causal_softmax in place", y, yIn);
        sameBits("causal_softmax_grad in place", dx, dxIn);
        for (long long row = 0; row < rows; ++row) {
            const int t = (int)(row % seq);
            const float *xr = x.data() + row * seq;
            double top = -INFINITY, sum = 0, s = 0;
            for (int j = 0; j <= t; ++j) top = std::max(top, (double)scale * xr[j]);
            for (int j = 0; j <= t; ++j) sum += std::exp((double)scale * xr[j] - top);
            for (int j = 0; j <= t; ++j) s += (double)dy[row * seq + j] * y[row * seq + j];
            for (int j = 0; j < seq; ++j) {
                const long long i = row * seq + j;
                const double p = j <= t ? std::exp((double)scale * xr[j] - top) / sum : 0;
                check("causal_softmax", (int)i, y[i], p, 1e-6);
                check("causal_softmax_grad", (int)i, dx[i], j <= t ? scale * (double)y[i] * (dy[i] - s) : 0, 1e-6);
            }
        }
    }
    std::vector<float> x = {1, 5, NAN, 3}, y(4, 7);
    launch(one, lineBlock, [&] { tl_causal_softmax(1, 2, 1.0f, x.data(), y.data()); });
    check("causal_softmax row 0 before a NaN", 0, y[0], 1, 0);
    check("causal_softmax above the diagonal", 1, y[1], 0, 0);
    check("causal_softmax NaN row", 2, y[2], NAN, 0);
    check("causal_softmax NaN row", 3, y[3], NAN, 0);
}

void testSample() {
    // Seed 0 at offset 0: w0 = 0x6627e8d5 (Random123's known answer), u =
    // 0.3990..., in the third interval of the CDF 0.1, 0.3, 0.6, 1.
    std::vector<uint32_t> rng = {0, 0, 0, 0};
    std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)}, id = {NAN};
    launch(one, one, [&] { tl_sample_last(4, 1.0f, logits.data(), rng.data(), id.data()); });
    check("sample_last fixed uniform", 0, id[0], 2, 0);
    std::vector<float> tied = {1, 3, 3, 2};
    launch(one, one, [&] { tl_sample_last(4, 0.0f, tied.data(), rng.data(), id.data()); });
    check("sample_last greedy", 0, id[0], 1, 0);
    // Many offsets against the float64 CDF of each offset's uniform.
    std::vector<float> x = {0.5f, -1, 2, 0, 1, -0.25f, 0.75f, 1.5f};
    for (uint64_t off = 0; off < 300; ++off) {
        rng = {12345, 0, uint32_t(off), uint32_t(off >> 32)};
        launch(one, one, [&] { tl_sample_last(8, 0.8f, x.data(), rng.data(), id.data()); });
        const double u = double(philox({uint32_t(off), uint32_t(off >> 32), 0, 0}, 12345, 0)[0]) / 4294967296.0;
        double top = -INFINITY, sum = 0, c = 0;
        for (float l : x) top = std::max(top, (double)l);
        for (float l : x) sum += std::exp(((double)l - top) / 0.8);
        int want = 7;
        for (int v = 0; v < 8; ++v) {
            c += std::exp(((double)x[v] - top) / 0.8) / sum;
            if (c > u) {
                want = v;
                break;
            }
        }
        check("sample_last against the CDF", (int)off, id[0], want, 0);
    }
    std::vector<float> window = {10, 11, 12}, next = {4};
    launch(one, one, [&] { tl_shift_append(3, next.data(), window.data()); });
    for (int i = 0; i < 3; ++i) check("shift_append", i, window[i], std::array<float, 3>{11, 12, 4}[i], 0);
}

}  // namespace

int main() {
    testGemm();
    testGemmKLanes();
    testActivations();
    testSoftmaxXent();
    testMSE();
    testColSum();
    testVectors();
    testClip();
    testOptimizers();
    testIm2ColCol2Im();
    testPooling();
    testBatchNorm();
    testDropout();
    testEmbedding();
    testLayerNorm();
    testHeads();
    testGemmBatched();
    testCausalSoftmax();
    testSample();
    if (failures) {
        std::printf("%d check(s) failed\n", failures);
        return 1;
    }
    std::printf("all kernels match the reference\n");
    return 0;
}
