package device

import "fmt"

// Allocation is a backend's handle for one block of memory. Buffer and
// HostBuffer are views into an Allocation.
type Allocation interface {
	// Len is the allocation's size in float32 elements.
	Len() int
}

// Buffer is a view of n float32 elements of device memory starting at
// element off of an allocation. Buffers are values; slicing makes no copy.
// All device data is float32; integer data such as class labels is stored
// as exact float32 values.
type Buffer struct {
	alloc Allocation
	off   int
	n     int
}

// NewBuffer is used by backends to wrap an allocation as a whole.
func NewBuffer(a Allocation) Buffer { return Buffer{alloc: a, n: a.Len()} }

// Allocation returns the backing allocation (nil for the zero Buffer).
func (b Buffer) Allocation() Allocation { return b.alloc }

// Offset is the view's first element within its allocation.
func (b Buffer) Offset() int { return b.off }

// Len is the number of float32 elements in the view.
func (b Buffer) Len() int { return b.n }

// Bytes is the view's size in bytes.
func (b Buffer) Bytes() int64 { return int64(b.n) * 4 }

// IsZero reports whether b is the zero Buffer.
func (b Buffer) IsZero() bool { return b.alloc == nil }

// Slice returns the n elements starting at off. It panics when the range is
// outside the view, like slicing a Go slice.
func (b Buffer) Slice(off, n int) Buffer {
	if off < 0 || n < 0 || off+n > b.n {
		panic(fmt.Sprintf("device: Buffer.Slice(%d, %d) out of range for length %d", off, n, b.n))
	}
	return Buffer{alloc: b.alloc, off: b.off + off, n: n}
}

// HostBuffer is a view of pinned (page-locked) host memory. Only pinned
// memory may be the source or destination of an asynchronous copy.
type HostBuffer struct {
	alloc Allocation
	data  []float32
}

// NewHostBuffer is used by backends to wrap a pinned allocation whose
// memory is data.
func NewHostBuffer(a Allocation, data []float32) HostBuffer {
	return HostBuffer{alloc: a, data: data}
}

// Pageable wraps ordinary Go memory as a HostBuffer that is not pinned.
// Backends treat a copy from it as a synchronous pageable copy, which is
// capture-unsafe; it exists so that code and tests can express exactly the
// mistake the staging ring avoids.
func Pageable(data []float32) HostBuffer {
	return HostBuffer{alloc: pageable(len(data)), data: data}
}

type pageable int

func (p pageable) Len() int { return int(p) }

// IsPageable reports whether h was made by Pageable.
func (h HostBuffer) IsPageable() bool {
	_, ok := h.alloc.(pageable)
	return ok
}

// Allocation returns the backing allocation.
func (h HostBuffer) Allocation() Allocation { return h.alloc }

// Data is the host memory. Reading or writing it while a copy that uses it
// is in flight is a data race, as on a GPU.
func (h HostBuffer) Data() []float32 { return h.data }

// Len is the number of float32 elements.
func (h HostBuffer) Len() int { return len(h.data) }

// IsZero reports whether h is the zero HostBuffer.
func (h HostBuffer) IsZero() bool { return h.alloc == nil }

// Slice returns the n elements starting at off.
func (h HostBuffer) Slice(off, n int) HostBuffer {
	if off < 0 || n < 0 || off+n > len(h.data) {
		panic(fmt.Sprintf("device: HostBuffer.Slice(%d, %d) out of range for length %d", off, n, len(h.data)))
	}
	return HostBuffer{alloc: h.alloc, data: h.data[off : off+n : off+n]}
}

// MemoryStats describes a device's memory use in bytes.
type MemoryStats struct {
	DeviceInUse int64  // bytes of device memory allocated now
	DevicePeak  int64  // high-water mark of DeviceInUse
	DeviceLimit int64  // bytes the device may allocate (0: unlimited)
	HostPinned  int64  // bytes of pinned host memory allocated now
	Allocs      uint64 // device allocations made since the device opened
	HostAllocs  uint64 // pinned host allocations made since the device opened
}

// Granular is implemented by a backend that hands out device memory in
// blocks of a fixed granule (the CUDA pool rounds every Alloc up to one),
// so that a bill written before allocating counts what the device will
// hold, not only what was asked for. A backend without it holds exactly
// the bytes asked for.
type Granular interface {
	// AllocGranule is the block size in bytes every Alloc is rounded up to.
	AllocGranule() int64
}

// AllocBytes is the device memory an Alloc of n float32 elements holds on
// dev: 4n bytes, rounded up to the backend's granule (see Granular).
func AllocBytes(dev Device, n int) int64 {
	bytes := int64(n) * 4
	if g, ok := dev.(Granular); ok {
		if q := g.AllocGranule(); q > 1 {
			bytes = (bytes + q - 1) / q * q
		}
	}
	return bytes
}

// StreamScratch is implemented by a backend whose NewStream allocates
// device memory of its own (the CUDA device: a scratch for reductions
// split over blocks), so that a bill counts it for each stream a run makes.
type StreamScratch interface {
	// StreamScratchBytes is the device memory one NewStream holds until
	// the stream is destroyed.
	StreamScratchBytes() int64
}

// DriverMemory is implemented by a backend whose driver reports the free
// and total memory of the whole device (cuMemGetInfo): what every process
// and the driver itself hold, not only this Device's allocations. A
// budget is kept against these figures on a real GPU.
type DriverMemory interface {
	// DriverMemory returns the device's free and total memory in bytes.
	DriverMemory() (free, total int64, err error)
}

// UsedMemory is how much of dev's memory is in use, and where the figure
// comes from: the driver's ("driver", total minus free, see DriverMemory)
// when the backend reports one, else the device's count of its own live
// allocations ("allocations", MemoryStats.DeviceInUse).
func UsedMemory(dev Device) (bytes int64, source string, err error) {
	if dm, ok := dev.(DriverMemory); ok {
		free, total, err := dm.DriverMemory()
		if err != nil {
			return 0, "driver", err
		}
		return total - free, "driver", nil
	}
	return dev.MemoryStats().DeviceInUse, "allocations", nil
}

// Trimmer is implemented by a backend that keeps freed device memory for
// reuse (the CUDA pool): Trim gives what it keeps back to the driver, so
// that another process can have it. Capture-unsafe.
type Trimmer interface {
	Trim() error
}
