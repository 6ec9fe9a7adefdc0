/*
 * The installed CUDA header as CUDA 12 presents the graph update API: the
 * version is 12000 and cuGraphExecUpdate is cuGraphExecUpdate_v2, which takes
 * a CUgraphExecUpdateResultInfo. scripts/cuda-emulated.sh builds device/cuda
 * with this directory first on the include path (CGO_CFLAGS), so that the cgo
 * is compiled against the 12.x prototype as well as the 11.x one.
 */
#include_next <cuda.h>
#ifndef TOLARIA_CUDA12_PROTOTYPES
#define TOLARIA_CUDA12_PROTOTYPES
#if CUDA_VERSION < 12000
#undef CUDA_VERSION
#define CUDA_VERSION 12000
typedef struct CUgraphExecUpdateResultInfo_st {
    CUgraphExecUpdateResult result;
    CUgraphNode errorNode;
    CUgraphNode errorFromNode;
} CUgraphExecUpdateResultInfo;
CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo);
#define cuGraphExecUpdate cuGraphExecUpdate_v2
#endif
#endif
