package dqn

import (
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/internal/field"
)

// TestConfigSet: a key is set as a file's value is read; an unknown key
// and a value that does not fit are refused by the key.
func TestConfigSet(t *testing.T) {
	c := DefaultConfig()
	for key, v := range map[string]any{"num_agents": 3, "seed": uint64(9), "stop_when_solved": false, "optimizer.lr": "0.25"} {
		if err := c.Set(field.Name(key), v); err != nil {
			t.Fatalf("Set(%s, %v): %v", key, v, err)
		}
	}
	if c.NumAgents != 3 || c.Seed != 9 || c.StopWhenSolved || c.Optimizer.LR != 0.25 {
		t.Errorf("after Set: agents %d seed %d stop_when_solved %v lr %g", c.NumAgents, c.Seed, c.StopWhenSolved, c.Optimizer.LR)
	}
	if err := c.Set("num_agent", 2); err == nil || !strings.HasPrefix(err.Error(), "num_agent: is not a key") {
		t.Errorf("an unknown key: %v", err)
	}
	if err := c.Set("total_steps", 2.5); err == nil || !strings.HasPrefix(err.Error(), "total_steps: must be a whole number") {
		t.Errorf("a fraction for a whole number: %v", err)
	}
}
