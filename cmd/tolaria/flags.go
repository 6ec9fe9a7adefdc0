package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/bytesize"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/worker"
)

// The flags that several commands share are declared here, once: each
// group has one register function and one check, and errors name them
// the same way in every command.

// usagef refuses what the user gave (exit 2) as the coordinator refuses
// a job: marked with refusal.ErrConfig, the one sentinel of an invalid
// configuration, which run names in the message.
func usagef(format string, args ...any) error {
	return refusal.Config(fmt.Errorf(format, args...))
}

// flagName is a setting's flag, without its dashes: the flat spelling of
// a job's key (job.Flat: --lr for optimizer.lr), less model., dashed; a
// key with no flat spelling is its path dashed (--schedule-foo).
func flagName(key field.Name) string {
	return strings.NewReplacer("_", "-", ".", "-").Replace(strings.TrimPrefix(string(job.Flat(key)), "model."))
}

// keyAnnotation marks a flag that sets a key under another name, or a key
// the user may have written in the command's file instead.
const keyAnnotation = "tolaria.key"

// setsKey records that flag sets key. inFile says the command's file may
// give key too: errors then name both, "--agents (num_agents)".
func setsKey(fs *pflag.FlagSet, flag string, key field.Name, inFile bool) {
	_ = fs.SetAnnotation(flag, keyAnnotation, []string{string(key), fmt.Sprint(inFile)})
}

// fileKeys are the keys of the command's file that the flags given set
// (marked by setsKey with inFile), with their values.
func fileKeys(fs *pflag.FlagSet) map[field.Name]any {
	given := map[field.Name]any{}
	fs.Visit(func(f *pflag.Flag) {
		if k := f.Annotations[keyAnnotation]; len(k) == 2 && k[1] == "true" {
			given[field.Name(k[0])] = flagValue(fs, f)
		}
	})
	return given
}

// speller spells a setting's key as cmd's flag, for messages: run_dir as
// --run-dir, model.hidden as --hidden, optimizer.lr as --lr, a key
// marked by setsKey as its flag. A key whose value came from the
// configuration file is named as the file wrote it (optimizer.lr, or the
// deprecated lr). A key with no flag keeps its name ("").
func speller(cmd *cobra.Command) func(field.Name) string {
	fs := cmd.Flags()
	return func(key field.Name) string {
		spelled := ""
		fs.VisitAll(func(f *pflag.Flag) {
			switch k := f.Annotations[keyAnnotation]; {
			case len(k) != 2 || k[0] != string(key):
			case k[1] == "true":
				spelled = fmt.Sprintf("--%s (%s)", f.Name, key)
			default:
				spelled = "--" + f.Name
			}
		})
		if f := fs.Lookup(flagName(key)); spelled == "" && f != nil && f.Annotations[keyAnnotation] == nil {
			spelled = "--" + f.Name
			if written := f.Annotations[writtenAnnotation]; len(written) == 1 {
				spelled = written[0] // the file gave it: named as the file wrote it
			}
		}
		return spelled
	}
}

// workerFlags choose the tolaria-worker binary and bound its silences.
type workerFlags struct {
	path      string
	start     time.Duration
	heartbeat time.Duration
}

// register adds --worker, --worker-start-timeout and --heartbeat-timeout;
// who names the workers in the help ("a trial's tolaria-worker").
func (w *workerFlags) register(fs *pflag.FlagSet, who string) {
	fs.StringVar(&w.path, "worker", "", "path of the tolaria-worker binary (default: next to tolaria, or $TOLARIA_WORKER)")
	fs.DurationVar(&w.start, "worker-start-timeout", worker.DefaultHelloTimeout, "how long a tolaria-worker may take to open its device before it is killed")
	fs.DurationVar(&w.heartbeat, "heartbeat-timeout", worker.DefaultHeartbeatTimeout, "how long "+who+
		" may send no heartbeat, or make no progress while it sends them, before it is taken for hung and killed (at least "+worker.MinHeartbeatTimeout.String()+")")
}

// check refuses bounds a worker cannot keep, and takes $TOLARIA_WORKER
// when --worker is not given.
func (w *workerFlags) check() error {
	if w.path == "" {
		w.path = os.Getenv("TOLARIA_WORKER")
	}
	switch {
	case w.start <= 0:
		return usagef("--worker-start-timeout: %s is not positive; give a duration such as %s", w.start, worker.DefaultHelloTimeout)
	}
	if err := worker.CheckHeartbeatTimeout(w.heartbeat); err != nil { // 0 too: the flag's default is given
		return usagef("--heartbeat-timeout: %v", err)
	}
	return nil
}

// gpus asks the worker the flags name about the GPUs.
func (w *workerFlags) gpus() coordinator.GPUsRequest {
	return coordinator.GPUsRequest{Worker: w.path, WorkerStart: w.start, HeartbeatTimeout: w.heartbeat}
}

// memoryFlag is --device-memory, a size: the device memory an activity's
// budgets may take on each device.
type memoryFlag struct{ size string }

// register adds --device-memory; whose names the budgets' holders
// ("trials'"), and more says what else to know, ending in "; ".
func (m *memoryFlag) register(fs *pflag.FlagSet, whose, more string) {
	fs.StringVar(&m.size, "device-memory", "", "device memory the "+whose+" budgets may take on each device, e.g. 8GiB, 512MiB or 16GB (0 or unset: what the device reports free); "+
		more+"on the CPU it stands in for a GPU's memory")
}

// bytes is the size given, 0 when none is.
func (m memoryFlag) bytes() (int64, error) {
	if m.size == "" {
		return 0, nil
	}
	n, err := bytesize.Parse(m.size)
	if err != nil {
		return 0, usagef("--device-memory: %v", err)
	}
	return n, nil
}

// metricsFlags say where /metrics is served and how long after the end.
type metricsFlags struct {
	addr   string
	linger time.Duration
}

// register adds --metrics-addr and --metrics-linger; what says what the
// metrics are.
func (m *metricsFlags) register(fs *pflag.FlagSet, what string) {
	fs.StringVar(&m.addr, "metrics-addr", "", "serve Prometheus metrics here, e.g. :9464 (loopback when no host is given)"+what)
	// Twice the shipped scrape interval (infra/prometheus, 15s), so that a
	// scrape sees the final values and tolaria_process_finished.
	fs.DurationVar(&m.linger, "metrics-linger", 30*time.Second, "with --metrics-addr, keep serving /metrics this long after the end so the final values are scraped; at least twice the scrape interval (0: exit at once)")
}

func (m *metricsFlags) check() error {
	if m.linger < 0 {
		return usagef("--metrics-linger: %s is negative; give a duration such as 30s, or 0", m.linger)
	}
	if m.addr != "" {
		if _, err := telemetry.ListenAddress(m.addr); err != nil {
			return usagef("--metrics-addr: %v", err)
		}
	}
	return nil
}

// deviceHelp is what --device says in every command.
const deviceHelp = "auto, cpu or cuda: auto takes a GPU when a CUDA build of tolaria-worker can open one, and the CPU otherwise"

// registerDevice adds --device, auto by default in every command; where
// says what runs on it.
func registerDevice(fs *pflag.FlagSet, dst *string, where string) {
	fs.StringVar(dst, "device", "auto", deviceHelp+where)
}

// checkDevice checks --device by the job's rule (job.CheckDevice); the
// error names the key, which every command spells --device.
func checkDevice(device string) error {
	if err := job.CheckDevice(device); err != nil {
		return refusal.Config(err)
	}
	return nil
}

// launcherFlags send workers (of trials, or of shards) to Slurm.
type launcherFlags struct {
	name, partition, account, timeLimit string
	sbatch                              []string
	dryRun                              bool
}

// register adds --launcher and its Slurm settings; what is what a task
// runs ("trial").
func (l *launcherFlags) register(fs *pflag.FlagSet, what string) {
	fs.StringVar(&l.name, "launcher", launch.LocalName, "where workers run: local (processes on this machine) or slurm (a Slurm job array, one task per "+what+"; see docs/slurm.md)")
	fs.StringVar(&l.partition, "partition", "", "with --launcher slurm: the partition to submit to (sbatch --partition; default the cluster's)")
	fs.StringVar(&l.account, "account", "", "with --launcher slurm: the account to charge (sbatch --account)")
	fs.StringVar(&l.timeLimit, "time-limit", "", "with --launcher slurm: each task's time limit in Slurm's format, e.g. 2:00:00 (sbatch --time); a task past it fails with reason time_limit")
	fs.StringArrayVar(&l.sbatch, "sbatch-arg", nil, "with --launcher slurm: a further sbatch option, e.g. --sbatch-arg=--mem=8G (repeat for more)")
	fs.BoolVar(&l.dryRun, "dry-run", false, "with --launcher slurm: print the batch script and the sbatch command, submit nothing and write nothing")
	setsKey(fs, "sbatch-arg", "sbatch_args", false)
}

// apply puts the flags given over what a file says (a sweep file's
// launcher: and slurm:; nothing for an evaluation) and returns the
// launcher they name, its settings bound in.
func (l *launcherFlags) apply(fs *pflag.FlagSet, launcher string, slurm launch.SlurmConfig) (launch.Kind, error) {
	if fs.Changed("launcher") || launcher == "" {
		launcher = l.name
	}
	for flag, v := range map[string]*string{"partition": &slurm.Partition, "account": &slurm.Account, "time-limit": &slurm.TimeLimit} {
		if fs.Changed(flag) {
			*v = fs.Lookup(flag).Value.String()
		}
	}
	if fs.Changed("sbatch-arg") {
		slurm.Args = l.sbatch
	}
	if launcher != launch.SlurmName {
		for _, f := range []string{"partition", "account", "time-limit", "sbatch-arg", "dry-run"} {
			if fs.Changed(f) {
				return launch.Kind{}, usagef("--%s goes with --launcher slurm", f)
			}
		}
	}
	return launch.Named(launcher, slurm)
}

// placementFlags place an activity's workers on devices: which GPUs
// (--devices), how many workers share one (--per-device) and how many run
// at once (--parallel).
type placementFlags struct {
	devices   string
	perDevice int
	parallel  int
}

// register adds the three flags; what names the workers ("shards"), and
// perDevice and parallel say what each flag's default is.
func (p *placementFlags) register(fs *pflag.FlagSet, what, perDevice, parallel string) {
	p.registerDevices(fs, "to spread the "+what+" over")
	fs.IntVar(&p.perDevice, "per-device", 0, "the "+what+" sharing one device at once (default: "+perDevice+")")
	fs.IntVar(&p.parallel, "parallel", 0, "the "+what+" running at once (default: "+parallel+"); the others wait for a slot")
}

// registerDevices adds --devices alone, for an activity that places its
// workers by a rule of its own; how says what the GPUs are for.
func (p *placementFlags) registerDevices(fs *pflag.FlagSet, how string) {
	fs.StringVar(&p.devices, "devices", "auto", "GPUs "+how+": a list such as 0,1,2,3 (implies --device cuda), or auto: every GPU a CUDA tolaria-worker finds (with --device auto or cuda); each worker sees only its GPU (CUDA_VISIBLE_DEVICES)")
}

// check refuses a --per-device or --parallel given below 1, and with
// Slurm (launcher) any flag that places workers on this machine's GPUs:
// the scheduler places each task.
func (p *placementFlags) check(fs *pflag.FlagSet, launcher string) error {
	for i, n := range []int{p.perDevice, p.parallel} {
		if flag := []string{"per-device", "parallel"}[i]; fs.Changed(flag) && n < 1 {
			return usagef("--%s must be at least 1, got %d", flag, n)
		}
	}
	if launcher == launch.SlurmName && (fs.Changed("devices") || fs.Changed("per-device")) {
		return usagef("--devices and --per-device place workers on this machine's GPUs; with --launcher slurm the scheduler places each task")
	}
	return nil
}

// chooser turns --device and the placement flags into a device (cpu or
// cuda) and the GPUs to place workers on (coordinator.ChooseDevices), w's
// workers asked what they find.
func (p *placementFlags) chooser(w workerFlags) func(context.Context, string, *slog.Logger) (string, []int, error) {
	return func(ctx context.Context, device string, log *slog.Logger) (string, []int, error) {
		return coordinator.ChooseDevices(ctx, coordinator.DevicesRequest{Device: device, Devices: p.devices, Workers: w.gpus(), Logger: log})
	}
}
