package devicetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// testOutOfMemory checks the memory limit: an allocation beyond it fails
// with ErrOutOfMemory and takes nothing, the limit itself can be reached
// exactly, and freeing makes room again.
func testOutOfMemory(t *testing.T, openLimited LimitedOpener) {
	if openLimited == nil {
		t.Skip("the backend offers no device with a memory limit (devicetest.Options.OpenLimited)")
	}
	const limit = 64 << 10 // bytes; a multiple of any pool granule
	e := &env{t: t, dev: openLimited(t, limit)}
	before := e.dev.MemoryStats()
	if before.DeviceLimit != limit {
		t.Fatalf("MemoryStats().DeviceLimit = %d, want the limit the device was opened with, %d", before.DeviceLimit, limit)
	}
	room := int((limit - before.DeviceInUse) / 4) // float32 elements that still fit
	if room < 4 {
		t.Fatalf("a fresh device opened with a %d-byte limit already uses %d bytes", limit, before.DeviceInUse)
	}
	inUse := func(want int64, when string) {
		t.Helper()
		st := e.dev.MemoryStats()
		if st.DeviceInUse != want {
			t.Fatalf("%s: MemoryStats().DeviceInUse = %d, want %d", when, st.DeviceInUse, want)
		}
		if st.DevicePeak > limit {
			t.Fatalf("%s: MemoryStats().DevicePeak = %d, beyond the %d-byte limit", when, st.DevicePeak, limit)
		}
	}
	oom := func(n int, what string) {
		t.Helper()
		b, err := e.dev.Alloc(n)
		if err == nil {
			_ = e.dev.Free(b)
		}
		wantErr(t, err, device.ErrOutOfMemory, what)
	}

	oom(room+1, "one allocation larger than the memory limit")
	inUse(before.DeviceInUse, "after a refused allocation")

	half := room / 2
	a, err := e.dev.Alloc(half)
	e.must(err)
	oom(room-half+1, "an allocation that would take the bytes in use past the limit")
	inUse(before.DeviceInUse+int64(half)*4, "after a refused allocation")

	// The limit can be reached exactly, and not passed by one element.
	b, err := e.dev.Alloc(room - half)
	e.must(err)
	inUse(limit, "with the limit reached")
	oom(1, "Alloc(1) with the limit reached")

	// A refused allocation leaves the device working.
	e.must(e.dev.Upload(b, fillSeq(b.Len(), 1)))
	if got := e.read(b); !slices.Equal(got, fillSeq(b.Len(), 1)) {
		t.Fatal("Upload then Download changed the data after an out-of-memory error")
	}

	// Freeing makes room again: the whole limit in one allocation.
	e.must(e.dev.Free(a))
	e.must(e.dev.Free(b))
	inUse(before.DeviceInUse, "after freeing everything")
	all, err := e.dev.Alloc(room)
	if err != nil {
		t.Fatalf("Alloc of the whole limit after freeing every buffer: %v", err)
	}
	s := e.stream()
	e.must(s.Fill(all, 3))
	e.must(s.Synchronize())
	if got := e.read(all); !slices.Equal(got, constant(room, 3)) {
		t.Fatal("a buffer filling the whole limit does not hold what was written")
	}
	e.must(e.dev.Free(all))
	inUse(before.DeviceInUse, "after freeing the whole-limit buffer")
}

// testClosed checks that every use of a closed device fails with ErrClosed,
// including calls on the streams, events, buffers and executables it made.
func testClosed(t *testing.T, open Opener) {
	e := newEnv(t, open)
	s := e.stream()
	x := e.zeros(8)
	y := e.zeros(8)
	h, err := e.dev.AllocHost(8)
	e.must(err)
	ev, other := e.event(), e.event()
	g := e.captureFill(s, x, 1, false)
	ex, err := e.dev.Instantiate(g)
	e.must(err)
	e.must(s.Record(ev))
	e.must(e.dev.Synchronize())
	e.must(e.dev.FreeHost(h)) // Close refuses while host buffers are allocated
	e.must(e.dev.Close())

	calls := []struct {
		name string
		call func() error
	}{
		{"Alloc", func() error { _, err := e.dev.Alloc(8); return err }},
		{"AllocHost", func() error { _, err := e.dev.AllocHost(8); return err }},
		{"Free", func() error { return e.dev.Free(y) }},
		{"FreeHost", func() error { return e.dev.FreeHost(h) }},
		{"Upload", func() error { return e.dev.Upload(x, make([]float32, 8)) }},
		{"Download", func() error { return e.dev.Download(make([]float32, 8), x) }},
		{"NewStream", func() error { _, err := e.dev.NewStream(); return err }},
		{"NewEvent", func() error { _, err := e.dev.NewEvent(); return err }},
		{"NewTimingEvent", func() error { _, err := e.dev.NewTimingEvent(); return err }},
		{"Device.Synchronize", func() error { return e.dev.Synchronize() }},
		{"Instantiate", func() error { _, err := e.dev.Instantiate(g); return err }},
		{"Elapsed", func() error { _, err := e.dev.Elapsed(ev, ev); return err }},
		{"kernel launch", func() error { return s.Fill(x, 2) }},
		{"kernel launch on the legacy stream", func() error { return e.dev.DefaultStream().Fill(x, 2) }},
		{"Stream.CopyHtoD", func() error { return s.CopyHtoD(x, h) }},
		{"Stream.CopyDtoH", func() error { return s.CopyDtoH(h, x) }},
		{"Stream.CopyDtoD", func() error { return s.CopyDtoD(y, x) }},
		{"Stream.Record", func() error { return s.Record(ev) }},
		{"Stream.Wait on a recorded event", func() error { return s.Wait(ev) }},
		{"Stream.Wait on an event never recorded", func() error { return s.Wait(other) }},
		{"Stream.Synchronize", func() error { return s.Synchronize() }},
		{"Stream.BeginCapture", func() error { return s.BeginCapture(device.CaptureGlobal) }},
		{"Stream.IsCapturing", func() error { _, err := s.IsCapturing(); return err }},
		{"Stream.Launch", func() error { return s.Launch(ex) }},
		{"Event.Query", func() error { _, err := ev.Query(); return err }},
		{"Event.Synchronize", func() error { return ev.Synchronize() }},
		{"Exec.Update", func() error { return ex.Update(g) }},
		{"Exec.Upload", func() error { return ex.Upload(s) }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, device.ErrClosed) {
			t.Errorf("%s after Close: got error %v, want one wrapping %q", c.name, err, device.ErrClosed)
		}
	}
}
