package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// reuseSweep is four small trials: three of one model (a, b, d) and one of
// another (c).
const reuseSweep = `
base:
  dataset: synthetic
  synthetic_size: 512
  epochs: 2
  batch_size: 32
  log_every: 1000
  enable_graphs: true
  model: {hidden: [16]}
trials:
  - {name: a, lr: 0.0001}
  - {name: b, lr: 0.003}
  - {name: c, lr: 0.01, model: {hidden: [32, 16]}}
  - {name: d, lr: 0.03}
`

// sweepReusingWorkers runs reuseSweep with the tolaria-worker worker (env
// added), one trial at a time, without and with --reuse-workers, and
// checks: every trial succeeds on device, with the same params_sha256 both
// ways; without reuse no capture is pooled; with it one worker process
// (tolaria-worker serve --keep) serves the four trials, the trials of one
// model one after another, and b and d, each after a trial of its model,
// have every capture pooled.
func sweepReusingWorkers(t *testing.T, env []string, device, worker string) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, reuseSweep)
	sha := map[string]string{}
	for _, reuse := range []bool{false, true} {
		sweepDir := filepath.Join(dir, map[bool]string{false: "apart", true: "kept"}[reuse])
		args := []string{"sweep", file, "--device", device, "--parallel", "1", "--worker", worker, "--sweep-dir", sweepDir}
		if reuse {
			args = append(args, "--reuse-workers")
		}
		r := tolaria(t, dir, env, args...)
		if r.code != 0 {
			t.Fatalf("tolaria %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
		res := readSweepResults(t, sweepDir)
		if res.Counts["succeeded"] != 4 {
			t.Fatalf("reuse %v: counts %v\n%s", reuse, res.Counts, r.stderr)
		}
		for _, row := range res.Trials {
			s := row.Summary
			if !strings.HasPrefix(row.Device, device) || s.Captures == 0 {
				t.Errorf("reuse %v: trial %s on %q with %d captures; want graphs on %s", reuse, row.Name, row.Device, s.Captures, device)
			}
			if !reuse {
				sha[row.Name] = s.ParamsSHA256
				if s.CapturePooled != 0 {
					t.Errorf("trial %s without reuse: %d captures pooled, want none", row.Name, s.CapturePooled)
				}
				continue
			}
			if s.ParamsSHA256 != sha[row.Name] {
				t.Errorf("trial %s: params %s with --reuse-workers, %s without", row.Name, s.ParamsSHA256, sha[row.Name])
			}
			want := map[string]int{"b": s.Captures, "d": s.Captures}[row.Name]
			if s.CapturePooled != want {
				t.Errorf("trial %s with --reuse-workers: %d of %d captures pooled, want %d", row.Name, s.CapturePooled, s.Captures, want)
			}
			log, err := os.ReadFile(filepath.Join(row.RunDir, "worker.log"))
			served := map[string]string{"a": "serve --keep", "b": "kept: request 2", "d": "kept: request 3", "c": "kept: request 4"}[row.Name]
			if err != nil || !strings.Contains(string(log), served) {
				t.Errorf("trial %s: worker.log lacks %q (%v):\n%s", row.Name, served, err, log)
			}
		}
	}
}

// tolaria sweep --reuse-workers on the CPU, with the tolaria-worker binary
// (and on the emulated CUDA driver: TestCUDAWorkerOnTheEmulatedDriver).
func TestSweepReusingWorkers(t *testing.T) {
	sweepReusingWorkers(t, nil, "cpu", filepath.Join(binDir, "tolaria-worker"))
}
