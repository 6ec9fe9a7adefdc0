package progress

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/rl"
)

// TestRLViewResumedAgent: a resumed agent's first status carries the
// earlier runs' actor restarts; the piped view reports the resume, not a
// restart, and reports a restart once the count goes up after it.
func TestRLViewResumedAgent(t *testing.T) {
	var out bytes.Buffer
	v := NewRL(Streams{Stdout: io.Discard, Stderr: &out}, 1, 0, "")
	v.Update(rl.AgentStatus{Agent: 0, State: rl.AgentRunning, Episodes: 40, MeanReturn: 21.5, ActorRestarts: 2, SolvedAt: -1})
	first := out.String()
	if strings.Contains(first, "actor failed") || !strings.Contains(first, "resumed after 40 episodes") {
		t.Fatalf("first status of a resumed agent printed:\n%s\nwant the resume and no restart", first)
	}
	v.Update(rl.AgentStatus{Agent: 0, State: rl.AgentRunning, Episodes: 41, ActorRestarts: 3, SolvedAt: -1})
	if got := strings.TrimPrefix(out.String(), first); !strings.Contains(got, "actor failed; started again (restart 3)") {
		t.Fatalf("a restart after the resume printed:\n%s\nwant the restart", got)
	}
}
