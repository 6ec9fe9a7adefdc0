package main

import (
	"strings"
	"testing"
)

// TestEvalWithSlurmRefusesLocalPlacement: with --launcher slurm the
// scheduler places the shards, so --devices and --per-device, which name
// this machine's GPUs, are refused, exit 2, whatever --device says.
func TestEvalWithSlurmRefusesLocalPlacement(t *testing.T) {
	dir := t.TempDir()
	const placed = "--devices and --per-device place workers on this machine's GPUs"
	for _, args := range [][]string{{"--device", "cpu", "--devices", "0"}, {"--devices", "0"}, {"--per-device", "2"}} {
		code, _, stderr := runTolaria(t, append([]string{"eval", "--run-dir", dir, "--launcher", "slurm"}, args...)...)
		if code != exitUsage || !strings.Contains(stderr, "tolaria: invalid configuration: "+placed) {
			t.Errorf("%v with Slurm: exit %d\n%s", args, code, stderr)
		}
	}
	code, _, stderr := runTolaria(t, "eval", "--run-dir", dir, "--launcher", "slurm")
	if code != exitUsage || strings.Contains(stderr, placed) || !strings.Contains(stderr, "--run-dir") {
		t.Errorf("Slurm without placement flags: exit %d, want the run directory refused\n%s", code, stderr)
	}
}
