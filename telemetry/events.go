package telemetry

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/trainer"
)

// EventLogFile is the events log's file name inside a run directory.
const EventLogFile = "events.jsonl"

// EventLog writes trainer events as JSON lines, one event per line. It is
// safe for concurrent use. A write error does not stop training: the first
// one is kept for Err and Close, later events are dropped.
type EventLog struct {
	mu     sync.Mutex
	w      io.Writer
	closer io.Closer
	err    error
}

// NewEventLog returns an EventLog writing to w. Close does not close w.
func NewEventLog(w io.Writer) *EventLog { return &EventLog{w: w} }

// CreateEventLog opens path for appending, creating it if needed, and
// returns an EventLog writing to it. Close closes the file.
func CreateEventLog(path string) (*EventLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("telemetry: events log: %w", err)
	}
	return &EventLog{w: f, closer: f}, nil
}

// Write appends e as one JSON line. A zero Time is set to now (UTC). Fields
// that cannot be encoded (a NaN, a channel) are replaced by an
// "encode_error" field so that the event itself is never lost.
func (l *EventLog) Write(e trainer.Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	line, err := json.Marshal(e)
	if err != nil {
		e.Fields = map[string]any{"encode_error": err.Error()}
		if line, err = json.Marshal(e); err != nil {
			return fmt.Errorf("telemetry: events log: %w", err)
		}
	}
	line = append(line, '\n')

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if _, err := l.w.Write(line); err != nil {
		l.err = fmt.Errorf("telemetry: events log: %w", err)
	}
	return l.err
}

// Err returns the first write error, if any.
func (l *EventLog) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Close closes the file opened by CreateEventLog and returns the first write
// error, if any. Events written after Close fail.
func (l *EventLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var cerr error
	if l.closer != nil {
		cerr = l.closer.Close()
		l.closer = nil
	}
	werr := l.err
	if l.err == nil {
		l.err = errEventLogClosed
	}
	return errors.Join(werr, cerr)
}

var errEventLogClosed = errors.New("telemetry: events log is closed")

// Observer returns a trainer.Observer that writes each Event to l and
// ignores the measurements. Combine it with a metrics observer using
// trainer.Tee.
func (l *EventLog) Observer() trainer.Observer { return eventObserver{log: l} }

type eventObserver struct{ log *EventLog }

func (o eventObserver) Observe(m trainer.Measurement) {
	if e, ok := m.(trainer.Event); ok {
		_ = o.log.Write(e)
	}
}

// ErrBadEvent is a line of an events log that is not an event written by
// EventLog.
var ErrBadEvent = errors.New("not an event")

// DecodeEvent decodes one line of an events log: a JSON object with a
// time, a kind and, optionally, fields, and nothing else. Numbers among
// the fields come back as float64, as encoding/json reads them.
func DecodeEvent(line []byte) (trainer.Event, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var e trainer.Event
	if err := dec.Decode(&e); err != nil {
		return trainer.Event{}, fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	switch {
	case dec.More():
		return trainer.Event{}, fmt.Errorf("%w: more than one JSON value on the line", ErrBadEvent)
	case e.Kind == "":
		return trainer.Event{}, fmt.Errorf("%w: no kind", ErrBadEvent)
	case e.Time.IsZero():
		return trainer.Event{}, fmt.Errorf("%w: no time", ErrBadEvent)
	}
	return e, nil
}

// ReadEvents reads an events log, a training run's or a reinforcement-
// learning agent's, and calls each for every event in order. A last line
// without its newline (a process stopped while writing it) is ignored; any
// other line that is not an event is an error naming its line number.
func ReadEvents(r io.Reader, each func(trainer.Event)) error {
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil // nothing more, or a torn last line
		}
		if err != nil {
			return fmt.Errorf("telemetry: events log: %w", err)
		}
		e, err := DecodeEvent(line)
		if err != nil {
			return fmt.Errorf("telemetry: events log line %d: %w", n, err)
		}
		each(e)
	}
}
