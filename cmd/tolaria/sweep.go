package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/worker"
)

// Exit codes of a sweep besides exitOK, exitFailure (no trial succeeded),
// exitUsage and the interrupted codes.
const exitSomeFailed = 3

func newSweepCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sweep FILE | sweep --resume --sweep-dir DIR",
		Short: "run many training jobs (trials) from a sweep file, each in its own worker process",
		Long: `sweep runs the trials of a YAML sweep file, each in its own tolaria-worker
process with its own run directory under the sweep directory, several at once,
and ranks them.

The file has base: (the keys of tolaria train's --config file), and trials:
(a list of overrides, each optionally with a name:) and/or grid: (key: [values],
crossed in the file's order, the last key varying fastest; with trials: too,
every trial is crossed with every grid point). run_dir, resume and device are
the sweep's to set. Everything is validated before anything starts; a file
that makes more than --max-trials trials (10000) is refused.

The sweep directory (--sweep-dir, default sweeps/<time>) receives sweep.yaml,
trials/<name>.yaml (each trial's resolved configuration, written as the trial
first starts, usable with tolaria train --config), one run directory per trial
(config.yaml, events.jsonl, checkpoint.tlck, summary.json, worker.log) and
results.json and results.csv, rewritten atomically as trials start and end (at
most once a second).

--resume --sweep-dir DIR continues an interrupted or partly failed sweep from
the sweep.yaml it saved (no FILE then): succeeded trials are kept as they are,
interrupted and failed ones resume from their checkpoints (or start again
without one) and pending ones start; the ranking covers every trial. The
sweep's journal.jsonl says how a sweep killed outright stood: an attempt that
started and never ended is recorded interrupted and counted. A sweep whose
every trial succeeded has nothing to resume (exit 0).

--metrics-addr serves Prometheus metrics for the whole sweep: trials by
state, failed attempts by reason, retries, each live worker's heartbeat age,
and every trial's training metrics with a trial label.

Exit status: 0 every trial succeeded, 3 some failed, 1 none succeeded,
2 bad input (nothing started), 130 interrupted (Ctrl-C: every running trial
checkpoints and stops).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if resume, _ := cmd.Flags().GetBool("resume"); resume {
				if len(args) > 0 {
					return usagef("tolaria sweep --resume takes no sweep file: it resumes the sweep saved in --sweep-dir, got %q", args[0])
				}
				return nil
			}
			if len(args) != 1 {
				return usagef("tolaria sweep takes one sweep file, got %d arguments (see --help)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			path := ""
			if len(args) > 0 {
				path = args[0]
			}
			return sweep(cmd.Context(), cmd, path)
		},
	}
	fs := cmd.Flags()
	fs.String("device", "auto", "auto, cpu or cuda: auto takes GPU 0 when a CUDA worker can open one (list more with --devices), and the CPU otherwise")
	fs.String("devices", "", "GPUs to run trials on, e.g. 0,1,2,3 (implies --device cuda); each trial's worker sees only its GPU (CUDA_VISIBLE_DEVICES)")
	fs.Int("per-device", 0, "trials sharing one device at once (default 1 on a GPU, --parallel on the CPU)")
	fs.Int("parallel", 0, "trials running at once (default one per device slot: devices times --per-device)")
	fs.Int("retries", 0, "start a failed trial again up to N times, from its last checkpoint when it has one")
	fs.String("rank-by", "test_accuracy", "summary key to rank trials by: "+strings.Join(coordinator.RankKeys(), ", ")+
		" (keys ending in loss or seconds rank ascending, the others descending)")
	fs.String("sweep-dir", "", "sweep directory, new or empty (default sweeps/<time>); with --resume, the sweep to resume")
	fs.Bool("resume", false, "resume the sweep in --sweep-dir: run only its trials that did not succeed")
	fs.String("worker", "", "path of the tolaria-worker binary (default: next to tolaria, or $TOLARIA_WORKER)")
	fs.Duration("worker-start-timeout", worker.DefaultHelloTimeout, "how long a tolaria-worker may take to open its device before it is killed")
	fs.Duration("heartbeat-timeout", worker.DefaultHeartbeatTimeout, "how long a trial's tolaria-worker may send no heartbeat, or make no progress while it sends them, before it is taken for hung, killed and its trial failed (at least 1s)")
	fs.String("metrics-addr", "", "serve Prometheus metrics here, e.g. :9464 (loopback when no host is given): trials by state, failures by reason, retries, workers' heartbeat ages, and each trial's training metrics with a trial label")
	fs.Duration("metrics-linger", 15*time.Second, "with --metrics-addr, keep serving /metrics this long after the sweep so the final values are scraped (0: exit at once)")
	fs.String("priority", "", "a sweep key whose number is each trial's priority for device memory (default: each trial's priority:, else 0); a trial whose budget does not fit parks the least recently active trial of lower priority")
	fs.Int("max-trials", coordinator.DefaultMaxTrials, "the most trials the sweep file may make; a larger sweep is refused before anything is written (a resumed sweep keeps the size it was accepted at)")
	fs.String("device-memory", "", "device memory the trials' budgets may take on each device, e.g. 8GiB, 512MiB or 16GB (0 or unset: what the device reports free); on the CPU it stands in for a GPU's memory")
	addLauncherFlags(fs, "trial")
	return cmd
}

// addLauncherFlags adds the flags that send workers (of trials, or of
// shards) to Slurm.
func addLauncherFlags(fs *pflag.FlagSet, what string) {
	fs.String("launcher", coordinator.LauncherLocal, "where workers run: local (processes on this machine) or slurm (a Slurm job array, one task per "+what+"; see docs/slurm.md)")
	fs.String("partition", "", "with --launcher slurm: the partition to submit to (sbatch --partition; default the cluster's)")
	fs.String("account", "", "with --launcher slurm: the account to charge (sbatch --account)")
	fs.String("time-limit", "", "with --launcher slurm: each task's time limit in Slurm's format, e.g. 2:00:00 (sbatch --time); a task past it fails with reason time_limit")
	fs.StringArray("sbatch-arg", nil, "with --launcher slurm: a further sbatch option, e.g. --sbatch-arg=--mem=8G (repeat for more)")
	fs.Bool("dry-run", false, "with --launcher slurm: print the batch script and the sbatch command, submit nothing and write nothing")
}

// launcherConfig reads the launcher flags over what the sweep file says
// (file: its launcher: and slurm:, zero for an evaluation).
func launcherConfig(fs *pflag.FlagSet, launcher string, slurm coordinator.SlurmConfig) (string, coordinator.SlurmConfig, bool, error) {
	get := func(name string) string { v, _ := fs.GetString(name); return v }
	if fs.Changed("launcher") || launcher == "" {
		launcher = get("launcher")
	}
	for flag, dst := range map[string]*string{"partition": &slurm.Partition, "account": &slurm.Account, "time-limit": &slurm.TimeLimit} {
		if fs.Changed(flag) {
			*dst = get(flag)
		}
	}
	if fs.Changed("sbatch-arg") {
		slurm.Args, _ = fs.GetStringArray("sbatch-arg")
	}
	dry, _ := fs.GetBool("dry-run")
	if launcher != coordinator.LauncherSlurm {
		for _, f := range []string{"partition", "account", "time-limit", "sbatch-arg", "dry-run"} {
			if fs.Changed(f) {
				return launcher, slurm, dry, usagef("--%s goes with --launcher slurm", f)
			}
		}
	}
	return launcher, slurm, dry, nil
}

// sweepFlag spells a sweep setting as its flag. Keys of the sweep file
// (a trial's lr) stay as they are: they are not flags here.
func sweepFlag(key field.Name) string {
	switch key {
	case "device", "devices", "per_device", "parallel", "retries", "rank_by", "sweep_dir", "worker", "metrics_addr", "device_memory", "priority",
		"max_trials", "launcher", "partition", "account", "time_limit", "dry_run":
		return "--" + strings.ReplaceAll(string(key), "_", "-")
	case "sbatch_args":
		return "--sbatch-arg"
	}
	return ""
}

func sweepConfig(fs *pflag.FlagSet, path string) (coordinator.SweepConfig, error) {
	var cfg coordinator.SweepConfig
	var err error
	get := func(name string) string { v, _ := fs.GetString(name); return v }
	getInt := func(name string) int { v, _ := fs.GetInt(name); return v }
	cfg.Device, cfg.RankBy, cfg.Dir, cfg.MetricsAddr = get("device"), get("rank-by"), get("sweep-dir"), get("metrics-addr")
	cfg.PerDevice, cfg.Parallel, cfg.Retries = getInt("per-device"), getInt("parallel"), getInt("retries")
	if cfg.Worker = get("worker"); cfg.Worker == "" {
		cfg.Worker = os.Getenv("TOLARIA_WORKER")
	}
	cfg.WorkerStart, _ = fs.GetDuration("worker-start-timeout")
	if cfg.WorkerStart <= 0 {
		return cfg, usagef("--worker-start-timeout must be positive, got %s", cfg.WorkerStart)
	}
	cfg.HeartbeatTimeout, _ = fs.GetDuration("heartbeat-timeout")
	if cfg.HeartbeatTimeout < worker.MinHeartbeatTimeout {
		return cfg, usagef("--heartbeat-timeout must be at least %s, got %s", worker.MinHeartbeatTimeout, cfg.HeartbeatTimeout)
	}
	if linger, _ := fs.GetDuration("metrics-linger"); linger < 0 {
		return cfg, usagef("--metrics-linger must be 0 or more, got %s", linger)
	}
	cfg.PriorityKey = get("priority")
	if v := get("device-memory"); v != "" {
		if cfg.DeviceMemory, err = parseBytes(v); err != nil {
			return cfg, usagef("--device-memory: %v", err)
		}
	}
	for _, f := range []string{"per-device", "parallel", "max-trials"} {
		if fs.Changed(f) && getInt(f) < 1 {
			return cfg, usagef("--%s must be at least 1, got %d", f, getInt(f))
		}
	}
	if devices := get("devices"); devices != "" {
		if fs.Changed("device") && cfg.Device != "cuda" {
			return cfg, usagef("--devices names GPUs; it cannot go with --device %s", cfg.Device)
		}
		cfg.Device = "cuda"
		for _, d := range strings.Split(devices, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(d))
			if err != nil || n < 0 {
				return cfg, usagef("--devices: %q is not a GPU index; give indices such as 0,1", d)
			}
			cfg.GPUs = append(cfg.GPUs, n)
		}
	}
	if cfg.Resume, _ = fs.GetBool("resume"); cfg.Resume {
		var saved coordinator.Results
		cfg.Sweep, saved, err = coordinator.LoadSweepDir(cfg.Dir)
		if err != nil {
			return cfg, err
		}
		if !fs.Changed("rank-by") {
			cfg.RankBy = saved.RankBy // ranked as it was unless asked otherwise
		}
		cfg.Launcher, cfg.Slurm, cfg.DryRun, err = launcherConfig(fs, cfg.Sweep.Launcher, cfg.Sweep.Slurm)
		return cfg, err
	}
	if cfg.Sweep, err = coordinator.ReadSweepMax(path, getInt("max-trials")); err != nil {
		return cfg, err
	}
	cfg.Launcher, cfg.Slurm, cfg.DryRun, err = launcherConfig(fs, cfg.Sweep.Launcher, cfg.Sweep.Slurm)
	return cfg, err
}

func sweep(ctx context.Context, cmd *cobra.Command, path string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	cfg, err := sweepConfig(cmd.Flags(), path)
	if err != nil {
		return sweepRefused(stderr, err)
	}
	view := newSweepView(stderr, cfg.Sweep.Trials)
	log := slog.New(slog.NewTextHandler(view.logs(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.Logger, cfg.Version, cfg.Report = log, version(), view.update
	s, err := coordinator.PrepareSweep(ctx, cfg)
	if errors.Is(err, coordinator.ErrNothingToResume) {
		view.close()
		fmt.Fprintf(stderr, "tolaria: %v; results in %s/%s\n", err, cfg.Dir, coordinator.ResultsJSON)
		return nil
	}
	if err != nil {
		view.close()
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "tolaria: interrupted: %v\n", err)
			return exitError{interruptedCode(ctx)}
		}
		return sweepRefused(stderr, err)
	}
	defer s.Close()
	log.Info(fmt.Sprintf("CUDA initialized in coordinator: %v", coordinator.LinksCUDA()))
	if cfg.DryRun {
		view.close()
		script, command := s.DryRun()
		fmt.Fprintf(stdout, "# the batch script (written to the sweep directory's slurm/ when submitted):\n%s\n# submitted with:\n%s\n", script, shellCommand(command))
		return nil
	}
	log.Info("sweep", "file", cfg.Sweep.Path, "resume", cfg.Resume, "trials", len(cfg.Sweep.Trials), "devices", s.Devices(), "parallel", s.Parallel(), "sweep_dir", s.Dir())
	view.start()
	res, err := s.Run(ctx)
	view.close()
	printResults(stdout, res, s.Dir())
	linger, _ := cmd.Flags().GetDuration("metrics-linger")
	defer s.Linger(ctx, linger) // after the last lines, before the exit
	if err != nil {
		fmt.Fprintf(stderr, "tolaria: writing the results: %v\n", err)
		return exitError{exitFailure}
	}
	ok, total := res.Counts[string(coordinator.TrialSucceeded)], len(res.Trials)
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "tolaria: sweep interrupted: %d of %d trials succeeded; the running ones checkpointed; results in %s\n", ok, total, s.Dir())
		return exitError{interruptedCode(ctx)}
	case ok == total:
		return nil
	case ok == 0:
		fmt.Fprintf(stderr, "tolaria: no trial succeeded; see the reasons in %s/%s\n", s.Dir(), coordinator.ResultsJSON)
		return exitError{exitFailure}
	}
	fmt.Fprintf(stderr, "tolaria: %d of %d trials failed; see the reasons in %s/%s\n", total-ok, total, s.Dir(), coordinator.ResultsJSON)
	return exitError{exitSomeFailed}
}

// sweepRefused reports a sweep refused before it started.
func sweepRefused(w io.Writer, err error) error {
	code := exitFailure
	switch {
	case errors.Is(err, errUsage), errors.Is(err, coordinator.ErrConfig):
		code = exitUsage
	}
	fmt.Fprintln(w, "tolaria:", field.Render(err, sweepFlag))
	return exitError{code}
}

// printResults prints the ranked trials.
func printResults(w io.Writer, r coordinator.Results, dir string) {
	width := len("trial")
	for _, t := range r.Trials {
		width = max(width, len(t.Name))
	}
	fmt.Fprintf(w, "%-4s  %-*s  %-11s  %s\n", "rank", width, "trial", "state", r.RankBy)
	for _, t := range r.Trials {
		rank, value := "-", ""
		if t.Rank > 0 {
			rank = strconv.Itoa(t.Rank)
		}
		if t.Value != nil {
			value = strconv.FormatFloat(*t.Value, 'f', 4, 64)
		} else if t.Reason != "" {
			value = firstLine(t.Reason, 100)
		}
		fmt.Fprintf(w, "%-4s  %-*s  %-11s  %s\n", rank, width, t.Name, t.State, value)
	}
	fmt.Fprintf(w, "results %s/%s\n", dir, coordinator.ResultsJSON)
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// shellCommand spells a command for a shell, quoting every word that
// holds anything but letters, digits and -_./=:,+@%: a list of what to
// quote would miss one (!, {}, ^, a character of another script).
func shellCommand(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		plain := strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0
		if a == "" || !plain {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
