// Package field names configuration settings in errors. A library reports
// a bad setting by its configuration key (schedule.batch_size,
// model.hidden), as it is written in a configuration file; a command
// renders the same error with its own spelling of the keys (--batch-size),
// so no library needs to know the command's flags. Schema reads a YAML
// configuration file by those keys, and Assign reads a value into a
// setting's field, the same way for every kind of configuration.
package field

import (
	"errors"
	"fmt"
	"strings"
)

// Name is a configuration key, as written in a configuration file.
type Name string

// Error is a refused setting. Its message may name other settings: every
// argument of type Name is a key that Render respells.
type Error struct {
	Field  Name
	format string
	args   []any
}

// Errorf reports a problem with field; the message is formatted as by
// fmt.Errorf, so %w wraps an error.
func Errorf(f Name, format string, args ...any) *Error {
	return &Error{Field: f, format: format, args: args}
}

// Error is the message with the keys as they are: "batch_size: must be ...".
func (e *Error) Error() string { return e.Render(nil) }

// Render formats the message with every key passed through spell; a nil
// spell, or one that returns "", keeps a key as it is.
func (e *Error) Render(spell func(Name) string) string {
	name := func(n Name) string {
		if spell != nil {
			if s := spell(n); s != "" {
				return s
			}
		}
		return string(n)
	}
	args := make([]any, len(e.args))
	for i, a := range e.args {
		if n, ok := a.(Name); ok {
			a = name(n)
		}
		args[i] = a
	}
	return name(e.Field) + ": " + fmt.Errorf(e.format, args...).Error()
}

// Unwrap returns the errors among the arguments, so errors.Is and
// errors.As see what a %w wrapped.
func (e *Error) Unwrap() []error {
	var errs []error
	for _, a := range e.args {
		if err, ok := a.(error); ok {
			errs = append(errs, err)
		}
	}
	return errs
}

// Render is err's message with the keys of every Error in its chain
// respelled by spell: how a command shows a library's error in its own
// terms.
func Render(err error, spell func(Name) string) string {
	msg := err.Error()
	for _, fe := range all(err) {
		msg = strings.Replace(msg, fe.Error(), fe.Render(spell), 1)
	}
	return msg
}

// all lists the Errors in err's chain, outermost first.
func all(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if fe, ok := err.(*Error); ok {
			out = append(out, fe)
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

// Is reports whether err's chain holds an Error about f.
func Is(err error, f Name) bool {
	var fe *Error
	return errors.As(err, &fe) && fe.Field == f
}
