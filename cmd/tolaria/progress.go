package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/term"

	"github.com/tolaria-ml/tolaria/trainer"
)

// progress renders training progress: a bar redrawn in place on a
// terminal, plain lines otherwise (logs, CI, pipes).
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	accuracy bool // the loss is a classification loss: accuracy means something
	drawing  bool // a bar is on the current terminal line
}

// finish clears a bar left on the line, so what follows starts clean.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawing {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawing = false
	}
}

func newProgress(w io.Writer, accuracy bool) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, tty: ok && term.IsTerminal(int(f.Fd())), accuracy: accuracy}
}

// acc writes an accuracy field, or nothing for a regression loss.
func (p *progress) acc(name string, v float64) string {
	if !p.accuracy {
		return ""
	}
	return fmt.Sprintf(", %s %.4f", name, v)
}

func (p *progress) report(pr trainer.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr.EpochDone {
		if p.drawing {
			fmt.Fprint(p.w, "\r\033[K")
			p.drawing = false
		}
		fmt.Fprintf(p.w, "epoch %d/%d done in %.1fs: train loss %.4f%s%s, %.0f samples/s\n",
			pr.Epoch, pr.Epochs, pr.EpochSeconds, pr.Loss, p.acc("train accuracy", pr.Accuracy), p.acc("test accuracy", pr.TestAccuracy), pr.SamplesPerSecond)
		return
	}
	if !p.tty {
		fmt.Fprintf(p.w, "epoch %d/%d step %d/%d: loss %.4f%s, %.0f samples/s\n",
			pr.Epoch, pr.Epochs, pr.Step, pr.StepsPerEpoch, pr.Loss, p.acc("accuracy", pr.Accuracy), pr.SamplesPerSecond)
		return
	}
	const width = 30
	filled := width * pr.Step / max(pr.StepsPerEpoch, 1)
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	fmt.Fprintf(p.w, "\r\033[Kepoch %d/%d [%s] %d/%d loss %.4f%s, %.0f samples/s",
		pr.Epoch, pr.Epochs, bar, pr.Step, pr.StepsPerEpoch, pr.Loss, p.acc("acc", pr.Accuracy), pr.SamplesPerSecond)
	p.drawing = true
}
