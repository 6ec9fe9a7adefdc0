package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFinalMetricsAreServedAfterTheRun: once the run has finished (its
// summary is written), /metrics still answers for --metrics-linger with the
// final values, labelled with the job's rank as its worker, and tolaria
// then exits by itself.
func TestFinalMetricsAreServedAfterTheRun(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	cmd, stderr := startRun(t, dir, quick(run, "--metrics-addr", "127.0.0.1:0",
		"--metrics-linger", "4s", "--world", "2", "--rank", "1")...)
	waitFor(t, "the run's summary", func() bool {
		_, err := os.Stat(filepath.Join(run, "summary.json"))
		return err == nil
	})
	resp, err := http.Get("http://" + servingAt(t, stderr) + "/metrics")
	if err != nil {
		t.Fatalf("/metrics after the run: %v\n%s", err, stderr)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `tolaria_train_epoch{device="cpu",worker="1"} 2`) {
		t.Fatalf("/metrics after the run lacks the final epoch of worker 1 (the rank):\n%s", grepLines(string(body), "tolaria_train_epoch"))
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tolaria after lingering: %v\n%s", err, stderr)
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("tolaria did not exit after --metrics-linger")
	}
	if !strings.Contains(stderr.String(), "serving the final metrics") {
		t.Fatalf("no word of the final metrics:\n%s", stderr)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
