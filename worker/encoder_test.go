package worker

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

// A result JSON cannot carry (a NaN) is refused on its own with a
// nonfinite error; the stream stays usable, so the error that follows it
// still reaches the coordinator.
func TestResultRefusesNaNAndCarriesOn(t *testing.T) {
	var out bytes.Buffer
	conn, err := Accept(strings.NewReader(`{"type":"start","device":"cpu"}`+"\n"), &out)
	if err != nil {
		t.Fatal(err)
	}
	err = conn.Result(struct{ Loss float64 }{math.NaN()})
	var we *Error
	if !errors.As(err, &we) || we.Kind != KindNonFinite || !strings.Contains(we.Message, "NaN") {
		t.Fatalf("a result with a NaN loss: %v; want a nonfinite error naming NaN", err)
	}
	if out.Len() != 0 {
		t.Fatalf("a refused result left %q on the stream", out.String())
	}
	if err := conn.Fail(we); err != nil {
		t.Fatalf("the next message: %v", err)
	}
	m, err := newDecoder(strings.NewReader(out.String())).next()
	if err != nil || m.Type != TypeError || m.Error.Kind != KindNonFinite {
		t.Fatalf("decoded %+v, %v; want the error message", m, err)
	}
}
