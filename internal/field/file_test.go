package field

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var testSchema = Schema{
	Keys: []Name{"seed", "optimizer.kind", "optimizer.lr", "model.hidden", "model.layers"},
	Flat: map[Name]Name{"lr": "optimizer.lr", "optimizer": "optimizer.kind", "hidden": "model.hidden"},
}

func TestSchemaReadsNestedWholeAndFlatKeys(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       []Setting // Key, Written and Value only
	}{
		{"nested", "optimizer: {kind: sgd, lr: 0.5}\nseed: 3\n",
			[]Setting{{Key: "optimizer.kind", Written: "optimizer.kind", Value: "sgd"}, {Key: "optimizer.lr", Written: "optimizer.lr", Value: 0.5}, {Key: "seed", Written: "seed", Value: 3}}},
		{"written whole", "optimizer.lr: 0.5\nmodel.hidden: [4, 2]\n",
			[]Setting{{Key: "optimizer.lr", Written: "optimizer.lr", Value: 0.5}, {Key: "model.hidden", Written: "model.hidden", Value: []any{4, 2}}}},
		{"a leaf's value is taken whole", "model: {layers: [{linear: {out: 2}}]}\n",
			[]Setting{{Key: "model.layers", Written: "model.layers", Value: []any{map[string]any{"linear": map[string]any{"out": 2}}}}}},
		{"flat", "lr: 0.5\noptimizer: adamw\n",
			[]Setting{{Key: "optimizer.lr", Written: "lr", Value: 0.5}, {Key: "optimizer.kind", Written: "optimizer", Value: "adamw"}}},
		{"empty", "", nil},
		{"an empty section", "optimizer:\nseed: 2\n", []Setting{{Key: "seed", Written: "seed", Value: 2}}},
		{"null", "~\n", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := testSchema.Read([]byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				got[i].Node = nil
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
	st, _ := testSchema.Read([]byte("lr: 0.5\n"))
	if !st[0].Deprecated() || !strings.HasPrefix(st[0].Warning(), "lr is deprecated: write optimizer.lr") {
		t.Errorf("the flat lr: deprecated %v, warning %q", st[0].Deprecated(), st[0].Warning())
	}
}

// YAML's merge key gives a mapping's keys from an anchored one, the
// mapping's own taking precedence.
func TestSchemaReadsMergeKeys(t *testing.T) {
	sc := Schema{Keys: []Name{"seed", "optimizer.lr", "optimizer.kind", "trials"}}
	var doc struct {
		Common yaml.Node `yaml:"common"`
		Trial  yaml.Node `yaml:"trial"`
	}
	if err := yaml.Unmarshal([]byte("common: &c {seed: 1, optimizer: {lr: 0.5, kind: sgd}}\ntrial: {<<: *c, seed: 2}\n"), &doc); err != nil {
		t.Fatal(err)
	}
	got, err := sc.Settings(&doc.Trial)
	if err != nil {
		t.Fatal(err)
	}
	values := map[Name]any{}
	for _, s := range got {
		values[s.Key] = s.Value
	}
	if want := map[Name]any{"seed": 2, "optimizer.lr": 0.5, "optimizer.kind": "sgd"}; !reflect.DeepEqual(values, want) {
		t.Errorf("got %v, want %v", values, want)
	}
}

func TestSchemaRefuses(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"sede: 1\n", "unknown key sede"},
		{"optimizer: {lrr: 1}\n", "unknown key optimizer.lrr (optimizer holds kind, lr)"},
		{"model: {lr: 1}\n", "unknown key model.lr (did you mean optimizer.lr?)"},
		{"sede: 1\nmodel: {hiden: [1]}\n", "unknown keys sede (did you mean seed?); model.hiden"},
		{"model-hidden: [1]\n", "unknown key model-hidden (write model_hidden)"},
		{"lr: 1\noptimizer: {lr: 2}\n", "lr and optimizer.lr both set optimizer.lr; give it once"},
		{"seed: 1\nseed: 2\n", "seed: is given twice"},
		{"model: 3\n", "model: must be a mapping"},
		{"[1, 2]\n", "the file: must be a mapping"},
		{"seed: [\n", "is not valid YAML"},
	} {
		_, err := testSchema.Read([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
		if strings.HasPrefix(c.want, "unknown") && !errors.Is(err, ErrUnknownKey) {
			t.Errorf("%q: %v is not ErrUnknownKey", c.yaml, err)
		}
	}
}

func TestRespellKeepsTheChain(t *testing.T) {
	inner := Errorf("optimizer.lr", "must be in (0, 10], got %d; see %s", 50, Name("optimizer.kind"))
	err := Respell(inner, func(n Name) string {
		if n == "optimizer.lr" {
			return "lr"
		}
		return ""
	})
	if got, want := err.Error(), "lr: must be in (0, 10], got 50; see optimizer.kind"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !Is(err, "optimizer.lr") {
		t.Error("the respelled error lost its Error")
	}
	if Respell(nil, nil) != nil {
		t.Error("Respell(nil) is not nil")
	}
}

func TestAssign(t *testing.T) {
	var (
		n     int
		u     uint64
		x     float64
		b     bool
		s     string
		sizes []int
	)
	for _, c := range []struct {
		dst, v, want any
	}{
		{&n, "7", 7}, {&n, 8.0, 8}, {&n, 9, 9}, {&u, "3", uint64(3)}, {&u, 4.0, uint64(4)}, {&x, "0.5", 0.5}, {&x, 2, 2.0},
		{&b, "true", true}, {&s, "adamw", "adamw"}, {&sizes, "256,128", []int{256, 128}}, {&sizes, []any{4, 2}, []int{4, 2}}, {&sizes, "", []int{}},
	} {
		if err := Assign(c.dst, c.v); err != nil {
			t.Errorf("Assign(%T, %#v): %v", c.dst, c.v, err)
			continue
		}
		if got := reflect.ValueOf(c.dst).Elem().Interface(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Assign(%T, %#v) = %#v, want %#v", c.dst, c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		dst, v any
		want   string
	}{
		{&n, 2.5, "must be a whole number, got 2.5"}, {&n, "many", `must be a whole number, got "many"`}, {&n, true, "must be a whole number"},
		{&u, -1, "from 0"}, {&u, 1.5, "must be a whole number, got 1.5"}, {&x, "abc", `must be a number, got "abc"`},
		{&b, "maybe", "must be true or false"}, {&s, []any{1}, "must be one value"},
		{&sizes, []any{16, 8.5}, "must be a whole number, got 8.5"}, {&sizes, "256,x", `must be a whole number, got "x"`},
	} {
		if err := Assign(c.dst, c.v); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "type ") {
			t.Errorf("Assign(%T, %#v): %v, want %q (and no Go type)", c.dst, c.v, err, c.want)
		}
	}
}

// A key written with no value is refused, not taken for its default.
func TestEmptyValueIsRefused(t *testing.T) {
	sc := Schema{Keys: []Name{"schedule.epochs", "optimizer.lr"}}
	for _, text := range []string{"schedule: {epochs: }\n", "schedule:\n  epochs:\n", "optimizer: {lr: ~}\n", "schedule.epochs: null\n"} {
		if _, err := sc.Read([]byte(text)); err == nil || !strings.Contains(err.Error(), "has no value") {
			t.Errorf("%q: %v, want a refusal", text, err)
		}
	}
}

// A key a letter or two off one of the schema's is answered with it.
func TestUnknownKeySuggestsTheNearest(t *testing.T) {
	sc := Schema{Keys: []Name{"schedule.epochs", "num_agents", "optimizer.lr"}}
	for text, want := range map[string]string{
		"epoch: 3\n":             "unknown key epoch (did you mean schedule.epochs?)",
		"num_agent: 2\n":         "unknown key num_agent (did you mean num_agents?)",
		"banana: 1\n":            "unknown key banana",
		"optimiser: {lr: 0.1}\n": "unknown key optimiser (did you mean optimizer?)",
	} {
		_, err := sc.Read([]byte(text))
		if err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
	names := []string{"epochs", "batch-size", "lr"}
	for name, want := range map[string]string{"epoch": "epochs", "batch_siz": "batch-size", "kitten": "", "lr": "lr"} {
		if got := Nearest(name, names); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestOtherCommand: a file whose unknown keys include two of another
// command's own keys, or one when the reader knows none of its keys, is
// named as that command's file, and the refusal is still an unknown key;
// a file with one stray key among known ones is refused key by key.
func TestOtherCommand(t *testing.T) {
	train := func(k string) bool { return k == "model" || k == "optimizer" || k == "seed" }
	for _, c := range []struct {
		top  []string
		want string
	}{
		{[]string{"model", "env", "num_agents"}, "is a file for tolaria rl --config (it has env, num_agents), not for tolaria train --config"},
		{[]string{"trials"}, "is a file for tolaria sweep (it has trials), not for tolaria train --config"},
		{[]string{"model", "trials"}, ""},
		{[]string{"model", "seed"}, ""},
	} {
		if got := OtherCommand(c.top, "tolaria train --config", train); got != c.want {
			t.Errorf("%v: %q, want %q", c.top, got, c.want)
		}
	}
	if got := OtherCommand([]string{"schedule", "data"}, "tolaria train --config", train); got != "" {
		t.Errorf("the reader's own keys named another command: %q", got)
	}
	sc := Schema{Keys: []Name{"model.hidden", "seed"}, Command: "tolaria train --config"}
	_, err := sc.Read([]byte("model: {hidden: 3}\nenv: CartPole-v1\nnum_agents: 2\n"))
	if err == nil || !errors.Is(err, ErrOtherCommand) || !errors.Is(err, ErrUnknownKey) || err.Error() != "is a file for tolaria rl --config (it has env, num_agents), not for tolaria train --config" {
		t.Errorf("Read: %v", err)
	}
	_, err = sc.Read([]byte("model: {hidden: 3}\nenv: CartPole-v1\n"))
	if err == nil || errors.Is(err, ErrOtherCommand) || !strings.Contains(err.Error(), "unknown key env") {
		t.Errorf("one stray key: %v", err)
	}
}
