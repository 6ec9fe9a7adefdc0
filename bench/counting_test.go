package bench

import (
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
)

func TestCountingStream(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	x, err := dev.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	h, err := dev.AllocHost(4)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.FreeHost(h) // before Close, which refuses while host buffers are allocated
	ev, err := dev.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	c := NewCountingStream(s)
	for _, err := range []error{c.CopyHtoD(x, h), c.Fill(x, 1), c.Scale(x, 2), c.Axpy(1, x, x), c.CopyDtoH(h, x),
		c.Record(ev), c.Wait(ev), c.Synchronize()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if c.Kernels != 3 || c.Copies != 2 || c.Syncs != 2 || c.Launches != 0 {
		t.Errorf("counted %d kernels, %d copies, %d syncs, %d launches; want 3, 2, 2, 0", c.Kernels, c.Copies, c.Syncs, c.Launches)
	}
	c.Reset()
	if c.Kernels != 0 || c.Copies != 0 || c.Syncs != 0 {
		t.Error("Reset left counts")
	}
	got := make([]float32, 4)
	if err := dev.Download(got, x); err != nil {
		t.Fatal(err)
	}
	if got[0] != 4 { // (1*2)+(1*2): the wrapped stream ran the work
		t.Errorf("x[0] = %g, want 4", got[0])
	}
}

// TestCountingStreamCountsDeviceCopiesAndLaunches: a device-to-device copy
// is a copy and a graph launch a launch.
func TestCountingStreamCountsDeviceCopiesAndLaunches(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	x, err := dev.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	y, err := dev.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	g, err := graphs.Capture(s, func(st device.Stream) error { return st.Fill(x, 1) })
	if err != nil {
		t.Fatal(err)
	}
	exec, err := dev.Instantiate(g)
	_ = g.Destroy()
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Destroy()
	c := NewCountingStream(s)
	for _, err := range []error{c.Launch(exec), c.CopyDtoD(y, x), c.Launch(exec), c.Synchronize()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if c.Copies != 1 || c.Launches != 2 || c.Kernels != 0 {
		t.Errorf("counted %d copies, %d launches, %d kernels; want 1, 2, 0", c.Copies, c.Launches, c.Kernels)
	}
}
