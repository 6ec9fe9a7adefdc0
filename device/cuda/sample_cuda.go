//go:build cuda

package cuda

import "github.com/tolaria-ml/tolaria/device"

// SampleLast draws the next id from the logits on the device
// (tl_sample_last, one thread, every sum in the CPU device's order).
func (s *Stream) SampleLast(vocab int, temperature float32, logits, rng, id device.Buffer) error {
	const op = "Stream.SampleLast"
	if err := device.CheckSampleLast(vocab, temperature, logits, rng, id); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	if err := fitInt32(vocab); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(vocab).f32(temperature).buf("logits", logits).buf("rng", rng).buf("id", id)
	return s.launch(op, kSampleLast, oneBlock(1), args)
}

// ShiftAppend moves the window left by one and appends id
// (tl_shift_append, one thread).
func (s *Stream) ShiftAppend(n int, id, window device.Buffer) error {
	const op = "Stream.ShiftAppend"
	if err := device.CheckShiftAppend(n, id, window); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	if err := fitInt32(n); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(n).buf("id", id).buf("window", window)
	return s.launch(op, kShiftAppend, oneBlock(1), args)
}

var _ device.SampleKernels = (*Stream)(nil)
