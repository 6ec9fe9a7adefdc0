package main

import (
	"strings"
	"testing"
)

// TestEvalWithSlurmRefusesLocalPlacement: with --launcher slurm the
// scheduler places the shards, so --devices names no GPU of this machine
// and is refused, exit 2; with device auto the shards go to the CPU (as a
// sweep's) and the run directory is the next thing checked.
func TestEvalWithSlurmRefusesLocalPlacement(t *testing.T) {
	dir := t.TempDir()
	const placed = "--devices and --per-device place workers on this machine's GPUs"
	code, _, stderr := runTolaria(t, "eval", "--run-dir", dir, "--launcher", "slurm", "--device", "cpu", "--devices", "0")
	if code != exitUsage || !strings.Contains(stderr, "tolaria: invalid configuration: "+placed) {
		t.Errorf("--device cpu --devices 0 with Slurm: exit %d\n%s", code, stderr)
	}
	code, _, stderr = runTolaria(t, "eval", "--run-dir", dir, "--launcher", "slurm", "--devices", "0")
	if code != exitUsage || strings.Contains(stderr, placed) || !strings.Contains(stderr, "--run-dir") {
		t.Errorf("device auto with Slurm: exit %d, want the run directory refused\n%s", code, stderr)
	}
}
