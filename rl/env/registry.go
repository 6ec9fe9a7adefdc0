package env

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tolaria-ml/tolaria/internal/field"
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
		{"last_move", 0, 0, 1, "1 adds each agent's last action and whether it was blocked to its observation"},
	}
}

func buildForage(p map[string]int) (func() MultiEnv, error) {
	cfg := ForageConfig{Width: p["width"], Height: p["height"], Agents: p["agents"], Food: p["food"],
		Walls: p["walls"], View: p["view"], MaxSteps: p["max_steps"], LastMove: p["last_move"] == 1}
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
	return Task{}, field.Errorf("env.name", "unknown environment %q; known are %s", name, strings.Join(names, ", "))
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
			return Task{}, nil, field.Errorf(field.Name("env."+k), "%s takes no such parameter; it takes %s", t.Name, strings.Join(keys, ", "))
		}
		p := t.Params[i]
		v, ok := wholeNumber(s.Params[k])
		if !ok || v < p.Min || v > p.Max {
			return Task{}, nil, field.Errorf(field.Name("env."+k), "%v; give a whole number in %d..%d (%s)", s.Params[k], p.Min, p.Max, p.Usage)
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

// ErrWorld is what a world of several agents is refused with where one
// agent's environment is needed (Spec.Env).
var ErrWorld = errors.New("a world of several agents")

// Env is Build for a task of one agent: a maker of its Env, for Vec. A
// world of several agents (Task.Agents) is refused with ErrWorld, even
// when it is given one agent: its agents act together in one actor.
func (s Spec) Env() (Task, Factory, error) {
	t, mk, err := s.Build()
	if err != nil {
		return Task{}, nil, err
	}
	if _, ok := mk().(single); t.Agents || !ok {
		return Task{}, nil, field.Errorf("env.name", "%s is %w: its agents act together in one world, which only a shared actor steps (actor: shared), not an environment of one agent; for one agent's environment choose one of %s",
			t.Name, ErrWorld, strings.Join(singleNames(), ", "))
	}
	return t, func() Env { return mk().(single).e }, nil
}

// singleNames are the tasks of one agent.
func singleNames() []string {
	var names []string
	for _, t := range Tasks() {
		if !t.Agents {
			names = append(names, t.Name)
		}
	}
	return names
}

// ParseSpec reads a configuration's env: value as YAML or JSON decodes it:
// a task's name (env: Acrobot-v1), or a mapping of its name and
// parameters (env: {name: Acrobot-v1, max_steps: 300}). It checks the
// form only; Build checks the name and the parameters.
func ParseSpec(v any) (Spec, error) {
	switch x := v.(type) {
	case string:
		if x == "" {
			return Spec{}, field.Errorf("env.name", "is empty; known are %s", strings.Join(taskNames(), ", "))
		}
		return Spec{Name: x}, nil
	case map[string]any:
		name, given := x["name"]
		text, isText := name.(string)
		switch {
		case !given:
			return Spec{}, field.Errorf("env.name", "is missing: the mapping env: names its environment (env: {name: Acrobot-v1, max_steps: 300}); known are %s", strings.Join(taskNames(), ", "))
		case !isText || text == "":
			return Spec{}, field.Errorf("env.name", "must be an environment's name, got %v; known are %s", name, strings.Join(taskNames(), ", "))
		}
		s := Spec{Name: text}
		for k, p := range x {
			if k == "name" {
				continue
			}
			if s.Params == nil {
				s.Params = map[string]any{}
			}
			s.Params[k] = p
		}
		return s, nil
	}
	return Spec{}, field.Errorf("env", "must be an environment's name (env: Acrobot-v1) or a mapping of its name and parameters (env: {name: Acrobot-v1, max_steps: 300}), got %v", v)
}

func taskNames() []string {
	var names []string
	for _, t := range Tasks() {
		names = append(names, t.Name)
	}
	return names
}

// String is s as a configuration writes it, which ParseSpec reads back: the
// name alone when s has no parameters, otherwise the YAML flow mapping
// {name: ..., key: value, ...} with the parameters in key order.
func (s Spec) String() string {
	if len(s.Params) == 0 {
		return s.Name
	}
	keys := make([]string, 0, len(s.Params))
	for k := range s.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("{name: " + s.Name)
	for _, k := range keys {
		v := fmt.Sprint(s.Params[k])
		if n, ok := wholeNumber(s.Params[k]); ok {
			v = strconv.Itoa(n) // the same text whether YAML (int) or JSON (float64) decoded it
		}
		fmt.Fprintf(&b, ", %s: %s", k, v)
	}
	return b.String() + "}"
}
