package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

func TestDriverErrMapsSentinels(t *testing.T) {
	tests := []struct {
		code int
		want error // nil: no sentinel
	}{
		{cuErrCaptureUnsupported, device.ErrCaptureViolation},
		{cuErrCaptureImplicit, device.ErrCaptureViolation},
		{cuErrCaptureInvalidated, device.ErrCaptureInvalidated},
		{cuErrCaptureIsolation, device.ErrCaptureIsolation},
		{cuErrCaptureUnjoined, device.ErrCaptureIsolation},
		{cuErrCaptureMerge, device.ErrCaptureIsolation},
		{cuErrCapturedEvent, device.ErrCaptureIsolation},
		{cuErrCaptureUnmatched, device.ErrMisuse},
		{cuErrCaptureWrongThread, device.ErrMisuse},
		{cuErrOutOfMemory, device.ErrOutOfMemory},
		{cuErrInvalidValue, device.ErrMisuse},
		{cuErrInvalidHandle, device.ErrMisuse},
		{cuErrNoDevice, device.ErrNoDevice},
		{cuErrNotInitialized, device.ErrNoDevice},
		{cuErrStubLibrary, device.ErrNoDevice},
		{cuErrSystemDriverMismatch, device.ErrNoDevice},
		{cuErrGraphExecUpdateFailure, device.ErrTopologyChanged},
		{cuErrNotReady, device.ErrNotReady},
		{cuErrIllegalAddress, nil},
		{12345, nil},
	}
	sentinels := []error{
		device.ErrCaptureViolation, device.ErrCaptureInvalidated, device.ErrCaptureIsolation,
		device.ErrOutOfMemory, device.ErrMisuse, device.ErrTopologyChanged, device.ErrClosed, device.ErrNotReady, device.ErrNoDevice,
	}
	for _, tt := range tests {
		err := driverErr("cuda:0", "Stream.BeginCapture", tt.code)
		for _, s := range sentinels {
			if got := errors.Is(err, s); got != (s == tt.want) {
				t.Errorf("code %d: errors.Is(err, %q) = %v, want %v", tt.code, s, got, s == tt.want)
			}
		}
		var de DriverError
		if !errors.As(err, &de) || de.Code != tt.code {
			t.Errorf("code %d: errors.As(DriverError) = %v, %+v", tt.code, errors.As(err, &de), de)
		}
		if msg := err.Error(); !strings.Contains(msg, "cuda:0") || !strings.Contains(msg, "Stream.BeginCapture") {
			t.Errorf("code %d: message %q does not name the device and operation", tt.code, msg)
		}
	}
}

func TestDriverErrorNames(t *testing.T) {
	if got := (DriverError{Code: cuErrCaptureInvalidated}).Error(); got != "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901)" {
		t.Errorf("Error() = %q", got)
	}
	if got := (DriverError{Code: 4242}).Error(); got != "CUDA error 4242" {
		t.Errorf("Error() = %q", got)
	}
}

func TestUnusableDefaultsToNoDevice(t *testing.T) {
	err := unusable("cuda:0", "Open", cuErrLaunchFailed, "loading the kernels' PTX")
	if !errors.Is(err, device.ErrNoDevice) {
		t.Errorf("unusable(LAUNCH_FAILED) = %v, want ErrNoDevice", err)
	}
	err = unusable("cuda:0", "Open", cuErrOutOfMemory, "loading the kernels' PTX")
	if !errors.Is(err, device.ErrOutOfMemory) || errors.Is(err, device.ErrNoDevice) {
		t.Errorf("unusable(OUT_OF_MEMORY) = %v, want ErrOutOfMemory only", err)
	}
}

func TestGraphUpdateResultName(t *testing.T) {
	if got := graphUpdateResultName(2); got != "CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED" {
		t.Errorf("graphUpdateResultName(2) = %q", got)
	}
	if got := graphUpdateResultName(99); got != "CUgraphExecUpdateResult(99)" {
		t.Errorf("graphUpdateResultName(99) = %q", got)
	}
}
