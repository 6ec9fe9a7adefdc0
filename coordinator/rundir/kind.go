package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/internal/shellword"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

// ErrOtherKind is a directory given as a training run's that is another
// activity's: a sweep's directory, or a tolaria rl run. Its refusal (a
// field.Error wrapped in ErrConfig) says which, and what to do.
var ErrOtherKind = errors.New("not a tolaria train run")

// sweepFiles are files a sweep writes at the top of its directory (see
// package sweep: its results and the copy of its sweep file), which no
// run directory holds.
var sweepFiles = []string{"results.json", "sweep.yaml"}

// Use is what a command asks of a run directory, which says what to
// suggest when the directory is of another kind.
type Use int

const (
	// UseNew is a fresh training run.
	UseNew Use = iota
	// UseResume is a resumed training run.
	UseResume
	// UseRead is a command that reads a training run (eval, sample).
	UseRead
)

// CheckKind refuses dir, for use, when it is a sweep's directory or a
// run of another command (a tolaria rl run's config.yaml), saying so in
// those terms and what to do instead: a run directory's files are not
// the user's configuration, so a refusal of config.yaml as a file of
// another command would mislead. Any other directory (none at all
// included) passes.
func CheckKind(dir string, use Use) error {
	if isSweep(dir) {
		todo, args := sweepTodo(dir, use)
		return refusal.Config(field.Errorf("run_dir", "%s is a tolaria sweep directory (it has %s), %w; "+todo,
			append([]any{dir, strings.Join(sweepFiles, ", "), ErrOtherKind}, args...)...))
	}
	path := filepath.Join(dir, ConfigFile)
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	_, err := job.ReadRunConfig(dir, path, nil)
	var other *job.OtherRunError
	if !errors.As(err, &other) {
		return nil // a training run's (or a broken one, which its reader refuses)
	}
	key, todo, args := field.Name("run_dir"), "a new run needs an empty or new %s", []any{field.Name("run_dir")}
	switch {
	case use == UseResume && other.Command == "tolaria rl":
		key, todo, args = "resume", "continue it with tolaria rl --resume --run-dir %s", []any{shellword.Quote(dir)}
	case use == UseResume:
		key, todo = "resume", "point %s at a run of tolaria train"
	case use == UseRead && other.Command == "tolaria rl":
		todo, args = "point %s at a run made by tolaria train (an rl run's agents are evaluated as they train: see its %s)", []any{field.Name("run_dir"), SummaryFile}
	case use == UseRead:
		todo = "point %s at a run made by tolaria train"
	}
	return refusal.Config(field.Errorf(key, "%w%w; "+todo, append([]any{other, silent{ErrOtherKind}}, args...)...))
}

// silent wraps an error for errors.Is without adding to a message that
// says it already.
type silent struct{ err error }

func (e silent) Error() string { return "" }
func (e silent) Unwrap() error { return e.err }

// isSweep reports whether dir holds a sweep's own files.
func isSweep(dir string) bool {
	for _, name := range sweepFiles {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return false
		}
	}
	return true
}

// sweepTodo says what to do with a sweep's directory given for use: a
// format and its arguments, keys among them as field.Names.
func sweepTodo(dir string, use Use) (string, []any) {
	trial, rank := bestTrial(dir)
	ranked := ""
	switch {
	case rank == 1:
		ranked = " (the best in its results.json)"
	case rank > 1:
		ranked = fmt.Sprintf(" (ranked %d in its results.json)", rank)
	}
	switch {
	case use == UseResume && trial != "":
		return "continue the sweep with tolaria sweep --resume --sweep-dir %s, or resume one of its trials' runs, such as %s %s%s",
			[]any{shellword.Quote(dir), field.Name("run_dir"), shellword.Quote(trial), ranked}
	case use == UseResume:
		return "continue the sweep with tolaria sweep --resume --sweep-dir %s", []any{shellword.Quote(dir)}
	case use == UseRead && trial != "":
		return "point %s at one of its trials' run directories, such as %s%s", []any{field.Name("run_dir"), trial, ranked}
	case use == UseRead:
		return "point %s at one of its trials' run directories once one has a checkpoint (%s lists them)", []any{field.Name("run_dir"), filepath.Join(dir, "results.json")}
	}
	return "a new run needs an empty or new %s", []any{field.Name("run_dir")}
}

// bestTrial is the run directory of the sweep's best-ranked trial in its
// results.json that has a checkpoint, and the rank; "" when none has.
func bestTrial(dir string) (run string, rank int) {
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return "", 0
	}
	var res struct {
		Trials []struct {
			Name string `json:"name"`
			Rank int    `json:"rank"` // 0: unranked (failed, or not run yet)
		} `json:"trials"`
	}
	if json.Unmarshal(raw, &res) != nil {
		return "", 0
	}
	for _, t := range res.Trials {
		dir := filepath.Join(dir, t.Name)
		if _, err := os.Stat(filepath.Join(dir, trainer.CheckpointFile)); err != nil || t.Name == "" {
			continue
		}
		if run == "" || t.Rank > 0 && (rank == 0 || t.Rank < rank) {
			run, rank = dir, t.Rank
		}
	}
	return run, rank
}
