package cpu_test

import (
	"slices"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device/cpu"
)

// TestSlowCopyPausesEveryHostToDeviceCopy: staging's tests rely on
// Config.SlowCopy to hold a copy half-done while the compute side runs; if
// the pause silently stopped happening they would still pass, proving
// nothing. The pause is a sleep, so the copy's elapsed time is at least
// SlowCopy, and the data arrives whole.
func TestSlowCopyPausesEveryHostToDeviceCopy(t *testing.T) {
	const slow = 20 * time.Millisecond
	d := openWith(t, cpu.Config{SlowCopy: slow})
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	h, err := d.AllocHost(9)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeHost(h)
	want := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	copy(h.Data(), want)
	b, err := d.Alloc(9)
	if err != nil {
		t.Fatal(err)
	}
	start, err := d.NewTimingEvent()
	if err != nil {
		t.Fatal(err)
	}
	end, err := d.NewTimingEvent()
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{s.Record(start), s.CopyHtoD(b, h), s.Record(end), end.Synchronize()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	took, err := d.Elapsed(start, end)
	if err != nil {
		t.Fatal(err)
	}
	if took < slow {
		t.Fatalf("a copy with SlowCopy %v took %v", slow, took)
	}
	got := make([]float32, 9)
	if err := d.Download(got, b); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("slow copy delivered %v, want %v", got, want)
	}
}
