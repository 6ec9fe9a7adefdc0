package main

import (
	"errors"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/coordinator"
)

func newSampleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sample --run-dir RUN --prompt TEXT --tokens N",
		Short: "print text drawn from a run's checkpoint of a token model",
		Long: `sample continues --prompt with --tokens bytes drawn one at a time from the
model of a run (config.yaml and checkpoint.tlck in --run-dir), a token model
such as examples/char-transformer.yaml's: byte ids in, logits per position
out. The prompt is any bytes; the model sees its last T (the model's input
length), a shorter prompt left-padded with newlines.

Each token is one decode step on the device: the evaluation forward pass (no
dropout) of the window, a draw from the last position's logits divided by
--temperature (softmax and inverse CDF in double, one uniform from a Philox
generator keyed by --seed and advanced by the step itself), and the window
shifted left with the drawn byte appended. With --enable-graphs the step is
captured once and replayed per token; the text is the same either way, and
the same --seed gives the same text. --temperature 0 takes the most likely
byte each time.

--device cpu samples in this process. --device cuda samples in a
tolaria-worker process built for CUDA (--worker, default next to tolaria or
$TOLARIA_WORKER) on the first GPU it sees; it verifies the checkpoint's
SHA-256 before it loads it. --device auto (the default) takes cuda when
that worker can open a GPU, and cpu otherwise. The same --seed gives the same text
on either device, graphs on or off.

The prompt and the drawn bytes are printed to standard output.

Exit status: 0 done, 2 bad input (no run, no checkpoint, not a token
model, --tokens < 1, --temperature < 0, another --device), 1 another
failure (no worker, no GPU: the message says which), 130 interrupted.`,
		Args: cobra.NoArgs,
	}
	var req coordinator.SampleRequest
	var prompt string
	var workers workerFlags
	fs := cmd.Flags()
	fs.StringVar(&req.RunDir, "run-dir", "", "the run directory whose checkpoint to sample from (required)")
	fs.StringVar(&prompt, "prompt", "", "the text to continue (any bytes)")
	fs.IntVar(&req.Tokens, "tokens", 200, "bytes to draw (at least 1)")
	fs.Float64Var(&req.Temperature, "temperature", 1, "divides the logits before the softmax; 0 takes the most likely byte")
	fs.Uint64Var(&req.Seed, "seed", 1, "the sampling generator's key: the same seed gives the same text")
	registerDevice(fs, &req.Device, "; cpu samples in this process, cuda in a tolaria-worker on the first GPU it sees")
	fs.BoolVar(&req.Graphs, "enable-graphs", true, "capture the decode step once and replay it per token")
	workers.register(fs, "the tolaria-worker")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := errors.Join(checkDevice(req.Device), workers.check()); err != nil {
			return err
		}
		req.Prompt, req.Worker, req.WorkerStart, req.HeartbeatTimeout = []byte(prompt), workers.path, workers.start, workers.heartbeat
		return coordinator.SampleTo(cmd.Context(), cmd.OutOrStdout(), req, logger(cmd.ErrOrStderr(), slog.LevelError))
	}
	return cmd
}
