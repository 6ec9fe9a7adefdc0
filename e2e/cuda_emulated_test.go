package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/device/cuda/emulator/emurecord"
	"github.com/tolaria-ml/tolaria/internal/emutest"
)

// emulatedCUDA builds the emulated CUDA driver (device/cuda/emulator) and a
// CUDA worker (go build -tags cuda) into one directory and returns it. It
// needs g++, a C compiler and the CUDA headers; without them it skips, or
// fails when TOLARIA_REQUIRE_EMULATION is set (as make test sets it).
func emulatedCUDA(t *testing.T) string {
	t.Helper()
	dir, _ := emutest.Build(t, repoRoot(), "tolaria on the emulated CUDA driver")
	worker := exec.Command("go", "build", "-tags", "cuda,testhooks", "-o", filepath.Join(dir, "tolaria-worker"), "./cmd/tolaria-worker")
	worker.Dir = repoRoot()
	if out, err := worker.CombinedOutput(); err != nil {
		t.Fatalf("building the CUDA worker: %v\n%s", err, out)
	}
	return dir
}

// cudaTrain are the flags of a short run on the CUDA worker in emu.
func cudaTrain(emu, runDir string, extra ...string) []string {
	return append([]string{"train", "--device", "cuda", "--worker", filepath.Join(emu, "tolaria-worker"), "--enable-graphs",
		"--dataset", "synthetic", "--synthetic-size", "1024", "--epochs", "1", "--hidden", "64", "--batch-size", "32",
		"--log-every", "1000", "--run-dir", runDir, "--metrics-linger", "0"}, extra...)
}

// tolaria with the real CUDA worker on the emulated driver (built once for
// both parts).
func TestCUDAWorkerOnTheEmulatedDriver(t *testing.T) {
	emu := emulatedCUDA(t)
	t.Run("train", func(t *testing.T) { trainOnEmulatedDriver(t, emu) })
	t.Run("faults", func(t *testing.T) { emulatedDriverFaults(t, emu) })
	t.Run("a fault in every entry point", func(t *testing.T) { faultEveryEntryPoint(t, emu) })
	t.Run("sweep", func(t *testing.T) { sweepOnEmulatedDriver(t, emu) })
	t.Run("sweep without a GPU", func(t *testing.T) { sweepWithoutAGPU(t, emu) })
	t.Run("eval", func(t *testing.T) { evalOnEmulatedDriver(t, emu) })
	t.Run("eval over devices", func(t *testing.T) { evalOverEmulatedDevices(t, emu) })
	t.Run("eval budgets", func(t *testing.T) { evalBudgetsOnEmulatedDevices(t, emu) })
	t.Run("sweep over devices", func(t *testing.T) { sweepOverEmulatedDevices(t, emu) })
	t.Run("sweep reusing workers", func(t *testing.T) {
		sweepReusingWorkers(t, []string{"LD_LIBRARY_PATH=" + emu}, "cuda", filepath.Join(emu, "tolaria-worker"))
	})
	t.Run("rl with the GPU gone", func(t *testing.T) { rlWithTheGPUGone(t, emu) })
	t.Run("hung worker", func(t *testing.T) { hungCUDAWorker(t, emu) })
	t.Run("rl", func(t *testing.T) { rlOnEmulatedDriver(t, emu) })
	t.Run("rl lockstep", func(t *testing.T) { rlLockstepOnEmulatedDriver(t, emu) })
	t.Run("sample", func(t *testing.T) { sampleOnEmulatedDriver(t, emu) })
	t.Run("devices", func(t *testing.T) { devicesOnEmulatedDriver(t, emu) })
}

// tolaria sample --device cuda draws its text in a CUDA worker on the
// emulated driver: byte for byte the text of the CPU device in the tolaria
// process for the same seed, graphs on or off, and other text for another
// seed at temperature 1; greedy (--temperature 0) agrees too. The
// coordinator never maps the emulated libcuda, and without a device the
// worker fails, saying so, so the text was drawn on it.
func sampleOnEmulatedDriver(t *testing.T, emu string) {
	dir := t.TempDir()
	run := trainTinyTextModel(t, dir)
	env := []string{"LD_LIBRARY_PATH=" + emu}
	cuda := []string{"--device", "cuda", "--worker", filepath.Join(emu, "tolaria-worker"), "--heartbeat-timeout", "3s"}
	drawn := map[string]string{} // by seed, at temperature 1 on the emulated driver
	for _, c := range []struct {
		seed  string
		extra []string
	}{
		{"7", nil},
		{"8", nil},
		{"7", []string{"--temperature", "0"}},
	} {
		want := sampleTiny(t, dir, nil, run, c.seed, c.extra...)
		for _, graphs := range []string{"--enable-graphs=true", "--enable-graphs=false"} {
			args := append([]string{"sample", "--run-dir", run, "--prompt", "the quick", "--tokens", "50", "--seed", c.seed, graphs}, c.extra...)
			r, w := tolariaWatchingMaps(t, dir, env, append(args, cuda...)...)
			if r.code != 0 {
				t.Fatalf("tolaria sample --device cuda --seed %s %s %v: exit %d\n%s", c.seed, graphs, c.extra, r.code, r.stderr)
			}
			w.requireCoordinatorClean(t)
			if r.stdout != want {
				t.Errorf("--seed %s %s %v: the CUDA worker printed\n%q\nthe CPU device\n%q", c.seed, graphs, c.extra, r.stdout, want)
			}
			if c.extra == nil {
				drawn[c.seed] = r.stdout
			}
		}
	}
	seven, eight := drawn["7"], drawn["8"]
	if seven == eight {
		t.Errorf("seeds 7 and 8 drew the same text at temperature 1 on the emulated driver: %q", seven)
	}
	if want := len("the quick") + 50 + 1; len(seven) != want || !strings.HasPrefix(seven, "the quick") {
		t.Errorf("seed 7 printed %d bytes %q, want the prompt, 50 bytes and a newline (%d)", len(seven), seven, want)
	}
	r := tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu, "CUDAEMU_DEVICES=0"},
		append([]string{"sample", "--run-dir", run, "--tokens", "5"}, cuda...)...)
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "no usable device") || !strings.Contains(r.stderr, "use --device cpu") {
		t.Errorf("tolaria sample --device cuda without a GPU: exit %d, stdout %q; want exit 1 naming the missing device\n%s", r.code, r.stdout, r.stderr)
	}
}

// tolaria rl --device cuda runs each agent's actor and learner in CUDA
// workers on the emulated driver: both capture and replay there (no
// learner step falls back to eager), the agents finish, and the
// coordinator never maps the emulated libcuda.
func rlOnEmulatedDriver(t *testing.T, emu string) {
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	cfg := writeRLConfig(t, dir, "model: {hidden: [32]}\nlearning_starts: 300\nbuffer_capacity: 2000\n")
	// Two emulated GPUs: --devices auto (the default) places agent i on GPU i.
	state := filepath.Join(dir, "state")
	r, w := tolariaWatchingMaps(t, dir, []string{"LD_LIBRARY_PATH=" + emu, "CUDAEMU_DEVICES=2", "CUDAEMU_STATE=" + state}, "rl", "--device", "cuda", "--agents", "2",
		"--total-steps", "1500", "--config", cfg, "--worker", filepath.Join(emu, "tolaria-worker"), "--run-dir", runDir)
	if r.code != 0 {
		t.Fatalf("tolaria rl on the emulated CUDA driver: exit %d\n%s", r.code, r.stderr)
	}
	w.requireCoordinatorClean(t)
	if n := w.workersMappingLibcuda(); n < 4 {
		t.Errorf("%d of the %d children seen mapped the emulated libcuda; want both agents' actors and learners", n, len(w.workers))
	}
	devs := deviceRecords(t, state)
	for _, a := range readRLSummary(t, runDir).Agents {
		if a.State != rl.AgentSucceeded || a.EnvSteps != 1500 || a.LearnerSteps < 1000 || a.Fallbacks != 0 {
			t.Errorf("agent %d: %s (%s), %d env steps, %d learner steps, %d eager fallbacks", a.Agent, a.State, a.Reason, a.EnvSteps, a.LearnerSteps, a.Fallbacks)
		}
		if want := fmt.Sprintf("cuda:%d", a.Agent); a.Device != want {
			t.Errorf("agent %d ran on %q, want %s (agent %% devices)", a.Agent, a.Device, want)
		}
		for _, e := range rlEvents(runDir, a.Agent) {
			if e.Event == "worker" && !strings.HasPrefix(e.Device, "cuda") {
				t.Errorf("agent %d: its %s ran on %q, want a GPU of the emulated driver", a.Agent, e.Role, e.Device)
			}
			// The driver's own records say where each worker opened its context.
			if e.Event == "worker" {
				if got := emurecord.DevicesOf(devs, e.PID); !reflect.DeepEqual(got, []int{a.Agent}) {
					t.Errorf("agent %d: its %s (pid %d) used devices %v by the driver's records, want [%d]", a.Agent, e.Role, e.PID, got, a.Agent)
				}
			}
		}
	}
}

// emulatedSweep is three small trials for the CUDA worker.
const emulatedSweep = `
base:
  dataset: synthetic
  synthetic_size: 1024
  epochs: 2
  batch_size: 32
  log_every: 1000
  enable_graphs: true
  model: {hidden: [32]}
trials:
  - {name: a, lr: 0.001}
  - {name: b, lr: 0.01}
  - {name: c, lr: 0.03}
`

// tolaria sweep --devices 0 runs every trial in a CUDA worker on the
// emulated driver, two at a time on the one GPU: each worker maps the
// emulated libcuda, the coordinator never does, and every trial succeeds
// on cuda:0.
func sweepOnEmulatedDriver(t *testing.T, emu string) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, emulatedSweep)
	sweepDir := filepath.Join(dir, "sweep")
	r, w := tolariaWatchingMaps(t, dir, []string{"LD_LIBRARY_PATH=" + emu}, "sweep", file, "--devices", "0", "--per-device", "2",
		"--worker", filepath.Join(emu, "tolaria-worker"), "--sweep-dir", sweepDir, "--heartbeat-timeout", "3s")
	if r.code != 0 {
		t.Fatalf("tolaria sweep on the emulated CUDA driver: exit %d\n%s", r.code, r.stderr)
	}
	w.requireCoordinatorClean(t)
	if n := w.workersMappingLibcuda(); n < 3 {
		t.Errorf("%d of the %d children seen mapped the emulated libcuda; want the three trials' workers", n, len(w.workers))
	}
	res := readSweepResults(t, sweepDir)
	if res.Counts["succeeded"] != 3 {
		t.Fatalf("counts %v\n%s", res.Counts, r.stderr)
	}
	for _, row := range res.Trials {
		if row.Device != "cuda:0" || row.Summary == nil || row.Summary.GraphReplays == 0 {
			t.Errorf("trial %s: device %q, summary %+v; want graphs replayed on cuda:0", row.Name, row.Device, row.Summary)
		}
	}
	t.Logf("%d workers mapped libcuda; %d reads of the coordinator's maps without it", w.workersMappingLibcuda(), w.reads)
}

// gpuGoneAfterCheck is a tolaria-worker that finds the emulated GPU when
// tolaria first asks (its check of --devices) and none ever after: a GPU
// that goes between the check and the work.
func gpuGoneAfterCheck(t *testing.T, dir, emu string) string {
	t.Helper()
	script, checked := filepath.Join(dir, "gpu-gone-worker"), filepath.Join(dir, "checked")
	body := "#!/bin/sh\nif [ ! -e " + checked + " ]; then : > " + checked + "; exec " + filepath.Join(emu, "tolaria-worker") + " \"$@\"; fi\n" +
		"CUDAEMU_DEVICES=0 exec " + filepath.Join(emu, "tolaria-worker") + " \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// A cuda sweep on a machine without a GPU (the emulated driver with no
// device) is refused before anything is written (exit 2, the GPU named);
// and when the GPU goes after tolaria checked it, every trial fails for
// want of a GPU, saying so, tolaria exits 1 (none succeeded), and the
// coordinator never mapped a libcuda, although its workers loaded one.
func sweepWithoutAGPU(t *testing.T, emu string) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, emulatedSweep)
	sweepDir := filepath.Join(dir, "sweep")
	r := tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu, "CUDAEMU_DEVICES=0"}, "sweep", file, "--devices", "0",
		"--worker", filepath.Join(emu, "tolaria-worker"), "--sweep-dir", sweepDir)
	if _, err := os.Stat(sweepDir); r.code != 2 || !strings.Contains(r.stderr, "--devices: GPU 0 is not among the 0 GPUs") || !os.IsNotExist(err) {
		t.Fatalf("--devices 0 without a GPU: exit %d, want 2 before anything is written\n%s", r.code, r.stderr)
	}
	r, w := tolariaWatchingMaps(t, dir, []string{"LD_LIBRARY_PATH=" + emu}, "sweep", file, "--devices", "0", "--retries", "2",
		"--worker", gpuGoneAfterCheck(t, dir, emu), "--sweep-dir", sweepDir)
	if r.code != 1 {
		t.Fatalf("a cuda sweep without a GPU: exit %d, want 1 (none succeeded)\n%s", r.code, r.stderr)
	}
	w.requireCoordinatorClean(t)
	res := readSweepResults(t, sweepDir)
	if res.Counts["failed"] != 3 {
		t.Fatalf("counts %v, want the three trials failed", res.Counts)
	}
	for _, row := range res.Trials {
		if !strings.Contains(row.Reason, "no usable device") && !strings.Contains(row.Reason, "no CUDA device") && !strings.Contains(row.Reason, "no NVIDIA GPU") {
			t.Errorf("trial %s failed for %q; want for want of a GPU", row.Name, row.Reason)
		}
		if row.Attempts != 1 {
			t.Errorf("trial %s: %d attempts with --retries 2; a failure for want of a GPU here would repeat, so one", row.Name, row.Attempts)
		}
	}
	t.Logf("%d workers seen (%d mapping libcuda); %d reads of the coordinator's maps without it; reason %q",
		len(w.workers), w.workersMappingLibcuda(), w.reads, res.Trials[0].Reason)
}

// tolaria eval --device cuda scores the checkpoint in CUDA workers on the
// emulated driver: with two workers, eval.json holds the figures of one
// worker exactly; the coordinator never maps the emulated libcuda, and
// without a device the shards fail, so they ran on it.
func evalOnEmulatedDriver(t *testing.T, emu string) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	if r := tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu}, cudaTrain(emu, run)...); r.code != 0 {
		t.Fatalf("training on the emulated driver: exit %d\n%s", r.code, r.stderr)
	}
	var reports []eval.Report
	for _, n := range []string{"1", "2"} {
		r, w := tolariaWatchingMaps(t, dir, []string{"LD_LIBRARY_PATH=" + emu}, "eval", "--run-dir", run, "--workers", n,
			"--device", "cuda", "--worker", filepath.Join(emu, "tolaria-worker"), "--heartbeat-timeout", "3s")
		if r.code != 0 {
			t.Fatalf("tolaria eval --device cuda --workers %s: exit %d\n%s", n, r.code, r.stderr)
		}
		w.requireCoordinatorClean(t)
		// A shard's worker may come and go between two reads of the maps,
		// so how many were seen mapping the driver is logged, not
		// required: that the shards run on it is shown below, where
		// they fail without a device.
		t.Logf("--workers %s: %d of the %d children seen mapped the emulated libcuda", n, w.workersMappingLibcuda(), len(w.workers))
		reports = append(reports, readEval(t, run))
	}
	one, two := reports[0], reports[1]
	if one.Samples == 0 || one.Loss != two.Loss || one.Accuracy != two.Accuracy || one.Correct != two.Correct ||
		!reflect.DeepEqual(one.Confusion, two.Confusion) || !reflect.DeepEqual(one.PerClass, two.PerClass) {
		t.Errorf("two CUDA workers: %+v\none: %+v", two, one)
	}
	// A GPU named that is not there is refused before a shard starts; one
	// that goes after tolaria checked it fails the shards, saying so: they
	// did run on cuda.
	r := tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu, "CUDAEMU_DEVICES=0"}, "eval", "--run-dir", run, "--workers", "2",
		"--devices", "0", "--worker", filepath.Join(emu, "tolaria-worker"))
	if r.code != 2 || !strings.Contains(r.stderr, "--devices: GPU 0 is not among the 0 GPUs") || strings.Contains(r.stderr, "shard 0") {
		t.Errorf("tolaria eval --devices 0 without a GPU: exit %d, want 2 naming the GPU\n%s", r.code, r.stderr)
	}
	r = tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu}, "eval", "--run-dir", run, "--workers", "2",
		"--devices", "0", "--worker", gpuGoneAfterCheck(t, t.TempDir(), emu))
	if r.code != 3 || !strings.Contains(r.stderr, "no usable device") || !strings.Contains(r.stderr, "attempt 1 failed") ||
		!strings.Contains(r.stderr, "giving up") || strings.Contains(r.stderr, "attempt 2") {
		t.Errorf("tolaria eval with the GPU gone after the check: exit %d, want 3 naming the missing device, each shard given up after one attempt\n%s", r.code, r.stderr)
	}
	// --devices auto (the default) finds none, and says so before it starts a shard.
	r = tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu, "CUDAEMU_DEVICES=0"}, "eval", "--run-dir", run, "--workers", "2",
		"--device", "cuda", "--worker", filepath.Join(emu, "tolaria-worker"))
	if r.code != 1 || !strings.Contains(r.stderr, "found no usable GPU") || !strings.Contains(r.stderr, "use --device cpu") || strings.Contains(r.stderr, "shard 0") {
		t.Errorf("tolaria eval --device cuda without a GPU: exit %d, want 1 saying no GPU was found\n%s", r.code, r.stderr)
	}
}

// --device cuda follows the heartbeat rules of --isolate: a CUDA worker
// stopped (SIGSTOP) or wedged (its training blocked while its heartbeats
// go on) is killed as hung within the heartbeat timeout, tolaria exits 1
// with the reason and the command that resumes from the checkpoint, and
// no worker outlives it.
func hungCUDAWorker(t *testing.T, emu string) {
	for _, c := range []struct{ fault, says string }{
		{"step=40,hang", "hung: no heartbeat for"},
		{"step=40,wedge", "hung: alive (last heartbeat "},
	} {
		t.Run(c.fault, func(t *testing.T) {
			dir := t.TempDir()
			run := filepath.Join(dir, "run")
			r := tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu, "TOLARIA_E2E_WORKER_FAULT=" + c.fault},
				cudaTrain(emu, run, "--epochs", "2", "--heartbeat-timeout", "2s")...)
			if r.code != 1 {
				t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
			}
			for _, want := range []string{c.says, "continue with: tolaria train --resume --run-dir " + run} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
				}
			}
			if strings.Contains(c.fault, "wedge") {
				requireStalledWithin(t, r.stderr, 2*time.Second)
			}
			for _, pid := range startedWorkers(t, filepath.Join(run, "worker.log")) {
				if !gone(pid) {
					_ = syscall.Kill(-pid, syscall.SIGKILL)
					t.Errorf("the worker %d outlived tolaria", pid)
				}
			}
		})
	}
}

// mapsWatch is what polling the memory maps of a running tolaria and of
// its child processes (its workers) saw.
type mapsWatch struct {
	reads       int          // reads of tolaria's own maps
	coordinator string       // the lines of tolaria's maps naming a libcuda, if any
	workers     map[int]bool // the children seen, each true if its maps named a libcuda
}

// workersMappingLibcuda is how many of the children seen mapped a libcuda.
func (w mapsWatch) workersMappingLibcuda() int {
	n := 0
	for _, mapped := range w.workers {
		if mapped {
			n++
		}
	}
	return n
}

// requireCoordinatorClean fails if tolaria mapped a libcuda, or if its
// maps were never read (the check would prove nothing).
func (w mapsWatch) requireCoordinatorClean(t *testing.T) {
	t.Helper()
	if w.coordinator != "" {
		t.Errorf("the coordinator maps a libcuda while its CUDA workers run:\n%s", w.coordinator)
	}
	if w.reads == 0 {
		t.Fatal("never read the coordinator's memory maps while it ran: the check proves nothing")
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if err != nil || i < 0 {
			continue
		}
		// pid (comm) state ppid ...
		if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, child)
		}
	}
	return kids
}

// tolariaWatchingMaps runs tolaria as tolaria() does and, while it runs,
// reads its /proc/PID/maps and its children's every few milliseconds.
func tolariaWatchingMaps(t *testing.T, dir string, env []string, args ...string) (result, mapsWatch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "tolaria"), args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	pid := cmd.Process.Pid
	maps := filepath.Join("/proc", strconv.Itoa(pid), "maps")
	w := mapsWatch{workers: map[int]bool{}}
	var err error
poll:
	for {
		select {
		case err = <-done:
			break poll
		case <-time.After(5 * time.Millisecond):
		}
		m, rerr := os.ReadFile(maps)
		if rerr != nil {
			continue // exiting
		}
		w.reads++
		if w.coordinator == "" && bytes.Contains(m, []byte("libcuda")) {
			w.coordinator = grepLines(string(m), "libcuda")
		}
		for _, kid := range childrenOf(pid) {
			if w.workers[kid] {
				continue
			}
			km, kerr := os.ReadFile(filepath.Join("/proc", strconv.Itoa(kid), "maps"))
			w.workers[kid] = kerr == nil && bytes.Contains(km, []byte("libcuda"))
		}
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running tolaria: %v\n%s", err, stderr.String())
	}
	return result{code, stdout.String(), stderr.String()}, w
}

// tolaria train --device cuda --enable-graphs runs the real CUDA worker on
// the emulated driver: the step is captured and replayed, summary.json is
// written, and the coordinator never maps a libcuda while it runs, though
// its worker does.
func trainOnEmulatedDriver(t *testing.T, emu string) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	r, w := tolariaWatchingMaps(t, dir, []string{"LD_LIBRARY_PATH=" + emu}, cudaTrain(emu, run, "--synthetic-size", "4096", "--epochs", "2")...)
	if r.code != 0 {
		t.Fatalf("tolaria train on the emulated CUDA driver: exit %d\n%s", r.code, r.stderr)
	}
	w.requireCoordinatorClean(t)
	if w.workersMappingLibcuda() == 0 {
		t.Errorf("no worker of the %d seen mapped the emulated libcuda", len(w.workers))
	}
	s := readSummary(t, filepath.Join(run, "summary.json"))
	if s.Device != "cuda:0" || s.DeviceDescription != "tolaria emulated CUDA device" {
		t.Errorf("summary device %q (%q), want cuda:0 on the emulated driver", s.Device, s.DeviceDescription)
	}
	if !s.GraphEnabled || s.GraphReplays == 0 || s.Captures == 0 || len(s.Fallbacks) != 0 {
		t.Errorf("summary: graphs %v, %d replays, %d captures, fallbacks %v; want the step captured and replayed without fallback",
			s.GraphEnabled, s.GraphReplays, s.Captures, s.Fallbacks)
	}
	t.Logf("%d steps (%d replays), %d reads of the coordinator's maps without libcuda", s.Steps, s.GraphReplays, w.reads)
}

// Driver errors injected into the emulated driver reach the user as
// tolaria's errors: a setup failure or a job failure (exit status 1) that
// names the cause, or an explicit fallback to eager steps that the summary
// counts.
func emulatedDriverFaults(t *testing.T, emu string) {
	tests := []struct {
		name     string
		env      string
		code     int
		stderr   []string // in tolaria's stderr
		fallback string   // a fallback reason the summary counts (exit 0)
	}{
		{"no device", "CUDAEMU_DEVICES=0", 1, []string{"no usable device", "use --device cpu"}, ""},
		{"cuInit fails", "CUDAEMU_FAULTS=cuInit:1:100", 1, []string{"no NVIDIA GPU or driver", "use --device cpu"}, ""},
		{"out of memory", "CUDAEMU_FAULTS=cuMemAlloc_v2:3:2", 1, []string{"out of memory", "CUDA_ERROR_OUT_OF_MEMORY"}, ""},
		{"capture refused", "CUDAEMU_FAULTS=cuStreamBeginCapture_v2:*:900", 0, nil, "capture_failed"},
		{"instantiate fails", "CUDAEMU_FAULTS=cuGraphInstantiateWithFlags:*:2", 0, nil, "capture_failed"},
		{"illegal address in a replay", "CUDAEMU_FAULTS=cuGraphLaunch:5:700", 1, []string{"step runs eagerly", "CUDA_ERROR_ILLEGAL_ADDRESS"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			run := filepath.Join(dir, "run")
			r := tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu, tt.env}, cudaTrain(emu, run)...)
			if r.code != tt.code {
				t.Fatalf("exit status %d, want %d\n%s", r.code, tt.code, r.stderr)
			}
			for _, want := range tt.stderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
				}
			}
			if tt.fallback != "" {
				s := readSummary(t, filepath.Join(run, "summary.json"))
				if s.Fallbacks[tt.fallback] == 0 || s.GraphReplays != 0 {
					t.Errorf("summary: fallbacks %v, %d replays; want %s fallbacks and no replay", s.Fallbacks, s.GraphReplays, tt.fallback)
				}
			}
		})
	}
}

// faultEveryEntryPoint lists the driver entry points a short training run
// reaches (the emulator's CUDAEMU_TRACE) and, for each, runs it again with
// that entry point's first call failing (CUDA_ERROR_UNKNOWN). Each run
// must end by itself, without a crash, with exit status 0 or 1, and the
// user must learn of the error: stderr names it, or the summary counts a
// fallback to eager steps, or the worker's log names it (an entry point
// reached after the run's result, a release at exit, may fail with exit 0
// but not silently).
func faultEveryEntryPoint(t *testing.T, emu string) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace")
	if r := tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu, "CUDAEMU_TRACE=" + trace}, cudaTrain(emu, filepath.Join(dir, "run"))...); r.code != 0 {
		t.Fatalf("the traced run: exit %d\n%s", r.code, r.stderr)
	}
	raw, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var symbols []string
	for _, sym := range strings.Fields(string(raw)) {
		if !seen[sym] {
			seen[sym] = true
			symbols = append(symbols, sym)
		}
	}
	if len(symbols) < 20 {
		t.Fatalf("the run reached only %d entry points: %v", len(symbols), symbols)
	}
	t.Logf("%d entry points reached: %s", len(symbols), strings.Join(symbols, " "))
	for _, sym := range symbols {
		t.Run(sym, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			run := filepath.Join(dir, "run")
			r := tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu, "CUDAEMU_FAULTS=" + sym + ":1:999"}, cudaTrain(emu, run)...)
			for _, crash := range []string{"panic:", "SIGSEGV", "fatal error:"} {
				if strings.Contains(r.stderr, crash) {
					t.Fatalf("%s failing crashed a process (%s):\n%s", sym, crash, r.stderr)
				}
			}
			// gorgonia.org/cu's package init reports a failing cuInit in its
			// own words before tolaria runs; the worker's log holds what it
			// said after its hello.
			wlog, _ := os.ReadFile(filepath.Join(run, "worker.log"))
			told := strings.Contains(r.stderr, "CUDA_ERROR_UNKNOWN") || strings.Contains(string(wlog), "CUDA_ERROR_UNKNOWN") ||
				(sym == "cuInit" && strings.Contains(r.stderr, "no NVIDIA GPU or driver") && strings.Contains(r.stderr, "Unknown"))
			if r.code == 0 && !told {
				if s := readSummary(t, filepath.Join(run, "summary.json")); len(s.Fallbacks) > 0 {
					told = true
				}
			}
			if (r.code != 0 && r.code != 1) || !told {
				t.Fatalf("%s failing: exit %d, and the user %s told of CUDA_ERROR_UNKNOWN\n%s", sym, r.code, map[bool]string{true: "was", false: "was not"}[told], r.stderr)
			}
		})
	}
}
