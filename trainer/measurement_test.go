package trainer_test

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/trainer"
)

// samples holds a measurement of every kind, each field set to a value
// other than its zero, so that a field the codec loses shows.
func samples() map[string]trainer.Measurement {
	all := []trainer.Measurement{
		trainer.GraphEnabled{On: true},
		trainer.Captured{Seconds: 0.25, Pooled: true},
		trainer.Replayed{Seconds: 0.001},
		trainer.StageCopied{Seconds: 0.0005},
		trainer.Fallback{Reason: "capture_failed"},
		trainer.ExecUpdated{},
		trainer.PoolReserved{Bytes: 1 << 40},
		trainer.PrefetchDisabled{Disabled: true},
		trainer.Stepped{Seconds: 0.01, Samples: 64},
		trainer.TrainLoss{Loss: 0.5},
		trainer.EvalAccuracy{Accuracy: 0.9},
		trainer.Epoch{Epoch: 3},
		trainer.DeviceMemory{What: "in_use", Bytes: 4096},
		trainer.TrainBatch{Seq: 17, Indices: []int{4, 0, 9}},
		trainer.MemoryBill{Estimate: trainer.Bill{Parameters: 1, Gradients: 2, OptimizerState: 3, Activations: 4, Workspace: 5,
			StagingInputs: 6, PinnedHost: 7}, ActualDevice: 8, ActualPinned: 9, Source: "driver"},
		trainer.Event{Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Kind: trainer.EventCapture,
			Fields: map[string]any{"seconds": 0.5, "pooled": true, "stage": "train"}},
	}
	byName := map[string]trainer.Measurement{}
	for _, m := range all {
		byName[m.Name()] = m
	}
	return byName
}

// TestEveryMeasurementRoundTrips: every listed kind has a unique name and
// comes back from the wire as it went, every field included.
func TestEveryMeasurementRoundTrips(t *testing.T) {
	examples := samples()
	seen := map[string]bool{}
	for _, zero := range trainer.Measurements() {
		name := zero.Name()
		if seen[name] {
			t.Fatalf("two kinds of measurement are named %q", name)
		}
		seen[name] = true
		m, ok := examples[name]
		if !ok {
			t.Errorf("no sample of %T (%q): add one to samples", zero, name)
			continue
		}
		if reflect.TypeOf(m) != reflect.TypeOf(zero) {
			t.Fatalf("the sample named %q is a %T, the kind a %T", name, m, zero)
		}
		gotName, body, err := trainer.EncodeMeasurement(m)
		if err != nil || gotName != name {
			t.Fatalf("encoding %#v: name %q, %v", m, gotName, err)
		}
		back, err := trainer.DecodeMeasurement(gotName, body)
		if err != nil {
			t.Fatalf("decoding %s %s: %v", name, body, err)
		}
		if !reflect.DeepEqual(back, m) {
			t.Errorf("%s: sent %#v, received %#v (wire %s)", name, m, back, body)
		}
	}
	if len(seen) != len(examples) {
		t.Errorf("%d samples for %d listed kinds: a sample's kind is not listed", len(examples), len(seen))
	}
}

// unlisted is a measurement of no listed kind.
type unlisted struct{}

func (unlisted) Name() string { return "unlisted" }

func TestTheCodecRefusesWhatItCannotCarry(t *testing.T) {
	if _, _, err := trainer.EncodeMeasurement(unlisted{}); err == nil {
		t.Error("a measurement of no listed kind was encoded")
	}
	if _, _, err := trainer.EncodeMeasurement(trainer.TrainLoss{Loss: math.NaN()}); err == nil {
		t.Error("a NaN loss was encoded")
	}
	if _, _, err := trainer.EncodeMeasurement(nil); err == nil {
		t.Error("a nil measurement was encoded")
	}
	if _, err := trainer.DecodeMeasurement("no_such_kind", []byte("{}")); err == nil {
		t.Error("an unknown name was decoded")
	}
	if _, err := trainer.DecodeMeasurement("stepped", []byte(`{"samples":"many"}`)); err == nil {
		t.Error("a malformed body was decoded")
	}
}

func TestTeeAndObserverFunc(t *testing.T) {
	var got []string
	rec := func(tag string) trainer.Observer {
		return trainer.ObserverFunc(func(m trainer.Measurement) { got = append(got, tag+" "+m.Name()) })
	}
	o := trainer.Tee(rec("a"), nil, rec("b"))
	o.Observe(trainer.Epoch{Epoch: 1})
	o.Observe(trainer.ExecUpdated{})
	want := []string{"a epoch", "b epoch", "a exec_updated", "b exec_updated"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tee passed on %v, want %v", got, want)
	}
}
