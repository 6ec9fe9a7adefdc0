package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// TestSharedFlagsMeanTheSameEverywhere: every command that starts workers
// declares --device (auto by default), --worker, --worker-start-timeout
// and --heartbeat-timeout with the same defaults, and refuses a heartbeat
// timeout under the minimum with the same message, exit 2.
func TestSharedFlagsMeanTheSameEverywhere(t *testing.T) {
	proc := process{shared: trainer.NewShared(), started: time.Now()}
	defer proc.shared.Close()
	dir := t.TempDir()
	root := newRoot(context.Background(), proc, io.Discard, io.Discard)
	for _, c := range []struct {
		command string
		args    []string
	}{
		{"train", []string{"--run-dir", filepath.Join(dir, "run")}},
		{"sweep", []string{filepath.Join(dir, "no-sweep.yaml")}},
		{"eval", []string{"--run-dir", dir}},
		{"sample", []string{"--run-dir", dir}},
		{"rl", []string{"--run-dir", filepath.Join(dir, "rl")}},
	} {
		t.Run(c.command, func(t *testing.T) {
			cmd, _, err := root.Find([]string{c.command})
			if err != nil {
				t.Fatal(err)
			}
			for flag, want := range map[string]string{"device": "auto", "worker": "", "worker-start-timeout": worker.DefaultHelloTimeout.String(), "heartbeat-timeout": worker.DefaultHeartbeatTimeout.String()} {
				if f := cmd.Flags().Lookup(flag); f == nil || f.DefValue != want {
					t.Errorf("--%s: %+v, want the default %q", flag, f, want)
				}
			}
			code, _, stderr := runTolaria(t, append([]string{c.command, "--heartbeat-timeout", "10ms"}, c.args...)...)
			if want := "tolaria: invalid configuration: --heartbeat-timeout: 10ms is too short"; code != exitUsage || !strings.HasPrefix(stderr, want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, want)
			}
			code, _, stderr = runTolaria(t, append([]string{c.command, "--device", "tpu"}, c.args...)...)
			if want := `--device: must be auto, cpu or cuda, got "tpu"`; code != exitUsage || !strings.Contains(stderr, want) {
				t.Errorf("--device tpu: exit %d, stderr %q; want exit 2 and %q", code, stderr, want)
			}
		})
	}
}

// TestSpeller: a key is spelled as the failing command's flag, a file's
// key that a flag also sets names both, and a key with no flag keeps its
// name.
func TestSpeller(t *testing.T) {
	proc := process{shared: trainer.NewShared(), started: time.Now()}
	defer proc.shared.Close()
	root := newRoot(context.Background(), proc, io.Discard, io.Discard)
	for _, c := range []struct{ command, key, want string }{
		{"train", "model.hidden", "--hidden"},
		{"train", "heartbeat_timeout", "--heartbeat-timeout"},
		{"sweep", "sbatch_args", "--sbatch-arg"},
		{"sweep", "lr", ""},
		{"sweep", "resume", ""}, // a trial's, not --resume
		{"sweep", "sweep_resume", "--resume"},
		{"sweep", "sweep_dir", "--sweep-dir"},
		{"eval", "run_dir", "--run-dir"},
		{"rl", "num_agents", "--agents (num_agents)"},
		{"rl", "target_update", ""},
	} {
		cmd, _, err := root.Find([]string{c.command})
		if err != nil {
			t.Fatal(err)
		}
		if got := speller(cmd)(field.Name(c.key)); got != c.want {
			t.Errorf("%s: %s spelled %q, want %q", c.command, c.key, got, c.want)
		}
	}
}
