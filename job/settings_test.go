package job

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/internal/field"
)

func TestEveryKeyHasAUsageAndADefault(t *testing.T) {
	d := Default()
	keys := Keys()
	fields := reflect.TypeFor[Spec]().NumField()
	if !TestHooks {
		fields -= len(testOnlyKeys)
	}
	if len(keys) != fields || keys[0] != "device" {
		t.Fatalf("keys %v", keys)
	}
	if slices.Contains(keys, "slow_stage_copy_ms") != TestHooks {
		t.Errorf("keys %v: slow_stage_copy_ms is a key exactly when the build has the test switches (%v)", keys, TestHooks)
	}
	for _, k := range keys {
		if Usage(k) == "" {
			t.Errorf("%s has no usage", k)
		}
		if d.Get(k) == nil {
			t.Errorf("%s has no default", k)
		}
	}
	if Usage("nonsense") != "" || d.Get("nonsense") != nil {
		t.Error("a key that is no setting has a usage or a value")
	}
	if d.Get("model.hidden").([]int)[0] != 256 || d.Get("batch_size") != 64 {
		t.Errorf("Get reads the wrong fields: hidden %v, batch_size %v", d.Get("model.hidden"), d.Get("batch_size"))
	}
}

func TestSetReadsFlagEnvironmentAndFileValues(t *testing.T) {
	var s Spec
	for _, c := range []struct {
		key  field.Name
		v    any
		want any
	}{
		{"batch_size", "32", 32}, {"batch_size", 16.0, 16}, {"batch_size", 8, 8},
		{"lr", "0.5", 0.5}, {"enable_graphs", "true", true}, {"seed", "7", uint64(7)}, {"seed", 9.0, uint64(9)}, {"seed", 3, uint64(3)},
		{"dataset", "synthetic", "synthetic"}, {"model.hidden", "256,128", []int{256, 128}},
		{"model.hidden", "[24]", []int{24}}, {"model.hidden", []any{20, 10}, []int{20, 10}},
		{"model.hidden", "", []int{}}, {"model.loss", "mse", "mse"},
	} {
		if err := s.Set(c.key, c.v); err != nil {
			t.Errorf("Set(%s, %#v): %v", c.key, c.v, err)
			continue
		}
		if got := s.Get(c.key); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Set(%s, %#v) gives %#v, want %#v", c.key, c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		key field.Name
		v   any
	}{{"batch_size", 3.7}, {"batch_size", "many"}, {"batch_size", "2.7"}, {"batch_size", 1e30},
		{"seed", 2.7}, {"seed", "2.7"}, {"seed", -1}, {"seed", "-1"}, {"seed", -1.0}, {"epochs", 2.5}, {"log_every", "1.5"}, {"lr", "abc"}, {"enable_graphs", "maybe"}, {"model.hidden", "256,x"}, {"nonsense", 1}} {
		if err := s.Set(c.key, c.v); !field.Is(err, c.key) {
			t.Errorf("Set(%s, %#v): %v, want an error naming %s", c.key, c.v, err, c.key)
		}
	}
}

func TestConfigFileReadsBack(t *testing.T) {
	s := Default()
	s.Epochs, s.Hidden, s.Loss, s.RunDir = 3, []int{24}, "mse", "runs/x"
	raw, err := s.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ReadConfigFile(path, nil, "run_dir")
	if err != nil {
		t.Fatal(err)
	}
	model, _ := m["model"].(map[string]any)
	if m["epochs"] != 3 || model["loss"] != "mse" || m["run_dir"] != nil {
		t.Fatalf("read back %v", m)
	}
	back := Default()
	for _, k := range Keys() {
		v, ok := m[string(k)]
		if strings.HasPrefix(string(k), "model.") {
			v, ok = model[strings.TrimPrefix(string(k), "model.")]
		}
		if ok {
			if err := back.Set(k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	back.RunDir = s.RunDir
	if !reflect.DeepEqual(back, s) {
		t.Fatalf("read back %+v\nwrote     %+v", back, s)
	}
}

func TestConfigFileRefusesUnknownKeys(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ yaml, want string }{
		{"batch-size: 32\n", "batch-size (write batch_size)"},
		{"epoch: 3\n", "unknown keys epoch"},
		{"model:\n  hiden: [4]\n", "model.hiden"},
	} {
		path := filepath.Join(dir, "c.yaml")
		os.WriteFile(path, []byte(c.yaml), 0o644)
		if _, err := ReadConfigFile(path, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
	path := filepath.Join(dir, "extra.yaml")
	os.WriteFile(path, []byte("metrics_addr: \":9464\"\n"), 0o644)
	if _, err := ReadConfigFile(path, []field.Name{"metrics_addr"}); err != nil {
		t.Fatalf("an extra key: %v", err)
	}
	if _, err := ReadConfigFile(filepath.Join(dir, "missing.yaml"), nil); err == nil {
		t.Fatal("read a file that does not exist")
	}
}
