package rundir

import "fmt"

// Ending is how an activity that ran ended when it did not simply
// succeed, once it has shown its results and said why: a command maps
// its Kind to an exit status and says nothing more.
type Ending struct {
	Kind EndKind
	// Err is the cause of a Failed ending when one error is; its kind
	// (a refusal, a worker's) sets the exit status then.
	Err error
}

// EndKind is what became of an activity's work.
type EndKind int

const (
	// Done: nothing was left to do (a sweep whose every trial had
	// succeeded).
	Done EndKind = iota
	// Failed: nothing succeeded.
	Failed
	// SomeFailed: some parts (trials, agents) failed, the others
	// succeeded.
	SomeFailed
	// Interrupted: the activity was stopped (its context cancelled).
	Interrupted
)

func (e *Ending) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return [...]string{"done", "failed", "some failed", "interrupted"}[e.Kind]
}

func (e *Ending) Unwrap() error { return e.Err }

// Outcome is what to say of work in total parts of which ok succeeded,
// and its ending (nil when all did): how many of what failed, and the
// file, reasons, that says why.
func Outcome(ok, total int, what, reasons string) (string, error) {
	switch {
	case ok == total:
		return "", nil
	case ok == 0:
		return fmt.Sprintf("no %s succeeded; see the reasons in %s", what, reasons), &Ending{Kind: Failed}
	}
	return fmt.Sprintf("%d of %d %ss failed; see the reasons in %s", total-ok, total, what, reasons), &Ending{Kind: SomeFailed}
}
