package device

import (
	"fmt"
	"math"
)

// SampleKernels draw the next token of a language model on the device, so
// that a decode step (forward pass, draw, window update) runs as one
// captured graph with nothing read back but the id printed. It is a kernel
// set a Stream may offer besides its required ones: the CPU and CUDA
// devices' streams do; a device without it cannot sample (callers
// type-assert). Like the other kernel sets, the methods validate their
// sizes (ErrMisuse), are deterministic, allocate nothing and may be
// captured. Both devices sum in the same order, so they draw the same id
// unless a uniform falls within an exp's rounding of a CDF boundary.
type SampleKernels interface {
	// SampleLast draws one id from the vocab logits and writes it to id
	// (one float32 integer). With temperature > 0 the weights are e_v =
	// exp((logits[v] - max)/temperature), each in double, max the largest
	// logit; the draw is u = w0·2^-32 in double, w0 the first word of the
	// Philox 4x32-10 block that rng's key and offset name (as Dropout's
	// block 0); the id is the first v whose running sum of e (in
	// increasing v, in double) exceeds u·Σe, or the last v with e_v > 0
	// should rounding leave none. With temperature 0 the id is the first
	// largest logit and u is not used. SampleLast does not advance rng:
	// the caller's step does (AdvanceRNG by 1).
	SampleLast(vocab int, temperature float32, logits, rng, id Buffer) error
	// ShiftAppend moves window (n ids) left by one position and writes
	// id's one value into its last: window[i] = window[i+1] for i < n-1,
	// then window[n-1] = id[0].
	ShiftAppend(n int, id, window Buffer) error
}

// CheckSampleLast validates SampleLast's arguments: logits vocab values,
// rng RNGLen, id one value apart from logits, temperature finite and >= 0.
func CheckSampleLast(vocab int, temperature float32, logits, rng, id Buffer) error {
	if !(temperature >= 0) || math.IsInf(float64(temperature), 1) {
		return fmt.Errorf("sampling wants a finite temperature >= 0, got %v", temperature)
	}
	if err := first(positive(vocab), need("logits", logits, vocab), need("rng", rng, RNGLen), need("id", id, 1)); err != nil {
		return err
	}
	if overlaps(logits.Slice(0, vocab), id.Slice(0, 1)) {
		return fmt.Errorf("sampling's logits and id must not overlap")
	}
	return nil
}

// CheckShiftAppend validates ShiftAppend's arguments: window n values,
// id one value outside the window.
func CheckShiftAppend(n int, id, window Buffer) error {
	if err := first(positive(n), need("id", id, 1), need("window", window, n)); err != nil {
		return err
	}
	if overlaps(id.Slice(0, 1), window.Slice(0, n)) {
		return fmt.Errorf("the appended id must lie outside the window")
	}
	return nil
}
