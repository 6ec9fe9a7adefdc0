package rl

import (
	"errors"
	"fmt"
	"time"

	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/worker"
)

// CrowdPerCore is how many worker threads a run on the CPU device starts
// per CPU core of this machine before it is warned that they crowd it.
// Every agent's actor and learner run at once (the agents of a shared
// world must all act in it), each busy on its threads, so past some
// number a worker is scheduled too seldom to say hello within
// --worker-start-timeout or to send a heartbeat within
// --heartbeat-timeout, and is failed for it although nothing is wrong
// with it. On a 2-core machine 64 small workers said hello within 1.1 s
// of the run's start, 20 times inside the default 20 s; larger networks
// and captures take longer to start.
const CrowdPerCore = 32

// crowd is a run's worker processes on this machine's CPU cores, when
// they are more than it is warned of (crowding); the zero crowd is a run
// that fits.
type crowd struct {
	workers, threads, cores int
	agents                  int // the most agents that fit at these threads
	fitThreads              int // the most threads a worker may have for these agents to fit
	// resumed: the run keeps its agents (--resume refuses --agents), so
	// fewer agents is no remedy.
	resumed bool
}

// crowding says whether workers worker processes of threads CPU-device
// threads each crowd a machine of cores cores (more than CrowdPerCore
// threads a core); perAgent is each agent's share of the workers (2: an
// actor and a learner; 1: a learner, beside one shared actor).
func crowding(workers, perAgent, threads, cores int) (crowd, bool) {
	threads, cores = max(threads, 1), max(cores, 1)
	limit := CrowdPerCore * cores
	if workers*threads <= limit {
		return crowd{}, false
	}
	fit := limit / threads // workers
	if perAgent == 1 {
		fit-- // the shared actor
	} else {
		fit /= perAgent
	}
	return crowd{workers: workers, threads: threads, cores: cores, agents: max(fit, 0), fitThreads: limit / workers}, true
}

// remedy says what makes the run fit: fewer agents, fewer threads (each
// with the most that fit), or longer timeouts.
func (c crowd) remedy() string {
	var fewer []string
	if c.agents > 0 && !c.resumed {
		fewer = append(fewer, fmt.Sprintf("fewer agents (--agents %d fits)", c.agents))
	}
	if c.threads > 1 && c.fitThreads > 0 {
		fewer = append(fewer, fmt.Sprintf("fewer --threads (--threads %d fits)", c.fitThreads))
	}
	switch {
	case len(fewer) == 0 && c.resumed:
		return "raise --worker-start-timeout and --heartbeat-timeout"
	case len(fewer) == 0:
		return "run fewer agents and fewer --threads, or raise --worker-start-timeout and --heartbeat-timeout"
	case len(fewer) == 1:
		return "run " + fewer[0] + ", or raise --worker-start-timeout and --heartbeat-timeout"
	}
	return "run " + fewer[0] + " or " + fewer[1] + ", or raise --worker-start-timeout and --heartbeat-timeout"
}

// runCrowding is crowding for the run req asks for, on the CPU device
// with the local launcher (workers elsewhere, or on GPUs, are not this
// machine's cores' load).
func runCrowding(req Request, local bool, cores int) (crowd, bool) {
	if !local || (req.Device != "" && req.Device != "cpu") {
		return crowd{}, false
	}
	n, per := 2*req.Config.NumAgents, 2
	if req.Config.ActorMode() == dqn.ActorShared {
		n, per = req.Config.NumAgents+1, 1
	}
	c, crowded := crowding(n, per, req.Threads, cores)
	c.resumed = req.Resume
	return c, crowded
}

// warning is what a crowded run is warned of before it starts.
func (c crowd) warning(start, heartbeat time.Duration) string {
	return fmt.Sprintf("%s: workers may take longer than --worker-start-timeout (%s) to say hello, or be silent past --heartbeat-timeout (%s), and be failed as not answering or hung although nothing is wrong with them; %s",
		c, orDefault(start, worker.DefaultHelloTimeout), orDefault(heartbeat, worker.DefaultHeartbeatTimeout), c.remedy())
}

func (c crowd) String() string {
	threads := ""
	if c.threads > 1 {
		threads = fmt.Sprintf(" of %d threads each", c.threads)
	}
	return fmt.Sprintf("%d worker processes%s run at once on %d CPU cores, more than %d threads a core", c.workers, threads, c.cores, CrowdPerCore)
}

// explain adds to a worker's failure, in a crowded run, that the machine
// was crowded, when the failure is one that crowding alone causes: no
// hello in time, or silence past the heartbeat timeout.
func (c crowd) explain(err error) error {
	if c.workers == 0 || err == nil || !(errors.Is(err, worker.ErrNoAnswer) || errors.Is(err, worker.ErrHung)) {
		return err
	}
	return fmt.Errorf("%w; %s, which alone makes workers start late or miss heartbeats: %s", err, c, c.remedy())
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
