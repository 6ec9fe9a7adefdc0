package env

import (
	"strings"
	"testing"
)

// TestTasksBuild: every task builds with its defaults into an environment
// of its name, with the goals the classic-control references set.
func TestTasksBuild(t *testing.T) {
	goals := map[string]Goal{CartPoleName: {475, 100}, AcrobotName: {-100, 100}, MountainCarName: {-110, 100}, ForageName: {}}
	for _, task := range Tasks() {
		got, mk, err := Spec{Name: task.Name}.Build()
		if err != nil {
			t.Fatalf("%s: %v", task.Name, err)
		}
		e := mk()
		if got.Name != task.Name || e.Name() != task.Name || got.Goal != goals[task.Name] || got.Agents != (e.Agents() > 1) {
			t.Errorf("%s: built %s with %d agents, goal %+v", task.Name, e.Name(), e.Agents(), got.Goal)
		}
	}
}

// TestSpecParams: a spec's parameters reach the environment.
func TestSpecParams(t *testing.T) {
	_, mk, err := Spec{Name: AcrobotName, Params: map[string]any{"max_steps": 3}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	a := mk()
	obs, rewards := [][]float32{make([]float32, a.ObsSize())}, make([]float32, 1)
	a.Reset(1, obs)
	for i := 1; i <= 3; i++ {
		if _, trunc, err := a.Step([]int{1}, obs, rewards); err != nil || trunc != (i == 3) {
			t.Fatalf("step %d: truncated %v, %v; want the third step to truncate", i, trunc, err)
		}
	}
	// YAML decodes whole numbers as int, JSON as float64.
	_, mk, err = Spec{Name: ForageName, Params: map[string]any{"agents": 3, "width": float64(9), "walls": 4}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	f := mk().(*Forage)
	if c := f.Config(); c.Agents != 3 || c.Width != 9 || c.Height != 11 || c.Walls != 4 || f.Agents() != 3 {
		t.Fatalf("forage built as %+v", c)
	}
}

// TestSpecRefused: every refusal names the key at fault and what to give.
func TestSpecRefused(t *testing.T) {
	for _, c := range []struct {
		spec Spec
		want []string
	}{
		{Spec{Name: "Pong-v5"}, []string{"env.name", `"Pong-v5"`, "CartPole-v1, Acrobot-v1, MountainCar-v0, Forage"}},
		{Spec{Name: CartPoleName, Params: map[string]any{"gravity": 3}}, []string{"env.gravity", "takes no such parameter", "max_steps"}},
		{Spec{Name: CartPoleName, Params: map[string]any{"max_steps": 0}}, []string{"env.max_steps", "1..1000000"}},
		{Spec{Name: AcrobotName, Params: map[string]any{"max_steps": 2.5}}, []string{"env.max_steps", "2.5", "whole number"}},
		{Spec{Name: MountainCarName, Params: map[string]any{"max_steps": "long"}}, []string{"env.max_steps", "long"}},
		{Spec{Name: ForageName, Params: map[string]any{"view": 17}}, []string{"env.view", "1..16"}},
		{Spec{Name: ForageName, Params: map[string]any{"width": 4, "height": 4, "agents": 3, "food": 2}}, []string{"do not fit"}},
	} {
		_, _, err := c.spec.Build()
		if err == nil {
			t.Errorf("%+v accepted", c.spec)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %q does not say %q", c.spec, err, w)
			}
		}
	}
}
