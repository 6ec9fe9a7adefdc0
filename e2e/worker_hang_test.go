package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/worker"
)

// The hanging worker sleeps far longer than tolaria may take to give up
// on it (worker.DefaultHelloTimeout, or --worker-start-timeout), so a bound
// between the two proves tolaria did not wait for the sleep.
const (
	workerSleep = "300"
	failFast    = 90 * time.Second
)

// hangingWorker writes a worker script that never answers: like a wrapper
// script that does not exec, it waits for a child that holds its pipes.
// It returns the script and the file holding the child's pid.
func hangingWorker(t *testing.T, dir string) (path, pidFile string) {
	t.Helper()
	path, pidFile = filepath.Join(dir, "hanging-worker"), filepath.Join(dir, "hanging-worker.pid")
	body := fmt.Sprintf("#!/bin/sh\necho 'initialising the driver' >&2\nsleep %s &\necho $! > %s\nwait $!\n", workerSleep, pidFile)
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, pidFile
}

// requireChildGone fails if the script's child outlived tolaria.
func requireChildGone(t *testing.T, pidFile string) {
	t.Helper()
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the hanging worker did not start: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("%s: %q", pidFile, raw)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if err != nil || (i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')) {
			return // gone, or a zombie waiting for its reaper
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the worker's child %d was left running after tolaria exited", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHangingWorkerFailsFast(t *testing.T) {
	dir := t.TempDir()
	hanging, pidFile := hangingWorker(t, dir)

	start := time.Now()
	r := tolaria(t, dir, nil, append(quick(filepath.Join(dir, "cuda")), "--device", "cuda", "--worker", hanging)...)
	took := time.Since(start)
	if r.code != 1 {
		t.Fatalf("cuda with a hanging worker: exit %d, want 1:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"tolaria: the worker " + hanging + " started but did not answer within " + worker.DefaultHelloTimeout.String(), "initialising the driver", "--device cpu"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the message does not say %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "exited at start-up") {
		t.Errorf("a worker that did not answer is said to have exited:\n%s", r.stderr)
	}
	if took >= failFast {
		t.Errorf("tolaria took %s to give up on a hanging worker", took)
	}
	requireChildGone(t, pidFile)

	// --device auto falls back to the CPU, with the reason in the log.
	os.Remove(pidFile)
	start = time.Now()
	// The start-up limit comes from the environment (or
	// --worker-start-timeout) here.
	r = tolaria(t, dir, []string{"TOLARIA_WORKER_START_TIMEOUT=3s"}, append(quick(filepath.Join(dir, "auto")), "--device", "auto", "--worker", hanging)...)
	took = time.Since(start)
	if r.code != 0 || !strings.Contains(r.stderr, "using cpu") || !strings.Contains(r.stderr, "did not answer within 3s") {
		t.Fatalf("auto with a hanging worker: exit %d:\n%s", r.code, r.stderr)
	}
	if took >= failFast {
		t.Errorf("tolaria --device auto took %s to give up on a hanging worker", took)
	}
	requireChildGone(t, pidFile)
}

// TestWorkerFromTheEnvironment: TOLARIA_WORKER names the worker as
// --worker does, and the flag wins over it.
func TestWorkerFromTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	dying := filepath.Join(dir, "dying-worker")
	if err := os.WriteFile(dying, []byte("#!/bin/sh\necho 'cuInit failed: no CUDA-capable device is detected' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"TOLARIA_WORKER=" + dying}
	r := tolaria(t, dir, env, append(quick(filepath.Join(dir, "env")), "--device", "cuda")...)
	if r.code != 1 || !strings.Contains(r.stderr, dying) || !strings.Contains(r.stderr, "cuInit failed") || !strings.Contains(r.stderr, "no NVIDIA GPU or driver") {
		t.Fatalf("TOLARIA_WORKER was not used: exit %d:\n%s", r.code, r.stderr)
	}

	missing := filepath.Join(dir, "missing-worker")
	r = tolaria(t, dir, []string{"TOLARIA_WORKER=" + missing}, append(quick(filepath.Join(dir, "missing")), "--device", "cuda")...)
	if r.code != 1 {
		t.Fatalf("missing TOLARIA_WORKER: exit %d:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{missing, "does not exist", "TOLARIA_WORKER", "--device cpu"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("missing TOLARIA_WORKER: the message does not say %q:\n%s", want, r.stderr)
		}
	}

	// The flag wins over the environment: the built worker has no CUDA
	// and says so.
	r = tolaria(t, dir, []string{"TOLARIA_WORKER=" + missing},
		append(quick(filepath.Join(dir, "flag")), "--device", "cuda", "--worker", filepath.Join(binDir, "tolaria-worker"))...)
	if r.code != 1 || !strings.Contains(r.stderr, "without CUDA") {
		t.Fatalf("--worker over TOLARIA_WORKER: exit %d:\n%s", r.code, r.stderr)
	}
}

// TestNoWorkerNextToTolaria: without a worker beside it and none named,
// tolaria says where it looked and the three ways out.
func TestNoWorkerNextToTolaria(t *testing.T) {
	dir := t.TempDir()
	alone := filepath.Join(dir, "bin", "tolaria")
	if err := os.MkdirAll(filepath.Dir(alone), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(binDir, "tolaria"), alone)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, alone, append(quick(filepath.Join(dir, "run")), "--device", "cuda")...)
	cmd.Dir, cmd.Env = dir, cleanEnv()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("no worker: %v, want exit 1:\n%s", err, errb.String())
	}
	for _, want := range []string{"no tolaria-worker next to", "--worker", "TOLARIA_WORKER", "--device cpu"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("the message does not say %q:\n%s", want, errb.String())
		}
	}

	// --isolate asked for a worker process: without one the job is refused,
	// on the CPU and with --device auto alike, never run in process.
	for _, dev := range []string{"cpu", "auto"} {
		cmd := exec.CommandContext(ctx, alone, append(quick(filepath.Join(dir, "isolated-"+dev)), "--device", dev, "--isolate")...)
		cmd.Dir, cmd.Env = dir, cleanEnv()
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 1 || !strings.Contains(errb.String(), "drop --isolate") {
			t.Errorf("--device %s --isolate without a worker: %v, want exit 1 saying what to do:\n%s", dev, err, errb.String())
		}
		if _, err := os.Stat(filepath.Join(dir, "isolated-"+dev)); err == nil {
			t.Errorf("--device %s --isolate without a worker created its run directory", dev)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
