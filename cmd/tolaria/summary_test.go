package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

func TestSummaryLine(t *testing.T) {
	spec := job.Default()
	var b bytes.Buffer
	printSummary(&b, spec, trainer.Summary{Device: "cpu", Steps: 5, TestAccuracy: 0, EpochSeconds: nil})
	if !strings.Contains(b.String(), "no evaluation yet") || strings.Contains(b.String(), "test accuracy 0.0000") {
		t.Errorf("a run stopped in its first epoch: %q", b.String())
	}
	b.Reset()
	printSummary(&b, spec, trainer.Summary{Device: "cpu", Steps: 5, TestAccuracy: 0.9, TestLoss: 0.3, EpochSeconds: []float64{1}})
	if !strings.Contains(b.String(), "test accuracy 0.9000, test loss 0.3000") {
		t.Errorf("a finished epoch: %q", b.String())
	}
	spec.Loss = "mse"
	b.Reset()
	printSummary(&b, spec, trainer.Summary{Device: "cpu", Steps: 5, TestLoss: 0.3, EpochSeconds: []float64{1}})
	if strings.Contains(b.String(), "accuracy") {
		t.Errorf("a regression loss: %q", b.String())
	}
}
