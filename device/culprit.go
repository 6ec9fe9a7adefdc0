package device

import (
	"fmt"
	"runtime"
	"strings"
)

// culpritFrames bounds the frames Culprit reports: enough to reach the
// goroutine's own function (a data loader, a metrics hook) through a few
// helpers, short enough to read in one error line.
const culpritFrames = 6

// devicePrefix is the import path of this package; frames under it (the
// backends, the conformance suite's helpers excepted) are the device's own
// bookkeeping, not the caller that broke a capture.
const devicePrefix = "github.com/tolaria-ml/tolaria/device"

// Culprit describes the goroutine calling it, for capture-violation
// errors: "goroutine N: pkg.fn (file.go:12) <- pkg.caller (file.go:40)".
// Runtime frames and the device backends' own frames are left out, so the
// first frame named is the code that made the capture-unsafe call, such as
// a loader goroutine staging a batch. skip is unused frames above the
// backend (0 for a backend calling it directly).
//
// It costs a stack walk, so backends call it only on a violation.
func Culprit(skip int) string {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(skip+2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var parts []string
	for {
		f, more := frames.Next()
		if keepFrame(f.Function, f.File) {
			parts = append(parts, fmt.Sprintf("%s (%s:%d)", shortFunc(f.Function), shortFile(f.File), f.Line))
			if len(parts) == culpritFrames {
				break
			}
		}
		if !more {
			break
		}
	}
	id := goroutineID()
	if len(parts) == 0 {
		return "goroutine " + id
	}
	return "goroutine " + id + ": " + strings.Join(parts, " <- ")
}

// keepFrame reports whether a frame is worth naming: not the runtime, not
// the testing harness's runner, and not the device packages themselves
// (the conformance suite, devicetest, and tests are caller code and kept).
func keepFrame(fn, file string) bool {
	switch {
	case fn == "":
		return false
	case strings.HasPrefix(fn, "runtime."), strings.HasPrefix(fn, "testing."):
		return false
	case strings.HasPrefix(fn, devicePrefix+"/devicetest"), strings.HasSuffix(file, "_test.go"):
		return true
	case strings.HasPrefix(fn, devicePrefix+".") || strings.HasPrefix(fn, devicePrefix+"/"):
		return false
	}
	return true
}

// shortFunc drops the module path: "trainer.(*Loader).stage".
func shortFunc(fn string) string {
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		return fn[i+1:]
	}
	return fn
}

// shortFile keeps the file's directory and name: "trainer/loader.go".
func shortFile(file string) string {
	i := strings.LastIndex(file, "/")
	if i < 0 {
		return file
	}
	if j := strings.LastIndex(file[:i], "/"); j >= 0 {
		return file[j+1:]
	}
	return file
}

// goroutineID reads the calling goroutine's number from the first line of
// its stack trace ("goroutine 42 [running]:"), which is how a person
// matches the error to a goroutine dump.
func goroutineID() string {
	var buf [64]byte
	s := string(buf[:runtime.Stack(buf[:], false)])
	s = strings.TrimPrefix(s, "goroutine ")
	if i := strings.IndexByte(s, ' '); i > 0 {
		return s[:i]
	}
	return "?"
}
