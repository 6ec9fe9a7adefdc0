package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/graphs"
)

// writeText writes a human summary of the report.
func writeText(w io.Writer, rep *bench.Report) error {
	s := rep.Summary
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s), preset %s: %s, %s, batch %d\n", rep.Device, rep.DeviceDescription, rep.Preset,
		rep.Model, rep.Optimizer, rep.BatchSize)
	fmt.Fprintf(&b, "%d epochs x %d measured steps per phase, step time over windows of %d steps\n\n",
		rep.Settings.Epochs, rep.Settings.Steps, rep.Settings.StepWindow)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "per step (ms)\teager\tgraphs\tratio\t\n")
	for _, c := range bench.Comparisons(s) {
		fmt.Fprintf(tw, "%s\t%.4f\t%.4f\t%s\t\n", c.Name, c.Eager, c.Graph, times(c.Ratio))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\nspeedup %.2fx (eager/graphs, median wall step)", s.Speedup)
	if d := s.Dispatch; d != nil {
		fmt.Fprintf(&b, "; %.2fx issuing alone", d.Speedup)
	}
	pooled := fmt.Sprintf("pooled %.3f ms", s.CapturePooledMS)
	if s.PooledCaptures == 0 {
		pooled = "no pooled capture ran"
	}
	fmt.Fprintf(&b, "\ncapture: cold %.3f ms, %s (%d captures, %d pooled; %d graphs of %d nodes each)\n",
		s.CaptureColdMS, pooled, s.Captures, s.PooledCaptures, s.GraphsPerSetup, s.GraphNodes)
	fmt.Fprintf(&b, "kernels per step %d; launch cost per kernel %.3f µs (probe), %s (from step times)\n",
		s.KernelsPerStep, s.LaunchCostUS, stepLaunchCostText(s))
	fmt.Fprintf(&b, "replay %.4f ms; stage copy %.4f ms; exposed stage %.4f ms (%.1f%% of the device step)\n",
		s.ReplayMS, s.StageCopyMS, s.ExposedStageMS, 100*s.ExposedStageFraction)
	fmt.Fprintf(&b, "graph pool %d bytes; fallbacks %s\n", s.PoolBytes, fallbacks(s.Fallbacks))
	if d := rep.Decode; d != nil {
		if err := writeDecode(&b, d); err != nil {
			return err
		}
	}
	if len(rep.Targets) > 0 {
		b.WriteString("\ntargets\n")
		for _, t := range rep.Targets {
			verdict := "met"
			if !t.Met {
				verdict = "NOT MET"
			}
			fmt.Fprintf(&b, "  %-52s %10.4g %s %-6g %s\n", t.Name, t.Value, t.Op, t.Bound, verdict)
		}
	}
	if len(rep.Sweep) > 0 {
		b.WriteString("\nsweep\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "batch\teager ms\tgraphs ms\tspeedup\talone speedup\tcapture cold ms\tpooled ms\t\n")
		for _, p := range rep.Sweep {
			q := p.Summary
			pooled := "-" // no pooled capture ran
			if q.PooledCaptures > 0 {
				pooled = fmt.Sprintf("%.3f", q.CapturePooledMS)
			}
			fmt.Fprintf(tw, "%d\t%.4f\t%.4f\t%s\t%s\t%.3f\t%s\t\n", p.BatchSize, q.EagerStepMS, q.GraphStepMS,
				times(q.Speedup), times(dispatchOf(q).Speedup), q.CaptureColdMS, pooled)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeDecode writes the decode step's figures: per token, eager against
// replayed, and what the step launches.
func writeDecode(b *strings.Builder, d *bench.Decode) error {
	fmt.Fprintf(b, "\ndecode step (tolaria sample's loop: batch 1, context %d, temperature %g; step, synchronise, read the id), "+
		"%d tokens of each mode in %d alternating blocks\n\n", d.Context, d.Temperature, d.Tokens, d.Blocks)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "per token (ms)\teager\treplayed\tratio\t\n")
	for _, c := range d.Comparisons() {
		fmt.Fprintf(tw, "%s\t%.4f\t%.4f\t%s\t\n", c.Name, c.Eager, c.Graph, times(c.Ratio))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(b, "\ndecode speedup %.2fx (eager/replayed, median wall token)", d.Speedup)
	if bb := d.BackToBack; bb != nil {
		fmt.Fprintf(b, "; %.2fx back to back", bb.Speedup)
	}
	fmt.Fprintf(b, "\nkernels per decode step %d (+%d copies); ", d.KernelsPerStep, d.CopiesPerStep)
	if d.CaptureError != "" {
		fmt.Fprintf(b, "not captured (%s): measured eagerly only\n", d.CaptureError)
		return nil
	}
	same := "the same"
	if !d.SameTokens {
		same = "NOT the same"
	}
	fmt.Fprintf(b, "replayed: one launch of %d nodes per token; capture %.3f ms\n", d.GraphNodes, d.CaptureMS)
	fmt.Fprintf(b, "replayed tokens %s as eager ones (%d checked from the same prompt and seed)\n", same, d.CheckedTokens)
	return nil
}

// stepLaunchCostText is the launch cost estimated from the step times:
// the figure, "below the measurement noise" when the estimate is 0 (it
// was negative or nothing), or "not measured".
func stepLaunchCostText(s bench.Summary) string {
	switch {
	case !s.StepLaunchCostMeasured():
		return "not measured"
	case s.StepLaunchCostUS <= 0:
		return "below the measurement noise"
	}
	return fmt.Sprintf("%.3f µs", s.StepLaunchCostUS)
}

func times(r float64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", r)
}

func fallbacks(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, r := range graphs.Reasons() {
		if n := m[r]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d steps", r, n))
		}
	}
	return strings.Join(parts, ", ")
}
