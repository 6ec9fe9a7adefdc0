// The one translation unit compiled to tolaria.ptx by scripts/build-ptx.sh.
// Every kernel of device.Kernels, device.ImageKernels and
// device.SequenceKernels lives in the headers included here.
#include "common.cuh"
#include "elementwise.cuh"
#include "gemm.cuh"
#include "image.cuh"
#include "loss.cuh"
#include "optim.cuh"
#include "reduce.cuh"
#include "sequence.cuh"
#include "sample.cuh"
