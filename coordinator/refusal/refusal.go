// Package refusal holds the two ways the coordinator refuses a job before
// it runs, shared by the coordinator and its launchers so that a command
// maps either to its exit code wherever it was made.
package refusal

import "errors"

var (
	// ErrConfig is wrapped by refusals of the job as configured: a
	// setting, the data files, the run directory or its checkpoint.
	ErrConfig = errors.New("invalid configuration")
	// ErrSetup is wrapped by refusals that come from this machine rather
	// than from the configuration: no worker, no GPU, a busy port.
	ErrSetup = errors.New("setup")
)

// kindError marks err with one of the kinds above without changing its
// message.
type kindError struct {
	kind, err error
}

func (e kindError) Error() string   { return e.err.Error() }
func (e kindError) Unwrap() []error { return []error{e.kind, e.err} }

// Config marks err as an ErrConfig, its message unchanged.
func Config(err error) error { return kindError{ErrConfig, err} }

// Setup marks err as an ErrSetup, its message unchanged.
func Setup(err error) error { return kindError{ErrSetup, err} }
