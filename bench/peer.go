package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/staging"
)

// Defaults of a side-by-side run: a quick one, the default model at two
// batch sizes.
var (
	DefaultPeerBatchSizes  = []int{64, 256}
	DefaultPeerWidths      = []int{256}
	DefaultPeerEpochWidths = []int{256}
)

// Defaults for the zero numeric fields of PeerConfig.
const (
	DefaultPeerSteps  = 40
	DefaultPeerRounds = 2
)

// PeerConfig is a side-by-side run: tolaria's training step, graphs on,
// against the same training step in a peer program (bench/peer/torch_mlp.py,
// PyTorch on the CPU), one after the other in alternating order, at every
// batch size and hidden width. The model at width w is 784-w-(w/2)-10 with
// the mlp preset's activation, loss and optimizer, so w = 256 is the
// default model.
type PeerConfig struct {
	// Command is the peer's argv; RunPeer appends the point's flags (see
	// PeerArgs) and reads one JSON object (PeerOutput) from its stdout.
	Command []string
	// Env is added to the peer's environment (the rest is inherited).
	Env []string
	// BatchSizes and Widths span the grid of points.
	BatchSizes []int
	Widths     []int
	// EpochWidths are the widths at which a whole epoch is timed on both
	// sides too (an epoch at width 2048 and batch 8 takes minutes).
	EpochWidths []int
	// Threads is the thread count of both sides: the peer is told to use
	// it; tolaria's CPU device uses GOMAXPROCS threads, which the caller
	// sets to it.
	Threads int
	// WarmupSteps run before capture (tolaria) or before timing (the peer),
	// SettleSteps after capture: the peer runs both counts untimed too.
	WarmupSteps, SettleSteps int
	// Steps are the timed steps per side, point and round.
	Steps int
	// Rounds is how often each point is measured on each side; the order
	// alternates round by round (tolaria first, then the peer first, ...),
	// so that a change in the machine's load falls on both alike.
	Rounds int
	// WaitPolicies are the OMP_WAIT_POLICY settings the peer runs under
	// (its --omp-wait-policy: "passive", "active", or "unset" for the
	// OpenMP runtime's default). Each is measured at every point in every
	// round, in the rotating order, and the point compares tolaria with
	// the fastest: the policy that suits the peer best depends on the
	// machine's load (spinning threads win on a quiet machine and stall
	// on a busy one). Empty: one peer run per round with the peer's own
	// default.
	WaitPolicies []string `json:"wait_policies,omitempty"`
	// Net, when set, is the model of every point instead of the MLP of
	// each width: a net described as layers (the cnn preset's), which the
	// peer builds from NetArgs (torch_net.py's --layers and --input).
	// Widths and EpochWidths are then left empty.
	Net     *nn.Net  `json:"-"`
	NetName string   `json:"net,omitempty"`
	NetArgs []string `json:"net_args,omitempty"`
	// DataDir holds the Fashion-MNIST files the peer reads.
	DataDir string
	Seed    uint64
	// Epoch times one epoch of tolaria at batch size b and the model of w;
	// required when EpochWidths is not empty.
	Epoch EpochFunc `json:"-"`
	// Progress, when set, receives one line per measurement.
	Progress func(msg string) `json:"-"`
}

// EpochFunc trains one epoch of w on Fashion-MNIST with graphs on and
// reports it as the trainer does (epoch_seconds: training, evaluation of
// the test set and checkpoint).
type EpochFunc func(ctx context.Context, w Workload, seed uint64) (PeerEpoch, error)

// WithDefaults fills in the zero fields.
func (c PeerConfig) WithDefaults() PeerConfig {
	if len(c.BatchSizes) == 0 {
		c.BatchSizes = slices.Clone(DefaultPeerBatchSizes)
	}
	if len(c.Widths) == 0 && c.Net == nil {
		c.Widths = slices.Clone(DefaultPeerWidths)
	}
	if c.Net != nil {
		c.NetName = c.Net.String()
	}
	if c.Steps == 0 {
		c.Steps = DefaultPeerSteps
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultPeerRounds
	}
	if c.SettleSteps == 0 {
		c.SettleSteps = DefaultSettleSteps
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c
}

// Validate reports the first invalid field by its flag name.
func (c PeerConfig) Validate() error {
	switch {
	case len(c.Command) == 0 || c.Command[0] == "":
		return errors.New("peer-command: the peer's command is empty")
	case c.Threads < 1 || c.Threads > 1024:
		return fmt.Errorf("threads: must be in 1..1024, got %d", c.Threads)
	case c.Steps < MinSteps || c.Steps > MaxSteps:
		return fmt.Errorf("steps: must be in %d..%d, got %d", MinSteps, MaxSteps, c.Steps)
	case c.WarmupSteps < 0 || c.WarmupSteps > 1000:
		return fmt.Errorf("warmup-batches: must be in 0..1000, got %d", c.WarmupSteps)
	case c.SettleSteps < 1 || c.SettleSteps > 1000:
		return fmt.Errorf("settle-steps: must be in 1..1000, got %d", c.SettleSteps)
	case c.Rounds < 1 || c.Rounds > 100:
		return fmt.Errorf("peer-rounds: must be in 1..100, got %d", c.Rounds)
	case c.Net != nil && len(c.Widths) > 0:
		return errors.New("peer-widths: a model described as layers has no width to vary")
	case c.Net != nil && len(c.EpochWidths) > 0:
		return errors.New("peer-epoch-widths: whole epochs are timed for the mlp's widths only")
	case c.Net != nil && len(c.NetArgs) == 0:
		return errors.New("peer-command: a model described as layers needs its layers passed to the peer (NetArgs)")
	case len(c.EpochWidths) > 0 && c.Epoch == nil:
		return errors.New("peer-epoch-widths: epochs are asked for but nothing times tolaria's epoch")
	}
	for i, p := range c.WaitPolicies {
		if !slices.Contains(PeerWaitPolicies, p) {
			return fmt.Errorf("peer-wait-policies: %q is not one of %s", p, strings.Join(PeerWaitPolicies, ", "))
		}
		if slices.Contains(c.WaitPolicies[:i], p) {
			return fmt.Errorf("peer-wait-policies: %q is given twice", p)
		}
	}
	for _, b := range c.BatchSizes {
		if b < 1 || b > MaxBatchSize {
			return fmt.Errorf("peer-batch-sizes: each batch size must be in 1..%d, got %d", MaxBatchSize, b)
		}
	}
	for _, w := range c.Widths {
		if w < 2 || w > 65536 {
			return fmt.Errorf("peer-widths: each width must be in 2..65536 (the second hidden layer is half of it), got %d", w)
		}
	}
	for _, w := range c.EpochWidths {
		if !slices.Contains(c.Widths, w) {
			return fmt.Errorf("peer-epoch-widths: %d is not one of the widths measured (%v)", w, c.Widths)
		}
	}
	return nil
}

// PeerWaitPolicies are the values of PeerConfig.WaitPolicies.
var PeerWaitPolicies = []string{"passive", "active", "unset"}

// PeerWorkload is the model of width w at batch size b: the mlp preset
// with hidden layers w and w/2.
func PeerWorkload(b, w int) Workload {
	wl, _ := PresetMLP.Workload()
	wl.Spec.Hidden = []int{w, max(1, w/2)}
	wl.BatchSize = b
	return wl
}

// NetWorkload is net at batch size b, with the mlp preset's optimizer.
func NetWorkload(net *nn.Net, b int) (Workload, error) {
	arch, err := net.Resolve()
	if err != nil {
		return Workload{}, err
	}
	wl, _ := PresetMLP.Workload()
	return Workload{Spec: arch.Outline(), Net: net, Optimizer: wl.Optimizer, BatchSize: b}, nil
}

// PeerArgs are the flags RunPeer gives the peer for one measurement: the
// model, batch and thread count, and every hyper-parameter of w's
// optimizer and schedule, so that the two sides cannot drift apart.
func PeerArgs(c PeerConfig, w Workload, epoch bool, waitPolicy string) []string {
	o := w.Optimizer
	hidden := make([]string, len(w.Spec.Hidden))
	for i, h := range w.Spec.Hidden {
		hidden[i] = strconv.Itoa(h)
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	args := []string{"--batch-size", strconv.Itoa(w.BatchSize)}
	if w.Net != nil {
		args = append(args, c.NetArgs...)
	} else {
		args = append(args, "--hidden", strings.Join(hidden, ","))
	}
	args = append(args,
		"--threads", strconv.Itoa(c.Threads), "--steps", strconv.Itoa(c.Steps),
		"--warmup-steps", strconv.Itoa(c.WarmupSteps+c.SettleSteps), "--seed", strconv.FormatUint(c.Seed, 10),
		"--lr", f(o.LR), "--beta1", f(o.Beta1), "--beta2", f(o.Beta2), "--eps", f(o.Eps),
		"--weight-decay", f(o.WeightDecay), "--clip-norm", f(o.ClipNorm),
		"--lr-warmup-steps", strconv.Itoa(PeerLRWarmupSteps), "--min-lr-ratio", f(o.MinLRRatio),
	)
	if c.DataDir != "" {
		args = append(args, "--data-dir", c.DataDir)
	}
	if epoch {
		args = append(args, "--epoch")
	}
	if waitPolicy != "" {
		args = append(args, "--omp-wait-policy", waitPolicy)
	}
	return args
}

// PeerLRWarmupSteps is the job's default learning-rate warm-up (tolaria
// train --lr-warmup-steps), which the trainer caps at half the run's steps;
// the peer caps it the same way.
const PeerLRWarmupSteps = 200

// PeerOutput is what the peer prints: one JSON object.
type PeerOutput struct {
	Peer        string     `json:"peer"`
	Version     string     `json:"version"`
	Threads     int        `json:"threads"`
	BLAS        string     `json:"blas"`
	WaitPolicy  string     `json:"omp_wait_policy"`
	BatchSize   int        `json:"batch_size"`
	Hidden      []int      `json:"hidden"`
	Model       string     `json:"model"`
	StepSeconds []float64  `json:"step_seconds"`
	Epoch       *PeerEpoch `json:"epoch,omitempty"`
}

// PeerEpoch is one epoch on one side.
type PeerEpoch struct {
	// Seconds is the epoch's wall time: every training batch, the
	// evaluation of the test set and the checkpoint.
	Seconds      float64 `json:"seconds"`
	Steps        int     `json:"steps"`
	Samples      int     `json:"samples"`
	TestAccuracy float64 `json:"test_accuracy"`
}

// PeerReport is the outcome of a side-by-side run.
type PeerReport struct {
	Peer        string `json:"peer"`
	PeerVersion string `json:"peer_version"`
	PeerBLAS    string `json:"peer_blas,omitempty"`
	// PeerWaitPolicy is the OMP_WAIT_POLICY the peer ran with ("": its
	// OpenMP runtime's default); with several Settings.WaitPolicies, it
	// says so, and each point names the fastest.
	PeerWaitPolicy string      `json:"peer_omp_wait_policy"`
	Device         string      `json:"device"`
	Threads        int         `json:"threads"`
	Optimizer      string      `json:"optimizer"`
	Settings       PeerConfig  `json:"settings"`
	Points         []PeerPoint `json:"points"`
	Host           Host        `json:"host"`
	// LoadAvgEnd is /proc/loadavg when the run ended (Host.LoadAvg: when
	// it started).
	LoadAvgEnd  string    `json:"loadavg_end,omitempty"`
	Command     string    `json:"command,omitempty"`
	Started     time.Time `json:"started"`
	WallSeconds float64   `json:"wall_seconds"`
}

// PeerPoint is one batch size and width, both sides.
type PeerPoint struct {
	BatchSize int    `json:"batch_size"`
	Width     int    `json:"width"`
	Model     string `json:"model"`
	Tolaria   Side   `json:"tolaria"`
	Peer      Side   `json:"peer"`
	// StepRatio is tolaria's median step time over the peer's: above 1,
	// tolaria's step is slower; the goal is at most 1.
	StepRatio float64 `json:"step_ratio"`
	// EpochRatio is tolaria's median epoch time over the peer's (0 when no
	// epoch was timed).
	EpochRatio float64 `json:"epoch_ratio,omitempty"`
	// LoadAvg is /proc/loadavg when the point started.
	LoadAvg string `json:"loadavg,omitempty"`
	// With several Settings.WaitPolicies, Peer is the peer at its best:
	// its step figures are those of the policy with the fastest median
	// step (PeerWaitPolicy), its epoch figures those of the policy with
	// the fastest median epoch (PeerEpochWaitPolicy); ByWaitPolicy has
	// every policy's figures and ratios.
	PeerWaitPolicy      string           `json:"peer_omp_wait_policy,omitempty"`
	PeerEpochWaitPolicy string           `json:"peer_epoch_omp_wait_policy,omitempty"`
	ByWaitPolicy        []PeerPolicySide `json:"peer_by_omp_wait_policy,omitempty"`
}

// PeerPolicySide is the peer's side of a point under one wait policy, and
// tolaria's ratios against it.
type PeerPolicySide struct {
	WaitPolicy string  `json:"omp_wait_policy"`
	Side       Side    `json:"peer"`
	StepRatio  float64 `json:"step_ratio"`
	EpochRatio float64 `json:"epoch_ratio,omitempty"`
}

// Side is one side's figures at a point.
type Side struct {
	// StepMS is the median over every round of the step time in
	// milliseconds, each value the mean of StepWindow consecutive steps
	// (see Windowed); StepP90MS its 90th percentile.
	StepMS    float64 `json:"step_median_ms"`
	StepP90MS float64 `json:"step_p90_ms"`
	// Windows is how many windowed values the median is taken over.
	Windows int `json:"windows"`
	// RoundStepMS is the median step of each round on its own, in the
	// order measured: how far the rounds agree.
	RoundStepMS []float64 `json:"round_step_median_ms,omitempty"`
	// SamplesPerSecond is the batch size over StepMS.
	SamplesPerSecond float64 `json:"samples_per_second"`
	// EpochSeconds is the median epoch time over the rounds, and
	// EpochSamplesPerSecond the training samples over it.
	EpochSeconds          float64     `json:"epoch_seconds,omitempty"`
	EpochSamplesPerSecond float64     `json:"epoch_samples_per_second,omitempty"`
	Epochs                []PeerEpoch `json:"epochs,omitempty"`
}

// sideSamples are one side's raw measurements at a point.
type sideSamples struct {
	stepMS []float64 // windowed step times of every round
	rounds []float64 // each round's median windowed step time
	epochs []PeerEpoch
}

// addRound pools one round's windowed step times.
func (s *sideSamples) addRound(ms []float64) {
	s.stepMS = append(s.stepMS, ms...)
	s.rounds = append(s.rounds, Median(ms))
}

// NewSide summarises one side's measurements at batch size b: windowed
// step times in milliseconds and the epochs timed.
func NewSide(b int, windowedMS []float64, epochs []PeerEpoch) Side {
	d := Summarise(windowedMS)
	s := Side{StepMS: d.Median, StepP90MS: d.P90, Windows: d.N, SamplesPerSecond: ratio(float64(b)*1000, d.Median)}
	if len(epochs) > 0 {
		secs := make([]float64, len(epochs))
		for i, e := range epochs {
			secs[i] = e.Seconds
		}
		s.EpochSeconds = Median(secs)
		s.EpochSamplesPerSecond = ratio(float64(epochs[0].Samples), s.EpochSeconds)
		s.Epochs = epochs
	}
	return s
}

// ComparePoint puts the two sides of a point side by side: the ratios are
// tolaria's time over the peer's (0 where either is missing).
func ComparePoint(b, w int, tolaria, peer Side) PeerPoint {
	return PeerPoint{BatchSize: b, Width: w, Tolaria: tolaria, Peer: peer,
		StepRatio:  ratio(tolaria.StepMS, peer.StepMS),
		EpochRatio: ratio(tolaria.EpochSeconds, peer.EpochSeconds)}
}

// PeerStepWindows turns the peer's step times in seconds into the windowed
// milliseconds the tolaria side reports, so that both medians are taken
// over the same kind of value.
func PeerStepWindows(seconds []float64) []float64 {
	ms := make([]float64, len(seconds))
	for i, s := range seconds {
		ms[i] = s * 1000
	}
	return Windowed(ms, StepWindow)
}

// RunPeer measures every point of c's grid on both sides. guard is the
// process's capture guard; open opens tolaria's device for each tolaria
// measurement.
func RunPeer(ctx context.Context, guard *staging.Guard, open Opener, c PeerConfig) (*PeerReport, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if guard == nil {
		return nil, errors.New("bench: RunPeer needs the process's capture guard")
	}
	wl, _ := PresetMLP.Workload()
	rep := &PeerReport{Threads: c.Threads, Settings: c, Host: hostInfo(), Started: time.Now().UTC(),
		Optimizer: fmt.Sprintf("%s lr=%g betas=%g,%g eps=%g weight_decay=%g clip=%g", wl.Optimizer.Kind, wl.Optimizer.LR,
			wl.Optimizer.Beta1, wl.Optimizer.Beta2, wl.Optimizer.Eps, wl.Optimizer.WeightDecay, wl.Optimizer.ClipNorm)}
	widths := c.Widths
	if c.Net != nil {
		widths = []int{0}
	}
	i := 0
	for _, b := range c.BatchSizes {
		for _, w := range widths {
			pt, err := c.runPoint(ctx, guard, open, rep, b, w, i)
			if err != nil {
				return nil, fmt.Errorf("bench: peer: %s: %w", c.pointName(b, w), err)
			}
			rep.Points = append(rep.Points, pt)
			i++
		}
	}
	rep.LoadAvgEnd = hostInfo().LoadAvg
	rep.WallSeconds = time.Since(rep.Started).Seconds()
	return rep, nil
}

// runPoint measures one point: Rounds rounds, each one measurement per
// side, the side that goes first alternating from round to round and from
// point to point.
func (c PeerConfig) runPoint(ctx context.Context, guard *staging.Guard, open Opener, rep *PeerReport, b, w, index int) (PeerPoint, error) {
	wl := PeerWorkload(b, w)
	if c.Net != nil {
		var err error
		if wl, err = NetWorkload(c.Net, b); err != nil {
			return PeerPoint{}, err
		}
	}
	epoch := c.Net == nil && slices.Contains(c.EpochWidths, w)
	load := hostInfo().LoadAvg
	policies := c.WaitPolicies
	if len(policies) == 0 {
		policies = []string{""}
	}
	var tol sideSamples
	peers := make([]sideSamples, len(policies))
	for r := range c.Rounds {
		sides := []func() error{func() error { return c.measureTolaria(ctx, guard, open, rep, wl, epoch, &tol) }}
		for i, p := range policies {
			sides = append(sides, func() error { return c.measurePeer(ctx, rep, wl, epoch, p, &peers[i]) })
		}
		// Rotate which side goes first, round by round and point by point.
		first := (index + r) % len(sides)
		for _, side := range slices.Concat(sides[first:], sides[:first]) {
			if err := side(); err != nil {
				return PeerPoint{}, err
			}
		}
	}
	tolSide := NewSide(b, tol.stepMS, tol.epochs)
	tolSide.RoundStepMS = tol.rounds
	bySide := make([]PeerPolicySide, len(policies))
	bestStep, bestEpoch := 0, 0
	for i, p := range policies {
		s := NewSide(b, peers[i].stepMS, peers[i].epochs)
		s.RoundStepMS = peers[i].rounds
		bySide[i] = PeerPolicySide{WaitPolicy: p, Side: s, StepRatio: ratio(tolSide.StepMS, s.StepMS),
			EpochRatio: ratio(tolSide.EpochSeconds, s.EpochSeconds)}
		if s.StepMS < bySide[bestStep].Side.StepMS {
			bestStep = i
		}
		if s.EpochSeconds < bySide[bestEpoch].Side.EpochSeconds {
			bestEpoch = i
		}
	}
	peer := bySide[bestStep].Side
	e := bySide[bestEpoch].Side
	peer.EpochSeconds, peer.EpochSamplesPerSecond, peer.Epochs = e.EpochSeconds, e.EpochSamplesPerSecond, e.Epochs
	pt := ComparePoint(b, w, tolSide, peer)
	pt.Model, pt.LoadAvg = wl.Name(), load
	if len(policies) > 1 {
		pt.PeerWaitPolicy, pt.ByWaitPolicy = policies[bestStep], bySide
		if epoch {
			pt.PeerEpochWaitPolicy = policies[bestEpoch]
		}
	}
	c.progress("%s: step tolaria %.3f ms, %s %.3f ms%s: %.2fx%s", c.pointName(b, w), pt.Tolaria.StepMS, rep.Peer,
		pt.Peer.StepMS, policyNote(pt), pt.StepRatio, epochNote(pt))
	return pt, nil
}

// pointName names a point in progress lines and errors.
func (c PeerConfig) pointName(b, w int) string {
	if c.Net != nil {
		return fmt.Sprintf("batch %d", b)
	}
	return fmt.Sprintf("batch %d width %d", b, w)
}

// policyNote names the wait policy of the peer's figure and the others'
// step times.
func policyNote(pt PeerPoint) string {
	if len(pt.ByWaitPolicy) == 0 {
		return ""
	}
	var parts []string
	for _, p := range pt.ByWaitPolicy {
		parts = append(parts, fmt.Sprintf("%s %.3f ms", p.WaitPolicy, p.Side.StepMS))
	}
	return fmt.Sprintf(" (%s fastest: %s)", pt.PeerWaitPolicy, strings.Join(parts, ", "))
}

func epochNote(pt PeerPoint) string {
	if pt.EpochRatio == 0 {
		return ""
	}
	return fmt.Sprintf("; epoch %.2f s against %.2f s: %.2fx", pt.Tolaria.EpochSeconds, pt.Peer.EpochSeconds, pt.EpochRatio)
}

func (c PeerConfig) progress(format string, args ...any) {
	if c.Progress != nil {
		c.Progress(fmt.Sprintf(format, args...))
	}
}

func (c PeerConfig) measureTolaria(ctx context.Context, guard *staging.Guard, open Opener, rep *PeerReport, wl Workload, epoch bool, into *sideSamples) error {
	ms, name, err := graphSteps(ctx, guard, open, wl, c.WarmupSteps, c.SettleSteps, c.Steps, c.Seed)
	if err != nil {
		return fmt.Errorf("tolaria: %w", err)
	}
	rep.Device = name
	into.addRound(ms)
	if !epoch {
		return nil
	}
	e, err := c.Epoch(ctx, wl, c.Seed)
	if err != nil {
		return fmt.Errorf("tolaria epoch: %w", err)
	}
	into.epochs = append(into.epochs, e)
	c.progress("batch %d width %d: tolaria epoch %.2f s", wl.BatchSize, wl.Spec.Hidden[0], e.Seconds)
	return nil
}

func (c PeerConfig) measurePeer(ctx context.Context, rep *PeerReport, wl Workload, epoch bool, waitPolicy string, into *sideSamples) error {
	out, err := c.runPeerCommand(ctx, PeerArgs(c, wl, epoch, waitPolicy))
	if err != nil {
		return err
	}
	switch {
	case out.BatchSize != wl.BatchSize || (wl.Net == nil && !slices.Equal(out.Hidden, wl.Spec.Hidden)):
		return fmt.Errorf("peer: trained batch %d with hidden layers %v, asked for batch %d with %v",
			out.BatchSize, out.Hidden, wl.BatchSize, wl.Spec.Hidden)
	case out.Threads != c.Threads:
		return fmt.Errorf("peer: ran with %d threads, asked for %d", out.Threads, c.Threads)
	case len(out.StepSeconds) != c.Steps:
		return fmt.Errorf("peer: reported %d step times, asked for %d", len(out.StepSeconds), c.Steps)
	case epoch && out.Epoch == nil:
		return errors.New("peer: asked for an epoch, reported none")
	}
	for _, s := range out.StepSeconds {
		if !(s > 0) {
			return fmt.Errorf("peer: a step time of %g s: want positive seconds", s)
		}
	}
	rep.Peer, rep.PeerVersion, rep.PeerBLAS, rep.PeerWaitPolicy = out.Peer, out.Version, out.BLAS, out.WaitPolicy
	if len(c.WaitPolicies) > 1 {
		rep.PeerWaitPolicy = "the fastest of " + strings.Join(c.WaitPolicies, ", ") + " at each point"
	}
	into.addRound(PeerStepWindows(out.StepSeconds))
	if epoch {
		if !(out.Epoch.Seconds > 0) || out.Epoch.Samples < 1 {
			return fmt.Errorf("peer: epoch of %g s over %d samples: want positive figures", out.Epoch.Seconds, out.Epoch.Samples)
		}
		into.epochs = append(into.epochs, *out.Epoch)
	}
	return nil
}

// runPeerCommand runs the peer once and decodes what it printed.
func (c PeerConfig) runPeerCommand(ctx context.Context, args []string) (PeerOutput, error) {
	argv := append(slices.Clone(c.Command), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(cmd.Environ(), c.Env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return PeerOutput{}, fmt.Errorf("peer %s: %w%s", strings.Join(argv, " "), err, tail(stderr.String()))
	}
	var out PeerOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return out, fmt.Errorf("peer %s: its output is not the JSON object expected: %w%s", argv[0], err, tail(stderr.String()))
	}
	return out, nil
}

// tail is the end of a peer's stderr, for an error message.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	const n = 2000
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return "; its stderr ends:\n" + s
}

// graphSteps measures tolaria's training step of wl, replayed from a
// graph, in the trainer's pipelined loop: warmup eager steps, capture,
// settle unmeasured replays, then steps measured replays. It returns the
// windowed wall time per step in milliseconds (see setup.measure) and the
// device's name. A step that does not replay is an error: the comparison
// is of graphs on.
func graphSteps(ctx context.Context, guard *staging.Guard, open Opener, wl Workload, warmup, settle, steps int, seed uint64) (ms []float64, name string, err error) {
	dev, err := open()
	if err != nil {
		return nil, "", err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	pool := graphs.NewPool()
	defer func() { err = errors.Join(err, pool.Close()) }()
	es, err := newEventSet(dev, steps)
	if err != nil {
		return nil, "", err
	}
	defer es.destroy()
	s, err := newSetup(ctx, dev, pool, guard, wl, seed)
	if err != nil {
		return nil, "", err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	if err := s.warmUp(ctx, warmup); err != nil {
		return nil, "", err
	}
	if _, err := s.capture(); err != nil {
		return nil, "", fmt.Errorf("capture: %w", err)
	}
	p := phase{graph: true}
	if err := s.block(ctx, &p, es.steps, settle); err != nil {
		return nil, "", err
	}
	if err := s.compute.Synchronize(); err != nil {
		return nil, "", err
	}
	if p.fallbackSteps > 0 {
		return nil, "", fmt.Errorf("%d of %d measured steps ran eagerly (%s)", p.fallbackSteps, steps, p.fallback)
	}
	return p.wall, dev.Name(), nil
}
