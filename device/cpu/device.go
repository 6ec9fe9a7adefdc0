// Package cpu is tolaria's reference backend: the device contract in Go
// (with AVX kernels on amd64, no cgo) with real float32 math. Each stream
// runs its work in order on its own
// goroutine, events order work across streams, host calls return before the
// work is done, and stream capture follows the CUDA driver's rules, so
// ordering bugs and capture violations reproduce without a GPU.
package cpu

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tolaria-ml/tolaria/device"
)

// Config configures the CPU device.
type Config struct {
	// MemoryLimit caps device memory in bytes; 0 means the machine's
	// physical memory (no limit where it cannot be read), so that an
	// allocation no machine could hold is refused with ErrOutOfMemory
	// instead of crashing the process.
	MemoryLimit int64
	// SlowCopy, when positive, makes every host-to-device copy pause this
	// long half-way through. Tests use it to prove that nothing reads a
	// half-copied buffer; it has no other use.
	SlowCopy time.Duration
	// Threads is how many threads the kernels split their work across;
	// 0 means runtime.GOMAXPROCS(0), the cores Go may use. Results do not
	// depend on it: every kernel gives the same bits at any thread count.
	Threads int
}

// MaxThreads bounds Config.Threads.
const MaxThreads = 1024

// Validate reports a configuration error.
func (c Config) Validate() error {
	if c.MemoryLimit < 0 {
		return fmt.Errorf("cpu: MemoryLimit must be >= 0 bytes, got %d", c.MemoryLimit)
	}
	if c.SlowCopy < 0 {
		return fmt.Errorf("cpu: SlowCopy must be >= 0, got %s", c.SlowCopy)
	}
	if c.Threads < 0 || c.Threads > MaxThreads {
		return fmt.Errorf("cpu: Threads must be in 0..%d (0: GOMAXPROCS), got %d", MaxThreads, c.Threads)
	}
	return nil
}

// Device is the CPU reference device.
type Device struct {
	cfg     Config
	threads int
	helpers *helpers
	legacy  *stream
	// streamIDs numbers the device's streams, for messages.
	streamIDs atomic.Int64

	mu       sync.Mutex
	closed   bool
	streams  map[*stream]struct{}
	captures map[*capture]struct{} // captures in global mode now in progress
	stats    device.MemoryStats
	hosts    int            // pinned host buffers allocated now
	wg       sync.WaitGroup // stream goroutines
}

var _ device.Device = (*Device)(nil)

// Open returns a new CPU device.
func Open(cfg Config) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	threads := cfg.Threads
	if threads == 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	d := &Device{
		cfg:      cfg,
		threads:  threads,
		helpers:  startHelpers(threads),
		streams:  make(map[*stream]struct{}),
		captures: make(map[*capture]struct{}),
	}
	d.stats.DeviceLimit = cfg.MemoryLimit
	if d.stats.DeviceLimit == 0 {
		d.stats.DeviceLimit = physicalMemory()
	}
	d.legacy, _ = d.startStream(true)
	return d, nil
}

// Name is "cpu".
func (d *Device) Name() string { return "cpu" }

// Description names the reference backend.
func (d *Device) Description() string {
	kernels := "Go"
	if haveKernel() {
		kernels = kernelName()
	}
	threads := fmt.Sprintf("%d threads", d.threads)
	if d.threads == 1 {
		threads = "1 thread"
	}
	return fmt.Sprintf("tolaria CPU reference device (float32, %s, %s GEMM tiles)", threads, kernels)
}

// Threads is the number of threads the kernels use.
func (d *Device) Threads() int { return d.threads }

func (d *Device) err(op string, err error, format string, args ...any) error {
	return device.Errorf(d.Name(), op, err, format, args...)
}

// closedErr returns ErrClosed once the device is closed, else nil.
func (d *Device) closedErr(op string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return d.err(op, device.ErrClosed, "device closed")
	}
	return nil
}

// checkSafe fails a capture-unsafe call while any stream captures in global
// mode, and invalidates those captures, as the CUDA driver does.
func (d *Device) checkSafe(op string) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return d.err(op, device.ErrClosed, "device closed")
	}
	caps := make([]*capture, 0, len(d.captures))
	for c := range d.captures {
		caps = append(caps, c)
	}
	d.mu.Unlock()
	if len(caps) == 0 {
		return nil
	}
	// The culprit is named in both errors: this one goes to the goroutine
	// that made the call, which may not be the one that ends the capture.
	who := device.Culprit(0)
	ids := make([]string, len(caps))
	for i, c := range caps {
		ids[i] = fmt.Sprint(c.stream.id)
		c.invalidate(fmt.Sprintf("%s was called during the global-mode capture on stream %d, by %s", op, c.stream.id, who))
	}
	return d.err(op, device.ErrCaptureViolation, "%s was called while stream %s captured in global mode, which invalidates the capture; called by %s",
		op, strings.Join(ids, ", "), who)
}

type allocation struct {
	dev   *Device
	data  []float32
	host  bool
	mu    sync.Mutex
	freed bool
}

func (a *allocation) Len() int { return len(a.data) }

// markFreed marks the allocation freed, or fails with ErrClosed when a
// Free on another goroutine got there first: the check and the mark are one
// step, so two Frees never both count the memory released.
func (a *allocation) markFreed(op string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.freed {
		return a.dev.err(op, device.ErrClosed, "buffer was freed")
	}
	a.freed = true
	return nil
}

func (a *allocation) isFreed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.freed
}

// Alloc returns device memory. Its contents are NaN, so that reading memory
// never written shows up in results instead of passing as zeros.
func (d *Device) Alloc(n int) (device.Buffer, error) {
	if err := d.checkSafe("Alloc"); err != nil {
		return device.Buffer{}, err
	}
	if n <= 0 {
		return device.Buffer{}, d.err("Alloc", device.ErrMisuse, "size must be positive, got %d elements", n)
	}
	bytes := int64(n) * 4
	d.mu.Lock()
	if d.stats.DeviceLimit > 0 && d.stats.DeviceInUse+bytes > d.stats.DeviceLimit {
		inUse := d.stats.DeviceInUse
		d.mu.Unlock()
		return device.Buffer{}, d.err("Alloc", device.ErrOutOfMemory, "%d bytes requested, %d of %d in use", bytes, inUse, d.stats.DeviceLimit)
	}
	d.stats.DeviceInUse += bytes
	d.stats.DevicePeak = max(d.stats.DevicePeak, d.stats.DeviceInUse)
	d.stats.Allocs++
	d.mu.Unlock()
	data := make([]float32, n)
	nan := float32FromBits(0x7fc00000)
	for i := range data {
		data[i] = nan
	}
	return device.NewBuffer(&allocation{dev: d, data: data}), nil
}

// Free releases device memory without waiting for the device: the CPU
// device never hands freed memory out again, so work queued before the
// Free reads and writes it as it would have (the CUDA backend keeps a freed
// block aside until such work has run).
func (d *Device) Free(b device.Buffer) error {
	if err := d.checkSafe("Free"); err != nil {
		return err
	}
	a, err := d.own("Free", b.Allocation(), false)
	if err != nil {
		return err
	}
	if b.Offset() != 0 || b.Len() != a.Len() {
		return d.err("Free", device.ErrMisuse, "Free needs the whole buffer returned by Alloc, not a slice")
	}
	if err := a.markFreed("Free"); err != nil {
		return err
	}
	d.mu.Lock()
	d.stats.DeviceInUse -= int64(a.Len()) * 4
	d.mu.Unlock()
	return nil
}

// AllocHost returns pinned host memory, zeroed.
func (d *Device) AllocHost(n int) (device.HostBuffer, error) {
	if err := d.checkSafe("AllocHost"); err != nil {
		return device.HostBuffer{}, err
	}
	if n <= 0 {
		return device.HostBuffer{}, d.err("AllocHost", device.ErrMisuse, "size must be positive, got %d elements", n)
	}
	a := &allocation{dev: d, data: make([]float32, n), host: true}
	d.mu.Lock()
	d.stats.HostPinned += int64(n) * 4
	d.stats.HostAllocs++
	d.hosts++
	d.mu.Unlock()
	return device.NewHostBuffer(a, a.data), nil
}

// FreeHost releases pinned host memory.
func (d *Device) FreeHost(h device.HostBuffer) error {
	if err := d.checkSafe("FreeHost"); err != nil {
		return err
	}
	a, err := d.own("FreeHost", h.Allocation(), true)
	if err != nil {
		return err
	}
	if err := a.markFreed("FreeHost"); err != nil {
		return err
	}
	d.drain()
	d.mu.Lock()
	d.stats.HostPinned -= int64(a.Len()) * 4
	d.hosts--
	d.mu.Unlock()
	return nil
}

// own checks that an allocation belongs to this device, is of the right
// kind and is not freed.
func (d *Device) own(op string, x device.Allocation, host bool) (*allocation, error) {
	a, ok := x.(*allocation)
	if !ok || a.dev != d {
		return nil, d.err(op, device.ErrMisuse, "buffer was not allocated by this device")
	}
	if a.host != host {
		kind := map[bool]string{true: "pinned host", false: "device"}
		return nil, d.err(op, device.ErrMisuse, "%s memory given where %s memory is needed", kind[a.host], kind[host])
	}
	if a.isFreed() {
		return nil, d.err(op, device.ErrClosed, "buffer was freed")
	}
	return a, nil
}

// view resolves a device Buffer to its memory.
func (d *Device) view(op string, b device.Buffer) ([]float32, error) {
	if b.IsZero() {
		return nil, d.err(op, device.ErrMisuse, "zero Buffer")
	}
	a, err := d.own(op, b.Allocation(), false)
	if err != nil {
		return nil, err
	}
	return a.data[b.Offset() : b.Offset()+b.Len() : b.Offset()+b.Len()], nil
}

// Upload copies pageable memory to the device once the device is idle.
func (d *Device) Upload(dst device.Buffer, src []float32) error {
	if err := d.checkSafe("Upload"); err != nil {
		return err
	}
	v, err := d.view("Upload", dst)
	if err != nil {
		return err
	}
	if len(src) != len(v) {
		return d.err("Upload", device.ErrMisuse, "source has %d elements, destination %d", len(src), len(v))
	}
	d.drain()
	copy(v, src)
	return nil
}

// Download copies device memory to pageable memory once the device is idle.
func (d *Device) Download(dst []float32, src device.Buffer) error {
	if err := d.checkSafe("Download"); err != nil {
		return err
	}
	v, err := d.view("Download", src)
	if err != nil {
		return err
	}
	if len(dst) != len(v) {
		return d.err("Download", device.ErrMisuse, "destination has %d elements, source %d", len(dst), len(v))
	}
	d.drain()
	copy(dst, v)
	return nil
}

// NewStream starts a non-blocking stream.
func (d *Device) NewStream() (device.Stream, error) {
	s, ok := d.startStream(false)
	if !ok {
		return nil, d.err("NewStream", device.ErrClosed, "device closed")
	}
	return s, nil
}

// DefaultStream is the legacy default stream.
func (d *Device) DefaultStream() device.Stream { return d.legacy }

// Synchronize waits until every stream is idle.
func (d *Device) Synchronize() error {
	if err := d.checkSafe("Synchronize"); err != nil {
		return err
	}
	d.drain()
	return nil
}

// drain waits for every stream's queued work.
func (d *Device) drain() {
	d.mu.Lock()
	ss := make([]*stream, 0, len(d.streams))
	for s := range d.streams {
		ss = append(ss, s)
	}
	d.mu.Unlock()
	for _, s := range ss {
		s.waitIdle()
	}
}

// MemoryStats reports memory use.
func (d *Device) MemoryStats() device.MemoryStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Close stops every stream after its queued work and releases memory.
// While pinned host buffers are allocated it does nothing and fails with
// ErrMisuse naming how many, as the CUDA backend does (see device.Device).
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	if d.hosts > 0 {
		n, bytes := d.hosts, d.stats.HostPinned
		d.mu.Unlock()
		return device.HostBuffersLive(d.Name(), n, bytes)
	}
	d.closed = true
	ss := make([]*stream, 0, len(d.streams))
	for s := range d.streams {
		ss = append(ss, s)
	}
	d.mu.Unlock()
	for _, s := range ss {
		s.stop()
	}
	d.wg.Wait()
	d.helpers.stop()
	return nil
}
