//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/tolaria-ml/tolaria/device"
)

var (
	_ device.Device = (*Device)(nil)
	_ device.Stream = (*Stream)(nil)
	_ device.Event  = (*Event)(nil)
	_ device.Graph  = (*Graph)(nil)
	_ device.Exec   = (*Exec)(nil)
)

// Device is one GPU opened through the CUDA driver. It is safe for
// concurrent use; see the package comment for how calls reach the driver.
type Device struct {
	cfg Config
	// graphMu serialises the driver's graph calls (instantiate, update,
	// upload, launch, destroy) across the device's goroutines. The driver
	// API leaves graph objects unsynchronised and names no pair of graph
	// calls safe from two threads; the handles' own locks serialise the
	// calls on one object, and this one the calls on related objects (an
	// executable and the graph it came from, two executables of one graph),
	// after a racing destroy crashed inside cuGraphExecDestroy on an H100.
	// It is taken last, around the driver call alone.
	graphMu sync.Mutex
	name    string
	desc    string
	dev     cu.Device
	ctx     ctxHandle
	mod     cu.Module
	fns     [numKernels]cu.Function
	total   int64
	// What Info reports: compute capability, driver version, the JIT's logs.
	cc            string
	driverVersion int
	jit           JITLog

	ctl    *controlThread
	pool   *pool
	legacy *Stream
	// profile times eager launches when ProfileEnv names a file, else nil.
	profile *kernelProfile
	// ctxMeasure is how Open measured its context (contextmem_cuda.go).
	ctxMeasure contextMeasure

	// life is held shared by every call and exclusively by Close, so that
	// Close never destroys a handle a call in flight is using.
	life   sync.RWMutex
	closed atomic.Bool

	// globalCaptures counts captures in global mode, so that capture-unsafe
	// calls pay one atomic load when none is in progress.
	globalCaptures atomic.Int32

	// nextStream numbers streams so that errors can name them; nextEvent
	// orders events, for Elapsed's locks.
	nextStream atomic.Int64
	nextEvent  atomic.Uint64

	mu         sync.Mutex // guards the fields below
	captures   []*capture
	streams    map[*Stream]struct{}
	events     map[*Event]struct{}
	graphs     map[*Graph]struct{}
	execs      map[*Exec]struct{}
	hosts      map[*hostAlloc]struct{}
	hostPinned int64
	hostAllocs uint64
	tails      []*streamTail   // last events of destroyed streams (fence_cuda.go)
	orphans    []device.Buffer // scratch of destroyed streams, for freeOrphans
}

// Open opens the GPU cfg.Ordinal: it retains the device's primary context,
// loads the embedded PTX module and looks up every kernel, so nothing is
// loaded lazily later (in particular not during a capture). It fails with
// device.ErrNoDevice when there is no such device or it cannot run the
// kernels (compute capability below 8.0).
func Open(cfg Config) (*Device, error) {
	name := cfg.name()
	if err := cfg.Validate(); err != nil {
		return nil, device.Errorf(name, "Open", device.ErrMisuse, "%v", err)
	}
	d := &Device{
		cfg:     cfg,
		name:    name,
		streams: map[*Stream]struct{}{},
		events:  map[*Event]struct{}{},
		graphs:  map[*Graph]struct{}{},
		execs:   map[*Exec]struct{}{},
		hosts:   map[*hostAlloc]struct{}{},
	}
	d.legacy = &Stream{dev: d, legacy: true}
	d.profile = profileFromEnv(cfg.Ordinal)
	d.pool = newPool(cfg.MemoryLimit, memAlloc, memFree)
	d.pool.capturing = d.capturing // fences wait for no capture (fence_cuda.go)
	d.ctl = startControl()
	if err := d.ctl.do(d.open); err != nil {
		d.ctl.stop()
		return nil, err
	}
	return d, nil
}

// open runs on the control thread.
func (d *Device) open() error {
	const op = "Open"
	n, err := cu.NumDevices()
	if err != nil {
		return d.wrap(op, err)
	}
	if n == 0 {
		return device.Errorf(d.name, op, device.ErrNoDevice, "the CUDA driver reports no device")
	}
	if d.cfg.Ordinal >= n {
		return device.Errorf(d.name, op, device.ErrNoDevice,
			"device %d requested but the driver reports %d; check CUDA_VISIBLE_DEVICES", d.cfg.Ordinal, n)
	}
	if d.dev, err = cu.GetDevice(d.cfg.Ordinal); err != nil {
		return d.wrap(op, err)
	}
	major, err := d.dev.Attribute(cu.ComputeCapabilityMajor)
	if err != nil {
		return d.wrap(op, err)
	}
	minor, err := d.dev.Attribute(cu.ComputeCapabilityMinor)
	if err != nil {
		return d.wrap(op, err)
	}
	if major < 8 {
		return device.Errorf(d.name, op, device.ErrNoDevice,
			"compute capability %d.%d; tolaria's kernels are compiled for 8.0 or newer", major, minor)
	}
	d.cc = fmt.Sprintf("%d.%d", major, minor)
	if d.desc, err = d.dev.Name(); err != nil {
		return d.wrap(op, err)
	}
	v, r := driverVersion()
	if r != cuSuccess {
		return d.driver(op, r)
	}
	d.driverVersion = v
	if d.total, err = d.dev.TotalMem(); err != nil {
		return d.wrap(op, err)
	}
	// Held from before the context is made until its size is read.
	unlock, lockErr := d.lockContextCreation()
	defer unlock()
	ctx, r := retainPrimaryContext(d.dev)
	if r != cuSuccess {
		return d.driver(op, r)
	}
	d.ctx = ctx
	if r := setCurrentContext(ctx); r != cuSuccess {
		releasePrimaryContext(d.dev)
		return d.driver(op, r)
	}
	if err := d.loadModule(); err != nil {
		releasePrimaryContext(d.dev)
		return err
	}
	if err := d.measureContext(lockErr); err != nil {
		d.mod.Unload()
		releasePrimaryContext(d.dev)
		return d.wrap(op, err)
	}
	return nil
}

func (d *Device) loadModule() error {
	const op = "Open"
	mod, log, r := loadModule(ptxSource)
	d.jit = log
	if r != cuSuccess {
		return unusable(d.name, op, r, loadFailure(log))
	}
	for k := kernel(0); k < numKernels; k++ {
		fn, err := mod.Function(kernelNames[k])
		if err != nil {
			mod.Unload()
			return unusable(d.name, op, codeOf(err), "looking up kernel "+k.String())
		}
		d.fns[k] = fn
	}
	d.mod = mod
	return nil
}

func memAlloc(bytes int64) (uintptr, error) {
	p, err := cu.MemAlloc(bytes)
	return uintptr(p), err
}

func memFree(addr uintptr) error { return cu.MemFree(cu.DevicePtr(addr)) }

// enter starts a call: it fails with ErrClosed after Close, else locks the
// calling goroutine to its OS thread and makes the context current there.
// Every successful enter is paired with exit.
func (d *Device) enter(op string) error { return d.enterBinding(op, true) }

// enterBinding is enter, binding the context only when bind is set: a
// caller that passes false binds it in its own driver call.
func (d *Device) enterBinding(op string, bind bool) error {
	d.life.RLock()
	if d.closed.Load() {
		d.life.RUnlock()
		return device.Errorf(d.name, op, device.ErrClosed, "the device is closed")
	}
	runtime.LockOSThread()
	if !bind {
		return nil
	}
	if r := bindContext(d.ctx); r != cuSuccess {
		d.exit()
		return d.driver(op, r)
	}
	return nil
}

func (d *Device) exit() {
	runtime.UnlockOSThread()
	d.life.RUnlock()
}

// PrefersLockedThread is true: a caller whose goroutine stays on one
// thread keeps the context current there, so enter's bind is a no-op.
func (d *Device) PrefersLockedThread() bool { return true }

var _ device.ThreadAffine = (*Device)(nil)
var _ device.Granular = (*Device)(nil)
var _ device.DriverMemory = (*Device)(nil)
var _ device.Trimmer = (*Device)(nil)

// Name is "cuda:<ordinal>".
func (d *Device) Name() string { return d.name }

// Info describes the device, its driver and how the kernels' PTX loaded.
func (d *Device) Info() Info {
	v, t := ptxHeader(ptxSource)
	return Info{Name: d.name, Model: d.desc, ComputeCapability: d.cc, DriverVersion: d.driverVersion,
		TotalBytes: d.total, PTXVersion: v, PTXTarget: t, JIT: d.jit}
}

// Description is the GPU's model name as the driver reports it.
func (d *Device) Description() string { return d.desc }

// Alloc returns n float32 elements of device memory from the pool.
func (d *Device) Alloc(n int) (device.Buffer, error) {
	const op = "Alloc"
	if n <= 0 {
		return device.Buffer{}, device.Errorf(d.name, op, device.ErrMisuse, "n = %d; allocate at least one element", n)
	}
	if err := d.enter(op); err != nil {
		return device.Buffer{}, err
	}
	defer d.exit()
	if err := d.checkUnsafe(op); err != nil {
		return device.Buffer{}, err
	}
	if err := d.freeOrphans(op); err != nil {
		return device.Buffer{}, err
	}
	addr, err := d.pool.get(int64(n) * 4)
	if err != nil {
		if isPoolLimit(err) {
			return device.Buffer{}, device.Errorf(d.name, op, device.ErrOutOfMemory, "%v", err)
		}
		return device.Buffer{}, d.wrap(op, err)
	}
	return device.NewBuffer(&deviceAlloc{dev: d, ptr: cu.DevicePtr(addr), n: n}), nil
}

// Free returns the buffer's memory to the pool. It waits for the device to
// be idle first, as cuMemFree does, so that work still using the memory
// finishes before the pool hands it out again.
func (d *Device) Free(b device.Buffer) error {
	const op = "Free"
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if err := d.checkUnsafe(op); err != nil {
		return err
	}
	return d.free(op, b)
}

// free is Free after its capture-safety check, inside a device call.
func (d *Device) free(op string, b device.Buffer) error {
	if _, err := d.devPtr(op, "the buffer", b); err != nil {
		return err
	}
	a := b.Allocation().(*deviceAlloc)
	if b.Offset() != 0 || b.Len() != a.n {
		return d.misuse(op, "Free needs the whole buffer Alloc returned, not a slice of it")
	}
	if d.capturing() {
		// As cuMemFree is: its implicit synchronisation is refused during
		// any capture. The buffer stays allocated.
		return device.Errorf(d.name, op, device.ErrCaptureViolation, "a stream of the device is capturing; free the buffer after EndCapture")
	}
	if !a.freed.CompareAndSwap(false, true) {
		return device.Errorf(d.name, op, device.ErrClosed, "the buffer was already freed")
	}
	d.mu.Lock()
	if a.holds > 0 {
		// A live graph or executable still refers to the block: the pool
		// takes it back when the last of them lets go.
		a.parked = true
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	// Work queued before the Free may still use the block: the pool keeps
	// it until then (see fence_cuda.go), and no stream waits.
	if err := d.pool.put(uintptr(a.ptr), int64(a.n)*4, d.fence(op)); err != nil {
		return d.putErr(op, err)
	}
	return nil
}

// capturing reports whether any stream of the device is capturing.
func (d *Device) capturing() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.captures) > 0
}

// AllocHost returns n float32 elements of pinned host memory (cuMemAllocHost), zeroed.
func (d *Device) AllocHost(n int) (device.HostBuffer, error) {
	const op = "AllocHost"
	if n <= 0 {
		return device.HostBuffer{}, device.Errorf(d.name, op, device.ErrMisuse, "n = %d; allocate at least one element", n)
	}
	if err := d.enter(op); err != nil {
		return device.HostBuffer{}, err
	}
	defer d.exit()
	if err := d.checkUnsafe(op); err != nil {
		return device.HostBuffer{}, err
	}
	p, r := memAllocHost(int64(n) * 4)
	if r != cuSuccess {
		return device.HostBuffer{}, d.driver(op, r)
	}
	data := unsafe.Slice((*float32)(p), n)
	clear(data)
	h := &hostAlloc{dev: d, p: p, n: n}
	d.mu.Lock()
	d.hosts[h] = struct{}{}
	d.hostPinned += int64(n) * 4
	d.hostAllocs++
	d.mu.Unlock()
	return device.NewHostBuffer(h, data), nil
}

// FreeHost releases pinned memory returned by AllocHost.
func (d *Device) FreeHost(hb device.HostBuffer) error {
	const op = "FreeHost"
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if err := d.checkUnsafe(op); err != nil {
		return err
	}
	h, ok := hb.Allocation().(*hostAlloc)
	switch {
	case hb.IsZero() || hb.IsPageable() || !ok || h.dev != d:
		return d.misuse(op, "the host buffer is not pinned memory of this device")
	case hb.Len() != h.n || unsafe.Pointer(unsafe.SliceData(hb.Data())) != h.p:
		return d.misuse(op, "FreeHost needs the whole host buffer AllocHost returned, not a slice of it")
	}
	if !h.freed.CompareAndSwap(false, true) {
		return device.Errorf(d.name, op, device.ErrClosed, "the host buffer was already freed")
	}
	// Like cuMemFree, wait for work that may still copy to or from it.
	if err := cu.Synchronize(); err != nil {
		// Refused (during a capture, say): the memory stays allocated.
		h.freed.Store(false)
		return d.wrap(op, err)
	}
	d.mu.Lock()
	delete(d.hosts, h)
	d.hostPinned -= int64(h.n) * 4
	d.mu.Unlock()
	if r := memFreeHost(h.p); r != cuSuccess {
		return d.driver(op, r)
	}
	return nil
}

// Upload copies pageable host memory to the device once the device is idle.
func (d *Device) Upload(dst device.Buffer, src []float32) error {
	const op = "Upload"
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if err := d.checkUnsafe(op); err != nil {
		return err
	}
	ptr, err := d.devPtr(op, "dst", dst)
	if err != nil {
		return err
	}
	if len(src) != dst.Len() {
		return d.misuse(op, "src has %d elements, dst %d", len(src), dst.Len())
	}
	if err := cu.Synchronize(); err != nil {
		return d.wrap(op, err)
	}
	if err := cu.MemcpyHtoD(ptr, unsafe.Pointer(unsafe.SliceData(src)), dst.Bytes()); err != nil {
		return d.wrap(op, err)
	}
	// A pageable cuMemcpyHtoD may return before its DMA lands, and the
	// legacy stream it ran on does not order non-blocking streams: wait.
	return d.wrap(op, cu.Synchronize())
}

// Download copies device memory to pageable host memory once the device is idle.
func (d *Device) Download(dst []float32, src device.Buffer) error {
	const op = "Download"
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if err := d.checkUnsafe(op); err != nil {
		return err
	}
	ptr, err := d.devPtr(op, "src", src)
	if err != nil {
		return err
	}
	if len(dst) != src.Len() {
		return d.misuse(op, "dst has %d elements, src %d", len(dst), src.Len())
	}
	if err := cu.Synchronize(); err != nil {
		return d.wrap(op, err)
	}
	if err := cu.MemcpyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), ptr, src.Bytes()); err != nil {
		return d.wrap(op, err)
	}
	return nil
}

// NewStream creates a non-blocking stream (CU_STREAM_NON_BLOCKING).
func (d *Device) NewStream() (device.Stream, error) {
	const op = "NewStream"
	// The stream's scratch first. Allocating is capture-unsafe, so a
	// stream is not made while a stream captures (Alloc would break a
	// global-mode capture). Under a memory limit too small for it the
	// stream goes without: its long reductions run in one part
	// (gemmKLanes), the same on every run with that limit.
	if d.capturing() {
		return nil, device.Errorf(d.name, op, device.ErrCaptureViolation,
			"NewStream allocates the stream's scratch, which a capture in progress forbids; make streams before capturing")
	}
	scratch, err := d.Alloc(ScratchFloats)
	if err != nil && !errors.Is(err, device.ErrOutOfMemory) {
		return nil, err
	}
	s, err := d.newStream(op, scratch)
	if err != nil {
		if scratch.Len() > 0 {
			err = errors.Join(err, d.Free(scratch))
		}
		return nil, err
	}
	return s, nil
}

// orphan keeps a destroyed stream's scratch for freeOrphans: Destroy makes
// no capture-unsafe call (freeing records fences on every stream, which
// would break a capture that another goroutine is beginning).
func (d *Device) orphan(b device.Buffer) {
	d.mu.Lock()
	d.orphans = append(d.orphans, b)
	d.mu.Unlock()
}

// freeOrphans frees the scratch of destroyed streams, inside a
// capture-unsafe device call (Alloc, Trim) with no capture in progress;
// Close frees what is left with the pool.
func (d *Device) freeOrphans(op string) error {
	if d.capturing() {
		return nil
	}
	d.mu.Lock()
	list := d.orphans
	d.orphans = nil
	d.mu.Unlock()
	for i, b := range list {
		if err := d.free(op, b); err != nil {
			d.mu.Lock()
			d.orphans = append(d.orphans, list[i+1:]...)
			d.mu.Unlock()
			return err
		}
	}
	return nil
}

func (d *Device) newStream(op string, scratch device.Buffer) (*Stream, error) {
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.exit()
	st, err := cu.MakeStream(cu.NonBlocking)
	if err != nil {
		return nil, d.wrap(op, err)
	}
	s := &Stream{dev: d, cu: st, id: d.nextStream.Add(1), scratch: scratch}
	d.mu.Lock()
	d.streams[s] = struct{}{}
	d.mu.Unlock()
	return s, nil
}

// DefaultStream is the legacy stream (handle 0). Because tolaria's streams
// are non-blocking, the driver would not order them against it; this
// backend keeps the contract's promise by running each operation on it
// between two device-wide synchronisations.
func (d *Device) DefaultStream() device.Stream { return d.legacy }

// NewEvent creates an event without timing (CU_EVENT_DISABLE_TIMING), whose
// host waits block in the driver rather than spin (CU_EVENT_BLOCKING_SYNC):
// the staging copies' and the trainer's events, which order streams and
// which the host waits on.
func (d *Device) NewEvent() (device.Event, error) {
	return d.newEvent("NewEvent", cu.DisableTiming|cu.BlockingSyncEvent)
}

// NewTimingEvent creates an event that records timing, for Elapsed; host
// waits on it block too (CU_EVENT_BLOCKING_SYNC).
func (d *Device) NewTimingEvent() (device.Event, error) {
	return d.newEvent("NewTimingEvent", cu.BlockingSyncEvent)
}

func (d *Device) newEvent(op string, flags cu.EventFlags) (device.Event, error) {
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.exit()
	ev, err := cu.MakeEvent(flags)
	if err != nil {
		return nil, d.wrap(op, err)
	}
	e := &Event{dev: d, ev: ev, seq: d.nextEvent.Add(1), timing: flags&cu.DisableTiming == 0}
	d.mu.Lock()
	d.events[e] = struct{}{}
	d.mu.Unlock()
	return e, nil
}

// Elapsed is the device time between two completed events (cuEventElapsedTime).
func (d *Device) Elapsed(start, end device.Event) (time.Duration, error) {
	const op = "Elapsed"
	if err := d.enter(op); err != nil {
		return 0, err
	}
	defer d.exit()
	s, err := d.ownEvent(op, start)
	if err != nil {
		return 0, err
	}
	e, err := d.ownEvent(op, end)
	if err != nil {
		return 0, err
	}
	// Both events' locks, always in creation order, so that two Elapsed
	// calls with the events swapped cannot deadlock against a Destroy.
	first, second := s, e
	if second.seq < first.seq {
		first, second = second, first
	}
	if err := first.use(op); err != nil {
		return 0, err
	}
	defer first.mu.RUnlock()
	if second != first {
		if err := second.use(op); err != nil {
			return 0, err
		}
		defer second.mu.RUnlock()
	}
	for _, ev := range []*Event{s, e} {
		if !ev.recorded.Load() || ev.inCapture.Load() != nil {
			return 0, device.Errorf(d.name, op, device.ErrNotReady, "both events must be recorded outside a capture and complete")
		}
	}
	ms, err := s.ev.Elapsed(e.ev)
	if err != nil {
		if codeOf(err) == cuErrInvalidHandle && (!s.timing || !e.timing) {
			// The driver's answer to an event created without timing:
			// asked of the driver rather than refused here, so that a
			// flag that never reached it shows.
			return 0, device.Errorf(d.name, op, device.ErrMisuse, "an event made by NewEvent records no time (the driver answers %v); make both with NewTimingEvent", err)
		}
		return 0, d.wrap(op, err) // CUDA_ERROR_NOT_READY maps to ErrNotReady
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// Synchronize waits for all work on all streams (cuCtxSynchronize).
func (d *Device) Synchronize() error {
	const op = "Synchronize"
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if err := d.checkUnsafe(op); err != nil {
		return err
	}
	if err := cu.Synchronize(); err != nil {
		return d.wrap(op, err)
	}
	return nil
}

// Instantiate turns a captured graph into an executable (cuGraphInstantiateWithFlags).
func (d *Device) Instantiate(g device.Graph) (device.Exec, error) {
	const op = "Instantiate"
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.exit()
	gr, err := d.ownGraph(op, g)
	if err != nil {
		return nil, err
	}
	if err := gr.lock(op); err != nil {
		return nil, err
	}
	defer gr.mu.Unlock()
	if gr.nodes == 0 {
		return nil, d.misuse(op, "the graph is empty")
	}
	d.graphMu.Lock()
	e, r := graphInstantiate(gr.g)
	d.graphMu.Unlock()
	if r != cuSuccess {
		return nil, d.driver(op, r)
	}
	x := &Exec{dev: d, e: e, nodes: gr.nodes}
	d.mu.Lock()
	x.refs = append([]*deviceAlloc(nil), gr.refs...)
	holdAllLocked(x.refs)
	d.execs[x] = struct{}{}
	d.mu.Unlock()
	return x, nil
}

// Trim gives the pool's cached blocks back to the driver, so that other
// processes on the GPU can have the memory (a parked worker's), the
// scratch of destroyed streams first. Blocks still in use, or held by a
// live graph, stay.
func (d *Device) Trim() error {
	const op = "Trim"
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if err := d.checkUnsafe(op); err != nil {
		return err
	}
	if err := d.freeOrphans(op); err != nil {
		return err
	}
	if err := d.pool.trim(); err != nil {
		return d.wrap(op, err)
	}
	return nil
}

// AllocGranule is the pool's block size: every Alloc holds a multiple of it.
func (d *Device) AllocGranule() int64 { return poolGranule }

// DriverMemory asks the driver for the GPU's free and total memory
// (cuMemGetInfo), which counts every process on the GPU and the driver's
// own allocations as well as this device's pool.
func (d *Device) DriverMemory() (free, total int64, err error) {
	const op = "DriverMemory"
	if err := d.enter(op); err != nil {
		return 0, 0, err
	}
	defer d.exit()
	if free, total, err = cu.MemInfo(); err != nil {
		return 0, 0, d.wrap(op, err)
	}
	return free, total, nil
}

// MemoryStats reports the pool's and the pinned allocations' accounting.
// DeviceLimit is Config.MemoryLimit, or the GPU's total memory without one.
func (d *Device) MemoryStats() device.MemoryStats {
	ps := d.pool.stats()
	limit := d.cfg.MemoryLimit
	if limit == 0 {
		limit = d.total
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return device.MemoryStats{
		DeviceInUse: ps.inUse,
		DevicePeak:  ps.peak,
		DeviceLimit: limit,
		HostPinned:  d.hostPinned,
		Allocs:      ps.allocs,
		HostAllocs:  d.hostAllocs,
	}
}

// Close waits for calls in flight, ends any capture, releases every
// executable, graph, event, stream and device allocation, unloads the
// module and releases the primary context. Later calls return ErrClosed;
// closing again is a no-op.
//
// While pinned host buffers from AllocHost are still allocated, Close
// releases nothing and fails with ErrMisuse naming how many: their Data()
// slices point into memory the driver frees with the context, and callers
// may still hold them. FreeHost them, then Close again.
func (d *Device) Close() error {
	d.life.Lock()
	defer d.life.Unlock()
	if d.closed.Load() {
		return nil
	}
	d.mu.Lock()
	live, bytes := len(d.hosts), d.hostPinned
	d.mu.Unlock()
	if live > 0 {
		return device.HostBuffersLive(d.name, live, bytes)
	}
	d.closed.Store(true)
	err := d.ctl.do(d.teardown)
	d.ctl.stop()
	return err
}

// teardown runs on the control thread, with no call in flight.
func (d *Device) teardown() error {
	const op = "Close"
	var first error
	keep := func(r cuResult) {
		if r != cuSuccess && first == nil {
			first = d.driver(op, r)
		}
	}
	keep(bindContext(d.ctx))
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.captures {
		if g, _ := streamEndCapture(c.origin.cu); g != nil {
			graphDestroy(g)
		}
		c.origin.capture.Store(nil)
	}
	d.captures = nil
	d.globalCaptures.Store(0)
	keep(codeOf(cu.Synchronize()))
	if d.profile != nil {
		if err := d.profile.close(d.name, d.desc); err != nil && first == nil {
			first = d.wrap(op, fmt.Errorf("writing the kernel profile (%s): %w", ProfileEnv, err))
		}
	}
	// No call is in flight (Close holds the lifetime lock), so no handle's
	// lock is held; taking each one orders the flag before any later use.
	for x := range d.execs {
		x.mu.Lock()
		x.destroyed = true
		x.mu.Unlock()
		keep(graphExecDestroy(x.e))
	}
	for g := range d.graphs {
		g.mu.Lock()
		g.destroyed = true
		g.mu.Unlock()
		keep(graphDestroy(g.g))
	}
	for e := range d.events {
		e.mu.Lock()
		e.destroyed = true
		e.mu.Unlock()
		ev := e.ev
		keep(codeOf(cu.DestroyEvent(&ev)))
	}
	for s := range d.streams {
		s.mu.Lock()
		s.destroyed = true
		s.mu.Unlock()
		st := s.cu
		keep(codeOf(st.Destroy()))
	}
	// Close refuses while pinned host buffers are allocated, so there are none.
	clear(d.execs)
	clear(d.graphs)
	clear(d.events)
	clear(d.streams)
	keep(codeOf(d.pool.releaseAll()))
	d.dropTailsLocked()
	keep(codeOf(d.mod.Unload()))
	keep(releasePrimaryContext(d.dev))
	return first
}

// deviceAlloc is one block of the pool, as a device.Allocation.
type deviceAlloc struct {
	dev   *Device
	ptr   cu.DevicePtr
	n     int
	freed atomic.Bool

	// Guarded by Device.mu: how many graphs and executables refer to the
	// block, and whether it was freed while they did (holds_cuda.go).
	holds  int
	parked bool
}

func (a *deviceAlloc) Len() int { return a.n }

// hostAlloc is one cuMemAllocHost allocation, as a device.Allocation.
type hostAlloc struct {
	dev   *Device
	p     unsafe.Pointer
	n     int
	freed atomic.Bool
}

func (h *hostAlloc) Len() int { return h.n }
