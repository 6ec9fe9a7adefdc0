package env

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Spec is an environment as a configuration names it, e.g. the YAML
// env: {name: Acrobot-v1, max_steps: 300}: its name and its parameters
// (every other key).
type Spec struct {
	Name   string
	Params map[string]any
}

// Goal is what solves a task: a mean return of at least Return over
// Episodes consecutive episodes. A task with no such goal (a world whose
// agents must beat its scripted baseline) has Episodes 0.
type Goal struct {
	Return   float64
	Episodes int
}

// Param is one parameter a task takes: a whole number in [Min, Max].
type Param struct {
	Key      string
	Default  int
	Min, Max int
	Usage    string
}

// Task is an environment tolaria builds from a Spec.
type Task struct {
	Name   string
	Agents bool // a world of several agents (MultiEnv); otherwise one
	Goal   Goal
	Params []Param
	build  func(p map[string]int) (func() MultiEnv, error)
}

// Tasks are the environments Build knows, by name.
func Tasks() []Task {
	limit := func(d int) Param {
		return Param{Key: "max_steps", Default: d, Min: 1, Max: 1_000_000, Usage: "the step that truncates an episode"}
	}
	return []Task{
		{Name: CartPoleName, Goal: Goal{475, 100}, Params: []Param{limit(CartPoleMaxSteps)},
			build: func(p map[string]int) (func() MultiEnv, error) {
				return func() MultiEnv { e := NewCartPole(); e.limit = p["max_steps"]; return Single(e) }, nil
			}},
		{Name: AcrobotName, Goal: Goal{-100, 100}, Params: []Param{limit(AcrobotMaxSteps)},
			build: func(p map[string]int) (func() MultiEnv, error) {
				return func() MultiEnv { e := NewAcrobot(); e.limit = p["max_steps"]; return Single(e) }, nil
			}},
		{Name: MountainCarName, Goal: Goal{-110, 100}, Params: []Param{limit(MountainCarMaxSteps)},
			build: func(p map[string]int) (func() MultiEnv, error) {
				return func() MultiEnv { e := NewMountainCar(); e.limit = p["max_steps"]; return Single(e) }, nil
			}},
		{Name: ForageName, Agents: true, Params: forageParams(), build: buildForage},
	}
}

func forageParams() []Param {
	d := ForageConfig{}.WithDefaults()
	return []Param{
		{"width", d.Width, 3, 256, "the grid's width, its border walls included"},
		{"height", d.Height, 3, 256, "the grid's height, its border walls included"},
		{"agents", d.Agents, 1, 64, "agents in the world"},
		{"food", d.Food, 1, 65536, "food items on the ground at any time"},
		{"walls", d.Walls, 0, 65536, "wall cells inside the border, placed at random each episode"},
		{"view", d.View, 1, 16, "how many cells an agent sees in each direction"},
		{"max_steps", d.MaxSteps, 1, 1_000_000, "the step that truncates an episode"},
	}
}

func buildForage(p map[string]int) (func() MultiEnv, error) {
	cfg := ForageConfig{Width: p["width"], Height: p["height"], Agents: p["agents"], Food: p["food"],
		Walls: p["walls"], View: p["view"], MaxSteps: p["max_steps"]}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return nil, fmt.Errorf("env: %w", err)
	}
	return func() MultiEnv {
		f, _ := NewForage(cfg)
		return f
	}, nil
}

// Lookup returns the task named name.
func Lookup(name string) (Task, error) {
	tasks := Tasks()
	for _, t := range tasks {
		if t.Name == name {
			return t, nil
		}
	}
	names := make([]string, len(tasks))
	for i, t := range tasks {
		names[i] = t.Name
	}
	return Task{}, fmt.Errorf("env.name: unknown environment %q; known are %s", name, strings.Join(names, ", "))
}

// Build checks s against its task and returns the task and a maker of
// fresh instances. An unknown name, an unknown parameter, or a value that
// is not a whole number in its range is refused with the key named
// (env.name, env.max_steps, ...).
func (s Spec) Build() (Task, func() MultiEnv, error) {
	t, err := Lookup(s.Name)
	if err != nil {
		return Task{}, nil, err
	}
	values := map[string]int{}
	keys := make([]string, 0, len(t.Params))
	for _, p := range t.Params {
		values[p.Key] = p.Default
		keys = append(keys, p.Key)
	}
	given := make([]string, 0, len(s.Params))
	for k := range s.Params {
		given = append(given, k)
	}
	sort.Strings(given)
	for _, k := range given {
		i := slices.IndexFunc(t.Params, func(p Param) bool { return p.Key == k })
		if i < 0 {
			return Task{}, nil, fmt.Errorf("env.%s: %s takes no such parameter; it takes %s", k, t.Name, strings.Join(keys, ", "))
		}
		p := t.Params[i]
		v, ok := wholeNumber(s.Params[k])
		if !ok || v < p.Min || v > p.Max {
			return Task{}, nil, fmt.Errorf("env.%s: %v; give a whole number in %d..%d (%s)", k, s.Params[k], p.Min, p.Max, p.Usage)
		}
		values[k] = v
	}
	mk, err := t.build(values)
	if err != nil {
		return Task{}, nil, err
	}
	return t, mk, nil
}

// wholeNumber reads a YAML or JSON number that is an integer.
func wholeNumber(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int64:
		return int(n), n >= math.MinInt32 && n <= math.MaxInt32
	case uint64:
		return int(n), n <= math.MaxInt32
	case float64:
		return int(n), n == math.Trunc(n) && math.Abs(n) <= math.MaxInt32
	}
	return 0, false
}
