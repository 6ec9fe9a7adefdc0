package rl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// Files of a run whose agents share one world (actor: shared): the shared
// actor's saved worlds, which a shared actor started again (after a
// failure, or in a resumed run) goes on from, and its worker log.
const (
	WorldFile      = "world.json"
	SharedActorLog = "actor.log"
)

// sharedActor is the one actor of a run whose agents act in one world: it
// starts once every agent has its memory, and is started again after a
// failure as an agent's own actor is.
type sharedActor struct {
	r *Run

	mu     sync.Mutex
	agents []*agentRun // nil until joined, and for an agent that will not act
	joined []bool
	left   int
	ready  chan struct{} // closed once every agent joined
	done   chan struct{} // closed once the actor has ended for good
	err    error
	// stoppedWell says the actor's last process answered as it ended:
	// stopped, it saved the worlds first.
	stoppedWell bool
}

func newSharedActor(r *Run) *sharedActor {
	n := r.req.Config.NumAgents
	return &sharedActor{r: r, agents: make([]*agentRun, n), joined: make([]bool, n), left: n,
		ready: make(chan struct{}), done: make(chan struct{})}
}

// worker is the shared actor as a launcher's worker: the place of agent
// 0's actor, whose slot it takes, and the run directory's actor.log.
func (s *sharedActor) worker() launch.Worker {
	return launch.Worker{Index: 1, Spools: filepath.Join(s.r.dir, "spool-"+jobserver.RoleSharedActor), Log: filepath.Join(s.r.dir, SharedActorLog)}
}

// join says that agent i is ready to act (a), or will not act (nil: it
// failed before its memory was made, or finished in an earlier run). Only
// the first call of each agent counts.
func (s *sharedActor) join(i int, a *agentRun) {
	s.mu.Lock()
	if s.joined[i] {
		s.mu.Unlock()
		return
	}
	s.joined[i], s.agents[i] = true, a
	if s.left--; s.left == 0 {
		close(s.ready)
	}
	s.mu.Unlock()
	if a == nil {
		// Its learner will not ask for a budget: the world is booked
		// without it. Outside s.mu: booking the world answers every
		// worker that asked, over its connection.
		s.r.budgets.learnerEnded(i)
	}
}

// wait waits for the actor to end for good and returns why it failed.
func (s *sharedActor) wait() error {
	<-s.done
	return s.err
}

// run waits for every agent, then runs the actor until the agents' work
// is done, every agent is stopped, it fails for good, or ctx ends.
func (s *sharedActor) run(ctx context.Context) {
	defer close(s.done)
	// Its share of the world's budget is kept for the actor started again
	// until now.
	defer s.r.budgets.sharedActorEnded()
	select {
	case <-s.ready:
	case <-ctx.Done():
		// An agent still joining ends too, as the run is interrupted.
		<-s.ready
	}
	for i, a := range s.agents {
		if a == nil {
			s.err = fmt.Errorf("the shared world needs every agent, and agent %d could not start (its own reason says why)", i)
			s.stopAll()
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	s.err = s.loop(ctx)
}

// savedAsStopped says, once the actor has ended for good, whether it
// saved the worlds as it stopped (a process killed by a second interrupt
// does not).
func (s *sharedActor) savedAsStopped() bool {
	<-s.done
	return s.stoppedWell
}

// stopAll sets every joined agent's stop flag: their learners end.
func (s *sharedActor) stopAll() {
	for _, a := range s.agents {
		if a != nil {
			a.mem.Stop()
		}
	}
}

func (s *sharedActor) allStopped() bool {
	for _, a := range s.agents {
		if !a.mem.Stopped() {
			return false
		}
	}
	return true
}

// loop runs the actor, starting it again after a failure up to
// ActorRestarts times while a learner lives.
func (s *sharedActor) loop(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := s.half(ctx, attempt)
		if err == nil || ctx.Err() != nil || s.allStopped() {
			s.stoppedWell = err == nil
			return nil
		}
		var we *worker.Error
		if errors.As(err, &we) && (we.Kind == worker.KindUsage || we.Kind == worker.KindNoDevice || we.Kind == worker.KindBudget) {
			// A refused budget is final too: the world's refusal is kept
			// (see worldBudget).
			s.stopAll()
			return fmt.Errorf("shared actor: %w (not started again: the next would fail the same way)", err)
		}
		if attempt > s.r.req.ActorRestarts {
			s.stopAll()
			return fmt.Errorf("shared actor failed %d times (--actor-restarts %d); last: %w", attempt, s.r.req.ActorRestarts, err)
		}
		s.r.log.Warn("shared actor failed; starting it again from its saved world", "attempt", attempt, "err", err)
		for _, a := range s.agents {
			a.event(EventActorRestart, map[string]any{"attempt": attempt + 1, "reason": err.Error(), "env_steps": a.mem.Appended(),
				"role": jobserver.RoleSharedActor})
			a.update(func(st *AgentStatus) { st.ActorRestarts++ })
			if m := s.r.req.Metrics; m != nil {
				m.ActorRestarted(a.i)
			}
		}
	}
}

// half runs the shared actor in a worker process until it answers.
func (s *sharedActor) half(ctx context.Context, attempt int) error {
	r, req := s.r, s.r.req
	w := s.worker()
	wlog, err := os.OpenFile(w.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(wlog, "=== %s shared actor of %d agents, attempt %d\n", time.Now().UTC().Format(time.RFC3339), len(s.agents), attempt)
	if err := wlog.Close(); err != nil {
		return err
	}
	sl, err := r.slots.TakeWhere(ctx, r.agentSlot(0))
	if err != nil {
		return err
	}
	defer r.slots.Give(sl)
	h, err := r.launcher.Start(ctx, w, sl, attempt)
	if err != nil {
		return r.crowd.explain(err)
	}
	defer h.Close()
	// It asks for its budget, booked with every learner's (worldBudget).
	ask, asked := r.budgets.sharedActor(sl, r.log)
	defer asked()
	// Each agent's status names its learner's device; the actor's slot is
	// in the worker events.
	memories := make([]string, len(s.agents))
	for i, a := range s.agents {
		memories[i] = a.mem.Path()
	}
	dev := sl.Device
	j := jobserver.RLJob{Role: jobserver.RoleSharedActor, Config: req.Config, Memories: memories, Dir: r.dir,
		WorldFile: filepath.Join(r.dir, WorldFile), WorldSaveEvery: req.WorldSaveEvery, Graphs: req.Graphs, MaxLead: req.MaxLead, Threads: req.Threads}
	observers := make([]trainer.Observer, len(s.agents))
	for i, a := range s.agents {
		observers[i] = a.halfObserver(jobserver.RoleActor, dev)
	}
	_, _, err = jobserver.RL(ctx, &hookHello{Transport: h.Transport, hello: func(h worker.Hello) {
		for _, a := range s.agents {
			a.event(EventWorker, map[string]any{"role": jobserver.RoleSharedActor, "pid": h.PID, "device": h.Device, "slot": sl.String(), "attempt": attempt})
		}
	}}, dev, j, func(p jobserver.RLProgress) {
		for i, ap := range p.Agents {
			if i < len(s.agents) {
				jobserver.ObserveReplays(observers[i], ap)
				s.agents[i].progress(ap, attempt)
			}
		}
	}, s.observer(observers), ask)
	if err != nil {
		return r.crowd.explain(fmt.Errorf("%s (attempt %d): %w (worker log %s)", jobserver.RoleSharedActor, attempt, err, w.Log))
	}
	return nil
}

// observer takes the shared actor's measurements: an event goes to the
// events of the agent it names (the actor tags each agent's), anything
// else, which names no agent, to agent 0's actor series.
func (s *sharedActor) observer(agents []trainer.Observer) trainer.Observer {
	return trainer.ObserverFunc(func(m trainer.Measurement) {
		if e, ok := m.(trainer.Event); ok {
			if i, ok := e.Fields["agent"].(float64); ok && int(i) >= 0 && int(i) < len(agents) {
				fields := maps.Clone(e.Fields)
				delete(fields, "agent")
				e.Fields = fields
				agents[int(i)].Observe(e)
				return
			}
		}
		agents[0].Observe(m)
	})
}
