package jobserver

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

// contextDevice is the CPU device with a driver's figures: a GPU of total
// bytes whose context (and modules) took context bytes when it was opened.
type contextDevice struct {
	device.Device
	total, context int64
}

func (d contextDevice) DriverMemory() (free, total int64, err error) {
	return d.total - d.context - d.MemoryStats().DeviceInUse, d.total, nil
}

// openWithContext opens the CPU device as a GPU whose context takes ctx
// bytes (0: the plain CPU device, without driver figures).
func openWithContext(ctx int64) Opener {
	return func(name string, spec job.Spec) (device.Device, error) {
		dev, err := OpenCPU(name, spec)
		if err != nil || ctx == 0 {
			return dev, err
		}
		return contextDevice{Device: dev, total: 1 << 30, context: ctx}, nil
	}
}

// granting answers every budget request at once, keeping it.
func granting(got *[]BudgetRequest) func(BudgetRequest, BudgetReply) error {
	return func(req BudgetRequest, reply BudgetReply) error {
		*got = append(*got, req)
		return reply.Grant(BudgetGrant{Bytes: req.Bill.DeviceBytes()})
	}
}

// TestBudgetRequestsBillTheContext: a training job's and an evaluation
// shard's workers ask for a budget before they allocate, and their bill
// counts what the device held once opened (the context and modules, by
// the driver's figures) besides the job's own buffers: a bill without it
// would be exactly that much short. On a device without driver figures
// (the CPU) the bill has no context.
func TestBudgetRequestsBillTheContext(t *testing.T) {
	const ctxBytes = 3 << 20
	spec := smallSpec()
	asks := map[int64][]BudgetRequest{} // by the device's context bytes
	for _, c := range []int64{0, ctxBytes} {
		got := asks[c]
		serve := InProcess(Config{Build: "cpu", Open: openWithContext(c), Shared: newShared(t)})
		run := spec
		run.RunDir = t.TempDir()
		if _, _, err := Run(context.Background(), serve, "cpu", run, Sink{Budget: granting(&got)}); err != nil {
			t.Fatal(err)
		}
		ck := filepath.Join(run.RunDir, trainer.CheckpointFile)
		sha, err := FileSHA256(ck)
		if err != nil {
			t.Fatal(err)
		}
		ej := EvalJob{Spec: run, Checkpoint: ck, CheckpointSHA256: sha, Split: SplitTest, Shard: 0, Shards: 2, Attempt: 1,
			Out: filepath.Join(t.TempDir(), "shard-0.tles")}
		if _, _, err := Evaluate(context.Background(), serve, "cpu", ej, Sink{Budget: granting(&got)}); err != nil {
			t.Fatal(err)
		}
		asks[c] = got
	}
	plain, withCtx := asks[0], asks[ctxBytes]
	if len(plain) != 2 || len(withCtx) != 2 {
		t.Fatalf("budget requests: %d on the CPU, %d on the device with a context; want one for the job and one for the shard", len(plain), len(withCtx))
	}
	for i, what := range []string{"training job", "evaluation shard"} {
		p, c := plain[i], withCtx[i]
		if p.Bill.Context != 0 || c.Bill.Context != ctxBytes || c.Bill.DeviceBytes()-p.Bill.DeviceBytes() != ctxBytes {
			t.Errorf("%s: bill %v without a context, %v with one of %d bytes; want the context billed, the rest the same", what, p.Bill, c.Bill, ctxBytes)
		}
		if c.Total != 1<<30 || c.Free != 1<<30-ctxBytes {
			t.Errorf("%s: the device's memory at the request: total %d, free %d; want free to lack the context alone", what, c.Total, c.Free)
		}
	}
	if e := plain[1].Bill; e.DeviceBytes() == 0 || e.OptimizerState != e.Parameters || e.StagingInputs == 0 {
		t.Errorf("the evaluation shard's bill %v: want the evaluation's own (trainer.EvalBill)", e)
	}
}

// meteredDevice is a GPU shared with other processes: the driver's used
// memory counts their others bytes too, while the device measures its own
// context (as device/cuda does through NVML).
type meteredDevice struct {
	contextDevice
	others int64
}

func (d meteredDevice) DriverMemory() (free, total int64, err error) {
	free, total, err = d.contextDevice.DriverMemory()
	return free - d.others, total, err
}

func (d meteredDevice) ContextMemory() (int64, string, error) { return d.context, "test meter", nil }

// TestBudgetBillsTheMeasuredContext: on a GPU that other processes share,
// a device that measures its own context is billed that, not the driver's
// used memory (which counted the other workers' contexts in the sweep of
// the third GPU run, refusing every trial), and the log says which source
// answered.
func TestBudgetBillsTheMeasuredContext(t *testing.T) {
	const ctxBytes, others = 3 << 20, 300 << 20
	var logged strings.Builder
	open := func(name string, spec job.Spec) (device.Device, error) {
		dev, err := OpenCPU(name, spec)
		if err != nil {
			return nil, err
		}
		return meteredDevice{contextDevice{Device: dev, total: 1 << 30, context: ctxBytes}, others}, nil
	}
	var got []BudgetRequest
	serve := InProcess(Config{Build: "cpu", Open: open, Shared: newShared(t),
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	run := smallSpec()
	run.RunDir = t.TempDir()
	if _, _, err := Run(context.Background(), serve, "cpu", run, Sink{Budget: granting(&got)}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Bill.Context != ctxBytes {
		t.Fatalf("budget requests %v: want one billing the measured context, %d bytes (not the driver's %d)", got, ctxBytes, ctxBytes+others)
	}
	if !strings.Contains(logged.String(), `source="test meter"`) || !strings.Contains(logged.String(), "context_bytes=3145728") {
		t.Errorf("the worker's log does not name the context's source and size:\n%s", logged.String())
	}
}
