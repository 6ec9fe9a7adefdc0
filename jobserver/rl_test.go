package jobserver

import (
	"math"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

// TestReplayTallyCarriesReplaysInReports: a half's replays do not go one
// observe message each; a report carries their count and a sample of
// their times, and ObserveReplays gives the coordinator a Replayed for
// every one; other measurements go at once, and flush sends what no
// report carried.
func TestReplayTallyCarriesReplaysInReports(t *testing.T) {
	var sent []trainer.Measurement
	tally := &replayTally{next: trainer.ObserverFunc(func(m trainer.Measurement) { sent = append(sent, m) })}
	tally.Observe(trainer.Captured{Seconds: 0.01})
	for i := range 1000 {
		tally.Observe(trainer.Replayed{Seconds: float64(i) / 1e6})
	}
	tally.Observe(trainer.Replayed{Seconds: math.NaN()})
	if len(sent) != 1 {
		t.Fatalf("sent %v, want only the capture", sent)
	}
	n, seconds := tally.take()
	if n != 1001 || len(seconds) != MaxReplaySamples {
		t.Fatalf("took %d replays with %d times, want 1001 with %d", n, len(seconds), MaxReplaySamples)
	}
	var got []trainer.Replayed
	ObserveReplays(trainer.ObserverFunc(func(m trainer.Measurement) { got = append(got, m.(trainer.Replayed)) }),
		RLProgress{Replays: n, ReplaySeconds: seconds})
	timed := 0
	for _, r := range got {
		if r.Seconds >= 0 {
			timed++
		}
	}
	if len(got) != 1001 || timed != MaxReplaySamples {
		t.Errorf("observed %d replays, %d timed; want 1001, %d timed", len(got), timed, MaxReplaySamples)
	}
	tally.Observe(trainer.Replayed{Seconds: 0.002})
	tally.Observe(trainer.Replayed{Seconds: 0.003})
	tally.flush()
	if len(sent) != 3 || sent[1] != (trainer.Replayed{Seconds: 0.002}) {
		t.Errorf("flush sent %v, want the two replays after the capture", sent)
	}
	if n, _ := tally.take(); n != 0 {
		t.Errorf("%d replays left after flush", n)
	}
}
