package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestSweepTrialsWaitForDeviceMemory: two trials in CPU worker processes
// that each need 60% of --device-memory run one after the other, though
// two may run at once: the second's events show it waiting, then granted
// after the first ended, and its training starts after the first's
// ended.
func TestSweepTrialsWaitForDeviceMemory(t *testing.T) {
	// one trains long enough that two, started once one holds its budget,
	// asks while it trains.
	cfg := sweepConfig(t, strings.Replace(budgetSweep, "  - {name: one}", "  - {name: one, epochs: 60}", 1))
	cfg.Parallel = 2
	cfg.DeviceMemory = int64(float64(trialBill(t, cfg, "one")) / 0.6)
	// However slow the machine, one is not parked for two, of the same
	// priority, before it ends.
	cfg.MinResidence = time.Hour
	t.Setenv(startAfterEnv, "two=one")
	var mu sync.Mutex
	var waits []string
	cfg.Report = func(u TrialUpdate) {
		if u.Budget != nil && u.Budget.Waiting {
			mu.Lock()
			waits = append(waits, u.Trial)
			mu.Unlock()
		}
	}
	res, _ := runSweep(t, context.Background(), cfg)
	if res.Counts["succeeded"] != 2 {
		t.Fatalf("counts %v", res.Counts)
	}
	if len(waits) != 1 || waits[0] != "two" {
		t.Fatalf("trials reported waiting: %v, want two", waits)
	}
	h, w := readEvents(t, filepath.Join(cfg.Dir, "one")), readEvents(t, filepath.Join(cfg.Dir, "two"))
	if len(kinds(h, EventBudgetWait)) != 0 || len(kinds(h, EventBudgetGrant)) != 1 {
		t.Fatalf("the first trial's budget events: %v", h)
	}
	wait, grant := kinds(w, EventBudgetWait), kinds(w, EventBudgetGrant)
	if len(wait) != 1 || len(grant) != 1 || !grant[0].Time.After(wait[0].Time) {
		t.Fatalf("the second trial's budget events: wait %v, grant %v; want a wait, then a grant", wait, grant)
	}
	if s, _ := grant[0].Fields["waited_seconds"].(float64); s <= 0 {
		t.Errorf("granted after waiting %v seconds", grant[0].Fields["waited_seconds"])
	}
	hEpochs, wEpochs := kinds(h, trainer.EventEpoch), kinds(w, trainer.EventEpoch)
	if len(hEpochs) != 60 || len(wEpochs) != 4 {
		t.Fatalf("epochs: %d and %d", len(hEpochs), len(wEpochs))
	}
	if last := hEpochs[len(hEpochs)-1].Time; grant[0].Time.Before(last) {
		t.Errorf("the second trial was granted at %s, before the first's last epoch ended at %s", grant[0].Time, last)
	}
}

// TestSweepRefusesATrialLargerThanTheDevice: a trial whose bill is 120%
// of --device-memory fails at once (no step trained) with a reason that
// names its bill by kind; the others succeed.
func TestSweepRefusesATrialLargerThanTheDevice(t *testing.T) {
	cfg := sweepConfig(t, budgetSweep+"  - {name: big, model: {hidden: [32, 32, 32]}}\n")
	cfg.Parallel = 3
	big := trialBill(t, cfg, "big")
	cfg.DeviceMemory = int64(float64(big) / 1.2)
	if float64(trialBill(t, cfg, "one"))*budget.Headroom > float64(cfg.DeviceMemory) {
		t.Fatalf("the small trials (%d bytes) do not fit in %d; change the test's models", trialBill(t, cfg, "one"), cfg.DeviceMemory)
	}
	res, _ := runSweep(t, context.Background(), cfg)
	if res.Counts["succeeded"] != 2 || res.Counts["failed"] != 1 {
		t.Fatalf("counts %v", res.Counts)
	}
	row := res.Trials[2]
	if row.Name != "big" || row.State != TrialFailed || row.Attempts != 1 {
		t.Fatalf("the big trial's row: %+v", row)
	}
	for _, want := range []string{"parameters", "gradients", "optimizer_state", "activations", "staging_inputs", "device cpu", "--device-memory"} {
		if !strings.Contains(row.Reason, want) {
			t.Errorf("the refusal %q does not name %q", row.Reason, want)
		}
	}
	evs := readEvents(t, filepath.Join(cfg.Dir, "big"))
	if len(kinds(evs, EventBudgetRefused)) != 1 || len(kinds(evs, trainer.EventEpoch)) != 0 || len(kinds(evs, trainer.EventMemoryBill)) != 0 {
		t.Errorf("the big trial's events: %v; want a refusal and nothing allocated or trained", evs)
	}
}

// TestSweepParksALowerPriorityTrial: in CPU worker processes, a trial of
// higher priority that does not fit next to a running one of lower
// priority parks it; both finish, the high one first, and the parked
// trial ends with exactly the parameters of the same job never parked.
func TestSweepParksALowerPriorityTrial(t *testing.T) {
	cfg := sweepConfig(t, prioritySweep)
	cfg.Parallel = 2
	cfg.DeviceMemory = int64(float64(trialBill(t, cfg, "low")) / 0.6)
	t.Setenv(startAfterEnv, "high=low")
	res, _ := runSweep(t, context.Background(), cfg)
	if res.Counts["succeeded"] != 2 {
		t.Fatalf("counts %v: %+v", res.Counts, res.Trials)
	}
	low, high := readEvents(t, filepath.Join(cfg.Dir, "low")), readEvents(t, filepath.Join(cfg.Dir, "high"))
	for _, k := range []string{EventBudgetPark, trainer.EventPark, EventBudgetParked, trainer.EventUnpark} {
		if n := len(kinds(low, k)); n != 1 {
			t.Errorf("the low-priority trial has %d %s events, want 1", n, k)
		}
	}
	grants := kinds(low, EventBudgetGrant)
	if len(grants) != 2 {
		t.Fatalf("the low-priority trial's grants: %v; want the first and the one to unpark", grants)
	}
	if len(kinds(high, EventBudgetWait)) != 1 || len(kinds(high, EventBudgetGrant)) != 1 {
		t.Fatalf("the high-priority trial's budget events: %v", high)
	}
	highDone := kinds(high, trainer.EventDone)
	unpark := kinds(low, trainer.EventUnpark)
	if len(highDone) != 1 || len(unpark) != 1 || unpark[0].Time.Before(kinds(high, trainer.EventEpoch)[3].Time) {
		t.Errorf("the low-priority trial unparked at %v, before the high one's last epoch", unpark)
	}
	var lowRow TrialResult
	for _, r := range res.Trials {
		if r.Name == "low" {
			lowRow = r
		}
	}
	spec := cfg.Sweep.Trials[0].Spec
	spec.Device, spec.RunDir = "cpu", filepath.Join(t.TempDir(), "twin")
	_, twin := trainRun(t, request(t, spec))
	if lowRow.Summary == nil || lowRow.Summary.ParamsSHA256 != twin.ParamsSHA256 {
		t.Fatalf("the parked trial's params %v, its twin never parked %s", lowRow.Summary, twin.ParamsSHA256)
	}
}

// TestSweepParksTrialsOfEqualPriority: two trials of the same priority
// in CPU worker processes, on a device whose --device-memory fits one:
// the broker parks the one holding the budget, once it has made progress,
// for the one waiting, and they take turns until both end. Both finish
// with exactly the parameters of the same job run alone, never parked,
// and the parks are recorded in their events.
func TestSweepParksTrialsOfEqualPriority(t *testing.T) {
	cfg := sweepConfig(t, equalSweep)
	cfg.Parallel = 2
	cfg.DeviceMemory = int64(float64(trialBill(t, cfg, "one")) / 0.6)
	// Any time is residence enough: a trial is parked once it has made
	// progress since its grant, whenever the other waits.
	cfg.MinResidence = time.Nanosecond
	t.Setenv(startAfterEnv, "two=one")
	res, _ := runSweep(t, context.Background(), cfg)
	if res.Counts["succeeded"] != 2 {
		t.Fatalf("counts %v: %+v", res.Counts, res.Trials)
	}
	one, two := readEvents(t, filepath.Join(cfg.Dir, "one")), readEvents(t, filepath.Join(cfg.Dir, "two"))
	if len(kinds(one, EventBudgetPark)) == 0 {
		t.Fatalf("the trial holding the budget was never parked for the other: %v", one)
	}
	for name, evs := range map[string][]budgetEvent{"one": one, "two": two} {
		// A trial asked to park as it ends does not park.
		parks, parked, unparks := kinds(evs, EventBudgetPark), kinds(evs, EventBudgetParked), kinds(evs, trainer.EventUnpark)
		if n := len(parks) - len(parked); n < 0 || n > 1 || len(unparks) != len(parked) || len(kinds(evs, EventBudgetGrant)) != len(parked)+1 {
			t.Errorf("trial %s: %d budget_park, %d budget_parked, %d unpark, %d budget_grant events; want every park but one at the end answered, and a grant for each unpark",
				name, len(parks), len(parked), len(unparks), len(kinds(evs, EventBudgetGrant)))
		}
		other := map[string]string{"one": "two", "two": "one"}[name]
		for _, p := range parks {
			if p.Fields["for"] != other {
				t.Errorf("trial %s was parked for %v, want %s", name, p.Fields["for"], other)
			}
		}
	}
	for i, tr := range cfg.Sweep.Trials {
		spec := tr.Spec
		spec.Device, spec.RunDir = "cpu", filepath.Join(t.TempDir(), "alone")
		_, alone := trainRun(t, request(t, spec))
		var row TrialResult
		for _, r := range res.Trials {
			if r.Name == tr.Name {
				row = r
			}
		}
		if row.Summary == nil || row.Summary.ParamsSHA256 != alone.ParamsSHA256 {
			t.Errorf("trial %d (%s): params %v, the same job alone %s", i, tr.Name, row.Summary, alone.ParamsSHA256)
		}
	}
}

// TestSweepPriorities: a trial's priority: key, and --priority KEY taking
// a trial's number from its overrides; a priority that is not a number is
// refused, naming the trial.
func TestSweepPriorities(t *testing.T) {
	sw, err := ReadSweep(writeSweep(t, "base: {dataset: synthetic}\ntrials:\n  - {name: a, priority: 2, epochs: 3}\n  - {name: b, epochs: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if sw.Trials[0].Priority != 2 || sw.Trials[1].Priority != 0 {
		t.Fatalf("priorities %v, %v; want 2 and 0", sw.Trials[0].Priority, sw.Trials[1].Priority)
	}
	if err := setPriorities(sw, "epochs"); err != nil || sw.Trials[0].Priority != 3 || sw.Trials[1].Priority != 5 {
		t.Fatalf("--priority epochs: %v, priorities %v, %v", err, sw.Trials[0].Priority, sw.Trials[1].Priority)
	}
	if _, err := ReadSweep(writeSweep(t, "base: {dataset: synthetic}\ntrials:\n  - {name: a, priority: high}\n")); err == nil || !strings.Contains(err.Error(), `trial "a": priority "high": must be a number`) {
		t.Fatalf("a priority that is not a number: %v", err)
	}
	sw, _ = ReadSweep(writeSweep(t, "base: {dataset: synthetic}\ntrials:\n  - {name: a, optimizer: sgd}\n"))
	if err := setPriorities(sw, "optimizer"); !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), `trial "a"`) {
		t.Fatalf("--priority on a key that is not a number: %v", err)
	}
	// A trial that does not override the key takes the base's value.
	sw, _ = ReadSweep(writeSweep(t, "base: {dataset: synthetic, epochs: 7}\ntrials:\n  - {name: a, priority: 9}\n  - {name: b, epochs: 2}\n"))
	if err := setPriorities(sw, "epochs"); err != nil || sw.Trials[0].Priority != 7 || sw.Trials[1].Priority != 2 {
		t.Fatalf("--priority epochs with epochs in base: %v, priorities %v, %v; want 7 and 2", err, sw.Trials[0].Priority, sw.Trials[1].Priority)
	}
	if err := setPriorities(sw, "epoch"); !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), "epoch is not a setting") {
		t.Fatalf("--priority naming no setting: %v", err)
	}
}

// TestSweepInterruptedWhileWaiting: a sweep interrupted while a trial
// waits for its budget records that trial interrupted, saying it was
// waiting, and the sweep resumes it.
func TestSweepInterruptedWhileWaiting(t *testing.T) {
	cfg := sweepConfig(t, strings.Replace(budgetSweep, "epochs: 4", "epochs: 400", 1))
	cfg.Parallel = 2
	cfg.DeviceMemory = int64(float64(trialBill(t, cfg, "one")) / 0.6)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Report = func(u TrialUpdate) {
		if u.Budget != nil && u.Budget.Waiting {
			cancel()
		}
	}
	res, _ := runSweep(t, ctx, cfg)
	if res.Counts["interrupted"] != 2 {
		t.Fatalf("counts %v: %+v", res.Counts, res.Trials)
	}
	// The other trial was stopped where it stood: after some steps (its
	// checkpoint saved), or before its first.
	var waiter TrialResult
	for _, r := range res.Trials {
		if strings.HasPrefix(r.Reason, "interrupted while waiting") {
			waiter = r
		}
	}
	if waiter.Reason != "interrupted while waiting for device memory: stopped before the budget was granted; nothing was allocated or trained" {
		t.Fatalf("the waiting trial's reason: %q", waiter.Reason)
	}
	if _, err := os.Stat(filepath.Join(waiter.RunDir, rundir.SummaryFile)); err == nil {
		t.Errorf("the waiting trial has a summary; it trained nothing")
	}
	res, _ = runSweep(t, context.Background(), resumeConfig(t, cfg))
	if res.Counts["succeeded"] != 2 {
		t.Fatalf("resumed: counts %v", res.Counts)
	}
}

// trialBill is the device bytes the sweep's trial named will ask for.
func trialBill(t *testing.T, cfg Config, name string) int64 {
	t.Helper()
	return trialBillParts(t, cfg, name).DeviceBytes()
}

// trialBillParts is the bill the sweep's trial named will ask with.
func trialBillParts(t *testing.T, cfg Config, name string) trainer.Bill {
	t.Helper()
	for _, tr := range cfg.Sweep.Trials {
		if tr.Name != name {
			continue
		}
		train, test, err := tr.Spec.LoadData()
		if err != nil {
			t.Fatal(err)
		}
		plan, err := tr.Spec.Plan(train, test)
		if err != nil {
			t.Fatal(err)
		}
		dev, err := cpu.Open(cpu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		return plan.Trainer.Bill(dev)
	}
	t.Fatalf("no trial %s", name)
	return trainer.Bill{}
}

// budgetEvent is one line of a trial's events log.
type budgetEvent struct {
	Time   time.Time      `json:"time"`
	Kind   string         `json:"kind"`
	Fields map[string]any `json:"fields"`
}

func readEvents(t *testing.T, runDir string) []budgetEvent {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []budgetEvent
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e budgetEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func kinds(evs []budgetEvent, kind string) []budgetEvent {
	var out []budgetEvent
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// budgetSweep has two trials of the same size and a much larger one.
const budgetSweep = `
base:
  dataset: synthetic
  synthetic_size: 256
  epochs: 4
  batch_size: 32
  log_every: 2
  enable_graphs: true
  model: {hidden: [32]}
trials:
  - {name: one}
  - {name: two}
`

// prioritySweep has a long trial of low priority and a short one of
// high priority, which the test starts once the first holds its budget.
const prioritySweep = `
base:
  dataset: synthetic
  synthetic_size: 256
  epochs: 4
  batch_size: 32
  log_every: 2
  enable_graphs: true
  model: {hidden: [32]}
trials:
  - {name: low, epochs: 300}
  - {name: high, priority: 1}
`

// equalSweep has two long trials of the same priority and different
// seeds.
const equalSweep = `
base:
  dataset: synthetic
  synthetic_size: 256
  epochs: 60
  batch_size: 32
  log_every: 8
  enable_graphs: true
  model: {hidden: [32]}
trials:
  - {name: one}
  - {name: two, seed: 2}
`
