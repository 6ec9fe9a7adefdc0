package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/worker"
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

--device cpu (the default) samples in this process. --device cuda samples
in a tolaria-worker process built for CUDA (--worker, default next to
tolaria or $TOLARIA_WORKER) on the first GPU it sees; it verifies the
checkpoint's SHA-256 before it loads it. The same --seed gives the same text
on either device, graphs on or off.

The prompt and the drawn bytes are printed to standard output.

Exit status: 0 done, 2 bad input (no run, no checkpoint, not a token
model, --tokens < 1, --temperature < 0, another --device), 1 another
failure (no worker, no GPU: the message says which), 130 interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return sample(cmd.Context(), cmd) },
	}
	fs := cmd.Flags()
	fs.String("run-dir", "", "the run directory whose checkpoint to sample from (required)")
	fs.String("prompt", "", "the text to continue (any bytes)")
	fs.Int("tokens", 200, "bytes to draw (at least 1)")
	fs.Float64("temperature", 1, "divides the logits before the softmax; 0 takes the most likely byte")
	fs.Uint64("seed", 1, "the sampling generator's key: the same seed gives the same text")
	fs.String("device", "cpu", "where the decode step runs: cpu (in this process) or cuda (the first GPU a CUDA build of tolaria-worker sees)")
	fs.Bool("enable-graphs", true, "capture the decode step once and replay it per token")
	fs.String("worker", "", "path of the tolaria-worker binary for --device cuda (default: next to tolaria, or $TOLARIA_WORKER)")
	fs.Duration("worker-start-timeout", worker.DefaultHelloTimeout, "how long the tolaria-worker may take to open its device before it is killed")
	fs.Duration("heartbeat-timeout", worker.DefaultHeartbeatTimeout, "how long the tolaria-worker may send no heartbeat, or draw no token while it sends them, before it is taken for hung and killed (at least 1s)")
	return cmd
}

// sampleFlag spells a sampling setting as its flag.
func sampleFlag(key field.Name) string {
	return "--" + strings.ReplaceAll(string(key), "_", "-")
}

func sample(ctx context.Context, cmd *cobra.Command) error {
	fs := cmd.Flags()
	var req coordinator.SampleRequest
	var prompt string
	req.RunDir, _ = fs.GetString("run-dir")
	prompt, _ = fs.GetString("prompt")
	req.Prompt = []byte(prompt)
	req.Tokens, _ = fs.GetInt("tokens")
	req.Temperature, _ = fs.GetFloat64("temperature")
	req.Seed, _ = fs.GetUint64("seed")
	req.Device, _ = fs.GetString("device")
	req.Graphs, _ = fs.GetBool("enable-graphs")
	if req.Worker, _ = fs.GetString("worker"); req.Worker == "" {
		req.Worker = os.Getenv("TOLARIA_WORKER")
	}
	req.WorkerStart, _ = fs.GetDuration("worker-start-timeout")
	req.HeartbeatTimeout, _ = fs.GetDuration("heartbeat-timeout")
	text, err := coordinator.Sample(ctx, req)
	if err != nil {
		code := exitFailure
		switch {
		case ctx.Err() != nil:
			code = interruptedCode(ctx)
		case errors.Is(err, coordinator.ErrConfig):
			code = exitUsage
		}
		fmt.Fprintln(cmd.ErrOrStderr(), "tolaria:", field.Render(err, sampleFlag))
		return exitError{code}
	}
	out := cmd.OutOrStdout()
	if _, err := out.Write(append(req.Prompt, text...)); err != nil {
		return err
	}
	_, err = fmt.Fprintln(out)
	return err
}
