package telemetry

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/trainer"
)

func decodeLines(t *testing.T, data []byte) []trainer.Event {
	t.Helper()
	var events []trainer.Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var e trainer.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		events = append(events, e)
	}
	return events
}

func TestEventLogConcurrentWrites(t *testing.T) {
	var buf bytes.Buffer
	log := NewEventLog(&buf)
	const writers, each = 8, 100
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				e := trainer.Event{Kind: trainer.EventFallback, Fields: map[string]any{"reason": graphs.ReasonRaggedBatch, "stage": "replay", "writer": w, "i": i}}
				if err := log.Write(e); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	events := decodeLines(t, buf.Bytes())
	if len(events) != writers*each {
		t.Fatalf("%d lines, want %d", len(events), writers*each)
	}
	for _, e := range events {
		if e.Time.IsZero() || e.Kind != trainer.EventFallback || e.Fields["reason"] != graphs.ReasonRaggedBatch {
			t.Fatalf("bad event %+v", e)
		}
	}
}

func TestEventLogKeepsEventsWithBadFields(t *testing.T) {
	var buf bytes.Buffer
	log := NewEventLog(&buf)
	at := time.Date(2025, 10, 3, 12, 0, 0, 0, time.UTC)
	if err := log.Write(trainer.Event{Time: at, Kind: trainer.EventError, Fields: map[string]any{"loss": math.NaN()}}); err != nil {
		t.Fatal(err)
	}
	events := decodeLines(t, buf.Bytes())
	if len(events) != 1 || !events[0].Time.Equal(at) || events[0].Kind != trainer.EventError {
		t.Fatalf("events = %+v", events)
	}
	if _, ok := events[0].Fields["encode_error"]; !ok {
		t.Errorf("fields = %v, want an encode_error", events[0].Fields)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestEventLogKeepsFirstError(t *testing.T) {
	log := NewEventLog(failingWriter{})
	log.Observer().Observe(trainer.Event{Kind: trainer.EventStart})
	if err := log.Err(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Err() = %v, want disk full", err)
	}
	if err := log.Close(); err == nil {
		t.Error("Close() = nil after a failed write")
	}
}

func TestCreateEventLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), EventLogFile)
	for range 2 { // the second open appends
		log, err := CreateEventLog(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := log.Write(trainer.Event{Kind: trainer.EventResume}); err != nil {
			t.Fatal(err)
		}
		if err := log.Close(); err != nil {
			t.Fatal(err)
		}
		if err := log.Write(trainer.Event{Kind: trainer.EventDone}); err == nil {
			t.Error("Write after Close succeeded")
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(decodeLines(t, data)); n != 2 {
		t.Errorf("%d events in %s, want 2", n, path)
	}
	if _, err := CreateEventLog(filepath.Join(t.TempDir(), "missing", EventLogFile)); err == nil {
		t.Error("CreateEventLog in a missing directory succeeded")
	}
}

func TestTeeFeedsMetricsAndEvents(t *testing.T) {
	var buf bytes.Buffer
	m := NewMetrics("test")
	obs := trainer.Tee(m.Observer("cpu", "0"), nil, NewEventLog(&buf).Observer())
	exercise(obs) // ends with a capture and a checkpoint event
	fams := gather(t, m)
	if v := value(t, fams, MetricReplaysTotal, map[string]string{LabelWorker: "0"}); v != 1 {
		t.Errorf("replays through Tee = %v, want 1", v)
	}
	if v := value(t, fams, MetricCheckpointsTotal, map[string]string{LabelWorker: "0"}); v != 1 {
		t.Errorf("checkpoints through Tee = %v, want 1", v)
	}
	events := decodeLines(t, buf.Bytes())
	if len(events) != 2 || events[0].Kind != trainer.EventCapture || events[1].Kind != trainer.EventCheckpoint {
		t.Errorf("events through Tee = %+v", events)
	}
}

// TestReadEventsReadsWhatEventLogWrites: ReadEvents gives back every event
// EventLog wrote, ignores a torn last line and names a line that is not
// an event.
func TestReadEventsReadsWhatEventLogWrites(t *testing.T) {
	var buf bytes.Buffer
	l := NewEventLog(&buf)
	want := []trainer.Event{
		{Kind: trainer.EventCapture, Fields: map[string]any{"seconds": 0.5, "pooled": false}},
		{Kind: "episode", Fields: map[string]any{"return": 21.0, "agent": 1.0}},
		{Kind: trainer.EventDone},
	}
	for _, e := range want {
		if err := l.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	var got []trainer.Event
	read := func(data string) error {
		got = nil
		return ReadEvents(strings.NewReader(data), func(e trainer.Event) { got = append(got, e) })
	}
	if err := read(buf.String() + `{"time":"2026-01-01T00:00:00Z","ki`); err != nil {
		t.Fatalf("ReadEvents: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d events, want %d: %+v", len(got), len(want), got)
	}
	for i, e := range got {
		if e.Kind != want[i].Kind || e.Time.IsZero() || len(e.Fields) != len(want[i].Fields) {
			t.Errorf("event %d = %+v, want %+v", i, e, want[i])
		}
		for k, v := range want[i].Fields {
			if e.Fields[k] != v {
				t.Errorf("event %d field %s = %v, want %v", i, k, e.Fields[k], v)
			}
		}
	}
	for _, bad := range []string{
		`{"time":"2026-01-01T00:00:00Z","event":"episode","return":9}`, // RL's earlier lines
		`{"time":"2026-01-01T00:00:00Z","fields":{}}`,
		`{"kind":"done"}`,
		`not json`,
	} {
		err := read(buf.String() + bad + "\n")
		if !errors.Is(err, ErrBadEvent) || !strings.Contains(err.Error(), "line 4") {
			t.Errorf("%s: err = %v, want ErrBadEvent on line 4", bad, err)
		}
	}
}
