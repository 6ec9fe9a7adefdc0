package sweep

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJournalReplay: the journal brings stale rows up to date; an attempt
// started and never ended is returned as stopped; a line cut short by a
// kill is skipped, and cut off before the next entry is appended.
func TestJournalReplay(t *testing.T) {
	dir := t.TempDir()
	j, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ended := TrialResult{Name: "a", State: TrialFailed, Attempts: 2, Reason: "exit status 7"}
	for _, e := range []journalEntry{
		{Time: t0, Event: journalStart, Trial: "a", Attempt: 1, Device: "cpu"},
		{Time: t0, Event: journalStart, Trial: "b", Attempt: 1, Device: "cpu"},
		{Time: t0, Event: journalStart, Trial: "a", Attempt: 2, Device: "cpu"},
		{Time: t0, Event: journalEnd, Trial: "a", Attempt: 2, Row: &ended},
		{Time: t0.Add(time.Second), Event: journalStart, Trial: "c", Attempt: 3, Device: "cpu"},
		{Time: t0, Event: journalStart, Trial: "gone", Attempt: 1},
	} {
		if err := j.add(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, JournalFile)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"time":"2026-01-01T00:00:00Z","event":"end","trial":"b","row":{"na`)
	_ = f.Close()

	// b and c ran, as a stale results.json does not know.
	rows := []TrialResult{{Name: "a", State: TrialPending}, {Name: "b", State: TrialPending}, {Name: "c", State: TrialInterrupted, Attempts: 2}, {Name: "d", State: TrialPending}}
	entries, err := readJournal(dir)
	if err != nil || len(entries) != 6 {
		t.Fatalf("%d entries, %v; want 6 (the cut line skipped)", len(entries), err)
	}
	st := replayJournal(rows, entries)
	if len(st) != 2 || st[0].row != 1 || st[0].attempt != 1 || st[1].row != 2 || st[1].attempt != 3 || !st[1].started.Equal(t0.Add(time.Second)) {
		t.Errorf("stopped attempts %+v; want b's first and c's third", st)
	}
	if rows[0].State != TrialFailed || rows[0].Attempts != 2 || rows[0].Reason != "exit status 7" {
		t.Errorf("a: %+v", rows[0])
	}
	if rows[1].State != TrialRunning || rows[1].Attempts != 1 || rows[1].Device != "cpu" || rows[3].State != TrialPending {
		t.Errorf("b: %+v, d: %+v", rows[1], rows[3])
	}

	j, err = openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	if err := j.add(journalEntry{Time: t0, Event: journalInterrupted, Trial: "b", Attempt: 1, Reason: "killed"}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n"); len(lines) != 7 || !strings.HasSuffix(string(raw), "\"reason\":\"killed\"}\n") {
		t.Errorf("the journal after a cut line and one more entry:\n%s", raw)
	}
	entries, _ = readJournal(dir)
	rows[1].State = TrialPending
	if st := replayJournal(rows, entries); len(st) != 1 || rows[1].State != TrialInterrupted || rows[1].Reason != "killed" {
		t.Errorf("after b's attempt is recorded interrupted: stopped %+v, b %+v", st, rows[1])
	}
}
