package rl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/budget/holder"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
)

// pairBill is one agent's actor and learner's bills on the CPU device.
func pairBill(t *testing.T, cfg dqn.Config) (actor, learner trainer.Bill) {
	t.Helper()
	dev, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if actor, err = dqn.ActorBill(cfg, dev); err != nil {
		t.Fatal(err)
	}
	if learner, err = dqn.LearnerBill(cfg, dev); err != nil {
		t.Fatal(err)
	}
	return actor, learner
}

// budgetEvents are agent i's budget events.
func budgetEvents(t *testing.T, runDir string, i int) []trainer.Event {
	t.Helper()
	f, err := os.Open(filepath.Join(AgentDir(runDir, i), rundir.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []trainer.Event
	if err := telemetry.ReadEvents(f, func(e trainer.Event) {
		if strings.HasPrefix(e.Kind, "budget_") {
			out = append(out, e)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAgentsAskForDeviceMemory: each agent's actor and learner ask the
// budget broker before they allocate, booked as one holder: with
// --device-memory fitting one agent's two halves (with headroom) the two
// agents both finish, each granted its actor's and learner's bills
// together, one after the other; with a limit each half would fit alone
// but not the two together, both halves are refused, naming the agent,
// rather than one held while the other waits.
func TestAgentsAskForDeviceMemory(t *testing.T) {
	req := rlRequest(t)
	req.Config.TotalSteps, req.Config.LearningStarts, req.Config.EvalInterval = 1500, 300, 0
	actor, learner := pairBill(t, req.Config)
	both := actor.DeviceBytes() + learner.DeviceBytes()
	req.DeviceMemory = int64(float64(both)*budget.Headroom) + both/2
	run, err := Prepare(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := run.Run(context.Background())
	if err := errors.Join(err, run.Close()); err != nil {
		t.Fatal(err)
	}
	waited := 0
	for i, a := range sum.Agents {
		if a.State != AgentSucceeded || a.EnvSteps != 1500 {
			t.Errorf("agent %d: %s (%s), %d env steps", i, a.State, a.Reason, a.EnvSteps)
		}
		var grants int
		for _, e := range budgetEvents(t, req.Dir, i) {
			switch e.Kind {
			case holder.EventGrant:
				grants++
				if e.Fields["bytes"] != float64(both) || e.Fields["capacity"] != float64(req.DeviceMemory) {
					t.Errorf("agent %d granted %v of %v bytes, want its actor's and learner's %d of %d", i, e.Fields["bytes"], e.Fields["capacity"], both, req.DeviceMemory)
				}
			case holder.EventWait:
				waited++
			}
		}
		if grants != 1 {
			t.Errorf("agent %d: %d budget grants, want one for its two halves", i, grants)
		}
	}
	t.Logf("an agent's bill: actor %v, learner %v; %d agents waited", actor, learner, waited)

	req = rlRequest(t)
	req.Config.TotalSteps, req.Config.LearningStarts, req.Config.EvalInterval = 1500, 300, 0
	req.ActorRestarts = 0
	req.DeviceMemory = int64(float64(max(actor.DeviceBytes(), learner.DeviceBytes()))*budget.Headroom) + 1
	run, err = Prepare(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum, err = run.Run(context.Background())
	if err := errors.Join(err, run.Close()); err != nil {
		t.Fatal(err)
	}
	for i, a := range sum.Agents {
		if a.State != AgentFailed || !strings.Contains(a.Reason, fmt.Sprintf("rl agent %d needs", i)) || !strings.Contains(a.Reason, "more than device cpu has") {
			t.Errorf("agent %d: %s (%s); want it failed, its budget refused", i, a.State, a.Reason)
		}
	}
}
