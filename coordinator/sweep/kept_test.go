package sweep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// TestReuseWorkersPoolsLaterTrialsBitwise: the same trials with and
// without --reuse-workers end with the same parameters, trial by trial;
// without, every capture is cold; with, the trials of one shape start
// one after another (a, b, d, then c of another model), one worker process
// serves them in turn (each trial's worker.log says which request of it
// the trial was), and a trial after one of its shape (b and d) has every
// capture pooled.
func TestReuseWorkersPoolsLaterTrialsBitwise(t *testing.T) {
	fresh := sweepConfig(t, testSweep)
	fresh.Parallel = 1
	apart, _ := runSweep(t, context.Background(), fresh)
	reuse := sweepConfig(t, testSweep)
	reuse.Parallel, reuse.ReuseWorkers = 1, true
	kept, _ := runSweep(t, context.Background(), reuse)
	if kept.Counts["succeeded"] != 4 || apart.Counts["succeeded"] != 4 {
		t.Fatalf("counts: %v with reuse, %v without", kept.Counts, apart.Counts)
	}
	byName := map[string]TrialResult{}
	for _, r := range apart.Trials {
		byName[r.Name] = r
	}
	for _, r := range kept.Trials {
		alone := byName[r.Name]
		if r.Summary.ParamsSHA256 != alone.Summary.ParamsSHA256 {
			t.Errorf("trial %s: parameters %s with --reuse-workers, %s without", r.Name, r.Summary.ParamsSHA256, alone.Summary.ParamsSHA256)
		}
		if alone.Summary.CapturePooled != 0 {
			t.Errorf("trial %s without reuse: %d pooled captures, want none", r.Name, alone.Summary.CapturePooled)
		}
		want := 0
		if r.Name == "b" || r.Name == "d" {
			want = r.Summary.Captures
		}
		if r.Summary.Captures == 0 || r.Summary.CapturePooled != want {
			t.Errorf("trial %s with reuse: %d of %d captures pooled, want %d", r.Name, r.Summary.CapturePooled, r.Summary.Captures, want)
		}
		log, err := os.ReadFile(filepath.Join(r.RunDir, "worker.log"))
		request := map[string]string{"a": "started", "b": "kept: request 2", "d": "kept: request 3", "c": "kept: request 4"}[r.Name]
		if err != nil || !strings.Contains(string(log), request) {
			t.Errorf("trial %s: worker.log %q, %v; want %q", r.Name, log, err, request)
		}
	}
}

// sideBySideSweep is two shapes of two trials each, listed alternately:
// a and c of one model, b and d of another.
const sideBySideSweep = smallBase + `trials:
  - {name: a, lr: 0.0001}
  - {name: b, lr: 0.003, model: {hidden: [16]}}
  - {name: c, lr: 0.01}
  - {name: d, lr: 0.03, model: {hidden: [16]}}
`

// orderedLauncher is the local launcher whose Release of a trial's worker
// waits until the workers of the trials after names (by index) have been
// released. A sweep releases a trial's worker once the trial has ended
// and its kept worker is idle again, and frees its slot after: a trial so
// frees its slot only after those trials have ended, however fast it
// trained, which makes the order of the trials' ends one a test can rely
// on.
type orderedLauncher struct {
	launch.Launcher
	after map[int][]int
	mu    sync.Mutex
	ended map[int]chan struct{}
}

// endOf is closed once trial i's worker has been released.
func (o *orderedLauncher) endOf(i int) chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended == nil {
		o.ended = map[int]chan struct{}{}
	}
	if o.ended[i] == nil {
		o.ended[i] = make(chan struct{})
	}
	return o.ended[i]
}

func (o *orderedLauncher) Release(ctx context.Context, w launch.Worker) {
	for _, j := range o.after[w.Index] {
		select {
		case <-o.endOf(j):
		case <-ctx.Done():
		}
	}
	o.Launcher.Release(ctx, w)
	ended := o.endOf(w.Index)
	select {
	case <-ended: // released before (the sweep releases every worker as it ends)
	default:
		close(ended)
	}
}

// TestReuseWorkersPoolEachShapeSideBySide: at --parallel 2, with two
// shapes of two trials each listed alternately, the two shapes start side
// by side (a and b, on two fresh workers), and each shape's second trial
// (c, d) runs on the kept worker its first trial left idle, every capture
// pooled, with the parameters of the same sweep without reuse; whichever
// of a and b ends first, its slot takes its own shape's next trial. Each
// second trial's slot is freed only after both first trials have ended
// (orderedLauncher), so no trial is left for a slot but one of a shape
// whose worker is idle.
func TestReuseWorkersPoolEachShapeSideBySide(t *testing.T) {
	fresh := sweepConfig(t, sideBySideSweep)
	fresh.Parallel = 2
	apart, _ := runSweep(t, context.Background(), fresh)
	reuse := sweepConfig(t, sideBySideSweep)
	reuse.Parallel, reuse.ReuseWorkers = 2, true
	ordered := &orderedLauncher{after: map[int][]int{2: {0, 1}, 3: {0, 1}}}
	reuse.Launch = launch.Kind{Name: launch.LocalName, New: func(ctx context.Context, c launch.Config) (launch.Launcher, error) {
		l, err := launch.Local().New(ctx, c)
		ordered.Launcher = l
		return ordered, err
	}}
	kept, _ := runSweep(t, context.Background(), reuse)
	if kept.Counts["succeeded"] != 4 || apart.Counts["succeeded"] != 4 {
		t.Fatalf("counts: %v with reuse, %v without", kept.Counts, apart.Counts)
	}
	byName := map[string]TrialResult{}
	for _, r := range apart.Trials {
		byName[r.Name] = r
	}
	logs := map[string]string{}
	for _, r := range kept.Trials {
		if r.Summary.ParamsSHA256 != byName[r.Name].Summary.ParamsSHA256 {
			t.Errorf("trial %s: parameters %s with --reuse-workers, %s without", r.Name, r.Summary.ParamsSHA256, byName[r.Name].Summary.ParamsSHA256)
		}
		want := 0
		if r.Name == "c" || r.Name == "d" {
			want = r.Summary.Captures
		}
		if r.Summary.Captures == 0 || r.Summary.CapturePooled != want {
			t.Errorf("trial %s with reuse at --parallel 2: %d of %d captures pooled, want %d", r.Name, r.Summary.CapturePooled, r.Summary.Captures, want)
		}
		raw, err := os.ReadFile(filepath.Join(r.RunDir, "worker.log"))
		if err != nil {
			t.Fatal(err)
		}
		logs[r.Name] = string(raw)
	}
	// Each second trial was its first trial's worker's second request.
	for _, pair := range [][2]string{{"a", "c"}, {"b", "d"}} {
		pid := workerPID(logs[pair[0]])
		if pid == "" || !strings.Contains(logs[pair[0]], "started") || !strings.Contains(logs[pair[1]], "pid "+pid+" kept: request 2") {
			t.Errorf("trial %s did not run second on trial %s's worker (pid %q):\n%s\n%s", pair[1], pair[0], pid, logs[pair[0]], logs[pair[1]])
		}
	}
}

// workerPID is the process id the first header of a worker.log names.
func workerPID(log string) string {
	_, rest, ok := strings.Cut(log, " pid ")
	if !ok {
		return ""
	}
	pid, _, _ := strings.Cut(rest, " ")
	return pid
}

func TestReuseWorkersIsLocalOnly(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.ReuseWorkers, cfg.Launch = true, launch.Slurm()
	err := cfg.Validate()
	if !errors.Is(err, refusal.ErrConfig) || !field.Is(err, "reuse_workers") || !strings.Contains(err.Error(), "slurm") {
		t.Fatalf("--reuse-workers with the slurm launcher: %v, want a refusal naming reuse_workers", err)
	}
}

// grantedBill is the bill of a trial's (last) budget grant, from its
// events, and the bytes booked on its device with that grant.
func grantedBill(t *testing.T, runDir string) (trainer.Bill, int64) {
	t.Helper()
	grants := kinds(readEvents(t, runDir), EventBudgetGrant)
	if len(grants) == 0 {
		t.Fatalf("%s: no budget grant", runDir)
	}
	g := grants[len(grants)-1]
	raw, _ := json.Marshal(g.Fields["bill"])
	var bill trainer.Bill
	if err := json.Unmarshal(raw, &bill); err != nil {
		t.Fatal(err)
	}
	booked, _ := g.Fields["granted"].(float64)
	return bill, int64(booked)
}

// TestReuseWorkersBookIdleWorkers: between two trials, the kept worker's
// context, as the worker measured it, and graph pool's workspace (on the
// CPU device budget.IdleBill of its trial's bill) stay booked on its device as an idle kept worker's, visible in the
// books and in a budget_kept event; the next trial on it has its bill
// booked once, not on top of the idle booking, and once the sweep ends
// and the worker has closed, nothing is booked.
func TestReuseWorkersBookIdleWorkers(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.Parallel, cfg.ReuseWorkers = 1, true
	var s *Run
	var mu sync.Mutex
	idle := map[string]budget.Books{} // by trial, once it ended
	cfg.Report = func(u TrialUpdate) {
		if u.Result != nil {
			mu.Lock()
			idle[u.Trial] = s.broker.Books("cpu")
			mu.Unlock()
		}
	}
	s, err := Prepare(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(context.Background())
	if err != nil || res.Counts["succeeded"] != 4 {
		t.Fatalf("counts %v, %v", res.Counts, err)
	}
	for _, r := range res.Trials {
		bill, booked := grantedBill(t, r.RunDir)
		if booked != bill.DeviceBytes() {
			t.Errorf("trial %s: %d bytes booked with its grant, want its bill's %d alone", r.Name, booked, bill.DeviceBytes())
		}
		want := budget.IdleBill(bill).DeviceBytes()
		if bk := idle[r.Name]; want == 0 || bk.Idle != 1 || bk.Holders != 1 || bk.IdleBytes != want || bk.Granted != want {
			t.Errorf("trial %s ended: books %+v; want its kept worker's %d bytes (context and pool workspace) booked, idle", r.Name, bk, want)
		}
		// The worker measured what it holds beyond the pool's workspace
		// (on the CPU device nothing referenced: IdleBill's figure).
		kept := kinds(readEvents(t, r.RunDir), EventBudgetKept)
		if len(kept) != 1 || kept[0].Fields["bytes"] != float64(want) || kept[0].Fields["measured"] != true {
			t.Errorf("trial %s: budget_kept events %v; want one of %d bytes, measured by the worker", r.Name, kept, want)
		}
	}
	if bk := s.broker.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 || bk.Idle != 0 {
		t.Errorf("books once the sweep ended: %+v; want the kept worker's booking released", bk)
	}
}

// reclaimSweep has a small trial and a larger one of another shape.
const reclaimSweep = smallBase + `trials:
  - {name: small}
  - {name: big, model: {hidden: [64]}}
`

// TestReuseWorkersReclaimIdleWorkerForRoom: two trials at once on a
// device whose --device-memory fits the big one alone but not beside the
// small one's kept worker, idle. The big trial waits while the small one
// runs (never parked: it has not held its budget the minimum residence);
// when the small trial ends, its kept worker's booking is reclaimed (the
// worker closed) and the big trial is granted with nothing else booked,
// and ends with exactly the parameters of the same job run alone.
func TestReuseWorkersReclaimIdleWorkerForRoom(t *testing.T) {
	cfg := sweepConfig(t, reclaimSweep)
	cfg.Parallel, cfg.ReuseWorkers, cfg.MinResidence = 2, true, time.Hour
	var logs bytes.Buffer
	var logMu sync.Mutex
	cfg.Logger = slog.New(slog.NewTextHandler(&lockedWriter{mu: &logMu, w: &logs}, nil))
	small := budget.IdleBill(trialBillParts(t, cfg, "small")).DeviceBytes()
	big := trialBill(t, cfg, "big")
	// The big trial fits alone, with headroom, but not beside half the
	// small one's kept worker.
	cfg.DeviceMemory = int64(float64(big)*budget.Headroom) + small/2
	t.Setenv(startAfterEnv, "big=small")
	res, s := runSweep(t, context.Background(), cfg)
	if res.Counts["succeeded"] != 2 {
		t.Fatalf("counts %v: %+v", res.Counts, res.Trials)
	}
	logMu.Lock()
	log := logs.String()
	logMu.Unlock()
	if !strings.Contains(log, "kept worker") || !strings.Contains(log, "to make room for another") || !strings.Contains(log, "for=big") {
		t.Errorf("the sweep's log does not say the small trial's kept worker was closed for big:\n%s", log)
	}
	smallEvents, bigEvents := readEvents(t, filepath.Join(cfg.Dir, "small")), readEvents(t, filepath.Join(cfg.Dir, "big"))
	if len(kinds(smallEvents, EventBudgetKept)) != 1 || len(kinds(smallEvents, EventBudgetPark)) != 0 {
		t.Errorf("the small trial's events: %v; want its worker kept, never parked", smallEvents)
	}
	if len(kinds(bigEvents, EventBudgetWait)) != 1 || len(kinds(bigEvents, EventBudgetGrant)) != 1 {
		t.Fatalf("the big trial's budget events: %v; want a wait, then a grant", bigEvents)
	}
	if _, booked := grantedBill(t, filepath.Join(cfg.Dir, "big")); booked != big {
		t.Errorf("the big trial was granted with %d bytes booked on the device, want its own %d alone", booked, big)
	}
	if bk := s.broker.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 {
		t.Errorf("books once the sweep ended: %+v", bk)
	}
	spec := cfg.Sweep.Trials[1].Spec
	spec.Device, spec.RunDir = "cpu", filepath.Join(t.TempDir(), "alone")
	_, alone := trainRun(t, request(t, spec))
	for _, r := range res.Trials {
		if r.Name == "big" && (r.Summary == nil || r.Summary.ParamsSHA256 != alone.ParamsSHA256) {
			t.Errorf("the big trial's params %v, the same job alone %s", r.Summary, alone.ParamsSHA256)
		}
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// countingLauncher is the local launcher, recording for each attempt it
// starts whether a kept worker serves it.
type countingLauncher struct {
	launch.Launcher
	mu   sync.Mutex
	kept []bool
}

func (c *countingLauncher) Start(ctx context.Context, w launch.Worker, sl launch.Slot, n int) (*launch.Handle, error) {
	c.mu.Lock()
	c.kept = append(c.kept, w.Kept)
	c.mu.Unlock()
	return c.Launcher.Start(ctx, w, sl, n)
}

// TestReuseWorkersProbeOnlyFreshWorkers: the sweep tells the launcher
// which attempts a kept worker, its device already open, serves, and the
// local launcher probes a CUDA slot's GPU only before the others (see
// launch's TestLocalProbesOnlyFreshWorkers): with --reuse-workers, one
// slot and four trials, the first attempt is a fresh worker's and the
// three after it are the kept worker's; without, all four are fresh.
func TestReuseWorkersProbeOnlyFreshWorkers(t *testing.T) {
	for _, reuse := range []bool{false, true} {
		cfg := sweepConfig(t, testSweep)
		cfg.Parallel, cfg.ReuseWorkers = 1, reuse
		counting := &countingLauncher{}
		cfg.Launch = launch.Kind{Name: launch.LocalName, New: func(ctx context.Context, c launch.Config) (launch.Launcher, error) {
			l, err := launch.Local().New(ctx, c)
			counting.Launcher = l
			return counting, err
		}}
		res, _ := runSweep(t, context.Background(), cfg)
		if res.Counts["succeeded"] != 4 {
			t.Fatalf("reuse %v: counts %v", reuse, res.Counts)
		}
		probed := 0
		for _, k := range counting.kept {
			if !k {
				probed++
			}
		}
		want := map[bool]int{false: 4, true: 1}[reuse]
		if len(counting.kept) != 4 || probed != want || (reuse && counting.kept[0]) {
			t.Errorf("reuse %v: attempts served by a kept worker %v; want %d of 4 fresh (probed on a GPU), the first among them", reuse, counting.kept, want)
		}
	}
}

// keptSetUp is the reclaim tests' device: a broker of 1000 bytes on the
// CPU, no kept worker yet, and a trial bill of 500 at work (300 idle).
func keptSetUp(t *testing.T) (*budget.Broker, *keptWorkers, *slog.Logger, launch.Slot, trainer.Bill, *asks) {
	t.Helper()
	b, err := budget.New(budget.Config{DeviceMemory: 1000})
	if err != nil {
		t.Fatal(err)
	}
	bill := trainer.Bill{Parameters: 200, Gradients: 300}
	return b, &keptWorkers{}, slog.New(slog.DiscardHandler), launch.Slot{Device: "cpu", GPU: -1}, bill, &asks{t: t, b: b}
}

// TestKeptWorkersGiveUpTheirBookingWhenReclaimed: the broker reclaims a
// kept worker's idle booking whenever it stands: an idle worker is closed
// in the background and its booking released; one whose trial is ending
// is closed when given back; one already serving its next trial is left
// to it, whose request continues the booking, and is closed only when the
// broker reclaims the booking of that trial's end.
func TestKeptWorkersGiveUpTheirBookingWhenReclaimed(t *testing.T) {
	b, w, log, sl, bill, asks := keptSetUp(t)
	ask := func(holder string, bytes int64, continues *budget.Ticket) *budget.Ticket {
		t.Helper()
		bl := trainer.Bill{Parameters: bytes}
		if bytes == 0 {
			bl = bill
		}
		return asks.ask(holder, bl, continues)
	}
	isGranted := asks.granted
	newWorker := func(name string) *keptWorker {
		kw := &keptWorker{k: &worker.Kept{}, name: name, device: sl.String()}
		w.all = append(w.all, kw)
		return kw
	}
	end := func(kw *keptWorker, trial *budget.Ticket) {
		w.end(kw, func() *budget.Ticket {
			return trial.Keep(budget.Idle{Holder: kw.name, Bill: budget.IdleBill(bill), Reclaim: func(e budget.Eviction) { w.reclaim(kw, e, log) }})
		})
	}

	// Idle: closed in the background for x, which is then granted.
	one := newWorker("one")
	end(one, ask("a", 0, nil))
	w.give(one)
	if bk := b.Books("cpu"); bk.Idle != 1 || bk.Granted != 300 || len(w.idle) != 1 {
		t.Fatalf("one idle: books %+v, %d idle", bk, len(w.idle))
	}
	x := ask("x", 800, nil)
	w.closing.Wait()
	if bk := b.Books("cpu"); !isGranted("x") || bk.Idle != 0 || bk.Granted != 800 || len(w.idle) != 0 || len(w.all) != 0 {
		t.Fatalf("x asked beside the idle worker: granted %v, books %+v, %d idle, %d kept; want the worker closed for x", isGranted("x"), bk, len(w.idle), len(w.all))
	}
	x.Release()

	// Ending: y waits while the trial runs; as it ends, the booking is
	// reclaimed, and the worker closed when given back.
	two := newWorker("two")
	trial := ask("b", 0, nil)
	y := ask("y", 800, nil)
	end(two, trial)
	if isGranted("y") || !two.retire {
		t.Fatalf("the trial ended: y granted %v, worker to close %v; want y to wait for the worker to close", isGranted("y"), two.retire)
	}
	w.give(two)
	if !isGranted("y") || len(w.idle) != 0 || len(w.all) != 0 {
		t.Fatalf("the worker given back: y granted %v, %d idle, %d kept", isGranted("y"), len(w.idle), len(w.all))
	}
	y.Release()

	// Serving: the worker is taken for c before z asks; c's request
	// continues the booking, so the worker stays until c ends.
	three := newWorker("three")
	end(three, ask("c0", 0, nil))
	w.give(three)
	if got := w.take(sl, shapeOf(job.Spec{})); got != three {
		t.Fatalf("took %v, want the idle worker", got)
	}
	z := ask("z", 800, nil)
	c := ask("c", 0, w.continued(three))
	if bk := b.Books("cpu"); !isGranted("c") || isGranted("z") || bk.Granted != 500 || bk.Idle != 0 || three.retire {
		t.Fatalf("c on the kept worker: granted %v, z %v, books %+v, to close %v; want c's bill booked once, z waiting", isGranted("c"), isGranted("z"), bk, three.retire)
	}
	end(three, c)
	w.give(three)
	if !isGranted("z") || len(w.all) != 0 {
		t.Fatalf("c ended: z granted %v, %d kept; want the worker closed for z", isGranted("z"), len(w.all))
	}
	z.Release()
	w.closeAll()
	if bk := b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 {
		t.Fatalf("books at the end: %+v", bk)
	}
}

// TestKeptWorkerClosedWhenItsReclaimedBookingWasNeverContinued: the
// broker reclaims the idle booking of a kept worker already taken for its
// next trial, and that trial's attempt fails before its request is made
// (its start or preparation failed: no request continues the booking, no
// end). Given back, the worker is closed and its booking released, so the
// request that waits for the room is granted; kept idle, the booking
// would stay "being reclaimed" and the broker would evict nobody else on
// the device again.
func TestKeptWorkerClosedWhenItsReclaimedBookingWasNeverContinued(t *testing.T) {
	b, w, log, sl, bill, asks := keptSetUp(t)
	var mu sync.Mutex
	reclaims := 0
	ask := func(holder string, bl trainer.Bill) *budget.Ticket { t.Helper(); return asks.ask(holder, bl, nil) }
	isGranted := asks.granted
	kw := &keptWorker{k: &worker.Kept{}, name: "kept", device: sl.String()}
	w.all = append(w.all, kw)
	first := ask("first", bill)
	w.end(kw, func() *budget.Ticket {
		return first.Keep(budget.Idle{Holder: kw.name, Bill: budget.IdleBill(bill), Reclaim: func(e budget.Eviction) {
			mu.Lock()
			reclaims++
			mu.Unlock()
			w.reclaim(kw, e, log)
		}})
	})
	w.give(kw)
	if got := w.take(sl, shapeOf(job.Spec{})); got != kw {
		t.Fatalf("took %v, want the idle worker", got)
	}
	y := ask("y", trainer.Bill{Parameters: 800})
	if bk := b.Books("cpu"); reclaims != 1 || isGranted("y") || bk.Idle != 1 {
		t.Fatalf("y asked beside the taken worker: %d reclaims, y granted %v, books %+v; want the booking reclaimed once, y waiting", reclaims, isGranted("y"), bk)
	}
	// The attempt fails before its trial's request: given back without end.
	w.give(kw)
	if bk := b.Books("cpu"); !isGranted("y") || bk.Idle != 0 || bk.Granted != 800 || len(w.idle) != 0 || len(w.all) != 0 {
		t.Fatalf("the worker given back after a failed attempt: y granted %v, books %+v, %d idle, %d kept; want the worker closed and y granted", isGranted("y"), bk, len(w.idle), len(w.all))
	}
	y.Release()
	w.closeAll()
	if bk := b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 {
		t.Fatalf("books at the end: %+v", bk)
	}
}

// grantReply answers a holder's request in the sweep's tests: it notes
// grants and refuses nothing else.
type grantReply struct{ granted int }

func (r *grantReply) Grant(jobserver.BudgetGrant) error { r.granted++; return nil }
func (r *grantReply) Refuse(string) error               { return nil }
func (r *grantReply) Park() error                       { return nil }
func (r *grantReply) Unpark() error                     { return nil }

// TestKeptWorkerThatClosedItsDeviceIsNotKept: a trial on a kept worker
// that closed its device as the trial ended (the answer's device_closed)
// leaves nothing booked, and the worker, holding nothing worth keeping,
// is closed when given back; one that says what it holds is kept idle,
// that booked.
func TestKeptWorkerThatClosedItsDeviceIsNotKept(t *testing.T) {
	for _, closed := range []bool{false, true} {
		b, err := budget.New(budget.Config{DeviceMemory: 1000})
		if err != nil {
			t.Fatal(err)
		}
		w := &keptWorkers{}
		kw := &keptWorker{k: &worker.Kept{}, name: "kept worker 1 on cpu", device: "cpu"}
		w.all = append(w.all, kw)
		s := &budgetSink{tb: &TrialBudget{Broker: b, Trial: "a", Device: "cpu"}, kept: kw, workers: w, sweepLog: slog.New(slog.DiscardHandler)}
		r := &grantReply{}
		bill := trainer.Bill{Parameters: 300, Gradients: 100, Workspace: 20, Context: 30}
		if err := s.holder().Ask(jobserver.BudgetRequest{Bill: bill, Device: "cpu", Free: 1 << 30}, r); err != nil || r.granted != 1 {
			t.Fatalf("closed %v: the trial's request: granted %d, %v", closed, r.granted, err)
		}
		if closed {
			s.DeviceClosed()
		} else {
			s.Held(30)
		}
		s.Release()
		w.give(kw)
		bk := b.Books("cpu")
		switch {
		case closed && (kw.booking != nil || bk.Granted != 0 || bk.Holders != 0 || len(w.idle) != 0 || len(w.all) != 0):
			t.Fatalf("a worker that closed its device: books %+v, %d idle, %d kept; want nothing booked and the worker closed", bk, len(w.idle), len(w.all))
		case !closed && (kw.booking == nil || bk.Idle != 1 || bk.IdleBytes != 150 || len(w.idle) != 1):
			t.Fatalf("a worker that kept its device: books %+v, %d idle; want its 150 bytes booked, idle", bk, len(w.idle))
		}
		w.closeAll()
		if bk := b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 {
			t.Fatalf("closed %v: books at the end: %+v", closed, bk)
		}
	}
}

// asks asks a broker for holders' budgets on the CPU and remembers which
// were granted, at once or later.
type asks struct {
	t  *testing.T
	b  *budget.Broker
	mu sync.Mutex
	ok map[string]bool
}

func (a *asks) ask(holder string, bl trainer.Bill, continues *budget.Ticket) *budget.Ticket {
	a.t.Helper()
	grant := func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.ok == nil {
			a.ok = map[string]bool{}
		}
		a.ok[holder] = true
	}
	tk, _, now, err := a.b.Ask(budget.Ask{Holder: holder, Device: "cpu", Bill: bl, Free: 1 << 40, Continues: continues,
		OnGrant: func(budget.Grant) { grant() }})
	if err != nil {
		a.t.Fatal(err)
	}
	if now {
		grant()
	}
	return tk
}

func (a *asks) granted(holder string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ok[holder]
}
