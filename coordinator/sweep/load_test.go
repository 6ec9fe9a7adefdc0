package sweep

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestConfigLoad: a new sweep reads its file within the trial limit; a
// resumed one reads the sweep its directory saved and ranks as it did,
// unless a ranking key is given.
func TestConfigLoad(t *testing.T) {
	text := "base: {dataset: synthetic, epochs: 1}\ntrials:\n  - {name: a}\n  - {name: b}\n"
	path := writeSweep(t, text)
	cfg := Config{RankBy: "test_accuracy"}
	if err := cfg.Load(path, 2, false); err != nil || len(cfg.Sweep.Trials) != 2 {
		t.Fatalf("new sweep: %v, %+v", err, cfg.Sweep)
	}
	if err := (&Config{}).Load(path, 1, false); err == nil {
		t.Error("a sweep of 2 trials was read under a limit of 1")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, SweepFileCopy), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(Results{RankBy: "train_loss", Trials: []TrialResult{{Name: "a"}, {Name: "b"}}})
	if err := os.WriteFile(filepath.Join(dir, ResultsJSON), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, given := range []bool{false, true} {
		cfg := Config{Resume: true, Dir: dir, RankBy: "test_accuracy"}
		want := map[bool]string{false: "train_loss", true: "test_accuracy"}[given]
		if err := cfg.Load("", 1, given); err != nil || len(cfg.Sweep.Trials) != 2 || cfg.RankBy != want {
			t.Errorf("resume, rank key given %v: %v, %d trials, ranked by %q, want %q", given, err, len(cfg.Sweep.Trials), cfg.RankBy, want)
		}
	}
}
