// Package worker is the protocol between the coordinator and the process
// that owns a device, and its two transports: pipes to a tolaria-worker
// subprocess, and an in-process pipe for the CPU device. The coordinator
// sends one start message with the job; the worker answers hello (which
// device it opened), then observations, events and progress as they
// happen, then one result or one error. Messages are JSON lines.
package worker

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Message types.
const (
	TypeStart    = "start"    // coordinator → worker: run Job
	TypeBench    = "bench"    // coordinator → worker: run the benchmark Bench, answer with Report
	TypeProbe    = "probe"    // coordinator → worker: open the device, say hello, exit
	TypeCancel   = "cancel"   // coordinator → worker: stop after the step in flight, checkpoint
	TypeHello    = "hello"    // worker → coordinator: the device it owns
	TypeObserve  = "observe"  // worker → coordinator: one trainer.Measurement
	TypeProgress = "progress" // worker → coordinator: a progress report
	TypeLog      = "log"      // worker → coordinator: a progress line of a benchmark
	TypeResult   = "result"   // worker → coordinator: the run's summary (or benchmark report)
	TypeError    = "error"    // worker → coordinator: the run failed
)

// Error kinds, so the coordinator can choose its exit status.
const (
	KindUsage      = "usage"      // bad configuration or input data
	KindCheckpoint = "checkpoint" // the checkpoint was refused
	KindNonFinite  = "nonfinite"  // the loss became NaN or Inf
	KindNoDevice   = "no_device"  // the device could not be opened
	KindFailure    = "failure"    // anything else
)

// Message is one line of the protocol.
type Message struct {
	Type     string            `json:"type"`
	Device   string            `json:"device,omitempty"` // start/probe: cpu or cuda
	Job      *job.Spec         `json:"job,omitempty"`
	Hello    *Hello            `json:"hello,omitempty"`
	Name     string            `json:"name,omitempty"` // observe: the measurement's kind
	Body     json.RawMessage   `json:"body,omitempty"` // observe: the measurement
	Progress *trainer.Progress `json:"progress,omitempty"`
	Summary  *trainer.Summary  `json:"summary,omitempty"`
	Error    *Error            `json:"error,omitempty"`
	Bench    *bench.Config     `json:"bench,omitempty"`
	Report   *bench.Report     `json:"report,omitempty"`
	Text     string            `json:"text,omitempty"`
}

// Hello is the worker's first answer.
type Hello struct {
	Device      string `json:"device"`      // e.g. "cpu", "cuda:0"
	Description string `json:"description"` // e.g. the GPU model
	Build       string `json:"build"`       // "cuda" or "cpu": how the worker binary was built
	PID         int    `json:"pid"`
}

// Error is a failure reported by the worker.
type Error struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// encoder writes messages; safe for concurrent use.
type encoder struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

func newEncoder(w io.Writer) *encoder { return &encoder{w: w} }

// send writes one message. A message that cannot be encoded (a NaN
// in it: JSON has none) is refused and the stream stays usable; a failed
// write is final.
func (e *encoder) send(m Message) error {
	line, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("worker: encoding a %s message: %w", m.Type, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	_, e.err = e.w.Write(append(line, '\n'))
	return e.err
}

// decoder reads messages.
type decoder struct {
	sc *bufio.Scanner
}

func newDecoder(r io.Reader) *decoder {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &decoder{sc: sc}
}

func (d *decoder) next() (Message, error) {
	if !d.sc.Scan() {
		if err := d.sc.Err(); err != nil {
			return Message{}, err
		}
		return Message{}, io.EOF
	}
	var m Message
	if err := json.Unmarshal(d.sc.Bytes(), &m); err != nil {
		return Message{}, fmt.Errorf("worker protocol: bad message %.80q: %w", d.sc.Text(), err)
	}
	return m, nil
}

// remoteObserver is the worker side of trainer.Observer: every
// measurement becomes an observe message. One that cannot be encoded (a
// NaN) is dropped, as a message that cannot be sent is.
type remoteObserver struct{ enc *encoder }

func (o remoteObserver) Observe(m trainer.Measurement) {
	name, body, err := trainer.EncodeMeasurement(m)
	if err != nil {
		return
	}
	_ = o.enc.send(Message{Type: TypeObserve, Name: name, Body: body})
}

// replay passes the measurement an observe message carries to o.
func replay(o trainer.Observer, m Message) error {
	if m.Name == "" {
		return errors.New("worker protocol: observe message without a measurement")
	}
	x, err := trainer.DecodeMeasurement(m.Name, m.Body)
	if err != nil {
		return fmt.Errorf("worker protocol: %w", err)
	}
	o.Observe(x)
	return nil
}
