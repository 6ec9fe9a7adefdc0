package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/tolaria-ml/tolaria/bench"
)

// The RL chart's rate colours: the processes in blue, the sequential loop
// in orange (graphs off dashed); its speed-up panel colours graphs on in
// blue and off in orange.
var (
	processesColour  = graphColour
	sequentialColour = eagerColour
)

// writeRLChart draws an RL report as a PNG of three panels against the
// agent count: environment steps/s and learner steps/s of each mode (all
// agents together, the median over the rounds, with the rounds' range as
// error bars), and the processes' speed-up over the sequential loop.
func writeRLChart(w io.Writer, rep *bench.RLReport) error {
	title := fmt.Sprintf("%s, %s", rep.Device, rep.Env)
	env, err := rlRatePlot(rep, "Environment steps/s, all agents: "+title, func(r bench.RLRates) bench.RLSpread { return r.EnvStepsPerSec })
	if err != nil {
		return err
	}
	learn, err := rlRatePlot(rep, "Learner steps/s, all agents", func(r bench.RLRates) bench.RLSpread { return r.LearnerStepsPerSec })
	if err != nil {
		return err
	}
	speed, err := rlSpeedupPlot(rep)
	if err != nil {
		return err
	}
	return writePanels(w, env, learn, speed)
}

// agentAxis puts the agent counts on a log2 axis with a tick at each.
func agentAxis(p *plot.Plot, agents []int) {
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, n := range agents {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: strconv.Itoa(n)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = float64(agents[0])/1.25, float64(agents[len(agents)-1])*1.25
}

// rlSeries are the points of one mode (or ratio) and graphs setting.
func rlSeries(rep *bench.RLReport, graphs bool, y func(bench.RLPoint) bench.RLSpread) (plotter.XYs, plotter.YErrors) {
	var xys plotter.XYs
	var errs plotter.YErrors
	for _, p := range rep.Points {
		s := y(p)
		if p.Graphs != graphs || !(s.Median > 0) || math.IsInf(s.Median, 0) {
			continue
		}
		xys = append(xys, plotter.XY{X: float64(p.Agents), Y: s.Median})
		errs = append(errs, struct{ Low, High float64 }{s.Median - s.Min, s.Max - s.Median})
	}
	return xys, errs
}

// addSpreadLine draws a series with its rounds' range as error bars.
func addSpreadLine(p *plot.Plot, name string, xys plotter.XYs, errs plotter.YErrors, c color.Color, dashed bool, shape draw.GlyphDrawer) error {
	if len(xys) == 0 {
		return nil
	}
	if err := addLine(p, name, xys, c, dashed, shape); err != nil {
		return err
	}
	bars, err := plotter.NewYErrorBars(struct {
		plotter.XYer
		plotter.YErrorer
	}{xys, errs})
	if err != nil {
		return err
	}
	bars.Color, bars.Width = c, vg.Points(1)
	p.Add(bars)
	return nil
}

func rlRatePlot(rep *bench.RLReport, title string, rate func(bench.RLRates) bench.RLSpread) (*plot.Plot, error) {
	p := newPlot(title, "agents", "steps per second (median of the rounds)")
	agentAxis(p, rep.Settings.Agents)
	hi := 0.0
	for _, g := range rep.Settings.Graphs {
		for _, m := range []struct {
			name   string
			colour color.Color
			shape  draw.GlyphDrawer
			rates  func(bench.RLPoint) bench.RLRates
		}{
			{"processes", processesColour, draw.CircleGlyph{}, func(pt bench.RLPoint) bench.RLRates { return pt.Processes }},
			{"sequential", sequentialColour, draw.BoxGlyph{}, func(pt bench.RLPoint) bench.RLRates { return pt.Sequential }},
		} {
			y := func(pt bench.RLPoint) bench.RLSpread { return rate(m.rates(pt)) }
			xys, errs := rlSeries(rep, g, y)
			if err := addSpreadLine(p, fmt.Sprintf("%s, graphs %s", m.name, onOff(g)), xys, errs, m.colour, !g, m.shape); err != nil {
				return nil, err
			}
			for _, pt := range rep.Points {
				hi = max(hi, y(pt).Max)
			}
		}
	}
	p.Y.Min, p.Y.Max = 0, hi*1.3 // room for the legend above the data
	p.Y.Tick.Marker = plot.TickerFunc(niceTicks)
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}

func rlSpeedupPlot(rep *bench.RLReport) (*plot.Plot, error) {
	p := newPlot("Speed-up: processes / sequential (above 1 pays)", "agents", "speed-up (x, median of the rounds)")
	agentAxis(p, rep.Settings.Agents)
	hi := 1.0
	for i, g := range rep.Settings.Graphs {
		// Graphs on in blue, off in orange, as in the other charts.
		colour := graphColour
		if !g {
			colour = eagerColour
		}
		for _, s := range []struct {
			name   string
			dashed bool
			shape  draw.GlyphDrawer
			y      func(bench.RLPoint) bench.RLSpread
		}{
			{"environment steps/s", false, draw.CircleGlyph{}, func(pt bench.RLPoint) bench.RLSpread { return pt.EnvSpeedup }},
			{"learner steps/s", true, draw.BoxGlyph{}, func(pt bench.RLPoint) bench.RLSpread { return pt.LearnerSpeedup }},
		} {
			xys, errs := rlSeries(rep, g, s.y)
			if err := addSpreadLine(p, fmt.Sprintf("%s, graphs %s", s.name, onOff(g)), xys, errs, colour, s.dashed, s.shape); err != nil {
				return nil, err
			}
			if !s.dashed {
				// The environment speed-up's value by each marker: graphs
				// on above it, off below.
				dy := vg.Points(4)
				if i > 0 {
					dy = -vg.Points(14)
				}
				if err := addValueLabels(p, xys, "%.2fx", vg.Points(6), dy); err != nil {
					return nil, err
				}
			}
			for _, pt := range rep.Points {
				hi = max(hi, s.y(pt).Max)
			}
		}
	}
	p.Y.Min, p.Y.Max = 0, math.Ceil(hi*1.3*4)/4
	p.Y.Tick.Marker = plot.TickerFunc(niceTicks)
	if err := addBreakEven(p); err != nil {
		return nil, err
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}
