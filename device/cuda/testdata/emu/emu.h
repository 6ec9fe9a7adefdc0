// A CPU emulation of the few CUDA features tolaria's kernels use, so that
// their indexing and reductions are tested where there is no GPU
// (TestKernelsInCPUEmulation). Every GPU thread of a block is a std::thread,
// __syncthreads is a barrier, blocks run one after another, and __shared__
// variables are function statics, shared by the threads of the running block.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<> *emuBarrier;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__
#define __shared__ static

inline void __syncthreads() { emuBarrier->arrive_and_wait(); }
using std::exp;
using std::log;
using std::max;
using std::min;
using std::nan;
using std::sqrt;
using std::tanh;

// launch runs kernel over a grid, each block's threads concurrently.
inline void launch(dim3 grid, dim3 block, const std::function<void()> &kernel) {
    gridDim = grid;
    blockDim = block;
    for (unsigned by = 0; by < grid.y; ++by) {
        for (unsigned bx = 0; bx < grid.x; ++bx) {
            std::barrier<> bar(block.x * block.y);
            emuBarrier = &bar;
            std::vector<std::thread> threads;
            for (unsigned ty = 0; ty < block.y; ++ty) {
                for (unsigned tx = 0; tx < block.x; ++tx) {
                    threads.emplace_back([=, &kernel] {
                        threadIdx = {tx, ty, 1};
                        blockIdx = {bx, by, 1};
                        kernel();
                    });
                }
            }
            for (auto &t : threads) t.join();
        }
    }
}
