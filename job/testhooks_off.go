//go:build !testhooks

package job

// TestHooks reports whether this build carries the test switches
// (slow_stage_copy_ms here, the worker's fault switch): only builds with
// -tags testhooks, which tolaria's end-to-end tests make, do.
const TestHooks = false
