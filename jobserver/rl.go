package jobserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// TypeRL is the request of one half of a reinforcement-learning agent:
// its body is an RLJob, its progress messages RLProgress and its result
// an RLResult.
const TypeRL = "rl"

// The two halves of an agent.
const (
	RoleActor   = "actor"
	RoleLearner = "learner"
)

// RLJob asks a worker to be agent Agent's actor or learner. The two meet
// only in the agent's memory file, which the coordinator created.
type RLJob struct {
	Role   string     `json:"role"`
	Agent  int        `json:"agent"`
	Config dqn.Config `json:"config"`
	Memory string     `json:"memory"` // the agent's memory file
	// Dir is the agent's run directory: the learner writes its checkpoint
	// there when it stops, and reads it back when Resume is set.
	Dir     string `json:"dir"`
	Resume  bool   `json:"resume"`
	Graphs  bool   `json:"graphs"`
	MaxLead int    `json:"max_lead"` // see dqn.ActorOptions.MaxLead
	Threads int    `json:"threads"`  // CPU device threads; 0: the device's default
	// ReportMS is the interval of progress messages (default 500).
	ReportMS int `json:"report_ms"`
	// Memories are, for the shared actor (RoleSharedActor), every agent's
	// memory file, agent i's at i; it saves its worlds to WorldFile every
	// WorldSaveEvery vector steps (0: dqn.DefaultWorldSaveEvery).
	Memories       []string `json:"memories,omitempty"`
	WorldFile      string   `json:"world_file,omitempty"`
	WorldSaveEvery int      `json:"world_save_every,omitempty"`
}

// Validate reports what is wrong with the job itself (its configuration
// is checked when the actor or learner is made).
func (j RLJob) Validate() error {
	switch {
	case j.Role == RoleSharedActor && len(j.Memories) != j.Config.NumAgents:
		return fmt.Errorf("a shared actor of %d agents needs a memory file each, got %d", j.Config.NumAgents, len(j.Memories))
	case j.Role == RoleSharedActor:
		return nil
	case j.Role != RoleActor && j.Role != RoleLearner:
		return fmt.Errorf("role %q: want %q, %q or %q", j.Role, RoleActor, RoleLearner, RoleSharedActor)
	case j.Memory == "":
		return errors.New("no memory file")
	case j.Role == RoleLearner && j.Dir == "":
		return errors.New("a learner needs its agent's run directory")
	case j.Agent < 0 || j.Agent >= j.Config.NumAgents:
		return fmt.Errorf("agent %d of %d", j.Agent, j.Config.NumAgents)
	}
	return nil
}

// RLProgress is what an actor or a learner reports as it goes: its
// counters, and the episodes finished since its last report.
type RLProgress struct {
	Role         string              `json:"role"`
	EnvSteps     int                 `json:"env_steps"`     // the agent's environment steps (the buffer's transitions)
	LearnerSteps int                 `json:"learner_steps"` // the learner's published step count
	Episodes     []dqn.EpisodeRecord `json:"episodes,omitempty"`
	Evals        []RLEval            `json:"evals,omitempty"` // an actor's greedy evaluations since its last report
	Epoch        uint64              `json:"epoch"`           // the agent's epoch counter: its episodes finished, every actor's
	Epsilon      float64             `json:"epsilon"`
	Version      uint64              `json:"version"`   // the actor's weights; the learner's last publish
	Published    uint64              `json:"published"` // the newest version in the memory file
	Syncs        int64               `json:"syncs"`     // an actor's weight reads that loaded newer weights
	Publishes    int64               `json:"publishes"` // a learner's publishes
	Loss         float64             `json:"loss"`
	Waiting      bool                `json:"waiting"`
	// Replays is the half's graph replays since its last report, and
	// ReplaySeconds the device times of up to MaxReplaySamples of them,
	// drawn at random: replays come thousands a second, too many for an
	// observe message each (see replayTally).
	Replays       int64     `json:"replays,omitempty"`
	ReplaySeconds []float64 `json:"replay_seconds,omitempty"`
	// Agents is, in a shared actor's report, each agent's report as an
	// actor of its own would send it (agent i's at i); EnvSteps is then
	// the fewest steps of any agent.
	Agents []RLProgress `json:"agents,omitempty"`
}

// MaxReplaySamples is the most replay device times one progress report
// carries.
const MaxReplaySamples = 128

// Untimed is the Seconds of a Replayed that stands for a replay whose
// device time was not sampled: the replay is counted, no time recorded
// (telemetry drops negative durations).
const Untimed = -1

// ObserveReplays tells obs the replays a half's report counts: a Replayed
// for each, with its device time where it was sampled.
func ObserveReplays(obs trainer.Observer, p RLProgress) {
	for _, s := range p.ReplaySeconds {
		obs.Observe(trainer.Replayed{Seconds: s})
	}
	for range p.Replays - int64(len(p.ReplaySeconds)) {
		obs.Observe(trainer.Replayed{Seconds: Untimed})
	}
}

// RLEval is one greedy evaluation of the actor's weights (see
// dqn.EvalResult).
type RLEval struct {
	EnvSteps   int     `json:"env_steps"`
	Version    uint64  `json:"version"`
	MeanReturn float64 `json:"mean_return"`
	Episodes   int     `json:"episodes"`
	Seconds    float64 `json:"seconds"`
}

// RLResult is an actor's or a learner's answer.
type RLResult struct {
	Role         string  `json:"role"`
	EnvSteps     int     `json:"env_steps"`
	LearnerSteps int     `json:"learner_steps"`
	Loss         float64 `json:"loss"`
	Fallbacks    int     `json:"fallbacks"`
	// Interrupted: it stopped because it was cancelled, not because the
	// agent's work was done.
	Interrupted bool `json:"interrupted"`
	// Checkpoint is the learner's checkpoint file, written as it stopped.
	Checkpoint string `json:"checkpoint,omitempty"`
}

// RL runs one half of an agent through t on the named device;
// progress, when set, hears its reports, and obs, when set, the half's
// graph activity (captures, replays, fallbacks and their events) as the
// trainer's measurements. budget, when set, makes the worker ask for a
// device-memory budget (its bill: dqn.ActorBill, dqn.LearnerBill or, for
// the shared actor, SharedActorBill, and its context) before it allocates, and answers it (see Sink.Budget); a
// half cannot park.
func RL(ctx context.Context, t worker.Transport, deviceName string, j RLJob, progress func(RLProgress), obs trainer.Observer,
	budget func(BudgetRequest, BudgetReply) error) (worker.Hello, RLResult, error) {
	body, err := json.Marshal(j)
	if err != nil {
		return worker.Hello{}, RLResult{}, fmt.Errorf("worker: encoding the %s's job: %w", j.Role, err)
	}
	sink := Sink{Observer: obs, Budget: budget}.raw()
	if progress != nil {
		sink.Progress = func(body json.RawMessage) error {
			var p RLProgress
			if err := json.Unmarshal(body, &p); err != nil {
				return err
			}
			progress(p)
			return nil
		}
	}
	h, res, err := t.Call(ctx, worker.Request{Type: TypeRL, Device: deviceName, Body: body, AskBudget: budget != nil}, sink)
	if err != nil {
		return h, RLResult{}, err
	}
	var r RLResult
	if err := json.Unmarshal(res, &r); err != nil {
		return h, RLResult{}, fmt.Errorf("worker: reading the %s's answer: %w", j.Role, err)
	}
	return h, r, nil
}

// rlHalf is what serveRL needs of an actor or a learner.
type rlHalf interface {
	Capture() error
	Run(ctx context.Context) error
	Close() error
	Waiting() bool
}

// serveRL plays one half of an agent on dev until the agent's work is done
// (the actor's steps, then the stop flag for the learner), its stop flag
// is set, or ctx ends; a learner then writes its checkpoint.
func serveRL(ctx context.Context, conn *worker.Conn, j RLJob, dev device.Device, cfg Config) (RLResult, error) {
	if j.Role == RoleSharedActor {
		return serveSharedActor(ctx, conn, j, dev, cfg)
	}
	c := j.Config
	if err := c.Validate(); err != nil {
		return RLResult{}, usage(err.Error())
	}
	spec, err := c.Spec()
	if err != nil {
		return RLResult{}, usage(err.Error())
	}
	mem, err := shm.Open(j.Memory, c.Layout(spec))
	if err != nil {
		return RLResult{}, usage(err.Error())
	}
	defer mem.Close()
	shared := &dqn.Shared{Pool: cfg.Shared.Pool(), Guard: cfg.Shared.Guard()}
	// The graph activity crosses as a training job's does, one observe
	// message per measurement, except the replays, which the progress
	// reports carry; those no report carried go last, once the half has
	// closed (this defer runs after its Close).
	tally := &replayTally{next: remoteObserver{conn}}
	defer tally.flush()
	var obs trainer.Observer = tally
	res := RLResult{Role: j.Role}
	rep := &rlReporter{conn: conn, mem: mem, cfg: c, role: j.Role, now: make(chan struct{}, 1), replays: tally}
	if conn.Request().AskBudget {
		if err := askRLBudget(ctx, conn, j, dev, cfg); err != nil {
			return RLResult{}, err
		}
	}
	var half rlHalf
	var actor *dqn.Actor
	var learner *dqn.Learner
	if j.Role == RoleActor {
		actor, err = dqn.NewActor(dev, shared, mem, c, j.Agent, dqn.ActorOptions{Graphs: j.Graphs, MaxLead: j.MaxLead,
			OnEpisode: rep.episode, OnEval: rep.eval, Observer: obs})
		half, rep.actor = actor, actor
	} else {
		learner, err = dqn.NewLearner(dev, shared, mem, c, j.Agent, dqn.LearnerOptions{Graphs: j.Graphs, Logger: cfg.Logger, Observer: obs})
		half, rep.learner = learner, learner
		if err == nil && j.Resume {
			err = learner.Restore(filepath.Join(j.Dir, trainer.CheckpointFile), j.Agent)
		}
	}
	if err != nil {
		if half != nil {
			_ = half.Close()
		}
		return RLResult{}, err
	}
	defer func() {
		if err := half.Close(); err != nil {
			cfg.Logger.Warn("closing the "+j.Role+" failed", "err", err)
		}
	}()
	if err := half.Capture(); err != nil {
		return RLResult{}, err
	}
	conn.Advance("captured")
	every := time.Duration(j.ReportMS) * time.Millisecond
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	stopReports := rep.start(every, half)
	runErr := half.Run(ctx)
	stopReports()
	interrupted := ctx.Err() != nil
	if interrupted && errors.Is(runErr, context.Canceled) {
		runErr = nil
	}
	if runErr != nil {
		return RLResult{}, runErr
	}
	res.Interrupted = interrupted
	if actor != nil {
		res.EnvSteps = actor.Steps()
		if !interrupted && actor.Steps() >= c.TotalSteps {
			// The agent's work is done: its learner stops.
			mem.Stop()
		}
		return res, nil
	}
	res.LearnerSteps, res.Loss, res.Fallbacks = learner.Steps(), learner.Loss(), learner.Fallbacks()
	res.EnvSteps = int(mem.Appended())
	if err := learner.Save(j.Dir, j.Agent); err != nil {
		return RLResult{}, err
	}
	conn.Advance("checkpoint written")
	res.Checkpoint = filepath.Join(j.Dir, trainer.CheckpointFile)
	return res, nil
}

// rlReporter sends an actor's or a learner's progress at an interval and
// advances the work counter while it acts, trains or waits for the other
// half.
type rlReporter struct {
	conn    *worker.Conn
	mem     *shm.Memory
	cfg     dqn.Config
	role    string
	actor   *dqn.Actor
	learner *dqn.Learner
	replays *replayTally

	// now asks for a report at once (an evaluation: a solving one stops
	// the agent, and it must not wait for the next tick, nor be lost
	// with a process killed before it).
	now chan struct{}

	mu       sync.Mutex
	episodes []dqn.EpisodeRecord
	evals    []RLEval
	steps    int // the actor's, as its episodes were told
}

func (r *rlReporter) episode(e env.Episode, steps int) {
	r.mu.Lock()
	r.episodes = append(r.episodes, dqn.EpisodeRecord{Return: e.Return, Length: e.Length, EnvSteps: steps})
	r.steps = steps
	r.mu.Unlock()
}

func (r *rlReporter) eval(e dqn.EvalResult) {
	r.mu.Lock()
	r.evals = append(r.evals, RLEval{EnvSteps: e.EnvSteps, Version: e.Version, MeanReturn: e.MeanReturn,
		Episodes: e.Episodes, Seconds: e.Elapsed.Seconds()})
	r.mu.Unlock()
	select {
	case r.now <- struct{}{}:
	default: // one is asked for already
	}
}

// start reports every interval until the returned function is called; that
// sends a last report.
func (r *rlReporter) start(every time.Duration, half rlHalf) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		var last RLProgress
		for {
			select {
			case <-quit:
				r.report(&last, half)
				return
			case <-t.C:
				r.report(&last, half)
			case <-r.now:
				r.report(&last, half)
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

func (r *rlReporter) report(last *RLProgress, half rlHalf) {
	r.mu.Lock()
	eps, evals := r.episodes, r.evals
	r.episodes, r.evals = nil, nil
	r.mu.Unlock()
	p := RLProgress{Role: r.role, EnvSteps: int(r.mem.Appended()), LearnerSteps: int(r.mem.LearnerSteps()),
		Episodes: eps, Evals: evals, Epoch: r.mem.Epoch(), Published: r.mem.Version(), Waiting: half.Waiting()}
	p.Replays, p.ReplaySeconds = r.replays.take()
	if r.actor != nil {
		p.Version, p.Syncs, p.Epsilon = r.actor.Version(), r.actor.Syncs(), r.cfg.Epsilon(p.EnvSteps)
	} else {
		p.Version, p.Publishes, p.Loss = r.mem.Version(), r.learner.Publishes(), r.learner.Loss()
		p.LearnerSteps = r.learner.Steps()
	}
	// The work moved when this half's counter did; waiting for the other
	// half is progress too (the other is watched on its own).
	moved := p.EnvSteps != last.EnvSteps
	if r.learner != nil {
		moved = p.LearnerSteps != last.LearnerSteps
	}
	switch {
	case moved:
		r.conn.Advance(r.role + " working")
	case p.Waiting:
		r.conn.Advance(r.role + " waiting for the other half")
	}
	*last = p
	if body, err := json.Marshal(p); err == nil {
		_ = r.conn.Progress(body)
	}
}

// rlDescribe names the half a worker serves, for its log.
func rlDescribe(j RLJob) string {
	return fmt.Sprintf("agent %d %s (memory %s, pid %d)", j.Agent, j.Role, j.Memory, os.Getpid())
}

// replayTally stands between a half and the worker protocol. A half
// replays thousands of times a second, and an observe message for each
// slowed a two-agent run on two cores by a quarter; so its replays travel
// in its progress reports instead (a count, and the device times of up to
// MaxReplaySamples of them drawn at random), and the coordinator observes
// them as Replayed (ObserveReplays). Every other measurement goes at once.
type replayTally struct {
	next trainer.Observer

	mu      sync.Mutex
	count   int64
	seconds []float64
}

func (t *replayTally) Observe(m trainer.Measurement) {
	r, ok := m.(trainer.Replayed)
	if !ok {
		t.next.Observe(m)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.count++
	if !(r.Seconds >= 0) || math.IsInf(r.Seconds, 1) {
		return // counted; a time JSON cannot carry is not kept
	}
	// A reservoir: every replay of the interval is as likely to be kept.
	if len(t.seconds) < MaxReplaySamples {
		t.seconds = append(t.seconds, r.Seconds)
	} else if k := rand.Int64N(t.count); k < MaxReplaySamples {
		t.seconds[k] = r.Seconds
	}
}

// take returns the replays since the last take and the kept times.
func (t *replayTally) take() (int64, []float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, s := t.count, t.seconds
	t.count, t.seconds = 0, nil
	return n, s
}

// flush sends the replays no report carried (those the half reported as
// it closed), an observe message each.
func (t *replayTally) flush() {
	n, seconds := t.take()
	p := RLProgress{Replays: n, ReplaySeconds: seconds}
	ObserveReplays(t.next, p)
}

// askRLBudget asks for the half's bill (and the process's context) and
// waits for the grant, before the half allocates.
func askRLBudget(ctx context.Context, conn *worker.Conn, j RLJob, dev device.Device, cfg Config) error {
	bill, err := dqn.ActorBill(j.Config, dev)
	if j.Role == RoleLearner {
		bill, err = dqn.LearnerBill(j.Config, dev)
	}
	if err != nil {
		return usage(err.Error())
	}
	bill.Context = cfg.contextBytes
	return askBudget(ctx, conn, bill, dev)
}
