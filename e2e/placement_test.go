package e2e

import (
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/device/cuda/emulator/emurecord"
)

// deviceRecords reads the emulated driver's records in state (CUDAEMU_STATE)
// and checks that no device ever held more than its memory.
func deviceRecords(t *testing.T, state string) []emurecord.Device {
	t.Helper()
	devs, err := emurecord.Read(state)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.Exceeded() {
			t.Errorf("device %d held %d bytes at its peak, more than its %d", d.Index, d.Peak, d.Total)
		}
	}
	return devs
}

// shardDevices maps each shard's worker, by the pid its log names, to the
// devices of the machine the driver's records say it opened, and checks
// them against the device its progress line names (want: the machine's
// device behind each cuda:N of the line).
func shardDevices(t *testing.T, run, stderr string, shards int, devs []emurecord.Device, want map[string]int) {
	t.Helper()
	for s := range shards {
		m := regexp.MustCompile(fmt.Sprintf(`shard %d \(of %d\) on (cuda:\d+): `, s, shards)).FindStringSubmatch(stderr)
		pids := startedWorkers(t, filepath.Join(run, eval.Dir, fmt.Sprintf("shard-%d.log", s)))
		if m == nil || len(pids) == 0 {
			t.Errorf("shard %d: no device in its line or no worker in its log:\n%s", s, stderr)
			continue
		}
		got := emurecord.DevicesOf(devs, pids[len(pids)-1])
		if !reflect.DeepEqual(got, []int{want[m[1]]}) {
			t.Errorf("shard %d ran on %s, and its worker (pid %d) opened the machine's devices %v by the driver's records, want [%d]",
				s, m[1], pids[len(pids)-1], got, want[m[1]])
		}
	}
}

// evalOverEmulatedDevices: on an emulated machine of three GPUs, tolaria
// eval --device cuda finds them (--devices auto, the default) and spreads
// its shards over them, one per GPU, saying which shard ran where; the
// figures are a single worker's. --devices names GPUs in the numbering of
// tolaria's own CUDA_VISIBLE_DEVICES, and --per-device 1 on one GPU scores
// the shards one after the other.
func evalOverEmulatedDevices(t *testing.T, emu string) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	three := []string{"LD_LIBRARY_PATH=" + emu, "CUDAEMU_DEVICES=3"}
	if r := tolaria(t, dir, three, cudaTrain(emu, run)...); r.code != 0 {
		t.Fatalf("training on the emulated driver: exit %d\n%s", r.code, r.stderr)
	}
	eval := func(env []string, extra ...string) (eval.Report, string) {
		t.Helper()
		args := append([]string{"eval", "--run-dir", run, "--device", "cuda", "--worker", filepath.Join(emu, "tolaria-worker"), "--heartbeat-timeout", "3s"}, extra...)
		r := tolaria(t, dir, env, args...)
		if r.code != 0 {
			t.Fatalf("tolaria %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
		return readEval(t, run), r.stderr
	}
	one, _ := eval(three, "--workers", "1", "--devices", "1")
	state := filepath.Join(dir, "state-spread")
	spread, stderr := eval(append(three, "CUDAEMU_STATE="+state), "--workers", "3")
	// The driver's own records: each shard's worker on the GPU its line names.
	shardDevices(t, run, stderr, 3, deviceRecords(t, state), map[string]int{"cuda:0": 0, "cuda:1": 1, "cuda:2": 2})
	if !strings.Contains(stderr, "with 3 workers on cuda:0, cuda:1, cuda:2") {
		t.Errorf("--devices auto on 3 GPUs:\n%s", stderr)
	}
	// Which shard takes which slot is the order they start in; each GPU
	// has one.
	for _, gpu := range []string{"cuda:0", "cuda:1", "cuda:2"} {
		if n := strings.Count(stderr, " (of 3) on "+gpu+": "); n != 1 {
			t.Errorf("%d shards on %s, want 1:\n%s", n, gpu, stderr)
		}
	}
	if !reflect.DeepEqual(figures(spread), figures(one)) {
		t.Errorf("3 shards over 3 GPUs:\n%+v\none worker:\n%+v", figures(spread), figures(one))
	}
	// Under CUDA_VISIBLE_DEVICES=2,0 tolaria sees two GPUs, numbered 0
	// and 1, as its workers would.
	state = filepath.Join(dir, "state-visible")
	_, stderr = eval(append(three, "CUDA_VISIBLE_DEVICES=2,0", "CUDAEMU_STATE="+state), "--workers", "4")
	if !strings.Contains(stderr, "with 4 workers on cuda:0, cuda:1") || strings.Contains(stderr, "cuda:2") {
		t.Errorf("--devices auto under CUDA_VISIBLE_DEVICES=2,0:\n%s", stderr)
	}
	// cuda:0 is the machine's device 2 and cuda:1 its device 0.
	shardDevices(t, run, stderr, 4, deviceRecords(t, state), map[string]int{"cuda:0": 2, "cuda:1": 0})
	_, stderr = eval(three, "--workers", "3", "--devices", "2", "--per-device", "1")
	if strings.Count(stderr, " on cuda:2: ") != 3 || !strings.Contains(stderr, "with 3 workers on cuda:2") {
		t.Errorf("--devices 2 --per-device 1:\n%s", stderr)
	}
}

// sweepOverEmulatedDevices: a sweep on an emulated machine of two GPUs
// finds both (--devices auto, the default) and, one trial at a time on
// each, runs its three trials on both, as its results and the driver's
// own records say, none past its device's memory.
func sweepOverEmulatedDevices(t *testing.T, emu string) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, emulatedSweep)
	sweepDir := filepath.Join(dir, "sweep")
	state := filepath.Join(dir, "state")
	r := tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu, "CUDAEMU_DEVICES=2", "CUDAEMU_STATE=" + state}, "sweep", file,
		"--device", "cuda", "--per-device", "1", "--worker", filepath.Join(emu, "tolaria-worker"), "--sweep-dir", sweepDir, "--heartbeat-timeout", "3s")
	if r.code != 0 {
		t.Fatalf("tolaria sweep --device cuda on two GPUs: exit %d\n%s", r.code, r.stderr)
	}
	res := readSweepResults(t, sweepDir)
	used := map[string]int{}
	for _, row := range res.Trials {
		used[row.Device]++
	}
	if res.Counts["succeeded"] != 3 || used["cuda:0"] == 0 || used["cuda:1"] == 0 || used["cuda:0"]+used["cuda:1"] != 3 {
		t.Errorf("counts %v, trials by device %v; want three trials over cuda:0 and cuda:1", res.Counts, used)
	}
	devs := deviceRecords(t, state)
	for _, row := range res.Trials {
		pids := startedWorkers(t, filepath.Join(row.RunDir, rundir.WorkerLogFile))
		if len(pids) == 0 {
			t.Errorf("trial %s: no worker in its log", row.Name)
			continue
		}
		want := map[string]int{"cuda:0": 0, "cuda:1": 1}[row.Device]
		if got := emurecord.DevicesOf(devs, pids[len(pids)-1]); !reflect.DeepEqual(got, []int{want}) {
			t.Errorf("trial %s ran on %s; its worker (pid %d) opened devices %v by the driver's records", row.Name, row.Device, pids[len(pids)-1], got)
		}
	}
}

// rlWithTheGPUGone: a failure another process would repeat is not
// retried: when the GPU goes after tolaria checked it, each agent fails at
// once for want of a GPU, its actor not restarted, and tolaria exits 1.
func rlWithTheGPUGone(t *testing.T, emu string) {
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	cfg := writeRLConfig(t, dir, "model: {hidden: [32]}\nlearning_starts: 300\nbuffer_capacity: 2000\n")
	r := tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu}, "rl", "--devices", "0", "--total-steps", "1500", "--config", cfg,
		"--worker", gpuGoneAfterCheck(t, dir, emu), "--run-dir", runDir)
	sum := readRLSummary(t, runDir)
	if r.code != 1 || sum.Agents[0].State != rl.AgentFailed || sum.Agents[0].ActorRestarts != 0 || !strings.Contains(sum.Agents[0].Reason, "no usable device") {
		t.Errorf("rl with the GPU gone: exit %d, %+v\n%s", r.code, sum.Agents[0], r.stderr)
	}
}
