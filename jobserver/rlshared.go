package jobserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// RoleSharedActor is the one actor of a run whose agents act in one world
// (dqn.SharedActor): its job names every agent's memory (RLJob.Memories),
// and its progress reports carry each agent's (RLProgress.Agents).
const RoleSharedActor = "shared-actor"

// EventWorld is the event a shared actor writes into each agent's events
// as it starts: whether it went on from the saved worlds (restored, and
// the environment steps they were saved at) or started them afresh.
const EventWorld = "world"

// agentTagger names the agent in the events of one agent's graph
// activity, which share one connection with every other agent's.
type agentTagger struct {
	next  trainer.Observer
	agent int
}

func (t agentTagger) Observe(m trainer.Measurement) {
	if e, ok := m.(trainer.Event); ok {
		fields := make(map[string]any, len(e.Fields)+1)
		maps.Copy(fields, e.Fields)
		fields["agent"] = t.agent
		e.Fields = fields
		m = e
	}
	t.next.Observe(m)
}

// serveSharedActor steps the world for every agent until their work is
// done, every agent is stopped, or ctx ends; its worlds are saved to
// j.WorldFile as it goes and as it stops. Asked to, it asks for its
// budget (SharedActorBill and its context) before it allocates.
func serveSharedActor(ctx context.Context, conn *worker.Conn, j RLJob, dev device.Device, cfg Config) (RLResult, error) {
	c := j.Config
	if err := c.Validate(); err != nil {
		return RLResult{}, usage(err.Error())
	}
	spec, err := c.Spec()
	if err != nil {
		return RLResult{}, usage(err.Error())
	}
	mems := make([]*shm.Memory, len(j.Memories))
	defer func() {
		for _, m := range mems {
			if m != nil {
				_ = m.Close()
			}
		}
	}()
	for i, path := range j.Memories {
		if mems[i], err = shm.Open(path, c.Layout(spec)); err != nil {
			return RLResult{}, usage(fmt.Sprintf("agent %d: %v", i, err))
		}
	}
	if conn.Request().AskBudget {
		bill, err := SharedActorBill(c, dev)
		if err != nil {
			return RLResult{}, usage(err.Error())
		}
		bill.Context = cfg.contextBytes
		if err := askBudget(ctx, conn, bill, dev); err != nil {
			return RLResult{}, err
		}
	}
	shared := &dqn.Shared{Pool: cfg.Shared.Pool(), Guard: cfg.Shared.Guard()}
	remote := remoteObserver{conn}
	tallies := make([]*replayTally, len(mems))
	for i := range tallies {
		tallies[i] = &replayTally{next: agentTagger{next: remote, agent: i}}
	}
	defer func() {
		for _, t := range tallies {
			t.flush()
		}
	}()
	rep := &sharedReporter{conn: conn, mems: mems, cfg: c, tallies: tallies, now: make(chan struct{}, 1),
		episodes: make([][]dqn.EpisodeRecord, len(mems)), evals: make([][]RLEval, len(mems))}
	actor, err := dqn.NewSharedActor(dev, shared, mems, c, dqn.SharedActorOptions{Graphs: j.Graphs, MaxLead: j.MaxLead,
		OnEpisode: rep.episode, OnEval: rep.eval, WorldFile: j.WorldFile, SaveEvery: j.WorldSaveEvery,
		Observer: func(i int) trainer.Observer { return agentTagger{next: tallies[i], agent: i} }})
	if err != nil {
		if errors.Is(err, dqn.ErrWorldFile) {
			return RLResult{}, usage(err.Error()) // another actor would fail the same way
		}
		return RLResult{}, err
	}
	rep.actor = actor
	defer func() {
		if err := actor.Close(); err != nil {
			cfg.Logger.Warn("closing the shared actor failed", "err", err)
		}
	}()
	for i := range mems {
		fields := map[string]any{"restored": actor.Restored() >= 0, "role": RoleSharedActor}
		if actor.Restored() >= 0 {
			fields["saved_at_env_steps"] = actor.Restored()
		}
		agentTagger{next: remote, agent: i}.Observe(trainer.Event{Time: time.Now(), Kind: EventWorld, Fields: fields})
	}
	if err := actor.Capture(); err != nil {
		return RLResult{}, err
	}
	conn.Advance("captured")
	every := time.Duration(j.ReportMS) * time.Millisecond
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	stopReports := rep.start(every)
	runErr := actor.Run(ctx)
	stopReports()
	interrupted := ctx.Err() != nil
	if interrupted && errors.Is(runErr, context.Canceled) {
		runErr = nil
	}
	if runErr != nil {
		return RLResult{}, runErr
	}
	if !interrupted && actor.Steps() >= c.TotalSteps {
		// The agents' work is done: their learners stop.
		for _, m := range mems {
			m.Stop()
		}
	}
	return RLResult{Role: RoleSharedActor, EnvSteps: actor.Steps(), Interrupted: interrupted}, nil
}

// SharedActorBill is what NewSharedActor holds on dev for cfg's agents:
// for each agent what its own actor would (dqn.ActorBill: its copy of the
// agent's weights, its policy's and evaluator's pooled workspace, their
// pinned buffers and streams), as the shared actor builds the same for
// every agent. The worker adds its context, as every worker does.
func SharedActorBill(cfg dqn.Config, dev device.Device) (trainer.Bill, error) {
	one, err := dqn.ActorBill(cfg, dev)
	if err != nil {
		return trainer.Bill{}, err
	}
	var bill trainer.Bill
	for range cfg.NumAgents {
		bill = SumBills(bill, one)
	}
	return bill, nil
}

// SumBills is the bill of several processes, or parts of one, booked as
// one: every kind summed, their contexts too.
func SumBills(bills ...trainer.Bill) trainer.Bill {
	var s trainer.Bill
	for _, b := range bills {
		s.Parameters += b.Parameters
		s.Gradients += b.Gradients
		s.OptimizerState += b.OptimizerState
		s.RunningState += b.RunningState
		s.Activations += b.Activations
		s.Workspace += b.Workspace
		s.StagingInputs += b.StagingInputs
		s.StreamScratch += b.StreamScratch
		s.Context += b.Context
		s.PinnedHost += b.PinnedHost
	}
	return s
}

// sharedReporter sends the shared actor's progress at an interval: one
// report of each agent, as an actor of its own would send it, in one
// message.
type sharedReporter struct {
	conn    *worker.Conn
	mems    []*shm.Memory
	cfg     dqn.Config
	actor   *dqn.SharedActor
	tallies []*replayTally
	now     chan struct{} // a report at once: an evaluation

	mu       sync.Mutex
	episodes [][]dqn.EpisodeRecord
	evals    [][]RLEval
}

func (r *sharedReporter) episode(agent int, e env.Episode, steps int) {
	r.mu.Lock()
	r.episodes[agent] = append(r.episodes[agent], dqn.EpisodeRecord{Return: e.Return, Length: e.Length, EnvSteps: steps})
	r.mu.Unlock()
}

func (r *sharedReporter) eval(agent int, e dqn.EvalResult) {
	r.mu.Lock()
	r.evals[agent] = append(r.evals[agent], RLEval{EnvSteps: e.EnvSteps, Version: e.Version, MeanReturn: e.MeanReturn,
		Episodes: e.Episodes, Seconds: e.Elapsed.Seconds()})
	r.mu.Unlock()
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// start reports every interval until the returned function is called;
// that sends a last report.
func (r *sharedReporter) start(every time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		last := -1
		for {
			select {
			case <-quit:
				r.report(&last)
				return
			case <-t.C:
				r.report(&last)
			case <-r.now:
				r.report(&last)
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

func (r *sharedReporter) report(last *int) {
	r.mu.Lock()
	eps, evals := r.episodes, r.evals
	r.episodes, r.evals = make([][]dqn.EpisodeRecord, len(r.mems)), make([][]RLEval, len(r.mems))
	r.mu.Unlock()
	waiting := r.actor.Waiting()
	p := RLProgress{Role: RoleSharedActor, Waiting: waiting, EnvSteps: -1}
	for i, m := range r.mems {
		a := RLProgress{Role: RoleActor, EnvSteps: int(m.Appended()), LearnerSteps: int(m.LearnerSteps()), Episodes: eps[i], Evals: evals[i],
			Epoch: m.Epoch(), Published: m.Version(), Waiting: waiting, Version: r.actor.Version(i), Syncs: r.actor.Syncs(i)}
		a.Epsilon = r.cfg.Epsilon(a.EnvSteps)
		a.Replays, a.ReplaySeconds = r.tallies[i].take()
		if p.EnvSteps < 0 || a.EnvSteps < p.EnvSteps {
			p.EnvSteps = a.EnvSteps
		}
		p.Agents = append(p.Agents, a)
	}
	switch {
	case p.EnvSteps != *last:
		r.conn.Advance("shared actor working")
	case waiting:
		r.conn.Advance("shared actor waiting for the learners")
	}
	*last = p.EnvSteps
	if body, err := json.Marshal(p); err == nil {
		_ = r.conn.Progress(body)
	}
}
