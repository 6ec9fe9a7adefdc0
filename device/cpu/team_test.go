package cpu

import (
	"fmt"
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
