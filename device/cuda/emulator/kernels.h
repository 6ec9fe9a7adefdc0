// The interface between the emulated driver and the kernels' C++ builds.
#pragma once
#include <cstddef>
#include <vector>

// dim3 is CUDA's grid and block extent.
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

namespace emu {

// KernelBuild is one kernel compiled as C++: its entry name, the size of
// each parameter in order, and a function that calls it with the
// parameters read from args[i].
struct KernelBuild {
    const char *name;
    std::vector<size_t> paramSizes;
    void (*invoke)(void *const *args);
};

// kernelBuilds lists every kernel the emulator can run.
const std::vector<KernelBuild> &kernelBuilds();

// runGrid runs k over the grid on the calling thread, block after block.
// The caller must hold the emulator's kernel lock.
void runGrid(const KernelBuild &k, dim3 grid, dim3 block, void *const *args);

}  // namespace emu
