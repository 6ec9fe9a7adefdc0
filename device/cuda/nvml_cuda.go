//go:build cuda

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

// NVML is loaded at run time (libnvidia-ml.so.1 ships with every driver)
// so that tolaria neither links it nor needs its headers; the types below
// are nvml.h's as far as they are used.
typedef int (*tl_nvml_init_fn)(void);
typedef int (*tl_nvml_handle_fn)(const char *, void **);
typedef int (*tl_nvml_procs_fn)(void *, unsigned int *, void *);
typedef const char *(*tl_nvml_string_fn)(int);

static pthread_once_t tl_nvml_once = PTHREAD_ONCE_INIT;
static int tl_nvml_state; // 0 loaded and initialised, -1 no library, -2 a symbol missing, >0 nvmlInit_v2's error
static tl_nvml_handle_fn tl_nvml_handle;
static tl_nvml_procs_fn tl_nvml_procs;
static tl_nvml_string_fn tl_nvml_string;

static void tl_nvml_load(void) {
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		tl_nvml_state = -1;
		return;
	}
	tl_nvml_init_fn init = (tl_nvml_init_fn)dlsym(lib, "nvmlInit_v2");
	tl_nvml_handle = (tl_nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
	// _v3 and _v2 both take nvmlProcessInfo_t of 24 bytes (nvml.go).
	tl_nvml_procs = (tl_nvml_procs_fn)dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
	if (tl_nvml_procs == NULL) tl_nvml_procs = (tl_nvml_procs_fn)dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v2");
	tl_nvml_string = (tl_nvml_string_fn)dlsym(lib, "nvmlErrorString");
	if (init == NULL || tl_nvml_handle == NULL || tl_nvml_procs == NULL) {
		tl_nvml_state = -2;
		return;
	}
	// Initialised once for the process's life: nvmlInit is reference
	// counted and nothing here needs it shut down.
	tl_nvml_state = init();
}

static int tl_nvml_ready(void) {
	pthread_once(&tl_nvml_once, tl_nvml_load);
	return tl_nvml_state;
}

static const char *tl_nvml_error(int r) {
	return tl_nvml_string != NULL ? tl_nvml_string(r) : "";
}

// tl_nvml_processes fills buf (room for *count entries) with the compute
// processes on the GPU at bus; *count becomes the number NVML has. stage
// says which call failed: 1 the handle, 2 the list.
static int tl_nvml_processes(const char *bus, unsigned int *count, void *buf, int *stage) {
	void *dev = NULL;
	*stage = 1;
	int r = tl_nvml_handle(bus, &dev);
	if (r != 0) return r;
	*stage = 2;
	return tl_nvml_procs(dev, count, buf);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// errNoNVML: NVML cannot be used in this process at all.
var errNoNVML = errors.New("NVML is not available")

const nvmlErrorInsufficientSize = 7

// nvmlError names an NVML return code.
func nvmlError(call string, r C.int) error {
	msg := C.GoString(C.tl_nvml_error(r))
	if msg == "" {
		msg = "no description"
	}
	return fmt.Errorf("%s returned %d (%s)", call, int(r), msg)
}

// nvmlProcessUsed asks NVML for the device memory process pid uses on the
// GPU at PCI location bus. It wraps errNoNVML when libnvidia-ml.so.1 or
// its entry points are missing or nvmlInit fails.
func nvmlProcessUsed(bus string, pid int) (int64, error) {
	switch s := C.tl_nvml_ready(); {
	case s == -1:
		return 0, fmt.Errorf("%w: libnvidia-ml.so.1 could not be loaded", errNoNVML)
	case s == -2:
		return 0, fmt.Errorf("%w: libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 or nvmlDeviceGetComputeRunningProcesses_v3/_v2", errNoNVML)
	case s != 0:
		return 0, fmt.Errorf("%w: %v", errNoNVML, nvmlError("nvmlInit_v2", s))
	}
	cbus := C.CString(bus)
	defer C.free(unsafe.Pointer(cbus))
	// Room for a busy GPU; NVML says how many more it has when short, and
	// the list can grow between two calls, so ask again a few times.
	room := 64
	for try := 0; try < 4; try++ {
		buf := C.malloc(C.size_t(room * nvmlProcessInfoSize))
		count := C.uint(room)
		var stage C.int
		r := C.tl_nvml_processes(cbus, &count, buf, &stage)
		if r == nvmlErrorInsufficientSize && stage == 2 {
			C.free(buf)
			room = int(count) + 16
			continue
		}
		if r != 0 {
			C.free(buf)
			if stage == 1 {
				return 0, nvmlError("nvmlDeviceGetHandleByPciBusId_v2("+bus+")", r)
			}
			return 0, nvmlError("nvmlDeviceGetComputeRunningProcesses", r)
		}
		procs, err := decodeNVMLProcesses(C.GoBytes(buf, C.int(room*nvmlProcessInfoSize)), int(count))
		C.free(buf)
		if err != nil {
			return 0, err
		}
		return nvmlUsedBy(procs, pid)
	}
	return 0, fmt.Errorf("nvmlDeviceGetComputeRunningProcesses: the GPU's process list kept growing past %d entries", room)
}
