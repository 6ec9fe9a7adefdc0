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
