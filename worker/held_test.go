package worker

import (
	"context"
	"encoding/json"
	"io"
	"testing"
)

// TestFinalMessageCarriesWhatTheWorkerHolds: what a worker records with
// Conn.Holding reaches the sink's Held with its result or its error, 0
// included; a worker that records nothing has Held not called, so the
// coordinator can tell a figure of 0 from none. A worker that closed its
// device (Conn.ClosedDevice, even after Holding) has DeviceClosed called
// instead, and Held not.
func TestFinalMessageCarriesWhatTheWorkerHolds(t *testing.T) {
	for _, c := range []struct {
		name   string
		held   int64 // < 0: none recorded
		fail   bool
		closed bool
	}{
		{"result", 1096936, false, false},
		{"error", 4096, true, false},
		{"zero", 0, false, false},
		{"none", -1, false, false},
		{"closed", 4096, false, true},
		{"closed error", -1, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			serve := InProcess(func(ctx context.Context, in io.Reader, out io.Writer) error {
				conn, err := Accept(in, out)
				if err != nil {
					return err
				}
				if err := conn.Hello(Hello{Device: "cpu"}); err != nil {
					return err
				}
				if c.held >= 0 {
					conn.Holding(c.held)
				}
				if c.closed {
					conn.ClosedDevice()
				}
				if c.fail {
					return conn.Fail(&Error{Kind: KindFailure, Message: "the job failed"})
				}
				return conn.Result(map[string]int{"steps": 1})
			})
			var got []int64
			closed := 0
			_, _, err := serve.Call(context.Background(), Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`{}`)},
				Sink{Held: func(n int64) { got = append(got, n) }, DeviceClosed: func() { closed++ }})
			if (err != nil) != c.fail {
				t.Fatalf("call: %v", err)
			}
			switch {
			case c.closed && (closed != 1 || len(got) != 0):
				t.Fatalf("a worker that closed its device: DeviceClosed called %d times, Held with %v; want once, and Held not", closed, got)
			case c.closed:
			case closed != 0:
				t.Fatalf("DeviceClosed called %d times by a worker that kept its device", closed)
			case c.held < 0 && len(got) != 0:
				t.Fatalf("Held called with %v by a worker that recorded nothing", got)
			case c.held >= 0 && (len(got) != 1 || got[0] != c.held):
				t.Fatalf("Held called with %v; want [%d]", got, c.held)
			}
		})
	}
}
