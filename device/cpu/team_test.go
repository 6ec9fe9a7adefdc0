package cpu

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingTask records how often each of its parts ran, and makes part 1
// of every kernel take d, so that a helper finishes after the stream
// goroutine: while it still spins, and after it has stopped spinning and
// sleeps (d past spinFor).
type countingTask struct {
	ran []atomic.Int32
	d   time.Duration
}

func (c *countingTask) part(i, n int, _ *scratch) {
	if i == 1 && c.d > 0 {
		time.Sleep(c.d)
	}
	c.ran[i].Add(1)
}

// TestTeamRunsEveryPartOnce runs many kernels back to back on teams of 2
// to 4 threads, with a slow part taking from nothing to past spinFor, and
// checks that run returns only after every part has run, each exactly
// once, and leaves no wake-up behind. A lost wake-up hangs it (the test
// binary's timeout fails it); a stream goroutine that returned early sees
// a part not yet run.
func TestTeamRunsEveryPartOnce(t *testing.T) {
	for _, threads := range []int{2, 3, 4} {
		for _, d := range []time.Duration{0, spinEager / 2, spinEager, spinFor - 10*time.Microsecond, spinFor, 2 * spinFor} {
			t.Run(fmt.Sprintf("threads=%d/slow=%v", threads, d), func(t *testing.T) {
				withTeam(threads, func(tm *team) {
					for round := range 200 {
						n := 2 + round%(2*threads)
						c := &countingTask{ran: make([]atomic.Int32, n), d: d}
						tm.run(c, n)
						for i := range c.ran {
							if got := c.ran[i].Load(); got != 1 {
								t.Fatalf("round %d: part %d of %d ran %d times by the time run returned", round, i, n, got)
							}
						}
						// A wake-up left in the channel would end the next
						// kernel's wait before its helpers finish.
						if len(tm.wake) != 0 || tm.state.Load() != 0 {
							t.Fatalf("round %d: after run, %d wake-ups wait in the channel and the state is %#x", round, len(tm.wake), tm.state.Load())
						}
					}
				})
			})
		}
	}
}

// overTask is a kernel that counts its parts and flags any part that runs
// after run has returned.
type overTask struct {
	ran   []atomic.Int32
	over  atomic.Bool
	late  *atomic.Int32
	delay time.Duration
}

func (o *overTask) part(i, n int, _ *scratch) {
	if o.delay > 0 && i%3 == 1 {
		time.Sleep(o.delay)
	}
	if o.over.Load() {
		o.late.Add(1)
	}
	o.ran[i].Add(1)
}

// TestTeamsShareHelpers runs kernels on six streams at once that share
// four threads' helpers, more jobs than the channel holds, with slow parts
// now and then, and checks for every kernel that run returns after each
// of its parts ran exactly once and that no part runs after it returned.
func TestTeamsShareHelpers(t *testing.T) {
	const threads, streams, rounds = 4, 6, 150
	h := startHelpers(threads)
	defer h.stop()
	var late atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan string, streams)
	for s := range streams {
		wg.Go(func() {
			tm := &team{h: h}
			for round := range rounds {
				n := 2 + (round+s)%(3*threads)
				o := &overTask{ran: make([]atomic.Int32, n), late: &late}
				if round%25 == s {
					o.delay = spinFor + 20*time.Microsecond
				}
				tm.run(o, n)
				o.over.Store(true)
				for i := range o.ran {
					if got := o.ran[i].Load(); got != 1 {
						errs <- fmt.Sprintf("stream %d round %d: part %d of %d ran %d times by the time run returned", s, round, i, n, got)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := late.Load(); n != 0 {
		t.Errorf("%d parts ran after their kernel's run returned", n)
	}
}
