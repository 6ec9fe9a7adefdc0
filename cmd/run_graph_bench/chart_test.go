package main

import (
	"slices"
	"testing"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/tolaria-ml/tolaria/bench"
)

func TestChartPoints(t *testing.T) {
	pt := func(b int, speedup float64) bench.Point {
		return bench.Point{BatchSize: b, Summary: bench.Summary{BatchSize: b, Speedup: speedup}}
	}
	main := pt(8, 3)
	tests := []struct {
		name  string
		sweep []bench.Point
		want  []int
	}{
		{"no sweep", nil, []int{8}},
		{"sweep without the main batch size", []bench.Point{pt(2, 1), pt(4, 2)}, []int{2, 4, 8}},
		{"main batch size inside the sweep's range", []bench.Point{pt(2, 1), pt(16, 2)}, []int{2, 8, 16}},
		{"sweep with the main batch size", []bench.Point{pt(2, 1), main, pt(16, 2)}, []int{2, 8, 16}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &bench.Report{BatchSize: 8, Summary: main.Summary, Sweep: tt.sweep}
			var got []int
			pts := chartPoints(rep)
			for _, p := range pts {
				got = append(got, p.BatchSize)
				if p.BatchSize == 8 && p.Summary.Speedup != 3 {
					t.Errorf("batch 8 drawn with speedup %g, want the main run's 3", p.Summary.Speedup)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("chart points %v, want %v", got, tt.want)
			}
			if len(tt.sweep) > 0 && len(rep.Sweep) != len(tt.sweep) {
				t.Errorf("chartPoints changed the report's sweep")
			}
		})
	}
}

func TestSpeedupLabelOffsets(t *testing.T) {
	// Batch 2: pipelined above issuing alone; batch 4: issuing alone above
	// pipelined; batch 8: equal; batch 16: pipelined only; batch 32:
	// issuing alone only.
	piped := plotter.XYs{{X: 2, Y: 1.5}, {X: 4, Y: 1.1}, {X: 8, Y: 2}, {X: 16, Y: 1}}
	alone := plotter.XYs{{X: 2, Y: 1.2}, {X: 4, Y: 2.5}, {X: 8, Y: 2}, {X: 32, Y: 3}}
	pipedOff, aloneOff := speedupLabelOffsets(piped, alone)
	side := func(o vg.Point) string {
		if o.Y > 0 {
			return "above"
		}
		return "below"
	}
	var gotPiped, gotAlone []string
	for _, o := range pipedOff {
		gotPiped = append(gotPiped, side(o))
	}
	for _, o := range aloneOff {
		gotAlone = append(gotAlone, side(o))
	}
	if want := []string{"above", "below", "above", "above"}; !slices.Equal(gotPiped, want) {
		t.Errorf("pipelined labels %v, want %v", gotPiped, want)
	}
	if want := []string{"below", "above", "below", "below"}; !slices.Equal(gotAlone, want) {
		t.Errorf("issuing-alone labels %v, want %v", gotAlone, want)
	}
}
