package rundir

import (
	"errors"
	"testing"
)

// TestOutcome: work of which every part succeeded has no ending; one of
// which none did ended Failed, one of which some did SomeFailed, each
// saying how many of what failed and where the reasons are.
func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		ok, total int
		kind      EndKind // -1: no ending
		note      string
	}{
		{3, 3, -1, ""},
		{0, 0, -1, ""},
		{0, 2, Failed, "no trial succeeded; see the reasons in r.json"},
		{1, 3, SomeFailed, "2 of 3 trials failed; see the reasons in r.json"},
	} {
		note, err := Outcome(c.ok, c.total, "trial", "r.json")
		var end *Ending
		switch {
		case c.kind < 0 && err != nil:
			t.Errorf("%d of %d: ended %v", c.ok, c.total, err)
		case c.kind >= 0 && (!errors.As(err, &end) || end.Kind != c.kind):
			t.Errorf("%d of %d: ended %v, want kind %d", c.ok, c.total, err, c.kind)
		case note != c.note:
			t.Errorf("%d of %d: said %q, want %q", c.ok, c.total, note, c.note)
		}
	}
	cause := errors.New("worker refused")
	if end := (&Ending{Kind: Failed, Err: cause}); !errors.Is(end, cause) || end.Error() != cause.Error() {
		t.Errorf("a failed ending hides its cause: %v", end)
	}
}
