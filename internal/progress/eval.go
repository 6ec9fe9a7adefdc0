package progress

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// Eval shows an evaluation (eval.View): its plan and a line per shard
// attempt that ended on standard error, its result on standard output.
type Eval struct {
	Streams
	runDir string
	spell  func(field.Name) string // names a resumed evaluation's keys as the command does
	// examples names what a shard scores: examples, or a token model's
	// windows.
	examples string
}

// NewEval shows the evaluation of runDir on s; spell names a resumed
// evaluation's keys as the command does.
func NewEval(s Streams, runDir string, spell func(field.Name) string) *Eval {
	return &Eval{Streams: s, runDir: runDir, spell: spell, examples: "examples"}
}

// Shard takes a shard attempt that ended (eval.Request.Progress).
func (v *Eval) Shard(p eval.Progress) {
	if p.Err == nil {
		fmt.Fprintf(v.Stderr, "shard %d (of %d)%s: %d %s scored in %.1fs\n", p.Shard, p.Shards, on(p.Device), p.Samples, v.examples, p.Seconds)
		return
	}
	next := "trying it once more"
	if p.Last {
		next = "giving up"
	}
	fmt.Fprintf(v.Stderr, "shard %d (of %d)%s: attempt %d failed after %.1fs, %s: %s\n", p.Shard, p.Shards, on(p.Device), p.Attempt, p.Seconds, next, FirstLine(p.Err.Error(), 300))
}

// on names a shard's device in its line: " on cuda:1"; nothing for the CPU
// or a device not known.
func on(device string) string {
	if device == "" || device == "cpu" {
		return ""
	}
	return " on " + device
}

// Plan says what the evaluation e is about to score, where, and for a
// resumed one which shard files it keeps and why others are scored again;
// a token model's shards score windows, and their lines say so from here
// on.
func (v *Eval) Plan(e *eval.Run, req eval.Request) {
	what := v.examples
	if e.Positions() > 0 {
		v.examples = "windows"
		what = fmt.Sprintf("windows of %d tokens", e.Positions())
	}
	where, split := e.Devices(), req.Split
	if where == "cpu" {
		where = fmt.Sprintf("cpu, %s each", Plural(e.CPUThreads(), "kernel thread"))
	}
	if split == "" {
		split = "test"
	}
	fmt.Fprintf(v.Stderr, "evaluating %s (step %d) on %d %s of the %s split with %s on %s\n",
		e.Checkpoint(), e.Step(), e.Samples(), what, split, Plural(req.Workers, "worker"), where)
	if req.Resume {
		v.resume(e.Kept(), e.Rescored(), req.Workers)
	}
	for _, w := range e.Warnings() {
		fmt.Fprintf(v.Stderr, "warning: %s\n", w)
	}
}

// resume says which shards a resumed evaluation keeps and why a shard
// file found is scored again.
func (v *Eval) resume(kept []int, rescored map[int]error, shards int) {
	names := make([]string, len(kept))
	for i, s := range kept {
		names[i] = fmt.Sprint(s)
	}
	if len(kept) > 0 {
		fmt.Fprintf(v.Stderr, "resuming: %s of %d kept (shards %s); scoring the other %d\n", Plural(len(kept), "shard"), shards, strings.Join(names, ", "), shards-len(kept))
	} else {
		fmt.Fprintf(v.Stderr, "resuming: no shard file of an earlier evaluation verifies; scoring all %d\n", shards)
	}
	for s := range shards {
		if why, ok := rescored[s]; ok {
			fmt.Fprintf(v.Stderr, "shard %d (of %d): its file is scored again: %s\n", s, shards, field.Render(why, v.spell))
		}
	}
}

// report prints an evaluation's figures: a token model's per token, with
// its accuracy at a few positions of the context.
func report(w io.Writer, rep *eval.Report) {
	seq := rep.Sequence
	if seq == nil {
		fmt.Fprintf(w, "accuracy %.4f  loss %.6f  (%d examples, %s split, checkpoint step %d, %s)\n",
			rep.Accuracy, rep.Loss, rep.Samples, rep.Split, rep.Step, Plural(rep.Workers, "worker"))
		return
	}
	fmt.Fprintf(w, "token accuracy %.4f  loss %.6f nats/token (%.4f bits/byte)  (%d windows, %d tokens, %s split, checkpoint step %d, %s)\n",
		rep.Accuracy, rep.Loss, seq.BitsPerByte, rep.Samples, seq.Tokens, rep.Split, rep.Step, Plural(rep.Workers, "worker"))
	var at []string
	last := -1
	for _, q := range []int{0, 1, 2, 3, 4} {
		p := q * (seq.Positions - 1) / 4
		if p != last {
			at = append(at, fmt.Sprintf("%d: %.4f", p, seq.PositionAccuracy[p]))
			last = p
		}
	}
	fmt.Fprintf(w, "accuracy by position (of %d): %s\n", seq.Positions, strings.Join(at, "  "))
}

// Result prints an evaluation's end on standard output: its figures and
// where they were written, or for one some of whose shards failed (err a
// ShardsFailedError with a partial result) the figures over the others,
// marked partial. Another failure prints nothing.
func (v *Eval) Result(rep *eval.Report, err error, runDir string) {
	w := v.Stdout
	var failed *eval.ShardsFailedError
	switch {
	case rep == nil:
	case errors.As(err, &failed) && failed.Partial != "":
		fmt.Fprint(w, "partial: ")
		report(w, rep)
		fmt.Fprintf(w, "partial results %s\n", failed.Partial)
	case err != nil:
	default:
		report(w, rep)
		fmt.Fprintf(w, "results %s/%s\n", runDir, eval.JSONFile)
		if rep.Predictions != "" {
			fmt.Fprintf(w, "predictions %s\n", filepath.Join(runDir, rep.Predictions))
		}
	}
}

// DryRun prints what Slurm would be given.
func (v *Eval) DryRun(script string, command []string) error {
	return dryRun(v.Stdout, filepath.Join(v.runDir, eval.Dir, "slurm"), script, command)
}
