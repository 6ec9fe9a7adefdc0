package progress

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

func TestProgressLines(t *testing.T) {
	step := trainer.Progress{Epoch: 1, Epochs: 2, Step: 10, StepsPerEpoch: 20, Loss: 0.5, Accuracy: 0.75, SamplesPerSecond: 1000}
	done := trainer.Progress{Epoch: 1, Epochs: 2, Loss: 0.5, Accuracy: 0.75, TestAccuracy: 0.7, EpochDone: true, EpochSeconds: 2}
	for _, c := range []struct {
		accuracy bool
		want     []string
	}{
		{true, []string{"epoch 1/2 step 10/20: loss 0.5000, accuracy 0.7500, 1000 samples/s",
			"epoch 1/2 done in 2.0s: train loss 0.5000, train accuracy 0.7500, test accuracy 0.7000, 0 samples/s"}},
		{false, []string{"epoch 1/2 step 10/20: loss 0.5000, 1000 samples/s",
			"epoch 1/2 done in 2.0s: train loss 0.5000, 0 samples/s"}},
	} {
		var b bytes.Buffer
		p := NewTrain(Streams{Stdout: io.Discard, Stderr: &b}, c.accuracy, nil)
		p.Report(step)
		p.Report(done)
		got := strings.Split(strings.TrimSpace(b.String()), "\n")
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("accuracy %v:\n got %q\nwant %q", c.accuracy, got, c.want)
		}
	}
}
