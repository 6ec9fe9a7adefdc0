package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/staging"
)

func TestNewSide(t *testing.T) {
	tests := []struct {
		name   string
		batch  int
		ms     []float64
		epochs []PeerEpoch
		want   Side
	}{
		{"empty", 64, nil, nil, Side{}},
		{"odd count", 64, []float64{4, 1, 2}, nil,
			Side{StepMS: 2, StepP90MS: 3.6, Windows: 3, SamplesPerSecond: 32000}},
		{"even count: the midpoint", 10, []float64{1, 2, 3, 10}, nil,
			Side{StepMS: 2.5, StepP90MS: 7.9, Windows: 4, SamplesPerSecond: 4000}},
		{"epochs: their median, samples of the first", 100, []float64{5},
			[]PeerEpoch{{Seconds: 30, Samples: 60000}, {Seconds: 10, Samples: 60000}, {Seconds: 20, Samples: 60000}},
			Side{StepMS: 5, StepP90MS: 5, Windows: 1, SamplesPerSecond: 20000, EpochSeconds: 20, EpochSamplesPerSecond: 3000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NewSide(tt.batch, tt.ms, tt.epochs)
			got.Epochs = nil
			if !sideClose(got, tt.want) {
				t.Errorf("NewSide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func sideClose(a, b Side) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*max(1, math.Abs(y)) }
	return near(a.StepMS, b.StepMS) && near(a.StepP90MS, b.StepP90MS) && a.Windows == b.Windows &&
		near(a.SamplesPerSecond, b.SamplesPerSecond) && near(a.EpochSeconds, b.EpochSeconds) &&
		near(a.EpochSamplesPerSecond, b.EpochSamplesPerSecond)
}

func TestComparePoint(t *testing.T) {
	tests := []struct {
		name              string
		tolaria, peer     Side
		wantStep, wantEpo float64
	}{
		{"tolaria slower", Side{StepMS: 6, EpochSeconds: 12}, Side{StepMS: 2, EpochSeconds: 3}, 3, 4},
		{"tolaria faster", Side{StepMS: 1, EpochSeconds: 1}, Side{StepMS: 4, EpochSeconds: 5}, 0.25, 0.2},
		{"no epochs", Side{StepMS: 3}, Side{StepMS: 3}, 1, 0},
		{"a side missing", Side{}, Side{StepMS: 3}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ComparePoint(64, 256, tt.tolaria, tt.peer)
			if p.StepRatio != tt.wantStep || p.EpochRatio != tt.wantEpo {
				t.Errorf("ratios %g, %g; want %g, %g (tolaria over peer)", p.StepRatio, p.EpochRatio, tt.wantStep, tt.wantEpo)
			}
			if p.BatchSize != 64 || p.Width != 256 {
				t.Errorf("point %d/%d, want 64/256", p.BatchSize, p.Width)
			}
		})
	}
}

func TestPeerStepWindows(t *testing.T) {
	tests := []struct {
		in   []float64
		want []float64
	}{
		{nil, nil},
		{[]float64{0.001, 0.001, 0.001}, nil}, // shorter than a window
		{[]float64{0.001, 0.001, 0.001, 0.005}, []float64{2}},
		{[]float64{0.001, 0.001, 0.001, 0.005, 0.001, 0.003}, []float64{2, 2, 2.5}},
	}
	for _, tt := range tests {
		got := PeerStepWindows(tt.in)
		if len(got) != len(tt.want) {
			t.Errorf("PeerStepWindows(%v) = %v, want %v", tt.in, got, tt.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-tt.want[i]) > 1e-9 {
				t.Errorf("PeerStepWindows(%v) = %v, want %v", tt.in, got, tt.want)
			}
		}
	}
}

// TestPeerArgs checks that the peer is told the model, batch, threads and
// every hyper-parameter tolaria's default job trains with.
func TestPeerArgs(t *testing.T) {
	c := PeerConfig{Threads: 3, Steps: 40, WarmupSteps: 2, SettleSteps: 4, Seed: 7, DataDir: "/data"}
	got := strings.Join(PeerArgs(c, PeerWorkload(128, 512), true, ""), " ")
	want := "--batch-size 128 --hidden 512,256 --threads 3 --steps 40 --warmup-steps 6 --seed 7 " +
		"--lr 0.001 --beta1 0.9 --beta2 0.999 --eps 1e-08 --weight-decay 0.0001 --clip-norm 5 " +
		"--lr-warmup-steps 200 --min-lr-ratio 0.01 --data-dir /data --epoch"
	if got != want {
		t.Errorf("PeerArgs:\n got %s\nwant %s", got, want)
	}
	if got := strings.Join(PeerArgs(c, PeerWorkload(128, 512), false, "unset"), " "); !strings.HasSuffix(got, "--data-dir /data --omp-wait-policy unset") {
		t.Errorf("PeerArgs with a wait policy: %s; want it to end in --omp-wait-policy unset", got)
	}
	if w := PeerWorkload(64, 256); w.Spec.String() != "784-256-128-10 gelu cross_entropy" {
		t.Errorf("width 256 is %s, want the default model 784-256-128-10 gelu cross_entropy", w.Spec)
	}
}

func TestPeerConfigValidate(t *testing.T) {
	ok := PeerConfig{Command: []string{"peer"}, Threads: 2, Widths: []int{8}}.WithDefaults()
	epoch := func(context.Context, Workload, uint64) (PeerEpoch, error) { return PeerEpoch{}, nil }
	tests := []struct {
		name string
		edit func(*PeerConfig)
		want string
	}{
		{"valid", func(*PeerConfig) {}, ""},
		{"no command", func(c *PeerConfig) { c.Command = nil }, "peer-command"},
		{"no threads", func(c *PeerConfig) { c.Threads = 0 }, "threads: must be in 1..1024, got 0"},
		{"too few steps", func(c *PeerConfig) { c.Steps = 3 }, "steps: must be in 8..100000, got 3"},
		{"zero rounds", func(c *PeerConfig) { c.Rounds = 0 }, "peer-rounds"},
		{"zero batch", func(c *PeerConfig) { c.BatchSizes = []int{0} }, "peer-batch-sizes"},
		{"width 1", func(c *PeerConfig) { c.Widths = []int{1} }, "peer-widths"},
		{"epoch width not measured", func(c *PeerConfig) { c.EpochWidths, c.Epoch = []int{16}, epoch },
			"peer-epoch-widths: 16 is not one of the widths"},
		{"epochs without a timer", func(c *PeerConfig) { c.EpochWidths = []int{8} }, "nothing times tolaria's epoch"},
		{"two wait policies", func(c *PeerConfig) { c.WaitPolicies = []string{"passive", "unset"} }, ""},
		{"unknown wait policy", func(c *PeerConfig) { c.WaitPolicies = []string{"PASSIVE"} },
			`peer-wait-policies: "PASSIVE" is not one of passive, active, unset`},
		{"wait policy twice", func(c *PeerConfig) { c.WaitPolicies = []string{"unset", "unset"} }, `"unset" is given twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func fakePeer(t *testing.T) []string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "fake_peer.sh"))
	if err != nil {
		t.Fatal(err)
	}
	return []string{"/bin/sh", p}
}

// TestRunPeer runs the side-by-side comparison with the real tolaria step
// (a small model) against the fake peer, whose steps take 200 ms (1 s every
// fourth) and whose epoch 8 s, and a tolaria epoch of 2 s: the ratios are
// tolaria's over the peer's, and the sides alternate round by round.
func TestRunPeer(t *testing.T) {
	log := filepath.Join(t.TempDir(), "order")
	t.Setenv("FAKE_PEER_LOG", log)
	epoch := func(_ context.Context, w Workload, _ uint64) (PeerEpoch, error) {
		f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return PeerEpoch{}, err
		}
		defer f.Close()
		_, err = f.WriteString("tolaria\n")
		return PeerEpoch{Seconds: 2, Steps: 60000 / w.BatchSize, Samples: 60000, TestAccuracy: 0.5}, err
	}
	c := PeerConfig{Command: fakePeer(t), BatchSizes: []int{4, 8}, Widths: []int{8}, EpochWidths: []int{8},
		Threads: 2, WarmupSteps: 1, SettleSteps: 2, Steps: 12, Rounds: 2, Epoch: epoch}
	rep, err := RunPeer(context.Background(), new(staging.Guard), openCPU, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Points) != 2 {
		t.Fatalf("%d points, want 2 (batch 4 and 8 at width 8)", len(rep.Points))
	}
	for _, p := range rep.Points {
		if p.Peer.StepMS != 400 {
			t.Errorf("batch %d: peer median step %g ms, want 400 (windows of four steps of 200, 200, 200, 1000 ms)", p.BatchSize, p.Peer.StepMS)
		}
		if p.Tolaria.StepMS <= 0 || p.Tolaria.StepMS >= p.Peer.StepMS {
			t.Errorf("batch %d: tolaria median step %g ms; want a positive time below the fake's 400 ms", p.BatchSize, p.Tolaria.StepMS)
		}
		if want := p.Tolaria.StepMS / p.Peer.StepMS; math.Abs(p.StepRatio-want) > 1e-12 || p.StepRatio >= 1 {
			t.Errorf("batch %d: step ratio %g, want tolaria/peer = %g (below 1)", p.BatchSize, p.StepRatio, want)
		}
		if p.EpochRatio != 0.25 || p.Tolaria.EpochSeconds != 2 || p.Peer.EpochSeconds != 8 {
			t.Errorf("batch %d: epochs %g s / %g s = %g, want 2 / 8 = 0.25", p.BatchSize, p.Tolaria.EpochSeconds, p.Peer.EpochSeconds, p.EpochRatio)
		}
		if want := float64(p.BatchSize) / 0.4; math.Abs(p.Peer.SamplesPerSecond-want) > 1e-9 {
			t.Errorf("batch %d: peer %g samples/s, want %g", p.BatchSize, p.Peer.SamplesPerSecond, want)
		}
		if p.Peer.EpochSamplesPerSecond != 7500 || p.Tolaria.EpochSamplesPerSecond != 30000 {
			t.Errorf("batch %d: epoch samples/s %g and %g, want 30000 and 7500", p.BatchSize, p.Tolaria.EpochSamplesPerSecond, p.Peer.EpochSamplesPerSecond)
		}
		if len(p.Tolaria.RoundStepMS) != 2 || !slices.Equal(p.Peer.RoundStepMS, []float64{400, 400}) {
			t.Errorf("batch %d: round medians %v and %v, want two each, the peer's 400 ms", p.BatchSize, p.Tolaria.RoundStepMS, p.Peer.RoundStepMS)
		}
		if p.Tolaria.Windows != 2*(12-StepWindow+1) || p.Peer.Windows != p.Tolaria.Windows {
			t.Errorf("batch %d: %d and %d windows, want %d each (2 rounds of 12 steps)", p.BatchSize, p.Tolaria.Windows, p.Peer.Windows, 2*(12-StepWindow+1))
		}
	}
	if rep.Peer != "fake" || rep.Device != "cpu" || rep.Threads != 2 || rep.PeerWaitPolicy != "PASSIVE" {
		t.Errorf("report: peer %q, device %q, threads %d, wait policy %q", rep.Peer, rep.Device, rep.Threads, rep.PeerWaitPolicy)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	// Point 0: tolaria first, then the peer first; point 1 the other way.
	want := []string{"tolaria", "peer", "peer", "tolaria", "peer", "tolaria", "tolaria", "peer"}
	if got := strings.Fields(string(b)); !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// TestRunPeerWaitPolicies runs the peer under two wait policies, the
// fake's steps taking 200 ms under "passive" and 50 ms under "unset", and
// its epochs 8 s and 12 s: the point compares tolaria with the faster
// policy for steps and for epochs, keeps both policies' figures, and
// rotates the three runs of each round.
func TestRunPeerWaitPolicies(t *testing.T) {
	log := filepath.Join(t.TempDir(), "order")
	t.Setenv("FAKE_PEER_LOG", log)
	t.Setenv("FAKE_PEER_UNSET_STEP_MS", "50")
	t.Setenv("FAKE_PEER_UNSET_EPOCH_SECONDS", "12")
	epoch := func(_ context.Context, w Workload, _ uint64) (PeerEpoch, error) {
		return PeerEpoch{Seconds: 2, Steps: 60000 / w.BatchSize, Samples: 60000, TestAccuracy: 0.5}, nil
	}
	c := PeerConfig{Command: fakePeer(t), BatchSizes: []int{4}, Widths: []int{8}, EpochWidths: []int{8},
		Threads: 2, WarmupSteps: 1, SettleSteps: 2, Steps: 12, Rounds: 3, Epoch: epoch,
		WaitPolicies: []string{"passive", "unset"}}
	rep, err := RunPeer(context.Background(), new(staging.Guard), openCPU, c)
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Points[0]
	if p.Peer.StepMS != 100 || p.PeerWaitPolicy != "unset" {
		t.Errorf("peer step %g ms under %q, want 100 ms (windows of 50, 50, 50, 250 ms) under unset", p.Peer.StepMS, p.PeerWaitPolicy)
	}
	if want := p.Tolaria.StepMS / 100; math.Abs(p.StepRatio-want) > 1e-12 {
		t.Errorf("step ratio %g, want tolaria / the faster policy's step = %g", p.StepRatio, want)
	}
	if p.Peer.EpochSeconds != 8 || p.PeerEpochWaitPolicy != "passive" || p.EpochRatio != 0.25 {
		t.Errorf("peer epoch %g s under %q, ratio %g; want passive's 8 s and 2 / 8 = 0.25", p.Peer.EpochSeconds, p.PeerEpochWaitPolicy, p.EpochRatio)
	}
	if len(p.ByWaitPolicy) != 2 || p.ByWaitPolicy[0].WaitPolicy != "passive" || p.ByWaitPolicy[0].Side.StepMS != 400 ||
		p.ByWaitPolicy[1].Side.StepMS != 100 || p.ByWaitPolicy[1].Side.EpochSeconds != 12 || len(p.ByWaitPolicy[0].Side.RoundStepMS) != 3 {
		t.Errorf("by wait policy %+v; want passive 400 ms and 8 s, unset 100 ms and 12 s, three rounds each", p.ByWaitPolicy)
	}
	if r := p.ByWaitPolicy[0].StepRatio; math.Abs(r-p.Tolaria.StepMS/400) > 1e-12 {
		t.Errorf("passive's step ratio %g, want %g", r, p.Tolaria.StepMS/400)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	// Rounds: tolaria, passive, unset; passive, unset, tolaria; unset,
	// tolaria, passive.
	want := []string{"peer:passive", "peer:unset", "peer:passive", "peer:unset", "peer:unset", "peer:passive"}
	if got := strings.Fields(string(b)); !slices.Equal(got, want) {
		t.Errorf("peer runs %v, want %v (tolaria first, then the second and third side first)", got, want)
	}
	if !strings.Contains(rep.PeerWaitPolicy, "passive, unset") {
		t.Errorf("report's wait policy %q, want it to name both", rep.PeerWaitPolicy)
	}
}

func TestRunPeerErrors(t *testing.T) {
	base := PeerConfig{Command: fakePeer(t), BatchSizes: []int{4}, Widths: []int{8}, Threads: 2, Steps: 8, Rounds: 1}
	tests := []struct {
		name string
		env  [2]string
		edit func(*PeerConfig)
		want string
	}{
		{"peer fails", [2]string{"FAKE_PEER_FAIL", "no torch here"}, nil, "no torch here"},
		{"other thread count", [2]string{"FAKE_PEER_THREADS", "5"}, nil, "peer: ran with 5 threads, asked for 2"},
		{"other model", [2]string{"FAKE_PEER_HIDDEN", "256,128"}, nil, "peer: trained batch 4 with hidden layers [256 128], asked for batch 4 with [8 4]"},
		{"missing command", [2]string{}, func(c *PeerConfig) { c.Command = []string{"/nonexistent/peer"} }, "/nonexistent/peer"},
		{"not JSON", [2]string{}, func(c *PeerConfig) { c.Command = []string{"/bin/echo", "hello"} }, "not the JSON object expected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env[0] != "" {
				t.Setenv(tt.env[0], tt.env[1])
			}
			c := base
			if tt.edit != nil {
				tt.edit(&c)
			}
			_, err := RunPeer(context.Background(), new(staging.Guard), openCPU, c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("RunPeer = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
