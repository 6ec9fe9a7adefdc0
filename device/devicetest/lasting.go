package devicetest

import (
	"fmt"
	"time"

	"github.com/tolaria-ml/tolaria/device"
)

// maxLastingProducts bounds LastingProducts' count, so that a device whose
// timing events misreport cannot make a test enqueue without end.
const maxLastingProducts = 1 << 16

// LastingProducts enqueues on s products out = a·b of n×n matrices, as many
// as keep the device busy for at least d of its own time, and returns an
// event recorded after the last and how many it enqueued. It first times
// one product with timing events, so the work lasts on any device: a test
// that needs work still running when it looks (a call that must not wait
// for the device) rests on that measurement, not on a guess of how fast
// the device is. A 512³ product is hundreds of milliseconds on the emulated
// driver and tens of microseconds on an H100; either way the work lasts d.
func LastingProducts(dev device.Device, s device.Stream, n int, a, b, out device.Buffer, d time.Duration) (device.Event, int, error) {
	start, err := dev.NewTimingEvent()
	if err != nil {
		return nil, 0, err
	}
	defer start.Destroy()
	end, err := dev.NewTimingEvent()
	if err != nil {
		return nil, 0, err
	}
	defer end.Destroy()
	for _, step := range []func() error{
		func() error { return s.Record(start) },
		func() error { return s.Gemm(false, false, n, n, n, 1, a, b, 0, out) },
		func() error { return s.Record(end) },
		end.Synchronize,
	} {
		if err := step(); err != nil {
			return nil, 0, err
		}
	}
	one, err := dev.Elapsed(start, end)
	if err != nil {
		return nil, 0, err
	}
	count := maxLastingProducts
	if one > 0 {
		count = min(int(d/one)+1, maxLastingProducts)
	}
	for i := range count {
		if err := s.Gemm(false, false, n, n, n, 1, a, b, 0, out); err != nil {
			return nil, i, fmt.Errorf("product %d of %d: %w", i+1, count, err)
		}
	}
	done, err := dev.NewEvent()
	if err != nil {
		return nil, count, err
	}
	if err := s.Record(done); err != nil {
		done.Destroy()
		return nil, count, err
	}
	return done, count, nil
}
