package eval

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/budget/holder"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/internal/workertest"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
)

// trainSmallRun trains a small synthetic run into dir, as tolaria train
// does, and returns its spec.
func trainSmallRun(t *testing.T, dir string) job.Spec {
	t.Helper()
	s := job.Default()
	s.Device, s.Dataset, s.SyntheticSize, s.Epochs, s.Hidden, s.BatchSize, s.LogEvery = "cpu", "synthetic", 400, 1, []int{16}, 16, 1000
	s.EnableGraphs, s.RunDir = true, dir
	shared := trainer.NewShared()
	defer shared.Close()
	r, err := train.Prepare(context.Background(), train.Request{Spec: s, Shared: shared, Version: "test", Started: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sum, err := r.Train(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Record(&sum); err != nil {
		t.Fatal(err)
	}
	return s
}

// shardBill is what one shard's worker of spec's evaluation asks for on
// the CPU device.
func shardBill(t *testing.T, spec job.Spec) trainer.Bill {
	t.Helper()
	_, tc, _, err := jobserver.EvalData(spec, jobserver.SplitTest)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	return trainer.EvalBill(trainer.EvalConfig{Spec: tc.Spec, Net: tc.Net, BatchSize: tc.BatchSize}, dev)
}

// TestShardsShareTheDeviceByBudget: every shard's worker asks the budget
// broker before it allocates. With --device-memory fitting one shard's
// bill (with headroom) and not two, the three shards, all started at once,
// hold a budget one at a time, those that asked meanwhile waiting, as the
// report's budgets say (at most one holder and one bill at once); the
// figures are those of a single worker. Without a limit the shards' bills
// are booked too.
func TestShardsShareTheDeviceByBudget(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	spec := trainSmallRun(t, dir)
	bill := shardBill(t, spec)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{workertest.ServeEnv + "=1"}
	evaluate := func(workers int, deviceMemory int64) (*Report, []holder.Update) {
		t.Helper()
		var mu sync.Mutex
		var waits []holder.Update
		e, err := Plan(Request{RunDir: dir, Workers: workers, Worker: exe, Env: env, DeviceMemory: deviceMemory,
			Budget: func(_, _ int, _ string, u holder.Update) {
				mu.Lock()
				waits = append(waits, u)
				mu.Unlock()
			}})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := e.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return rep, waits
	}
	one, _ := evaluate(1, 0)
	fits := int64(float64(bill.DeviceBytes())*budget.Headroom) + 1
	shared, waits := evaluate(3, fits+bill.DeviceBytes()/2)
	if len(shared.Budgets) != 1 {
		t.Fatalf("budgets %+v: want the CPU device's", shared.Budgets)
	}
	b := shared.Budgets[0]
	t.Logf("a shard's bill %v; books %+v; %d budget updates", bill, b, len(waits))
	if b.Device != "cpu" || b.PeakHolders != 1 || b.PeakGranted != bill.DeviceBytes() || b.Capacity != fits+bill.DeviceBytes()/2 {
		t.Errorf("books %+v: want one shard at a time holding its bill of %d bytes on the cpu", b, bill.DeviceBytes())
	}
	if b.Waits != len(waits)/2 && b.Waits != (len(waits)+1)/2 {
		t.Errorf("%d waits in the books, %d budget updates told (a wait and its grant each)", b.Waits, len(waits))
	}
	for _, u := range waits {
		if u.Bytes != bill.DeviceBytes() {
			t.Errorf("a shard waited for or was granted %d bytes, want its bill %d", u.Bytes, bill.DeviceBytes())
		}
	}
	figures := func(r *Report) any { return []any{r.Samples, r.Loss, r.Accuracy, r.Correct, r.PerClass, r.Confusion} }
	if !reflect.DeepEqual(figures(shared), figures(one)) || shared.Complete != true {
		t.Errorf("three shards one at a time: %+v\none worker: %+v", figures(shared), figures(one))
	}
	free, _ := evaluate(3, 0)
	if len(free.Budgets) != 1 || free.Budgets[0].PeakGranted < bill.DeviceBytes() || free.Budgets[0].Waits != 0 {
		t.Errorf("without a limit: budgets %+v; want the shards' bills booked, none waiting", free.Budgets)
	}
}
