package jobserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// serveRaw serves one request given as a protocol message, with a
// heartbeat every millisecond, and returns every message the worker sent.
func serveRaw(t *testing.T, start worker.Message) []worker.Message {
	t.Helper()
	start.HeartbeatMS = 1
	line, err := json.Marshal(start)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		err := Serve(context.Background(), inR, outW, Config{Build: "cpu", Open: OpenCPU, Shared: newShared(t)})
		outW.Close()
		served <- err
	}()
	if _, err := inW.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	var got []worker.Message
	sc := bufio.NewScanner(outR)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m worker.Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		got = append(got, m)
		if m.Type == worker.TypeResult || m.Type == worker.TypeError {
			inW.Close() // the coordinator has its answer and lets go
		}
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	return got
}

// TestJobHeartbeatsCarryItsProgress: a job's worker says in its hello
// that it advances the work counter, and its heartbeats carry a counter
// that grows as the job trains, naming what moved.
func TestJobHeartbeatsCarryItsProgress(t *testing.T) {
	spec := smallSpec()
	spec.Epochs = 16 // long enough for several 1 ms heartbeats on a loaded machine
	body, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	msgs := serveRaw(t, worker.Message{Type: worker.TypeStart, Device: "cpu", Body: body})
	var hello *worker.Hello
	var work []uint64
	stages := map[string]bool{}
	for _, m := range msgs {
		switch m.Type {
		case worker.TypeHello:
			hello = m.Hello
		case worker.TypeBeat:
			work = append(work, m.Work)
			stages[m.Stage] = true
		case worker.TypeError:
			t.Fatalf("the job failed: %s", m.Error.Message)
		}
	}
	if hello == nil || !hello.Advances {
		t.Fatalf("hello %+v; want it to say that the worker advances the work counter", hello)
	}
	if len(work) < 2 {
		t.Fatalf("%d heartbeats; want several at 1ms", len(work))
	}
	for i := 1; i < len(work); i++ {
		if work[i] < work[i-1] {
			t.Fatalf("the work counter went back: %v", work)
		}
	}
	// Heartbeats come on a timer, so the last one may precede the job's
	// last steps (4 epochs of 512/64 = 32): what holds on any machine is
	// that the counter moved while the job ran and that a training step
	// is among what moved it.
	if work[len(work)-1] <= work[0] {
		t.Errorf("the work counter did not move between the first and the last heartbeat: %v", work)
	}
	if !stages[trainer.StageTrainStep] {
		t.Errorf("no heartbeat names a training step; stages seen %v", stages)
	}
	t.Logf("%d heartbeats, counter up to %d, stages seen %v", len(work), work[len(work)-1], stages)
}

// TestBenchIsWatchedForSilenceOnly: a benchmark's phases are not counted,
// so its hello does not ask the coordinator to watch a work counter.
func TestBenchIsWatchedForSilenceOnly(t *testing.T) {
	msgs := serveRaw(t, worker.Message{Type: worker.TypeBench, Device: "cpu", Body: json.RawMessage(`{"steps":-1}`)})
	for _, m := range msgs {
		if m.Type == worker.TypeHello && m.Hello.Advances {
			t.Fatalf("a benchmark's hello says it advances the work counter: %+v", m.Hello)
		}
	}
}
