package e2e

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator"
)

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
	eval := func(env []string, extra ...string) (coordinator.EvalReport, string) {
		t.Helper()
		args := append([]string{"eval", "--run-dir", run, "--device", "cuda", "--worker", filepath.Join(emu, "tolaria-worker"), "--heartbeat-timeout", "3s"}, extra...)
		r := tolaria(t, dir, env, args...)
		if r.code != 0 {
			t.Fatalf("tolaria %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
		return readEval(t, run), r.stderr
	}
	one, _ := eval(three, "--workers", "1", "--devices", "1")
	spread, stderr := eval(three, "--workers", "3")
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
	_, stderr = eval(append(three, "CUDA_VISIBLE_DEVICES=2,0"), "--workers", "4")
	if !strings.Contains(stderr, "with 4 workers on cuda:0, cuda:1") || strings.Contains(stderr, "cuda:2") {
		t.Errorf("--devices auto under CUDA_VISIBLE_DEVICES=2,0:\n%s", stderr)
	}
	_, stderr = eval(three, "--workers", "3", "--devices", "2", "--per-device", "1")
	if strings.Count(stderr, " on cuda:2: ") != 3 || !strings.Contains(stderr, "with 3 workers on cuda:2") {
		t.Errorf("--devices 2 --per-device 1:\n%s", stderr)
	}
}
