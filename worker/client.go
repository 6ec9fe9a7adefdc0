package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Sink receives what a worker reports while it serves a request. Payloads
// come as the JSON the worker sent; the side that owns their type decodes
// them, and an error it returns ends the request.
type Sink struct {
	Hello    func(Hello)
	Observe  func(name string, body json.RawMessage) error
	Progress func(body json.RawMessage) error
	Log      func(line string) // benchmark progress lines
	// Alive is called on every message from the worker, heartbeats
	// included: a sign of life, for a display of how long each worker
	// has been silent.
	Alive func()
	// Budget receives a worker's budget request (the bill in body, which
	// the side that owns its type decodes). It must not block: the
	// conversation, heartbeats included, goes on while the worker waits,
	// and the answer goes back through reply, at once or later (from any
	// goroutine, until the call returns). An error it returns ends the
	// request. Nil refuses every request.
	Budget func(body json.RawMessage, reply Reply) error
	// Parked hears that a worker told to park (Reply.Park) has parked;
	// body says what it released. It must not block.
	Parked func(body json.RawMessage) error
	// Held hears, before the call returns, what a kept worker's process
	// still holds on its device once its request ended (the final
	// message's Message.HeldBytes); not called when the worker measured
	// nothing.
	Held func(bytes int64)
	// DeviceClosed hears, before the call returns, that a kept worker
	// closed its device once its request ended (the final message's
	// Message.DeviceClosed): its process holds nothing there. Held is then
	// not called.
	DeviceClosed func()
}

// held passes on what the final message m says the worker still holds.
func (s Sink) held(m Message) {
	switch {
	case m.DeviceClosed:
		if s.DeviceClosed != nil {
			s.DeviceClosed()
		}
	case s.Held != nil && m.HeldBytes != nil:
		s.Held(*m.HeldBytes)
	}
}

// Reply answers a worker's budget request.
type Reply struct{ enc *encoder }

// Grant lets the worker allocate; body says what was granted.
func (r Reply) Grant(body json.RawMessage) error {
	return r.enc.send(Message{Type: TypeGrant, Body: body})
}

// Refuse fails the worker's request for a budget; the worker fails its
// request with e.
func (r Reply) Refuse(e *Error) error {
	return r.enc.send(Message{Type: TypeGrant, Error: e})
}

// Park asks the worker, which holds its budget, to park.
func (r Reply) Park() error { return r.enc.send(Message{Type: TypePark}) }

// Unpark lets a parked worker set up again.
func (r Reply) Unpark() error { return r.enc.send(Message{Type: TypeUnpark}) }

// Transport carries one request to a worker and brings back its answers:
// the hello, and the result's JSON (none for a probe), or the worker's
// *Error, or why the worker could not answer.
type Transport interface {
	Call(ctx context.Context, req Request, sink Sink) (Hello, json.RawMessage, error)
}

// converse sends the request and reads the answer until a result, an
// error or the end of the worker's output. Cancelling ctx sends cancel
// once; the worker then checkpoints and answers with a result. alive,
// when set, sees every message as it arrives (Process's watchdog).
func converse(ctx context.Context, w io.Writer, r io.Reader, req Request, sink Sink, alive func(Message)) (Hello, json.RawMessage, error) {
	return converseOn(ctx, newEncoder(w), newDecoder(r), req, sink, alive)
}

// converseOn is converse on an encoder and a decoder that outlive the
// request: a kept worker's, which serves one request after another.
func converseOn(ctx context.Context, enc *encoder, dec *decoder, req Request, sink Sink, alive func(Message)) (Hello, json.RawMessage, error) {
	start := Message{Type: req.Type, Device: req.Device, Body: req.Body, HeartbeatMS: req.Heartbeat.Milliseconds(), AskBudget: req.AskBudget}
	if req.Heartbeat > 0 && start.HeartbeatMS == 0 {
		start.HeartbeatMS = 1 // never round an interval asked for down to none
	}
	if err := enc.send(start); err != nil {
		return Hello{}, nil, fmt.Errorf("worker: sending the request: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = enc.send(Message{Type: TypeCancel}) })
	defer stop()
	var hello Hello
	for {
		m, err := dec.next()
		if err != nil {
			return hello, nil, fmt.Errorf("worker: %w", err)
		}
		if alive != nil {
			alive(m)
		}
		if sink.Alive != nil {
			sink.Alive()
		}
		switch m.Type {
		case TypeBeat:
		case TypeHello:
			if m.Hello != nil {
				hello = *m.Hello
				if sink.Hello != nil {
					sink.Hello(hello)
				}
			}
			if req.Type == TypeProbe {
				return hello, nil, nil
			}
		case TypeObserve:
			if sink.Observe != nil {
				if m.Name == "" {
					return hello, nil, errors.New("worker protocol: observe message without a measurement")
				}
				if err := sink.Observe(m.Name, m.Body); err != nil {
					return hello, nil, fmt.Errorf("worker protocol: %w", err)
				}
			}
		case TypeProgress:
			if sink.Progress != nil && len(m.Body) > 0 {
				if err := sink.Progress(m.Body); err != nil {
					return hello, nil, fmt.Errorf("worker protocol: progress: %w", err)
				}
			}
		case TypeBudget:
			reply := Reply{enc}
			if sink.Budget == nil {
				if err := reply.Refuse(&Error{Kind: KindBudget, Message: "this coordinator keeps no device-memory budgets"}); err != nil {
					return hello, nil, fmt.Errorf("worker: answering a budget request: %w", err)
				}
				continue
			}
			if err := sink.Budget(m.Body, reply); err != nil {
				return hello, nil, fmt.Errorf("worker protocol: budget: %w", err)
			}
		case TypeParked:
			if sink.Parked != nil {
				if err := sink.Parked(m.Body); err != nil {
					return hello, nil, fmt.Errorf("worker protocol: parked: %w", err)
				}
			}
		case TypeLog:
			if sink.Log != nil {
				sink.Log(m.Text)
			}
		case TypeResult:
			if len(m.Body) == 0 {
				return hello, nil, errors.New("worker: result without a body")
			}
			sink.held(m)
			return hello, m.Body, nil
		case TypeError:
			if m.Error == nil {
				return hello, nil, errors.New("worker: error without a description")
			}
			sink.held(m)
			return hello, nil, m.Error
		default:
			return hello, nil, fmt.Errorf("worker protocol: unexpected message %q", m.Type)
		}
	}
}

// InProcess is a transport to a worker served in this process, over
// pipes: the CPU device's path, the same protocol as a subprocess. The
// function serves one request read from in, answering on out, as a
// tolaria-worker does on its standard input and protocol descriptor.
type InProcess func(ctx context.Context, in io.Reader, out io.Writer) error

// Call serves req with f and returns its answer. Cancelling ctx sends
// cancel, as to a subprocess; the server itself runs until it answers.
func (f InProcess) Call(ctx context.Context, req Request, sink Sink) (Hello, json.RawMessage, error) {
	toWorker, fromCoord := io.Pipe()
	toCoord, fromWorker := io.Pipe()
	served := make(chan error, 1)
	go func() {
		err := f(context.WithoutCancel(ctx), toWorker, fromWorker)
		fromWorker.CloseWithError(io.EOF)
		toWorker.Close()
		served <- err
	}()
	hello, res, err := converse(ctx, fromCoord, toCoord, req, sink, nil)
	fromCoord.Close()
	toCoord.Close()
	if serr := <-served; serr != nil {
		if err == nil {
			err = serr
		} else {
			// The server's own failure is why the conversation broke.
			err = fmt.Errorf("%w (the in-process worker: %w)", err, serr)
		}
	}
	return hello, res, err
}
