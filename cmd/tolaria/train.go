package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/docs/cli"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/internal/progress"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/job/jobconfig"
)

func newTrainCmd(proc process) *cobra.Command {
	var flags trainFlags
	cmd := &cobra.Command{
		Use:   "train",
		Short: "train a model (Fashion-MNIST MLP by default)",
		Long:  strings.Replace(cli.Help("train"), "{{layers}}", job.LayersUsage(), 1),
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q: tolaria train takes flags only (see --help)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTrain(cmd.Context(), cmd, proc, &flags)
		},
	}
	flags.register(cmd.Flags())
	return cmd
}

func runTrain(ctx context.Context, cmd *cobra.Command, proc process, flags *trainFlags) error {
	req, warnings, err := resolve(cmd.Flags(), flags)
	if err != nil {
		return err
	}
	req.Version, req.Shared, req.Started = version(), proc.shared, proc.started
	out := progress.Streams{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
	refused := func(err error) bool { return exitCode(ctx, err) == exitUsage }
	return train.Execute(ctx, req, train.Options{
		View:     func(accuracy bool) train.View { return progress.NewTrain(out, accuracy, refused) },
		Warnings: warnings, Linger: flags.metrics.linger,
	})
}

// trainFlags are train's settings besides the job's keys; the job's
// keys are flags too, each spelled as its key.
type trainFlags struct {
	device  string // the job's device key, resolved as the others are
	worker  workerFlags
	metrics metricsFlags
	isolate bool
}

func (t *trainFlags) register(fs *pflag.FlagSet) {
	d := job.Default()
	for _, key := range job.Keys() {
		usage := job.Usage(key) + " (file key " + string(key) + ")"
		switch def := d.Get(key).(type) {
		case bool:
			fs.Bool(flagName(key), def, usage)
		case int:
			fs.Int(flagName(key), def, usage)
		case uint64: // the seed
			fs.Int(flagName(key), int(def), usage)
		case float64:
			fs.Float64(flagName(key), def, usage)
		case []int:
			fs.IntSlice(flagName(key), def, usage)
		case job.Layers:
			fs.String(flagName(key), "", usage)
		default:
			if key == "device" {
				registerDevice(fs, &t.device, " (file key device)")
				continue
			}
			if key == "data.dir" {
				def = "" // the dataset's own, as its usage says
			}
			fs.String(flagName(key), fmt.Sprint(def), usage)
		}
	}
	fs.String("config", "", "YAML configuration file (flags > TOLARIA_* environment > file > defaults)")
	fs.String("summary-json", "", "also write summary.json to this path")
	fs.BoolVar(&t.isolate, "isolate", false, "run a CPU job in a tolaria-worker process too (GPU jobs always are)")
	t.worker.register(fs, "a tolaria-worker")
	t.metrics.register(fs, "")
}

// extraKeys are the settings of train that are not the job's.
var extraKeys = []field.Name{"summary_json", "metrics_addr", "worker", "isolate", "worker_start_timeout", "heartbeat_timeout", "metrics_linger"}

// otherEnv are TOLARIA_* variables that are not configuration keys.
var otherEnv = []string{"TOLARIA_CONFIG", "TOLARIA_WORKER", "TOLARIA_PROTOCOL_FD"}

// writtenAnnotation records, on a key's flag, how the configuration file
// wrote the key when the file gave its value: errors name it so.
const writtenAnnotation = "tolaria.written"

// resolve reads flags, TOLARIA_* variables and the YAML file into the
// run's request (see jobconfig.Resolve) and returns the warnings to log.
// The coordinator validates the job; t's groups check their own flags.
func resolve(fs *pflag.FlagSet, t *trainFlags) (train.Request, []string, error) {
	src := jobconfig.Sources{Flags: map[field.Name]any{}, Env: os.Environ(), OtherEnv: otherEnv,
		Extra: extraKeys, RunConfig: rundir.ConfigFile, FlagName: func(k field.Name) string { return "--" + flagName(k) }}
	src.File, _ = fs.GetString("config")
	if src.File == "" {
		src.File = os.Getenv("TOLARIA_CONFIG")
	}
	for _, key := range append(job.Keys(), extraKeys...) {
		if f := fs.Lookup(flagName(key)); f.Changed {
			src.Flags[key] = flagValue(fs, f)
		}
	}
	c, err := jobconfig.Resolve(src)
	for key, written := range c.Written {
		_ = fs.SetAnnotation(flagName(key), writtenAnnotation, []string{written})
	}
	if err != nil {
		return train.Request{}, nil, refusal.Config(err)
	}
	// The shared groups read their flags: those no flag gave take the
	// value of the environment or the file.
	for _, key := range extraKeys {
		v, ok := c.Extra[key]
		if !ok {
			continue
		}
		if err := fs.Lookup(flagName(key)).Value.Set(v); err != nil {
			return train.Request{}, nil, usagef("--%s: cannot use %q (set by %s): %v", flagName(key), v, c.Source(key), err)
		}
	}
	if err := errors.Join(t.worker.check(), t.metrics.check()); err != nil {
		return train.Request{}, nil, err
	}
	req := train.Request{Spec: c.Spec, MetricsAddr: t.metrics.addr, Placement: train.Placement{Isolate: t.isolate,
		Worker: t.worker.path, WorkerStart: t.worker.start, HeartbeatTimeout: t.worker.heartbeat}}
	req.SummaryJSON, _ = fs.GetString("summary-json")
	return req, c.Warnings, nil
}

// flagValue is what flag f gave: a whole number, a truth value or a
// list of whole numbers typed, anything else as its text (as a variable
// gives it).
func flagValue(fs *pflag.FlagSet, f *pflag.Flag) any {
	s := f.Value.String()
	switch f.Value.Type() {
	case "int":
		n, _ := strconv.Atoi(s)
		return n
	case "bool":
		b, _ := strconv.ParseBool(s)
		return b
	case "intSlice":
		ns, _ := fs.GetIntSlice(f.Name)
		return ns
	}
	return s
}
