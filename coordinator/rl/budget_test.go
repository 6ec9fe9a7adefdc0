package rl

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/budget/holder"
	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
)

// bills are an actor's bill (actorBill: an agent's own actor's, or the
// shared actor's) and one learner's, on the CPU device.
func bills(t *testing.T, cfg dqn.Config, actorBill func(dqn.Config, device.Device) (trainer.Bill, error)) (actor, learner trainer.Bill) {
	t.Helper()
	dev, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if actor, err = actorBill(cfg, dev); err != nil {
		t.Fatal(err)
	}
	if learner, err = dqn.LearnerBill(cfg, dev); err != nil {
		t.Fatal(err)
	}
	return actor, learner
}

// budgetEvents are agent i's budget events.
func budgetEvents(t *testing.T, runDir string, i int) []trainer.Event {
	t.Helper()
	f, err := os.Open(filepath.Join(AgentDir(runDir, i), rundir.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []trainer.Event
	if err := telemetry.ReadEvents(f, func(e trainer.Event) {
		if strings.HasPrefix(e.Kind, "budget_") {
			out = append(out, e)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAgentsAskForDeviceMemory: each agent's actor and learner ask the
// budget broker before they allocate, booked as one holder: with
// --device-memory fitting one agent's two halves (with headroom) the two
// agents both finish, each granted its actor's and learner's bills
// together, one after the other; with a limit each half would fit alone
// but not the two together, both halves are refused, naming the agent,
// rather than one held while the other waits.
func TestAgentsAskForDeviceMemory(t *testing.T) {
	req := rlRequest(t)
	req.Config.TotalSteps, req.Config.LearningStarts, req.Config.EvalInterval = 1500, 300, 0
	actor, learner := bills(t, req.Config, dqn.ActorBill)
	both := actor.DeviceBytes() + learner.DeviceBytes()
	req.DeviceMemory = int64(float64(both)*budget.Headroom) + both/2
	sum := runToEnd(t, req)
	waited := 0
	for i, a := range sum.Agents {
		if a.State != AgentSucceeded || a.EnvSteps != 1500 {
			t.Errorf("agent %d: %s (%s), %d env steps", i, a.State, a.Reason, a.EnvSteps)
		}
		var grants int
		for _, e := range budgetEvents(t, req.Dir, i) {
			switch e.Kind {
			case holder.EventGrant:
				grants++
				if e.Fields["bytes"] != float64(both) || e.Fields["capacity"] != float64(req.DeviceMemory) {
					t.Errorf("agent %d granted %v of %v bytes, want its actor's and learner's %d of %d", i, e.Fields["bytes"], e.Fields["capacity"], both, req.DeviceMemory)
				}
			case holder.EventWait:
				waited++
			}
		}
		if grants != 1 {
			t.Errorf("agent %d: %d budget grants, want one for its two halves", i, grants)
		}
	}
	t.Logf("an agent's bill: actor %v, learner %v; %d agents waited", actor, learner, waited)

	req = rlRequest(t)
	req.Config.TotalSteps, req.Config.LearningStarts, req.Config.EvalInterval = 1500, 300, 0
	req.ActorRestarts = 0
	req.DeviceMemory = int64(float64(max(actor.DeviceBytes(), learner.DeviceBytes()))*budget.Headroom) + 1
	sum = runToEnd(t, req)
	for i, a := range sum.Agents {
		if a.State != AgentFailed || !strings.Contains(a.Reason, fmt.Sprintf("rl agent %d needs", i)) || !strings.Contains(a.Reason, "more than device cpu has") {
			t.Errorf("agent %d: %s (%s); want it failed, its budget refused", i, a.State, a.Reason)
		}
	}
}

// answers records what each half's worker was answered.
type answers struct {
	mu  sync.Mutex
	got []string
}

func (a *answers) add(s string) {
	a.mu.Lock()
	a.got = append(a.got, s)
	a.mu.Unlock()
}

func (a *answers) take() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := strings.Join(a.got, "; ")
	a.got = nil
	return out
}

// halfReply is one half's worker's end of the budget request.
type halfReply struct {
	a    *answers
	half string
}

func (r halfReply) Grant(g jobserver.BudgetGrant) error {
	r.a.add(fmt.Sprintf("%s granted %d", r.half, g.Bytes))
	return nil
}
func (r halfReply) Refuse(string) error { r.a.add(r.half + " refused"); return nil }
func (r halfReply) Park() error         { r.a.add(r.half + " parked"); return nil }
func (r halfReply) Unpark() error       { r.a.add(r.half + " unparked"); return nil }

// TestAgentHalvesAreBookedAsOne: an agent's first half to ask waits for
// the other; the two bills are booked together and both halves answered
// at once; an agent that does not fit beside another waits for it to end
// (both its halves' workers), an actor started again while its agent holds
// its budget is granted at once, and an agent whose halves fit the device
// alone but not together has both refused; an actor whose learner ended
// before it asked is refused rather than left waiting, and a half a
// scheduler placed asks nobody. (With a shared actor:
// TestSharedWorldIsBookedAsOne.)
func TestAgentHalvesAreBookedAsOne(t *testing.T) {
	cfg := dqn.DefaultConfig()
	b, err := newAgentBudgets(Request{Config: cfg, DeviceMemory: 1000})
	if err != nil {
		t.Fatal(err)
	}
	got := &answers{}
	sl := launch.Slot{Device: "cpu"}
	bill := func(n int64) jobserver.BudgetRequest {
		return jobserver.BudgetRequest{Bill: trainer.Bill{Parameters: n}, Device: "cpu", Total: 1 << 30, Free: 1 << 30}
	}
	// start is a half's worker starting: it returns the call that says
	// the worker ended.
	start := func(agent int, role string) (done func()) {
		ask, done := b.half(agent, role, sl, nil, slog.New(slog.DiscardHandler))
		if ask == nil {
			t.Fatalf("agent %d's %s on this machine asks nobody", agent, role)
		}
		return done
	}
	// A half's worker asks through its half's answerer; its end of the
	// reply is a halfReply here.
	ask := func(agent int, role string, n int64) {
		t.Helper()
		if err := b.agents[agent].ask(role, bill(n), halfReply{got, fmt.Sprintf("%d/%s", agent, role)}); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(step, want string) {
		t.Helper()
		if g := got.take(); g != want {
			t.Fatalf("%s: answered %q, want %q", step, g, want)
		}
	}
	a0, l0 := start(0, jobserver.RoleActor), start(0, jobserver.RoleLearner)
	ask(0, jobserver.RoleActor, 100)
	expect("agent 0's actor asks alone", "")
	ask(0, jobserver.RoleLearner, 300)
	if g := got.take(); g != "0/actor granted 100; 0/learner granted 300" && g != "0/learner granted 300; 0/actor granted 100" {
		t.Fatalf("agent 0's learner asks: answered %q, want both halves granted their bills", g)
	}
	if bk := b.broker.Books("cpu"); bk.Granted != 400 || bk.Holders != 1 || bk.Unparkable != 1 {
		t.Fatalf("books %+v: want agent 0's two bills as one unparkable holder", bk)
	}
	a1, l1 := start(1, jobserver.RoleActor), start(1, jobserver.RoleLearner)
	ask(1, jobserver.RoleLearner, 500)
	ask(1, jobserver.RoleActor, 200)
	expect("agent 1 asks for 700 (770 with headroom) beside agent 0's 400 of 1000", "")
	// Agent 0's actor fails and starts again: its agent holds its share.
	a0()
	a0 = start(0, jobserver.RoleActor)
	ask(0, jobserver.RoleActor, 100)
	expect("agent 0's actor started again", "0/actor granted 100")
	a0()
	expect("agent 0's actor ended, its learner runs", "")
	l0()
	if g := got.take(); g != "1/learner granted 500; 1/actor granted 200" && g != "1/actor granted 200; 1/learner granted 500" {
		t.Fatalf("agent 0 ended: answered %q, want agent 1's halves granted", g)
	}
	a1()
	l1()
	a2, l2 := start(2, jobserver.RoleActor), start(2, jobserver.RoleLearner)
	ask(2, jobserver.RoleActor, 600)
	ask(2, jobserver.RoleLearner, 600)
	if g := got.take(); g != "2/actor refused; 2/learner refused" && g != "2/learner refused; 2/actor refused" {
		t.Fatalf("two halves of 600 on a device of 1000: answered %q, want both refused", g)
	}
	a2()
	l2()
	// Agent 3's learner fails before it asks: its actor, waiting, is
	// refused, and so is the actor started again; agent 4's learner fails
	// before its actor has started.
	a3 := start(3, jobserver.RoleActor)
	ask(3, jobserver.RoleActor, 100)
	expect("agent 3's actor asks alone", "")
	b.learnerEnded(3)
	expect("agent 3's learner ended before it asked", "3/actor refused")
	a3()
	a3 = start(3, jobserver.RoleActor)
	ask(3, jobserver.RoleActor, 100)
	expect("agent 3's actor started again", "3/actor refused")
	a3()
	b.learnerEnded(4)
	a4 := start(4, jobserver.RoleActor)
	ask(4, jobserver.RoleActor, 100)
	expect("agent 4's actor starts after its learner ended", "4/actor refused")
	a4()
	if bk := b.broker.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 || bk.Waiting != 0 {
		t.Fatalf("books after every agent ended: %+v", bk)
	}

	if remote, _ := b.half(0, jobserver.RoleLearner, launch.Slot{Where: "slurm", Device: "cuda"}, nil, slog.New(slog.DiscardHandler)); remote != nil {
		t.Error("a half a scheduler placed asks the broker of this machine")
	}
}

// TestSharedWorldIsBookedAsOne: with a shared actor, the shared actor and
// every learner are booked as one: nobody is answered until all have
// asked, then all are granted their bills together; a shared actor
// started again while the world holds its budget is granted at once, and
// the budget goes back once every worker has ended. A learner that ends
// before it asks leaves the world, which is then booked without it. A
// world whose learners fit but not with the shared actor has every worker
// refused, naming the shared actor and each bill; across two devices, a
// part refused on one releases the part granted on the other. A world
// that would wait for memory held outside it is refused, not held, and a
// worker a scheduler placed asks nobody.
func TestSharedWorldIsBookedAsOne(t *testing.T) {
	cfg := dqn.DefaultConfig()
	cfg.Actor, cfg.NumAgents = dqn.ActorShared, 2
	got := &answers{}
	quiet := slog.New(slog.DiscardHandler)
	cpuSlot, gpu0, gpu1 := launch.Slot{Device: "cpu"}, launch.Slot{Device: "cuda", GPU: 0}, launch.Slot{Device: "cuda", GPU: 1}
	newWorld := func() *agentBudgets {
		t.Helper()
		b, err := newAgentBudgets(Request{Config: cfg, DeviceMemory: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// start is a worker of the world starting on sl (agent -1: the shared
	// actor); it returns the call that says the worker ended.
	start := func(b *agentBudgets, agent int, sl launch.Slot) (done func()) {
		t.Helper()
		var ask func(jobserver.BudgetRequest, jobserver.BudgetReply) error
		if agent < 0 {
			ask, done = b.sharedActor(sl, quiet)
		} else {
			ask, done = b.half(agent, jobserver.RoleLearner, sl, nil, quiet)
		}
		if ask == nil {
			t.Fatalf("worker %d on %s asks nobody", agent, sl)
		}
		return done
	}
	// ask is the worker's request through the world's answerer; its end
	// of the reply is a halfReply here.
	ask := func(b *agentBudgets, agent int, sl launch.Slot, n int64) {
		t.Helper()
		name, short := sharedActorMember, "actor"
		if agent >= 0 {
			name, short = learnerName(agent), fmt.Sprintf("%d/learner", agent)
		}
		req := jobserver.BudgetRequest{Bill: trainer.Bill{Parameters: n}, Device: sl.Device, Total: 1 << 30, Free: 1 << 30}
		if err := b.world.ask(name, sl.String(), req, halfReply{got, short}); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(step string, want ...string) {
		t.Helper()
		g := strings.Split(got.take(), "; ")
		slices.Sort(g)
		slices.Sort(want)
		if !slices.Equal(g, want) && !(len(want) == 0 && len(g) == 1 && g[0] == "") {
			t.Fatalf("%s: answered %q, want %q", step, g, want)
		}
	}
	books := func(b *agentBudgets, dev string, granted int64, holders int) {
		t.Helper()
		if bk := b.broker.Books(dev); bk.Granted != granted || bk.Holders != holders || bk.Waiting != 0 {
			t.Fatalf("books of %s %+v: want %d bytes granted to %d holders, none waiting", dev, bk, granted, holders)
		}
	}

	b := newWorld()
	l0, l1, a := start(b, 0, cpuSlot), start(b, 1, cpuSlot), start(b, -1, cpuSlot)
	ask(b, 0, cpuSlot, 200)
	ask(b, -1, cpuSlot, 300)
	expect("the shared actor and learner 0 asked, learner 1 not yet")
	ask(b, 1, cpuSlot, 100)
	expect("every worker asked", "0/learner granted 200", "1/learner granted 100", "actor granted 300")
	books(b, "cpu", 600, 1)
	a()
	a = start(b, -1, cpuSlot)
	ask(b, -1, cpuSlot, 300)
	expect("the shared actor started again", "actor granted 300")
	a()
	b.sharedActorEnded()
	l0()
	books(b, "cpu", 600, 1)
	l1()
	b.learnerEnded(1) // as the agent's goroutine says it again
	books(b, "cpu", 0, 0)

	b = newWorld()
	l0, a = start(b, 0, cpuSlot), start(b, -1, cpuSlot)
	ask(b, -1, cpuSlot, 300)
	ask(b, 0, cpuSlot, 200)
	expect("learner 1 has not asked")
	b.learnerEnded(1) // it failed before it asked
	expect("learner 1 ended before it asked", "0/learner granted 200", "actor granted 300")
	books(b, "cpu", 500, 1)
	a()
	b.sharedActorEnded()
	l0()
	books(b, "cpu", 0, 0)

	// Each learner of 300 fits alone (330 with headroom), and both do
	// (660); with the shared actor's 400 (1,100) they do not.
	b = newWorld()
	l0, l1, a = start(b, 0, cpuSlot), start(b, 1, cpuSlot), start(b, -1, cpuSlot)
	ask(b, 0, cpuSlot, 300)
	ask(b, 1, cpuSlot, 300)
	ask(b, -1, cpuSlot, 400)
	expect("a world of 1,000 bytes on a device of 1,000", "0/learner refused", "1/learner refused", "actor refused")
	reason := b.world.refused
	t.Logf("the refusal: %s", reason)
	for _, want := range []string{"rl shared actor and learners 0, 1 needs", "more than device cpu has",
		"shared actor 400 B, learner 0 300 B, learner 1 300 B", "granted all at once or none is"} {
		if !strings.Contains(reason, want) {
			t.Errorf("the refusal %q does not say %q", reason, want)
		}
	}
	a()
	a = start(b, -1, cpuSlot)
	ask(b, -1, cpuSlot, 400)
	expect("the shared actor started again after the refusal", "actor refused")
	a()
	b.sharedActorEnded()
	l0()
	l1()
	books(b, "cpu", 0, 0)

	// Learner 1 alone on GPU 1 cannot fit; the part on GPU 0, granted
	// first, is released.
	b = newWorld()
	l0, l1, a = start(b, 0, gpu0), start(b, 1, gpu1), start(b, -1, gpu0)
	ask(b, 0, gpu0, 300)
	ask(b, -1, gpu0, 300)
	ask(b, 1, gpu1, 950)
	expect("learner 1 cannot fit on GPU 1", "0/learner refused", "1/learner refused", "actor refused")
	if reason := b.world.refused; !strings.Contains(reason, "rl learner 1 of the shared world needs") || !strings.Contains(reason, "shared actor 300 B on cuda:0") {
		t.Errorf("the refusal %q does not name learner 1's part and each worker's device", reason)
	}
	books(b, "cuda:0", 0, 0)
	a()
	b.sharedActorEnded()
	l0()
	l1()

	// Something outside the world holds 500 of the device: the world's
	// 600 would wait, and is refused rather than held.
	b = newWorld()
	other, _, ok, err := b.broker.Ask(budget.Ask{Holder: "other", Device: "cpu", Bill: trainer.Bill{Parameters: 500}, Free: 1 << 30})
	if err != nil || !ok {
		t.Fatalf("another holder's 500 bytes: granted %v, %v", ok, err)
	}
	l0, l1, a = start(b, 0, cpuSlot), start(b, 1, cpuSlot), start(b, -1, cpuSlot)
	ask(b, 0, cpuSlot, 200)
	ask(b, 1, cpuSlot, 200)
	ask(b, -1, cpuSlot, 200)
	expect("a world that would wait", "0/learner refused", "1/learner refused", "actor refused")
	if reason := b.world.refused; !strings.Contains(reason, "would wait for device memory on cpu that others hold") {
		t.Errorf("the refusal %q does not say the world would wait", reason)
	}
	books(b, "cpu", 500, 1)
	other.Release()
	a()
	b.sharedActorEnded()
	l0()
	l1()

	b = newWorld()
	if remote, _ := b.sharedActor(launch.Slot{Where: "slurm", Device: "cuda"}, quiet); remote != nil {
		t.Error("a shared actor a scheduler placed asks the broker of this machine")
	}
	if remote, _ := b.half(0, jobserver.RoleLearner, launch.Slot{Where: "slurm", Device: "cuda"}, nil, quiet); remote != nil {
		t.Error("a learner a scheduler placed asks the broker of this machine")
	}
}
