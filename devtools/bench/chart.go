package main

import (
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// chartFile is the chart's name, next to the report.
const chartFile = "ratios.png"

// bar is one warren variant's throughput ratio to its scenario's best
// baseline, or to its best peer.
type bar struct {
	label  string
	ratio  float64
	target float64 // 0: none
}

// ratioBars lists the throughput ratios of every warren variant, in report
// order: to the best baseline, then (where the scenario has peers) to the
// best peer. Latency and memory have their own units and are left to
// the tables.
func ratioBars(results []result) []bar {
	var bars []bar
	for _, r := range results {
		ms := r.scenario.metricList()
		if len(ms) != 1 || ms[0].lowerBetter || r.scenario.growth != nil || r.scenario.cluster != nil || r.scenario.ratioTo != "" {
			continue // growth has charts of its own (growth_chart.go); cluster and sizing, tables
		}
		best, bestPeer := r.best(0), r.bestPeer(0)
		for i, v := range r.scenario.variants {
			if !v.judged() {
				continue
			}
			med, t := median(r.column(i, 0)), r.scenario.metricFor(v, 0).target
			if best > 0 {
				bars = append(bars, bar{label: r.scenario.name + ": " + v.name, ratio: med / best, target: t.ratio})
			}
			if bestPeer > 0 {
				bars = append(bars, bar{label: r.scenario.name + ": " + v.name + " ÷ best peer", ratio: med / bestPeer, target: t.peerRatio})
			}
		}
	}
	return bars
}

// writeChart draws the ratios as horizontal bars, green where the target
// is met, red where it is missed and grey where the scenario sets none,
// with a line at 1.0 (parity with the best baseline, the raw client in
// every scenario of this package). With nothing to draw it writes nothing.
func writeChart(path string, results []result) error {
	bars := ratioBars(results)
	if len(bars) == 0 {
		return nil
	}
	slices.Reverse(bars) // the first bar at the top
	p := plot.New()
	p.Title.Text = "warren ÷ best baseline (or best peer), throughput (medians; ≥ 1 is as fast or faster; green met, red missed, grey no target)"
	p.X.Label.Text = "ratio"
	p.X.Min = 0
	met, missed, none := make(plotter.Values, len(bars)), make(plotter.Values, len(bars)), make(plotter.Values, len(bars))
	labels := make([]string, len(bars))
	var xys plotter.XYs
	var texts []string
	for i, b := range bars {
		switch {
		case b.target == 0:
			none[i] = b.ratio
		case b.ratio >= b.target:
			met[i] = b.ratio
		default:
			missed[i] = b.ratio
		}
		labels[i] = b.label
		xys = append(xys, plotter.XY{X: b.ratio, Y: float64(i)})
		texts = append(texts, fmt.Sprintf(" %.2f", b.ratio))
		p.X.Max = max(p.X.Max, b.ratio*1.15, 1.2)
	}
	width := vg.Points(14)
	for _, series := range []struct {
		values plotter.Values
		color  color.Color
	}{
		{met, color.RGBA{R: 46, G: 139, B: 87, A: 255}},
		{missed, color.RGBA{R: 200, G: 60, B: 50, A: 255}},
		{none, color.Gray{Y: 150}},
	} {
		bc, err := plotter.NewBarChart(series.values, width)
		if err != nil {
			return err
		}
		bc.Horizontal = true
		bc.Color = series.color
		bc.LineStyle.Width = 0
		p.Add(bc)
	}
	values, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
	if err != nil {
		return err
	}
	for i := range values.TextStyle {
		values.TextStyle[i].YAlign = draw.YCenter
	}
	p.Add(values)
	line, err := plotter.NewLine(plotter.XYs{{X: 1, Y: -0.6}, {X: 1, Y: float64(len(bars)) - 0.4}})
	if err != nil {
		return err
	}
	line.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	line.LineStyle.Color = color.Gray{Y: 80}
	p.Add(line)
	p.NominalY(labels...)
	var ticks []plot.Tick
	for x := 0.0; x <= p.X.Max; x += 0.25 {
		label := ""
		if int(x*4)%2 == 0 {
			label = fmt.Sprintf("%.1f", x)
		}
		ticks = append(ticks, plot.Tick{Value: x, Label: label})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	return p.Save(10*vg.Inch, vg.Length(1.2+0.4*float64(len(bars)))*vg.Inch, path)
}
