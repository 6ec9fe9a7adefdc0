package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestTrainHelpSaysHowInputsAreStandardised pins the one fact about the
// data a user needs to reproduce a run elsewhere: a single mean and
// standard deviation from the training set.
func TestTrainHelpSaysHowInputsAreStandardised(t *testing.T) {
	proc := process{shared: trainer.NewShared(), started: time.Now()}
	defer proc.shared.Close()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), proc, []string{"train", "--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("train --help: exit %d; stderr: %s", code, stderr.String())
	}
	help := strings.Join(strings.Fields(stdout.String()), " ")
	for _, want := range []string{
		"standardised with one mean and one standard deviation",
		"over every pixel of the whole training set",
		"applied to the training and test sets alike",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("train --help does not say %q:\n%s", want, stdout.String())
		}
	}
}

// TestTrainHelpNamesEveryFileKey: each of train's flags that sets a job
// key says the key a configuration file writes it as, so the flag and
// the file are one vocabulary.
func TestTrainHelpNamesEveryFileKey(t *testing.T) {
	cmd := newTrainCmd(process{})
	for _, key := range job.Keys() {
		f := cmd.Flags().Lookup(flagName(key))
		if f == nil {
			t.Errorf("no flag for key %s", key)
			continue
		}
		if want := "(file key " + string(key) + ")"; !strings.Contains(f.Usage, want) {
			t.Errorf("--%s says %q; want it to name %s", f.Name, f.Usage, want)
		}
	}
}
