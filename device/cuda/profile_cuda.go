//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda
#cgo linux LDFLAGS: -L/usr/local/cuda/lib64
#cgo linux CFLAGS: -I/usr/local/cuda/include
#include <cuda.h>

// tl_prof_launch is tl_launch bracketed by two timing events on s: the
// context bound, start recorded, the kernel launched, end recorded.
static CUresult tl_prof_launch(CUcontext ctx, CUfunction f, unsigned gx, unsigned gy, unsigned bx, unsigned by,
                               CUstream s, unsigned long long *p, int n, CUevent start, CUevent end) {
	void *args[16];
	CUcontext cur = NULL;
	CUresult r;
	if (n < 0 || n > 16) return CUDA_ERROR_INVALID_VALUE;
	r = cuCtxGetCurrent(&cur);
	if (r != CUDA_SUCCESS) return r;
	if (cur != ctx && (r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) return r;
	for (int i = 0; i < n; i++) args[i] = &p[i];
	if ((r = cuEventRecord(start, s)) != CUDA_SUCCESS) return r;
	if ((r = cuLaunchKernel(f, gx, gy, 1, bx, by, 1, 0, s, args, NULL)) != CUDA_SUCCESS) return r;
	return cuEventRecord(end, s);
}

static CUresult tl_event_create_timing(CUevent *e) { return cuEventCreate(e, CU_EVENT_BLOCKING_SYNC); }
*/
import "C"

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/tolaria-ml/tolaria/internal/atomicfile"
)

// ProfileEnv names the file a device writes a per-kernel profile to when it
// closes: every kernel launched outside a capture is bracketed by two timing
// events on its stream, and the device time between them is summed per
// kernel and launch geometry (the grid says which shape it was). Launches
// inside a capture, and so graph replays, are not timed: the profile is of
// the eager steps (warm-up and eager fallbacks; run_graph_bench's eager
// phase). The events cost a few microseconds per launch, so the profile
// says where the device time goes, not how long an unprofiled step takes.
// Several devices in one process write one file each, the ordinal appended.
const ProfileEnv = "TOLARIA_CUDA_KERNEL_PROFILE"

// profileBatch is how many timed launches wait before their events are read
// (one cuEventSynchronize on the newest, then each pair's elapsed time).
const profileBatch = 2048

type profileKey struct {
	kernel         kernel
	gridX, gridY   int
	blockX, blockY int
}

type profileStat struct {
	launches int
	total    time.Duration
	min, max time.Duration
}

type profilePair struct {
	key        profileKey
	start, end eventHandle
}

// kernelProfile is one device's profile (ProfileEnv).
type kernelProfile struct {
	path string

	mu      sync.Mutex
	free    []eventHandle // timing events not in use
	pending []profilePair
	stats   map[profileKey]*profileStat
	err     error // the first driver error; the profile says so
}

func newKernelProfile(path string, ordinal int) *kernelProfile {
	if ordinal > 0 {
		path = fmt.Sprintf("%s.%d", path, ordinal)
	}
	return &kernelProfile{path: path, stats: map[profileKey]*profileStat{}}
}

// events returns two timing events for one launch, made on the calling
// thread, whose context is bound.
func (p *kernelProfile) events() (start, end eventHandle, r cuResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.free) < 2 {
		e, r := eventCreateTiming()
		if r != cuSuccess {
			return nil, nil, r
		}
		p.free = append(p.free, e)
	}
	n := len(p.free)
	start, end = p.free[n-2], p.free[n-1]
	p.free = p.free[:n-2]
	return start, end, cuSuccess
}

// done records a timed launch, reading the batch when it is full and no
// capture in global mode is in progress anywhere (a capture sequence in
// global mode forbids other threads' synchronising calls).
func (p *kernelProfile) done(key profileKey, start, end eventHandle, globalCaptures int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = append(p.pending, profilePair{key, start, end})
	if len(p.pending) >= profileBatch && globalCaptures == 0 {
		p.readLocked()
	}
}

// unused returns the events of a launch that failed.
func (p *kernelProfile) unused(start, end eventHandle) {
	p.mu.Lock()
	p.free = append(p.free, start, end)
	p.mu.Unlock()
}

// readLocked waits for the pending launches and adds their times.
func (p *kernelProfile) readLocked() {
	if len(p.pending) == 0 {
		return
	}
	if r := eventSynchronize(p.pending[len(p.pending)-1].end); r != cuSuccess && p.err == nil {
		p.err = fmt.Errorf("cuEventSynchronize: %v", DriverError{r})
	}
	for _, pp := range p.pending {
		ms, r := eventElapsedMS(pp.start, pp.end)
		if r != cuSuccess {
			if p.err == nil {
				p.err = fmt.Errorf("cuEventElapsedTime: %v", DriverError{r})
			}
		} else {
			d := time.Duration(float64(ms) * float64(time.Millisecond))
			st := p.stats[pp.key]
			if st == nil {
				st = &profileStat{min: d, max: d}
				p.stats[pp.key] = st
			}
			st.launches++
			st.total += d
			st.min = min(st.min, d)
			st.max = max(st.max, d)
		}
		p.free = append(p.free, pp.start, pp.end)
	}
	p.pending = p.pending[:0]
}

// close reads what is pending, destroys the events and writes the file. It
// runs in the device's teardown, the context bound, before the streams are
// destroyed.
func (p *kernelProfile) close(device, model string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.readLocked()
	for _, e := range p.free {
		eventDestroy(e)
	}
	p.free = nil
	return atomicfile.WriteFile(p.path, []byte(p.reportLocked(device, model)), 0o644)
}

func (p *kernelProfile) reportLocked(device, model string) string {
	type row struct {
		key profileKey
		st  *profileStat
	}
	rows := make([]row, 0, len(p.stats))
	var total time.Duration
	launches := 0
	for k, st := range p.stats {
		rows = append(rows, row{k, st})
		total += st.total
		launches += st.launches
	}
	slices.SortFunc(rows, func(a, b row) int {
		if c := cmp.Compare(b.st.total, a.st.total); c != 0 {
			return c
		}
		return cmp.Compare(kernelNames[a.key.kernel], kernelNames[b.key.kernel])
	})
	var b strings.Builder
	fmt.Fprintf(&b, "# tolaria kernel profile: %s (%s), eager launches only (%s)\n", device, model, ProfileEnv)
	fmt.Fprintf(&b, "# %d launches, %.3f ms of device time in kernels\n", launches, ms(total))
	if p.err != nil {
		fmt.Fprintf(&b, "# some launches were not timed: %v\n", p.err)
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kernel\tgrid\tblock\tlaunches\ttotal ms\tshare\tmean µs\tmin µs\tmax µs\t")
	for _, r := range rows {
		share := 0.0
		if total > 0 {
			share = 100 * float64(r.st.total) / float64(total)
		}
		fmt.Fprintf(tw, "%s\t%dx%d\t%dx%d\t%d\t%.3f\t%.1f%%\t%.2f\t%.2f\t%.2f\t\n",
			kernelNames[r.key.kernel], r.key.gridX, r.key.gridY, r.key.blockX, r.key.blockY, r.st.launches,
			ms(r.st.total), share, us(r.st.total)/float64(r.st.launches), us(r.st.min), us(r.st.max))
	}
	tw.Flush()
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// profileFromEnv is the profile ProfileEnv asks for, or nil.
func profileFromEnv(ordinal int) *kernelProfile {
	path := os.Getenv(ProfileEnv)
	if path == "" {
		return nil
	}
	return newKernelProfile(path, ordinal)
}

type eventHandle = C.CUevent

func eventCreateTiming() (eventHandle, cuResult) {
	var e C.CUevent
	r := res(C.tl_event_create_timing(&e))
	return e, r
}

func eventSynchronize(e eventHandle) cuResult { return res(C.cuEventSynchronize(e)) }

func eventElapsedMS(start, end eventHandle) (float32, cuResult) {
	var ms C.float
	r := res(C.cuEventElapsedTime(&ms, start, end))
	return float32(ms), r
}

func eventDestroy(e eventHandle) { C.cuEventDestroy(e) }

// profiledLaunch is launchKernel with the launch timed into p.
func profiledLaunch(d *Device, p *kernelProfile, ctx C.CUcontext, k kernel, f *cu.Function, g dims, s cu.Stream,
	slots *[maxKernelParam]uint64, n int) cuResult {
	if r := bindContext(ctx); r != cuSuccess { // the events are made in ctx
		return r
	}
	start, end, r := p.events()
	if r != cuSuccess {
		return r
	}
	r = res(C.tl_prof_launch(ctx, rawFunction(f), C.uint(g.gridX), C.uint(g.gridY),
		C.uint(g.blockX), C.uint(g.blockY), rawStream(s),
		(*C.ulonglong)(unsafe.Pointer(&slots[0])), C.int(n), start, end))
	if r != cuSuccess {
		p.unused(start, end)
		return r
	}
	p.done(profileKey{kernel: k, gridX: g.gridX, gridY: g.gridY, blockX: g.blockX, blockY: g.blockY}, start, end,
		d.globalCaptures.Load())
	return cuSuccess
}
