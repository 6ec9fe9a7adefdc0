//go:build !testhooks

package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/jobserver"
)

// A worker built without -tags testhooks has no fault switch: a set
// FaultEnv installs no hook and is named in a warning.
func TestReleaseBuildIgnoresTheFaultSwitch(t *testing.T) {
	t.Setenv(jobserver.FaultEnv, "step=1,kill")
	var logged bytes.Buffer
	var cfg jobserver.Config
	if err := installFaults(&cfg, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
		t.Fatalf("installFaults: %v", err)
	}
	if cfg.AfterStep != nil || cfg.AfterEvalBatch != nil {
		t.Fatal("a release build armed the fault switch")
	}
	if !strings.Contains(logged.String(), jobserver.FaultEnv) {
		t.Fatalf("no warning naming %s; logged %q", jobserver.FaultEnv, logged.String())
	}
}
