package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLayering keeps the house's floors apart: what each binary or
// package must not depend on, directly or through another package, in
// both builds.
func TestLayering(t *testing.T) {
	const m = "github.com/tolaria-ml/tolaria/"
	rules := []struct {
		pkg       string
		forbidden []string // import paths; a path also forbids what lies under it
		why       string
	}{
		{"./cmd/tolaria", []string{"gonum.org/v1/plot"}, "charts are run_graph_bench's, not the coordinator's"},
		{"./cmd/tolaria-worker", []string{"gonum.org/v1/plot"}, "charts are run_graph_bench's, not the worker's"},
		{"./cmd/tolaria-worker", []string{m + "coordinator"}, "a worker serves jobs (jobserver); it does not start or watch workers"},
		{"./worker", []string{m + "bench", m + "job", m + "jobserver", m + "trainer", m + "data", m + "graphs", m + "staging",
			m + "nn", m + "device", m + "telemetry", m + "coordinator"},
			"worker is the protocol and its transports only: payloads cross it as JSON their owners decode"},
	}
	for _, tags := range []string{"", "cuda"} {
		for _, r := range rules {
			deps := listDeps(t, r.pkg, tags)
			for _, f := range r.forbidden {
				for _, d := range deps {
					if d == f || strings.HasPrefix(d, f+"/") {
						t.Errorf("%s (tags %q) depends on %s: %s", r.pkg, tags, d, r.why)
						break
					}
				}
			}
		}
	}
}

// listDeps is `go list -deps` of pkg built with tags.
func listDeps(t *testing.T, pkg, tags string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", tags, "-deps", pkg)
	cmd.Dir = repoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -tags %q -deps %s: %v", tags, pkg, err)
	}
	return strings.Fields(string(out))
}
