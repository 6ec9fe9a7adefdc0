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

	"github.com/tolaria-ml/tolaria/bench"
)

// seriesColours tell a chart's series apart (the hidden widths, the
// agents); they repeat past five.
var seriesColours = []color.Color{
	color.RGBA{R: 0x1b, G: 0x6a, B: 0xc9, A: 0xff},
	color.RGBA{R: 0xd9, G: 0x5f, B: 0x02, A: 0xff},
	color.RGBA{R: 0x66, G: 0xa6, B: 0x1e, A: 0xff},
	color.RGBA{R: 0x75, G: 0x70, B: 0xb3, A: 0xff},
	color.RGBA{R: 0xe7, G: 0x29, B: 0x8a, A: 0xff},
}

// writePeerChart draws the side-by-side report as a PNG: the step-time
// ratio per batch size, one line per width, against parity; samples/s of
// both sides; and, when epochs were timed, the epoch-time ratio.
func writePeerChart(w io.Writer, rep *bench.PeerReport) error {
	widths, batches := peerAxes(rep)
	title := fmt.Sprintf("tolaria (%s, graphs) / %s %s, %d threads", rep.Device, rep.Peer, rep.PeerVersion, rep.Threads)
	ratioP, err := peerRatioPlot(rep, widths, widths, batches, "Step time, "+title, "median step time ratio (log scale)",
		func(p bench.PeerPoint) float64 { return p.StepRatio })
	if err != nil {
		return err
	}
	plots := []*plot.Plot{ratioP}
	rateP, err := peerRatePlot(rep, widths, batches)
	if err != nil {
		return err
	}
	plots = append(plots, rateP)
	var epochWidths []int
	for _, w := range widths {
		if slices.ContainsFunc(rep.Points, func(p bench.PeerPoint) bool { return p.Width == w && p.EpochRatio > 0 }) {
			epochWidths = append(epochWidths, w)
		}
	}
	if len(epochWidths) > 0 {
		epochP, err := peerRatioPlot(rep, epochWidths, widths, batches, "Epoch time (train, evaluate, checkpoint), tolaria / "+rep.Peer,
			"epoch time ratio (log scale)", func(p bench.PeerPoint) float64 { return p.EpochRatio })
		if err != nil {
			return err
		}
		plots = append(plots, epochP)
	}
	return writePanels(w, plots...)
}

// peerAxes are the report's widths and batch sizes, sorted, each once.
func peerAxes(rep *bench.PeerReport) (widths, batches []int) {
	for _, p := range rep.Points {
		widths, batches = append(widths, p.Width), append(batches, p.BatchSize)
	}
	slices.Sort(widths)
	slices.Sort(batches)
	return slices.Compact(widths), slices.Compact(batches)
}

// peerBatchAxis puts the batch sizes on a log2 axis with a tick at each.
func peerBatchAxis(p *plot.Plot, batches []int) {
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, b := range batches {
		ticks = append(ticks, plot.Tick{Value: float64(b), Label: strconv.Itoa(b)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = float64(batches[0])/1.4, float64(batches[len(batches)-1])*1.4
}

// peerSeries is y of width w's points by batch size, log10 of the values
// (see log10Ticks), leaving out points without a value.
func peerSeries(rep *bench.PeerReport, w int, y func(bench.PeerPoint) float64) plotter.XYs {
	var xys plotter.XYs
	for _, p := range rep.Points {
		if v := y(p); p.Width == w && v > 0 {
			xys = append(xys, plotter.XY{X: float64(p.BatchSize), Y: math.Log10(v)})
		}
	}
	slices.SortFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
	return xys
}

// peerRatioPlot draws y for each of widths; a width's colour is its place
// among all, so that it matches the other panels.
func peerRatioPlot(rep *bench.PeerReport, widths, all, batches []int, title, yLabel string, y func(bench.PeerPoint) float64) (*plot.Plot, error) {
	p := newPlot(title, "batch size", yLabel)
	peerBatchAxis(p, batches)
	lo, hi := 1.0, 1.0
	for _, w := range widths {
		xys := peerSeries(rep, w, y)
		for _, xy := range xys {
			lo, hi = min(lo, math.Pow(10, xy.Y)), max(hi, math.Pow(10, xy.Y))
		}
		c := seriesColours[slices.Index(all, w)%len(seriesColours)]
		if err := addLine(p, fmt.Sprintf("width %d", w), xys, c, false, draw.CircleGlyph{}); err != nil {
			return nil, err
		}
		// With many widths the labels would overprint each other; the
		// JSON and the text table have every figure.
		if len(widths) <= 2 {
			if err := addRatioLabels(p, xys); err != nil {
				return nil, err
			}
		}
	}
	even, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: 0}, {X: p.X.Max, Y: 0}})
	if err != nil {
		return nil, err
	}
	even.Color, even.Width, even.Dashes = greyColour, vg.Points(1.5), []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(even)
	p.Legend.Add("parity (goal: at most 1)", even)
	p.Y.Min, p.Y.Max = math.Log10(lo/1.5), math.Log10(hi*4)
	p.Y.Tick.Marker = plot.TickerFunc(log10Ticks)
	p.Legend.Left = true
	return p, nil
}

// addRatioLabels writes each ratio beside its marker.
func addRatioLabels(p *plot.Plot, xys plotter.XYs) error {
	if len(xys) == 0 {
		return nil
	}
	labels := make([]string, len(xys))
	for i, xy := range xys {
		labels[i] = fmt.Sprintf("%.2fx", math.Pow(10, xy.Y))
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Font.Size = vg.Points(9)
	}
	l.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(3)}
	p.Add(l)
	return nil
}

func peerRatePlot(rep *bench.PeerReport, widths, batches []int) (*plot.Plot, error) {
	p := newPlot("Training samples/s (from the median step)", "batch size", "samples per second (log scale)")
	peerBatchAxis(p, batches)
	lo, hi := math.Inf(1), 0.0
	for i, w := range widths {
		c := seriesColours[i%len(seriesColours)]
		for _, side := range []struct {
			name   string
			y      func(bench.PeerPoint) float64
			dashed bool
			shape  draw.GlyphDrawer
		}{
			{"tolaria", func(p bench.PeerPoint) float64 { return p.Tolaria.SamplesPerSecond }, false, draw.CircleGlyph{}},
			{rep.Peer, func(p bench.PeerPoint) float64 { return p.Peer.SamplesPerSecond }, true, draw.BoxGlyph{}},
		} {
			xys := peerSeries(rep, w, side.y)
			for _, xy := range xys {
				lo, hi = min(lo, math.Pow(10, xy.Y)), max(hi, math.Pow(10, xy.Y))
			}
			if err := addLine(p, fmt.Sprintf("%s, width %d", side.name, w), xys, c, side.dashed, side.shape); err != nil {
				return nil, err
			}
		}
	}
	if hi > 0 {
		p.Y.Min, p.Y.Max = math.Log10(lo/1.5), math.Log10(hi*20)
		p.Y.Tick.Marker = plot.TickerFunc(log10Ticks)
	}
	p.Legend.Left = true
	return p, nil
}
