package e2e

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/eval"
)

// evalBudgetsOnEmulatedDevices: on an emulated machine of two GPUs whose
// primary context takes CUDAEMU_CONTEXT_BYTES, every shard's worker bills
// the context it measured beside its buffers: the budget granted is
// exactly that much larger than with a context of nothing. With
// --device-memory fitting one shard's bill on each GPU, four shards over
// the two GPUs hold a budget one at a time on each, the others waiting,
// and the figures are a single worker's.
func evalBudgetsOnEmulatedDevices(t *testing.T, emu string) {
	const ctxBytes = 4 << 20
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	two := []string{"LD_LIBRARY_PATH=" + emu, "CUDAEMU_DEVICES=2"}
	if r := tolaria(t, dir, two, cudaTrain(emu, run)...); r.code != 0 {
		t.Fatalf("training on the emulated driver: exit %d\n%s", r.code, r.stderr)
	}
	eval := func(env []string, extra ...string) eval.Report {
		t.Helper()
		args := append([]string{"eval", "--run-dir", run, "--device", "cuda", "--worker", filepath.Join(emu, "tolaria-worker"), "--heartbeat-timeout", "3s"}, extra...)
		r := tolaria(t, dir, env, args...)
		if r.code != 0 {
			t.Fatalf("tolaria %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
		return readEval(t, run)
	}
	// One shard a GPU, nothing limited: each device's peak is one bill.
	bill := map[int]int64{}
	for _, c := range []int{0, ctxBytes} {
		rep := eval(append(two, fmt.Sprintf("CUDAEMU_CONTEXT_BYTES=%d", c)), "--workers", "2")
		if len(rep.Budgets) != 2 || rep.Budgets[0].PeakGranted != rep.Budgets[1].PeakGranted || rep.Budgets[0].PeakHolders != 1 {
			t.Fatalf("a context of %d bytes, a shard on each GPU: budgets %+v", c, rep.Budgets)
		}
		bill[c] = rep.Budgets[0].PeakGranted
	}
	if bill[ctxBytes]-bill[0] != ctxBytes {
		t.Errorf("a shard's bill: %d bytes with a context of %d bytes, %d without; want the context billed, the rest the same", bill[ctxBytes], ctxBytes, bill[0])
	}
	one := eval(append(two, fmt.Sprintf("CUDAEMU_CONTEXT_BYTES=%d", ctxBytes)), "--workers", "1")
	// Room for one shard's bill with its 10% headroom on each GPU, not two.
	memory := bill[ctxBytes]*11/10 + bill[ctxBytes]/2
	rep := eval(append(two, fmt.Sprintf("CUDAEMU_CONTEXT_BYTES=%d", ctxBytes)), "--workers", "4", "--device-memory", fmt.Sprint(memory))
	if len(rep.Budgets) != 2 {
		t.Fatalf("budgets %+v: want both GPUs'", rep.Budgets)
	}
	for _, b := range rep.Budgets {
		if b.PeakHolders != 1 || b.PeakGranted != bill[ctxBytes] || b.Capacity != memory {
			t.Errorf("%s: books %+v; want one shard at a time, its bill of %d bytes, under %d", b.Device, b, bill[ctxBytes], memory)
		}
	}
	t.Logf("a shard's bill %d bytes (%d of them its context); budgets under --device-memory %d: %+v", bill[ctxBytes], ctxBytes, memory, rep.Budgets)
	if !reflect.DeepEqual(figures(rep), figures(one)) {
		t.Errorf("four shards one at a time on each GPU:\n%+v\none worker:\n%+v", figures(rep), figures(one))
	}
}
