// Package worker is the protocol between the coordinator and the process
// that owns a device, and its two transports: pipes to a tolaria-worker
// subprocess (Process), and an in-process pipe for the CPU device
// (InProcess). The coordinator sends one request (a job, a benchmark or a
// probe); the worker answers hello (which device it opened), then
// measurements, progress and log lines as they happen, then one result or
// one error. Messages are JSON lines.
//
// The protocol knows no job: a request's and an answer's payloads travel
// as JSON that the package owning their type encodes and decodes (package
// jobserver serves jobs and benchmarks over it). So a change to what a job
// is, or a new measurement, never touches this package.
package worker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// Message types.
const (
	TypeStart    = "start"     // coordinator → worker: run the job in Body
	TypeBench    = "bench"     // coordinator → worker: run the benchmark configured in Body
	TypeProbe    = "probe"     // coordinator → worker: open the device, say hello, exit
	TypeCancel   = "cancel"    // coordinator → worker: stop after the step in flight, checkpoint
	TypeBeat     = "heartbeat" // worker → coordinator: still alive, sent every Request.Heartbeat, with the work counter
	TypeHello    = "hello"     // worker → coordinator: the device it owns
	TypeObserve  = "observe"   // worker → coordinator: one measurement, Name and Body
	TypeProgress = "progress"  // worker → coordinator: a progress report in Body
	TypeLog      = "log"       // worker → coordinator: a progress line of a benchmark, in Text
	TypeResult   = "result"    // worker → coordinator: the outcome in Body (a run's summary, a benchmark's report)
	TypeError    = "error"     // worker → coordinator: the request failed
	// TypeBudget asks, before the worker allocates anything on its
	// device, for a budget that covers the bill in Body; the worker waits
	// for the answer (only when the start message's ask_budget is set).
	TypeBudget = "budget" // worker → coordinator
	// TypeGrant answers a budget request: granted (Body says what), or
	// refused (Error says why, of kind KindBudget).
	TypeGrant = "grant" // coordinator → worker
	// TypePark asks a worker holding a budget to park: finish its step,
	// move its model to pinned host memory, free its device memory and
	// answer TypeParked.
	TypePark = "park" // coordinator → worker
	// TypeParked says the worker has parked; Body says what it released.
	TypeParked = "parked" // worker → coordinator
	// TypeUnpark lets a parked worker set up again (its budget is granted
	// again).
	TypeUnpark = "unpark" // coordinator → worker
	// TypeEnd tells a kept worker (tolaria-worker serve --keep, see Kept)
	// that its answer has arrived: the request is over, and the worker
	// waits for the next one, or for the end of its input.
	TypeEnd = "end" // coordinator → worker
)

// Error kinds, so the coordinator can choose its exit status.
const (
	KindUsage      = "usage"      // bad configuration or input data
	KindCheckpoint = "checkpoint" // the checkpoint was refused
	KindNonFinite  = "nonfinite"  // the loss became NaN or Inf
	KindNoDevice   = "no_device"  // the device could not be opened
	KindBudget     = "budget"     // the coordinator refused the device-memory budget
	KindFailure    = "failure"    // anything else
)

// Message is one line of the protocol. Body carries a typed payload as
// JSON, encoded and decoded by the package that owns its type; the
// protocol passes it on as it is.
type Message struct {
	Type   string          `json:"type"`
	Device string          `json:"device,omitempty"` // start, bench, probe: cpu or cuda
	Name   string          `json:"name,omitempty"`   // observe: the measurement's kind
	Body   json.RawMessage `json:"body,omitempty"`   // start, bench, observe, progress, result
	Hello  *Hello          `json:"hello,omitempty"`
	Error  *Error          `json:"error,omitempty"`
	Text   string          `json:"text,omitempty"` // log
	// HeartbeatMS is, in a start, bench or probe message, how often the
	// worker must send a heartbeat, in milliseconds; 0: never.
	HeartbeatMS int64 `json:"heartbeat_ms,omitempty"`
	// AskBudget is, in a start message, whether the worker must ask for a
	// device-memory budget (TypeBudget) and wait for the grant before it
	// allocates.
	AskBudget bool `json:"ask_budget,omitempty"`
	// Work is, in a heartbeat, how many times the worker's work has
	// advanced (Conn.Advance) since the request began, and Stage what
	// advanced last (e.g. "train step"). A worker whose hello set
	// Hello.Advances is taken for wedged when Work stands still past the
	// heartbeat timeout, however regularly its heartbeats come.
	Work  uint64 `json:"work,omitempty"`
	Stage string `json:"stage,omitempty"`
	// HeldBytes is, in the result or error that ends a kept worker's job
	// (see Kept), what the worker's process still holds on its device
	// once the job's memory is freed, beyond its graph pool's workspace:
	// its context and modules, and buffers the pooled executables still
	// reference, as the worker measured them (Conn.Holding). Absent when
	// the worker measured nothing (a worker of one request, or an older
	// worker).
	HeldBytes *int64 `json:"held_bytes,omitempty"`
	// DeviceClosed is, in the result or error that ends a kept worker's
	// job, true when the worker closed its device once the job ended (the
	// job left it other than found, or its cached memory could not be
	// given back): the process then holds nothing on the device, neither
	// context nor graph pool, and opens a fresh device for its next job
	// (Conn.ClosedDevice). HeldBytes is then absent.
	DeviceClosed bool `json:"device_closed,omitempty"`
}

// Request is what the coordinator asks of a worker: a message of type
// start, bench or probe.
type Request struct {
	Type   string
	Device string          // cpu or cuda
	Body   json.RawMessage // the job or the benchmark's configuration; none for a probe
	// Heartbeat is how often the worker sends a heartbeat while it serves
	// the request, from a goroutine of its own so that a long step does not
	// delay it; 0 sends none. Process sets it from its heartbeat timeout.
	Heartbeat time.Duration
	// AskBudget makes the worker ask for a device-memory budget before it
	// allocates, and wait for the grant; the transport's Sink.Budget
	// answers.
	AskBudget bool
}

// Hello is the worker's first answer.
type Hello struct {
	Device      string `json:"device"`      // e.g. "cpu", "cuda:0"
	Description string `json:"description"` // e.g. the GPU model
	Build       string `json:"build"`       // "cuda" or "cpu": how the worker binary was built
	PID         int    `json:"pid"`
	// Advances says that the worker advances the work counter its
	// heartbeats carry (Message.Work) as its work moves: every training
	// step, evaluation batch, data file, capture and checkpoint. The
	// coordinator then watches the counter as well as the heartbeats. A
	// worker that does not say so (an older one, or a request with no
	// steps to count, such as a benchmark) is watched for silence only.
	Advances bool `json:"advances,omitempty"`
}

// Error is a failure reported by the worker; Kind is one of the Kind
// constants.
type Error struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// Unread marks a KindCheckpoint error that says nothing of the
	// file's content: the file could not be read, or the model not
	// restored from it. It may be intact, and a retry may succeed.
	Unread bool `json:"unread,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// encoder writes messages; safe for concurrent use.
type encoder struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

func newEncoder(w io.Writer) *encoder { return &encoder{w: w} }

// send writes one message. A message that cannot be encoded (a body that
// is not JSON) is refused and the stream stays usable; a failed write is
// final.
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
