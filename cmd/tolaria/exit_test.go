package main

import (
	"context"
	"errors"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
)

// TestExitCodes: the one mapping from an activity's ending, or an error,
// to the exit status: a refusal of what the user gave is 2 whoever made
// it (a flag check or the coordinator), some failed 3, none 1, a stop 130.
func TestExitCodes(t *testing.T) {
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want int
	}{
		{"flag refusal", live, usagef("--parallel must be at least 1, got 0"), exitUsage},
		{"coordinator refusal", live, refusal.Config(errors.New("no run")), exitUsage},
		{"setup", live, refusal.ErrSetup, exitFailure},
		{"nothing to resume", live, &rundir.Ending{Kind: rundir.Done}, exitOK},
		{"none succeeded", live, &rundir.Ending{Kind: rundir.Failed}, exitFailure},
		{"some failed", live, &rundir.Ending{Kind: rundir.SomeFailed}, exitSomeFailed},
		{"interrupted", stopped, &rundir.Ending{Kind: rundir.Interrupted}, exitInterrupted},
		{"failed on a refusal", live, &rundir.Ending{Kind: rundir.Failed, Err: refusal.Config(errors.New("bad checkpoint"))}, exitUsage},
		// A failure decided before a signal that came during the linger.
		{"failed, then stopped while lingering", stopped, &rundir.Ending{Kind: rundir.Failed, Err: errors.New("worker exited")}, exitFailure},
		{"failed on a refusal, then stopped while lingering", stopped, &rundir.Ending{Kind: rundir.Failed, Err: refusal.Config(errors.New("bad checkpoint"))}, exitUsage},
	} {
		var end *rundir.Ending
		got := exitCode(c.ctx, c.err)
		if errors.As(c.err, &end) {
			got = endCode(c.ctx, end)
		}
		if got != c.want {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
		}
	}
}
