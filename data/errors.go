package data

import (
	"errors"
	"strings"
)

// Sentinel kinds that callers branch on; every error from this package that fits one of
// them matches it with errors.Is.
var (
	// ErrMissing means a dataset file does not exist.
	ErrMissing = errors.New("data: missing")
	// ErrCorrupt means a dataset file exists but its content cannot be trusted.
	ErrCorrupt = errors.New("data: corrupt")
	// ErrInvalid means an argument or configuration is out of range.
	ErrInvalid = errors.New("data: invalid argument")
)

// FileError reports a problem with one dataset file. It is exported so callers (the CLI)
// can pull out the path or replace the hint with advice that fits their flags.
type FileError struct {
	Path   string
	Kind   error  // ErrMissing, ErrCorrupt, or nil when only Err applies
	Detail string // what is wrong, in words
	Err    error  // underlying cause, if any
	Hint   string // what the user should do about it
}

func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString("data: ")
	b.WriteString(e.Path)
	b.WriteString(": ")
	b.WriteString(e.Detail)
	if e.Err != nil {
		b.WriteString(" (")
		b.WriteString(e.Err.Error())
		b.WriteString(")")
	}
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// Unwrap exposes both the kind and the cause, so errors.Is works for ErrCorrupt as well
// as for, say, fs.ErrPermission.
func (e *FileError) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}
