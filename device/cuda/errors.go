package cuda

import (
	"errors"
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
)

// CUDA driver result codes (CUresult in cuda.h) that tolaria treats
// specially. The cgo side asserts at compile time that they match cuda.h.
const (
	cuSuccess                   = 0
	cuErrInvalidValue           = 1
	cuErrOutOfMemory            = 2
	cuErrNotInitialized         = 3
	cuErrDeinitialized          = 4
	cuErrStubLibrary            = 34
	cuErrDeviceUnavailable      = 46
	cuErrNoDevice               = 100
	cuErrInvalidDevice          = 101
	cuErrInvalidImage           = 200
	cuErrInvalidContext         = 201
	cuErrNoBinaryForGPU         = 209
	cuErrInvalidPTX             = 218
	cuErrJITCompilerNotFound    = 221
	cuErrUnsupportedPTXVersion  = 222
	cuErrInvalidHandle          = 400
	cuErrIllegalState           = 401
	cuErrNotFound               = 500
	cuErrNotReady               = 600
	cuErrIllegalAddress         = 700
	cuErrLaunchOutOfResources   = 701
	cuErrLaunchFailed           = 719
	cuErrSystemNotReady         = 802
	cuErrSystemDriverMismatch   = 803
	cuErrCompatNotSupported     = 804
	cuErrCaptureUnsupported     = 900
	cuErrCaptureInvalidated     = 901
	cuErrCaptureMerge           = 902
	cuErrCaptureUnmatched       = 903
	cuErrCaptureUnjoined        = 904
	cuErrCaptureIsolation       = 905
	cuErrCaptureImplicit        = 906
	cuErrCapturedEvent          = 907
	cuErrCaptureWrongThread     = 908
	cuErrGraphExecUpdateFailure = 910
	cuErrProfilerDisabled       = 5
	cuErrECCUncorrectable       = 214
	cuErrInvalidSource          = 300
	cuErrFileNotFound           = 301
	cuErrOperatingSystem        = 304
	cuErrLaunchTimeout          = 702
	cuErrAssert                 = 710
	cuErrMisalignedAddress      = 716
	cuErrNotPermitted           = 800
	cuErrNotSupported           = 801
	cuErrTimeout                = 909
	cuErrUnknown                = 999
)

// driverCodes names the codes above and gives the sentinel each maps to
// (nil: no sentinel fits; the error still carries the code).
var driverCodes = map[int]struct {
	name     string
	sentinel error
}{
	cuErrInvalidValue:           {"CUDA_ERROR_INVALID_VALUE", device.ErrMisuse},
	cuErrOutOfMemory:            {"CUDA_ERROR_OUT_OF_MEMORY", device.ErrOutOfMemory},
	cuErrNotInitialized:         {"CUDA_ERROR_NOT_INITIALIZED", device.ErrNoDevice},
	cuErrDeinitialized:          {"CUDA_ERROR_DEINITIALIZED", device.ErrNoDevice},
	cuErrStubLibrary:            {"CUDA_ERROR_STUB_LIBRARY", device.ErrNoDevice},
	cuErrDeviceUnavailable:      {"CUDA_ERROR_DEVICE_UNAVAILABLE", device.ErrNoDevice},
	cuErrNoDevice:               {"CUDA_ERROR_NO_DEVICE", device.ErrNoDevice},
	cuErrInvalidDevice:          {"CUDA_ERROR_INVALID_DEVICE", device.ErrNoDevice},
	cuErrInvalidImage:           {"CUDA_ERROR_INVALID_IMAGE", device.ErrNoDevice},
	cuErrInvalidContext:         {"CUDA_ERROR_INVALID_CONTEXT", device.ErrMisuse},
	cuErrNoBinaryForGPU:         {"CUDA_ERROR_NO_BINARY_FOR_GPU", device.ErrNoDevice},
	cuErrInvalidPTX:             {"CUDA_ERROR_INVALID_PTX", device.ErrNoDevice},
	cuErrJITCompilerNotFound:    {"CUDA_ERROR_JIT_COMPILER_NOT_FOUND", device.ErrNoDevice},
	cuErrUnsupportedPTXVersion:  {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", device.ErrNoDevice},
	cuErrInvalidHandle:          {"CUDA_ERROR_INVALID_HANDLE", device.ErrMisuse},
	cuErrIllegalState:           {"CUDA_ERROR_ILLEGAL_STATE", device.ErrMisuse},
	cuErrNotFound:               {"CUDA_ERROR_NOT_FOUND", device.ErrMisuse},
	cuErrNotReady:               {"CUDA_ERROR_NOT_READY", device.ErrNotReady},
	cuErrIllegalAddress:         {"CUDA_ERROR_ILLEGAL_ADDRESS", nil},
	cuErrLaunchOutOfResources:   {"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", nil},
	cuErrLaunchFailed:           {"CUDA_ERROR_LAUNCH_FAILED", nil},
	cuErrSystemNotReady:         {"CUDA_ERROR_SYSTEM_NOT_READY", device.ErrNoDevice},
	cuErrSystemDriverMismatch:   {"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", device.ErrNoDevice},
	cuErrCompatNotSupported:     {"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", device.ErrNoDevice},
	cuErrCaptureUnsupported:     {"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", device.ErrCaptureViolation},
	cuErrCaptureInvalidated:     {"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", device.ErrCaptureInvalidated},
	cuErrCaptureMerge:           {"CUDA_ERROR_STREAM_CAPTURE_MERGE", device.ErrCaptureIsolation},
	cuErrCaptureUnmatched:       {"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", device.ErrMisuse},
	cuErrCaptureUnjoined:        {"CUDA_ERROR_STREAM_CAPTURE_UNJOINED", device.ErrCaptureIsolation},
	cuErrCaptureIsolation:       {"CUDA_ERROR_STREAM_CAPTURE_ISOLATION", device.ErrCaptureIsolation},
	cuErrCaptureImplicit:        {"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", device.ErrCaptureViolation},
	cuErrCapturedEvent:          {"CUDA_ERROR_CAPTURED_EVENT", device.ErrCaptureIsolation},
	cuErrCaptureWrongThread:     {"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", device.ErrMisuse},
	cuErrGraphExecUpdateFailure: {"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", device.ErrTopologyChanged},
	cuErrProfilerDisabled:       {"CUDA_ERROR_PROFILER_DISABLED", nil},
	cuErrECCUncorrectable:       {"CUDA_ERROR_ECC_UNCORRECTABLE", nil},
	cuErrInvalidSource:          {"CUDA_ERROR_INVALID_SOURCE", device.ErrNoDevice},
	cuErrFileNotFound:           {"CUDA_ERROR_FILE_NOT_FOUND", device.ErrNoDevice},
	cuErrOperatingSystem:        {"CUDA_ERROR_OPERATING_SYSTEM", nil},
	cuErrLaunchTimeout:          {"CUDA_ERROR_LAUNCH_TIMEOUT", nil},
	cuErrAssert:                 {"CUDA_ERROR_ASSERT", nil},
	cuErrMisalignedAddress:      {"CUDA_ERROR_MISALIGNED_ADDRESS", nil},
	cuErrNotPermitted:           {"CUDA_ERROR_NOT_PERMITTED", device.ErrMisuse},
	cuErrNotSupported:           {"CUDA_ERROR_NOT_SUPPORTED", device.ErrMisuse},
	cuErrTimeout:                {"CUDA_ERROR_TIMEOUT", nil},
	cuErrUnknown:                {"CUDA_ERROR_UNKNOWN", nil},
}

// DriverError is a CUDA driver result code. Errors from a Device wrap it
// (inside a *device.Error, next to the sentinel it maps to), so callers can
// read the code with errors.As.
type DriverError struct {
	Code int // the CUresult value
}

func (e DriverError) Error() string {
	if c, ok := driverCodes[e.Code]; ok {
		return fmt.Sprintf("%s (%d)", c.name, e.Code)
	}
	return fmt.Sprintf("CUDA error %d", e.Code)
}

// sentinelFor is the device sentinel a driver code maps to, or nil.
func sentinelFor(code int) error { return driverCodes[code].sentinel }

// driverErr wraps a failed driver call as a *device.Error naming the
// operation, wrapping both the sentinel (for errors.Is) and the code.
func driverErr(dev, op string, code int) *device.Error {
	var err error = DriverError{Code: code}
	if s := sentinelFor(code); s != nil {
		err = fmt.Errorf("%w: %w", s, err)
	}
	return &device.Error{Device: dev, Op: op, Err: err}
}

// graphUpdateResults names CUgraphExecUpdateResult values, for the detail of
// the ErrTopologyChanged that Exec.Update returns.
var graphUpdateResults = []string{
	"CU_GRAPH_EXEC_UPDATE_SUCCESS",
	"CU_GRAPH_EXEC_UPDATE_ERROR",
	"CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED",
	"CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED",
	"CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED",
	"CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED",
	"CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED",
	"CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE",
	"CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED",
}

func graphUpdateResultName(r int) string {
	if r >= 0 && r < len(graphUpdateResults) {
		return graphUpdateResults[r]
	}
	return fmt.Sprintf("CUgraphExecUpdateResult(%d)", r)
}

// unusable wraps a driver failure that leaves the device unusable (the
// kernels do not load): ErrNoDevice unless the code maps to a sentinel.
func unusable(dev, op string, code int, detail string) *device.Error {
	e := driverErr(dev, op, code)
	if sentinelFor(code) == nil {
		e.Err = fmt.Errorf("%w: %w", device.ErrNoDevice, DriverError{Code: code})
	}
	e.Detail = detail
	return e
}

func isPoolLimit(err error) bool { return errors.Is(err, errPoolLimit) }
