package progress

import (
	"fmt"
	"io"

	"github.com/tolaria-ml/tolaria/coordinator"
)

// Eval shows an evaluation: a line per shard attempt that ended.
type Eval struct {
	w io.Writer
	// Examples names what a shard scores: examples, or a token model's
	// windows.
	Examples string
}

// NewEval shows an evaluation on w.
func NewEval(w io.Writer) *Eval { return &Eval{w: w, Examples: "examples"} }

// Shard takes a shard attempt that ended (coordinator.EvalRequest.Progress).
func (v *Eval) Shard(p coordinator.EvalProgress) {
	if p.Err == nil {
		fmt.Fprintf(v.w, "shard %d (of %d)%s: %d %s scored in %.1fs\n", p.Shard, p.Shards, on(p.Device), p.Samples, v.Examples, p.Seconds)
		return
	}
	next := "trying it once more"
	if p.Last {
		next = "giving up"
	}
	fmt.Fprintf(v.w, "shard %d (of %d)%s: attempt %d failed after %.1fs, %s: %s\n", p.Shard, p.Shards, on(p.Device), p.Attempt, p.Seconds, next, FirstLine(p.Err.Error(), 300))
}

// on names a shard's device in its line: " on cuda:1"; nothing for the CPU
// or a device not known.
func on(device string) string {
	if device == "" || device == "cpu" {
		return ""
	}
	return " on " + device
}
