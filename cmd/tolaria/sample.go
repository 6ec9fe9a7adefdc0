package main

import (
	"errors"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/docs/cli"
)

func newSampleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sample --run-dir RUN --prompt TEXT --tokens N",
		Short: "print text drawn from a run's checkpoint of a token model",
		Long:  cli.Help("sample"),
		Args:  cobra.NoArgs,
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
