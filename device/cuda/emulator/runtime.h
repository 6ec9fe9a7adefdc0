// The CUDA C builtins tolaria's kernels use, for their C++ builds inside the
// emulated driver. A block's GPU threads are fibers on the stream's host
// thread: each runs until it reaches __syncthreads or returns, and a barrier
// phase ends when every thread still running has arrived. Exited threads
// count as arrived, as on devices of compute capability 7.0 and newer.
// Launches are serialised by the driver (one kernel at a time), so the
// builtins are plain globals and __shared__ variables are function statics.
#pragma once
#include <algorithm>
#include <cmath>

#include "kernels.h"

namespace emu {
extern dim3 threadIdx, blockIdx, blockDim, gridDim;
void syncthreads();  // suspends the calling GPU thread until its block arrives
}  // namespace emu

using emu::blockDim;
using emu::blockIdx;
using emu::gridDim;
using emu::threadIdx;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__
#define __shared__ static

inline void __syncthreads() { emu::syncthreads(); }
using std::exp;
using std::log;
using std::max;
using std::min;
using std::nan;
using std::sqrt;
using std::tanh;
