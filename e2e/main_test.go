// Package e2e checks tolaria's binaries as a user runs them: exit codes,
// messages, run directories, signals and resume, and the coordinator's
// freedom from CUDA. The binaries are built once per test run.
package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tolaria-ml/tolaria/trainer"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tolaria-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	build := exec.Command("go", "build", "-tags", "testhooks", "-o", dir+"/", "./cmd/tolaria", "./cmd/tolaria-worker", "./cmd/run_graph_bench")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building binaries: %v\n%s", err, out)
		os.Exit(1)
	}
	code := 0
	func() {
		defer func() {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				code = 1
			}
		}()
		code = m.Run()
		stopSlurm()
	}()
	os.RemoveAll(dir)
	os.Exit(code)
}

func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Dir(wd)
}

// result is one command's outcome.
type result struct {
	code           int
	stdout, stderr string
}

// tolaria runs the coordinator with args and extra environment, in dir.
func tolaria(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "tolaria"), args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running tolaria: %v", err)
	}
	return result{code, out.String(), errb.String()}
}

// cleanEnv drops TOLARIA_* variables of the caller's environment.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOLARIA_") {
			env = append(env, kv)
		}
	}
	return env
}

// quick are flags for a run that takes about a second.
func quick(runDir string, extra ...string) []string {
	return append([]string{"train", "--device", "cpu", "--dataset", "synthetic", "--synthetic-size", "1024",
		"--epochs", "2", "--hidden", "32,16", "--log-every", "1000", "--run-dir", runDir}, extra...)
}

func readSummary(t *testing.T, path string) trainer.Summary {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s trainer.Summary
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

// snapshot hashes every file of a directory and lists its directories,
// to prove nothing was written: no file changed, appeared or went away.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, dir)
		if info.IsDir() {
			m[name+"/"] = "directory"
			return nil
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(raw)
		m[name] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sameFiles fails the test for every difference between two snapshots.
func sameFiles(t *testing.T, before, after map[string]string) {
	t.Helper()
	for name, h := range before {
		switch got, ok := after[name]; {
		case !ok:
			t.Errorf("%s disappeared", name)
		case got != h:
			t.Errorf("%s changed", name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s appeared", name)
		}
	}
}

// readJSON reads the JSON file at path into a T, failing the test when it
// cannot.
func readJSON[T any](t *testing.T, path string) T {
	t.Helper()
	var v T
	raw, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(raw, &v)
	}
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return v
}
