package rl

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/budget/holder"
	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// agentBudgets keeps the device-memory budgets of a run's agents on this
// machine's devices: each agent's learner and its actor, or the agents'
// shared actor, ask the broker before they allocate. An agent's two
// halves are booked as one holder, granted together or not at all: each
// needs the other running (an actor waits for its learner's first
// weights, a learner for its actor's transitions), so a device that held
// one half while the other waited could hold it for ever. Neither half can
// park; the agent's budget is kept until both halves have ended, so an
// actor started again takes the share its predecessor held. When the
// agents share an actor, the shared actor and every learner are booked
// as one in the same way (worldBudget).
type agentBudgets struct {
	broker *budget.Broker
	// world books the shared actor and the learners, when the agents
	// share an actor; nil when each agent has its own actor.
	world *worldBudget

	mu     sync.Mutex
	agents map[int]*agentBudget
	// learnersEnded are the agents whose learners have ended: an actor
	// of theirs that asks when the pair is not booked is refused.
	learnersEnded map[int]bool
}

func newAgentBudgets(req Request) (*agentBudgets, error) {
	b, err := budget.New(budget.Config{DeviceMemory: req.DeviceMemory})
	if err != nil {
		return nil, err
	}
	ab := &agentBudgets{broker: b, agents: map[int]*agentBudget{}, learnersEnded: map[int]bool{}}
	if req.Config.ActorMode() == dqn.ActorShared {
		ab.world = newWorldBudget(b, req.Config.NumAgents)
	}
	return ab, nil
}

// half is the budget answerer of agent's half role placed on sl, for
// jobserver.RL, and the call that says the half's worker has ended. A
// half placed by a scheduler (its own node) asks nobody: nil.
func (b *agentBudgets) half(agent int, role string, sl launch.Slot, obs trainer.Observer, log *slog.Logger) (ask func(jobserver.BudgetRequest, jobserver.BudgetReply) error, done func()) {
	if b == nil {
		return nil, func() {}
	}
	if b.world != nil {
		// A learner runs once: its worker's end is the learner's.
		name := learnerName(agent)
		ask = b.world.member(name, sl, agent, obs, log)
		return ask, func() { b.world.leave(name) }
	}
	if sl.Remote() {
		return nil, func() {}
	}
	b.mu.Lock()
	a := b.agents[agent]
	if a == nil {
		a = &agentBudget{sink: holder.New(holder.Config{Broker: b.broker, Holder: fmt.Sprintf("agent %d", agent),
			Kind: "rl", Device: sl.String(), Observer: obs, Logger: log.With("agent", agent)})}
		if b.learnersEnded[agent] {
			a.refused = learnerGone(agent)
		}
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

// sharedActor is the budget answerer of one run of the shared actor,
// placed on sl, and the call that says its worker has ended; the actor
// may be started again, so its share is kept until sharedActorEnded.
func (b *agentBudgets) sharedActor(sl launch.Slot, log *slog.Logger) (ask func(jobserver.BudgetRequest, jobserver.BudgetReply) error, done func()) {
	if b == nil || b.world == nil {
		return nil, func() {}
	}
	ask = b.world.member(sharedActorMember, sl, -1, nil, log)
	return ask, func() { b.world.workerEnded(sharedActorMember) }
}

// sharedActorEnded says the shared actor will not be started again (it
// finished, failed for good, or never started).
func (b *agentBudgets) sharedActorEnded() {
	if b != nil && b.world != nil {
		b.world.leave(sharedActorMember)
	}
}

// learnerEnded says agent's learner has ended, or will never start: with
// a shared actor, the world is booked without it rather than waiting for
// a request that will not come; an agent's own actor whose pair is not
// booked (its learner failed before it asked) is refused rather than left
// waiting for its learner's request.
func (b *agentBudgets) learnerEnded(agent int) {
	switch {
	case b == nil:
		return
	case b.world != nil:
		b.world.leave(learnerName(agent))
		return
	}
	b.mu.Lock()
	b.learnersEnded[agent] = true
	a := b.agents[agent]
	b.mu.Unlock()
	if a != nil {
		a.learnerEnded(agent)
	}
}

func learnerGone(agent int) string {
	return fmt.Sprintf("agent %d's learner ended before it asked for its budget; its actor waits for the learner's weights, so it is not started alone", agent)
}

// agentBudget is one agent's holder: the halves' requests until both
// have asked, then the pair's grant or refusal.
type agentBudget struct {
	sink    *holder.Sink
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
	if len(a.asked) < 2 {
		a.mu.Unlock()
		return nil // the other half's request completes the bill
	}
	both := jobserver.BudgetRequest{Device: req.Device, Total: req.Total, Free: req.Free}
	for _, h := range a.asked {
		both.Bill = jobserver.SumBills(both.Bill, h.req.Bill)
		both.Free = min(both.Free, h.req.Free)
	}
	a.mu.Unlock()
	return a.sink.Ask(both, pairReply{a})
}

// learnerEnded refuses the actor's request, and its next, when the
// learner ended before it asked: the pair can never be booked.
func (a *agentBudget) learnerEnded(agent int) {
	a.mu.Lock()
	if _, asked := a.asked[jobserver.RoleLearner]; asked || a.granted != nil || a.refused != "" {
		a.mu.Unlock()
		return
	}
	reason := learnerGone(agent)
	a.refused = reason
	var waiting []halfAsk
	for _, h := range a.asked {
		waiting = append(waiting, h)
	}
	a.asked = nil
	a.mu.Unlock()
	for _, h := range waiting {
		_ = h.reply.Refuse(reason) // its worker, gone meanwhile, fails its own call
	}
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

// sharedActorMember names the shared actor among a world's workers.
const sharedActorMember = "shared actor"

func learnerName(agent int) string { return fmt.Sprintf("learner %d", agent) }

// worldBudget books the workers of a run whose agents share one actor:
// the shared actor and every learner placed on this machine, all at once
// or none. The shared actor waits for every learner's first weights and
// each learner for the shared actor's transitions, so no part of the world
// can go on without the rest, and a device that granted some of them
// while another waited would hold its part for ever. So:
//
//   - The world is booked once every worker that will ask has asked. A
//     worker that will not (a learner that ended before it asked, an agent
//     that could not start, a shared actor that failed for good, a worker a
//     scheduler placed) leaves the world (leave), which is then booked
//     without it rather than kept waiting for it.
//   - Each device's part is one holder, asked in turn; the first refused
//     releases the parts granted before it and every worker is refused
//     with the reason. The broker is the run's own (newAgentBudgets), and
//     every worker of the run on this machine is in the world, so each
//     part is asked of books holding nothing else: it is granted or
//     refused at once. A part that would wait all the same (memory held
//     by something outside the world) is refused too: nothing of the
//     world is ever held while another part waits.
//   - The grant is kept until every worker has ended for good, so a shared
//     actor started again after a failure is answered at once, with the
//     share its predecessor held; a refusal is final alike.
type worldBudget struct {
	broker *budget.Broker

	mu      sync.Mutex
	members map[string]*worldMember
	names   []string // the members in order: the shared actor, then learner 0, 1, ...
	// events are, by agent, where the world's budget decisions are told:
	// each local learner's agent's events.
	events  map[int]trainer.Observer
	log     *slog.Logger
	booking bool           // a booking is under way, outside the lock
	sinks   []*holder.Sink // the world's holders, one a device, while granted
	granted *jobserver.BudgetGrant
	refused string
}

// worldMember is one worker of the world.
type worldMember struct {
	asked *worldAsk // its running worker's request, until the world is booked
	ended bool      // it will ask no more
}

// worldAsk is a worker's request, with its slot's device.
type worldAsk struct {
	name, device string
	req          jobserver.BudgetRequest
	reply        holder.Reply
}

func newWorldBudget(b *budget.Broker, agents int) *worldBudget {
	w := &worldBudget{broker: b, members: map[string]*worldMember{}, events: map[int]trainer.Observer{}}
	w.names = append(w.names, sharedActorMember)
	for i := range agents {
		w.names = append(w.names, learnerName(i))
	}
	for _, n := range w.names {
		w.members[n] = &worldMember{}
	}
	return w
}

// member is the budget answerer of the world's worker name placed on sl
// (for agent's events when agent >= 0 and obs is set); nil when a
// scheduler placed it: it asks nobody, and leaves the world.
func (w *worldBudget) member(name string, sl launch.Slot, agent int, obs trainer.Observer, log *slog.Logger) func(jobserver.BudgetRequest, jobserver.BudgetReply) error {
	if sl.Remote() {
		w.leave(name)
		return nil
	}
	w.mu.Lock()
	if obs != nil && agent >= 0 {
		w.events[agent] = obs
	}
	if w.log == nil {
		w.log = log
	}
	w.mu.Unlock()
	device := sl.String()
	return func(req jobserver.BudgetRequest, reply jobserver.BudgetReply) error {
		return w.ask(name, device, req, reply)
	}
}

// ask takes name's request: it waits for the other workers', then books
// the world; a worker that asks after the world was booked (a shared
// actor started again) has the world's answer at once.
func (w *worldBudget) ask(name, device string, req jobserver.BudgetRequest, reply holder.Reply) error {
	w.mu.Lock()
	switch {
	case w.granted != nil:
		g := *w.granted
		w.mu.Unlock()
		g.Bytes = req.Bill.DeviceBytes()
		return reply.Grant(g)
	case w.refused != "":
		reason := w.refused
		w.mu.Unlock()
		return reply.Refuse(reason)
	}
	own := &worldAsk{name: name, device: device, req: req, reply: reply}
	w.members[name].asked = own
	asks := w.ready()
	w.mu.Unlock()
	if asks == nil {
		return nil // the others' requests complete the world
	}
	return w.book(asks, own)
}

// ready takes the world's requests when every worker that has not left
// has asked and the world is not booked, marking it booking; nil
// otherwise. Called with w.mu held.
func (w *worldBudget) ready() []*worldAsk {
	if w.booking || w.granted != nil || w.refused != "" {
		return nil
	}
	var asks []*worldAsk
	for _, n := range w.names {
		m := w.members[n]
		switch {
		case m.ended:
		case m.asked == nil:
			return nil
		default:
			asks = append(asks, m.asked)
		}
	}
	if len(asks) == 0 {
		return nil
	}
	for _, a := range asks {
		w.members[a.name].asked = nil
	}
	w.booking = true
	return asks
}

// book asks the broker for the world, a holder a device, all or nothing,
// and answers every request; it returns the error of answering own (the
// caller's), if any: a worker gone meanwhile fails its own call.
func (w *worldBudget) book(asks []*worldAsk, own *worldAsk) error {
	byDevice := map[string][]*worldAsk{}
	for _, a := range asks {
		byDevice[a.device] = append(byDevice[a.device], a)
	}
	var sinks []*holder.Sink
	var grant jobserver.BudgetGrant
	refused := ""
	for _, dev := range slices.Sorted(maps.Keys(byDevice)) {
		part := byDevice[dev]
		req := jobserver.BudgetRequest{Device: part[0].req.Device, Total: part[0].req.Total, Free: part[0].req.Free}
		for _, a := range part {
			req.Bill = jobserver.SumBills(req.Bill, a.req.Bill)
			req.Free = min(req.Free, a.req.Free)
		}
		sink := holder.New(holder.Config{Broker: w.broker, Holder: worldHolder(part), Kind: "rl", Device: dev,
			Observer: w.observer(), Logger: w.logger()})
		ans := &worldAnswer{}
		_ = sink.Ask(req, ans) // a worldAnswer answers no error
		sinks = append(sinks, sink)
		g, reason := ans.get()
		if reason == "" && g == nil {
			books := w.broker.Books(dev)
			reason = fmt.Sprintf("rl %s would wait for device memory on %s that others hold (%s of %s granted)",
				worldHolder(part), dev, trainer.FormatBytes(books.Granted), trainer.FormatBytes(books.Capacity))
			w.observer().Observe(trainer.Event{Time: time.Now(), Kind: holder.EventRefused, Fields: map[string]any{
				"device": dev, "bytes": req.Bill.DeviceBytes(), "bill": req.Bill, "reason": reason}})
		}
		if reason != "" {
			refused = reason + worldBills(asks)
			break
		}
		grant.WaitedSeconds = max(grant.WaitedSeconds, g.WaitedSeconds)
	}
	if refused != "" {
		for _, s := range sinks {
			s.Release()
		}
		sinks = nil
	}
	w.mu.Lock()
	w.booking = false
	if refused != "" {
		w.refused = refused
	} else {
		w.granted, w.sinks = &grant, sinks
	}
	// Requests made while the world was booked (a shared actor started
	// again) have its answer too.
	for _, n := range w.names {
		if m := w.members[n]; m.asked != nil {
			asks, m.asked = append(asks, m.asked), nil
		}
	}
	release := w.takeSinksIfEnded()
	w.mu.Unlock()
	for _, s := range release {
		s.Release()
	}
	var ownErr error
	for _, a := range asks {
		var err error
		if refused != "" {
			err = a.reply.Refuse(refused)
		} else {
			g := grant
			g.Bytes = a.req.Bill.DeviceBytes()
			err = a.reply.Grant(g)
		}
		if a == own {
			ownErr = err
		}
	}
	return ownErr
}

// takeSinksIfEnded takes the world's holders, to release, once every
// worker has ended for good. Called with w.mu held.
func (w *worldBudget) takeSinksIfEnded() []*holder.Sink {
	if w.booking {
		return nil // book releases them, if need be, as it ends
	}
	for _, m := range w.members {
		if !m.ended {
			return nil
		}
	}
	sinks := w.sinks
	w.sinks = nil
	return sinks
}

// workerEnded says name's worker ended: its request, if the world was not
// booked yet, is withdrawn (the worker started again asks anew).
func (w *worldBudget) workerEnded(name string) {
	w.mu.Lock()
	if m := w.members[name]; m != nil {
		m.asked = nil
	}
	w.mu.Unlock()
}

// leave says name will ask no more: the world is booked without it when
// the others have asked, and released once every worker has left.
func (w *worldBudget) leave(name string) {
	w.mu.Lock()
	m := w.members[name]
	if m == nil || m.ended {
		w.mu.Unlock()
		return
	}
	m.ended, m.asked = true, nil
	asks := w.ready()
	release := w.takeSinksIfEnded()
	w.mu.Unlock()
	for _, s := range release {
		s.Release()
	}
	if asks != nil {
		_ = w.book(asks, nil)
	}
}

// observer tells the world's budget decisions to every local learner's
// agent's events.
func (w *worldBudget) observer() trainer.Observer {
	return trainer.ObserverFunc(func(m trainer.Measurement) {
		w.mu.Lock()
		var to []trainer.Observer
		for _, i := range slices.Sorted(maps.Keys(w.events)) {
			to = append(to, w.events[i])
		}
		w.mu.Unlock()
		for _, o := range to {
			o.Observe(m)
		}
	})
}

func (w *worldBudget) logger() *slog.Logger {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.log.With("holder", "shared world")
}

// worldHolder names a device's part of the world, for the broker's books
// and messages: "shared actor and learners 0, 1", "learner 1 of the
// shared world".
func worldHolder(part []*worldAsk) string {
	actor := false
	var learners []string
	for _, a := range part {
		if a.name == sharedActorMember {
			actor = true
		} else {
			learners = append(learners, strings.TrimPrefix(a.name, "learner "))
		}
	}
	ls := ""
	switch len(learners) {
	case 0:
	case 1:
		ls = "learner " + learners[0]
	default:
		ls = "learners " + strings.Join(learners, ", ")
	}
	switch {
	case actor && ls != "":
		return sharedActorMember + " and " + ls
	case actor:
		return sharedActorMember
	}
	return ls + " of the shared world"
}

// worldBills is what a refusal adds: each worker's bill, and why none is
// started without the others.
func worldBills(asks []*worldAsk) string {
	devices := map[string]bool{}
	for _, a := range asks {
		devices[a.device] = true
	}
	var parts []string
	for _, a := range asks {
		p := a.name + " " + trainer.FormatBytes(a.req.Bill.DeviceBytes())
		if len(devices) > 1 {
			p += " on " + a.device
		}
		parts = append(parts, p)
	}
	return "; the workers' bills: " + strings.Join(parts, ", ") +
		"; the shared actor and the learners wait for one another, so they are granted all at once or none is"
}

// worldAnswer keeps the broker's answer to a device's part of the world.
type worldAnswer struct {
	mu      sync.Mutex
	grant   *jobserver.BudgetGrant
	refused string
}

func (a *worldAnswer) get() (*jobserver.BudgetGrant, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.grant, a.refused
}

func (a *worldAnswer) Grant(g jobserver.BudgetGrant) error {
	a.mu.Lock()
	a.grant = &g
	a.mu.Unlock()
	return nil
}

func (a *worldAnswer) Refuse(reason string) error {
	a.mu.Lock()
	a.refused = reason
	a.mu.Unlock()
	return nil
}

// Park and Unpark are never asked: the world's workers cannot park.
func (a *worldAnswer) Park() error   { return errors.New("rl: the shared world's workers cannot park") }
func (a *worldAnswer) Unpark() error { return errors.New("rl: the shared world's workers cannot park") }
