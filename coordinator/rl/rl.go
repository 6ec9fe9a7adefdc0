// Package rl runs reinforcement learning for tolaria rl: each agent's
// actor and learner in worker processes that a launcher starts, meeting in
// the agent's memory file, with the run's directory, events and summaries.
// It imports the launcher and the run directory, no other activity.
package rl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/rl/shm"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// Files of a reinforcement-learning run. The run directory holds
// config.yaml, summary.json (every agent's) and one directory per agent
// (AgentDir) with its events, its learner's checkpoint, the saved replay
// buffer, its summary.json and the actor's and learner's worker logs.
const (
	ReplayFile = "replay.buf"
	ActorLog   = "actor.log"
	LearnerLog = "learner.log"
	// MeanEpisodes is the window of an agent's mean training return
	// (AgentStatus.MeanReturn). What solves the run's environment is its
	// goal (dqn.Config.Goal), a mean over 100 episodes on every task.
	MeanEpisodes = 100
)

// Event kinds of an agent's events.jsonl, which is written through
// telemetry.EventLog as a training run's is (time, kind, fields; every
// event's fields name its agent). Its halves add the graph events a
// training run writes, trainer.EventCapture and trainer.EventFallback,
// with their role and graph among the fields.
const (
	EventAgentStart   = trainer.EventStart // the agent starts or resumes
	EventWorker       = "worker"           // a half's worker said hello
	EventEpisode      = "episode"          // the actor finished an episode
	EventEval         = "eval"             // a greedy evaluation
	EventActorRestart = "actor_restart"    // the actor failed and is started again
	EventAgentEnd     = "end"              // the agent ended, with its state
)

// Agent states.
const (
	AgentStarting    = "starting"
	AgentRunning     = telemetry.RLStateRunning // the alerts ask for it
	AgentSucceeded   = "succeeded"
	AgentFailed      = "failed"
	AgentInterrupted = "interrupted"
)

// NewMetrics makes a run's registry and registers its families on it:
// training's graph families with an agent label (see
// telemetry.NewAgentMetrics), and the run's own (Request.Metrics).
func NewMetrics(version string) (*telemetry.Metrics, *telemetry.RLMetrics, error) {
	m := telemetry.NewAgentMetrics(version)
	rl, err := m.RL([]string{AgentStarting, AgentRunning, AgentSucceeded, AgentFailed, AgentInterrupted})
	if err != nil {
		return nil, nil, err
	}
	return m, rl, nil
}

// Request is one reinforcement-learning run: Config.NumAgents agents,
// each an actor process and a learner process meeting in the agent's
// memory file. The coordinator creates and saves the memory files and
// supervises the processes; it never opens a device.
type Request struct {
	Config dqn.Config
	// ConfigYAML is the resolved configuration, written to the run
	// directory's config.yaml.
	ConfigYAML []byte
	Dir        string // run directory; with Resume, the run to continue
	Resume     bool
	Device     string // cpu (default) or cuda: each worker opens its own
	// GPUs are, with Device cuda, the GPUs to place the agents on: agent
	// i's learner, and its actor beside it, on GPUs[i % len(GPUs)], each
	// worker seeing its GPU alone (launch.Slot.EnvUnder). None leaves every
	// worker the GPUs its environment gives it, and it opens the first.
	GPUs    []int
	Graphs  bool // actors and learners capture and replay
	MaxLead int  // see dqn.ActorOptions.MaxLead
	Threads int  // CPU device threads per worker (0: 1)
	// WorldSaveEvery is, with the shared actor (actor: shared), how many
	// vector steps apart it saves its worlds (WorldFile); 0:
	// dqn.DefaultWorldSaveEvery.
	WorldSaveEvery int
	Worker         string // the tolaria-worker binary ("": worker.Find)
	// ActorRestarts is how many times an agent's actor is started again
	// after it fails before the agent fails.
	ActorRestarts    int
	WorkerStart      time.Duration
	HeartbeatTimeout time.Duration
	Env              []string // added to the workers' environment
	// ReportEvery is how often each actor and learner reports its
	// counters (and so how often Report hears of them); 0: every half
	// second. Whole milliseconds.
	ReportEvery time.Duration
	// Launch, when it has a New, is the launcher in place of the local
	// one (a test's).
	Launch launch.Kind
	Logger *slog.Logger
	// Report, when set, hears every change of an agent's status, from the
	// agents' goroutines (one at a time per agent).
	Report func(AgentStatus)
	// Metrics, when set, is updated as the agents go.
	Metrics *telemetry.RLMetrics
	// DeviceMemory caps the device memory the agents' budgets may take
	// on each of this machine's devices; 0 takes what the first worker
	// finds free. Each agent's learner and actor (or, when the agents
	// share an actor, the shared actor and every learner) ask the budget
	// broker, as one holder, before they allocate (see agentBudgets).
	DeviceMemory int64
}

// AgentStatus is what is known of an agent as it runs.
type AgentStatus struct {
	Agent    int    `json:"agent"`
	State    string `json:"state"`
	Reason   string `json:"reason,omitempty"`
	Episodes int    `json:"episodes"`
	// Epoch is the agent's epoch counter in its memory file: the episodes
	// its actors finished, as the actor counts them.
	Epoch          uint64  `json:"epoch"`
	MeanReturn     float64 `json:"mean_return_100"` // over the last 100 episodes (fewer at first)
	BestMeanReturn float64 `json:"best_mean_return_100"`
	LastReturn     float64 `json:"last_return"`
	// Evaluations, EvalMeanReturn and BestEvalMeanReturn are the greedy
	// evaluations (eval_interval): their count, the last one's mean
	// return and the best.
	Evaluations        int     `json:"evaluations"`
	EvalMeanReturn     float64 `json:"eval_mean_return"`
	BestEvalMeanReturn float64 `json:"best_eval_mean_return"`
	// SolvedAt is the environment step of the first greedy evaluation
	// that solved the environment (Summary.Goal: at least its episodes,
	// with a mean return of at least its return, 475 over 100 on
	// CartPole-v1, -100 over 100 on Acrobot-v1); -1: none.
	SolvedAt int `json:"solved_at_env_step"`
	// TrainSolvedAt is the first environment step at which the mean
	// return of the last 100 training (epsilon-greedy) episodes reached
	// the goal's return; -1: never.
	TrainSolvedAt      int     `json:"train_solved_at_env_step"`
	Epsilon            float64 `json:"epsilon"`
	EnvSteps           int     `json:"env_steps"`
	LearnerSteps       int     `json:"learner_steps"`
	ActorStepsPerSec   float64 `json:"actor_steps_per_second"`
	LearnerStepsPerSec float64 `json:"learner_steps_per_second"`
	// Lag is how many weight versions the actor's copy is behind the
	// learner's last publish.
	Lag uint64 `json:"weight_version_lag"`
	// Publishes and Syncs are the learner's publishes and the actor's
	// reads of newer weights in this run, over every process of each.
	Publishes int64   `json:"publishes"`
	Syncs     int64   `json:"syncs"`
	Loss      float64 `json:"loss"`
	// ActorRestarts and Seconds count every run of the agent that this
	// one continues: a resumed agent's summary includes the runs before.
	ActorRestarts int     `json:"actor_restarts"`
	Fallbacks     int     `json:"fallbacks"`
	Seconds       float64 `json:"seconds"`
	// Device is where the agent's learner and actor run: cpu, cuda (the
	// GPU their environment gives them) or cuda:N.
	Device string `json:"device,omitempty"`
	// Saved is, for an agent that did not succeed, what it left for
	// --resume, read from its directory once its processes ended.
	Saved *AgentSaved `json:"saved,omitempty"`
}

// AgentSaved is what an agent that stopped before its work was done left
// in its directory for --resume: the learner's checkpoint and the replay
// buffer.
type AgentSaved struct {
	// CheckpointStep is the learner step of the checkpoint in the agent's
	// directory, checked as --resume checks it; -1: none that resumes.
	CheckpointStep int `json:"checkpoint_step"`
	// Checkpointed says the learner wrote that checkpoint as it stopped
	// in this run; false: it did not (a second interrupt killed it), and
	// the checkpoint, if any, is an earlier run's.
	Checkpointed bool `json:"checkpointed"`
	// Buffer says the replay buffer (ReplayFile) was saved as the agent
	// stopped.
	Buffer bool `json:"buffer_saved"`
	// Unusable is why the checkpoint in the agent's directory cannot be
	// resumed from, when it cannot.
	Unusable string `json:"checkpoint_unusable,omitempty"`
}

// String says what was saved and what --resume does with it.
func (s AgentSaved) String() string {
	buffer := "the replay buffer was saved"
	if !s.Buffer {
		buffer = "the replay buffer was not saved"
	}
	switch {
	case s.Unusable != "":
		return fmt.Sprintf("the learner did not checkpoint, and the checkpoint there cannot be resumed (%s): --resume refuses the agent until that file is restored or removed", s.Unusable)
	case s.CheckpointStep < 0:
		return "the learner did not checkpoint and has no earlier checkpoint, so no replay buffer was saved: --resume starts the agent again from step 0"
	case s.Checkpointed && s.Buffer:
		return fmt.Sprintf("the learner checkpointed at learner step %d and %s: --resume goes on from there", s.CheckpointStep, buffer)
	case s.Checkpointed:
		return fmt.Sprintf("the learner checkpointed at learner step %d; %s: --resume goes on from learner step %d with the buffer saved before, or an empty one its actor refills", s.CheckpointStep, buffer, s.CheckpointStep)
	case s.Buffer:
		return fmt.Sprintf("the learner did not checkpoint; its earlier checkpoint (learner step %d) is kept and %s: --resume goes on from learner step %d", s.CheckpointStep, buffer, s.CheckpointStep)
	}
	return fmt.Sprintf("the learner did not checkpoint; its earlier checkpoint (learner step %d) is kept; %s: --resume goes on from learner step %d with the buffer saved before, or an empty one its actor refills", s.CheckpointStep, buffer, s.CheckpointStep)
}

// complete says the agent stopped with all that a resume wants: the
// learner checkpointed as it stopped, and the buffer saved.
func (s *AgentSaved) complete() bool {
	return s != nil && s.Checkpointed && s.Buffer && s.Unusable == ""
}

// Summary is a run's summary.json.
type Summary struct {
	Dir string `json:"dir"`
	// Env is the environment, as config.yaml gives it (a name, or the
	// mapping of its name and parameters), and Goal what solves it.
	Env         string        `json:"env"`
	Goal        Goal          `json:"goal"`
	Interrupted bool          `json:"interrupted"`
	Agents      []AgentStatus `json:"agents"`
	// WorldSaved is, for an interrupted run whose agents share one world
	// (actor: shared), whether the shared actor saved the worlds
	// (WorldFile) as it stopped; when it did not (a second interrupt
	// killed it), --resume goes on from their last periodic save, or
	// starts them afresh when there is none.
	WorldSaved *bool `json:"world_saved,omitempty"`
	// ScriptedBaseline is, for a world with no goal of its own (Forage),
	// what its agents must beat: each agent's mean return over the
	// greedy evaluation's episodes when every agent follows the world's
	// scripted policy (dqn.ScriptedBaseline).
	ScriptedBaseline []float64 `json:"scripted_baseline,omitempty"`
}

// Goal is what solves a run's environment: a greedy evaluation of at
// least Episodes episodes whose mean return is at least Return.
type Goal struct {
	Return   float64 `json:"return"`
	Episodes int     `json:"episodes"`
}

// goal is what solves the run's environment.
func (r *Run) goal() Goal {
	g := r.req.Config.Goal()
	return Goal{Return: g.Return, Episodes: g.Episodes}
}

// Run is a planned run: its directory claimed, nothing started.
type Run struct {
	req  Request
	dir  string
	lock *dirLock
	path string // the worker binary
	log  *slog.Logger
	// launcher starts the actors and learners, on slots.
	launcher launch.Launcher
	slots    *launch.Slots
	// budgets are the agents' device-memory budgets on this machine.
	budgets *agentBudgets
	// plans are what each agent of a resumed run continues from, checked
	// before anything was written.
	plans []agentPlan
	// shared is the one actor of the agents when they act in one world
	// (actor: shared); nil when each agent has its own.
	shared *sharedActor
	// crowd is the run's worker processes on this machine's cores when
	// they crowd it (CrowdPerCore), which a worker's failure to answer or
	// to send heartbeats then names; zero otherwise.
	crowd crowd
}

// agentPlan is what an agent of a resumed run goes on from: its learner's
// checkpoint and its saved buffer, each verified, or nothing.
type agentPlan struct {
	finished bool
	ckStep   int // the checkpoint's learner step; -1: no checkpoint
	saved    *shm.Saved
}

// AgentDir is agent i's directory in a run directory.
func AgentDir(runDir string, i int) string { return filepath.Join(runDir, fmt.Sprintf("agent-%d", i)) }

// Prepare checks the request and claims the run directory: a new run
// refuses a directory that holds a run; --resume needs one that has not
// finished. Nothing is started.
func Prepare(req Request, now time.Time) (*Run, error) {
	if err := req.Config.Validate(); err != nil {
		return nil, refusal.Config(err)
	}
	if err := checkLearns(req.Config); err != nil {
		return nil, refusal.Config(err)
	}
	switch req.Device {
	case "", "cpu", "cuda":
	default:
		return nil, refusal.Config(field.Errorf("device", "must be cpu or cuda, got %q", req.Device))
	}
	if len(req.GPUs) > 0 && req.Device != "cuda" {
		return nil, refusal.Config(field.Errorf("devices", "names GPUs, so the device is cuda, not %q", req.Device))
	}
	if req.ActorRestarts < 0 {
		return nil, refusal.Config(field.Errorf("actor_restarts", "must be 0 or more, got %d", req.ActorRestarts))
	}
	if req.Logger == nil {
		req.Logger = slog.New(slog.DiscardHandler)
	}
	if req.Threads <= 0 {
		req.Threads = 1
	}
	path, err := worker.Find(req.Worker)
	if err != nil {
		return nil, refusal.Setup(err)
	}
	dir := req.Dir
	if dir == "" {
		if req.Resume {
			return nil, refusal.Config(field.Errorf("resume", "needs %s pointing at the run to resume", field.Name("run_dir")))
		}
		dir = filepath.Join("runs", "rl-"+now.UTC().Format("20060102-150405"))
	}
	// A directory another tolaria holds is said to be so first: whatever
	// else it holds, a new run and a resume are refused there alike.
	if err := rundir.CheckFree(dir); err != nil {
		return nil, err
	}
	_, statErr := os.Stat(filepath.Join(dir, rundir.ConfigFile))
	switch {
	case req.Resume && statErr != nil:
		return nil, refusal.Config(field.Errorf("resume", "%s holds no reinforcement-learning run (no %s); start without %s or point %s at an earlier run",
			dir, rundir.ConfigFile, field.Name("resume"), field.Name("run_dir")))
	case !req.Resume && statErr == nil:
		return nil, refusal.Config(field.Errorf("run_dir", "%s %w; use %s to continue it, or choose another %s",
			dir, rundir.ErrExists, field.Name("resume"), field.Name("run_dir")))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, rundir.ClaimFailed("run_dir", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	if c, g := req.Config, req.Config.Goal(); c.StopWhenSolved && c.EvalInterval > 0 && c.EvalEpisodes < g.Episodes {
		req.Logger.Warn(fmt.Sprintf("eval_episodes %d is under %d: no evaluation can solve %s (a mean return of %g over %d episodes), so stop_when_solved never stops an agent",
			c.EvalEpisodes, g.Episodes, c.Env.Name, g.Return, g.Episodes))
	}
	r := &Run{req: req, dir: dir, lock: lock, path: path, log: req.Logger}
	r.removeTemps()
	if r.budgets, err = newAgentBudgets(req); err != nil {
		lock.refuse()
		return nil, err // a refusal naming device_memory
	}
	if err := r.placeWorkers(); err != nil {
		lock.refuse()
		return nil, err
	}
	if req.Resume {
		if err := r.checkResume(); err != nil {
			lock.refuse()
			return nil, err
		}
	} else if err := atomicfile.WriteFile(filepath.Join(dir, rundir.ConfigFile), sealConfig(req.Config, req.ConfigYAML), 0o644); err != nil {
		lock.refuse()
		return nil, err
	}
	if c, crowded := runCrowding(req, req.Launch.OrLocal().Name == launch.LocalName, runtime.NumCPU()); crowded {
		r.crowd = c
		req.Logger.Warn(c.warning(req.WorkerStart, req.HeartbeatTimeout))
	}
	return r, nil
}

// checkLearns refuses a run whose learners would take no training step:
// a learner trains once its buffer holds learning_starts transitions, and
// the actor stops at total_steps. (dqn.Config allows total_steps equal to
// learning_starts, for a loop that only fills its buffers: the benchmark's
// sequential baseline. A run of tolaria rl is for training.)
func checkLearns(c dqn.Config) error {
	if c.TotalSteps > c.LearningStarts {
		return nil
	}
	return field.Errorf("total_steps", "%d leaves the learners no training step: they train only once their buffers hold %s (%d) transitions; give a %s above %d, or a smaller %s",
		c.TotalSteps, field.Name("learning_starts"), c.LearningStarts, field.Name("total_steps"), c.LearningStarts, field.Name("learning_starts"))
}

// dirLock is the run directory's lock, held, and what its file said
// before this tolaria wrote its own pid there.
type dirLock struct {
	*flock.Flock
	before []byte
}

// refuse gives the directory back, for a run refused after it locked it,
// with the lock file saying again what it said: a refused run writes
// nothing.
func (l *dirLock) refuse() {
	_ = os.WriteFile(l.Path(), l.before, 0o644)
	_ = l.Unlock()
}

// lockDir locks the run directory against a second tolaria and records
// this one in the lock file, as tolaria train does, so that a tolaria
// refused the directory names the process to wait for.
func lockDir(dir string) (*dirLock, error) {
	lock := flock.New(filepath.Join(dir, rundir.LockFile), flock.SetPermissions(0o644))
	ok, err := lock.TryLock()
	if err != nil {
		return nil, rundir.ClaimFailed("run_dir", dir, err)
	}
	if !ok {
		// Taken since CheckFree looked: it names the holder now.
		if err := rundir.CheckFree(dir); err != nil {
			return nil, err
		}
		return nil, refusal.Config(field.Errorf("run_dir", "%s is %w; wait for it or choose another %s", dir, rundir.ErrBusy, field.Name("run_dir")))
	}
	before, err := os.ReadFile(lock.Path())
	if err != nil {
		_ = lock.Close()
		return nil, rundir.ClaimFailed("run_dir", dir, err)
	}
	// flock(2) locks belong to the open file: writing through another
	// descriptor keeps the lock.
	if err := os.WriteFile(lock.Path(), fmt.Appendf(nil, "pid %d, tolaria rl", os.Getpid()), 0o644); err != nil {
		_ = lock.Close()
		return nil, rundir.ClaimFailed("run_dir", dir, err)
	}
	return &dirLock{Flock: lock, before: before}, nil
}

// placeWorkers makes the run's launcher and its slots: every actor and
// learner at once, agent i's two on GPU GPUs[i % len(GPUs)] (slots
// enough for the agents that share a GPU), or with no GPUs named each
// worker seeing the GPUs its environment gives it.
func (r *Run) placeWorkers() error {
	req := r.req
	kind := req.Launch.OrLocal()
	dev := req.Device
	if dev == "" {
		dev = "cpu"
	}
	n := 2 * req.Config.NumAgents
	per := 0
	if g := len(req.GPUs); g > 0 {
		per = 2 * ((req.Config.NumAgents + g - 1) / g)
	}
	cfg := launch.Config{Worker: r.path, Device: dev, GPUs: req.GPUs, GPUsFromEnv: len(req.GPUs) == 0, PerDevice: per, Parallel: n, Workers: n, Dir: r.dir, DirField: "run_dir",
		Own: filepath.Join(r.dir, kind.Name), WorkerStart: req.WorkerStart, HeartbeatTimeout: req.HeartbeatTimeout, Env: req.Env, Logger: r.log}
	if kind.Check != nil {
		if err := kind.Check(cfg); err != nil {
			return err
		}
	}
	var err error
	if r.launcher, err = kind.New(context.Background(), cfg); err != nil {
		return err
	}
	all, err := r.launcher.Slots(context.Background())
	if err != nil {
		return err
	}
	r.slots = launch.NewSlots(all)
	return nil
}

// agentSlot says which slots agent i's halves may take: those of its GPU,
// GPUs[i % len(GPUs)], when GPUs are named; any otherwise.
func (r *Run) agentSlot(i int) func(launch.Slot) bool {
	gpus := r.req.GPUs
	if len(gpus) == 0 {
		return nil
	}
	gpu := gpus[i%len(gpus)]
	return func(sl launch.Slot) bool { return sl.GPU == gpu }
}

// Devices says where the agents' workers run, each device once.
func (r *Run) Devices() string { return r.slots.Devices() }

// halfWorker is agent i's learner or actor as a launcher's worker: its
// log is the agent's <role>.log.
func (r *Run) halfWorker(i int, role string) launch.Worker {
	index := 2 * i
	if role == jobserver.RoleActor {
		index++
	}
	dir := AgentDir(r.dir, i)
	return launch.Worker{Index: index, Spools: filepath.Join(dir, "spool-"+role), Log: filepath.Join(dir, role+".log")}
}

// checkResume refuses, before anything is written, to resume a run whose
// configuration would change, whose agents have all finished, or whose
// agent has a damaged or foreign checkpoint or buffer; it plans what
// every agent continues from.
func (r *Run) checkResume() error {
	if err := r.checkConfig(); err != nil {
		return err
	}
	n := r.req.Config.NumAgents
	r.plans = make([]agentPlan, n)
	done := 0
	for i := range n {
		plan, err := r.planAgent(i)
		if err != nil {
			return err
		}
		r.plans[i] = plan
		if plan.finished {
			done++
		}
	}
	if done == n {
		return refusal.Config(field.Errorf("resume", "%s: every agent has finished (their %s say so); there is nothing to resume; start a new run in another %s",
			r.dir, rundir.SummaryFile, field.Name("run_dir")))
	}
	return r.checkWorld()
}

// checkWorld refuses, with the shared actor, a saved world (WorldFile)
// that the actor would refuse: found here, it fails no worker, and the
// run stops before it starts rather than after every agent has failed.
func (r *Run) checkWorld() error {
	cfg := r.req.Config
	if cfg.ActorMode() != dqn.ActorShared {
		return nil
	}
	if err := dqn.CheckWorldFile(filepath.Join(r.dir, WorldFile), cfg); err != nil {
		return refusal.Config(field.Errorf("resume", "%v, which loses only the worlds as saved (their episodes in progress; their random draws start afresh): every agent's checkpoint, replay buffer and events are kept, and its step count and epsilon go on from its buffer; or restore the file",
			err))
	}
	return nil
}

// planAgent checks agent i's checkpoint and saved buffer.
func (r *Run) planAgent(i int) (agentPlan, error) {
	dir := AgentDir(r.dir, i)
	if st, ok := readAgentSummary(dir); ok && st.State == AgentSucceeded {
		return agentPlan{finished: true}, nil
	}
	plan := agentPlan{ckStep: -1}
	cfg := r.req.Config
	ckPath := filepath.Join(dir, trainer.CheckpointFile)
	if _, err := os.Stat(ckPath); err == nil {
		ck, err := dqn.CheckCheckpoint(ckPath, cfg, i)
		if err != nil {
			return plan, refusal.Config(field.Errorf("resume", "agent %d: %v; restore that file, or remove it to start agent %d again from step 0", i, err, i))
		}
		plan.ckStep = ck.Step
	}
	bufPath := filepath.Join(dir, ReplayFile)
	if _, err := os.Stat(bufPath); err != nil || plan.ckStep < 0 {
		// No buffer, or no checkpoint to resume it with (the agent
		// starts again, and its next save replaces a stale buffer).
		return plan, nil
	}
	spec, err := cfg.Spec()
	if err != nil {
		return plan, refusal.Config(err)
	}
	saved, err := shm.LoadSaved(bufPath, shm.Owner{Agent: i, Config: cfg.Digest()}, cfg.Layout(spec))
	if err != nil {
		return plan, refusal.Config(field.Errorf("resume", "agent %d: %v; restore that file, or remove it to resume agent %d from its checkpoint (learner step %d) with an empty buffer that its actor refills",
			i, err, i, plan.ckStep))
	}
	plan.saved = saved
	return plan, nil
}

// configDigestPrefix starts config.yaml's first line, which records the
// digest of the configuration the run began with.
const configDigestPrefix = "# tolaria rl configuration sha256 "

// sealConfig is config.yaml's contents: the digest line, then the YAML.
func sealConfig(c dqn.Config, yaml []byte) []byte {
	return append([]byte(configDigestPrefix+c.Digest()+"; --resume refuses the run once this file is edited\n"), yaml...)
}

// checkConfig refuses a resume whose configuration is not the one the run
// began with: config.yaml edited since, or changed by the request.
func (r *Run) checkConfig() error {
	path := filepath.Join(r.dir, rundir.ConfigFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return refusal.Config(field.Errorf("resume", "%v", err))
	}
	first, body, _ := strings.Cut(string(raw), "\n")
	recorded, _, ok := strings.Cut(strings.TrimPrefix(first, configDigestPrefix), ";")
	switch {
	case !strings.HasPrefix(first, configDigestPrefix) || !ok:
		return refusal.Config(field.Errorf("resume", "%s does not start with the configuration digest tolaria rl records; a run is resumed only with the configuration it began with: restore the file, or start a new run with --config in another %s",
			path, field.Name("run_dir")))
	case recorded == r.req.Config.Digest():
		return nil
	}
	var changed []string
	for _, line := range strings.Split(string(r.req.Config.YAML()), "\n") {
		if !slices.Contains(strings.Split(body, "\n"), line) {
			changed = append(changed, strings.TrimSpace(line))
		}
	}
	if len(changed) == 0 {
		return refusal.Config(field.Errorf("resume", "%s was edited after the run began (it no longer matches its recorded digest); a run is resumed only with the configuration it began with: undo the edit, or start a new run with --config in another %s",
			path, field.Name("run_dir")))
	}
	return refusal.Config(field.Errorf("resume", "the run began with the configuration in %s; this one differs in %s: a run is resumed only with the configuration it began with; start a new run in another %s to change it",
		path, strings.Join(changed, ", "), field.Name("run_dir")))
}

// removeTemps removes the temporary files of writes cut short from the
// run directory and its agents' directories: a worker killed while it
// writes (a second interrupt kills the shared actor as it saves the
// worlds, a learner as it checkpoints) leaves one beside the file, as
// does a tolaria killed while it saves a buffer. Only the holder of the
// directory's lock writes there, when no worker runs, so none is in use.
func (r *Run) removeTemps() {
	dirs := []string{r.dir}
	for i := range r.req.Config.NumAgents {
		dirs = append(dirs, AgentDir(r.dir, i))
	}
	for _, d := range dirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if !e.Type().IsRegular() || !atomicfile.IsTemp(e.Name()) {
				continue
			}
			path := filepath.Join(d, e.Name())
			if err := os.Remove(path); err != nil {
				r.log.Warn("a temporary file left by a write cut short could not be removed", "file", path, "err", err)
			} else {
				r.log.Info("removed a temporary file left by a write cut short", "file", path)
			}
		}
	}
}

// Dir is the run directory.
func (r *Run) Dir() string { return r.dir }

// Close releases the run directory.
func (r *Run) Close() error { return r.lock.Unlock() }

// Run runs every agent until it finishes, fails or ctx ends (then each
// learner checkpoints and the coordinator saves each replay buffer), and
// writes the summaries. Agents are independent: one failing does not stop
// the others.
func (r *Run) Run(ctx context.Context) (Summary, error) {
	n := r.req.Config.NumAgents
	var planned []launch.Worker
	if r.req.Config.ActorMode() == dqn.ActorShared {
		r.shared = newSharedActor(r)
		planned = append(planned, r.shared.worker())
	}
	for i := range n {
		planned = append(planned, r.halfWorker(i, jobserver.RoleLearner))
		if r.shared == nil {
			planned = append(planned, r.halfWorker(i, jobserver.RoleActor))
		}
	}
	r.launcher.Plan(planned)
	ctx, stop := r.launcher.Hold(ctx)
	defer stop()
	defer launch.ReleaseAll(ctx, r.launcher, planned)
	sum := Summary{Dir: r.dir, Env: r.req.Config.Env.String(), Goal: r.goal(), Agents: make([]AgentStatus, n)}
	if c := r.req.Config; sum.Goal.Episodes == 0 && c.ActorMode() == dqn.ActorShared && c.EvalInterval > 0 {
		base, err := dqn.ScriptedBaseline(c)
		if err != nil {
			r.log.Warn("the scripted baseline could not be played", "err", err)
		}
		sum.ScriptedBaseline = base
	}
	if m := r.req.Metrics; m != nil {
		m.Goal(r.req.Config.Env.Name, sum.Goal.Return)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	if r.shared != nil {
		wg.Go(func() { r.shared.run(ctx) })
	}
	for i := range n {
		wg.Go(func() { sum.Agents[i], errs[i] = r.agent(ctx, i) })
	}
	wg.Wait()
	sum.Interrupted = ctx.Err() != nil
	if r.shared != nil && sum.Interrupted {
		saved := r.shared.savedAsStopped()
		sum.WorldSaved = &saved
	}
	r.removeTemps()
	if err := writeJSON(filepath.Join(r.dir, rundir.SummaryFile), sum); err != nil {
		errs = append(errs, err)
	}
	return sum, errors.Join(errs...)
}

// agentRun is one agent's state in the coordinator.
type agentRun struct {
	r       *Run
	i       int
	dir     string
	mem     *shm.Memory
	events  *telemetry.EventLog
	started time.Time
	// earlier is the seconds the agent ran in the runs this one resumes.
	earlier float64

	mu      sync.Mutex
	st      AgentStatus
	returns []float64 // every episode's return, earlier runs' included
	sum100  float64
	last    map[string]rateMark // per role, for the steps/s
	counts  map[string]*halfCount
}

// halfCount carries a half's count (the learner's publishes, the actor's
// syncs) over the processes it is played by: each starts from 0.
type halfCount struct {
	attempt    int
	base, last int64
}

// total is the count over every process so far, given the count of
// attempt's.
func (c *halfCount) total(attempt int, n int64) int64 {
	if attempt != c.attempt {
		c.base, c.last, c.attempt = c.base+c.last, 0, attempt
	}
	c.last = n
	return c.base + n
}

type rateMark struct {
	at    time.Time
	steps int
}

func (r *Run) agent(ctx context.Context, i int) (AgentStatus, error) {
	dir := AgentDir(r.dir, i)
	a := &agentRun{r: r, i: i, dir: dir, started: time.Now(), last: map[string]rateMark{},
		counts: map[string]*halfCount{jobserver.RoleActor: {}, jobserver.RoleLearner: {}},
		st:     AgentStatus{Agent: i, State: AgentStarting, SolvedAt: -1, TrainSolvedAt: -1}}
	plan := agentPlan{ckStep: -1}
	if r.req.Resume {
		plan = r.plans[i]
	}
	if r.shared != nil {
		// An agent that ends before it joins (a failure, or finished
		// before) will not act: the shared actor is told so.
		defer r.shared.join(i, nil)
	}
	if plan.finished {
		if st, ok := readAgentSummary(dir); ok {
			return st, nil // finished before: kept as it was
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return a.fail(err)
	}
	// An agent goes on from its checkpoint, with its saved buffer or,
	// when that is gone, an empty one: a resume never starts an agent
	// with a checkpoint again from step 0.
	resume := plan.ckStep >= 0
	earlier := ""
	if r.req.Resume && !resume {
		// Nothing to continue from (its learner failed before its first
		// checkpoint, or it was stopped before one): the agent starts again,
		// and the earlier run's events are kept aside, not counted.
		earlier = filepath.Join(dir, fmt.Sprintf("events-before-%s.jsonl", time.Now().UTC().Format("20060102-150405")))
		if err := os.Rename(filepath.Join(dir, rundir.EventsFile), earlier); err != nil {
			earlier = ""
		}
	}
	if resume {
		// The summary counts the whole agent: its time and actor restarts
		// in the runs before this one too (the episodes and evaluations
		// come back from the events, loadEpisodes).
		if prev, ok := readAgentSummary(dir); ok {
			a.earlier, a.st.ActorRestarts = prev.Seconds, prev.ActorRestarts
		} else {
			r.log.Warn("agent's earlier summary is missing or unreadable; its seconds and actor restarts count from this run", "agent", i, "summary", filepath.Join(dir, rundir.SummaryFile))
		}
	}
	var err error
	if a.events, err = telemetry.CreateEventLog(filepath.Join(dir, rundir.EventsFile)); err != nil {
		return a.fail(err)
	}
	defer a.events.Close()
	if err := a.openMemory(plan); err != nil {
		return a.fail(err)
	}
	if r.req.Resume && !resume {
		r.log.Warn("agent has no checkpoint to resume from; it starts again from step 0", "agent", i, "earlier_events", earlier)
	}
	defer a.mem.Close()
	start := map[string]any{"resume": resume, "env_steps": a.mem.Appended(), "epoch": a.mem.Epoch()}
	if earlier != "" {
		start["earlier_events"] = filepath.Base(earlier)
	}
	if resume {
		start["learner_step"] = plan.ckStep
		if plan.saved == nil {
			start["buffer"] = "empty: refilled by the actor"
			r.log.Warn(fmt.Sprintf("agent %d: no saved replay buffer (%s); it resumes from its checkpoint at learner step %d with an empty buffer: its actor refills %d transitions from environment step %d before its learner trains again",
				i, filepath.Join(dir, ReplayFile), plan.ckStep, r.req.Config.LearningStarts, a.mem.Appended()))
		}
	}
	a.event(EventAgentStart, start)
	a.update(func(st *AgentStatus) { st.State = AgentRunning })

	var wg sync.WaitGroup
	var learnRes jobserver.RLResult
	var learnErr, actErr error
	// learnerStopping: the learner ended once the run was being stopped
	// (a second interrupt kills it before it checkpoints).
	var learnerStopping bool
	wg.Go(func() {
		learnRes, learnErr = a.half(ctx, jobserver.RoleLearner, resume, 1)
		learnerStopping = ctx.Err() != nil
		// Even one that failed before it asked: its actor's (or the
		// shared actor's) budget request does not wait for it.
		r.budgets.learnerEnded(i)
		if learnErr != nil {
			a.mem.Stop() // the actor has nobody to learn from
		}
	})
	if r.shared != nil {
		r.shared.join(i, a)
		wg.Wait()
		// The world goes on with an agent whose learner failed (its stop
		// flag set, its last weights acting): the agent's memory stays
		// open until the actor has ended.
		actErr = r.shared.wait()
	} else {
		wg.Go(func() { actErr = a.actor(ctx) })
		wg.Wait()
	}
	interrupted := ctx.Err() != nil
	// A learner that failed as the run was stopped (killed by a second
	// interrupt, or its checkpoint's write failed) leaves an interrupted
	// agent, resumed from whatever checkpoint its directory holds.
	cut := interrupted && learnErr != nil && learnerStopping
	saved := a.readSaved(learnErr == nil && learnRes.Checkpoint != "")

	var saveErr error
	// In lockstep a finished agent's buffer is kept too: the same
	// configuration gives the same replay.buf, byte for byte.
	lockstepDone := r.req.Config.Lockstep && learnErr == nil && actErr == nil
	// What a resume needs: a checkpoint, and the buffer as the agent
	// stopped. With no checkpoint a resume starts the agent again from
	// step 0 and has no use for a buffer: none is written.
	if (interrupted || learnErr == nil && actErr != nil) && saved.CheckpointStep >= 0 || lockstepDone {
		saveErr = a.saveReplay()
		saved.Buffer = saveErr == nil
	}
	a.update(func(st *AgentStatus) {
		st.Seconds = a.earlier + time.Since(a.started).Seconds()
		if learnErr == nil {
			st.LearnerSteps, st.Loss, st.Fallbacks = learnRes.LearnerSteps, learnRes.Loss, learnRes.Fallbacks
		}
		switch {
		case cut:
			st.State, st.Reason = AgentInterrupted, saved.String()+" (learner: "+learnErr.Error()+")"
		case learnErr != nil:
			st.State, st.Reason = AgentFailed, learnErr.Error()
		case actErr != nil:
			st.State, st.Reason = AgentFailed, actErr.Error()
		case interrupted:
			st.State, st.Reason = AgentInterrupted, saved.String()
		default:
			st.State = AgentSucceeded
		}
		if st.State != AgentSucceeded {
			st.Saved = &saved
		}
		if saveErr != nil {
			st.Reason = strings.TrimPrefix(st.Reason+"; saving the replay buffer failed: "+saveErr.Error(), "; ")
		}
	})
	st := a.status()
	if st.State == AgentSucceeded && !r.req.Config.Lockstep {
		// Nothing to resume: a buffer saved by an earlier stop is stale.
		_ = os.Remove(filepath.Join(dir, ReplayFile))
	}
	a.event(EventAgentEnd, map[string]any{"state": st.State, "reason": st.Reason, "env_steps": st.EnvSteps, "learner_steps": st.LearnerSteps})
	if err := writeJSON(filepath.Join(dir, rundir.SummaryFile), st); err != nil {
		return st, err
	}
	return st, nil
}

// openMemory creates the agent's memory, anonymous so that nothing of it
// outlives the processes that map it: from its saved buffer when the plan
// has one, empty otherwise. An agent resumed from its checkpoint without
// a buffer goes on counting its environment steps and episodes from its
// events.
func (a *agentRun) openMemory(plan agentPlan) error {
	cfg := a.r.req.Config
	spec, err := cfg.Spec()
	if err != nil {
		return err
	}
	name := fmt.Sprintf("tolaria-rl-%d-agent%d", os.Getpid(), a.i)
	if plan.saved != nil {
		if a.mem, err = shm.CreateSharedFrom(name, plan.saved); err != nil {
			return refusal.Setup(fmt.Errorf("agent %d's memory: %w", a.i, err))
		}
		a.loadEpisodes()
		return nil
	}
	if a.mem, err = shm.CreateShared(name, cfg.Layout(spec)); err != nil {
		return refusal.Setup(fmt.Errorf("agent %d's memory: %w", a.i, err))
	}
	if plan.ckStep < 0 {
		return nil
	}
	steps := a.loadEpisodes()
	a.mem.SetEpoch(uint64(a.status().Episodes))
	return a.mem.StartAt(uint64(steps))
}

// readSaved reads the checkpoint the agent's directory holds, once its
// learner has ended; checkpointed says the learner answered that it wrote
// it as it stopped.
func (a *agentRun) readSaved(checkpointed bool) AgentSaved {
	s := AgentSaved{CheckpointStep: -1}
	path := filepath.Join(a.dir, trainer.CheckpointFile)
	if _, err := os.Stat(path); err != nil {
		return s
	}
	ck, err := dqn.CheckCheckpoint(path, a.r.req.Config, a.i)
	if err != nil {
		s.Unusable = err.Error()
		return s
	}
	s.CheckpointStep, s.Checkpointed = ck.Step, checkpointed
	return s
}

// saveReplay saves the agent's memory into its directory (replay.buf),
// once its processes have stopped.
func (a *agentRun) saveReplay() error {
	return a.mem.Save(filepath.Join(a.dir, ReplayFile), shm.Owner{Agent: a.i, Config: a.r.req.Config.Digest()})
}

// loadEpisodes reads the returns of the episodes an earlier run of the
// agent finished, and its greedy evaluations, from its events; it returns
// the last environment step they name.
func (a *agentRun) loadEpisodes() int {
	steps := 0
	eps, _ := ReadEpisodes(a.r.dir, a.i)
	for _, e := range eps {
		a.addEpisode(e, false)
		steps = max(steps, e.EnvSteps)
	}
	evals, _ := ReadEvals(a.r.dir, a.i)
	for _, e := range evals {
		a.addEval(e)
		steps = max(steps, e.EnvSteps)
	}
	return steps
}

// actor runs the agent's actor, starting it again after a failure up to
// ActorRestarts times while the learner lives.
func (a *agentRun) actor(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		_, err := a.half(ctx, jobserver.RoleActor, false, attempt)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if a.mem.Stopped() {
			return nil // the learner failed; that is the agent's reason
		}
		var we *worker.Error
		if errors.As(err, &we) && (we.Kind == worker.KindUsage || we.Kind == worker.KindNoDevice) {
			// Another process would fail the same way.
			a.mem.Stop()
			return fmt.Errorf("actor: %w (not started again: the next would fail the same way)", err)
		}
		if attempt > a.r.req.ActorRestarts {
			a.mem.Stop()
			return fmt.Errorf("actor failed %d times (--actor-restarts %d); last: %w", attempt, a.r.req.ActorRestarts, err)
		}
		a.r.log.Warn("actor failed; starting it again", "agent", a.i, "attempt", attempt, "err", err)
		a.event(EventActorRestart, map[string]any{"attempt": attempt + 1, "reason": err.Error(), "env_steps": a.mem.Appended()})
		a.update(func(st *AgentStatus) { st.ActorRestarts++ })
		if m := a.r.req.Metrics; m != nil {
			m.ActorRestarted(a.i)
		}
	}
}

// half runs the actor or the learner in a worker process until it answers.
func (a *agentRun) half(ctx context.Context, role string, resume bool, attempt int) (jobserver.RLResult, error) {
	req := a.r.req
	w := a.r.halfWorker(a.i, role)
	logPath := w.Log
	wlog, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return jobserver.RLResult{}, err
	}
	fmt.Fprintf(wlog, "=== %s agent %d %s, attempt %d\n", time.Now().UTC().Format(time.RFC3339), a.i, role, attempt)
	if err := wlog.Close(); err != nil {
		return jobserver.RLResult{}, err
	}
	sl, err := a.r.slots.TakeWhere(ctx, a.r.agentSlot(a.i))
	if err != nil {
		return jobserver.RLResult{}, err
	}
	defer a.r.slots.Give(sl)
	a.update(func(st *AgentStatus) { st.Device = sl.String() })
	h, err := a.r.launcher.Start(ctx, w, sl, attempt)
	if err != nil {
		return jobserver.RLResult{}, a.r.crowd.explain(err)
	}
	defer h.Close()
	t, dev := h.Transport, sl.Device
	j := jobserver.RLJob{Role: role, Agent: a.i, Config: req.Config, Memory: a.mem.Path(), Dir: a.dir, Resume: resume,
		Graphs: req.Graphs, MaxLead: req.MaxLead, Threads: req.Threads, ReportMS: int(req.ReportEvery / time.Millisecond)}
	obs := a.halfObserver(role, dev)
	ask, asked := a.r.budgets.half(a.i, role, sl, obs, a.r.log)
	defer asked()
	_, res, err := jobserver.RL(ctx, &hookHello{Transport: t, hello: func(h worker.Hello) {
		a.event(EventWorker, map[string]any{"role": role, "pid": h.PID, "device": h.Device, "slot": sl.String(), "attempt": attempt})
	}}, dev, j, func(p jobserver.RLProgress) {
		jobserver.ObserveReplays(obs, p)
		a.progress(p, attempt)
	}, obs, ask)
	if err != nil {
		return res, a.r.crowd.explain(fmt.Errorf("%s (attempt %d): %w (worker log %s)", role, attempt, err, logPath))
	}
	return res, nil
}

// halfObserver is where the measurements of the agent's half role (on
// device dev) go: its events to the agent's events log, named by agent
// and role, and its graph activity to the run's metrics when they are
// served.
func (a *agentRun) halfObserver(role, dev string) trainer.Observer {
	events := trainer.ObserverFunc(func(m trainer.Measurement) {
		e, ok := m.(trainer.Event)
		if !ok {
			return
		}
		fields := make(map[string]any, len(e.Fields)+2)
		maps.Copy(fields, e.Fields)
		fields["agent"], fields["role"] = a.i, role
		e.Fields = fields
		_ = a.events.Write(e)
	})
	m := a.r.req.Metrics
	if m == nil {
		return events
	}
	half := telemetry.RLLearner
	if role == jobserver.RoleActor {
		half = telemetry.RLActor
	}
	return trainer.Tee(events, m.Observer(a.i, half, dev))
}

// hookHello tells a function the worker's hello.
type hookHello struct {
	worker.Transport
	hello func(worker.Hello)
}

func (h *hookHello) Call(ctx context.Context, req worker.Request, sink worker.Sink) (worker.Hello, json.RawMessage, error) {
	inner := sink.Hello
	sink.Hello = func(hl worker.Hello) {
		h.hello(hl)
		if inner != nil {
			inner(hl)
		}
	}
	return h.Transport.Call(ctx, req, sink)
}

// progress takes in a report of attempt of an actor or a learner.
func (a *agentRun) progress(p jobserver.RLProgress, attempt int) {
	for _, e := range p.Episodes {
		a.event(EventEpisode, map[string]any{"return": e.Return, "length": e.Length, "env_steps": e.EnvSteps})
		a.addEpisode(e, true)
	}
	for _, e := range p.Evals {
		a.event(EventEval, map[string]any{"mean_return": e.MeanReturn, "episodes": e.Episodes, "env_steps": e.EnvSteps,
			"version": e.Version, "seconds": e.Seconds})
		a.addEval(e)
	}
	now := time.Now()
	a.update(func(st *AgentStatus) {
		steps := p.EnvSteps
		if p.Role == jobserver.RoleLearner {
			steps = p.LearnerSteps
		}
		// A rate over the time since the last report, once it spans a
		// tenth of a second: a report sent early (a half's last, or one
		// with an evaluation) keeps the one before.
		rate, fresh := 0.0, false
		if m, ok := a.last[p.Role]; !ok {
			a.last[p.Role] = rateMark{at: now, steps: steps}
		} else if d := now.Sub(m.at); d >= 100*time.Millisecond {
			rate, fresh = float64(steps-m.steps)/d.Seconds(), true
			a.last[p.Role] = rateMark{at: now, steps: steps}
		}
		st.EnvSteps = max(st.EnvSteps, p.EnvSteps)
		st.Epoch = max(st.Epoch, p.Epoch)
		st.LearnerSteps = max(st.LearnerSteps, p.LearnerSteps)
		if p.Role == jobserver.RoleActor {
			if fresh {
				st.ActorStepsPerSec = rate
			}
			st.Epsilon = p.Epsilon
			st.Syncs = a.counts[p.Role].total(attempt, p.Syncs)
			st.Lag = 0
			if p.Published > p.Version {
				st.Lag = p.Published - p.Version
			}
		} else {
			if fresh {
				st.LearnerStepsPerSec = rate
			}
			st.Loss = p.Loss
			st.Publishes = a.counts[p.Role].total(attempt, p.Publishes)
		}
	})
}

// addEpisode counts a finished episode; report says whether it is new
// (rather than read back from an earlier run's events).
func (a *agentRun) addEpisode(e dqn.EpisodeRecord, report bool) {
	a.mu.Lock()
	a.returns = append(a.returns, e.Return)
	a.sum100 += e.Return
	if len(a.returns) > MeanEpisodes {
		a.sum100 -= a.returns[len(a.returns)-MeanEpisodes-1]
	}
	n := min(len(a.returns), MeanEpisodes)
	st := &a.st
	st.Episodes, st.LastReturn, st.MeanReturn = len(a.returns), e.Return, a.sum100/float64(n)
	if n == MeanEpisodes {
		// Returns may be negative (Acrobot-v1's are): the first full
		// window is the best so far whatever its mean.
		if len(a.returns) == MeanEpisodes || st.MeanReturn > st.BestMeanReturn {
			st.BestMeanReturn = st.MeanReturn
		}
		if g := a.r.goal(); g.Episodes > 0 && st.MeanReturn >= g.Return && st.TrainSolvedAt < 0 {
			st.TrainSolvedAt = e.EnvSteps
		}
	}
	a.mu.Unlock()
	if m := a.r.req.Metrics; m != nil && report {
		m.Episode(a.i, e.Return)
	}
}

// addEval counts a greedy evaluation; one that solves the task stops the
// agent when the run asks so.
func (a *agentRun) addEval(e jobserver.RLEval) {
	solved := false
	a.mu.Lock()
	st := &a.st
	if st.Evaluations == 0 || e.MeanReturn > st.BestEvalMeanReturn {
		st.BestEvalMeanReturn = e.MeanReturn
	}
	st.Evaluations++
	st.EvalMeanReturn = e.MeanReturn
	if g := a.r.goal(); g.Episodes > 0 && e.Episodes >= g.Episodes && e.MeanReturn >= g.Return && st.SolvedAt < 0 {
		st.SolvedAt, solved = e.EnvSteps, true
	}
	a.mu.Unlock()
	if solved {
		a.r.log.Info("agent solved the task", "agent", a.i, "env_steps", e.EnvSteps, "greedy_mean_return", e.MeanReturn, "episodes", e.Episodes)
		if a.r.req.Config.StopWhenSolved && !a.r.req.Config.Lockstep {
			// Within a report interval of the evaluation: the learner
			// may have taken some more steps. (In lockstep the actor
			// stops the agent itself, once the learner has taken the
			// round's steps, so that it ends at the same step every time.)
			a.mem.Stop()
		}
	}
}

func (a *agentRun) update(f func(*AgentStatus)) {
	a.mu.Lock()
	f(&a.st)
	st := a.st
	// The metrics take the statuses in the order they were made: the
	// actor's and the learner's reports race, and a status set after a
	// newer one would read as counts that went down (a restart) and count
	// them again.
	if m := a.r.req.Metrics; m != nil {
		m.Set(telemetry.RLAgent{Agent: st.Agent, State: st.State, MeanReturn: st.MeanReturn, EvalMeanReturn: st.EvalMeanReturn,
			Evaluated: st.Evaluations > 0, EnvSteps: st.EnvSteps,
			LearnerSteps: st.LearnerSteps, ActorStepsPerSec: st.ActorStepsPerSec, LearnerStepsPerSec: st.LearnerStepsPerSec,
			Lag: st.Lag, Epsilon: st.Epsilon, Loss: st.Loss, Publishes: st.Publishes, Syncs: st.Syncs})
	}
	a.mu.Unlock()
	if a.r.req.Report != nil {
		a.r.req.Report(st)
	}
}

func (a *agentRun) status() AgentStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st
}

func (a *agentRun) fail(err error) (AgentStatus, error) {
	a.update(func(st *AgentStatus) { st.State, st.Reason = AgentFailed, err.Error() })
	return a.status(), err
}

// event appends an event of kind to the agent's events.jsonl. A write
// error is kept by the log and does not stop the agent.
func (a *agentRun) event(kind string, fields map[string]any) {
	fields["agent"] = a.i
	_ = a.events.Write(trainer.Event{Kind: kind, Fields: fields})
}

func readAgentSummary(dir string) (AgentStatus, bool) {
	raw, err := os.ReadFile(filepath.Join(dir, rundir.SummaryFile))
	if err != nil {
		return AgentStatus{}, false
	}
	var st AgentStatus
	return st, json.Unmarshal(raw, &st) == nil
}

func writeJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(raw, '\n'), 0o644)
}

// ReadConfig reads the configuration a run began with, from its
// config.yaml.
func ReadConfig(runDir string) (dqn.Config, error) {
	raw, err := os.ReadFile(filepath.Join(runDir, rundir.ConfigFile))
	if err != nil {
		return dqn.Config{}, err
	}
	// Its first line, the digest, is a YAML comment.
	return dqn.ParseConfig(raw)
}

// ReadEpisodes reads every episode of agent i of a run from its
// events: the environment step it ended at and its return.
func ReadEpisodes(runDir string, i int) ([]dqn.EpisodeRecord, error) {
	var out []dqn.EpisodeRecord
	err := readEvents(runDir, i, func(e trainer.Event) {
		if e.Kind == EventEpisode {
			f := eventFields(e.Fields)
			out = append(out, dqn.EpisodeRecord{Return: f.float("return"), Length: f.int("length"), EnvSteps: f.int("env_steps")})
		}
	})
	return out, err
}

// ReadEvals reads every greedy evaluation of agent i of a run from its
// events.
func ReadEvals(runDir string, i int) ([]jobserver.RLEval, error) {
	var out []jobserver.RLEval
	err := readEvents(runDir, i, func(e trainer.Event) {
		if e.Kind == EventEval {
			f := eventFields(e.Fields)
			out = append(out, jobserver.RLEval{EnvSteps: f.int("env_steps"), Version: uint64(f.int("version")),
				MeanReturn: f.float("mean_return"), Episodes: f.int("episodes"), Seconds: f.float("seconds")})
		}
	})
	return out, err
}

// fields reads an event's numbers, which JSON gives back as float64.
type eventFields map[string]any

func (f eventFields) float(k string) float64 {
	v, _ := f[k].(float64)
	return v
}

func (f eventFields) int(k string) int { return int(f.float(k)) }

// readEvents calls each for every event of agent i's events.jsonl. A
// line that is no event (a torn last line) is skipped.
func readEvents(runDir string, i int, each func(trainer.Event)) error {
	f, err := os.Open(filepath.Join(AgentDir(runDir, i), rundir.EventsFile))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20) // a failed capture's event carries its error
	for sc.Scan() {
		if e, ok := decodeEvent(sc.Bytes()); ok {
			each(e)
		}
	}
	return sc.Err()
}

// decodeEvent decodes a line of an agent's events: an event of the
// events log, or a line as agents wrote them before they used its schema
// (the kind under "event", the fields beside it), which a run begun by an
// earlier tolaria holds when this one resumes it.
func decodeEvent(line []byte) (trainer.Event, bool) {
	if e, err := telemetry.DecodeEvent(line); err == nil {
		return e, true
	}
	var flat map[string]any
	if json.Unmarshal(line, &flat) != nil {
		return trainer.Event{}, false
	}
	kind, ok := flat["event"].(string)
	if !ok {
		return trainer.Event{}, false
	}
	e := trainer.Event{Kind: kind}
	if ts, ok := flat["time"].(string); ok {
		e.Time, _ = time.Parse(time.RFC3339Nano, ts)
	}
	delete(flat, "event")
	delete(flat, "time")
	e.Fields = flat
	return e, true
}
