package rl

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/budget/holder"
	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// agentBudgets keeps the device-memory budgets of a run's agents on this
// machine's devices: each agent's learner and, unless the agents share an
// actor, its actor ask the broker before they allocate. An agent's two
// halves are booked as one holder, granted together or not at all: each
// needs the other running (an actor waits for its learner's first
// weights, a learner for its actor's transitions), so a device that held
// one half while the other waited could hold it for ever. Neither half can
// park; the agent's budget is kept until both halves have ended, so an
// actor started again takes the share its predecessor held.
type agentBudgets struct {
	broker *budget.Broker
	// pair is whether an agent has an actor of its own beside its learner.
	pair bool

	mu     sync.Mutex
	agents map[int]*agentBudget
}

func newAgentBudgets(req Request) (*agentBudgets, error) {
	b, err := budget.New(budget.Config{DeviceMemory: req.DeviceMemory})
	if err != nil {
		return nil, err
	}
	return &agentBudgets{broker: b, pair: req.Config.ActorMode() != dqn.ActorShared, agents: map[int]*agentBudget{}}, nil
}

// half is the budget answerer of agent's half role placed on sl, for
// jobserver.RL, and the call that says the half's worker has ended. A
// half placed by a scheduler (its own node) asks nobody: nil.
func (b *agentBudgets) half(agent int, role string, sl launch.Slot, obs trainer.Observer, log *slog.Logger) (ask func(jobserver.BudgetRequest, jobserver.BudgetReply) error, done func()) {
	if b == nil || sl.Remote() {
		return nil, func() {}
	}
	b.mu.Lock()
	a := b.agents[agent]
	if a == nil {
		halves := 1
		if b.pair {
			halves = 2
		}
		a = &agentBudget{halves: halves, sink: holder.New(holder.Config{Broker: b.broker, Holder: fmt.Sprintf("agent %d", agent),
			Kind: "rl", Device: sl.String(), Observer: obs, Logger: log.With("agent", agent)})}
		b.agents[agent] = a
	}
	a.running++
	b.mu.Unlock()
	done = func() {
		b.mu.Lock()
		a.running--
		last := a.running == 0
		if last {
			delete(b.agents, agent)
		}
		b.mu.Unlock()
		if last {
			a.sink.Release()
		}
	}
	return func(req jobserver.BudgetRequest, reply jobserver.BudgetReply) error { return a.ask(role, req, reply) }, done
}

// agentBudget is one agent's holder: the halves' requests until both
// have asked, then the pair's grant or refusal.
type agentBudget struct {
	sink    *holder.Sink
	halves  int // requests that make the agent's bill: 2 for a learner and its actor, 1 for a learner alone
	running int // halves whose workers have not ended

	mu      sync.Mutex
	asked   map[string]halfAsk // by role, until the pair is booked
	granted *jobserver.BudgetGrant
	refused string
}

type halfAsk struct {
	req   jobserver.BudgetRequest
	reply holder.Reply
}

// ask takes role's request: it waits for the other half's, then books the
// two as one; a half that asks again (started again) after the pair was
// granted or refused has the same answer at once.
func (a *agentBudget) ask(role string, req jobserver.BudgetRequest, reply holder.Reply) error {
	a.mu.Lock()
	switch {
	case a.granted != nil:
		g := *a.granted
		a.mu.Unlock()
		g.Bytes = req.Bill.DeviceBytes()
		return reply.Grant(g)
	case a.refused != "":
		a.mu.Unlock()
		return reply.Refuse(a.refused)
	}
	if a.asked == nil {
		a.asked = map[string]halfAsk{}
	}
	a.asked[role] = halfAsk{req, reply}
	if len(a.asked) < a.halves {
		a.mu.Unlock()
		return nil // the other half's request completes the bill
	}
	both := jobserver.BudgetRequest{Device: req.Device, Total: req.Total, Free: req.Free}
	for _, h := range a.asked {
		both.Bill = addBills(both.Bill, h.req.Bill)
		both.Free = min(both.Free, h.req.Free)
	}
	a.mu.Unlock()
	return a.sink.Ask(both, pairReply{a})
}

// addBills is the bill of two processes: every kind summed, their
// contexts too.
func addBills(x, y trainer.Bill) trainer.Bill {
	return trainer.Bill{Parameters: x.Parameters + y.Parameters, Gradients: x.Gradients + y.Gradients,
		OptimizerState: x.OptimizerState + y.OptimizerState, RunningState: x.RunningState + y.RunningState,
		Activations: x.Activations + y.Activations, Workspace: x.Workspace + y.Workspace, StagingInputs: x.StagingInputs + y.StagingInputs,
		StreamScratch: x.StreamScratch + y.StreamScratch, Context: x.Context + y.Context, PinnedHost: x.PinnedHost + y.PinnedHost}
}

// pairReply answers both halves' requests as the broker answers the pair.
type pairReply struct{ a *agentBudget }

// take ends the wait of the halves that asked, recording the answer for
// those that ask later.
func (p pairReply) take(grant *jobserver.BudgetGrant, refused string) []halfAsk {
	a := p.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.granted, a.refused = grant, refused
	var out []halfAsk
	for _, h := range a.asked {
		out = append(out, h)
	}
	a.asked = nil
	return out
}

func (p pairReply) Grant(g jobserver.BudgetGrant) error {
	var errs []error
	for _, h := range p.take(&g, "") {
		hg := g
		hg.Bytes = h.req.Bill.DeviceBytes()
		errs = append(errs, h.reply.Grant(hg))
	}
	return errors.Join(errs...)
}

func (p pairReply) Refuse(reason string) error {
	var errs []error
	for _, h := range p.take(nil, reason) {
		errs = append(errs, h.reply.Refuse(reason))
	}
	return errors.Join(errs...)
}

// Park and Unpark are never asked: an agent's halves cannot park.
func (p pairReply) Park() error   { return errors.New("rl: an agent's actor and learner cannot park") }
func (p pairReply) Unpark() error { return errors.New("rl: an agent's actor and learner cannot park") }
