package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// budgetServer asks for a budget with the request's body as the bill,
// then answers with the grant it got, or fails with the refusal.
func budgetServer(ctx context.Context, in io.Reader, out io.Writer) error {
	conn, err := Accept(in, out)
	if err != nil {
		return err
	}
	if err := conn.Hello(Hello{Device: "cpu"}); err != nil {
		return err
	}
	if !conn.Request().AskBudget {
		return conn.Fail(&Error{Kind: KindUsage, Message: "the start message did not ask for budgets"})
	}
	runCtx, wait := conn.WatchCancel(ctx)
	defer wait()
	grant, err := conn.AskBudget(runCtx, conn.Request().Body)
	var we *Error
	if errors.As(err, &we) {
		return conn.Fail(we)
	}
	if err != nil {
		return err
	}
	return conn.Result(json.RawMessage(grant))
}

// TestBudgetGrantedLater: the worker waits for its budget while the
// coordinator's side answers from another goroutine, later; the grant's
// body reaches the worker as it was sent.
func TestBudgetGrantedLater(t *testing.T) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var asked json.RawMessage
	sink := Sink{Budget: func(body json.RawMessage, reply Reply) error {
		asked = body
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(50 * time.Millisecond)
			_ = reply.Grant(json.RawMessage(`{"bytes":600}`))
		}()
		return nil
	}}
	_, res, err := InProcess(budgetServer).Call(context.Background(), Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`{"bill":600}`), AskBudget: true}, sink)
	if err != nil {
		t.Fatal(err)
	}
	if string(asked) != `{"bill":600}` || string(res) != `{"bytes":600}` {
		t.Fatalf("asked %s, granted %s", asked, res)
	}
}

// TestBudgetRefused: a refusal fails the worker's request with the
// coordinator's reason, of kind budget; a coordinator without budgets
// refuses every request.
func TestBudgetRefused(t *testing.T) {
	refuse := Sink{Budget: func(_ json.RawMessage, reply Reply) error {
		return reply.Refuse(&Error{Kind: KindBudget, Message: "too large: parameters 5 GiB"})
	}}
	for _, c := range []struct {
		name string
		sink Sink
		want string
	}{{"refused", refuse, "too large: parameters 5 GiB"}, {"no broker", Sink{}, "keeps no device-memory budgets"}} {
		_, _, err := InProcess(budgetServer).Call(context.Background(), Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`1`), AskBudget: true}, c.sink)
		var we *Error
		if !errors.As(err, &we) || we.Kind != KindBudget || !strings.Contains(we.Message, c.want) {
			t.Errorf("%s: %v, want a budget error saying %q", c.name, err, c.want)
		}
	}
}

// TestWaitingIsProgress: a worker waiting for the coordinator, for its
// budget (queued behind other trials, for as long as they take) or parked
// until its unpark, advances its work counter at the heartbeat interval,
// so the coordinator does not take the wait for a wedge.
func TestWaitingIsProgress(t *testing.T) {
	for _, c := range []struct {
		stage  string
		wait   func(context.Context, *Conn) error
		answer Message
	}{
		{StageBudgetWait, func(ctx context.Context, conn *Conn) error {
			_, err := conn.AskBudget(ctx, json.RawMessage(`1`))
			return err
		}, Message{Type: TypeGrant, Body: json.RawMessage(`2`)}},
		{StageParked, func(ctx context.Context, conn *Conn) error {
			return conn.Parked(ctx, json.RawMessage(`{}`))
		}, Message{Type: TypeUnpark}},
	} {
		t.Run(c.stage, func(t *testing.T) {
			counts := waitingHeartbeats(t, c.wait, c.answer, c.stage)
			// Twenty heartbeats 5ms apart: the counter must have moved
			// across them, not once at the start of the wait only.
			if len(counts) < 20 || counts[19] <= counts[0]+1 {
				t.Errorf("heartbeat counters during the wait: %v; want them moving", counts)
			}
		})
	}
}

// waitingHeartbeats serves a request whose worker waits (wait) with a
// heartbeat every 5ms, answers the wait after twenty heartbeats and
// returns their work counters; each must name stage.
func waitingHeartbeats(t *testing.T, wait func(context.Context, *Conn) error, answer Message, stage string) []uint64 {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- func() error {
			conn, err := Accept(inR, outW)
			if err != nil {
				return err
			}
			if err := conn.Hello(Hello{Device: "cpu", Advances: true}); err != nil {
				return err
			}
			defer conn.StartHeartbeat()()
			runCtx, done := conn.WatchCancel(context.Background())
			defer done()
			if err := wait(runCtx, conn); err != nil {
				return err
			}
			return conn.Result(json.RawMessage(`true`))
		}()
		outW.Close()
	}()
	enc, dec := newEncoder(inW), newDecoder(outR)
	if err := enc.send(Message{Type: TypeStart, Device: "cpu", HeartbeatMS: 5, AskBudget: true}); err != nil {
		t.Fatal(err)
	}
	var counts []uint64
	for beats := 0; ; {
		m, err := dec.next()
		if err != nil {
			t.Fatalf("reading the worker: %v (heartbeat counters %v)", err, counts)
		}
		if m.Type == TypeBeat {
			if beats++; beats > 200 && len(counts) < 20 {
				t.Fatalf("%d heartbeats, %d of them naming %q", beats, len(counts), stage)
			}
		}
		if m.Type == TypeBeat && m.Stage == stage {
			counts = append(counts, m.Work)
			if len(counts) == 20 {
				if err := enc.send(answer); err != nil {
					t.Fatal(err)
				}
			}
		}
		if m.Type == TypeResult || m.Type == TypeError {
			break
		}
	}
	inW.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	return counts
}
