package bench

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/staging"
)

// These benchmarks run on the CPU device, so that regressions in the
// reference backend, in graph replay and in staging show in benchstat:
//
//	go test -run '^$' -bench . -count 10 ./bench | tee new.txt
//	benchstat old.txt new.txt

// syncEvery bounds how far a benchmark's host runs ahead of the stream,
// so that b.N queued nodes never pile up in memory.
const syncEvery = 64

// timedLoop runs step b.N times, synchronising with sync every `every`
// steps (never when every is 0) and once at the end, all with the timer
// running: the final synchronisation waits for the steps still queued, so
// their work is timed too. (b.Loop stops the timer as soon as it returns
// false, which would leave up to every-1 queued steps out of the timing.)
// Setup done before the call is not timed.
func timedLoop(b *testing.B, every int, sync, step func() error) {
	b.Helper()
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		must(b, step())
		if every > 0 && i%every == 0 {
			must(b, sync())
		}
	}
	must(b, sync())
	b.StopTimer()
}

// TestTimedLoopTimesFinalSync checks that timedLoop's timing includes
// every synchronisation, the last one too: at 5 iterations synchronising
// every 2, three syncs of 5 ms each are timed.
func TestTimedLoopTimesFinalSync(t *testing.T) {
	f := flag.Lookup("test.benchtime")
	if f == nil {
		t.Skip("no -test.benchtime flag")
	}
	old := f.Value.String()
	if err := f.Value.Set("5x"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Value.Set(old) }()
	const pause = 5 * time.Millisecond
	var steps, syncs int
	r := testing.Benchmark(func(b *testing.B) {
		steps, syncs = 0, 0
		timedLoop(b, 2,
			func() error { syncs++; time.Sleep(pause); return nil },
			func() error { steps++; return nil })
	})
	if r.N != 5 || steps != 5 || syncs != 3 {
		t.Fatalf("N %d, %d steps, %d syncs; want 5 steps and 3 syncs (after steps 2 and 4, and at the end)", r.N, steps, syncs)
	}
	if r.T < 3*pause {
		t.Errorf("timed %v for 3 syncs of %v each: the final sync is not timed", r.T, pause)
	}
}

func openBench(b *testing.B) *cpu.Device {
	b.Helper()
	dev, err := cpu.Open(cpu.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = dev.Close() })
	return dev
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

func filled(b *testing.B, dev device.Device, n int, v float32) device.Buffer {
	b.Helper()
	x, err := dev.Alloc(n)
	must(b, err)
	data := make([]float32, n)
	for i := range data {
		data[i] = v * float32(i%7-3)
	}
	must(b, dev.Upload(x, data))
	return x
}

// BenchmarkKernels times representative kernels of the mlp and tiny
// steps through the device: validation, enqueue, the hand-off to the
// stream goroutine and the math.
func BenchmarkKernels(b *testing.B) {
	dev := openBench(b)
	s, err := dev.NewStream()
	must(b, err)
	const mlpParams = 784*256 + 256 + 256*128 + 128 + 128*10 + 10
	x, w, z := filled(b, dev, 64*784, 0.01), filled(b, dev, 784*256, 0.01), filled(b, dev, 64*256, 0)
	bias, y := filled(b, dev, 256, 0.1), filled(b, dev, 64*256, 0)
	logits, labels, mask := filled(b, dev, 64*10, 0.5), filled(b, dev, 64, 0), filled(b, dev, 64, 1)
	probs, stats := filled(b, dev, 64*10, 0), filled(b, dev, device.StatsLen, 0)
	p, g, m, v := filled(b, dev, mlpParams, 0.01), filled(b, dev, mlpParams, 0.001), filled(b, dev, mlpParams, 0), filled(b, dev, mlpParams, 0)
	hyper := filled(b, dev, device.HyperLen, 0)
	must(b, dev.Upload(hyper, []float32{1e-3, 0.1, 0.001}))
	tx, tw, tz := filled(b, dev, 8*16, 0.1), filled(b, dev, 16*2, 0.1), filled(b, dev, 8*2, 0)
	one := filled(b, dev, 1, 1)
	kernels := []struct {
		name string
		run  func() error
	}{
		{"Gemm/64x784x256", func() error { return s.Gemm(false, false, 64, 256, 784, 1, x, w, 0, z) }},
		{"Gemm/8x16x2", func() error { return s.Gemm(false, false, 8, 2, 16, 1, tx, tw, 0, tz) }},
		{"BiasAct/gelu/64x256", func() error { return s.BiasAct(device.ActGELU, 64, 256, z, bias, y) }},
		{"SoftmaxXent/64x10", func() error { return s.SoftmaxXent(64, 10, logits, labels, mask, probs, stats) }},
		{"AdamW/235146", func() error { return s.AdamW(p, g, m, v, hyper, 0.9, 0.999, 1e-8, 1e-4) }},
		{"Scale/1", func() error { return s.Scale(one, 1) }},
	}
	for _, k := range kernels {
		b.Run(k.name, func(b *testing.B) {
			timedLoop(b, syncEvery, s.Synchronize, k.run)
		})
	}
}

// benchSetup is a setup with its graphs captured, for the step benchmarks.
func benchSetup(b *testing.B, p Preset) *setup {
	b.Helper()
	dev := openBench(b)
	pool := graphs.NewPool()
	b.Cleanup(func() { _ = pool.Close() })
	w, err := p.Workload()
	must(b, err)
	s, err := newSetup(context.Background(), dev, pool, new(staging.Guard), w, 1)
	must(b, err)
	b.Cleanup(func() { _ = s.close() })
	must(b, s.warmUp(context.Background(), 2))
	_, err = s.capture()
	must(b, err)
	return s
}

// BenchmarkStep compares eager dispatch with replay of the same training
// step, issued back to back on the compute stream from one staged input
// buffer (no staging in the loop): what graphs save on issuing alone.
func BenchmarkStep(b *testing.B) {
	for _, p := range Presets() {
		s := benchSetup(b, p)
		in := s.layout.Views(s.stager.Input(0))
		modes := []struct {
			name string
			step func() error
		}{
			{"eager", func() error { return s.step.Train(s.compute, in) }},
			{"replay", func() error { return s.lease.Replay(s.compute, 0) }},
		}
		for _, m := range modes {
			b.Run(string(p)+"/"+m.name, func(b *testing.B) {
				timedLoop(b, syncEvery, s.compute.Synchronize, m.step)
			})
		}
	}
}

// BenchmarkPipelinedStep is the same comparison in the trainer's
// pipelined loop: each step waits for its staged copy and hands its input
// buffer back to the stager, as run_graph_bench measures it.
func BenchmarkPipelinedStep(b *testing.B) {
	for _, p := range Presets() {
		s := benchSetup(b, p)
		for _, mode := range []string{"eager", "replay"} {
			b.Run(string(p)+"/"+mode, func(b *testing.B) {
				ctx := context.Background()
				timedLoop(b, 0, s.compute.Synchronize, func() error {
					_, err := s.issue(ctx, s.compute, mode == "replay", nil)
					return err
				})
			})
		}
	}
}

// BenchmarkStaging measures the staging pipeline alone: the loader fills
// pinned slots, the stager copies each into an input buffer on its stream,
// and the compute stream only waits for the copy and records step-done.
func BenchmarkStaging(b *testing.B) {
	for _, p := range Presets() {
		b.Run(string(p), func(b *testing.B) {
			s := benchSetup(b, p)
			ctx := context.Background()
			b.SetBytes(int64(s.layout.Len) * 4)
			timedLoop(b, 0, s.compute.Synchronize, func() error {
				st, err := s.stager.Next(ctx)
				if err != nil {
					return err
				}
				if err := s.compute.Wait(st.CopyDone); err != nil {
					return err
				}
				if err := s.compute.Record(s.stager.StepDone(st.K)); err != nil {
					return err
				}
				s.stager.Release(st)
				return nil
			})
		})
	}
}

// BenchmarkLaunchProbe is the launch-cost probe's two halves as
// benchmarks: 100 no-op-size kernels issued eagerly, or one replay of a
// graph of them.
func BenchmarkLaunchProbe(b *testing.B) {
	dev := openBench(b)
	s, err := dev.NewStream()
	must(b, err)
	x := filled(b, dev, 1, 1)
	issue := func(st device.Stream) error {
		for range 100 {
			if err := st.Scale(x, 1); err != nil {
				return err
			}
		}
		return nil
	}
	g, err := graphs.Capture(s, issue)
	must(b, err)
	exec, err := dev.Instantiate(g)
	must(b, err)
	b.Run("eager/100", func(b *testing.B) {
		for b.Loop() {
			must(b, issue(s))
			must(b, s.Synchronize())
		}
	})
	b.Run("replay/100", func(b *testing.B) {
		for b.Loop() {
			must(b, s.Launch(exec))
			must(b, s.Synchronize())
		}
	})
}
