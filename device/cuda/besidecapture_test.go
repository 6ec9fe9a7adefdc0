package cuda

import (
	"errors"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
)

// besideCaptureElems is the length of every buffer of the scenario.
const besideCaptureElems = 4096

// besideCaptureHooks are what a backend adds to the scenario.
type besideCaptureHooks struct {
	// busy enqueues lasting work on B's stream before B's last replay, so
	// that the blocks B gives back are still in use while A captures.
	busy func(t *testing.T, s device.Stream)
	// afterCapture checks, once A's capture has ended, what became of the
	// blocks B gave back during it (given: their buffers, freed).
	afterCapture func(t *testing.T, given []device.Buffer)
}

// runBesideCapture is one process with two graph users sharing a device
// and a graphs.Pool: A captures its step in global mode while, inside that
// capture, B gives pooled blocks back (destroying an executable and a
// graph that held buffers B had freed) and replays its own executable on
// its own stream. After each of B's calls A's capture must still be valid;
// if one broke it, that call is named. Then A's graph replays to the right
// values, and so does B's.
func runBesideCapture(t *testing.T, d device.Device, hooks besideCaptureHooks) {
	t.Helper()
	const n = besideCaptureElems
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	stream := func() device.Stream {
		s, err := d.NewStream()
		must("NewStream", err)
		t.Cleanup(func() { _ = s.Destroy() })
		return s
	}
	buffer := func(v float32) device.Buffer {
		b, err := d.Alloc(n)
		must("Alloc", err)
		data := make([]float32, n)
		for i := range data {
			data[i] = v
		}
		must("Upload", d.Upload(b, data))
		return b
	}
	sA, sB := stream(), stream()
	xA, xB := buffer(0), buffer(0)
	tmp1, tmp2 := buffer(0), buffer(0)
	pool := graphs.NewPool()
	t.Cleanup(func() { _ = pool.Close() })

	// B: two executables from the pool (slot 1 writes tmp1) and a graph of
	// its own (writes tmp2); it frees tmp1 and tmp2 while they hold them.
	leaseB, err := pool.Acquire(d, "user-b", []int{n})
	must("B: Acquire", err)
	_, err = leaseB.Capture(sB, 0, func(s device.Stream) error {
		ws := leaseB.Workspace()[0]
		return errors.Join(s.Fill(ws, 1), s.Axpy(2, ws, xB))
	})
	must("B: capture slot 0", err)
	_, err = leaseB.Capture(sB, 1, func(s device.Stream) error { return s.Fill(tmp1, 5) })
	must("B: capture slot 1", err)
	gB, err := graphs.Capture(sB, func(s device.Stream) error { return s.Fill(tmp2, 7) })
	must("B: capture a graph", err)
	if hooks.busy != nil {
		hooks.busy(t, sB)
	}
	must("B: replay slot 1", leaseB.Replay(sB, 1))
	must("B: Free tmp1 (held by slot 1)", d.Free(tmp1))
	must("B: Free tmp2 (held by B's graph)", d.Free(tmp2))

	// A captures; inside its capture, B gives blocks back and replays.
	releases := []struct {
		name string
		call func() error
	}{
		{"B's Lease.Discard of slot 1 (Exec.Destroy; its executable held tmp1)", func() error { leaseB.Discard(1); return nil }},
		{"B's Graph.Destroy (the graph held tmp2)", gB.Destroy},
		{"B's Lease.Replay of slot 0 on its own stream", func() error { return leaseB.Replay(sB, 0) }},
	}
	leaseA, err := pool.Acquire(d, "user-a", []int{n})
	must("A: Acquire", err)
	res, err := leaseA.Capture(sA, 0, func(s device.Stream) error {
		if err := s.Fill(xA, 1); err != nil {
			return err
		}
		for _, r := range releases {
			if err := r.call(); err != nil {
				t.Errorf("%s during A's capture: %v", r.name, err)
			}
			// The capture must have survived: the driver still says so,
			// and A's next kernel joins it.
			if on, err := s.IsCapturing(); err != nil || !on {
				t.Fatalf("%s broke A's global-mode capture: IsCapturing = %v, %v", r.name, on, err)
			}
			if err := s.Scale(xA, 2); err != nil {
				t.Fatalf("%s broke A's global-mode capture: the next captured kernel failed: %v", r.name, err)
			}
		}
		return nil
	})
	must("A: capture beside B's releases", err)
	if res.Nodes != 1+len(releases) {
		t.Errorf("A's graph has %d nodes, want %d", res.Nodes, 1+len(releases))
	}
	if hooks.afterCapture != nil {
		hooks.afterCapture(t, []device.Buffer{tmp1, tmp2})
	}
	must("A: replay", leaseA.Replay(sA, 0))
	must("A: Synchronize", sA.Synchronize())
	must("B: Synchronize", sB.Synchronize())
	want := float32(int(1) << len(releases))
	for name, c := range map[string]struct {
		b    device.Buffer
		want float32
	}{"A's output": {xA, want}, "B's output": {xB, 2}} {
		got := make([]float32, n)
		must("Download", d.Download(got, c.b))
		for i, v := range got {
			if v != c.want {
				t.Fatalf("%s[%d] = %v after the replays, want %v", name, i, v, c.want)
			}
		}
	}
	must("A: Release", leaseA.Release())
	must("B: Release", leaseB.Release())
	must("graphs pool: Drop", pool.Drop(d))
	for _, b := range []device.Buffer{xA, xB} {
		must("Free", d.Free(b))
	}
	must("Stream.Destroy", errors.Join(sA.Destroy(), sB.Destroy()))
}

// TestPoolBesideCaptureOnTheCPUDevice runs the scenario on the CPU device,
// whose capture rules are the CUDA driver's (docs/cuda.md): the same calls
// leave a global-mode capture intact there. Its CUDA twin, which also
// checks the pool's fences, is TestPoolBesideCapture.
func TestPoolBesideCaptureOnTheCPUDevice(t *testing.T) {
	d, err := cpu.Open(cpu.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	runBesideCapture(t, d, besideCaptureHooks{})
}
