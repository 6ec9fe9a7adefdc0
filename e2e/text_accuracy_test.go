package e2e

import (
	"os"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/data"
)

// TestCharTransformerAccuracy trains examples/char-transformer.yaml for its
// one epoch on the fortunes corpus, with graphs, and wants the validation
// loss at least 1 nat per byte under the unigram model's on the same split
// (data.TextBaselines: about 3.38 there). In make accuracy.
func TestCharTransformerAccuracy(t *testing.T) {
	if os.Getenv("TOLARIA_E2E_ACCURACY") == "" {
		t.Skip("set TOLARIA_E2E_ACCURACY=1 (make accuracy) to train examples/char-transformer.yaml on the fortunes corpus (about 2 minutes)")
	}
	if _, err := os.Stat(data.DefaultFortunesDir); err != nil {
		t.Fatal("fortunes is not installed: run scripts/install-deps.sh test")
	}
	const window = 64 // examples/char-transformer.yaml's
	train, valid, err := data.LoadText(data.TextConfig{Path: data.DefaultFortunesDir, Context: window})
	if err != nil {
		t.Fatal(err)
	}
	base, err := data.TextBaselines(train.Bytes, valid.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	// Two minutes on the quiet 2-core development machine, more under load.
	s := trainExample(t, "char-transformer.yaml", 12*time.Minute)
	t.Logf("validation loss %.4f nats/byte; unigram %.4f, bigram %.4f", s.TestLoss, base.Unigram, base.Bigram)
	if want := base.Unigram - 1; !(s.TestLoss <= want) {
		t.Fatalf("validation loss %.4f nats/byte after one epoch, want <= %.4f (the unigram model's %.4f less 1)", s.TestLoss, want, base.Unigram)
	}
}
