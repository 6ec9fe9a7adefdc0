// Package device is the contract every tolaria backend implements: device
// memory, pinned host memory, streams, events, asynchronous copies, the kernels
// a training step needs, and stream capture into graphs that are instantiated
// and replayed with one launch.
//
// Two backends implement it: device/cpu, a pure-Go reference that follows
// CUDA's ordering and capture rules, and device/cuda, built with -tags cuda.
// The conformance suite in device/devicetest checks both the same way.
//
// Semantics follow the CUDA driver API. Calls that enqueue work on a stream
// return before the work runs; errors detected while enqueueing are returned
// at once. While any stream captures in global mode, capture-unsafe calls
// (allocation, freeing, synchronisation, synchronous copies, event queries,
// work on the legacy default stream) fail with ErrCaptureViolation from any
// goroutine and invalidate the capture, which EndCapture then reports with
// ErrCaptureInvalidated. Both errors name the call, the capturing stream and
// the offending goroutine's trimmed stack (Culprit), so the goroutine that
// broke the capture is found from the error alone.
package device
