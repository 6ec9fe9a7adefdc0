// Checks every kernel in kernels/ against a plain double-precision reference,
// run through the CPU emulation of emu.h. Launch geometry follows geometry.go.
// Prints one line per failure and exits non-zero when any check fails.
#include "emu.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

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

void testGemm() {
    const int shapes[][3] = {{4, 3, 5}, {37, 29, 45}, {64, 130, 100}, {33, 1, 70}, {1, 65, 33}};
    for (auto &s : shapes) {
        for (int tA = 0; tA < 2; ++tA) {
            for (int tB = 0; tB < 2; ++tB) {
                const int m = s[0], n = s[1], k = s[2];
                auto A = uniform(m * k), B = uniform(k * n), C0 = uniform(m * n);
                const float alpha = 1.5f, beta = (tA ^ tB) ? 0.5f : 0.0f;
                if (beta == 0) std::fill(C0.begin(), C0.end(), NAN);  // must not be read
                auto run = [&] {
                    auto C = C0;
                    launch(tiles(m, n), tileBlock, [&] { tl_gemm(tA, tB, m, n, k, alpha, A.data(), B.data(), beta, C.data()); });
                    return C;
                };
                auto C = run();
                sameBits("gemm", C, run());
                for (int i = 0; i < m; ++i) {
                    for (int j = 0; j < n; ++j) {
                        double sum = 0;
                        for (int l = 0; l < k; ++l)
                            sum += (double)(tA ? A[l * m + i] : A[i * k + l]) * (double)(tB ? B[j * k + l] : B[l * n + j]);
                        double want = alpha * sum + (beta != 0 ? beta * (double)C0[i * n + j] : 0);
                        check("gemm", i * n + j, C[i * n + j], want, 1e-6);
                    }
                }
            }
        }
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

void testSoftmaxXent() {
    const int rows = 300, cols = 7, pad = 4;
    auto x = uniform(rows * cols, -4, 4);
    std::vector<float> labels(rows), mask(rows, 1.0f);
    for (int r = 0; r < rows; ++r) labels[r] = (float)(r % cols);
    for (int r = rows - pad; r < rows; ++r) {
        mask[r] = 0;
        labels[r] = (r % 2) ? -1.0f : 99.0f;  // padding: any label
    }
    x[0] = x[1] = 5;  // a tie: the arg-max is 0, so row 0 (label 1) is wrong
    labels[0] = 1;
    std::vector<float> probs(rows * cols), stats = {1.5f, 2, 3, 42};
    auto run = [&] {
        auto p = probs;
        auto s = stats;
        launch(one, lineBlock, [&] { tl_softmax_xent(rows, cols, x.data(), labels.data(), mask.data(), p.data(), s.data()); });
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

    std::vector<float> d(rows * cols, NAN);
    launch(stride(rows * cols), lineBlock, [&] { tl_softmax_xent_grad(rows, cols, p.data(), labels.data(), mask.data(), d.data()); });
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
            check("xent grad", r * cols + c, d[r * cols + c], mask[r] == 0 ? 0 : (p[r * cols + c] - (c == (int)labels[r])) / (rows - pad), 1e-6);

    // A counted row with a label that is no class index poisons the loss and its gradient.
    labels[5] = 2.5f;
    std::vector<float> s3 = {0, 0, 0};
    launch(one, lineBlock, [&] { tl_softmax_xent(rows, cols, x.data(), labels.data(), mask.data(), probs.data(), s3.data()); });
    check("xent loss with a bad label", 0, s3[0], NAN, 0);
    launch(stride(rows * cols), lineBlock, [&] { tl_softmax_xent_grad(rows, cols, p.data(), labels.data(), mask.data(), d.data()); });
    check("xent grad with a bad label", 5 * cols, d[5 * cols], NAN, 0);
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
            for (int j = 0; j < cols; ++j) {
                double s = 0;
                for (int r = 0; r < rows; ++r) s += x[r * cols + j];
                check("col_sum", j, out[j], s + (beta != 0 ? beta * out0[j] : 0), 1e-6);
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

}  // namespace

int main() {
    testGemm();
    testActivations();
    testSoftmaxXent();
    testMSE();
    testColSum();
    testVectors();
    testClip();
    testOptimizers();
    if (failures) {
        std::printf("%d check(s) failed\n", failures);
        return 1;
    }
    std::printf("all kernels match the reference\n");
    return 0;
}
