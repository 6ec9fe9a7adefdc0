//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// contextChildEnv, naming a directory, makes TestContextMemoryChild open
// GPU 0, measure its context, write "BYTES\tSOURCE" to DIR/PID, then hold
// the context until DIR holds as many reports as contextChildrenEnv says.
const (
	contextChildEnv    = "TOLARIA_TEST_CONTEXT_CHILD"
	contextChildrenEnv = "TOLARIA_TEST_CONTEXT_CHILDREN"
)

// TestContextMemoryChild is the child of TestContextMemoryConcurrentOpens;
// run otherwise it does nothing.
func TestContextMemoryChild(t *testing.T) {
	dir := os.Getenv(contextChildEnv)
	if dir == "" {
		return
	}
	want, _ := strconv.Atoi(os.Getenv(contextChildrenEnv))
	d := openTest(t)
	n, source, err := d.ContextMemory()
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%d", os.Getpid()))
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d\t%s", n, source)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, strconv.Itoa(os.Getpid()))); err != nil {
		t.Fatal(err)
	}
	// Hold the context until every sibling has measured its own.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if reports, _ := filepath.Glob(filepath.Join(dir, "[0-9]*")); len(reports) >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other children did not report within 2 minutes")
		}
	}
}

type contextReport struct {
	bytes  int64
	source string
}

// openConcurrently starts n children of this test binary at once, each
// opening GPU 0 with env added, and returns their reports.
func openConcurrently(t *testing.T, n int, env ...string) []contextReport {
	t.Helper()
	dir := t.TempDir()
	cmds := make([]*exec.Cmd, n)
	outs := make([]strings.Builder, n)
	for i := range cmds {
		c := exec.Command(os.Args[0], "-test.run=^TestContextMemoryChild$", "-test.count=1")
		c.Env = append(os.Environ(), append([]string{contextChildEnv + "=" + dir, contextChildrenEnv + "=" + strconv.Itoa(n),
			"XDG_RUNTIME_DIR=" + dir}, env...)...)
		c.Stdout, c.Stderr = &outs[i], &outs[i]
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = c
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i].String())
		}
	}
	reports, err := filepath.Glob(filepath.Join(dir, "[0-9]*"))
	if err != nil || len(reports) != n {
		t.Fatalf("%d reports (%v), want %d", len(reports), err, n)
	}
	var out []contextReport
	for _, p := range reports {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		num, source, _ := strings.Cut(string(b), "\t")
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			t.Fatalf("report %s: %q", p, b)
		}
		out = append(out, contextReport{v, source})
	}
	return out
}

// TestContextMemoryConcurrentOpens: three processes that open one GPU at
// once each measure their own context, not the others' (on an H100, three
// sweep trials opened together billed 0.75, 1.5 and 1.5 GiB for contexts
// of about 0.5 GiB each). On the emulated driver, whose books are exact,
// each bills exactly CUDAEMU_CONTEXT_BYTES through the NVML-shaped query;
// and with NVML unable to see the processes (CUDAEMU_NVML=hidden) the
// fallback's readings, taken under the per-GPU lock while every earlier
// context is still held, are exactly one, two and three contexts: the
// lock serialises the readings, and the figure errs high, never low. On a
// GPU the three figures must agree within 10%.
func TestContextMemoryConcurrentOpens(t *testing.T) {
	const children = 3
	d := openTest(t)
	emulated := d.Description() == "tolaria emulated CUDA device"
	if !emulated {
		got := openConcurrently(t, children)
		lo, hi := got[0].bytes, got[0].bytes
		for _, r := range got {
			lo, hi = min(lo, r.bytes), max(hi, r.bytes)
		}
		if lo <= 0 || float64(hi) > 1.1*float64(lo) {
			t.Fatalf("three processes opening the GPU at once measured %v: want each its own context, all within 10%%", got)
		}
		t.Logf("three concurrent opens measured %v", got)
		return
	}
	// This process too, whatever its context's bill (0 by default without
	// CUDAEMU_STATE), is seen by NVML, and what its pool allocates is not
	// counted as context.
	before, source, err := d.ContextMemory()
	if err != nil || source != ContextFromNVML {
		t.Fatalf("ContextMemory of this process: %d by %q, %v; want a figure by %q", before, source, err, ContextFromNVML)
	}
	b := mustUpload(t, d, make([]float32, 1<<20))
	after, _, err := d.ContextMemory()
	if err != nil || after != before {
		t.Errorf("ContextMemory with 4 MiB allocated: %d, %v; want %d as before: the pool's memory is not the context", after, err, before)
	}
	if err := d.Free(b); err != nil {
		t.Fatal(err)
	}
	const ctxBytes = 96 << 20
	state := "CUDAEMU_STATE=" + t.TempDir()
	ctx := "CUDAEMU_CONTEXT_BYTES=" + strconv.Itoa(ctxBytes)
	for _, r := range openConcurrently(t, children, state, ctx) {
		if r.bytes != ctxBytes || r.source != ContextFromNVML {
			t.Errorf("a process that opened the emulated GPU with two others measured %d bytes by %q; want exactly %d (CUDAEMU_CONTEXT_BYTES) by %q",
				r.bytes, r.source, ctxBytes, ContextFromNVML)
		}
	}
	got := openConcurrently(t, children, state, ctx, "CUDAEMU_NVML=hidden")
	var sizes []int64
	for _, r := range got {
		if !strings.HasPrefix(r.source, ContextFromDriverLocked) || !strings.Contains(r.source, "does not list process") {
			t.Errorf("with NVML blind to the process, the source %q: want %q with NVML's reason", r.source, ContextFromDriverLocked)
		}
		sizes = append(sizes, r.bytes)
	}
	slices.Sort(sizes)
	if want := []int64{ctxBytes, 2 * ctxBytes, 3 * ctxBytes}; !slices.Equal(sizes, want) {
		t.Errorf("the fallback's readings of three concurrent opens: %v; want %v (one, two, three contexts: serialised by the lock)", sizes, want)
	}
}
