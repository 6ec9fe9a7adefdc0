package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/trainer"
)

// The GPU bundle's run.sh (scripts/gpu-run.sh) has no Go and no jq where it
// runs: its checks of what each part wrote, and its report, are these
// subcommands of a binary it carries. They read files only; none opens a
// device.

// gpuParts are run.sh's parts in the order it runs them.
var gpuParts = []string{"first-light", "tests", "train", "bench", "peer", "sweep", "budget", "rl"}

// Part is one part's outcome, results/parts/NAME.json.
type Part struct {
	Name    string  `json:"part"`
	Status  string  `json:"status"` // passed, failed, skipped or "not run"
	Seconds float64 `json:"seconds"`
	Limit   float64 `json:"limit_seconds"`
	Detail  string  `json:"detail,omitempty"`
}

func newGPUCheckCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gpu-check",
		Short: "check what a part of the GPU bundle's run.sh wrote (used by run.sh)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(gpuRecordCmd(), gpuTrainCmd(), gpuSweepBudgetCmd(), gpuSweepCmd(), gpuRLCmd())
	return cmd
}

func gpuRecordCmd() *cobra.Command {
	var p Part
	var dir string
	cmd := &cobra.Command{
		Use:   "record",
		Short: "write a part's outcome to RESULTS/parts/PART.json",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if !slices.Contains(gpuParts, p.Name) {
				return usagef("--part: one of %s, got %q", strings.Join(gpuParts, ", "), p.Name)
			}
			b, err := json.MarshalIndent(p, "", "  ")
			if err != nil {
				return err
			}
			return atomicfile.WriteFile(filepath.Join(dir, "parts", p.Name+".json"), append(b, '\n'), 0o644)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "results", "results", "run.sh's results directory")
	f.StringVar(&p.Name, "part", "", "the part")
	f.StringVar(&p.Status, "status", "", "passed, failed, skipped or not run")
	f.Float64Var(&p.Seconds, "seconds", 0, "how long it ran")
	f.Float64Var(&p.Limit, "limit", 0, "its time limit")
	f.StringVar(&p.Detail, "detail", "", "why it failed or was skipped")
	return cmd
}

// gpuCheck is a check subcommand: it prints check's message, or fails
// with its error.
func gpuCheck(use, short string, flags func(*pflag.FlagSet), check func() (string, error)) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			msg, err := check()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		},
	}
	flags(cmd.Flags())
	return cmd
}

func gpuTrainCmd() *cobra.Command {
	var path string
	var bar float64
	return gpuCheck("train", "check a training summary: graphs on, replayed, test accuracy at least --min-accuracy",
		func(f *pflag.FlagSet) {
			f.StringVar(&path, "summary", "", "the run's summary.json")
			f.Float64Var(&bar, "min-accuracy", 0.89, "the test accuracy the run must reach")
		},
		func() (string, error) { return checkTrain(path, bar) })
}

// checkTrain passes a run that trained with graphs, replayed its steps,
// fell back on none and reached the accuracy bar.
func checkTrain(path string, bar float64) (string, error) {
	var s trainer.Summary
	if err := readJSON(path, &s); err != nil {
		return "", err
	}
	var problems []string
	if !s.GraphEnabled || s.GraphReplays == 0 {
		problems = append(problems, fmt.Sprintf("graphs %v with %d replays; want the steps replayed", s.GraphEnabled, s.GraphReplays))
	}
	if n := fallbackCount(s.Fallbacks); n > 0 {
		problems = append(problems, fmt.Sprintf("%d steps fell back to eager (%v)", n, s.Fallbacks))
	}
	if s.TestAccuracy < bar {
		problems = append(problems, fmt.Sprintf("test accuracy %.4f below %.2f", s.TestAccuracy, bar))
	}
	msg := fmt.Sprintf("train on %s: test accuracy %.4f (bar %.2f), %d steps (%d replays, %d eager), %.0f samples/s",
		s.Device, s.TestAccuracy, bar, s.Steps, s.GraphReplays, s.EagerSteps, s.SamplesPerSecond)
	if len(problems) > 0 {
		return "", fmt.Errorf("%s: %s", msg, strings.Join(problems, "; "))
	}
	return msg, nil
}

func fallbackCount(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func gpuSweepBudgetCmd() *cobra.Command {
	var path, fit, parkFor string
	var scratch, context int64
	return gpuCheck("sweep-budget",
		"print a --device-memory that grants the --fit trials together (their bills with the broker's headroom) and no more, or with --park-for one that also makes that trial park one of them",
		func(f *pflag.FlagSet) {
			f.StringVar(&path, "sweep", "", "the sweep file")
			f.StringVar(&fit, "fit", "", "comma-separated trial names whose bills the budget holds")
			f.Int64Var(&scratch, "stream-scratch", 0, "device bytes each stream of the trials' device holds (tolaria-worker info's stream_scratch_bytes)")
			f.StringVar(&parkFor, "park-for", "", "a trial that, arriving when the first --fit trial ends, must park one of the others: print a budget under which it does")
			f.Int64Var(&context, "context", 0, "device bytes each trial's worker process holds as its CUDA context and modules, which its bill counts (tolaria-worker info's context_bytes)")
		},
		func() (string, error) {
			if scratch < 0 {
				return "", fmt.Errorf("--stream-scratch: %d; give the bytes tolaria-worker info prints, 0 or more", scratch)
			}
			if context < 0 {
				return "", fmt.Errorf("--context: %d; give the context_bytes tolaria-worker info prints on the trials' GPU, 0 or more", context)
			}
			if parkFor != "" {
				n, err := parkingBudget(path, strings.Split(fit, ","), parkFor, scratch, context)
				return fmt.Sprint(n), err
			}
			n, err := sweepBudget(path, strings.Split(fit, ","), scratch, context)
			return fmt.Sprint(n), err
		})
}

// scratchDevice is a device whose streams each hold scratch bytes, for a
// bill computed on the CPU device for trials that run on another.
type scratchDevice struct {
	device.Device
	scratch int64
}

func (d scratchDevice) StreamScratchBytes() int64 { return d.scratch }

// budgetSlack covers the CUDA pool's rounding, which the CPU device's bill
// leaves out: every allocation rounded up to 512 bytes, a few dozen of them
// per trial.
const budgetSlack = 64 << 10

// sweepBudget is the sum of the named trials' device bills with the
// broker's headroom (budget.Headroom), computed on the CPU device
// (exact sizes) with streams that each hold scratch bytes and a worker
// context of context bytes (the trials' device's, as tolaria-worker info
// measures them there: each trial's worker bills its own context), plus
// budgetSlack for the CUDA pool's rounding: a --device-memory that grants
// those trials together and nothing more.
func sweepBudget(path string, names []string, scratch, context int64) (int64, error) {
	bills, err := trialBills(path, names, scratch, context)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, b := range bills {
		total += withHeadroom(b.DeviceBytes())
	}
	return total + budgetSlack, nil
}

func withHeadroom(b int64) int64 { return int64(float64(b) * budget.Headroom) }

// parkingBudget is a --device-memory under which the fit trials run
// together, and the trial parkFor, arriving when the first of them has
// ended, cannot be granted beside the others: the broker must park one.
// The broker grants a request when what is not granted covers its bill
// with headroom, so the budget lies between what the fit trials need
// together, whatever order they ask in (their bills, and the largest's
// headroom), and what the rest of them hold plus parkFor's bill with
// headroom; it is the middle of that window, which parkFor's bill must
// exceed the first trial's to open. Parked, the rest still hold their
// contexts and streams' scratch, so the budget must also cover those and
// parkFor's bill with headroom, or nobody would be parked.
func parkingBudget(path string, fit []string, parkFor string, scratch, context int64) (int64, error) {
	if len(fit) < 2 {
		return 0, fmt.Errorf("--fit names %d trials; a budget that forces parks needs two or more (the first ends, the rest hold theirs)", len(fit))
	}
	all, err := trialBills(path, append(slices.Clone(fit), parkFor), scratch, context)
	if err != nil {
		return 0, err
	}
	park := all[len(fit)].DeviceBytes()
	var sum, largest, resident int64
	for i, b := range all[:len(fit)] {
		sum += b.DeviceBytes()
		largest = max(largest, b.DeviceBytes())
		if i > 0 {
			// Parking frees a worker's model, not its context and
			// streams' scratch: the broker parks nobody unless parking
			// every one of the rest, each keeping those, makes room.
			resident += b.Context + b.StreamScratch
		}
	}
	low := sum + withHeadroom(largest) - largest + budgetSlack
	high := sum - all[0].DeviceBytes() + withHeadroom(park)
	low = max(low, resident+withHeadroom(park)+budgetSlack)
	if low >= high {
		return 0, fmt.Errorf("no budget both grants %s together (%d bytes with headroom) and makes %s (bill %d bytes) park one of them once %s ends (under %d bytes): give %s a larger bill",
			strings.Join(fit, ", "), low, parkFor, park, fit[0], high, parkFor)
	}
	n := (low + high) / 2
	if n < withHeadroom(park)+budgetSlack {
		return 0, fmt.Errorf("a budget of %d bytes, which makes %s park the others, is too small for it alone (%d bytes with headroom)", n, parkFor, withHeadroom(park))
	}
	return n, nil
}

// trialBills are the named trials' device bills (no headroom), computed
// on the CPU device as sweepBudget says.
func trialBills(path string, names []string, scratch, context int64) ([]trainer.Bill, error) {
	sw, err := sweep.ReadSweep(path)
	if err != nil {
		return nil, err
	}
	dev, err := cpu.Open(cpu.Config{Threads: 1})
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	var billed device.Device = dev
	if scratch > 0 {
		billed = scratchDevice{dev, scratch}
	}
	bills := make([]trainer.Bill, len(names))
	for k, name := range names {
		i := slices.IndexFunc(sw.Trials, func(t sweep.Trial) bool { return t.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%s has no trial %q", path, name)
		}
		spec := sw.Trials[i].Spec
		train, test, err := spec.LoadData()
		if err != nil {
			return nil, fmt.Errorf("trial %s: %w", name, err)
		}
		plan, err := spec.Plan(train, test)
		if err != nil {
			return nil, fmt.Errorf("trial %s: %w", name, err)
		}
		bill := plan.Trainer.Bill(billed)
		bill.Context = context
		bills[k] = bill
	}
	return bills, nil
}

func gpuSweepCmd() *cobra.Command {
	var dir string
	var trials, parks int
	return gpuCheck("sweep", "check a sweep directory: every trial succeeded, at least --min-parks parks, no trial unparked before the one it was parked for ended",
		func(f *pflag.FlagSet) {
			f.StringVar(&dir, "dir", "", "the sweep directory")
			f.IntVar(&trials, "trials", 4, "trials that must have succeeded")
			f.IntVar(&parks, "min-parks", 1, "parks the trials' events must show")
		},
		func() (string, error) { return checkSweep(dir, trials, parks) })
}

// sweepRow is what the check reads of a results.json row.
type sweepRow struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Device string `json:"device"`
	RunDir string `json:"run_dir"`
}

// checkSweep passes a sweep whose trials all succeeded, on a GPU, with at
// least minParks budget_parked events among them.
func checkSweep(dir string, trials, minParks int) (string, error) {
	var res struct {
		Counts map[string]int `json:"counts"`
		Trials []sweepRow     `json:"trials"`
	}
	if err := readJSON(filepath.Join(dir, "results.json"), &res); err != nil {
		return "", err
	}
	parks, unparks := 0, 0
	var problems []string
	times := map[string]trialTimes{}
	for _, r := range res.Trials {
		if r.State != "succeeded" {
			problems = append(problems, fmt.Sprintf("trial %s %s", r.Name, r.State))
		}
		if !strings.HasPrefix(r.Device, "cuda") {
			problems = append(problems, fmt.Sprintf("trial %s ran on %q, not a GPU", r.Name, r.Device))
		}
		run := r.RunDir
		if !filepath.IsAbs(run) {
			run = filepath.Join(dir, run)
		}
		kinds, err := eventKinds(filepath.Join(run, "events.jsonl"))
		if err != nil {
			return "", err
		}
		parks += kinds[sweep.EventBudgetParked]
		unparks += kinds[trainer.EventUnpark]
		tt, err := readTrialTimes(filepath.Join(run, "events.jsonl"))
		if err != nil {
			return "", err
		}
		times[r.Name] = tt
	}
	problems = append(problems, earlyUnparks(times)...)
	if len(res.Trials) != trials || res.Counts["succeeded"] != trials {
		problems = append(problems, fmt.Sprintf("%d trials, counts %v; want %d succeeded", len(res.Trials), res.Counts, trials))
	}
	if parks < minParks {
		problems = append(problems, fmt.Sprintf("%d parks; want at least %d", parks, minParks))
	}
	msg := fmt.Sprintf("sweep: %d trials succeeded, %d parked and %d unparked", res.Counts["succeeded"], parks, unparks)
	if len(problems) > 0 {
		return "", fmt.Errorf("%s: %s", msg, strings.Join(problems, "; "))
	}
	return msg, nil
}

// trialTimes is what the sweep check reads of a trial's events: when its
// training ended (its last event before done or error, which the trial
// writes after its budget is released), when it parked, and each park
// with whom it was for and when the trial unparked (zero if it did not).
type trialTimes struct {
	trained time.Time
	parked  []time.Time
	parks   []parkSpan
}

type parkSpan struct {
	forTrial     string
	park, unpark time.Time
}

// readTrialTimes reads a trial's events.jsonl.
func readTrialTimes(path string) (tt trialTimes, err error) {
	f, err := os.Open(path)
	if err != nil {
		return tt, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e struct {
			Time   time.Time `json:"time"`
			Kind   string    `json:"kind"`
			Fields struct {
				For string `json:"for"`
			} `json:"fields"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		n := len(tt.parks)
		switch e.Kind {
		case trainer.EventDone, trainer.EventError:
			continue
		case sweep.EventBudgetPark:
			tt.parks = append(tt.parks, parkSpan{forTrial: e.Fields.For, park: e.Time})
		case sweep.EventBudgetParked:
			tt.parked = append(tt.parked, e.Time)
		case trainer.EventUnpark:
			if n > 0 && tt.parks[n-1].unpark.IsZero() {
				tt.parks[n-1].unpark = e.Time
			}
		}
		tt.trained = e.Time
	}
	return tt, sc.Err()
}

// earlyUnparks names each trial that unparked while the trial it was
// parked for still trained. The broker keeps that trial's headroom from
// it until then; only room freed otherwise in between (another trial's
// end, or a park of the trial it was parked for or of another) lets it
// unpark sooner, and such spans are not judged.
func earlyUnparks(trials map[string]trialTimes) []string {
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(trials)) {
		for _, p := range trials[name].parks {
			f, ok := trials[p.forTrial]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("trial %s was parked for trial %q, which the sweep's results do not list", name, p.forTrial))
				continue
			case p.unpark.IsZero() || !p.unpark.Before(f.trained):
				continue
			}
			freed := false
			for other, o := range trials {
				in := func(t time.Time) bool { return t.After(p.park) && t.Before(p.unpark) }
				// (The trial parked for trains past the unpark: its own
				// end is never in the span.)
				if other != name && (slices.ContainsFunc(o.parked, in) || in(o.trained)) {
					freed = true
				}
			}
			if !freed {
				problems = append(problems, fmt.Sprintf("trial %s unparked at %s, while trial %s, which it was parked for, still trained (until %s)",
					name, p.unpark.Format("15:04:05.000"), p.forTrial, f.trained.Format("15:04:05.000")))
			}
		}
	}
	return problems
}

// eventKinds counts the kinds of an events.jsonl file.
func eventKinds(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kinds := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e struct {
			Kind string `json:"kind"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			kinds[e.Kind]++
		}
	}
	return kinds, sc.Err()
}

func gpuRLCmd() *cobra.Command {
	var dir string
	var agents int
	return gpuCheck("rl", "check an rl run: every agent succeeded on a GPU",
		func(f *pflag.FlagSet) {
			f.StringVar(&dir, "dir", "", "the rl run directory")
			f.IntVar(&agents, "agents", 2, "agents that must have succeeded")
		},
		func() (string, error) { return checkRL(dir, agents) })
}

// checkRL passes a run whose agents all succeeded and stepped.
func checkRL(dir string, agents int) (string, error) {
	var s struct {
		Agents []struct {
			Agent        int     `json:"agent"`
			State        string  `json:"state"`
			Reason       string  `json:"reason"`
			EnvSteps     int     `json:"env_steps"`
			LearnerSteps int     `json:"learner_steps"`
			MeanReturn   float64 `json:"mean_return_100"`
		} `json:"agents"`
	}
	if err := readJSON(filepath.Join(dir, "summary.json"), &s); err != nil {
		return "", err
	}
	var problems, parts []string
	for _, a := range s.Agents {
		if a.State != rl.AgentSucceeded || a.EnvSteps == 0 || a.LearnerSteps == 0 {
			problems = append(problems, fmt.Sprintf("agent %d %s after %d environment and %d learner steps %s",
				a.Agent, a.State, a.EnvSteps, a.LearnerSteps, a.Reason))
		}
		parts = append(parts, fmt.Sprintf("agent %d: %d steps, mean return %.1f", a.Agent, a.EnvSteps, a.MeanReturn))
	}
	if len(s.Agents) != agents {
		problems = append(problems, fmt.Sprintf("%d agents; want %d", len(s.Agents), agents))
	}
	msg := "rl: " + strings.Join(parts, "; ")
	if len(problems) > 0 {
		return "", fmt.Errorf("%s: %s", msg, strings.Join(problems, "; "))
	}
	return msg, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// readParts reads every part's outcome that run.sh recorded, in run order.
func readParts(dir string) ([]Part, error) {
	var parts []Part
	for _, name := range gpuParts {
		var p Part
		err := readJSON(filepath.Join(dir, "parts", name+".json"), &p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	return parts, nil
}

var driverVersionRE = regexp.MustCompile(`Driver Version:\s*(\S+)`)

// nvidiaDriver is the driver's version as nvidia-smi prints it, or "".
func nvidiaDriver(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "nvidia-smi.txt"))
	if err != nil {
		return ""
	}
	if m := driverVersionRE.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// benchPoints reads run.sh's bench reports: a preset's batch 64 (the
// report's own batch) and its sweep points.
func benchPoints(dir, preset string) (desc string, points []bench.Point, err error) {
	var r bench.Report
	if err := readJSON(filepath.Join(dir, "bench-"+preset+".json"), &r); err != nil {
		return "", nil, err
	}
	points = append([]bench.Point{{BatchSize: r.Summary.BatchSize, Summary: r.Summary}}, r.Sweep...)
	return r.Model, points, nil
}
