package staging_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/staging"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, cfg cpu.Config) *cpu.Device {
	t.Helper()
	d, err := cpu.Open(cfg)
	must(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// constSource fills batch seq with the value seq+1 everywhere, so a batch
// read half-way through its copy shows two different values.
type constSource struct {
	n     int
	fills atomic.Int64
	delay time.Duration
	// With gate set, a Fill of batch gateFrom or later waits until the
	// gate is closed; atGate counts the fills waiting there.
	gate     chan struct{}
	gateFrom int
	atGate   atomic.Int64
}

func (c *constSource) Fill(seq int, dst []float32) (staging.Meta, error) {
	if seq >= c.n {
		return staging.Meta{}, io.EOF
	}
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
	if c.gate != nil && seq >= c.gateFrom {
		c.atGate.Add(1)
		<-c.gate
	}
	for i := range dst {
		dst[i] = float32(seq + 1)
	}
	c.fills.Add(1)
	return staging.Meta{Valid: 1}, nil
}

const batchLen = 64

// consume runs the compute side of the protocol for every batch: wait for
// the copy, run step on the input buffer, record step-done, release.
func consume(t *testing.T, ctx context.Context, st *staging.Stager, compute device.Stream, step func(k int) error) int {
	t.Helper()
	n := 0
	for {
		b, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			return n
		}
		must(t, err)
		must(t, compute.Wait(b.CopyDone))
		must(t, step(b.K))
		must(t, compute.Record(st.StepDone(b.K)))
		st.Release(b)
		n++
	}
}

// TestReplayNeverReadsAHalfCopiedBatch slows every copy down half-way and
// accumulates each input buffer into a sum through replayed graphs: any
// step that ran before its copy finished leaves the two halves unequal.
func TestReplayNeverReadsAHalfCopiedBatch(t *testing.T) {
	d := open(t, cpu.Config{SlowCopy: 2 * time.Millisecond})
	compute, err := d.NewStream()
	must(t, err)
	defer compute.Destroy()
	const batches = 40
	src := &constSource{n: batches}
	st, err := staging.New(d, staging.Config{BatchLen: batchLen, Slots: 4, Buffers: 2, Loaders: 2, Guard: new(staging.Guard)}, src)
	must(t, err)
	sum, err := d.Alloc(batchLen)
	must(t, err)
	must(t, d.Upload(sum, make([]float32, batchLen)))

	pool := graphs.NewPool()
	defer pool.Close()
	lease, err := pool.Acquire(d, "sum", []int{1})
	must(t, err)
	defer lease.Release()
	must(t, st.GuardCapture("test", func() error {
		for k := range st.Buffers() {
			in := st.Input(k)
			if _, err := lease.Capture(compute, k, func(s device.Stream) error { return s.Axpy(1, in, sum) }); err != nil {
				return err
			}
		}
		return nil
	}))
	st.Start(context.Background())
	n := consume(t, context.Background(), st, compute, func(k int) error { return lease.Replay(compute, k) })
	must(t, compute.Synchronize())
	must(t, st.Stop())
	if n != batches {
		t.Fatalf("consumed %d batches, want %d", n, batches)
	}
	got := make([]float32, batchLen)
	must(t, d.Download(got, sum))
	want := float32(batches * (batches + 1) / 2)
	for i, v := range got {
		if v != want {
			t.Fatalf("sum[%d] = %v, want %v: a step read a half-copied or stale batch", i, v, want)
		}
	}
}

// pinningLoader behaves like the predecessor's pin-memory thread: it pins
// a fresh host buffer for every batch, and synchronises the device.
func pinningLoader(d device.Device, batches int, errs chan<- error) {
	for range batches {
		h, err := d.AllocHost(batchLen)
		if err != nil {
			errs <- err
			return
		}
		_ = d.FreeHost(h)
	}
	errs <- nil
}

// TestSeedFailureReproduced is the failure that started tolaria: a loader
// that pins memory while a global-mode capture is in progress invalidates
// the capture with "operation not permitted when stream is capturing".
func TestSeedFailureReproduced(t *testing.T) {
	for _, name := range []string{"pin memory", "synchronize"} {
		t.Run(name, func(t *testing.T) {
			d := open(t, cpu.Config{})
			compute, err := d.NewStream()
			must(t, err)
			defer compute.Destroy()
			x, err := d.Alloc(8)
			must(t, err)
			must(t, compute.BeginCapture(device.CaptureGlobal))
			must(t, compute.Fill(x, 1))
			errs := make(chan error, 1)
			if name == "pin memory" {
				go pinningLoader(d, 3, errs)
			} else {
				go func() { errs <- d.Synchronize() }()
			}
			loaderErr := <-errs
			if !errors.Is(loaderErr, device.ErrCaptureViolation) {
				t.Fatalf("loader during capture: %v, want ErrCaptureViolation", loaderErr)
			}
			_, err = compute.EndCapture()
			if !errors.Is(err, device.ErrCaptureInvalidated) {
				t.Fatalf("EndCapture: %v, want ErrCaptureInvalidated", err)
			}
		})
	}
}

// TestPrefetchToDeviceBreaksUnguardedCapture shows why prefetch to device
// must be off around capture: a stager that ignores the guard recycles
// slots (an event synchronisation) in the middle of the capture.
func TestPrefetchToDeviceBreaksUnguardedCapture(t *testing.T) {
	d := open(t, cpu.Config{})
	compute, err := d.NewStream()
	must(t, err)
	defer compute.Destroy()
	src := &constSource{n: 1000}
	st, err := staging.New(d, staging.Config{BatchLen: batchLen, Slots: 3, Buffers: 2, Loaders: 1, PrefetchToDevice: true, Guard: new(staging.Guard)}, src)
	must(t, err)
	x, err := d.Alloc(8)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	must(t, compute.BeginCapture(device.CaptureGlobal))
	must(t, compute.Fill(x, 1))
	st.Start(ctx)
	// Consume without the device (the compute stream is capturing): only
	// release tokens, so the stager keeps copying and recycling.
	var stagerErr error
	for stagerErr == nil {
		b, err := st.Next(ctx)
		if err != nil {
			stagerErr = err
			break
		}
		st.Release(b)
	}
	_, endErr := compute.EndCapture()
	cancel()
	st.Stop()
	if !errors.Is(stagerErr, device.ErrCaptureViolation) {
		t.Fatalf("unguarded stager during capture: %v, want ErrCaptureViolation", stagerErr)
	}
	if !errors.Is(endErr, device.ErrCaptureInvalidated) {
		t.Fatalf("EndCapture: %v, want ErrCaptureInvalidated", endErr)
	}
}

// TestGuardedStagingKeepsCaptureValid: tolaria's loaders and stager keep
// running during the capture, the loaders keep filling host slots, the
// stager issues no device call until the capture ends, and the capture
// succeeds.
func TestGuardedStagingKeepsCaptureValid(t *testing.T) {
	d := open(t, cpu.Config{})
	compute, err := d.NewStream()
	must(t, err)
	defer compute.Destroy()
	// Batches from 6 on wait at a gate that opens inside the capture, so
	// the fills counted during the capture cannot have happened before it.
	src := &constSource{n: 200, delay: 100 * time.Microsecond, gate: make(chan struct{}), gateFrom: 6}
	st, err := staging.New(d, staging.Config{BatchLen: batchLen, Slots: 6, Buffers: 2, Loaders: 2, PrefetchToDevice: true, Guard: new(staging.Guard)}, src)
	must(t, err)
	st.Start(context.Background())
	sum, err := d.Alloc(batchLen)
	must(t, err)
	must(t, d.Upload(sum, make([]float32, batchLen)))

	var copiesDuring, fillsDuring int64
	prefetchDuring := true
	// Consume a few batches eagerly so the pipeline is in full flow.
	ctx := context.Background()
	for range 5 {
		b, err := st.Next(ctx)
		must(t, err)
		must(t, compute.Wait(b.CopyDone))
		must(t, compute.Axpy(1, st.Input(b.K), sum))
		must(t, compute.Record(st.StepDone(b.K)))
		st.Release(b)
	}
	// Batch 6 gets a slot once batch 0's copy is recycled, which the
	// stager does before it stages batch 5: wait for its loader to reach
	// the gate.
	deadline := time.Now().Add(5 * time.Second)
	for src.atGate.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if src.atGate.Load() == 0 {
		t.Fatal("no loader reached batch 6 before the capture")
	}
	var g device.Graph
	err = st.GuardCapture("test capture", func() error {
		copies0, fills0 := st.Copies(), src.fills.Load()
		prefetchDuring = st.PrefetchToDevice()
		if err := compute.BeginCapture(device.CaptureGlobal); err != nil {
			return err
		}
		if err := compute.Axpy(1, st.Input(0), sum); err != nil {
			return err
		}
		// Let the loaders go on, and hold the capture open until they
		// have filled more slots.
		gated := src.atGate.Load()
		close(src.gate)
		deadline := time.Now().Add(5 * time.Second)
		for src.fills.Load() < fills0+gated && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		var err error
		g, err = compute.EndCapture()
		copiesDuring, fillsDuring = int64(st.Copies()-copies0), src.fills.Load()-fills0
		return err
	})
	if err != nil {
		t.Fatalf("capture with tolaria's staging running: %v", err)
	}
	if prefetchDuring {
		t.Fatal("prefetch to device was on during a guarded capture")
	}
	if !st.PrefetchToDevice() {
		t.Fatal("prefetch to device stayed off after the guarded capture")
	}
	if fillsDuring < 1 {
		t.Fatalf("loaders filled %d slots during the capture, want them to keep running", fillsDuring)
	}
	if copiesDuring != 0 {
		t.Fatalf("stager issued %d copies during the capture", copiesDuring)
	}
	must(t, g.Destroy())
	// Staging carries on after the capture.
	n := consume(t, ctx, st, compute, func(k int) error { return compute.Axpy(1, st.Input(k), sum) })
	if n+5 != 200 {
		t.Fatalf("consumed %d batches after the capture, want %d", n, 195)
	}
	must(t, compute.Synchronize())
	must(t, st.Stop())
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []staging.Config{
		{BatchLen: 0, Slots: 2, Buffers: 2, Loaders: 1, Guard: new(staging.Guard)},
		{BatchLen: 4, Slots: 1, Buffers: 2, Loaders: 1, Guard: new(staging.Guard)},
		{BatchLen: 4, Slots: 2, Buffers: 0, Loaders: 1, Guard: new(staging.Guard)},
		{BatchLen: 4, Slots: 2, Buffers: 2, Loaders: 0, Guard: new(staging.Guard)},
		{BatchLen: 4, Slots: 2, Buffers: 2, Loaders: 1, StartSeq: -1, Guard: new(staging.Guard)},
		{BatchLen: 4, Slots: 2, Buffers: 2, Loaders: 1},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := (staging.Config{BatchLen: 4, Slots: 2, Buffers: 2, Loaders: 1, Guard: new(staging.Guard)}).Validate(); err != nil {
		t.Errorf("a valid configuration: %v", err)
	}
}

// TestBatchesArriveInOrder: whatever the number of loaders and slots, batch
// n is staged n-th and holds batch n's data.
func TestBatchesArriveInOrder(t *testing.T) {
	for _, c := range []struct{ slots, loaders int }{{2, 1}, {2, 3}, {3, 2}, {4, 3}, {5, 8}} {
		t.Run(fmt.Sprintf("slots=%d,loaders=%d", c.slots, c.loaders), func(t *testing.T) {
			d := open(t, cpu.Config{})
			compute, err := d.NewStream()
			must(t, err)
			defer compute.Destroy()
			const batches = 60
			src := &jitterSource{constSource: constSource{n: batches}}
			st, err := staging.New(d, staging.Config{BatchLen: batchLen, Slots: c.slots, Buffers: 2, Loaders: c.loaders, Guard: new(staging.Guard)}, src)
			must(t, err)
			history, err := d.Alloc(batches * batchLen)
			must(t, err)
			st.Start(context.Background())
			next := 0
			n := consume(t, context.Background(), st, compute, func(k int) error {
				next++
				return compute.CopyDtoD(history.Slice((next-1)*batchLen, batchLen), st.Input(k))
			})
			must(t, compute.Synchronize())
			must(t, st.Stop())
			if n != batches {
				t.Fatalf("staged %d batches, want %d", n, batches)
			}
			got := make([]float32, batches*batchLen)
			must(t, d.Download(got, history))
			for i, v := range got {
				if want := float32(i/batchLen + 1); v != want {
					t.Fatalf("step %d read batch %v", i/batchLen, v-1)
				}
			}
		})
	}
}

// jitterSource fills batches after a pseudo-random pause, so loaders
// finish out of order.
type jitterSource struct{ constSource }

func (j *jitterSource) Fill(seq int, dst []float32) (staging.Meta, error) {
	time.Sleep(time.Duration((seq*7919)%5) * 100 * time.Microsecond)
	return j.constSource.Fill(seq, dst)
}

// TestBatchesUseEveryInputBufferInTurn: batch n is staged into input
// buffer n mod Buffers, so with two buffers or more the copy of the next
// batch overlaps the step that reads the current one.
func TestBatchesUseEveryInputBufferInTurn(t *testing.T) {
	for _, buffers := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("buffers=%d", buffers), func(t *testing.T) {
			d := open(t, cpu.Config{})
			compute, err := d.NewStream()
			must(t, err)
			defer compute.Destroy()
			const batches = 12
			st, err := staging.New(d, staging.Config{BatchLen: batchLen, Slots: 4, Buffers: buffers, Loaders: 2, Guard: new(staging.Guard)}, &constSource{n: batches})
			must(t, err)
			if got := st.Buffers(); got != buffers {
				t.Fatalf("Buffers() = %d, want %d", got, buffers)
			}
			st.Start(context.Background())
			for i := range batches {
				b, err := st.Next(context.Background())
				must(t, err)
				if b.Seq != i || b.K != i%buffers {
					t.Fatalf("batch %d: staged as batch %d in input buffer %d, want input buffer %d", i, b.Seq, b.K, i%buffers)
				}
				must(t, compute.Wait(b.CopyDone))
				must(t, compute.Record(st.StepDone(b.K)))
				st.Release(b)
			}
			if _, err := st.Next(context.Background()); !errors.Is(err, io.EOF) {
				t.Fatalf("Next after the last batch: %v, want io.EOF", err)
			}
			must(t, compute.Synchronize())
			must(t, st.Stop())
		})
	}
}

// TestStopReleasesARunningStager: Stop on a stager in full flow (loaders
// and stager blocked on slots the consumer never frees, under a context
// that is never cancelled) returns, ends every goroutine it started, the
// staging stream's included, and frees its pinned slots and input buffers.
func TestStopReleasesARunningStager(t *testing.T) {
	d := open(t, cpu.Config{})
	compute, err := d.NewStream()
	must(t, err)
	defer compute.Destroy()
	before := d.MemoryStats()
	running := goleak.IgnoreCurrent()
	st, err := staging.New(d, staging.Config{BatchLen: batchLen, Slots: 3, Buffers: 2, Loaders: 2, Guard: new(staging.Guard)}, &constSource{n: 1000})
	must(t, err)
	st.Start(context.Background())
	b, err := st.Next(context.Background())
	must(t, err)
	must(t, compute.Wait(b.CopyDone))
	must(t, compute.Record(st.StepDone(b.K)))
	st.Release(b)
	if _, err := st.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- st.Stop() }()
	select {
	case err := <-stopped:
		must(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Stop of a running stager did not return within 5s")
	}
	after := d.MemoryStats()
	if after.DeviceInUse != before.DeviceInUse || after.HostPinned != before.HostPinned {
		t.Fatalf("after Stop: %d bytes of device memory and %d pinned in use, want %d and %d as before New",
			after.DeviceInUse, after.HostPinned, before.DeviceInUse, before.HostPinned)
	}
	goleak.VerifyNone(t, running)
}
