// Package cuda is tolaria's NVIDIA GPU backend: it implements device.Device on
// one GPU through the CUDA driver API (gorgonia.org/cu v0.9.6 plus a small cgo
// file of our own for stream capture and graphs), with kernels written in CUDA C
// under kernels/, compiled to PTX, embedded and loaded once when the device opens.
//
// Everything that links the driver is built only with -tags cuda: gorgonia.org/cu
// calls cuInit in its package init and exits the process when there is no GPU.
// The files without the tag (embedded PTX, configuration, error mapping, launch
// geometry, the memory pool's bookkeeping) build and test everywhere.
//
// Threading. A CUDA context is current per OS thread, and gorgonia.org/cu's Ctx
// reaches it through a channel to one locked goroutine: a hop on every call.
// Here the calling goroutine does the work itself: each method locks its OS
// thread for the duration of the call, makes the device's primary context
// current when the thread does not have it yet (one cuCtxGetCurrent, a thread-
// local read, in the common case), calls the driver and unlocks. Eager launches
// from the trainer's goroutine and copies from the stager's goroutine therefore
// run concurrently, each on its own thread, with no channel in between.
//
// Only the start and the end of a stream capture go to a dedicated goroutine
// locked to its own OS thread: in global capture mode the driver requires
// cuStreamEndCapture on the thread that called cuStreamBeginCapture, and Go does
// not keep a goroutine on one thread between two calls. That costs one channel
// hop per capture, never per launch. See docs/cuda.md.
package cuda
