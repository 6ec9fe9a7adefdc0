package coordinator

import (
	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/jobserver"
)

// The sharded evaluation lives in package eval; these names keep the
// coordinator's callers working.

// Files of a sharded evaluation, in the run directory.
const (
	EvalDir  = eval.Dir      // shard files and each shard's worker log
	EvalJSON = eval.JSONFile // the merged result
)

type (
	EvalRequest       = eval.Request
	EvalProgress      = eval.Progress
	EvalReport        = eval.Report
	SequenceFigures   = eval.SequenceFigures
	ClassFigures      = eval.ClassFigures
	ShardsFailedError = eval.ShardsFailedError
	Evaluation        = eval.Run
)

// ErrMerge is wrapped by every refusal of a set of shard files.
var ErrMerge = eval.ErrMerge

// PlanEval checks a sharded evaluation before anything is written (see
// eval.Plan).
func PlanEval(req EvalRequest) (*Evaluation, error) { return eval.Plan(req) }

// ShardFile is shard s's file in the evaluation directory.
func ShardFile(runDir string, s int) string { return eval.ShardFile(runDir, s) }

// MergeShards merges shard files (see eval.Merge).
func MergeShards(want jobserver.ShardHeader, shards []jobserver.Shard) (*EvalReport, error) {
	return eval.Merge(want, shards)
}
