package budget

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/trainer"
)

// fakeClock advances only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func billOf(bytes int64) trainer.Bill { return trainer.Bill{Parameters: bytes} }

// TestBrokerGrantsWaitsAndRefuses: a request is granted when the room
// left covers it with 10% headroom, waits otherwise and is granted when a
// budget is released (oldest first, after the time it waited), and one
// larger than the whole device is refused at once, naming the bill.
func TestBrokerGrantsWaitsAndRefuses(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	b, err := New(Config{DeviceMemory: 1000, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	var grants []string
	var mu sync.Mutex
	ask := func(trial string, bytes int64) (*Ticket, bool, error) {
		t.Helper()
		tk, g, now, err := b.Ask(Ask{Holder: trial, Device: "cpu", Bill: billOf(bytes), Total: 1 << 40, Free: 1 << 40,
			OnGrant: func(g Grant) {
				mu.Lock()
				grants = append(grants, trial+" after "+g.Waited.String())
				mu.Unlock()
			}})
		if now && g.Bytes != bytes {
			t.Errorf("%s granted %d bytes, asked for %d", trial, g.Bytes, bytes)
		}
		return tk, now, err
	}
	first, now, err := ask("first", 600)
	if err != nil || !now {
		t.Fatalf("600 of 1000 bytes on an empty device: granted %v, %v", now, err)
	}
	second, now, err := ask("second", 600)
	if err != nil || now {
		t.Fatalf("600 more: granted %v, %v; want it to wait", now, err)
	}
	// 200 would fit (1000-600 >= 220), but the second waits before it.
	third, now, err := ask("third", 200)
	if err != nil || now {
		t.Fatalf("200 behind a waiting request: granted %v, %v; want it to wait its turn", now, err)
	}
	if w := b.Waiting("cpu"); strings.Join(w, ",") != "second,third" {
		t.Fatalf("waiting %v, want second,third", w)
	}
	if _, _, err := ask("huge", 910); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "parameters") ||
		!strings.Contains(err.Error(), "huge") || !strings.Contains(err.Error(), "device cpu") {
		t.Fatalf("910 bytes (1001 with headroom) of 1000: %v, want a refusal naming the trial, the bill by kind and the device", err)
	}
	clock.advance(3 * time.Second)
	first.Release()
	if strings.Join(grants, ";") != "second after 3s;third after 3s" {
		t.Fatalf("after the first ended: grants %v, want the second, then the third next to it, in that order", grants)
	}
	fourth, now, err := ask("fourth", 200)
	if err != nil || now {
		t.Fatalf("200 next to 800 of 1000: granted %v, %v; want it to wait", now, err)
	}
	clock.advance(time.Second)
	second.Release()
	if strings.Join(grants, ";") != "second after 3s;third after 3s;fourth after 1s" {
		t.Fatalf("grants %v", grants)
	}
	fourth.Release()
	third.Release()
	third.Release() // twice does nothing
	if bk := b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 || bk.Waiting != 0 || bk.Capacity != 1000 {
		t.Fatalf("books after every release: %+v", bk)
	}
}

// TestBrokerLeavingTheQueue: a waiting request released (its trial was
// interrupted) leaves the queue, and the one behind it moves up.
func TestBrokerLeavingTheQueue(t *testing.T) {
	b, _ := New(Config{DeviceMemory: 1000})
	granted := ""
	hold, _, _, _ := b.Ask(Ask{Holder: "hold", Device: "cpu", Bill: billOf(800), Free: 1 << 40})
	gone, _, now, _ := b.Ask(Ask{Holder: "gone", Device: "cpu", Bill: billOf(500), Free: 1 << 40})
	_, _, _, _ = b.Ask(Ask{Holder: "next", Device: "cpu", Bill: billOf(100), Free: 1 << 40, OnGrant: func(Grant) { granted = "next" }})
	if now {
		t.Fatal("500 granted next to 800 of 1000")
	}
	gone.Release()
	if granted != "next" {
		t.Fatalf("the request behind one that left: granted %q, want next (100 fits next to 800)", granted)
	}
	hold.Release()
}

// TestBrokerCapacity: without a configured limit the device's capacity
// is what a worker found free while no budget was granted; a configured
// limit caps it; each device keeps its own books.
func TestBrokerCapacity(t *testing.T) {
	b, _ := New(Config{})
	a, _, _, _ := b.Ask(Ask{Holder: "a", Device: "cuda:0", Bill: billOf(10), Total: 100, Free: 80})
	_, _, _, _ = b.Ask(Ask{Holder: "b", Device: "cuda:0", Bill: billOf(10), Total: 100, Free: 60})
	if bk := b.Books("cuda:0"); bk.Capacity != 80 || bk.Granted != 20 {
		t.Fatalf("books %+v: want the capacity the first worker found (80), not one counting our own budgets", bk)
	}
	if bk := b.Books("cuda:1"); bk != (Books{}) {
		t.Fatalf("another device's books: %+v", bk)
	}
	a.Release()
	c, _ := New(Config{DeviceMemory: 50})
	_, _, _, _ = c.Ask(Ask{Holder: "a", Device: "cpu", Bill: billOf(10), Total: 1000, Free: 900})
	if bk := c.Books("cpu"); bk.Capacity != 50 {
		t.Fatalf("with --device-memory 50: capacity %d", bk.Capacity)
	}
	if _, err := New(Config{DeviceMemory: -1}); !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), "device_memory") {
		t.Fatalf("a negative limit: %v", err)
	}
}

// TestBrokerParksForHigherPriority: a request of higher priority that
// does not fit parks the least recently active trial of lower priority;
// once it has parked, the request is granted, and when it ends the parked
// trial is granted again, to unpark. A request of equal priority parks
// nobody.
func TestBrokerParksForHigherPriority(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	b, _ := New(Config{DeviceMemory: 1000, Now: clock.Now})
	var log []string
	ask := func(trial string, bytes int64, prio float64) *Ticket {
		tk, _, now, err := b.Ask(Ask{Holder: trial, Device: "cpu", Bill: billOf(bytes), Free: 1 << 40, Priority: prio,
			OnGrant: func(g Grant) { log = append(log, fmt.Sprintf("grant %s unpark=%v", trial, g.Unpark)) },
			Park:    func() { log = append(log, "park "+trial) }})
		if err != nil {
			t.Fatal(err)
		}
		if now {
			log = append(log, "granted "+trial)
		}
		return tk
	}
	older := ask("older", 300, 0)
	clock.advance(time.Second)
	newer := ask("newer", 300, 0)
	clock.advance(time.Second)
	newer.Active() // newer showed progress last: older is the least recently active
	same := ask("same", 500, 0)
	if strings.Join(log, ";") != "granted older;granted newer" {
		t.Fatalf("log %v: want no park for a request of equal priority", log)
	}
	same.Release()
	high := ask("high", 500, 1)
	if strings.Join(log, ";") != "granted older;granted newer;park older" {
		t.Fatalf("log %v: want the least recently active lower-priority trial parked", log)
	}
	high.Parked() // not told to park: ignored
	older.Parked()
	if strings.Join(log, ";") != "granted older;granted newer;park older;grant high unpark=false" {
		t.Fatalf("log %v: want the high-priority request granted once the other parked", log)
	}
	if bk := b.Books("cpu"); bk.Granted != 800 || bk.Waiting != 1 {
		t.Fatalf("books %+v: want newer and high holding 800, older waiting to unpark", bk)
	}
	high.Release()
	if log[len(log)-1] != "grant older unpark=true" {
		t.Fatalf("log %v: want the parked trial granted again, to unpark", log)
	}
	older.Release()
	newer.Release()
}
