package sweep

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// TestSweepRefusesLocalSettingsWithSlurm: settings about this machine's
// devices make no sense for tasks Slurm places.
func TestSweepRefusesLocalSettingsWithSlurm(t *testing.T) {
	sw := &Sweep{Trials: []Trial{{Name: "a"}}}
	base := Config{Sweep: sw, Device: "auto", RankBy: "test_accuracy", Launch: launch.Slurm()}
	for f, mod := range map[field.Name]func(*Config){
		"devices":       func(c *Config) { c.GPUs = []int{0} },
		"per_device":    func(c *Config) { c.PerDevice = 2 },
		"device_memory": func(c *Config) { c.DeviceMemory = 1 << 20 },
		"dry_run":       func(c *Config) { c.Launch, c.DryRun = launch.Local(), true },
	} {
		c := base
		mod(&c)
		if err := c.Validate(); !field.Is(err, f) {
			t.Errorf("%s: %v; want a refusal naming it", f, err)
		}
	}
	if err := base.Validate(); err != nil {
		t.Errorf("a Slurm sweep: %v", err)
	}
}

// TestSweepFileLauncher: a sweep file may name its launcher and Slurm
// settings; bad ones are refused with the key at fault.
func TestSweepFileLauncher(t *testing.T) {
	sw, err := parseSweep([]byte("base: {}\ntrials: [{lr: 0.1}]\nlauncher: slurm\nslurm: {partition: gpu, time_limit: '1:00:00', sbatch_args: [--mem=8G]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if sw.Launcher != launch.SlurmName || sw.Slurm.Partition != "gpu" || sw.Slurm.TimeLimit != "1:00:00" || !slices.Equal(sw.Slurm.Args, []string{"--mem=8G"}) {
		t.Fatalf("read %q %+v", sw.Launcher, sw.Slurm)
	}
	for text, f := range map[string]field.Name{
		"base: {}\ntrials: [{lr: 0.1}]\nlauncher: nomad\n":                   "launcher",
		"base: {}\ntrials: [{lr: 0.1}]\nslurm: {sbatch_args: [--array=1]}\n": "sbatch_args",
	} {
		if _, err := parseSweep([]byte(text)); !field.Is(err, f) {
			t.Errorf("%q: %v; want a refusal of %s", text, err, f)
		}
	}
}

// TestSlurmSweepRefusesWhatCannotBeQuoted: a sweep directory or a trial
// name that cannot go into the batch script is refused with the setting
// named, before anything is written.
func TestSlurmSweepRefusesWhatCannotBeQuoted(t *testing.T) {
	tmp := t.TempDir()
	injected := filepath.Join(tmp, "sweep\ntouch INJECTED\n#")
	sw := &Sweep{Trials: []Trial{{Name: "a"}}}
	cfg := Config{Sweep: sw, Device: "auto", RankBy: "test_accuracy", Launch: launch.Slurm(), Dir: injected}
	if err := cfg.Validate(); !field.Is(err, "sweep_dir") {
		t.Errorf("a sweep directory holding a newline: %v, want a refusal of sweep_dir", err)
	}
	cfg.Dir, sw.Trials = filepath.Join(tmp, "sweep"), []Trial{{Name: "a"}, {Name: "lr=0.1,data_dir=x\ntouch INJECTED"}}
	if err := cfg.Validate(); !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), "rename the trial") {
		t.Errorf("a trial name holding a newline: %v, want a refusal", err)
	}
	cfg.Dir, sw.Trials = filepath.Join(tmp, `back\slash`), []Trial{{Name: "a"}}
	if err := cfg.Validate(); !field.Is(err, "sweep_dir") || !strings.Contains(err.Error(), "backslash") {
		t.Errorf("a sweep directory holding a backslash: %v, want a refusal of sweep_dir", err)
	}
}
