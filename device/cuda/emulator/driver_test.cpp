// Checks the emulated driver's rules (docs/cuda.md) through the driver API
// itself, below device/cuda's own checks. Built and run by
// scripts/cuda-emulated.sh against build/cuda-emulator/libcuda.so.1:
//   driver_test PTX            every rule
//   driver_test PTX faults     run with CUDAEMU_FAULTS=cuStreamCreate:2:999,cuLaunchKernel:1:700
//   driver_test PTX visible L  run with CUDAEMU_DEVICES and CUDA_VISIBLE_DEVICES: the
//                              ordinals must be the machine's devices L (e.g. 2,0), in order
// The first form also runs, in processes of their own started from this
// program, "driver_test PTX shared DIR" (devices shared across processes
// with CUDAEMU_STATE=DIR), which starts "driver_test PTX hold BYTES"
// processes that keep memory on a device until their stdin closes.
// Prints one line per failed check and exits non-zero when any failed.
#include <cuda.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern "C" CUresult cuArrayCreate_v2(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);

struct UpdateInfo {  // CUgraphExecUpdateResultInfo of CUDA 12
    CUgraphExecUpdateResult result;
    CUgraphNode errorNode, errorFromNode;
};
extern "C" CUresult cuGraphExecUpdate_v2(CUgraphExec, CUgraph, UpdateInfo *);

namespace {

int failures = 0, checks = 0;

void expect(const char *what, CUresult got, CUresult want, int line) {
    ++checks;
    if (got != want) {
        ++failures;
        std::printf("FAIL line %d: %s = %d, want %d\n", line, what, int(got), int(want));
    }
}
#define EXPECT(call, want) expect(#call, (call), (want), __LINE__)
#define OK(call) EXPECT(call, CUDA_SUCCESS)

void truth(const char *what, bool ok, int line) {
    ++checks;
    if (!ok) {
        ++failures;
        std::printf("FAIL line %d: %s\n", line, what);
    }
}
#define TRUE(cond) truth(#cond, (cond), __LINE__)

CUcontext ctx;
CUfunction fill, scale;
const long long N = 1 << 20;

void bind() { cuCtxSetCurrent(ctx); }

// onThread runs f on a new thread with the context current, and waits.
template <class F>
void onThread(F f) {
    std::thread([&] {
        bind();
        f();
    }).join();
}

CUresult launchFill(CUstream s, CUdeviceptr x, long long n, float v) {
    void *args[] = {&n, &x, &v};
    return cuLaunchKernel(fill, 8, 1, 1, 256, 1, 1, 0, s, args, nullptr);
}

CUresult launchScale(CUstream s, CUdeviceptr x, long long n, float a) {
    void *args[] = {&n, &x, &a};
    return cuLaunchKernel(scale, 8, 1, 1, 256, 1, 1, 0, s, args, nullptr);
}

std::vector<float> download(CUdeviceptr p, size_t n) {
    std::vector<float> v(n);
    OK(cuMemcpyDtoH_v2(v.data(), p, n * 4));
    return v;
}

bool all(const std::vector<float> &v, float x) {
    for (float f : v)
        if (f != x) return false;
    return true;
}

void testMemory() {
    CUdeviceptr a, b;
    OK(cuMemAlloc_v2(&a, 1000));
    OK(cuMemAlloc_v2(&b, 1000));
    std::vector<float> h(250, 3.0f), back(250);
    OK(cuMemcpyHtoD_v2(a, h.data(), 1000));
    OK(cuMemcpyDtoD_v2(b, a, 1000));
    OK(cuMemcpyDtoH_v2(back.data(), b, 1000));
    TRUE(all(back, 3.0f));
    EXPECT(cuMemcpyHtoD_v2(a, h.data(), 1004), CUDA_ERROR_INVALID_VALUE);      // past the block
    EXPECT(cuMemcpyDtoH_v2(back.data(), a + 8, 1000), CUDA_ERROR_INVALID_VALUE);  // past the block
    OK(cuMemFree_v2(a));
    uint32_t poison;
    std::memcpy(&poison, reinterpret_cast<void *>(a), 4);
    TRUE(poison == 0xFFFFFFFFu);                                              // freed memory is poisoned
    EXPECT(cuMemcpyDtoH_v2(back.data(), a, 4), CUDA_ERROR_INVALID_VALUE);       // freed
    EXPECT(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);                          // twice
    EXPECT(cuMemFree_v2(b + 4), CUDA_ERROR_INVALID_VALUE);                      // not a block's start
    OK(cuMemFree_v2(b));
    void *pinned;
    OK(cuMemAllocHost_v2(&pinned, 64));
    OK(cuMemFreeHost(pinned));
    EXPECT(cuMemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);
    CUarray arr;
    EXPECT(cuArrayCreate_v2(&arr, nullptr), CUDA_ERROR_NOT_SUPPORTED);  // an unreached entry point
}

void testStreamsAndEvents() {
    CUdeviceptr x, y;
    OK(cuMemAlloc_v2(&x, N * 4));
    OK(cuMemAlloc_v2(&y, N * 4));
    CUstream a, b, blocking;
    OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&blocking, 0));
    CUevent e, t0, t1, noTiming;
    OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    OK(cuEventCreate(&t0, 0));
    OK(cuEventCreate(&t1, 0));
    OK(cuEventCreate(&noTiming, CU_EVENT_DISABLE_TIMING));
    OK(cuEventQuery(e));  // never recorded: complete
    float ms = -1;
    EXPECT(cuEventElapsedTime(&ms, t0, t1), CUDA_ERROR_INVALID_HANDLE);  // not recorded

    // Cross-stream order through an event: b copies x only after a filled it.
    OK(cuEventRecord(t0, a));
    OK(launchFill(a, x, N, 1.0f));
    OK(launchScale(a, x, N, 2.0f));
    OK(cuEventRecord(e, a));
    OK(cuEventRecord(t1, a));
    OK(cuStreamWaitEvent(b, e, 0));
    OK(cuMemcpyDtoDAsync_v2(y, x, N * 4, b));
    OK(cuStreamSynchronize(b));
    TRUE(all(download(y, N), 2.0f));
    OK(cuEventSynchronize(t1));
    OK(cuEventElapsedTime(&ms, t0, t1));
    TRUE(ms >= 0);
    OK(cuEventRecord(noTiming, a));
    OK(cuEventSynchronize(noTiming));
    EXPECT(cuEventElapsedTime(&ms, t0, noTiming), CUDA_ERROR_INVALID_HANDLE);  // no timing

    // The legacy stream waits for a blocking stream's work: the synchronous
    // copy (legacy stream) sees the fill.
    OK(launchFill(blocking, x, N, 5.0f));
    TRUE(all(download(x, N), 5.0f));
    OK(launchFill(blocking, x, N, 6.0f));
    OK(cuStreamSynchronize(nullptr));  // waits for the blocking stream's work
    OK(cuStreamQuery(blocking));

    OK(cuStreamDestroy_v2(a));
    OK(cuStreamDestroy_v2(b));
    OK(cuStreamDestroy_v2(blocking));
    EXPECT(cuStreamSynchronize(a), CUDA_ERROR_INVALID_HANDLE);
    for (CUevent ev : {e, t0, t1, noTiming}) OK(cuEventDestroy_v2(ev));
    OK(cuMemFree_v2(x));
    OK(cuMemFree_v2(y));
}

void testCaptureModes() {
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr x, tmp;
    OK(cuMemAlloc_v2(&x, N * 4));
    CUgraph g;
    EXPECT(cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);

    // Global: an unsafe call from this or any thread is refused and invalidates.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
    OK(launchFill(s, x, N, 1.0f));
    CUstreamCaptureStatus st;
    OK(cuStreamIsCapturing(s, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    onThread([&] { EXPECT(cuMemAlloc_v2(&tmp, 4), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); });
    OK(cuStreamIsCapturing(s, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT(launchFill(s, x, N, 1.0f), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    g = reinterpret_cast<CUgraph>(1);
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    TRUE(g == nullptr);

    // Thread-local: another thread may allocate, this one may not.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    onThread([&] {
        OK(cuMemAlloc_v2(&tmp, 4));
        OK(cuMemFree_v2(tmp));
    });
    EXPECT(cuMemAlloc_v2(&tmp, 4), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    // Relaxed: allocation is allowed, cuCtxSynchronize and syncing the stream are not.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(cuMemAlloc_v2(&tmp, 4));
    OK(cuMemFree_v2(tmp));
    OK(launchFill(s, x, N, 1.0f));
    EXPECT(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    EXPECT(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    // Ending a non-relaxed capture from another thread; relaxed may.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(launchFill(s, x, N, 1.0f));
    onThread([&] { EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD); });
    OK(cuStreamEndCapture(s, &g));
    OK(cuGraphDestroy(g));
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(launchFill(s, x, N, 1.0f));
    onThread([&] { OK(cuStreamEndCapture(s, &g)); });
    OK(cuGraphDestroy(g));
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);  // not capturing
    OK(cuMemFree_v2(x));
    OK(cuStreamDestroy_v2(s));
}

void testCaptureEvents() {
    CUstream s, o, other;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&o, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CUdeviceptr x, y;
    OK(cuMemAlloc_v2(&x, N * 4));
    OK(cuMemAlloc_v2(&y, N * 4));
    CUevent outside, fork, join, foreign;
    for (CUevent *e : {&outside, &fork, &join, &foreign}) OK(cuEventCreate(e, CU_EVENT_DISABLE_TIMING));
    OK(cuEventRecord(outside, o));
    CUgraph g;
    size_t n;

    // Waiting on an event never recorded waits for nothing, in a capture too.
    CUevent never;
    OK(cuEventCreate(&never, CU_EVENT_DISABLE_TIMING));
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(cuStreamWaitEvent(s, never, 0));
    OK(launchFill(s, x, N, 1.0f));
    OK(cuStreamEndCapture(s, &g));
    OK(cuGraphDestroy(g));
    OK(cuEventDestroy_v2(never));

    // A captured event cannot be queried or waited for by the host, and
    // asking invalidates its capture.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(launchFill(s, x, N, 1.0f));
    OK(cuEventRecord(fork, s));
    EXPECT(cuEventQuery(fork), CUDA_ERROR_CAPTURED_EVENT);
    EXPECT(cuEventSynchronize(fork), CUDA_ERROR_CAPTURED_EVENT);
    EXPECT(launchFill(s, x, N, 1.0f), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    // Waiting on an event recorded outside the capture crosses its boundary.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(launchFill(s, x, N, 1.0f));
    EXPECT(cuStreamWaitEvent(s, outside, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    // Fork and join: o joins through fork; without joining back, UNJOINED.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(launchFill(s, x, N, 1.0f));
    OK(cuEventRecord(fork, s));
    OK(cuStreamWaitEvent(o, fork, 0));
    CUstreamCaptureStatus st;
    OK(cuStreamIsCapturing(o, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    OK(launchFill(o, y, N, 2.0f));
    EXPECT(cuStreamEndCapture(o, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(launchFill(s, x, N, 1.0f));
    OK(cuEventRecord(fork, s));
    OK(cuStreamWaitEvent(o, fork, 0));
    OK(launchFill(o, y, N, 2.0f));
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    OK(cuStreamIsCapturing(o, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_NONE);  // the capture ended for every stream

    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(launchFill(s, x, N, 1.0f));
    OK(cuEventRecord(fork, s));
    OK(cuStreamWaitEvent(o, fork, 0));
    OK(launchFill(o, y, N, 2.0f));
    OK(cuEventRecord(join, o));
    OK(cuStreamWaitEvent(s, join, 0));
    // Another capture's event would merge the two captures.
    OK(cuStreamBeginCapture_v2(other, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(cuEventRecord(foreign, other));
    EXPECT(cuStreamWaitEvent(s, foreign, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
    OK(cuStreamEndCapture(other, &g));
    OK(cuGraphDestroy(g));
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(launchFill(s, x, N, 1.0f));
    OK(cuEventRecord(fork, s));
    OK(cuStreamWaitEvent(o, fork, 0));
    OK(launchFill(o, y, N, 2.0f));
    OK(cuEventRecord(join, o));
    OK(cuStreamWaitEvent(s, join, 0));
    OK(launchScale(s, x, N, 3.0f));
    OK(cuStreamEndCapture(s, &g));
    OK(cuGraphGetNodes(g, nullptr, &n));
    TRUE(n == 3);
    // Nothing ran during the capture.
    OK(launchFill(s, x, N, 0.0f));
    OK(launchFill(s, y, N, 0.0f));
    CUgraphExec ex;
    OK(cuGraphInstantiateWithFlags(&ex, g, 0));
    OK(cuGraphUpload(ex, s));
    OK(cuGraphLaunch(ex, s));
    OK(cuStreamSynchronize(s));
    TRUE(all(download(x, N), 3.0f));
    TRUE(all(download(y, N), 2.0f));
    OK(cuGraphExecDestroy(ex));
    OK(cuGraphDestroy(g));
    for (CUevent e : {outside, fork, join, foreign}) OK(cuEventDestroy_v2(e));
    for (CUstream st2 : {s, o, other}) OK(cuStreamDestroy_v2(st2));
    OK(cuMemFree_v2(x));
    OK(cuMemFree_v2(y));
}

// testUnsafeBesideCapture: host queries of and waits for events recorded
// outside any capture, executable destruction and graph launches follow the
// capture modes' rules like an allocation (docs/cuda.md, "Capture").
void testUnsafeBesideCapture() {
    CUstream s, o;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&o, CU_STREAM_NON_BLOCKING));
    CUdeviceptr x, y;
    OK(cuMemAlloc_v2(&x, N * 4));
    OK(cuMemAlloc_v2(&y, N * 4));
    CUevent outside;
    OK(cuEventCreate(&outside, CU_EVENT_DISABLE_TIMING));
    OK(launchFill(o, y, N, 5.0f));
    OK(cuEventRecord(outside, o));
    CUgraph g, made;
    CUstreamCaptureStatus st;
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(launchFill(s, x, N, 2.0f));
    OK(cuStreamEndCapture(s, &made));
    CUgraphExec ex;
    OK(cuGraphInstantiateWithFlags(&ex, made, 0));

    // Global: another thread's query or wait of an event that is not in the
    // capture, on a stream that is not capturing, is refused and invalidates.
    for (int wait = 0; wait < 2; ++wait) {
        OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        OK(launchFill(s, x, N, 1.0f));
        onThread([&] { EXPECT(wait ? cuEventSynchronize(outside) : cuEventQuery(outside), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); });
        OK(cuStreamIsCapturing(s, &st));
        TRUE(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
        EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    }
    // Thread-local: another thread may query, the capturing thread may not.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    onThread([&] { OK(cuEventSynchronize(outside)); });
    EXPECT(cuEventQuery(outside), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    // Relaxed: queries and waits are allowed from any thread; the capture survives.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(launchFill(s, x, N, 1.0f));
    OK(cuEventQuery(outside));
    onThread([&] { OK(cuEventSynchronize(outside)); });
    OK(cuStreamEndCapture(s, &g));
    OK(cuGraphDestroy(g));

    // Destroying an executable: refused under a global capture (from any
    // thread), which the refusal invalidates; the executable stays usable.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(launchFill(s, x, N, 1.0f));
    onThread([&] { EXPECT(cuGraphExecDestroy(ex), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); });
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    // Launching a graph into a stream that is not capturing is plain
    // asynchronous work, allowed beside a global capture; into the
    // capturing stream it is refused and invalidates the capture.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(launchFill(s, y, N, 1.0f));
    onThread([&] { OK(cuGraphLaunch(ex, o)); });
    OK(cuStreamIsCapturing(s, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT(cuGraphLaunch(ex, s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    OK(cuStreamIsCapturing(s, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT(cuGraphLaunch(ex, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    OK(cuStreamSynchronize(o));
    TRUE(all(download(x, N), 2.0f));  // the launch on o ran; nothing captured ran
    // Relaxed: the executable may be destroyed meanwhile.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(launchFill(s, x, N, 1.0f));
    OK(cuGraphExecDestroy(ex));
    OK(cuStreamEndCapture(s, &g));
    OK(cuGraphDestroy(g));
    OK(cuGraphDestroy(made));
    OK(cuEventDestroy_v2(outside));
    for (CUstream st2 : {s, o}) OK(cuStreamDestroy_v2(st2));
    OK(cuMemFree_v2(x));
    OK(cuMemFree_v2(y));
}

// capture records fill(x, v) then, when withScale, scale(x, a).
CUgraph capture(CUstream s, CUdeviceptr x, float v, bool withScale, float a, bool scaleFirst = false) {
    CUgraph g = nullptr;
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    if (scaleFirst) OK(launchScale(s, x, N, a));
    OK(launchFill(s, x, N, v));
    if (withScale && !scaleFirst) OK(launchScale(s, x, N, a));
    OK(cuStreamEndCapture(s, &g));
    return g;
}

void testGraphUpdate() {
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr x, y;
    OK(cuMemAlloc_v2(&x, N * 4));
    OK(cuMemAlloc_v2(&y, N * 4));
    CUgraph g1 = capture(s, x, 1.0f, true, 2.0f);
    CUgraphExec ex;
    OK(cuGraphInstantiateWithFlags(&ex, g1, 0));
    OK(cuGraphLaunch(ex, s));
    OK(cuStreamSynchronize(s));
    TRUE(all(download(x, N), 2.0f));

    // Same topology, new parameters (another buffer, other values): the 11.x entry point.
    CUgraph g2 = capture(s, y, 4.0f, true, 0.5f);
    CUgraphNode errNode = reinterpret_cast<CUgraphNode>(1);
    CUgraphExecUpdateResult res = CU_GRAPH_EXEC_UPDATE_ERROR;
    OK(cuGraphExecUpdate(ex, g2, &errNode, &res));
    TRUE(res == CU_GRAPH_EXEC_UPDATE_SUCCESS);
    OK(cuGraphLaunch(ex, s));
    OK(cuStreamSynchronize(s));
    TRUE(all(download(y, N), 2.0f));

    // Topology and function changes fail, through both entry points.
    CUgraph g3 = capture(s, x, 1.0f, false, 0);
    EXPECT(cuGraphExecUpdate(ex, g3, &errNode, &res), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    TRUE(res == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
    UpdateInfo info{};
    EXPECT(cuGraphExecUpdate_v2(ex, g3, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    TRUE(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
    CUgraph g4 = capture(s, x, 1.0f, true, 2.0f, true);  // scale, then fill
    EXPECT(cuGraphExecUpdate_v2(ex, g4, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    TRUE(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED);
    OK(cuGraphExecUpdate_v2(ex, g1, &info));
    TRUE(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);

    // A launch already enqueued keeps its parameters when the executable is
    // updated or destroyed before it runs.
    OK(launchFill(s, y, N, 0.0f));
    OK(cuGraphLaunch(ex, s));
    OK(cuGraphExecUpdate_v2(ex, g2, &info));
    OK(cuGraphExecDestroy(ex));
    OK(cuStreamSynchronize(s));
    TRUE(all(download(x, N), 2.0f));
    TRUE(all(download(y, N), 0.0f));
    for (CUgraph g : {g1, g2, g3, g4}) OK(cuGraphDestroy(g));
    OK(cuMemFree_v2(x));
    OK(cuMemFree_v2(y));
    OK(cuStreamDestroy_v2(s));
}

// testModuleLogs: cuModuleLoadDataEx fills the JIT logs the caller asks
// for and writes back the bytes filled; PTX of a newer ISA than the driver
// knows is refused as CUDA_ERROR_UNSUPPORTED_PTX_VERSION, saying so in the
// error log.
void testModuleLogs(const std::string &ptx) {
    char info[4096], err[4096];
    auto load = [&](const std::string &image, CUmodule *m, unsigned *infoUsed, unsigned *errUsed) {
        CUjit_option opts[5] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                                CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME};
        void *vals[5] = {info, (void *)(uintptr_t)sizeof info, err, (void *)(uintptr_t)sizeof err, nullptr};
        info[0] = err[0] = 0;
        CUresult r = cuModuleLoadDataEx(m, image.c_str(), 5, opts, vals);
        *infoUsed = (unsigned)(uintptr_t)vals[1];
        *errUsed = (unsigned)(uintptr_t)vals[3];
        return r;
    };
    CUmodule m;
    unsigned infoUsed, errUsed;
    OK(load(ptx, &m, &infoUsed, &errUsed));
    TRUE(std::strstr(info, "tl_gemm") != nullptr);
    TRUE(infoUsed == std::strlen(info) + 1);
    TRUE(err[0] == 0);
    OK(cuModuleUnload(m));
    std::string newer = ptx;
    size_t at = newer.find(".version ");
    TRUE(at != std::string::npos);
    newer.replace(at, newer.find('\n', at) - at, ".version 9.0");
    EXPECT(load(newer, &m, &infoUsed, &errUsed), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
    TRUE(std::strstr(err, "9.0") != nullptr);
    TRUE(errUsed == std::strlen(err) + 1);
    TRUE(info[0] == 0);
}

void testModules(const std::string &ptx) {
    CUmodule m;
    EXPECT(cuModuleLoadData(&m, "not PTX"), CUDA_ERROR_INVALID_IMAGE);
    std::string unknown = ptx + "\n.visible .entry tl_no_such_kernel(\n\t.param .u32 a\n)\n{\n}\n";
    EXPECT(cuModuleLoadData(&m, unknown.c_str()), CUDA_ERROR_INVALID_PTX);
    std::string changed = ptx;
    size_t at = changed.find(".param .u64 tl_fill_param_0");
    if (at != std::string::npos) changed.replace(at, 11, ".param .u32");
    EXPECT(cuModuleLoadData(&m, changed.c_str()), CUDA_ERROR_INVALID_PTX);
    OK(cuModuleLoadData(&m, ptx.c_str()));
    CUfunction f;
    EXPECT(cuModuleGetFunction(&f, m, "tl_missing"), CUDA_ERROR_NOT_FOUND);
    OK(cuModuleUnload(m));
    testModuleLogs(ptx);
    CUdeviceptr x;
    OK(cuMemAlloc_v2(&x, 4096));
    long long n = 1024;
    float v = 1;
    void *args[] = {&n, &x, &v};
    EXPECT(cuLaunchKernel(fill, 1, 1, 1, 2048, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);  // > 1024 threads
    OK(cuMemFree_v2(x));
}

// ---- devices shared across processes (CUDAEMU_STATE) ----------------------------

const size_t MiB = size_t(1) << 20;

// Child is a process running this program, its stdin and stdout piped.
struct Child {
    pid_t pid = -1;
    int in = -1;  // its stdin: closing it tells a holder to let go
    FILE *out = nullptr;
};

// spawn runs this program with args, the environment changed by env: a
// "KEY=VALUE" entry replaces the variable or adds it, a "KEY" entry unsets it.
Child spawn(const std::vector<std::string> &args, const std::vector<std::string> &env) {
    std::vector<std::string> envs;
    for (char **e = environ; *e; ++e) {
        std::string kv(*e);
        bool replaced = false;
        for (const auto &o : env) {
            std::string key = o.substr(0, o.find('=')) + "=";
            if (kv.compare(0, key.size(), key) == 0) replaced = true;
        }
        if (!replaced) envs.push_back(kv);
    }
    for (const auto &o : env)
        if (o.find('=') != std::string::npos) envs.push_back(o);
    std::vector<char *> argv{const_cast<char *>("/proc/self/exe")}, envp;
    for (const auto &a : args) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    for (auto &e : envs) envp.push_back(const_cast<char *>(e.c_str()));
    envp.push_back(nullptr);
    int in[2], out[2];
    Child c;
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return c;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    if (posix_spawn(&c.pid, "/proc/self/exe", &fa, nullptr, argv.data(), envp.data()) != 0) c.pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    c.in = in[1];
    c.out = fdopen(out[0], "r");
    return c;
}

// Held is what a holder reports: its retain's result, its device's total
// and free memory after the retain, and its allocation's result.
struct Held {
    int retain = -1, alloc = -1;
    unsigned long long total = 0, free = 0;
};

// hold starts a process that makes ordinal 0 of CUDA_VISIBLE_DEVICES=visible
// current and allocates bytes there, and returns once it has (or failed).
Held hold(Child *c, const char *ptx, const char *visible, size_t bytes, std::vector<std::string> env = {}) {
    env.push_back(std::string("CUDA_VISIBLE_DEVICES=") + visible);
    *c = spawn({ptx, "hold", std::to_string(bytes)}, env);
    Held h;
    char line[256];
    if (c->out && std::fgets(line, sizeof line, c->out))
        std::sscanf(line, "retain %d total %llu free %llu alloc %d", &h.retain, &h.total, &h.free, &h.alloc);
    return h;
}

// release tells a holder to free its memory and exit, and says whether it
// exited with status 0.
bool release(Child *c) {
    close(c->in);
    int status = -1;
    waitpid(c->pid, &status, 0);
    if (c->out) std::fclose(c->out);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// runHolder is "driver_test PTX hold BYTES": retain ordinal 0, report, allocate
// BYTES, report, and wait for stdin to close; then free and release.
int runHolder(size_t bytes) {
    CUcontext c;
    CUresult retain = cuDevicePrimaryCtxRetain(&c, 0);
    size_t free = 0, total = 0;
    CUresult alloc = CUDA_ERROR_INVALID_CONTEXT;
    CUdeviceptr p = 0;
    if (retain == CUDA_SUCCESS) {
        cuCtxSetCurrent(c);
        cuMemGetInfo_v2(&free, &total);
        alloc = cuMemAlloc_v2(&p, bytes);
    }
    std::printf("retain %d total %zu free %zu alloc %d\n", int(retain), total, free, int(alloc));
    std::fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    if (alloc == CUDA_SUCCESS) cuMemFree_v2(p);
    if (retain == CUDA_SUCCESS) cuDevicePrimaryCtxRelease_v2(0);
    return 0;
}

// Proc is a process line of a device record (CUDAEMU_STATE, docs/cuda.md).
struct Proc {
    long pid = 0;
    unsigned long long context = 0, inUse = 0, peak = 0;
    std::string state;
};

// record reads DIR/device-N.state: the device's total and peak, and its processes.
bool record(const std::string &dir, int n, unsigned long long *total, unsigned long long *peak, std::vector<Proc> *procs) {
    std::ifstream in(dir + "/device-" + std::to_string(n) + ".state");
    if (!in) return false;
    procs->clear();
    for (std::string line; std::getline(in, line);) {
        int dev;
        Proc p;
        unsigned long long start;
        long parent;
        char state[16];
        if (std::sscanf(line.c_str(), "device %d total %llu peak %llu", &dev, total, peak) == 3) continue;
        if (std::sscanf(line.c_str(), "process %ld start %llu parent %ld context %llu in_use %llu peak %llu %15s", &p.pid,
                        &start, &parent, &p.context, &p.inUse, &p.peak, state) == 7) {
            p.state = state;
            procs->push_back(p);
        }
    }
    return true;
}

const Proc *find(const std::vector<Proc> &procs, pid_t pid) {
    for (const auto &p : procs)
        if (p.pid == long(pid)) return &p;
    return nullptr;
}

// testSharedDevices is "driver_test PTX shared DIR", run by testShared with
// CUDAEMU_STATE=DIR on a machine of three devices of 64, 32 and 48 MiB whose
// contexts are billed 4 MiB each.
void testSharedDevices(const char *ptx, const std::string &dir) {
    size_t bytes = 0, free = 0, total = 0;
    int count = 0;
    OK(cuDeviceGetCount(&count));
    TRUE(count == 3);
    OK(cuDeviceTotalMem_v2(&bytes, 0));
    TRUE(bytes == 64 * MiB);
    OK(cuDeviceTotalMem_v2(&bytes, 1));
    TRUE(bytes == 32 * MiB);
    OK(cuDeviceTotalMem_v2(&bytes, 2));
    TRUE(bytes == 48 * MiB);
    OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    OK(cuCtxSetCurrent(ctx));
    CUdevice dev = -1;
    OK(cuCtxGetDevice(&dev));
    TRUE(dev == 0);
    OK(cuMemGetInfo_v2(&free, &total));
    TRUE(total == 64 * MiB && free == 60 * MiB);  // the context is billed

    // Renumbered: ordinal 0 of CUDA_VISIBLE_DEVICES=2 is the 48 MiB device.
    Child c;
    Held h = hold(&c, ptx, "2", MiB);
    TRUE(h.retain == 0 && h.alloc == 0 && h.total == 48 * MiB && h.free == 44 * MiB);
    TRUE(release(&c));

    // Two processes on device 0 see each other's memory; past the device's
    // size, the allocation is refused.
    Child a;
    h = hold(&a, ptx, "0", 40 * MiB);
    TRUE(h.retain == 0 && h.alloc == 0 && h.total == 64 * MiB && h.free == 56 * MiB);
    OK(cuMemGetInfo_v2(&free, &total));
    TRUE(free == 16 * MiB);
    CUdeviceptr p;
    EXPECT(cuMemAlloc_v2(&p, 16 * MiB + 1), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemAlloc_v2(&p, 16 * MiB));
    OK(cuMemGetInfo_v2(&free, &total));
    TRUE(free == 0);
    OK(cuMemFree_v2(p));

    // Processes on device 1 do not touch device 0; the second one there is
    // refused past device 1's 32 MiB, and a context that does not fit is too.
    Child b, b2, b3;
    h = hold(&b, ptx, "1", 20 * MiB);
    TRUE(h.retain == 0 && h.alloc == 0 && h.total == 32 * MiB && h.free == 28 * MiB);
    h = hold(&b2, ptx, "1", 20 * MiB);
    TRUE(h.retain == 0 && h.free == 4 * MiB && h.alloc == CUDA_ERROR_OUT_OF_MEMORY);
    h = hold(&b3, ptx, "1", MiB, {"CUDAEMU_CONTEXT_BYTES=8M"});
    TRUE(h.retain == CUDA_ERROR_OUT_OF_MEMORY);
    TRUE(release(&b3));
    Child bad;  // a state directory that cannot be made: the retain fails, saying why on stderr
    h = hold(&bad, ptx, "1", MiB, {"CUDAEMU_STATE=" + dir + "/device-1.lock/sub"});
    TRUE(h.retain == CUDA_ERROR_OPERATING_SYSTEM);
    TRUE(release(&bad));
    OK(cuMemGetInfo_v2(&free, &total));
    TRUE(free == 16 * MiB);

    // A process killed with SIGKILL leaves nothing behind, even before its
    // parent reaps it.
    kill(a.pid, SIGKILL);
    siginfo_t info;
    waitid(P_PID, id_t(a.pid), &info, WEXITED | WNOWAIT);  // a zombie now
    OK(cuMemGetInfo_v2(&free, &total));
    TRUE(free == 60 * MiB);
    OK(cuMemAlloc_v2(&p, 56 * MiB));
    release(&a);

    // The records: each process on the device it used, with its peak; each
    // device's peak within its size.
    unsigned long long rtotal = 0, rpeak = 0;
    std::vector<Proc> procs;
    TRUE(record(dir, 0, &rtotal, &rpeak, &procs));
    TRUE(rtotal == 64 * MiB && rpeak == 64 * MiB);
    const Proc *me = find(procs, getpid()), *killed = find(procs, a.pid);
    TRUE(me && me->context == 4 * MiB && me->inUse == 60 * MiB && me->peak == 60 * MiB && me->state == "alive");
    TRUE(killed && killed->inUse == 0 && killed->context == 0 && killed->peak == 44 * MiB && killed->state == "gone");
    TRUE(!find(procs, b.pid) && !find(procs, c.pid) && procs.size() == 2);
    OK(cuMemFree_v2(p));
    TRUE(release(&b));
    TRUE(release(&b2));
    TRUE(record(dir, 1, &rtotal, &rpeak, &procs));
    TRUE(rtotal == 32 * MiB && rpeak == 28 * MiB);
    const Proc *pb = find(procs, b.pid), *pb2 = find(procs, b2.pid), *pb3 = find(procs, b3.pid);
    TRUE(pb && pb->peak == 24 * MiB && pb->inUse == 0 && pb->context == 0);  // released before it exited
    TRUE(pb2 && pb2->peak == 4 * MiB);
    TRUE(!pb3 && !find(procs, getpid()) && procs.size() == 2);  // a context refused is no context
    TRUE(record(dir, 2, &rtotal, &rpeak, &procs));
    TRUE(rtotal == 48 * MiB && rpeak == 5 * MiB && procs.size() == 1 && find(procs, c.pid) && procs[0].peak == 5 * MiB);
    OK(cuDevicePrimaryCtxRelease_v2(0));
    TRUE(record(dir, 0, &rtotal, &rpeak, &procs) && find(procs, getpid()) && find(procs, getpid())->inUse == 0);
}

// testShared runs testSharedDevices in a process of its own, since the
// driver reads its environment once.
void testShared(const char *ptx) {
    char tmpl[] = "/tmp/cudaemu-state-XXXXXX";
    if (!mkdtemp(tmpl)) {
        TRUE(!"mkdtemp");
        return;
    }
    std::string dir(tmpl);
    Child c = spawn({ptx, "shared", dir}, {"CUDAEMU_STATE=" + dir, "CUDAEMU_DEVICES=3", "CUDAEMU_MEMORY=64M,32MiB,50331648",
                                           "CUDAEMU_CONTEXT_BYTES=4194304", "CUDAEMU_FAULTS", "CUDA_VISIBLE_DEVICES"});
    close(c.in);
    char line[512];
    while (c.out && std::fgets(line, sizeof line, c.out)) std::fputs(line, stdout);  // its FAIL lines
    int status = -1;
    waitpid(c.pid, &status, 0);
    if (c.out) std::fclose(c.out);
    TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (const char *f : {"device-0.state", "device-0.lock", "device-1.state", "device-1.lock", "device-2.state", "device-2.lock"})
        std::remove((dir + "/" + f).c_str());
    TRUE(rmdir(dir.c_str()) == 0);  // nothing else was left there
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: driver_test PTX [faults | visible DEVICES]\n");
        return 2;
    }
    std::ifstream in(argv[1]);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string ptx = ss.str();
    OK(cuInit(0));
    if (argc > 3 && std::string(argv[2]) == "hold") return runHolder(size_t(std::stoull(argv[3])));
    if (argc > 3 && std::string(argv[2]) == "shared") {
        testSharedDevices(argv[1], argv[3]);
        if (failures) {
            std::printf("shared devices: %d of %d checks failed\n", failures, checks);
            return 1;
        }
        return 0;
    }
    int count = 0, major = 0;
    OK(cuDeviceGetCount(&count));
    if (argc > 3 && std::string(argv[2]) == "visible") {
        // The machine's devices (PCI bus ids) the ordinals must show, in
        // order: CUDA_VISIBLE_DEVICES applied.
        std::vector<int> want;
        std::stringstream list(argv[3]);
        for (std::string item; std::getline(list, item, ',');)
            if (!item.empty()) want.push_back(std::stoi(item));
        TRUE(count == int(want.size()));
        for (int i = 0; i < count && i < int(want.size()); ++i) {
            int bus = -1;
            OK(cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, i));
            TRUE(bus == want[size_t(i)]);
        }
        CUdevice dev;
        EXPECT(cuDeviceGet(&dev, count), CUDA_ERROR_INVALID_DEVICE);
        if (failures) return 1;
        std::printf("driver_test: visible devices as expected\n");
        return 0;
    }
    TRUE(count == 1);
    OK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    TRUE(major == 8);
    CUdeviceptr p;
    EXPECT(cuMemAlloc_v2(&p, 4), CUDA_ERROR_INVALID_CONTEXT);  // no current context
    OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    OK(cuCtxSetCurrent(ctx));
    if (argc > 2 && std::string(argv[2]) == "faults") {
        CUstream a, b, c;
        OK(cuStreamCreate(&a, 0));
        EXPECT(cuStreamCreate(&b, 0), CUresult(999));
        OK(cuStreamCreate(&c, 0));
        // An illegal address is sticky: every later call fails the same way.
        CUmodule m;
        OK(cuModuleLoadData(&m, ptx.c_str()));
        OK(cuModuleGetFunction(&fill, m, "tl_fill"));
        OK(cuMemAlloc_v2(&p, 4096));
        EXPECT(launchFill(a, p, 1024, 1.0f), CUDA_ERROR_ILLEGAL_ADDRESS);
        EXPECT(cuStreamSynchronize(a), CUDA_ERROR_ILLEGAL_ADDRESS);
        EXPECT(cuMemAlloc_v2(&p, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
    } else {
        CUmodule m;
        OK(cuModuleLoadData(&m, ptx.c_str()));
        OK(cuModuleGetFunction(&fill, m, "tl_fill"));
        OK(cuModuleGetFunction(&scale, m, "tl_scale"));
        testMemory();
        testStreamsAndEvents();
        testCaptureModes();
        testCaptureEvents();
        testUnsafeBesideCapture();
        testGraphUpdate();
        testModules(ptx);
        OK(cuModuleUnload(m));
        testShared(argv[1]);
    }
    OK(cuDevicePrimaryCtxRelease_v2(0));
    if (failures) {
        std::printf("%d of %d checks failed\n", failures, checks);
        return 1;
    }
    std::printf("all %d checks passed\n", checks);
    return 0;
}
