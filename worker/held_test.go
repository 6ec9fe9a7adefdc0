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
// coordinator can tell a figure of 0 from none.
func TestFinalMessageCarriesWhatTheWorkerHolds(t *testing.T) {
	for _, c := range []struct {
		name string
		held int64 // < 0: none recorded
		fail bool
	}{
		{"result", 1096936, false},
		{"error", 4096, true},
		{"zero", 0, false},
		{"none", -1, false},
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
				if c.fail {
					return conn.Fail(&Error{Kind: KindFailure, Message: "the job failed"})
				}
				return conn.Result(map[string]int{"steps": 1})
			})
			var got []int64
			_, _, err := serve.Call(context.Background(), Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`{}`)},
				Sink{Held: func(n int64) { got = append(got, n) }})
			if (err != nil) != c.fail {
				t.Fatalf("call: %v", err)
			}
			switch {
			case c.held < 0 && len(got) != 0:
				t.Fatalf("Held called with %v by a worker that recorded nothing", got)
			case c.held >= 0 && (len(got) != 1 || got[0] != c.held):
				t.Fatalf("Held called with %v; want [%d]", got, c.held)
			}
		})
	}
}
