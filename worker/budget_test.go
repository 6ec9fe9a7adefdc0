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

// TestBudgetWaitIsProgress: a worker waiting for its budget (queued
// behind other trials, for as long as they take) advances its work
// counter at the heartbeat interval, so the coordinator does not take the
// wait for a wedge.
func TestBudgetWaitIsProgress(t *testing.T) {
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
			runCtx, wait := conn.WatchCancel(context.Background())
			defer wait()
			grant, err := conn.AskBudget(runCtx, json.RawMessage(`1`))
			if err != nil {
				return err
			}
			return conn.Result(json.RawMessage(grant))
		}()
		outW.Close()
	}()
	enc, dec := newEncoder(inW), newDecoder(outR)
	if err := enc.send(Message{Type: TypeStart, Device: "cpu", HeartbeatMS: 5, AskBudget: true}); err != nil {
		t.Fatal(err)
	}
	var counts []uint64
	for {
		m, err := dec.next()
		if err != nil {
			t.Fatalf("reading the worker: %v (heartbeat counters %v)", err, counts)
		}
		if m.Type == TypeBeat {
			if m.Stage != StageBudgetWait {
				t.Fatalf("a heartbeat while waiting for the budget names %q", m.Stage)
			}
			counts = append(counts, m.Work)
			if len(counts) == 20 {
				if err := enc.send(Message{Type: TypeGrant, Body: json.RawMessage(`2`)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if m.Type == TypeResult {
			break
		}
	}
	inW.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	// Twenty heartbeats 5ms apart: the counter must have moved across
	// them, not once at the start of the wait only.
	if len(counts) < 20 || counts[19] <= counts[0]+1 {
		t.Errorf("heartbeat counters during the budget wait: %v; want them moving", counts)
	}
}
