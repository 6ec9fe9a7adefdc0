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
	if slices.Contains(keys, "staging.slow_copy_ms") != TestHooks {
		t.Errorf("keys %v: staging.slow_copy_ms is a key exactly when the build has the test switches (%v)", keys, TestHooks)
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
	s.Epochs, s.Hidden, s.Loss, s.RunDir, s.LR = 3, []int{24}, "mse", "runs/x", 0.25
	raw, err := s.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"schedule:\n", "    epochs: 3\n", "optimizer:\n", "    lr: 0.25\n", "    kind: adamw\n", "model:\n", "    loss: mse\n", "data:\n", "    dataset: fashion-mnist\n", "graphs:\n", "staging:\n"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("config.yaml lacks %q:\n%s", want, raw)
		}
	}
	m, err := ReadConfigFile(writeFile(t, raw), nil, "run_dir")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Warnings()) > 0 || m.Has("run_dir") {
		t.Fatalf("read back with warnings %v, or with run_dir skipped not dropped", m.Warnings())
	}
	back := Default()
	if err := m.Apply(&back); err != nil {
		t.Fatal(err)
	}
	back.RunDir = s.RunDir
	if !reflect.DeepEqual(back, s) {
		t.Fatalf("read back %+v\nwrote     %+v", back, s)
	}
}

// A configuration file nests its keys in sections, or writes a key's
// path whole; both read to the same spec.
func TestNestedKeysDecode(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		check      func(Spec) bool
	}{
		{"optimizer section", "optimizer: {kind: sgd, lr: 0.05, momentum: 0.8, warmup_steps: 7}\n",
			func(s Spec) bool {
				return s.Optimizer == "sgd" && s.LR == 0.05 && s.Momentum == 0.8 && s.WarmupSteps == 7
			}},
		{"schedule section", "schedule:\n  epochs: 2\n  batch_size: 16\n  log_every: 5\n  checkpoint_every: 9\n",
			func(s Spec) bool {
				return s.Epochs == 2 && s.BatchSize == 16 && s.LogEvery == 5 && s.CheckpointEvery == 9
			}},
		{"data section", "data: {dataset: synthetic, synthetic_size: 200, ragged: drop, loaders: 3, world: 2, rank: 1}\n",
			func(s Spec) bool {
				return s.Dataset == "synthetic" && s.SyntheticSize == 200 && s.Ragged == "drop" && s.Loaders == 3 && s.World == 2 && s.Rank == 1
			}},
		{"graphs and staging", "graphs: {enabled: true, warmup_batches: 3, pool_reuse: false}\nstaging: {slots: 8, prefetch_to_device: true}\n",
			func(s Spec) bool {
				return s.EnableGraphs && s.WarmupBatches == 3 && !s.GraphPoolReuse && s.Slots == 8 && s.PrefetchToDevice
			}},
		{"a path written whole", "optimizer.lr: 0.5\nmodel.hidden: [8]\n",
			func(s Spec) bool { return s.LR == 0.5 && len(s.Hidden) == 1 && s.Hidden[0] == 8 }},
		{"top-level keys", "device: cpu\nseed: 9\ncpu_threads: 2\n",
			func(s Spec) bool { return s.Device == "cpu" && s.Seed == 9 && s.CPUThreads == 2 }},
		{"defaults kept", "model: {activation: relu}\n",
			func(s Spec) bool {
				return s.Activation == "relu" && s.LR == Default().LR && s.Epochs == Default().Epochs
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := ReadConfigFile(writeFile(t, []byte(c.yaml)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if w := st.Warnings(); len(w) > 0 {
				t.Errorf("warnings %v", w)
			}
			s := Default()
			if err := st.Apply(&s); err != nil {
				t.Fatal(err)
			}
			if !c.check(s) {
				t.Errorf("read %+v", s)
			}
			if err := s.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

// The flat keys of earlier releases still read, each with a warning
// naming the key to write.
func TestDeprecatedFlatKeys(t *testing.T) {
	st, err := ReadConfigFile(writeFile(t, []byte("lr: 0.2\noptimizer: sgd\nepochs: 4\nbatch_size: 8\nenable_graphs: true\ndata_dir: /d\nlr_warmup_steps: 3\nmodel: {hidden: [4]}\n")), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := Default()
	if err := st.Apply(&s); err != nil {
		t.Fatal(err)
	}
	if s.LR != 0.2 || s.Optimizer != "sgd" || s.Epochs != 4 || s.BatchSize != 8 || !s.EnableGraphs || s.DataDir != "/d" || s.WarmupSteps != 3 {
		t.Errorf("read %+v", s)
	}
	want := []string{
		"lr is deprecated: write optimizer.lr",
		"optimizer is deprecated: write optimizer.kind",
		"epochs is deprecated: write schedule.epochs",
		"batch_size is deprecated: write schedule.batch_size",
		"enable_graphs is deprecated: write graphs.enabled",
		"data_dir is deprecated: write data.dir",
		"lr_warmup_steps is deprecated: write optimizer.warmup_steps",
	}
	got := st.Warnings()
	if len(got) != len(want) {
		t.Fatalf("warnings %q", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("warning %q, want it to begin %q", got[i], want[i])
		}
	}
}

// Unknown keys are refused by their path as written; a key given both
// flat and nested is refused too.
func TestConfigFileRefusesUnknownKeys(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ yaml, want string }{
		{"batch-size: 32\n", "batch-size (write batch_size)"},
		{"epoch: 3\n", "unknown key epoch (did you mean schedule.epochs?)"},
		{"model:\n  hiden: [4]\n", "unknown key model.hiden (model holds hidden, activation, loss, input, layers)"},
		{"optimizer: {lr: 0.1, lrr: 0.2}\n", "unknown key optimizer.lrr"},
		{"schedule: {lr: 0.1}\n", "unknown key schedule.lr (did you mean optimizer.lr?)"},
		{"optimizer: {kind: sgd}\nsgd: {lr: 1}\n", "unknown key sgd"},
		{"epoch: 3\nmodel: {hiden: [4]}\n", "unknown keys epoch (did you mean schedule.epochs?); model.hiden"},
		{"lr: 0.1\noptimizer: {lr: 0.2}\n", "lr and optimizer.lr both set optimizer.lr"},
		{"optimizer: 3\nschedule: [1]\n", "schedule: must be a mapping"},
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

// A bound's error names the key as the file wrote it: the nested path,
// or the deprecated flat key.
func TestBoundErrorsNameTheKeyAsWritten(t *testing.T) {
	for _, c := range []struct {
		yaml string
		key  field.Name
		want string
	}{
		{"optimizer: {lr: 50}\n", "optimizer.lr", "optimizer.lr: must be in (0, 10], got 50"},
		{"lr: 50\n", "optimizer.lr", "lr: must be in (0, 10], got 50"},
		{"schedule: {epochs: 0}\n", "schedule.epochs", "schedule.epochs: must be in 1..10000"},
		{"epochs: 0\n", "schedule.epochs", "epochs: must be in 1..10000"},
		{"staging: {slots: 1}\n", "staging.slots", "staging.slots: must be in 2..64"},
		{"staging_slots: 1\n", "staging.slots", "staging_slots: must be in 2..64"},
		{"optimizer: {kind: lion}\n", "optimizer.kind", "optimizer.kind: unknown kind \"lion\""},
		{"optimizer: lion\n", "optimizer.kind", "optimizer: unknown kind \"lion\""},
		{"data: {world: 2, rank: 2}\n", "data.rank", "data.rank: must be in 0..1, below data.world (2)"},
		{"world: 2\nrank: 2\n", "data.rank", "rank: must be in 0..1, below world (2)"},
		{"schedule: {epochs: 2.5}\n", "schedule.epochs", "schedule.epochs: must be a whole number, got 2.5"},
		{"epochs: 2.5\n", "schedule.epochs", "epochs: must be a whole number, got 2.5"},
	} {
		st, err := ReadConfigFile(writeFile(t, []byte(c.yaml)), nil)
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		s := Default()
		if err = st.Apply(&s); err == nil {
			err = st.Spell(s.Validate())
		}
		if !field.Is(err, c.key) || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q naming %s", c.yaml, err, c.want, c.key)
		}
	}
}

// The run directory of an earlier release recorded its config.yaml with
// the flat keys: it reads to the spec it recorded.
func TestFlatConfigFileOfAnEarlierRun(t *testing.T) {
	old := `batch_size: 32
clip_norm: 5
data_dir: /usr/share/datasets/fashion-mnist
dataset: synthetic
device: cpu
enable_graphs: true
epochs: 2
graph_pool_reuse: true
log_every: 50
loaders: 2
lr: 0.002
lr_warmup_steps: 200
max_steps: 0
model:
    activation: gelu
    hidden:
        - 16
    loss: cross_entropy
momentum: 0.9
optimizer: adamw
prefetch_to_device: false
ragged: pad
rank: 0
resume: false
run_dir: runs/old
seed: 3
staging_slots: 4
synthetic_size: 256
warmup_batches: 2
weight_decay: 0.0001
world: 1
`
	st, err := ReadConfigFile(writeFile(t, []byte(old)), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := Default()
	if err := st.Apply(&s); err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.BatchSize, want.Dataset, want.Device, want.EnableGraphs, want.Epochs, want.LR = 32, "synthetic", "cpu", true, 2, 0.002
	want.Hidden, want.RunDir, want.Seed, want.SyntheticSize = []int{16}, "runs/old", 3, 256
	if !reflect.DeepEqual(s, want) {
		t.Errorf("read %+v\nwant %+v", s, want)
	}
}
