package trainer

import (
	"errors"
	"time"

	"github.com/tolaria-ml/tolaria/device"
)

// eventTimer measures device time between two points on a stream with a
// ring of event pairs, so reading a measurement never waits for work that
// was just issued: a pair is read when it comes round again.
type eventTimer struct {
	dev    device.Device
	starts []device.Event
	ends   []device.Event
	used   []bool
	next   int
	report func(seconds float64)
}

func newEventTimer(dev device.Device, n int, report func(float64)) (*eventTimer, error) {
	t := &eventTimer{dev: dev, used: make([]bool, n), report: report}
	for range n {
		a, err := dev.NewTimingEvent()
		if err != nil {
			return nil, err
		}
		b, err := dev.NewTimingEvent()
		if err != nil {
			return nil, err
		}
		t.starts, t.ends = append(t.starts, a), append(t.ends, b)
	}
	return t, nil
}

// begin collects the measurement of the pair it is about to reuse, then
// records the pair's start.
func (t *eventTimer) begin(s device.Stream) (int, error) {
	i := t.next
	t.next = (t.next + 1) % len(t.starts)
	if t.used[i] {
		if err := t.collect(i); err != nil {
			return i, err
		}
	}
	return i, s.Record(t.starts[i])
}

func (t *eventTimer) end(s device.Stream, i int) error {
	t.used[i] = true
	return s.Record(t.ends[i])
}

func (t *eventTimer) collect(i int) error {
	if err := t.ends[i].Synchronize(); err != nil {
		return err
	}
	d, err := t.dev.Elapsed(t.starts[i], t.ends[i])
	if err != nil {
		return err
	}
	t.used[i] = false
	t.report(d.Seconds())
	return nil
}

// flush collects every outstanding measurement.
func (t *eventTimer) flush() error {
	for i, u := range t.used {
		if u {
			if err := t.collect(i); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *eventTimer) destroy() error {
	var errs []error
	for i := range t.starts {
		errs = append(errs, t.starts[i].Destroy(), t.ends[i].Destroy())
	}
	return errors.Join(errs...)
}

func since(t time.Time) float64 { return time.Since(t).Seconds() }
