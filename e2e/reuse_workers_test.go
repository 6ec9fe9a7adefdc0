package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/trainer"
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
// have every capture pooled. Between two trials of one model, what the
// kept worker keeps booked (budget_kept, as the worker measured it) is, to
// the byte, what the next trial's bill counts of it: its context and the
// pool's workspace (see checkIdleBookings).
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
		if reuse {
			runDirs := map[string]string{}
			for _, row := range res.Trials {
				runDirs[row.Name] = row.RunDir
			}
			checkIdleBookings(t, device, runDirs)
		}
	}
}

// checkIdleBookings: every trial of reuseSweep ended on its kept worker
// with one budget_kept event, of a figure the worker measured; a (b) and b
// (d) were each followed on that worker by a trial of their model, whose
// bill's context and pool workspace (gradients, activations, workspace)
// are the idle booking to the byte: on the emulated driver that context
// includes the ended trial's freed buffers its pooled executables still
// reference, which the ended trial's bill could not know of. On the CPU,
// which keeps nothing referenced, the booking is budget.IdleBill of the
// trial's own bill.
func checkIdleBookings(t *testing.T, device string, runDirs map[string]string) {
	t.Helper()
	type kept struct {
		Bytes    int64        `json:"bytes"`
		Bill     trainer.Bill `json:"bill"`
		Measured bool         `json:"measured"`
	}
	keptOf, billOf := map[string]kept{}, map[string]trainer.Bill{}
	for name, dir := range runDirs {
		var n int
		for _, e := range readEvents(t, filepath.Join(dir, "events.jsonl")) {
			switch e.Kind {
			case "budget_kept":
				var k kept
				if err := json.Unmarshal(e.Fields, &k); err != nil {
					t.Fatalf("trial %s: budget_kept %s: %v", name, e.Fields, err)
				}
				keptOf[name] = k
				n++
			case "budget_grant":
				var g struct{ Bill trainer.Bill }
				if err := json.Unmarshal(e.Fields, &g); err != nil {
					t.Fatalf("trial %s: budget_grant %s: %v", name, e.Fields, err)
				}
				billOf[name] = g.Bill
			}
		}
		if k := keptOf[name]; n != 1 || !k.Measured || k.Bytes != k.Bill.DeviceBytes() {
			t.Errorf("trial %s: %d budget_kept events, the last %+v; want one, of what the kept worker measured it holds", name, n, k)
		}
		if device == "cpu" {
			if want := budget.IdleBill(billOf[name]); keptOf[name].Bill != want {
				t.Errorf("trial %s on the CPU: idle booking %+v, want budget.IdleBill of its bill %+v", name, keptOf[name].Bill, want)
			}
		}
	}
	for _, pair := range [][2]string{{"a", "b"}, {"b", "d"}} {
		ended, next := pair[0], pair[1]
		nb := billOf[next]
		if want := nb.Context + nb.GraphPoolBytes(); keptOf[ended].Bytes != want {
			t.Errorf("the kept worker idle after trial %s booked %d bytes; trial %s, next on it, bills %d of what it holds (context %d, pool workspace %d)",
				ended, keptOf[ended].Bytes, next, want, nb.Context, nb.GraphPoolBytes())
		}
	}
	if device != "cpu" && billOf["b"].Context == 0 {
		t.Errorf("trial b on %s bills no context after a trial of its model; want the buffers the pooled executables still reference", device)
	}
}

// tolaria sweep --reuse-workers on the CPU, with the tolaria-worker binary
// (and on the emulated CUDA driver: TestCUDAWorkerOnTheEmulatedDriver).
func TestSweepReusingWorkers(t *testing.T) {
	sweepReusingWorkers(t, nil, "cpu", filepath.Join(binDir, "tolaria-worker"))
}
