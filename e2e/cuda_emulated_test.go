package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// emulatedCUDA builds the emulated CUDA driver (device/cuda/emulator) and a
// CUDA worker (go build -tags cuda) into one directory and returns it. It
// needs g++, a C compiler and the CUDA headers; without them it skips, or
// fails when TOLARIA_REQUIRE_EMULATION is set (as make test sets it).
func emulatedCUDA(t *testing.T) string {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("TOLARIA_REQUIRE_EMULATION") != "" {
		skip = t.Fatalf
	}
	for _, tool := range []string{"g++", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("%s is not installed (scripts/install-deps.sh test installs it); not running tolaria on the emulated CUDA driver", tool)
		}
	}
	if _, err := os.Stat("/usr/include/cuda.h"); err != nil {
		if _, err := os.Stat("/usr/local/cuda/include/cuda.h"); err != nil {
			skip("no CUDA headers (scripts/install-cuda.sh installs them); not running tolaria on the emulated CUDA driver")
		}
	}
	dir := t.TempDir()
	build := exec.Command(filepath.Join(repoRoot(), "scripts", "build-cuda-emulator.sh"), dir)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the emulated CUDA driver: %v\n%s", err, out)
	}
	worker := exec.Command("go", "build", "-tags", "cuda", "-o", filepath.Join(dir, "tolaria-worker"), "./cmd/tolaria-worker")
	worker.Dir = repoRoot()
	if out, err := worker.CombinedOutput(); err != nil {
		t.Fatalf("building the CUDA worker: %v\n%s", err, out)
	}
	return dir
}

// cudaTrain are the flags of a short run on the CUDA worker in emu.
func cudaTrain(emu, runDir string, extra ...string) []string {
	return append([]string{"train", "--device", "cuda", "--worker", filepath.Join(emu, "tolaria-worker"), "--enable-graphs",
		"--dataset", "synthetic", "--synthetic-size", "1024", "--epochs", "1", "--hidden", "64", "--batch-size", "32",
		"--log-every", "1000", "--run-dir", runDir, "--metrics-linger", "0"}, extra...)
}

// tolaria with the real CUDA worker on the emulated driver (built once for
// both parts).
func TestCUDAWorkerOnTheEmulatedDriver(t *testing.T) {
	emu := emulatedCUDA(t)
	t.Run("train", func(t *testing.T) { trainOnEmulatedDriver(t, emu) })
	t.Run("faults", func(t *testing.T) { emulatedDriverFaults(t, emu) })
}

// tolaria train --device cuda --enable-graphs runs the real CUDA worker on
// the emulated driver: the step is captured and replayed, summary.json is
// written, and the coordinator never maps a libcuda while it runs.
func trainOnEmulatedDriver(t *testing.T, emu string) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	cmd := exec.Command(filepath.Join(binDir, "tolaria"), cudaTrain(emu, run, "--synthetic-size", "4096", "--epochs", "2")...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "LD_LIBRARY_PATH="+emu)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	maps := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "maps")
	reads, mapped := 0, false
	var err error
poll:
	for {
		select {
		case err = <-done:
			break poll
		case <-time.After(5 * time.Millisecond):
		}
		m, rerr := os.ReadFile(maps)
		if rerr != nil || mapped {
			continue // exiting, or already reported
		}
		reads++
		if bytes.Contains(m, []byte("libcuda")) {
			mapped = true
			t.Errorf("the coordinator maps a libcuda while it trains on a CUDA worker:\n%s", grepLines(string(m), "libcuda"))
		}
	}
	if err != nil {
		t.Fatalf("tolaria train on the emulated CUDA driver: %v\n%s", err, stderr.String())
	}
	if reads == 0 {
		t.Fatal("never read the coordinator's memory maps while it ran: the check proves nothing")
	}
	s := readSummary(t, filepath.Join(run, "summary.json"))
	if s.Device != "cuda:0" || s.DeviceDescription != "tolaria emulated CUDA device" {
		t.Errorf("summary device %q (%q), want cuda:0 on the emulated driver", s.Device, s.DeviceDescription)
	}
	if !s.GraphEnabled || s.GraphReplays == 0 || s.Captures == 0 || len(s.Fallbacks) != 0 {
		t.Errorf("summary: graphs %v, %d replays, %d captures, fallbacks %v; want the step captured and replayed without fallback",
			s.GraphEnabled, s.GraphReplays, s.Captures, s.Fallbacks)
	}
	t.Logf("%d steps (%d replays), %d reads of the coordinator's maps without libcuda", s.Steps, s.GraphReplays, reads)
}

// Driver errors injected into the emulated driver reach the user as
// tolaria's errors: a setup failure or a job failure (exit status 1) that
// names the cause, or an explicit fallback to eager steps that the summary
// counts.
func emulatedDriverFaults(t *testing.T, emu string) {
	tests := []struct {
		name     string
		env      string
		code     int
		stderr   []string // in tolaria's stderr
		fallback string   // a fallback reason the summary counts (exit 0)
	}{
		{"no device", "CUDAEMU_DEVICES=0", 1, []string{"no usable device", "use --device cpu"}, ""},
		{"cuInit fails", "CUDAEMU_FAULTS=cuInit:1:100", 1, []string{"no NVIDIA GPU or driver", "use --device cpu"}, ""},
		{"out of memory", "CUDAEMU_FAULTS=cuMemAlloc_v2:3:2", 1, []string{"out of memory", "CUDA_ERROR_OUT_OF_MEMORY"}, ""},
		{"capture refused", "CUDAEMU_FAULTS=cuStreamBeginCapture_v2:*:900", 0, nil, "capture_failed"},
		{"instantiate fails", "CUDAEMU_FAULTS=cuGraphInstantiateWithFlags:*:2", 0, nil, "capture_failed"},
		{"illegal address in a replay", "CUDAEMU_FAULTS=cuGraphLaunch:5:700", 1, []string{"step runs eagerly", "CUDA_ERROR_ILLEGAL_ADDRESS"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			run := filepath.Join(dir, "run")
			r := tolaria(t, dir, []string{"LD_LIBRARY_PATH=" + emu, tt.env}, cudaTrain(emu, run)...)
			if r.code != tt.code {
				t.Fatalf("exit status %d, want %d\n%s", r.code, tt.code, r.stderr)
			}
			for _, want := range tt.stderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
				}
			}
			if tt.fallback != "" {
				s := readSummary(t, filepath.Join(run, "summary.json"))
				if s.Fallbacks[tt.fallback] == 0 || s.GraphReplays != 0 {
					t.Errorf("summary: fallbacks %v, %d replays; want %s fallbacks and no replay", s.Fallbacks, s.GraphReplays, tt.fallback)
				}
			}
		})
	}
}
