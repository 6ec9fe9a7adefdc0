package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/trainer"
)

const gpuResults = "testdata/gpu-results"

// TestGPUReport renders report.md from a rehearsal's results and a PyTorch
// peer's figures: the device and driver, every part, the bench's points and
// the peer's ratios, computed from the files.
func TestGPUReport(t *testing.T) {
	text, err := gpuReport(gpuResults, "gpu", "tolaria abc1234, built 2026-11-27", time.Date(2026, 11, 27, 1, 2, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	var mlp bench.Report
	if err := readJSON(filepath.Join(gpuResults, "bench-mlp.json"), &mlp); err != nil {
		t.Fatal(err)
	}
	graph := mlp.Summary.GraphStepMeanMS
	for _, want := range []string{
		"# tolaria GPU check, 2026-11-27 01:02 UTC",
		"Bundle: tolaria abc1234",
		"compute capability 8.0",
		"- Driver: CUDA 11.8, driver 580.65.06",
		"| first-light | passed |",
		"| peer | skipped |",
		"| sweep | passed |",
		"test accuracy 0.8089",
		fmt.Sprintf("| mlp (784-256-128-10 gelu cross_entropy) | 64 | %.4f | %.4f |", mlp.Summary.EagerStepMeanMS, graph),
		"| mlp (784-256-128-10 gelu cross_entropy) | 128 |",
		"| tiny (16-2 gelu cross_entropy) | 64 |",
		"PyTorch 2.11.0+cu130 (CUDA 13.0) on NVIDIA H100 80GB HBM3",
		fmt.Sprintf("| mlp | 64 | %.4f | 0.5000 | 0.2500 | failed: RuntimeError: Failed to find C compiler. Please specify via CC environment variable. | %.2fx | %.2fx |  |",
			graph, graph/0.5, graph/0.25),
		"| tiny | 64 |",
		"| 0.4000 | not run | not run |",
		"- **peer** (skipped): torch_mlp_cuda: skipped: no CUDA for PyTorch",
		"| budget | passed |",
		"| 278311936 | 268435456 | 268435456 | 278311936 | 1.000 | yes |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	for _, preset := range []string{"tiny-transformer", "transformer"} {
		var r bench.Report
		if err := readJSON(filepath.Join(gpuResults, "bench-"+preset+".json"), &r); err != nil {
			t.Fatal(err)
		}
		d := r.Decode
		for _, want := range []string{
			fmt.Sprintf("| %s (%s) | %d | %.4f | %.4f |", preset, r.Model, r.BatchSize, r.Summary.EagerStepMeanMS, r.Summary.GraphStepMeanMS),
			fmt.Sprintf("| %s | %d | %d | %d | %.4f | %.4f | %.2fx | %.4f | %.4f | %.2fx | %.3f | yes |", preset, d.Context,
				d.KernelsPerStep, d.GraphNodes, d.EagerStepMS, d.ReplayStepMS, d.EagerStepMS/d.ReplayStepMS, d.EagerDeviceBusyMS,
				d.ReplayDeviceBusyMS, d.BackToBack.Speedup, d.CaptureMS),
		} {
			if !strings.Contains(text, want) {
				t.Errorf("report lacks %q:\n%s", want, text)
			}
		}
	}
	if !strings.Contains(text, "## Decode step, replayed against eager") {
		t.Errorf("report has no decode table:\n%s", text)
	}
	if strings.Contains(text, "Rehearsal") {
		t.Error("a GPU report calls itself a rehearsal")
	}
	reh, err := gpuReport(gpuResults, "rehearsal", "", time.Now())
	if err != nil || !strings.Contains(reh, "no figure below is a GPU measurement") {
		t.Errorf("a rehearsal's report does not say its figures mean nothing (%v)", err)
	}
}

// A run cut short still gets a report, naming what it lacks.
func TestGPUReportOfARunCutShort(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "parts"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(gpuResults, "parts", "first-light.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "parts", "first-light.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	text, err := gpuReport(dir, "gpu", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"No device was opened", "| first-light | passed |", "| tests | not recorded |", "| rl | not recorded |"} {
		if !strings.Contains(text, want) {
			t.Errorf("report of a run cut short lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "## Decode step") {
		t.Errorf("report of a run cut short has a decode table:\n%s", text)
	}
}

func TestCheckTrain(t *testing.T) {
	path := filepath.Join(gpuResults, "train.json")
	if msg, err := checkTrain(path, 0.75); err != nil || !strings.Contains(msg, "test accuracy 0.8089") {
		t.Errorf("checkTrain at 0.75 = %q, %v; want a pass", msg, err)
	}
	if _, err := checkTrain(path, 0.89); err == nil || !strings.Contains(err.Error(), "test accuracy 0.8089 below 0.89") {
		t.Errorf("checkTrain at 0.89 = %v; want the accuracy named", err)
	}
	if _, err := checkTrain(filepath.Join(t.TempDir(), "none.json"), 0.5); err == nil {
		t.Error("checkTrain of a missing summary passed")
	}
}

// writeSweepDir makes a sweep directory of trials whose events hold the
// kinds given.
func writeSweepDir(t *testing.T, trials map[string][]string, state string) string {
	t.Helper()
	dir := t.TempDir()
	var rows []string
	for name, kinds := range trials {
		run := filepath.Join(dir, "trials", name)
		if err := os.MkdirAll(run, 0o755); err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, k := range kinds {
			lines = append(lines, fmt.Sprintf(`{"time":"2026-11-27T00:00:00Z","kind":%q,"fields":{}}`, k))
		}
		if err := os.WriteFile(filepath.Join(run, "events.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, fmt.Sprintf(`{"name":%q,"state":%q,"device":"cuda:0","run_dir":"trials/%s"}`, name, state, name))
	}
	res := fmt.Sprintf(`{"counts":{%q:%d},"trials":[%s]}`, state, len(trials), strings.Join(rows, ","))
	if err := os.WriteFile(filepath.Join(dir, "results.json"), []byte(res), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCheckSweep(t *testing.T) {
	parked := writeSweepDir(t, map[string][]string{
		"short": {"start", "done"}, "long-a": {"start", "budget_parked", "unpark", "done"},
		"long-b": {"start", "done"}, "big": {"start", "budget_wait", "done"},
	}, "succeeded")
	if msg, err := checkSweep(parked, 4, 1); err != nil || !strings.Contains(msg, "1 parked and 1 unparked") {
		t.Errorf("checkSweep of a sweep with a park = %q, %v", msg, err)
	}
	if _, err := checkSweep(parked, 4, 2); err == nil || !strings.Contains(err.Error(), "1 parks; want at least 2") {
		t.Errorf("checkSweep wanting two parks = %v", err)
	}
	// long-a parked for big and unparked while big still trained: the
	// room the park made went back to it at once.
	early := writeSweepDir(t, map[string][]string{"long-a": {"start"}, "big": {"start", "done"}, "short": {"start", "done"}}, "succeeded")
	events := func(name string, lines ...string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(early, "trials", name, "events.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ev := func(at, kind, fields string) string {
		return fmt.Sprintf(`{"time":"2026-11-27T00:00:%sZ","kind":%q,"fields":{%s}}`, at, kind, fields)
	}
	// big trains until 02.5; its done, written after its budget is
	// released, comes at 03.
	events("big", ev("01", "start", ""), ev("02.5", "epoch", ""), ev("03", "done", ""))
	events("short", ev("00", "start", ""), ev("00.5", "epoch", ""), ev("00.9", "done", ""))
	longA := func(unpark string) {
		events("long-a", ev("00", "start", ""), ev("01.5", "budget_park", `"for":"big"`), ev("01.6", "budget_parked", ""),
			ev(unpark, "unpark", ""), ev("09", "done", ""))
	}
	longA("01.7")
	if _, err := checkSweep(early, 3, 1); err == nil || !strings.Contains(err.Error(), "trial long-a unparked at 00:00:01.700, while trial big, which it was parked for, still trained (until 00:00:02.500)") {
		t.Errorf("checkSweep of an unpark while the trial parked for trained = %v", err)
	}
	for _, unpark := range []string{"02.7", "03.1"} {
		longA(unpark) // after big's training, before or after its done
		if msg, err := checkSweep(early, 3, 1); err != nil || !strings.Contains(msg, "1 parked and 1 unparked") {
			t.Errorf("checkSweep of an unpark at %s, after big trained = %q, %v", unpark, msg, err)
		}
	}
	// short ended while long-a was parked: that freed room of its own.
	events("short", ev("00", "start", ""), ev("01.65", "epoch", ""), ev("01.8", "done", ""))
	longA("01.7")
	if _, err := checkSweep(early, 3, 1); err != nil {
		t.Errorf("checkSweep of an unpark after another trial ended = %v", err)
	}
	// long-b parked while long-a was: room freed by another park.
	events("short", ev("00", "start", ""), ev("00.5", "epoch", ""), ev("00.9", "done", ""))
	longA("01.7")
	if _, err := checkSweep(early, 3, 1); err == nil {
		t.Error("checkSweep of an early unpark passed before the other park was added")
	}
	longB := filepath.Join(early, "trials", "long-b")
	if err := os.MkdirAll(longB, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(longB, "events.jsonl"), []byte(strings.Join([]string{ev("00", "start", ""),
		ev("01.55", "budget_park", `"for":"big"`), ev("01.6", "budget_parked", ""), ev("02.8", "unpark", ""), ev("09", "done", "")}, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := `{"counts":{"succeeded":4},"trials":[` + strings.Join([]string{
		`{"name":"long-a","state":"succeeded","device":"cuda:0","run_dir":"trials/long-a"}`,
		`{"name":"long-b","state":"succeeded","device":"cuda:0","run_dir":"trials/long-b"}`,
		`{"name":"big","state":"succeeded","device":"cuda:0","run_dir":"trials/big"}`,
		`{"name":"short","state":"succeeded","device":"cuda:0","run_dir":"trials/short"}`}, ",") + `]}`
	if err := os.WriteFile(filepath.Join(early, "results.json"), []byte(res), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := checkSweep(early, 4, 1); err != nil {
		t.Errorf("checkSweep of an unpark after another trial parked = %v", err)
	}
	events("long-a", ev("00", "start", ""), ev("01.5", "budget_park", `"for":"nobody"`), ev("01.6", "budget_parked", ""), ev("09", "done", ""))
	if _, err := checkSweep(early, 4, 1); err == nil || !strings.Contains(err.Error(), `parked for trial "nobody", which the sweep's results do not list`) {
		t.Errorf("checkSweep of a park for an unknown trial = %v", err)
	}
	failed := writeSweepDir(t, map[string][]string{"a": {"start"}}, "failed")
	if _, err := checkSweep(failed, 1, 0); err == nil || !strings.Contains(err.Error(), "trial a failed") {
		t.Errorf("checkSweep of a failed trial = %v", err)
	}
}

func TestCheckRL(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "summary.json"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"agents":[{"agent":0,"state":"succeeded","env_steps":1500,"learner_steps":500,"mean_return_100":20.5},
		{"agent":1,"state":"succeeded","env_steps":1500,"learner_steps":500,"mean_return_100":18}]}`)
	if msg, err := checkRL(dir, 2); err != nil || !strings.Contains(msg, "agent 1: 1500 steps") {
		t.Errorf("checkRL = %q, %v", msg, err)
	}
	write(`{"agents":[{"agent":0,"state":"failed","reason":"learner: not finite","env_steps":10}]}`)
	if _, err := checkRL(dir, 2); err == nil || !strings.Contains(err.Error(), "agent 0 failed") || !strings.Contains(err.Error(), "1 agents; want 2") {
		t.Errorf("checkRL of a failed agent = %v", err)
	}
}

// The sweep budget holds the trials' streams' scratch: four streams a
// trial, with the broker's headroom.
func TestSweepBudgetCountsStreamScratch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sweep.yaml")
	sweep := "base:\n  dataset: synthetic\n  synthetic_size: 256\n  batch_size: 32\n  model: {hidden: [16]}\ntrials:\n  - {name: a, epochs: 1}\n"
	if err := os.WriteFile(path, []byte(sweep), 0o644); err != nil {
		t.Fatal(err)
	}
	plain, err := sweepBudget(path, []string{"a"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	withScratch, err := sweepBudget(path, []string{"a"}, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	headroom := budget.Headroom
	if got, want := withScratch-plain, int64(float64(4<<20)*headroom); got < want-2 || got > want+2 {
		t.Errorf("the budget grew by %d bytes with 1 MiB of scratch a stream, want about %d (4 streams with headroom)", got, want)
	}
	if _, err := sweepBudget(path, []string{"nope"}, 0, 0); err == nil {
		t.Error("a trial the sweep lacks: no error")
	}
}

// The sweep budget holds each fitted trial's worker context with
// headroom: every trial's worker bills its own (the third GPU run's sweep
// computed its budget without one, and every trial was refused).
func TestSweepBudgetCountsEachTrialsContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sweep.yaml")
	sweep := "base:\n  dataset: synthetic\n  synthetic_size: 256\n  batch_size: 32\n  model: {hidden: [16]}\ntrials:\n  - {name: a, epochs: 1}\n  - {name: b, epochs: 1}\n"
	if err := os.WriteFile(path, []byte(sweep), 0o644); err != nil {
		t.Fatal(err)
	}
	var ctx int64 = 528 << 20
	plain, err := sweepBudget(path, []string{"a", "b"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	withCtx, err := sweepBudget(path, []string{"a", "b"}, 0, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := withCtx-plain, int64(2*float64(ctx)*budget.Headroom); got < want-2 || got > want+2 {
		t.Errorf("the budget of two trials grew by %d bytes with a context of %d, want about %d (one context a trial, with headroom)", got, ctx, want)
	}
}

// parkingBudget's budget, by the broker's rule (a request is granted when
// what is not granted covers its bill with headroom): the fit trials are
// granted together in any order; once the first ends, the park-for trial
// does not fit beside the rest, but alone it does. A park-for trial no
// larger than the first has no such budget.
func TestParkingBudgetForcesAPark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sweep.yaml")
	sweep := "base:\n  dataset: synthetic\n  synthetic_size: 256\n  batch_size: 32\n  model: {hidden: [64, 64]}\n" +
		"trials:\n  - {name: short, epochs: 1}\n  - {name: long-a, epochs: 5}\n  - {name: long-b, epochs: 5}\n" +
		"  - {name: big, epochs: 2, priority: 1, model: {hidden: [256, 256]}}\n"
	if err := os.WriteFile(path, []byte(sweep), 0o644); err != nil {
		t.Fatal(err)
	}
	fit := []string{"short", "long-a", "long-b"}
	for _, context := range []int64{0, 528 << 20} {
		capacity, err := parkingBudget(path, fit, "big", 1<<20, context)
		if err != nil {
			t.Fatal(err)
		}
		full, err := trialBills(path, append(slices.Clone(fit), "big"), 1<<20, context)
		if err != nil {
			t.Fatal(err)
		}
		bills := make([]int64, len(full))
		for i, b := range full {
			bills[i] = b.DeviceBytes()
		}
		fits := func(granted, need int64) bool { return capacity-granted >= withHeadroom(need) }
		for _, order := range [][]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}} {
			var granted int64
			for _, i := range order {
				if !fits(granted, bills[i]) {
					t.Errorf("context %d: budget %d does not grant %s after %d bytes granted (order %v)", context, capacity, fit[i], granted, order)
				}
				granted += bills[i]
			}
		}
		if fits(bills[1]+bills[2], bills[3]) {
			t.Errorf("context %d: budget %d grants big beside the two long trials (%d + %d): nothing would park", context, capacity, bills[1], bills[2])
		}
		if !fits(0, bills[3]) {
			t.Errorf("context %d: budget %d does not grant big alone (%d)", context, capacity, bills[3])
		}
		// The broker itself, as the sweep part meets it: the three small
		// trials granted, the short one ends, the big one asks and a long
		// one parks (keeping its context and streams' scratch); the big
		// one is granted once enough have parked.
		if parks := playSweep(t, capacity, full); parks == 0 {
			t.Errorf("context %d: budget %d: the broker parked nobody for big (bills %v)", context, capacity, bills)
		}
	}
	if _, err := parkingBudget(path, []string{"big", "short"}, "short", 0, 0); err == nil || !strings.Contains(err.Error(), "larger bill") {
		t.Errorf("a park-for trial no larger than the first: err %v, want one saying it needs a larger bill", err)
	}
}

// playSweep books bills[0..2] (short, long-a, long-b) with a broker of
// capacity bytes, releases the first, asks for bills[3] (big, priority 1)
// and parks whom the broker asks to until big is granted; it returns the
// parks.
func playSweep(t *testing.T, capacity int64, bills []trainer.Bill) int {
	t.Helper()
	b, err := budget.New(budget.Config{DeviceMemory: capacity})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var toPark []*budget.Ticket
	tickets := make([]*budget.Ticket, 3)
	for i := range 3 {
		i := i
		tk, _, granted, err := b.Ask(budget.Ask{Holder: fmt.Sprint("trial ", i), Device: "cuda:0", Bill: bills[i], Free: 1 << 40,
			Park: func(budget.Eviction) { mu.Lock(); toPark = append(toPark, tickets[i]); mu.Unlock() }})
		if err != nil || !granted {
			t.Fatalf("trial %d of the three small ones: granted %v, %v", i, granted, err)
		}
		tickets[i] = tk
		tk.Active()
	}
	tickets[0].Release()
	bigGranted := false
	big, _, granted, err := b.Ask(budget.Ask{Holder: "big", Device: "cuda:0", Bill: bills[3], Free: 1 << 40, Priority: 1,
		OnGrant: func(budget.Grant) { mu.Lock(); bigGranted = true; mu.Unlock() }})
	if err != nil || granted {
		t.Fatalf("big beside the two long trials: granted %v, %v; want it to wait", granted, err)
	}
	parks := 0
	for range 2 {
		mu.Lock()
		next := toPark
		toPark = nil
		mu.Unlock()
		for _, tk := range next {
			parks++
			tk.Parked()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !bigGranted {
		t.Errorf("big not granted after %d parks", parks)
	}
	big.Release()
	return parks
}
