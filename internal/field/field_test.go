package field

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

func flag(n Name) string {
	if n == "beta1" {
		return "" // a key with no flag keeps its name
	}
	return "--" + strings.ReplaceAll(string(n), "_", "-")
}

func TestErrorNamesTheKey(t *testing.T) {
	err := Errorf("batch_size", "must be in 1..%d, got %d", 65536, 0)
	if got, want := err.Error(), "batch_size: must be in 1..65536, got 0"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got, want := err.Render(flag), "--batch-size: must be in 1..65536, got 0"; got != want {
		t.Fatalf("Render = %q, want %q", got, want)
	}
}

func TestRenderRespellsKeysInTheMessage(t *testing.T) {
	err := Errorf("run_dir", "%s already holds a run; set %s to continue it, or choose another %s", "/r", Name("resume"), Name("run_dir"))
	want := "--run-dir: /r already holds a run; set --resume to continue it, or choose another --run-dir"
	if got := err.Render(flag); got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if got := err.Error(); !strings.Contains(got, "set resume to continue") {
		t.Fatalf("Error() respelled a key: %q", got)
	}
}

func TestRenderFindsErrorsDeepInTheChain(t *testing.T) {
	inner := Errorf("warmup_batches", "%d covers the whole run; lower it or raise %s", 40, Name("epochs"))
	wrapped := fmt.Errorf("invalid configuration: %w", errors.Join(errors.New("first"), Errorf("beta1", "must be < 1: %w", inner)))
	got := Render(wrapped, flag)
	want := "invalid configuration: first\nbeta1: must be < 1: --warmup-batches: 40 covers the whole run; lower it or raise --epochs"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if !Is(wrapped, "beta1") || Is(wrapped, "epochs") {
		t.Fatal("Is does not report the outermost field")
	}
}

func TestUnwrapReachesTheCause(t *testing.T) {
	err := Errorf("data_dir", "cannot read it: %w", fs.ErrNotExist)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the cause is not reachable through errors.Is")
	}
	if got, want := err.Error(), "data_dir: cannot read it: file does not exist"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
