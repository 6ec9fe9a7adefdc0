//go:build cuda

package cuda

// The driver calls gorgonia.org/cu v0.9.6 lacks: binding the context to the
// calling thread in one call, pinned allocation, stream capture and graphs.
// Written against the CUDA 11.8 headers (cuStreamBeginCapture_v2 with a mode,
// cuGraphExecUpdate with error-node and result out-parameters); newer drivers
// keep these symbols for binaries built against 11.x. The graph update goes
// through cuGraphExecUpdate_v2 wherever the driver exports it
// (tl_graph_exec_update); make cuda-emulated also builds and runs the tests
// against testdata/cuda12, the 11.8 header with the 12.x prototype.

/*
#cgo LDFLAGS: -lcuda -ldl
#cgo linux LDFLAGS: -L/usr/local/cuda/lib64
#cgo linux CFLAGS: -I/usr/local/cuda/include
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// tl_bind makes ctx current on the calling thread unless it already is.
static CUresult tl_bind(CUcontext ctx) {
	CUcontext cur = NULL;
	CUresult r = cuCtxGetCurrent(&cur);
	if (r != CUDA_SUCCESS || cur == ctx) return r;
	return cuCtxSetCurrent(ctx);
}

// tl_kernel_params carries a launch's parameters by value, one 8-byte slot
// each, so that an eager launch is one cgo call: it binds the context (as
// tl_bind) and builds the pointer array the driver wants here, on the C
// stack, with no allocation.
#define TL_MAX_KERNEL_PARAMS 12
typedef struct { unsigned long long v[TL_MAX_KERNEL_PARAMS]; } tl_kernel_params;

static CUresult tl_launch(CUcontext ctx, CUfunction f, unsigned gx, unsigned gy, unsigned bx, unsigned by,
                          CUstream s, tl_kernel_params p, int n) {
	void *args[TL_MAX_KERNEL_PARAMS];
	if (n < 0 || n > TL_MAX_KERNEL_PARAMS) return CUDA_ERROR_INVALID_VALUE;
	CUresult r = tl_bind(ctx);
	if (r != CUDA_SUCCESS) return r;
	for (int i = 0; i < n; i++) args[i] = &p.v[i];
	return cuLaunchKernel(f, gx, gy, 1, bx, by, 1, 0, s, args, NULL);
}

// tl_module_load loads a PTX image with the JIT compiler's logs captured:
// the error log says why a driver refuses the PTX (an ISA version newer
// than it knows, a target it cannot compile for), which a plain
// cuModuleLoadData leaves unsaid. The size options are in-out: the driver
// writes back how many bytes of each log it filled. CU_JIT_WALL_TIME comes
// back as a float stored in its option slot.
static CUresult tl_module_load(CUmodule *m, const void *image, char *info, unsigned infoSize, char *err,
                               unsigned errSize, unsigned *infoUsed, unsigned *errUsed, float *wallMS) {
	CUjit_option opts[6] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
	                        CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE, CU_JIT_WALL_TIME};
	void *vals[6] = {info, (void *)(uintptr_t)infoSize, err, (void *)(uintptr_t)errSize, (void *)(uintptr_t)1, NULL};
	info[0] = 0;
	err[0] = 0;
	CUresult r = cuModuleLoadDataEx(m, image, 6, opts, vals);
	*infoUsed = (unsigned)(uintptr_t)vals[1];
	*errUsed = (unsigned)(uintptr_t)vals[3];
	memcpy(wallMS, &vals[5], sizeof *wallMS);
	return r;
}

static CUresult tl_graph_node_count(CUgraph g, size_t *n) {
	*n = 0;
	return cuGraphGetNodes(g, NULL, n);
}

// tl_graph_exec_update reports the CUgraphExecUpdateResult in *result and
// which entry point answered in *entry (1: cuGraphExecUpdate, the 11.x
// prototype with error-node and result out-parameters; 2:
// cuGraphExecUpdate_v2, which fills a result structure). CUDA 12 headers
// map cuGraphExecUpdate to the _v2 entry point. Built against 11.x headers,
// the update still goes through cuGraphExecUpdate_v2 when the driver
// exports it (every 12.x and 13.x driver): a newer driver keeps the 11.x
// symbol only for old binaries, and the reasons it gives there need not be
// the ones its documentation lists for the current entry point.
typedef struct {
	int result;
	CUgraphNode errorNode;
	CUgraphNode errorFromNode;
} tl_update_info;
typedef CUresult (*tl_update_v2_fn)(CUgraphExec, CUgraph, tl_update_info *);

// tl_update_v2 is cuGraphExecUpdate_v2 as the driver exports it, or NULL.
static tl_update_v2_fn tl_update_v2(void) {
	static tl_update_v2_fn fn;
	static int looked;
	if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
		void *sym = dlsym(RTLD_DEFAULT, "cuGraphExecUpdate_v2");
		__atomic_store_n(&fn, (tl_update_v2_fn)sym, __ATOMIC_RELAXED);
		__atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
	}
	return __atomic_load_n(&fn, __ATOMIC_RELAXED);
}

// legacy set asks for the 11.x entry point where the headers have it.
static CUresult tl_graph_exec_update(CUgraphExec e, CUgraph g, int legacy, int *result, int *entry) {
#if CUDA_VERSION >= 12000
	(void)legacy;
	CUgraphExecUpdateResultInfo info;
	memset(&info, 0, sizeof info);
	CUresult r = cuGraphExecUpdate(e, g, &info);
	*result = (int)info.result;
	*entry = 2;
	return r;
#else
	tl_update_v2_fn v2 = legacy ? NULL : tl_update_v2();
	if (v2 != NULL) {
		tl_update_info info;
		memset(&info, 0, sizeof info);
		CUresult r = v2(e, g, &info);
		*result = info.result;
		*entry = 2;
		return r;
	}
	CUgraphNode errNode = NULL;
	CUgraphExecUpdateResult res = CU_GRAPH_EXEC_UPDATE_SUCCESS;
	CUresult r = cuGraphExecUpdate(e, g, &errNode, &res);
	*result = (int)res;
	*entry = 1;
	return r;
#endif
}
*/
import "C"

import (
	"bytes"
	"reflect"
	"strings"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/tolaria-ml/tolaria/device"
)

// The Go copies of the codes in errors.go must equal cuda.h's; a mismatch
// makes one of these constant indexes negative or non-zero and fails to build.
var _ = [1]struct{}{}[C.CUDA_SUCCESS-cuSuccess]
var _ = [1]struct{}{}[C.CUDA_ERROR_OUT_OF_MEMORY-cuErrOutOfMemory]
var _ = [1]struct{}{}[C.CUDA_ERROR_NO_DEVICE-cuErrNoDevice]
var _ = [1]struct{}{}[C.CUDA_ERROR_NOT_READY-cuErrNotReady]
var _ = [1]struct{}{}[C.CUDA_ERROR_INVALID_HANDLE-cuErrInvalidHandle]
var _ = [1]struct{}{}[C.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED-cuErrCaptureUnsupported]
var _ = [1]struct{}{}[C.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED-cuErrCaptureInvalidated]
var _ = [1]struct{}{}[C.CUDA_ERROR_STREAM_CAPTURE_ISOLATION-cuErrCaptureIsolation]
var _ = [1]struct{}{}[C.CUDA_ERROR_STREAM_CAPTURE_UNJOINED-cuErrCaptureUnjoined]
var _ = [1]struct{}{}[C.CUDA_ERROR_STREAM_CAPTURE_MERGE-cuErrCaptureMerge]
var _ = [1]struct{}{}[C.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT-cuErrCaptureImplicit]
var _ = [1]struct{}{}[C.CUDA_ERROR_CAPTURED_EVENT-cuErrCapturedEvent]
var _ = [1]struct{}{}[C.CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD-cuErrCaptureWrongThread]
var _ = [1]struct{}{}[C.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE-cuErrGraphExecUpdateFailure]
var _ = [1]struct{}{}[C.CUDA_ERROR_NO_BINARY_FOR_GPU-cuErrNoBinaryForGPU]
var _ = [1]struct{}{}[C.CUDA_ERROR_INVALID_PTX-cuErrInvalidPTX]
var _ = [1]struct{}{}[C.CUDA_ERROR_PROFILER_DISABLED-cuErrProfilerDisabled]
var _ = [1]struct{}{}[C.CUDA_ERROR_ECC_UNCORRECTABLE-cuErrECCUncorrectable]
var _ = [1]struct{}{}[C.CUDA_ERROR_INVALID_SOURCE-cuErrInvalidSource]
var _ = [1]struct{}{}[C.CUDA_ERROR_FILE_NOT_FOUND-cuErrFileNotFound]
var _ = [1]struct{}{}[C.CUDA_ERROR_OPERATING_SYSTEM-cuErrOperatingSystem]
var _ = [1]struct{}{}[C.CUDA_ERROR_LAUNCH_TIMEOUT-cuErrLaunchTimeout]
var _ = [1]struct{}{}[C.CUDA_ERROR_ASSERT-cuErrAssert]
var _ = [1]struct{}{}[C.CUDA_ERROR_MISALIGNED_ADDRESS-cuErrMisalignedAddress]
var _ = [1]struct{}{}[C.CUDA_ERROR_NOT_PERMITTED-cuErrNotPermitted]
var _ = [1]struct{}{}[C.CUDA_ERROR_NOT_SUPPORTED-cuErrNotSupported]
var _ = [1]struct{}{}[C.CUDA_ERROR_TIMEOUT-cuErrTimeout]
var _ = [1]struct{}{}[C.CUDA_ERROR_UNKNOWN-cuErrUnknown]
var _ = [1]struct{}{}[C.CUDA_ERROR_INVALID_VALUE-cuErrInvalidValue]
var _ = [1]struct{}{}[C.CUDA_ERROR_NOT_INITIALIZED-cuErrNotInitialized]
var _ = [1]struct{}{}[C.CUDA_ERROR_DEINITIALIZED-cuErrDeinitialized]
var _ = [1]struct{}{}[C.CUDA_ERROR_ILLEGAL_ADDRESS-cuErrIllegalAddress]
var _ = [1]struct{}{}[C.CUDA_ERROR_LAUNCH_FAILED-cuErrLaunchFailed]
var _ = [1]struct{}{}[C.CUDA_ERROR_ILLEGAL_STATE-cuErrIllegalState]

// cuResult is a raw driver result: 0 on success, else a CUresult code.
type cuResult = int

func res(r C.CUresult) cuResult { return cuResult(r) }

// codeOf extracts the CUresult from an error returned by gorgonia.org/cu,
// whose result type is an unexported integer type. Other errors read as
// CUDA_ERROR_UNKNOWN.
func codeOf(err error) cuResult {
	if err == nil {
		return cuSuccess
	}
	if v := reflect.ValueOf(err); v.Kind() == reflect.Int {
		return cuResult(v.Int())
	}
	return 999 // CUDA_ERROR_UNKNOWN
}

func bindContext(ctx C.CUcontext) cuResult { return res(C.tl_bind(ctx)) }

func retainPrimaryContext(dev cu.Device) (C.CUcontext, cuResult) {
	var ctx C.CUcontext
	r := C.cuDevicePrimaryCtxRetain(&ctx, C.CUdevice(dev))
	return ctx, res(r)
}

func releasePrimaryContext(dev cu.Device) cuResult {
	return res(C.cuDevicePrimaryCtxRelease(C.CUdevice(dev)))
}

func setCurrentContext(ctx C.CUcontext) cuResult { return res(C.cuCtxSetCurrent(ctx)) }

func memAllocHost(bytes int64) (unsafe.Pointer, cuResult) {
	var p unsafe.Pointer
	r := C.cuMemAllocHost(&p, C.size_t(bytes))
	return p, res(r)
}

func memFreeHost(p unsafe.Pointer) cuResult { return res(C.cuMemFreeHost(p)) }

// rawFunction is the CUfunction behind a gorgonia function: cu.Function
// (v0.9.6) is a struct holding that one handle and exports no accessor;
// the size check below fails the build if that ever changes.
func rawFunction(f *cu.Function) C.CUfunction { return *(*C.CUfunction)(unsafe.Pointer(f)) }

var (
	_ = [1]struct{}{}[unsafe.Sizeof(cu.Function{})-unsafe.Sizeof(C.CUfunction(nil))]
	_ = [1]struct{}{}[C.TL_MAX_KERNEL_PARAMS-maxKernelParam]
)

// launchKernel binds ctx to the calling thread and launches f with the
// first n of slots as its parameters (each an 8-byte slot, see kargs): one
// cgo call, no C allocation.
func launchKernel(ctx C.CUcontext, f *cu.Function, g dims, s cu.Stream, slots *[maxKernelParam]uint64, n int) cuResult {
	p := C.tl_kernel_params{v: *(*[maxKernelParam]C.ulonglong)(unsafe.Pointer(slots))}
	return res(C.tl_launch(ctx, rawFunction(f), C.uint(g.gridX), C.uint(g.gridY), C.uint(g.blockX), C.uint(g.blockY), rawStream(s), p, C.int(n)))
}

// rawStream is the CUstream behind a gorgonia stream (nil: the legacy stream).
func rawStream(s cu.Stream) C.CUstream { return C.CUstream(unsafe.Pointer(s.C())) }

func captureModeC(m device.CaptureMode) C.CUstreamCaptureMode {
	if m == device.CaptureRelaxed {
		return C.CU_STREAM_CAPTURE_MODE_RELAXED
	}
	return C.CU_STREAM_CAPTURE_MODE_GLOBAL
}

func streamBeginCapture(s cu.Stream, m device.CaptureMode) cuResult {
	return res(C.cuStreamBeginCapture(rawStream(s), captureModeC(m)))
}

func streamEndCapture(s cu.Stream) (C.CUgraph, cuResult) {
	var g C.CUgraph
	r := C.cuStreamEndCapture(rawStream(s), &g)
	return g, res(r)
}

// CUstreamCaptureStatus values, as cuStreamIsCapturing reports them.
const (
	captureStatusNone        = 0 // not capturing
	captureStatusActive      = 1 // capturing
	captureStatusInvalidated = 2 // capturing, but invalidated; EndCapture will fail
)

var _ = [1]struct{}{}[C.CU_STREAM_CAPTURE_STATUS_NONE-captureStatusNone]
var _ = [1]struct{}{}[C.CU_STREAM_CAPTURE_STATUS_ACTIVE-captureStatusActive]
var _ = [1]struct{}{}[C.CU_STREAM_CAPTURE_STATUS_INVALIDATED-captureStatusInvalidated]

// streamCaptureStatus asks the driver whether s is capturing
// (cuStreamIsCapturing); the status is one of the captureStatus constants.
func streamCaptureStatus(s cu.Stream) (int, cuResult) {
	var st C.CUstreamCaptureStatus
	r := C.cuStreamIsCapturing(rawStream(s), &st)
	return int(st), res(r)
}

func graphNodeCount(g C.CUgraph) (int, cuResult) {
	var n C.size_t
	r := C.tl_graph_node_count(g, &n)
	return int(n), res(r)
}

func graphInstantiate(g C.CUgraph) (C.CUgraphExec, cuResult) {
	var e C.CUgraphExec
	r := C.cuGraphInstantiateWithFlags(&e, g, 0)
	return e, res(r)
}

// graphExecUpdate returns the driver result and the CUgraphExecUpdateResult.
// graphExecUpdate returns the driver's result, the CUgraphExecUpdateResult
// and the entry point that answered (graphUpdateEntry). legacy asks for the
// 11.x entry point where the headers have it (the tests compare the two).
func graphExecUpdate(e C.CUgraphExec, g C.CUgraph, legacy bool) (cuResult, int, string) {
	var result, entry C.int
	l := C.int(0)
	if legacy {
		l = 1
	}
	r := C.tl_graph_exec_update(e, g, l, &result, &entry)
	return res(r), int(result), graphUpdateEntry(int(entry))
}

func graphUpdateEntry(entry int) string {
	if entry == 2 {
		return "cuGraphExecUpdate_v2"
	}
	return "cuGraphExecUpdate"
}

func graphUpload(e C.CUgraphExec, s cu.Stream) cuResult {
	return res(C.cuGraphUpload(e, rawStream(s)))
}

func graphLaunch(e C.CUgraphExec, s cu.Stream) cuResult {
	return res(C.cuGraphLaunch(e, rawStream(s)))
}

func graphExecDestroy(e C.CUgraphExec) cuResult { return res(C.cuGraphExecDestroy(e)) }

func graphDestroy(g C.CUgraph) cuResult { return res(C.cuGraphDestroy(g)) }

// Handle types of the driver objects this package keeps, so that only this
// file needs cgo's C namespace.
type (
	ctxHandle   = C.CUcontext
	graphHandle = C.CUgraph
	execHandle  = C.CUgraphExec
)

func syncContext() cuResult { return res(C.cuCtxSynchronize()) }

// jitLogBytes bounds each of the JIT compiler's logs; a refusal's reason
// is a few lines.
const jitLogBytes = 16 << 10

// loadModule loads the PTX image into the current context through the
// driver's JIT compiler and returns what it logged, whether or not the load
// succeeded.
func loadModule(image string) (cu.Module, JITLog, cuResult) {
	var mod cu.Module
	cimg := C.CString(image)
	defer C.free(unsafe.Pointer(cimg))
	info := (*C.char)(C.malloc(jitLogBytes))
	defer C.free(unsafe.Pointer(info))
	errLog := (*C.char)(C.malloc(jitLogBytes))
	defer C.free(unsafe.Pointer(errLog))
	var raw C.CUmodule
	var infoUsed, errUsed C.unsigned
	var wall C.float
	r := res(C.tl_module_load(&raw, unsafe.Pointer(cimg), info, jitLogBytes, errLog, jitLogBytes, &infoUsed, &errUsed, &wall))
	log := JITLog{Info: logText(info, infoUsed), Error: logText(errLog, errUsed), WallMS: float64(wall)}
	if r == cuSuccess {
		// cu.Module holds the handle alone, as rawFunction's cu.Function does.
		*(*C.CUmodule)(unsafe.Pointer(&mod)) = raw
	}
	return mod, log, r
}

// logText is a JIT log's text: the bytes the driver says it filled, up to
// the first NUL, without trailing blank lines.
func logText(p *C.char, used C.unsigned) string {
	n := int(used)
	if n <= 0 {
		// Some drivers leave the size as given and NUL-terminate instead.
		n = jitLogBytes
	}
	n = min(n, jitLogBytes)
	b := C.GoBytes(unsafe.Pointer(p), C.int(n))
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimRight(string(b), "\n\r\t ")
}

// driverVersion is cuDriverGetVersion's answer: 1000*major + 10*minor.
func driverVersion() (int, cuResult) {
	var v C.int
	r := res(C.cuDriverGetVersion(&v))
	return int(v), r
}
