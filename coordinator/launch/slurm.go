package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/worker"
)

// SlurmConfig says how workers are submitted to Slurm. Every node must
// share the sweep directory (and the data) with this machine, and run the
// tolaria-worker binary at the same path.
type SlurmConfig struct {
	Partition string   `yaml:"partition"`   // sbatch --partition; "" is the cluster's default
	Account   string   `yaml:"account"`     // sbatch --account
	TimeLimit string   `yaml:"time_limit"`  // sbatch --time, in Slurm's format (e.g. 2:00:00); "" is the partition's
	Args      []string `yaml:"sbatch_args"` // further sbatch options, e.g. --mem=8G, --qos=normal
	// Poll is how often the tasks' states and spools are looked at; 0
	// means DefaultSlurmPoll.
	Poll time.Duration `yaml:"-"`
}

// DefaultSlurmPoll is how often the coordinator asks Slurm where its
// tasks are (one scontrol call per job array, whatever its size).
const DefaultSlurmPoll = 2 * time.Second

// slurmOwned are the sbatch options the launcher sets itself.
var slurmOwned = []string{"--array", "-a", "--output", "-o", "--error", "-e", "--wrap", "--parsable", "--job-name", "-J", "--gres", "--open-mode"}

// ownedOption says whether the sbatch option a is one the launcher sets,
// however it is spelt: sbatch (getopt_long) takes any unambiguous prefix
// of a long option (--out=x is --output=x) and a short option's value
// attached (-ox is -o x).
func ownedOption(a string) (string, bool) {
	name, _, _ := strings.Cut(a, "=")
	for _, o := range slurmOwned {
		long := strings.HasPrefix(name, "--") && len(name) > 2 && strings.HasPrefix(o, name)
		short := !strings.HasPrefix(a, "--") && len(o) == 2 && strings.HasPrefix(a, o)
		if long || short {
			return o, true
		}
	}
	return "", false
}

// slurmValue refuses a value that cannot be handed to Slurm safely: every
// value of the batch script is quoted for the shell, but no quoting keeps
// a NUL, and a newline or another control character would end a line of
// the script (turning its rest into a command, or into an #SBATCH
// directive) or of sbatch's own options.
func slurmValue(name field.Name, v string) error {
	i := controlChar(v)
	if i < 0 {
		return nil
	}
	return refusal.Config(field.Errorf(name, "%q holds a control character (%U at byte %d), which cannot go safely into a Slurm batch script or sbatch's options; give it without newlines, tabs or other control characters",
		v, rune(v[i]), i))
}

// slurmDir refuses a directory Slurm cannot write its own output under,
// besides what slurmValue refuses: in sbatch's --output a backslash means
// "expand no pattern" and is dropped, so the path names another
// directory and the task fails to launch.
func slurmDir(name field.Name, dir string) error {
	if err := slurmValue(name, dir); err != nil {
		return err
	}
	if strings.Contains(dir, `\`) {
		return refusal.Config(field.Errorf(name, "%q holds a backslash, which Slurm drops from the path of a task's output (--output), so no task could start; give a directory without one", dir))
	}
	return nil
}

// controlChar is the index of v's first ASCII control character, or -1.
func controlChar(v string) int {
	return strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// Validate checks the settings, naming the one at fault.
func (c SlurmConfig) Validate() error {
	for _, a := range c.Args {
		if err := slurmValue("sbatch_args", a); err != nil {
			return err
		}
		if !strings.HasPrefix(a, "-") {
			return refusal.Config(field.Errorf("sbatch_args", "%q is not an sbatch option: give each as --name=value, e.g. --mem=8G", a))
		}
		if name, owned := ownedOption(a); owned {
			return refusal.Config(field.Errorf("sbatch_args", "%s is set by tolaria for each array (one task per trial, its log, its GPU); remove it", name))
		}
	}
	for _, s := range []struct {
		name field.Name
		v    string
	}{{"partition", c.Partition}, {"account", c.Account}, {"time_limit", c.TimeLimit}} {
		if err := slurmValue(s.name, s.v); err != nil {
			return err
		}
		if strings.ContainsAny(s.v, " \t'\"") {
			return refusal.Config(field.Errorf(s.name, "%q holds a space or a quote; give the name alone", s.v))
		}
	}
	if c.Poll < 0 {
		return refusal.Config(field.Errorf("slurm_poll", "cannot be negative (%s)", c.Poll))
	}
	return nil
}

// checkSlurm refuses, before anything is written, settings of this
// machine's devices (a task Slurm places has its own), bad Slurm
// settings, and an activity directory or a worker's name (a trial's: a
// grid's values make names too) that cannot go into the batch script:
// each names the paths of a task's spool and log.
func checkSlurm(c Config, sc SlurmConfig) error {
	if len(c.GPUs) > 0 {
		return refusal.Config(field.Errorf("devices", "names GPUs of this machine; with %s slurm each task gets its GPU from Slurm (--gres=gpu:1): give %s cuda", field.Name("launcher"), field.Name("device")))
	}
	if c.PerDevice > 0 {
		return refusal.Config(field.Errorf("per_device", "shares a GPU of this machine; with %s slurm each task has its own", field.Name("launcher")))
	}
	if c.DeviceMemory > 0 {
		return refusal.Config(field.Errorf("device_memory", "budgets the devices of this machine; with %s slurm each task has its own device", field.Name("launcher")))
	}
	if err := sc.Validate(); err != nil {
		return err
	}
	if err := slurmDir(c.DirField, c.Dir); err != nil {
		return err
	}
	for _, name := range c.Names {
		if i := controlChar(name); i >= 0 {
			return refusal.Config(fmt.Errorf("trial %q: the name holds a control character (%U), which cannot go safely into a Slurm batch script; rename the trial, or give the grid values without it",
				name, rune(name[i])))
		}
	}
	return nil
}

// slurmTask is what a task of an array runs: a worker serving the spool
// of one attempt, logging to its run directory's worker.log.
type slurmTask struct {
	index int    // the array index: the trial's (or shard's) place
	spool string // the attempt's spool directory
	log   string // worker.log
}

// slurmLauncher submits a sweep's (or an evaluation's) workers to Slurm
// and follows them. The first attempt of every trial (or shard) is a task
// of one job array, submitted when the first of them starts; each retry is
// an array of its one task. Every
// submission has its own batch script (in <sweep dir>/slurm), whose task
// waits until its spool holds the request, then runs tolaria-worker on it.
type slurmLauncher struct {
	cfg      SlurmConfig
	dir      string // <sweep dir>/slurm (<run dir>/eval/slurm): batch scripts and Slurm's own output
	worker   string // absolute path of tolaria-worker
	device   string // cpu or cuda: cuda asks each task for a GPU
	parallel int    // the arrays' % limit
	token    string // tells this sweep run's spools from earlier runs'

	mu          sync.Mutex
	first       map[int]slurmTask  // the first attempts, submitted together
	firstState  map[int]firstState // where each of them is
	arrayID     string             // of the first attempts, once submitted
	submits     int
	jobs        map[string]*slurmJobState
	interrupted bool // set by interrupt: nothing more is submitted

	// As a Launcher: the activity's workers, their bounds, the log.
	workers          int
	hello, heartbeat time.Duration
	log              *slog.Logger
}

// noStart is the file interrupt creates: a task of this launcher that
// Slurm starts once it exists exits without running its worker. It is
// named by the token, so a resumed sweep's tasks do not see an earlier
// run's.
func (l *slurmLauncher) noStart() string { return filepath.Join(l.dir, "interrupted-"+l.token) }

// errSlurmInterrupted refuses a submission asked for after interrupt.
var errSlurmInterrupted = fmt.Errorf("not submitted to Slurm: %w", ErrInterrupted)

// firstState is where a first attempt's task is.
type firstState int

const (
	firstPlanned  firstState = iota // in the first array
	firstClaimed                    // an attempt will use it
	firstStarted                    // the attempt's worker was asked for: the array is submitted
	firstReleased                   // no attempt will use it: left out of the array, or cancelled
)

// slurmJobState is the last answer scontrol gave about one job array.
type slurmJobState struct {
	at    time.Time
	tasks map[int]worker.TaskState
	err   error
}

// newSlurmLauncher makes a launcher keeping its batch scripts in dir. A
// dry run needs no Slurm commands: it only prints.
func newSlurmLauncher(cfg SlurmConfig, dir, workerPath, device string, parallel int, dry bool) (*slurmLauncher, error) {
	for _, cmd := range []string{"sbatch", "scontrol", "scancel"} {
		if _, err := exec.LookPath(cmd); err != nil && !dry {
			return nil, refusal.Setup(field.Errorf("launcher", "slurm needs %s, which is not on PATH: run tolaria on a node of the cluster (a login node), or load Slurm's module", cmd))
		}
	}
	abs, err := filepath.Abs(workerPath)
	if err != nil {
		return nil, refusal.Setup(err)
	}
	if err := slurmValue("worker", abs); err != nil {
		return nil, err
	}
	if err := slurmDir("dir", dir); err != nil {
		return nil, err
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultSlurmPoll
	}
	return &slurmLauncher{cfg: cfg, dir: dir, worker: abs, device: device, parallel: parallel, log: slog.New(slog.DiscardHandler),
		token: strconv.FormatInt(time.Now().UnixNano(), 36), first: map[int]slurmTask{}, firstState: map[int]firstState{}, jobs: map[string]*slurmJobState{}}, nil
}

// plan notes the first attempt of the worker at index (a trial, or a
// shard), whose spools go under spools and whose log is log: it will be a
// task of the first array.
func (l *slurmLauncher) plan(index int, spools, log string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.first[index] = slurmTask{index: index, spool: filepath.Join(spools, l.token+"-1"), log: log}
	l.firstState[index] = firstPlanned
}

// transport is the worker.Remote of an attempt at the worker at index:
// the first takes its task of the first array, a later one submits its
// own. hello and heartbeat are its bounds (0: worker's defaults).
func (l *slurmLauncher) transport(index int, spools, log string, attempt int, hello, heartbeat time.Duration) *worker.Remote {
	l.mu.Lock()
	t, first := l.first[index]
	first = first && l.firstState[index] == firstPlanned
	if first {
		l.firstState[index] = firstClaimed
	}
	l.mu.Unlock()
	if !first {
		t = slurmTask{index: index, spool: filepath.Join(spools, l.token+"-"+strconv.Itoa(attempt)), log: log}
	}
	r := &worker.Remote{Dir: t.spool, Log: t.log, HelloTimeout: hello, HeartbeatTimeout: heartbeat, Poll: min(l.cfg.Poll, time.Second)}
	r.Start = func(ctx context.Context) (worker.Task, error) {
		// After interrupt nothing is submitted (see submitLocked), but a
		// task of the first array, already in, is claimed and followed
		// to its end: cancelled in the queue, or exiting at the noStart
		// mark when it comes up, it runs no worker.
		var id string
		var err error
		if first {
			l.mu.Lock()
			l.firstState[index] = firstStarted
			l.mu.Unlock()
			id, err = l.submitFirst(ctx)
		} else {
			id, err = l.submit(ctx, []slurmTask{t})
		}
		if err != nil {
			return nil, err
		}
		return &slurmArrayTask{l: l, job: id, index: index}, nil
	}
	return r
}

// release gives up the first-array task at index unless an attempt asked
// for its worker (its trial failed before that): it is left out of the
// array, or cancelled if the array is in, as it would wait for a request
// that never comes.
func (l *slurmLauncher) release(ctx context.Context, index int) {
	l.mu.Lock()
	st, ok := l.firstState[index]
	cancel := ok && st < firstStarted
	if cancel {
		l.firstState[index] = firstReleased
	}
	id := l.arrayID
	l.mu.Unlock()
	if cancel && id != "" {
		_ = scancel(ctx, fmt.Sprintf("%s_%d", id, index))
	}
}

// interrupt is a sweep's (or an evaluation's) first Ctrl-C: it creates
// the noStart mark, so that a task Slurm starts from now on runs no
// worker, and refuses every later submission. A task already running has
// its worker asked to stop through its spool, by the caller's context
// (see holdBack).
func (l *slurmLauncher) interrupt() error {
	l.mu.Lock()
	l.interrupted = true
	l.mu.Unlock()
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(l.noStart(), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// holdBack returns the context the attempts run under: ctx's
// cancellation (a Ctrl-C) reaches it, with ctx's cause, only once
// interrupt has made its mark. So a worker is told to stop only after no
// task can start one any more: the task an array's % limit holds in the
// queue, which Slurm starts as soon as a stopping worker's task ends,
// finds the mark and exits without training. warn hears a mark that
// could not be made. stop releases the context; call it once the
// attempts are over.
func (l *slurmLauncher) holdBack(ctx context.Context, warn func(error)) (_ context.Context, stop func()) {
	inner, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	after := context.AfterFunc(ctx, func() {
		if err := l.interrupt(); err != nil && warn != nil {
			warn(err)
		}
		cancel(context.Cause(ctx))
	})
	return inner, func() {
		after()
		cancel(context.Canceled)
	}
}

// submitFirst submits the array of every first attempt, once.
func (l *slurmLauncher) submitFirst(ctx context.Context) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.arrayID != "" {
		return l.arrayID, nil
	}
	var tasks []slurmTask
	for i, t := range l.first {
		if l.firstState[i] != firstReleased {
			tasks = append(tasks, t)
		}
	}
	slices.SortFunc(tasks, func(a, b slurmTask) int { return a.index - b.index })
	id, err := l.submitLocked(ctx, tasks)
	if err != nil {
		return "", err
	}
	l.arrayID = id
	return id, nil
}

func (l *slurmLauncher) submit(ctx context.Context, tasks []slurmTask) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.submitLocked(ctx, tasks)
}

func (l *slurmLauncher) submitLocked(ctx context.Context, tasks []slurmTask) (string, error) {
	if l.interrupted {
		return "", errSlurmInterrupted
	}
	for _, t := range tasks {
		// Checked when the sweep (or evaluation) was planned; checked
		// again here, as nothing else stands between them and the script.
		if err := errors.Join(slurmValue("spool", t.spool), slurmValue("log", t.log)); err != nil {
			return "", err
		}
	}
	l.submits++
	script := filepath.Join(l.dir, fmt.Sprintf("submit-%s-%d.sh", l.token, l.submits))
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(script, []byte(l.script(tasks)), 0o755); err != nil {
		return "", err
	}
	args := l.sbatchArgs(tasks, script)
	out, err := exec.CommandContext(context.WithoutCancel(ctx), "sbatch", args...).CombinedOutput()
	if err != nil {
		return "", refusal.Setup(fmt.Errorf("sbatch %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out))))
	}
	// --parsable prints "jobid" or "jobid;cluster".
	id, _, _ := strings.Cut(strings.TrimSpace(lastLine(string(out))), ";")
	if _, err := strconv.Atoi(id); err != nil {
		return "", refusal.Setup(fmt.Errorf("sbatch answered %q, not a job id", strings.TrimSpace(string(out))))
	}
	return id, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// sbatchArgs are the options of the array of tasks, running script.
func (l *slurmLauncher) sbatchArgs(tasks []slurmTask, script string) []string {
	idx := make([]string, len(tasks))
	for i, t := range tasks {
		idx[i] = strconv.Itoa(t.index)
	}
	array := strings.Join(idx, ",")
	if l.parallel > 0 && len(tasks) > l.parallel {
		array += "%" + strconv.Itoa(l.parallel)
	}
	args := []string{"--parsable", "--job-name=tolaria", "--array=" + array, "--open-mode=append",
		"--output=" + slurmFilename(l.dir) + "/slurm-%A_%a.out"}
	if l.device == "cuda" {
		args = append(args, "--gres=gpu:1")
	}
	if l.cfg.Partition != "" {
		args = append(args, "--partition="+l.cfg.Partition)
	}
	if l.cfg.Account != "" {
		args = append(args, "--account="+l.cfg.Account)
	}
	if l.cfg.TimeLimit != "" {
		args = append(args, "--time="+l.cfg.TimeLimit)
	}
	return append(append(args, l.cfg.Args...), script)
}

// slurmFilename escapes dir for an sbatch file name pattern, in which
// Slurm reads %A, %a, %j... as the job's numbers: a directory's own % is
// written %%.
func slurmFilename(dir string) string { return strings.ReplaceAll(dir, "%", "%%") }

// spoolWait is how long a task waits for its request to appear in its
// spool (the coordinator writes it as the trial starts).
const spoolWait = 600

// script is the batch script of an array of tasks.
func (l *slurmLauncher) script(tasks []slurmTask) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n# tolaria: worker tasks of %s, one per array index.\n", shellQuote(filepath.Dir(l.dir)))
	b.WriteString("case \"$SLURM_ARRAY_TASK_ID\" in\n")
	for _, t := range tasks {
		fmt.Fprintf(&b, "%d) spool=%s; log=%s ;;\n", t.index, shellQuote(t.spool), shellQuote(t.log))
	}
	b.WriteString("*) echo \"tolaria: no worker for array task $SLURM_ARRAY_TASK_ID\" >&2; exit 2 ;;\nesac\n")
	fmt.Fprintf(&b, `i=0
while [ ! -e "$spool/%s" ]; do
	i=$((i + 1))
	if [ "$i" -gt %d ]; then
		echo "tolaria: no request in $spool after %d s: is it on a filesystem shared with the machine running tolaria?" >&2
		exit 3
	fi
	sleep 1
done
echo "=== $(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ) tolaria-worker: slurm job ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID} on $(hostname)" >>"$log"
if [ -e %s ]; then
	echo "tolaria: not started: tolaria was interrupted before this task came up" >>"$log"
	exit 0
fi
exec %s serve --spool "$spool" >>"$log" 2>&1
`, worker.SpoolIn, spoolWait, spoolWait, shellQuote(l.noStart()), shellQuote(l.worker))
	return b.String()
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// DryRun is what a sweep would submit: the batch script of the first
// array and the sbatch command.
func (l *slurmLauncher) dryRun() (script string, command []string) {
	var tasks []slurmTask
	for _, t := range l.first {
		tasks = append(tasks, t)
	}
	slices.SortFunc(tasks, func(a, b slurmTask) int { return a.index - b.index })
	path := filepath.Join(l.dir, fmt.Sprintf("submit-%s-1.sh", l.token))
	return l.script(tasks), append([]string{"sbatch"}, l.sbatchArgs(tasks, path)...)
}

// state answers where task index of job array id is, from one scontrol
// query per array and poll interval.
func (l *slurmLauncher) state(ctx context.Context, id string, index int) (worker.TaskState, error) {
	l.mu.Lock()
	js := l.jobs[id]
	fresh := js != nil && time.Since(js.at) < l.cfg.Poll/2
	l.mu.Unlock()
	if !fresh {
		tasks, err := scontrolJob(ctx, id)
		js = &slurmJobState{at: time.Now(), tasks: tasks, err: err}
		l.mu.Lock()
		l.jobs[id] = js
		l.mu.Unlock()
	}
	if js.err != nil {
		return worker.TaskState{}, js.err
	}
	st, ok := js.tasks[index]
	if !ok {
		// Gone from Slurm's memory: cancelled while pending (which leaves
		// no record), or ended longer ago than its MinJobAge.
		return worker.TaskState{Phase: worker.TaskEnded, Reason: worker.ReasonCancelled, Gone: true,
			Detail: "no record in Slurm: cancelled before it started, or forgotten since it ended"}, nil
	}
	return st, nil
}

// slurmArrayTask is one task of a job array.
type slurmArrayTask struct {
	l     *slurmLauncher
	job   string
	index int
}

func (t *slurmArrayTask) State(ctx context.Context) (worker.TaskState, error) {
	return t.l.state(ctx, t.job, t.index)
}

func (t *slurmArrayTask) Cancel() error {
	return scancel(context.Background(), fmt.Sprintf("%s_%d", t.job, t.index))
}

func (t *slurmArrayTask) String() string { return fmt.Sprintf("slurm job %s_%d", t.job, t.index) }

func scancel(ctx context.Context, id string) error {
	out, err := exec.CommandContext(context.WithoutCancel(ctx), "scancel", id).CombinedOutput()
	if err != nil {
		return fmt.Errorf("scancel %s: %v: %s", id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// scontrolJob asks Slurm for the tasks of a job array.
func scontrolJob(ctx context.Context, id string) (map[int]worker.TaskState, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(cctx, "scontrol", "-o", "show", "job", id)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if strings.Contains(stderr.String(), "Invalid job id") {
			return map[int]worker.TaskState{}, nil
		}
		return nil, fmt.Errorf("scontrol show job %s: %v: %s", id, err, strings.TrimSpace(stderr.String()))
	}
	return parseScontrol(string(out))
}

// parseScontrol reads `scontrol -o show job` lines (one per array task, or
// one for a range of tasks still pending) into the tasks' states.
func parseScontrol(out string) (map[int]worker.TaskState, error) {
	tasks := map[int]worker.TaskState{}
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		kv := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		ids, err := arrayIndices(kv["ArrayTaskId"])
		if err != nil {
			return nil, err
		}
		st := taskState(kv["JobState"], kv["ExitCode"], kv["Reason"])
		for _, i := range ids {
			tasks[i] = st
		}
	}
	return tasks, nil
}

// arrayIndices reads an ArrayTaskId: "3", "0-2%2", "1,3-5", "0-9:2".
func arrayIndices(s string) ([]int, error) {
	s, _, _ = strings.Cut(s, "%")
	if s == "" || s == "N/A" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		rng, stepStr, hasStep := strings.Cut(part, ":")
		step := 1
		if hasStep {
			var err error
			if step, err = strconv.Atoi(stepStr); err != nil || step < 1 {
				return nil, fmt.Errorf("slurm: array task id %q: bad step", s)
			}
		}
		lo, hi, isRange := strings.Cut(rng, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("slurm: array task id %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("slurm: array task id %q: %w", s, err)
			}
		}
		for i := a; i <= b; i += step {
			out = append(out, i)
		}
	}
	return out, nil
}

// taskState maps a Slurm job state to a task's phase and, for one that
// ended other than by completing, the failure's reason.
func taskState(state, exitCode, reason string) worker.TaskState {
	state, _, _ = strings.Cut(state, "+") // e.g. CANCELLED+ in some versions
	detail := "state " + state
	if exitCode != "" {
		detail += ", exit code " + exitCode
	}
	if reason != "" && reason != "None" {
		detail += ", reason " + reason
	}
	switch state {
	case "PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT":
		return worker.TaskState{Phase: worker.TaskPending, Detail: detail}
	case "COMPLETED":
		return worker.TaskState{Phase: worker.TaskEnded, Detail: detail}
	case "CANCELLED", "PREEMPTED", "REVOKED":
		return worker.TaskState{Phase: worker.TaskEnded, Reason: worker.ReasonCancelled, Detail: detail}
	case "TIMEOUT", "DEADLINE":
		return worker.TaskState{Phase: worker.TaskEnded, Reason: worker.ReasonTimeLimit, Detail: detail}
	case "NODE_FAIL", "BOOT_FAIL":
		return worker.TaskState{Phase: worker.TaskEnded, Reason: worker.ReasonNodeFail, Detail: detail}
	case "OUT_OF_MEMORY":
		return worker.TaskState{Phase: worker.TaskEnded, Reason: worker.ReasonCrashed, Detail: detail}
	case "FAILED":
		r := worker.ReasonExit
		if _, sig, ok := strings.Cut(exitCode, ":"); ok && sig != "0" {
			r = worker.ReasonCrashed
		}
		return worker.TaskState{Phase: worker.TaskEnded, Reason: r, Detail: detail}
	}
	// RUNNING, CONFIGURING, COMPLETING, SUSPENDED, SIGNALING, STAGE_OUT,
	// RESIZING, and states newer than this code: the heartbeats judge it.
	return worker.TaskState{Phase: worker.TaskRunning, Detail: detail}
}
