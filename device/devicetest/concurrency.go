package devicetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// destroyRounds is how many times testConcurrentDestroy races the Destroys
// against the calls; each round makes fresh handles.
const destroyRounds = 40

// maxCallsPerRound bounds each call's loop in a round, so that the work a
// round enqueues stays small.
const maxCallsPerRound = 2000

// The handles a round destroys, as indexes into its gone flags.
const (
	hStream  = iota // a stream that launches, records, waits and synchronises
	hCapture        // a stream that captures in relaxed mode, over and over
	hEvent
	hGraph
	hExec
	numHandles
)

var handleNames = [numHandles]string{"stream", "capturing stream", "event", "graph", "executable"}

// destroyCall is a call that uses some of a round's handles.
type destroyCall struct {
	name string
	uses []int
	do   func() error
}

// testConcurrentDestroy checks that the device is safe for concurrent use
// when handles are destroyed: Destroy of a stream, an event, a graph and an
// executable races launches, records, waits, updates, uploads,
// instantiations, captures and synchronisations of them on other
// goroutines. Every call either completes as if before the Destroy (nil) or
// fails with ErrClosed; none fails otherwise (a driver call on a freed
// handle answers an invalid-handle error, which is ErrMisuse), and none that
// begins after the Destroy returned succeeds. Run with -race, it also
// catches handle state shared without synchronisation.
func testConcurrentDestroy(t *testing.T, open Opener) {
	e := newEnv(t, open)
	s := e.stream()
	x, y := e.zeros(64), e.zeros(64)
	e.updateRacingLaunch(x, y)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < destroyRounds && !t.Failed(); round++ {
		e.destroyRound(s, x, y, rng)
	}
}

// destroyRound makes a stream, a capturing stream, an event, a graph and an
// executable, starts a goroutine per call of calls that loops until every
// handle is destroyed, and destroys each handle from a goroutine of its own
// after a random delay. Only the victim stream writes x, and nothing runs
// on y (it is only captured), so the work itself shares no memory.
func (e *env) destroyRound(s device.Stream, x, y device.Buffer, rng *rand.Rand) {
	t := e.t
	victim, capturer := e.stream(), e.stream()
	ev := e.event()
	g := e.captureFill(victim, x, 1, false)
	ex, err := e.dev.Instantiate(g)
	e.must(err)

	var gone [numHandles]atomic.Bool
	calls := e.destroyCalls(s, victim, capturer, ev, g, ex, x, y)
	destroys := [numHandles]func() error{
		hStream: victim.Destroy, hCapture: capturer.Destroy, hEvent: ev.Destroy, hGraph: g.Destroy, hExec: ex.Destroy,
	}
	var delays [numHandles]int
	for i := range delays {
		delays[i] = rng.IntN(200)
	}

	start := make(chan struct{})
	var destroyers, callers sync.WaitGroup
	for h, destroy := range destroys {
		destroyers.Add(1)
		go func() {
			defer destroyers.Done()
			<-start
			for range delays[h] {
				runtime.Gosched()
			}
			for {
				err := destroy()
				if h == hCapture && errors.Is(err, device.ErrMisuse) {
					runtime.Gosched() // capturing: Destroy refuses until the capture ends
					continue
				}
				if err != nil {
					t.Errorf("%s.Destroy racing calls on it: %v", handleNames[h], err)
				}
				gone[h].Store(true)
				return
			}
		}()
	}
	for _, c := range calls {
		callers.Add(1)
		go func() {
			defer callers.Done()
			<-start
			// Until one of its handles is destroyed, then once more (that
			// call must fail), or until maxCallsPerRound.
			for range maxCallsPerRound {
				after := ""
				for _, h := range c.uses {
					if gone[h].Load() {
						after = handleNames[h]
					}
				}
				err := c.do()
				switch {
				case err == nil && after != "":
					t.Errorf("%s succeeded after the %s's Destroy returned; want an error wrapping %q", c.name, after, device.ErrClosed)
					return
				case err != nil && !errors.Is(err, device.ErrClosed):
					t.Errorf("%s racing Destroy: %v; want success or an error wrapping %q", c.name, err, device.ErrClosed)
					return
				case after != "":
					return
				}
			}
		}()
	}
	close(start)
	destroyers.Wait()
	callers.Wait()
}

func (e *env) destroyCalls(s, victim, capturer device.Stream, ev device.Event, g device.Graph, ex device.Exec, x, y device.Buffer) []destroyCall {
	return []destroyCall{
		{"Stream.Launch", []int{hStream, hExec}, func() error { return victim.Launch(ex) }},
		{"kernel launch", []int{hStream}, func() error { return victim.Scale(x, 1) }},
		{"Exec.Update", []int{hExec, hGraph}, func() error { return ex.Update(g) }},
		{"Exec.Upload", []int{hExec, hStream}, func() error { return ex.Upload(victim) }},
		{"Instantiate", []int{hGraph}, func() error {
			x2, err := e.dev.Instantiate(g)
			if err != nil {
				return err
			}
			return x2.Destroy()
		}},
		{"Stream.Record", []int{hStream, hEvent}, func() error { return victim.Record(ev) }},
		{"Stream.Record on a live stream", []int{hEvent}, func() error { return s.Record(ev) }},
		{"Stream.Wait", []int{hStream, hEvent}, func() error { return victim.Wait(ev) }},
		{"Stream.Wait on a live stream", []int{hEvent}, func() error { return s.Wait(ev) }},
		{"Stream.Synchronize", []int{hStream}, victim.Synchronize},
		{"Stream.IsCapturing", []int{hStream}, func() error { _, err := victim.IsCapturing(); return err }},
		{"Event.Query", []int{hEvent}, func() error { _, err := ev.Query(); return err }},
		{"Event.Synchronize", []int{hEvent}, ev.Synchronize},
		{"relaxed capture", []int{hCapture}, func() error {
			if err := capturer.BeginCapture(device.CaptureRelaxed); err != nil {
				return err
			}
			err := capturer.Fill(y, 3)
			cg, endErr := capturer.EndCapture()
			if endErr == nil {
				endErr = cg.Destroy()
			}
			return errors.Join(err, endErr)
		}},
	}
}

// testCloseWithLiveHostBuffers checks what Close does while pinned host
// buffers are allocated: callers may still hold their Data() slices, so
// Close releases nothing and fails with ErrMisuse naming how many; the
// device, its streams and the host buffers keep working, and once they are
// freed Close succeeds.
func testCloseWithLiveHostBuffers(t *testing.T, open Opener) {
	e := newEnv(t, open)
	s := e.stream()
	x := e.zeros(16)
	h1, err := e.dev.AllocHost(16)
	e.must(err)
	h2, err := e.dev.AllocHost(16)
	e.must(err)
	copy(h1.Data(), fillSeq(16, 1))

	refused := func(n int) {
		t.Helper()
		err := e.dev.Close()
		wantErr(t, err, device.ErrMisuse, "Close with pinned host buffers allocated")
		if want := fmt.Sprintf("still allocated: %d (", n); err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("Close's error %q does not say how many host buffers are live (%q)", err, want)
		}
	}
	refused(2)
	// Nothing was released: the stream, the device memory and both host
	// buffers still work, and the data written before Close is there.
	e.must(s.CopyHtoD(x, h1))
	e.must(s.CopyDtoH(h2, x))
	e.must(s.Synchronize())
	if !slices.Equal(h2.Data(), fillSeq(16, 1)) {
		t.Fatalf("host buffer after a refused Close holds %v, want %v", h2.Data(), fillSeq(16, 1))
	}
	if got := e.dev.MemoryStats().HostPinned; got != 2*16*4 {
		t.Errorf("MemoryStats().HostPinned after a refused Close = %d, want %d", got, 2*16*4)
	}

	e.must(e.dev.FreeHost(h1))
	refused(1)
	e.must(e.dev.FreeHost(h2))
	e.must(e.dev.Close())
	_, err = e.dev.AllocHost(1)
	wantErr(t, err, device.ErrClosed, "AllocHost after Close")
	wantErr(t, s.Synchronize(), device.ErrClosed, "Stream.Synchronize after Close")
}

// updateRacingLaunch updates an executable between two graphs of the same
// topology while two goroutines launch it: the device serialises the
// driver's calls on one executable (which the driver documents as not
// internally synchronised), so every call succeeds, and the last update
// decides what the last launch writes.
func (e *env) updateRacingLaunch(x, y device.Buffer) {
	const launches = 300
	t := e.t
	s := e.stream()
	gx, gy := e.captureFill(s, x, 4, false), e.captureFill(s, y, 5, false)
	ex, err := e.dev.Instantiate(gx)
	e.must(err)
	var wg sync.WaitGroup
	run := func(what string, call func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range launches {
				if err := call(i); err != nil {
					t.Errorf("%s racing other calls on the executable: %v", what, err)
					return
				}
			}
		}()
	}
	run("Stream.Launch", func(int) error { return s.Launch(ex) })
	run("Stream.Launch", func(int) error { return s.Launch(ex) })
	run("Exec.Update", func(i int) error {
		if i%2 == 0 {
			return ex.Update(gy)
		}
		return ex.Update(gx)
	})
	wg.Wait()
	e.must(ex.Update(gy))
	e.must(s.Launch(ex))
	e.must(s.Synchronize())
	if got := e.read(y); got[0] != 5 {
		t.Errorf("the last launch, after the last Update, wrote %v to its graph's buffer, want 5", got[0])
	}
	for _, err := range []error{ex.Destroy(), gx.Destroy(), gy.Destroy(), s.Destroy()} {
		e.must(err)
	}
}
