// Sampling the next token on the device: SampleLast and ShiftAppend of
// device.SampleKernels. Both run as one thread, serially in increasing
// index, so the order of every sum is the CPU device's.

// id[0] = the draw from logits (vocab values) at temperature t: the first
// largest logit when t is 0; otherwise e_v = exp((logit_v - max)/t) in
// double, u = w0·2^-32 with w0 the first word of the Philox block at rng's
// offset (key the seed), and the first v whose running sum of e exceeds
// u·Σe (the last v with e_v > 0 should rounding leave none). rng is read,
// not advanced.
extern "C" __global__ void __launch_bounds__(1)
tl_sample_last(int vocab, float t, const float *logits, const unsigned *rng, float *id) {
    int best = 0;
    for (int v = 1; v < vocab; ++v)
        if (logits[v] > logits[best]) best = v;
    if (t == 0.0f) {
        id[0] = (float)best;
        return;
    }
    const unsigned long long offset = (unsigned long long)rng[2] | ((unsigned long long)rng[3] << 32);
    unsigned w[4] = {(unsigned)offset, (unsigned)(offset >> 32), 0u, 0u};
    tl_philox(w, rng[0], rng[1]);
    const double u = (double)w[0] * 2.3283064365386963e-10;  // 2^-32
    const double td = (double)t, top = (double)logits[best];
    double total = 0.0;
    for (int v = 0; v < vocab; ++v) total += exp(((double)logits[v] - top) / td);
    const double target = u * total;
    double run = 0.0;
    int last = best;
    for (int v = 0; v < vocab; ++v) {
        const double e = exp(((double)logits[v] - top) / td);
        if (e > 0.0) last = v;
        run += e;
        if (run > target) {
            id[0] = (float)v;
            return;
        }
    }
    id[0] = (float)last;
}

// window[i] = window[i+1] for i < n-1, then window[n-1] = id[0]. One thread.
extern "C" __global__ void __launch_bounds__(1)
tl_shift_append(int n, const float *id, float *window) {
    for (int i = 0; i + 1 < n; ++i) window[i] = window[i + 1];
    window[n - 1] = id[0];
}
