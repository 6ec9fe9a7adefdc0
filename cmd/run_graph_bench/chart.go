package main

import (
	"cmp"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/tolaria-ml/tolaria/bench"
)

// Chart colours: eager in orange, graphs in blue, throughout.
var (
	eagerColour  = color.RGBA{R: 0xd9, G: 0x5f, B: 0x02, A: 0xff}
	graphColour  = color.RGBA{R: 0x1b, G: 0x6a, B: 0xc9, A: 0xff}
	pooledColour = color.RGBA{R: 0x66, G: 0xa6, B: 0x1e, A: 0xff}
	greyColour   = color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff}
)

// writeChart draws the report as a PNG of three panels: step time eager
// against graphs per batch size (in the pipelined loop, and issuing alone),
// the speedup with the break-even line, and capture time cold against
// pooled per batch size. Without a sweep each panel has one batch size.
func writeChart(w io.Writer, rep *bench.Report) error {
	pts := chartPoints(rep)
	title := fmt.Sprintf("%s, %s %s", rep.Device, rep.Preset, rep.Model)
	step, err := stepPlot(pts, title)
	if err != nil {
		return err
	}
	speed, err := speedupPlot(pts)
	if err != nil {
		return err
	}
	capture, err := capturePlot(pts)
	if err != nil {
		return err
	}
	return writePanels(w, step, speed, capture)
}

// writePanels draws the plots side by side, 6 inches each, as a PNG.
// Each panel draws in its own tile: plot.Align would line the data areas
// up but push titles and legends off them.
func writePanels(w io.Writer, plots ...*plot.Plot) error {
	width, height := vg.Length(len(plots))*6*vg.Inch, 5.5*vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Inch / 3, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8,
		PadLeft: vg.Inch / 8, PadRight: vg.Inch / 4}
	for i, p := range plots {
		p.Draw(tiles.At(dc, i, 0))
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// chartPoints are the batch sizes the chart draws, in increasing order:
// the sweep's points and the main run's (the one the summary reports), which
// the sweep may leave out, each batch size once.
func chartPoints(rep *bench.Report) []bench.Point {
	main := bench.Point{BatchSize: rep.Summary.BatchSize, Summary: rep.Summary, Records: rep.Records}
	if main.BatchSize == 0 {
		main.BatchSize = rep.BatchSize
	}
	pts := slices.Clone(rep.Sweep)
	if !slices.ContainsFunc(pts, func(p bench.Point) bool { return p.BatchSize == main.BatchSize }) {
		pts = append(pts, main)
	}
	slices.SortStableFunc(pts, func(a, b bench.Point) int { return cmp.Compare(a.BatchSize, b.BatchSize) })
	return slices.CompactFunc(pts, func(a, b bench.Point) bool { return a.BatchSize == b.BatchSize })
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(15)
	p.X.Label.Text, p.Y.Label.Text = x, y
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(13)
		a.Tick.Label.Font.Size = vg.Points(11)
	}
	p.Legend.TextStyle.Font.Size = vg.Points(11)
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// batchAxis puts batch sizes on a log2 axis with a tick at each.
func batchAxis(p *plot.Plot, pts []bench.Point) {
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, pt := range pts {
		ticks = append(ticks, plot.Tick{Value: float64(pt.BatchSize), Label: strconv.Itoa(pt.BatchSize)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	lo, hi := float64(pts[0].BatchSize), float64(pts[len(pts)-1].BatchSize)
	p.X.Min, p.X.Max = lo/1.25, hi*1.25
}

func series(pts []bench.Point, y func(bench.Summary) float64) plotter.XYs {
	xys := make(plotter.XYs, 0, len(pts))
	for _, pt := range pts {
		if v := y(pt.Summary); v > 0 && !math.IsInf(v, 0) {
			xys = append(xys, plotter.XY{X: float64(pt.BatchSize), Y: v})
		}
	}
	return xys
}

func addLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color, dashed bool, shape draw.GlyphDrawer) error {
	if len(xys) == 0 {
		return nil
	}
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, l.Width = c, vg.Points(2)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	}
	s.Color, s.Shape, s.Radius = c, shape, vg.Points(4)
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

// log10Ticks marks 1, 2 and 5 times every power of ten on an axis that
// holds log10 of the values, labelled with the values. (The step panel
// plots log10 itself rather than use plot.LogScale, whose axis label
// claims room at the wrong place and pushes the legend off the data.)
func log10Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(lo); e <= math.Ceil(hi); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if l := math.Log10(v); l >= lo && l <= hi {
				ticks = append(ticks, plot.Tick{Value: l, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return ticks
}

// niceTicks marks at most 7 round values (1, 2 or 5 times a power of ten
// apart) between lo and hi, labelled with no more decimals than the step
// needs.
func niceTicks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', 4, 64)}}
	}
	mag := math.Pow(10, math.Floor(math.Log10((hi-lo)/5)))
	step := mag
	for _, m := range []float64{2, 5, 10} {
		if (hi-lo)/step <= 7 {
			break
		}
		step = m * mag
	}
	decimals := max(0, -int(math.Floor(math.Log10(step))))
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', decimals, 64)})
	}
	return ticks
}

func stepPlot(pts []bench.Point, title string) (*plot.Plot, error) {
	p := newPlot("Step time: "+title, "batch size", "ms per step (median, log scale)")
	batchAxis(p, pts)
	lines := []struct {
		name   string
		y      func(bench.Summary) float64
		c      color.Color
		dashed bool
		shape  draw.GlyphDrawer
	}{
		{"eager, pipelined loop", func(s bench.Summary) float64 { return s.EagerStepMS }, eagerColour, false, draw.CircleGlyph{}},
		{"graphs, pipelined loop", func(s bench.Summary) float64 { return s.GraphStepMS }, graphColour, false, draw.CircleGlyph{}},
		{"eager, issuing alone", func(s bench.Summary) float64 { return dispatchOf(s).EagerMS }, eagerColour, true, draw.BoxGlyph{}},
		{"replay, issuing alone", func(s bench.Summary) float64 { return dispatchOf(s).ReplayMS }, graphColour, true, draw.BoxGlyph{}},
	}
	lo, hi := math.Inf(1), 0.0
	for _, l := range lines {
		xys := series(pts, l.y)
		for i := range xys {
			lo, hi = min(lo, xys[i].Y), max(hi, xys[i].Y)
			xys[i].Y = math.Log10(xys[i].Y)
		}
		if err := addLine(p, l.name, xys, l.c, l.dashed, l.shape); err != nil {
			return nil, err
		}
	}
	if hi > 0 {
		// Room above the data for the legend.
		p.Y.Min, p.Y.Max = math.Log10(lo/1.5), math.Log10(hi*6)
		p.Y.Tick.Marker = plot.TickerFunc(log10Ticks)
	}
	p.Legend.Left = true
	return p, nil
}

func dispatchOf(s bench.Summary) bench.Dispatch {
	if s.Dispatch == nil {
		return bench.Dispatch{}
	}
	return *s.Dispatch
}

func speedupPlot(pts []bench.Point) (*plot.Plot, error) {
	p := newPlot("Speedup of graphs (eager / graphs; above 1 pays)", "batch size", "speedup (x)")
	batchAxis(p, pts)
	if err := addLine(p, "pipelined loop (wall)", series(pts, func(s bench.Summary) float64 { return s.Speedup }),
		graphColour, false, draw.CircleGlyph{}); err != nil {
		return nil, err
	}
	if err := addLine(p, "issuing alone (no staging)", series(pts, func(s bench.Summary) float64 { return dispatchOf(s).Speedup }),
		graphColour, true, draw.BoxGlyph{}); err != nil {
		return nil, err
	}
	// At each batch size the higher speedup is labelled above its marker
	// and the lower below, so that each label sits by its own marker.
	piped := series(pts, func(s bench.Summary) float64 { return s.Speedup })
	alone := series(pts, func(s bench.Summary) float64 { return dispatchOf(s).Speedup })
	pipedOff, aloneOff := speedupLabelOffsets(piped, alone)
	for _, l := range []struct {
		xys plotter.XYs
		off []vg.Point
	}{{piped, pipedOff}, {alone, aloneOff}} {
		for i := range l.xys {
			if err := addValueLabels(p, l.xys[i:i+1], "%.2fx", l.off[i].X, l.off[i].Y); err != nil {
				return nil, err
			}
		}
	}
	hi := 1.0
	for _, pt := range pts {
		hi = max(hi, pt.Summary.Speedup, dispatchOf(pt.Summary).Speedup)
	}
	p.Y.Min, p.Y.Max = 0, math.Ceil(hi*1.2*4)/4
	p.Y.Tick.Marker = plot.TickerFunc(niceTicks)
	if err := addBreakEven(p); err != nil {
		return nil, err
	}
	p.Legend.Top, p.Legend.Left = false, true
	return p, nil
}

// Offsets of a speedup label above its marker and below it.
var (
	labelAbove = vg.Point{X: -vg.Points(30), Y: vg.Points(5)}
	labelBelow = vg.Point{X: vg.Points(4), Y: -vg.Points(15)}
)

// speedupLabelOffsets returns the offset of each point's value label, for
// the pipelined and the issuing-alone speedups: at a batch size where both
// are drawn, the higher value's label goes above its marker and the
// lower's below (equal values: pipelined above); a point alone at its
// batch size keeps its series' side, pipelined above and alone below.
func speedupLabelOffsets(piped, alone plotter.XYs) (pipedOff, aloneOff []vg.Point) {
	at := func(xys plotter.XYs, x float64) (float64, bool) {
		for _, xy := range xys {
			if xy.X == x {
				return xy.Y, true
			}
		}
		return 0, false
	}
	side := func(above bool) vg.Point {
		if above {
			return labelAbove
		}
		return labelBelow
	}
	pipedOff, aloneOff = make([]vg.Point, len(piped)), make([]vg.Point, len(alone))
	for i, xy := range piped {
		other, ok := at(alone, xy.X)
		pipedOff[i] = side(!ok || xy.Y >= other)
	}
	for i, xy := range alone {
		other, ok := at(piped, xy.X)
		aloneOff[i] = side(ok && xy.Y > other)
	}
	return pipedOff, aloneOff
}

func capturePlot(pts []bench.Point) (*plot.Plot, error) {
	// Captures on the CPU device take microseconds; on a GPU, milliseconds.
	unit, scale := "ms", 1.0
	top := 0.0
	for _, pt := range pts {
		top = max(top, pt.Summary.CaptureColdMS, pt.Summary.CapturePooledMS)
	}
	if top < 1 {
		unit, scale = "µs", 1000
	}
	p := newPlot("Capture time: cold (new pool) vs pooled", "batch size", unit+" per setup (all its graphs)")
	cold, pooled := make(plotter.Values, len(pts)), make(plotter.Values, len(pts))
	names := make([]string, len(pts))
	for i, pt := range pts {
		cold[i], pooled[i] = pt.Summary.CaptureColdMS*scale, pt.Summary.CapturePooledMS*scale
		names[i] = strconv.Itoa(pt.BatchSize)
	}
	w := vg.Points(max(6, min(24, 180/float64(len(pts)))))
	top = 0
	for i, b := range []struct {
		name string
		v    plotter.Values
		c    color.Color
	}{{"cold (instantiate)", cold, eagerColour}, {"pooled (update in place)", pooled, pooledColour}} {
		bars, err := plotter.NewBarChart(b.v, w)
		if err != nil {
			return nil, err
		}
		bars.Color, bars.LineStyle.Width = b.c, 0
		bars.Offset = vg.Length(2*i-1) * w / 2
		p.Add(bars)
		p.Legend.Add(b.name, bars)
		xys := make(plotter.XYs, len(b.v))
		for j, v := range b.v {
			xys[j] = plotter.XY{X: float64(j), Y: v}
			top = max(top, v)
		}
		if err := addValueLabels(p, xys, "%.3g", bars.Offset-w/2, vg.Points(5)); err != nil {
			return nil, err
		}
	}
	p.NominalX(names...)
	p.Y.Min, p.Y.Max = 0, top*1.35
	p.Y.Tick.Marker = plot.TickerFunc(niceTicks)
	p.Legend.Left = true
	return p, nil
}

// addValueLabels writes each point's value beside it, shifted by dx, dy.
func addValueLabels(p *plot.Plot, xys plotter.XYs, format string, dx, dy vg.Length) error {
	if len(xys) == 0 {
		return nil
	}
	labels := make([]string, len(xys))
	for i, xy := range xys {
		labels[i] = fmt.Sprintf(format, xy.Y)
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Font.Size = vg.Points(10)
	}
	l.Offset = vg.Point{X: dx, Y: dy}
	p.Add(l)
	return nil
}

// addBreakEven draws the dashed line at a ratio of 1 across p, in the
// legend as break-even.
func addBreakEven(p *plot.Plot) error {
	even, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: 1}, {X: p.X.Max, Y: 1}})
	if err != nil {
		return err
	}
	even.Color, even.Width, even.Dashes = greyColour, vg.Points(1.5), []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(even)
	p.Legend.Add("break-even", even)
	return nil
}
