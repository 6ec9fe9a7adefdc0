package worker

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

// A message JSON cannot carry (a NaN) is refused on its own; the stream
// stays usable, so the error that follows it still reaches the
// coordinator.
func TestEncoderRefusesNaNAndCarriesOn(t *testing.T) {
	var out bytes.Buffer
	enc := newEncoder(&out)
	if err := enc.send(Message{Type: TypeResult, Summary: &trainer.Summary{TrainLoss: math.NaN()}}); err == nil {
		t.Fatal("a summary with a NaN loss was encoded")
	}
	if out.Len() != 0 {
		t.Fatalf("a refused message left %q on the stream", out.String())
	}
	if err := enc.send(Message{Type: TypeError, Error: &Error{Kind: KindNonFinite, Message: "loss is NaN"}}); err != nil {
		t.Fatalf("the next message: %v", err)
	}
	m, err := newDecoder(strings.NewReader(out.String())).next()
	if err != nil || m.Type != TypeError || m.Error.Kind != KindNonFinite {
		t.Fatalf("decoded %+v, %v; want the error message", m, err)
	}
}
