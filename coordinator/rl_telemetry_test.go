package coordinator

import (
	"testing"

	"github.com/tolaria-ml/tolaria/telemetry"
)

// TestRLNamesAgreeWithTelemetry: the stalled-learner alert asks for agents
// in telemetry.RLStateRunning, and the dashboard draws the goal at
// telemetry.RLSolvedReturn; both must be what the coordinator reports.
func TestRLNamesAgreeWithTelemetry(t *testing.T) {
	if AgentRunning != telemetry.RLStateRunning {
		t.Errorf("coordinator.AgentRunning %q, telemetry.RLStateRunning %q", AgentRunning, telemetry.RLStateRunning)
	}
	if SolvedReturn != telemetry.RLSolvedReturn {
		t.Errorf("coordinator.SolvedReturn %v, telemetry.RLSolvedReturn %v", SolvedReturn, telemetry.RLSolvedReturn)
	}
}
