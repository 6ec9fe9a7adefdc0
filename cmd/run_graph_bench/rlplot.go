package main

import (
	"bytes"
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/internal/atomicfile"
)

// newRLPlotCmd draws a reinforcement-learning run's return curves: tolaria
// rl --plot runs it, and it redraws any run's.
func newRLPlotCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "rl-plot RUN_DIR",
		Short: "draw the return curves of a tolaria rl run (PNG)",
		Long: `rl-plot draws every agent's return curve of a tolaria rl run from its agents'
events: the mean return of the last 100 episodes against environment steps,
each episode's return faint behind it, each greedy evaluation's mean as a
square, and the environment's goal (475 on CartPole-v1, -100 on Acrobot-v1,
as config.yaml's env gives it). tolaria rl --plot runs it at the end of a run.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("rl-plot takes one run directory, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if out == "" {
				out = filepath.Join(dir, "returns.png")
			}
			agents, _ := filepath.Glob(filepath.Join(dir, "agent-*"))
			if len(agents) == 0 {
				return usagef("%s holds no agent directories (agent-0, ...): it is not a tolaria rl run directory", dir)
			}
			if err := plotReturns(dir, len(agents), out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "return curves %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "output", "", "the PNG to write (default RUN_DIR/returns.png)")
	return cmd
}

// plotReturns draws every agent's return curve (the mean over its last
// 100 episodes against environment steps, each episode's return faint
// behind it, and each greedy evaluation's mean as a square) and the goal
// of the run's environment into a PNG at out.
func plotReturns(runDir string, agents int, out string) error {
	cfg, err := rl.ReadConfig(runDir)
	if err != nil {
		return err
	}
	goalOf := cfg.Goal()
	const window = rl.MeanEpisodes
	lo, hi := goalOf.Return, goalOf.Return // the returns drawn, the goal among them
	p := plot.New()
	p.Title.Text = "Episode return (line: mean of the last 100; dots: each episode; squares: greedy evaluations)"
	p.X.Label.Text = "environment steps"
	p.Y.Label.Text = "return"
	p.Legend.Top, p.Legend.Left, p.Legend.XOffs = true, true, vg.Points(10)
	drawn := 0
	for i := range agents {
		eps, err := rl.ReadEpisodes(runDir, i)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if len(eps) == 0 {
			continue
		}
		c := seriesColours[i%len(seriesColours)]
		each, mean := make(plotter.XYs, len(eps)), make(plotter.XYs, len(eps))
		sum := 0.0
		for k, e := range eps {
			sum += e.Return
			if k >= window {
				sum -= eps[k-window].Return
			}
			each[k] = plotter.XY{X: float64(e.EnvSteps), Y: e.Return}
			mean[k] = plotter.XY{X: float64(e.EnvSteps), Y: sum / float64(min(k+1, window))}
			lo, hi = min(lo, e.Return), max(hi, e.Return)
		}
		sc, err := plotter.NewScatter(each)
		if err != nil {
			return err
		}
		r, g, b, _ := c.RGBA()
		sc.GlyphStyle.Color = color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 0x50}
		sc.GlyphStyle.Radius = vg.Points(1)
		ln, err := plotter.NewLine(mean)
		if err != nil {
			return err
		}
		ln.Color, ln.Width = c, vg.Points(1.5)
		p.Add(sc, ln)
		p.Legend.Add(fmt.Sprintf("agent %d", i), ln)
		evals, err := rl.ReadEvals(runDir, i)
		if err != nil {
			return err
		}
		if len(evals) > 0 {
			pts := make(plotter.XYs, len(evals))
			for k, e := range evals {
				pts[k] = plotter.XY{X: float64(e.EnvSteps), Y: e.MeanReturn}
			}
			ev, err := plotter.NewScatter(pts)
			if err != nil {
				return err
			}
			ev.GlyphStyle.Color, ev.GlyphStyle.Radius = c, vg.Points(3.5)
			ev.GlyphStyle.Shape = draw.BoxGlyph{}
			p.Add(ev)
		}
		drawn++
	}
	if drawn == 0 {
		return fmt.Errorf("no agent of %s has finished an episode", runDir)
	}
	goal := plotter.NewFunction(func(float64) float64 { return goalOf.Return })
	goal.Color, goal.Dashes = color.Gray{Y: 0x60}, []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(goal)
	p.Legend.Add(fmt.Sprintf("goal %g (%s)", goalOf.Return, cfg.Env.Name), goal)
	// Returns of every step's reward 1 (CartPole-v1) from 0, of every
	// step's -1 (Acrobot-v1, MountainCar-v0) to 0.
	lo, hi = min(lo, 0), max(hi, 0)
	pad := (hi - lo) / 25
	p.Y.Min, p.Y.Max = lo, hi
	if lo < 0 {
		p.Y.Min -= pad
	}
	if hi > 0 {
		p.Y.Max += pad
	}
	// Whole numbers on both axes (gonum's default ticks label 500 as "500.00").
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.TickerFunc(niceTicks), plot.TickerFunc(niceTicks)
	w, err := p.WriterTo(9*vg.Inch, 5*vg.Inch, "png")
	if err != nil {
		return err
	}
	var png bytes.Buffer
	if _, err := w.WriteTo(&png); err != nil {
		return err
	}
	return atomicfile.WriteFile(out, png.Bytes(), 0o644)
}
