package graphs_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/staging"
)

var _ graphs.Guard = (*staging.Guard)(nil)

// rig is what an engine test runs on: a model whose step reads one of two
// static input buffers, the engine over a lease of the pool, and the
// stream the steps run on.
type rig struct {
	d      device.Device
	s      device.Stream
	m      model
	inputs []device.Buffer
	lease  *graphs.Lease
	engine *graphs.Engine
	// breakSlot, when >= 0, makes that slot's step allocate pinned memory
	// whenever it runs under capture, which breaks the capture.
	breakSlot int
	// onStep, when set, is called before each slot's step runs.
	onStep func(k int, s device.Stream)
}

// inputs are two static input buffers with different contents, so a step
// replayed from the wrong slot's executable would show.
func inputs(t *testing.T, d device.Device) []device.Buffer {
	var bs []device.Buffer
	for k := range 2 {
		x := make([]float32, 8*6)
		for i := range x {
			x[i] = float32(math.Sin(float64(i)*0.3 + float64(k)))
		}
		bs = append(bs, upload(t, d, x))
	}
	return bs
}

func newRig(t *testing.T, d device.Device, s device.Stream, pool *graphs.Pool, sig string, maxFailures int, guard graphs.Guard) *rig {
	t.Helper()
	r := &rig{d: d, s: s, m: newModel(t, d, 1), inputs: inputs(t, d), breakSlot: -1}
	var err error
	r.lease, err = pool.Acquire(d, sig, sizes)
	must(t, err)
	t.Cleanup(func() { _ = r.lease.Release() })
	if guard == nil {
		guard = new(staging.Guard)
	}
	var slots []graphs.Slot
	for k, x := range r.inputs {
		step := model{x: x, w1: r.m.w1, w2: r.m.w2}.step(r.lease.Workspace())
		slots = append(slots, graphs.Slot{ID: k, Step: func(s device.Stream) error {
			if r.onStep != nil {
				r.onStep(k, s)
			}
			if c, _ := s.IsCapturing(); c && r.breakSlot == k {
				h, err := r.d.AllocHost(4) // unsafe inside a capture
				if err == nil {
					_ = r.d.FreeHost(h)
				}
			}
			return step(s)
		}})
	}
	r.engine, err = graphs.NewEngine(graphs.EngineConfig{Lease: r.lease, Guard: guard, Slots: slots, MaxCaptureFailures: maxFailures})
	must(t, err)
	return r
}

// run issues steps n0..n1-1 through the engine, step n on slot n%2, and
// returns their results.
func (r *rig) run(t *testing.T, n0, n1 int) []graphs.Result {
	t.Helper()
	var out []graphs.Result
	for n := n0; n < n1; n++ {
		res, err := r.engine.Run(r.s, n%2)
		must(t, err)
		out = append(out, res)
	}
	return out
}

// eagerReference is the parameters after n steps of a never-captured
// engine, every one of them eager and none a fallback.
func eagerReference(t *testing.T, d device.Device, s device.Stream, n int) []float32 {
	t.Helper()
	pool := graphs.NewPool()
	t.Cleanup(func() { _ = pool.Close() })
	r := newRig(t, d, s, pool, "reference", 0, nil)
	for i, res := range r.run(t, 0, n) {
		if res != (graphs.Result{}) {
			t.Fatalf("step %d of a never-captured engine: %+v, want eager with no reason", i, res)
		}
	}
	must(t, s.Synchronize())
	return read(t, d, r.m.w2)
}

func newStream(t *testing.T, d device.Device) device.Stream {
	t.Helper()
	s, err := d.NewStream()
	must(t, err)
	t.Cleanup(func() { _ = s.Destroy() })
	return s
}

func TestEngineReplayEqualsEagerBitForBit(t *testing.T) {
	d := open(t)
	s := newStream(t, d)
	const steps, warm = 12, 2
	want := eagerReference(t, d, s, steps)

	pool := graphs.NewPool()
	defer pool.Close()
	r := newRig(t, d, s, pool, "tiny", 0, nil)
	r.run(t, 0, warm)
	if !r.engine.Due(false) {
		t.Fatal("a fresh engine is not due for capture")
	}
	results, err := r.engine.Capture(s)
	must(t, err)
	if len(results) != 2 || results[0].Pooled || results[1].Pooled || results[0].Nodes != 5 {
		t.Fatalf("capture results %+v, want two cold captures of 5 nodes", results)
	}
	if !r.engine.Captured() || r.engine.Due(true) {
		t.Fatal("after a capture the engine is not captured, or still due")
	}
	for i, res := range r.run(t, warm, steps) {
		if !res.Replayed || res.Reason != "" || res.ReplayErr != nil {
			t.Fatalf("step %d after capture: %+v, want replayed", warm+i, res)
		}
	}
	must(t, s.Synchronize())
	sameBits(t, "w2 after warm-up and replays vs eager", want, read(t, d, r.m.w2))
	if st := pool.Stats(); st.Replays != steps-warm || st.Captures != 2 {
		t.Fatalf("pool stats %+v, want %d replays and 2 captures", st, steps-warm)
	}
}

// launchFailing is a stream whose launch number failAt (counting from 1)
// fails.
type launchFailing struct {
	device.Stream
	launches, failAt int
}

var errLaunch = errors.New("launch refused by the test")

func (s *launchFailing) Launch(x device.Exec) error {
	s.launches++
	if s.launches == s.failAt {
		return errLaunch
	}
	return s.Stream.Launch(x)
}

// TestEngineReplayFailureFallsBack: a failed launch discards that slot's
// executable, runs the step eagerly with ReasonDeviceError and the launch
// error, and every step until the next capture is eager with the same
// reason; the next capture updates the other slot's executable and
// instantiates the discarded one. The parameters end as an eager run's.
func TestEngineReplayFailureFallsBack(t *testing.T) {
	d := open(t)
	s := newStream(t, d)
	const steps = 14
	want := eagerReference(t, d, s, steps)

	pool := graphs.NewPool()
	defer pool.Close()
	ls := &launchFailing{Stream: s, failAt: 3} // step 3, on slot 1
	r := newRig(t, d, ls, pool, "tiny", 0, nil)
	r.run(t, 0, 1)
	_, err := r.engine.Capture(ls)
	must(t, err)
	got := r.run(t, 1, 8)
	for i, res := range got[:2] {
		if !res.Replayed {
			t.Fatalf("step %d: %+v, want replayed", i+1, res)
		}
	}
	if res := got[2]; res.Replayed || res.Reason != graphs.ReasonDeviceError || !errors.Is(res.ReplayErr, errLaunch) {
		t.Fatalf("step with the failed launch: %+v, want eager with reason device_error and the launch error", res)
	}
	for i, res := range got[3:] {
		if res.Replayed || res.Reason != graphs.ReasonDeviceError || res.ReplayErr != nil {
			t.Fatalf("step %d after the failure: %+v, want eager with reason device_error", i+4, res)
		}
	}
	if r.engine.Captured() || r.engine.Replays(0) || r.engine.Replays(1) || !r.engine.Due(false) {
		t.Fatal("after a failed replay the engine still replays, or is not due for capture")
	}
	if r.lease.Ready(1) || !r.lease.Ready(0) {
		t.Fatal("the failed slot's executable was kept, or the other slot's was discarded")
	}
	results, err := r.engine.Capture(ls)
	must(t, err)
	if !results[0].Pooled || results[1].Pooled {
		t.Fatalf("recapture %+v: want slot 0 updated in place and slot 1 instantiated afresh", results)
	}
	for i, res := range r.run(t, 8, steps) {
		if !res.Replayed {
			t.Fatalf("step %d after the recapture: %+v, want replayed", i+8, res)
		}
	}
	must(t, s.Synchronize())
	sameBits(t, "w2 after a failed replay vs eager", want, read(t, d, r.m.w2))
	if r.engine.CaptureFailures() != 0 {
		t.Fatalf("a failed replay counted %d capture failures", r.engine.CaptureFailures())
	}
}

// TestEngineCaptureFailure: a capture that fails on one slot leaves the
// engine uncaptured (no slot replays, although the first slot's capture
// succeeded), counts the failure, and every step runs eagerly with
// ReasonCaptureFailed; retries are due only at a retry point and stop
// after MaxCaptureFailures.
func TestEngineCaptureFailure(t *testing.T) {
	d := open(t)
	s := newStream(t, d)
	const steps = 10
	want := eagerReference(t, d, s, steps)

	pool := graphs.NewPool()
	defer pool.Close()
	r := newRig(t, d, s, pool, "tiny", 2, nil)
	r.breakSlot = 1
	r.run(t, 0, 2)
	_, err := r.engine.Capture(s)
	var ce *graphs.CaptureError
	if !errors.As(err, &ce) || !errors.Is(err, device.ErrCaptureInvalidated) {
		t.Fatalf("capture with an allocation inside slot 1's step: %v, want a CaptureError wrapping the invalidation", err)
	}
	if !r.lease.Ready(0) || r.engine.Replays(0) {
		t.Fatal("slot 0 was captured before slot 1 failed, yet the engine replays it or it has no executable")
	}
	if r.engine.CaptureFailures() != 1 || r.engine.Captured() {
		t.Fatalf("%d failures, captured %v; want 1 and false", r.engine.CaptureFailures(), r.engine.Captured())
	}
	for i, res := range r.run(t, 2, 6) {
		if res.Replayed || res.Reason != graphs.ReasonCaptureFailed || res.ReplayErr != nil {
			t.Fatalf("step %d after the failed capture: %+v, want eager with reason capture_failed", i+2, res)
		}
	}
	if r.engine.Due(false) || !r.engine.Due(true) {
		t.Fatal("after one failure (of at most 2) a retry should be due at a retry point only")
	}
	_, err = r.engine.Capture(s)
	if !errors.As(err, &ce) {
		t.Fatalf("second capture: %v, want a CaptureError", err)
	}
	if r.engine.Due(true) {
		t.Fatal("a retry is due after MaxCaptureFailures failures")
	}
	for i, res := range r.run(t, 6, steps) {
		if res.Replayed || res.Reason != graphs.ReasonCaptureFailed {
			t.Fatalf("step %d: %+v, want eager with reason capture_failed", i+6, res)
		}
	}
	must(t, s.Synchronize())
	sameBits(t, "w2 after failed captures vs eager", want, read(t, d, r.m.w2))
}

// TestEngineCaptureRetriesWithoutLimit: with MaxCaptureFailures 0 a retry
// stays due after any number of failures, and a later capture that works
// makes the steps replay with no reason.
func TestEngineCaptureRetriesWithoutLimit(t *testing.T) {
	d := open(t)
	s := newStream(t, d)
	pool := graphs.NewPool()
	defer pool.Close()
	r := newRig(t, d, s, pool, "tiny", 0, nil)
	r.breakSlot = 0
	r.run(t, 0, 1)
	for range 5 {
		if _, err := r.engine.Capture(s); err == nil {
			t.Fatal("a broken capture succeeded")
		}
	}
	if r.engine.CaptureFailures() != 5 || !r.engine.Due(true) {
		t.Fatalf("%d failures, due %v; want 5 and a retry still due", r.engine.CaptureFailures(), r.engine.Due(true))
	}
	r.breakSlot = -1
	_, err := r.engine.Capture(s)
	must(t, err)
	for i, res := range r.run(t, 1, 5) {
		if !res.Replayed || res.Reason != "" {
			t.Fatalf("step %d after a capture that worked: %+v, want replayed", i+1, res)
		}
	}
}

// syncFailing is a stream whose Synchronize fails.
type syncFailing struct{ device.Stream }

var errSync = errors.New("synchronize refused by the test")

func (syncFailing) Synchronize() error { return errSync }

// TestEngineCaptureWaitsForTheStream: Capture first waits for the stream
// (warm-up must be complete); a failed wait is the device's error, not a
// capture failure, and nothing is captured or counted.
func TestEngineCaptureWaitsForTheStream(t *testing.T) {
	d := open(t)
	s := newStream(t, d)
	pool := graphs.NewPool()
	defer pool.Close()
	guarded := 0
	guard := graphs.GuardFunc(func(capture func() error) error { guarded++; return capture() })
	r := newRig(t, d, s, pool, "tiny", 0, guard)
	_, err := r.engine.Capture(syncFailing{s})
	var ce *graphs.CaptureError
	if !errors.Is(err, errSync) || errors.As(err, &ce) {
		t.Fatalf("capture on a stream whose wait fails: %v, want the wait's error and no CaptureError", err)
	}
	if r.engine.CaptureFailures() != 0 || r.engine.Captured() || guarded != 0 {
		t.Fatalf("after a failed wait: %d failures, captured %v, guard taken %d times; want nothing",
			r.engine.CaptureFailures(), r.engine.Captured(), guarded)
	}
}

// TestEngineCapturesUnderTheGuard: every slot is captured while the guard
// is held, in one hold per Capture, and eager steps never take it.
func TestEngineCapturesUnderTheGuard(t *testing.T) {
	d := open(t)
	s := newStream(t, d)
	pool := graphs.NewPool()
	defer pool.Close()
	inner := new(staging.Guard)
	held, holds := false, 0
	guard := graphs.GuardFunc(func(capture func() error) error {
		holds++
		return inner.Capture(func() error {
			held = true
			defer func() { held = false }()
			return capture()
		})
	})
	r := newRig(t, d, s, pool, "tiny", 0, guard)
	var captured []bool
	r.onStep = func(k int, s device.Stream) {
		if c, _ := s.IsCapturing(); c {
			captured = append(captured, held)
		} else if held {
			t.Errorf("slot %d ran eagerly with the guard held", k)
		}
	}
	r.run(t, 0, 2)
	_, err := r.engine.Capture(s)
	must(t, err)
	r.run(t, 2, 4)
	if holds != 1 || inner.Captures() != 1 {
		t.Fatalf("guard held %d times (staging guard %d) for one Capture, want 1", holds, inner.Captures())
	}
	if len(captured) != 2 || !captured[0] || !captured[1] {
		t.Fatalf("slots captured with the guard held: %v, want both", captured)
	}
}

// TestEngineReasonIsTheLatestFailure: an eager step carries the reason of
// the latest failure: a failed replay after an earlier failed capture
// gives ReasonDeviceError, and a failed capture after a failed replay
// gives ReasonCaptureFailed.
func TestEngineReasonIsTheLatestFailure(t *testing.T) {
	d := open(t)
	s := newStream(t, d)
	pool := graphs.NewPool()
	defer pool.Close()
	ls := &launchFailing{Stream: s, failAt: 1}
	r := newRig(t, d, ls, pool, "tiny", 0, nil)
	r.breakSlot = 0
	if _, err := r.engine.Capture(ls); err == nil {
		t.Fatal("a broken capture succeeded")
	}
	r.breakSlot = -1
	_, err := r.engine.Capture(ls)
	must(t, err)
	reasons := func(want string) {
		t.Helper()
		for i, res := range r.run(t, 0, 2) {
			if res.Replayed || res.Reason != want {
				t.Fatalf("step %d: %+v, want eager with reason %s", i, res, want)
			}
		}
	}
	reasons(graphs.ReasonDeviceError) // the first launch fails
	r.breakSlot = 1
	if _, err := r.engine.Capture(ls); err == nil {
		t.Fatal("a broken capture succeeded")
	}
	reasons(graphs.ReasonCaptureFailed)
}

func TestEngineConfigValidate(t *testing.T) {
	d := open(t)
	pool := graphs.NewPool()
	defer pool.Close()
	lease, err := pool.Acquire(d, "tiny", sizes)
	must(t, err)
	defer lease.Release()
	step := func(device.Stream) error { return nil }
	ok := graphs.EngineConfig{Lease: lease, Guard: new(staging.Guard), Slots: []graphs.Slot{{ID: 0, Step: step}, {ID: 100, Step: step}}}
	tests := []struct {
		name string
		edit func(*graphs.EngineConfig)
		want string // in the error; "" for a valid configuration
	}{
		{"valid", func(*graphs.EngineConfig) {}, ""},
		{"no lease", func(c *graphs.EngineConfig) { c.Lease = nil }, "Lease"},
		{"no guard", func(c *graphs.EngineConfig) { c.Guard = nil }, "Guard"},
		{"no slots", func(c *graphs.EngineConfig) { c.Slots = nil }, "Slots"},
		{"slot without step", func(c *graphs.EngineConfig) { c.Slots = []graphs.Slot{{ID: 3}} }, "slot 3"},
		{"slot twice", func(c *graphs.EngineConfig) { c.Slots = append(c.Slots, graphs.Slot{ID: 100, Step: step}) }, "slot 100 is given twice"},
		{"negative limit", func(c *graphs.EngineConfig) { c.MaxCaptureFailures = -1 }, "MaxCaptureFailures"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			c.Slots = append([]graphs.Slot(nil), ok.Slots...)
			tt.edit(&c)
			_, err := graphs.NewEngine(c)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("NewEngine: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("NewEngine: %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

func TestEngineRunRefusesAnUnknownSlot(t *testing.T) {
	d := open(t)
	s := newStream(t, d)
	pool := graphs.NewPool()
	defer pool.Close()
	r := newRig(t, d, s, pool, "tiny", 0, nil)
	if _, err := r.engine.Run(s, 7); err == nil || !strings.Contains(err.Error(), "no slot 7") {
		t.Fatalf("Run(7) = %v, want an error naming slot 7", err)
	}
	if err := r.engine.RunEager(s, 7); err == nil {
		t.Fatal("RunEager(7) succeeded")
	}
}

// TestEngineRunEagerIsNoFallback: RunEager runs the step eagerly although
// the engine is captured, launching nothing, and interleaves with
// replays bit for bit as an eager run.
func TestEngineRunEagerIsNoFallback(t *testing.T) {
	d := open(t)
	s := newStream(t, d)
	const steps = 10
	want := eagerReference(t, d, s, steps)
	pool := graphs.NewPool()
	defer pool.Close()
	r := newRig(t, d, s, pool, "tiny", 0, nil)
	r.run(t, 0, 1)
	_, err := r.engine.Capture(s)
	must(t, err)
	for n := 1; n < steps; n++ {
		if n%4 == 0 {
			res, err := r.engine.Run(s, n%2)
			must(t, err)
			if !res.Replayed {
				t.Fatalf("step %d: %+v, want replayed", n, res)
			}
			continue
		}
		must(t, r.engine.RunEager(s, n%2))
	}
	must(t, s.Synchronize())
	sameBits(t, "w2 after eager steps and replays vs eager", want, read(t, d, r.m.w2))
	if st := pool.Stats(); st.Replays != 2 || !r.engine.Captured() {
		t.Fatalf("%d replays, captured %v; want 2 (steps 4 and 8) and still captured", st.Replays, r.engine.Captured())
	}
}
