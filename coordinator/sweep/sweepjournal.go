package sweep

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/internal/atomicfile"
)

// JournalFile is a sweep's journal: each attempt's start and each trial's
// end, one JSON object a line, appended as they happen. results.json is
// rewritten at a pace and may lag; the journal does not, so a sweep
// killed outright (SIGKILL, a lost machine) is read truly when resumed.
const JournalFile = "journal.jsonl"

// The events of a journal.
const (
	journalStart = "start" // an attempt at a trial began
	journalEnd   = "end"   // a trial's run ended: its row as results.json has it
	// journalInterrupted is written by a resumed sweep for an attempt
	// that started and never ended: the sweep was stopped during it.
	journalInterrupted = "interrupted"
)

// journalEntry is one line of a sweep's journal.
type journalEntry struct {
	Time    time.Time `json:"time"`
	Event   string    `json:"event"`
	Trial   string    `json:"trial"`
	Attempt int       `json:"attempt"`
	Device  string    `json:"device,omitempty"`
	// Row is the trial's row at its end; Reason an interruption's.
	Row    *TrialResult `json:"row,omitempty"`
	Reason string       `json:"reason,omitempty"`
}

// journal appends to a sweep's journal; its entries are written whole,
// one write each, and synced, by one process (the sweep directory's lock
// holder).
type journal struct {
	mu sync.Mutex
	f  *os.File
}

// openJournal opens dir's journal for appending. A line that a kill cut
// short is cut off first, so the next entry starts a line of its own.
func openJournal(dir string) (*journal, error) {
	path := filepath.Join(dir, JournalFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(f)
	if err == nil && len(raw) > 0 && raw[len(raw)-1] != '\n' {
		err = f.Truncate(int64(bytes.LastIndexByte(raw, '\n') + 1))
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekEnd)
	}
	if err == nil {
		err = atomicfile.SyncDir(dir) // the file's entry, when it is new
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &journal{f: f}, nil
}

// add appends e.
func (j *journal) add(e journalEntry) error {
	raw, err := json.Marshal(e)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return errors.New("the sweep's journal is closed")
	}
	if _, err := j.f.Write(append(raw, '\n')); err != nil {
		return err
	}
	// Synced as results.json and checkpoints are, so a lost machine, not
	// only a killed process, leaves the entry: two syncs a trial.
	return j.f.Sync()
}

func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// readJournal reads dir's journal; none is no entries (a sweep from
// before journals). A line that does not parse (one a kill cut short) is
// skipped.
func readJournal(dir string) ([]journalEntry, error) {
	raw, err := os.ReadFile(filepath.Join(dir, JournalFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []journalEntry
	for line := range bytes.Lines(raw) {
		var e journalEntry
		if json.Unmarshal(line, &e) == nil && e.Trial != "" {
			out = append(out, e)
		}
	}
	return out, nil
}

// stopped is an attempt that started and never ended.
type stopped struct {
	row     int
	attempt int
	started time.Time
}

// replayJournal brings rows (read from results.json, which may lag) up to
// date with the journal's entries, and returns the attempts that started
// and never ended, in the journal's order. Entries of trials rows lacks
// are ignored: LoadDir has matched the rows with the sweep file.
func replayJournal(rows []TrialResult, entries []journalEntry) []stopped {
	index := make(map[string]int, len(rows))
	for i, r := range rows {
		index[r.Name] = i
	}
	open := map[int]journalEntry{}
	var order []int
	for _, e := range entries {
		i, ok := index[e.Trial]
		if !ok {
			continue
		}
		switch e.Event {
		case journalStart:
			rows[i].State, rows[i].Attempts = TrialRunning, max(rows[i].Attempts, e.Attempt)
			if e.Device != "" {
				rows[i].Device = e.Device
			}
			if _, was := open[i]; !was {
				order = append(order, i)
			}
			open[i] = e
		case journalEnd:
			if e.Row != nil && e.Row.Name == rows[i].Name {
				rows[i] = *e.Row
			}
			delete(open, i)
		case journalInterrupted:
			rows[i].State, rows[i].Reason = TrialInterrupted, e.Reason
			rows[i].Attempts = max(rows[i].Attempts, e.Attempt)
			delete(open, i)
		}
	}
	var out []stopped
	for _, i := range order {
		if e, ok := open[i]; ok {
			out = append(out, stopped{row: i, attempt: e.Attempt, started: e.Time})
		}
	}
	return out
}

// lastWritten is when anything in dir was last written: for an attempt
// that never ended, about when its worker stopped. Zero if dir has no
// files.
func lastWritten(dir string) time.Time {
	var last time.Time
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && info.ModTime().After(last) {
			last = info.ModTime()
		}
	}
	return last
}
