package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
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
		allowed   []string // exceptions to forbidden, with what lies under them
	}{
		{"./cmd/tolaria", []string{"gonum.org/v1/plot"}, "charts are run_graph_bench's, not the coordinator's", nil},
		{"./cmd/tolaria-worker", []string{"gonum.org/v1/plot"}, "charts are run_graph_bench's, not the worker's", nil},
		{"./cmd/tolaria-worker", []string{m + "coordinator"}, "a worker serves jobs (jobserver); it does not start or watch workers", nil},
		{"./worker", []string{m + "bench", m + "job", m + "jobserver", m + "trainer", m + "data", m + "graphs", m + "staging",
			m + "nn", m + "device", m + "telemetry", m + "coordinator"},
			"worker is the protocol and its transports only: payloads cross it as JSON their owners decode", nil},
		{"./coordinator/launch", []string{m + "jobserver", m + "job", m + "trainer", m + "telemetry", m + "data", m + "rl",
			m + "nn", m + "device", m + "graphs", m + "staging", m + "bench"},
			"a launcher places and starts workers: it knows neither the activities nor what a worker serves", nil},
		{"./coordinator/eval", []string{m + "coordinator"}, "an activity imports the launcher, the run directory and the budget broker, never another activity",
			[]string{m + "coordinator/eval", m + "coordinator/launch", m + "coordinator/rundir", m + "coordinator/refusal", m + "coordinator/budget"}},
		{"./coordinator/rl", []string{m + "coordinator"}, "an activity imports the launcher, the run directory and the budget broker, never another activity",
			[]string{m + "coordinator/rl", m + "coordinator/launch", m + "coordinator/rundir", m + "coordinator/refusal", m + "coordinator/budget"}},
		{"./coordinator/train", []string{m + "coordinator"}, "a training run is the layer the activities share: it knows none of them",
			[]string{m + "coordinator/train", m + "coordinator/launch", m + "coordinator/rundir", m + "coordinator/refusal"}},
		{"./coordinator/sweep", []string{m + "coordinator"}, "an activity imports the launcher and the run directory, never another activity; a sweep runs its trials as training runs through its budget broker",
			[]string{m + "coordinator/sweep", m + "coordinator/train", m + "coordinator/launch", m + "coordinator/rundir", m + "coordinator/budget", m + "coordinator/refusal"}},
		{"./coordinator/budget", []string{m + "coordinator", m + "jobserver", m + "telemetry"}, "the budget broker keeps books of holders and bills; it knows no activity, protocol or metrics",
			[]string{m + "coordinator/budget", m + "coordinator/refusal"}},
	}
	for _, tags := range []string{"", "cuda"} {
		for _, r := range rules {
			deps := listDeps(t, r.pkg, tags)
			for _, f := range r.forbidden {
				for _, d := range deps {
					if under(d, f) && !slices.ContainsFunc(r.allowed, func(a string) bool { return under(d, a) }) {
						t.Errorf("%s (tags %q) depends on %s: %s", r.pkg, tags, d, r.why)
						break
					}
				}
			}
		}
	}
}

// under says whether the import path d is path or lies under it.
func under(d, path string) bool { return d == path || strings.HasPrefix(d, path+"/") }

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

// TestArchitectureMap checks the import table of docs/architecture.md
// against the code, so the map a reader trusts is the one that is built.
func TestArchitectureMap(t *testing.T) {
	const m = "github.com/tolaria-ml/tolaria/"
	doc, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The table runs from its header to the first line that is not a row.
	_, table, _ := strings.Cut(string(doc), "| package | imports")
	documented := map[string]string{}
	for _, line := range strings.Split(table, "\n")[1:] {
		cells := strings.Split(line, "|")
		if len(cells) != 4 {
			break
		}
		if !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue // the separator row
		}
		pkg := strings.Trim(strings.TrimSpace(cells[1]), "`")
		documented[pkg] = strings.TrimSpace(cells[2])
	}
	if len(documented) == 0 {
		t.Fatal("docs/architecture.md has no import table")
	}
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = repoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], m)
		if pkg == "e2e" {
			continue // tests only
		}
		var imports []string
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, m) {
				imports = append(imports, strings.TrimPrefix(imp, m))
			}
		}
		sort.Strings(imports)
		want := "none"
		if len(imports) > 0 {
			want = strings.Join(imports, ", ")
		}
		got, ok := documented[pkg]
		switch {
		case !ok:
			t.Errorf("docs/architecture.md: the import table has no row for %s (imports: %s)", pkg, want)
		case got != want:
			t.Errorf("docs/architecture.md: the row for %s says %q; the code imports %q", pkg, got, want)
		}
		delete(documented, pkg)
	}
	for pkg := range documented {
		t.Errorf("docs/architecture.md: the import table lists %s, which is not a package", pkg)
	}
}
