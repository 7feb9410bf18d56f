package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// growthChart is one dimension's results: its points in run order and,
// per metric, one line per side of each kind of work.
type growthChart struct {
	dim     *growthDimension
	xs      []string // the points' labels
	metrics []metric
	lines   []growthLine
	results []result // the dimension's points, for the report's table
}

// growthLine is one side's medians: values[metric][x], NaN where the side
// has no figure at that point (-variant left it out).
type growthLine struct {
	label  string // "warren", "raw", or "relay: warren" where the dimension has several kinds of work
	warren bool
	values [][]float64
}

func (c *growthChart) file() string { return "growth-" + c.dim.name + ".png" }

// growthCharts gathers the growth points of results by dimension, in the
// order they ran. A point's raw figure is its best baseline's median, its
// warren figure the median of its (one) warren variant.
func growthCharts(results []result) []*growthChart {
	var charts []*growthChart
	for _, r := range results {
		g := r.scenario.growth
		if g == nil {
			continue
		}
		i := slices.IndexFunc(charts, func(c *growthChart) bool { return c.dim == g.dim })
		if i < 0 {
			i = len(charts)
			charts = append(charts, &growthChart{dim: g.dim, metrics: r.scenario.metricList()})
		}
		c := charts[i]
		c.results = append(c.results, r)
		x := slices.Index(c.xs, g.x)
		if x < 0 {
			x = len(c.xs)
			c.xs = append(c.xs, g.x)
			for li := range c.lines {
				c.lines[li].grow()
			}
		}
		for _, warren := range []bool{false, true} {
			vi := slices.IndexFunc(r.scenario.variants, func(v variant) bool { return !v.baseline && !v.peer })
			if (warren && vi < 0) || (!warren && !r.hasBaseline()) {
				continue
			}
			line := c.line(g.work, warren)
			for mi := range c.metrics {
				if warren {
					line.values[mi][x] = median(r.column(vi, mi))
				} else {
					line.values[mi][x] = r.best(mi)
				}
			}
		}
	}
	return charts
}

// line is the chart's line of one side of work, made empty if new.
func (c *growthChart) line(work string, warren bool) *growthLine {
	label := "raw"
	if warren {
		label = "warren"
	}
	if work != "" {
		label = work + ": " + label
	}
	i := slices.IndexFunc(c.lines, func(l growthLine) bool { return l.label == label })
	if i < 0 {
		l := growthLine{label: label, warren: warren, values: make([][]float64, len(c.metrics))}
		for range c.xs {
			l.grow()
		}
		c.lines = append(c.lines, l)
		i = len(c.lines) - 1
	}
	return &c.lines[i]
}

// grow adds a point with no figures to every metric of l.
func (l *growthLine) grow() {
	for mi := range l.values {
		l.values[mi] = append(l.values[mi], math.NaN())
	}
}

// highest is the highest figure of metric mi at point x, NaN-free (0
// when there is none).
func (c *growthChart) highest(mi, x int) float64 {
	h := 0.0
	for _, l := range c.lines {
		if v := l.values[mi][x]; !math.IsNaN(v) {
			h = max(h, v)
		}
	}
	return h
}

// writeGrowthCharts writes one PNG per growth dimension into dir: a panel
// per metric, x the dimension's points, one line per side.
func writeGrowthCharts(dir string, results []result) error {
	for _, c := range growthCharts(results) {
		if err := c.write(filepath.Join(dir, c.file())); err != nil {
			return fmt.Errorf("%s: %w", c.file(), err)
		}
	}
	return nil
}

// Line colours: warren green as in ratios.png, raw grey; a dimension's
// second kind of work is dashed.
var (
	warrenColor = color.RGBA{R: 46, G: 139, B: 87, A: 255}
	rawColor    = color.Gray{Y: 110}
)

func (c *growthChart) write(path string) error {
	panels := make([]*plot.Plot, len(c.metrics))
	for mi, m := range c.metrics {
		p := plot.New()
		p.Title.Text = c.dim.title + ": " + m.name
		if m.lowerBetter {
			p.Title.Text += " (lower is better)"
		}
		p.X.Label.Text = c.dim.axis
		p.Y.Label.Text = m.name
		p.Y.Min = 0
		p.Legend.Top = true
		var ticks []plot.Tick
		for x, label := range c.xs {
			ticks = append(ticks, plot.Tick{Value: float64(x), Label: label})
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Min, p.X.Max = -0.3, float64(len(c.xs))-0.7
		if c.dim.logY {
			p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
			p.Y.Min = math.Inf(1)
		}
		works := map[string]int{}
		for _, l := range c.lines {
			var xys plotter.XYs
			for x, v := range l.values[mi] {
				if !math.IsNaN(v) {
					xys = append(xys, plotter.XY{X: float64(x), Y: v})
					p.Y.Min, p.Y.Max = min(p.Y.Min, v/2), max(p.Y.Max, v*1.15)
				}
			}
			if len(xys) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			line.Color, points.Color = rawColor, rawColor
			if l.warren {
				line.Color, points.Color = warrenColor, warrenColor
			}
			work, _, _ := strings.Cut(l.label, ": ") // "" when the dimension has one kind of work
			if !strings.Contains(l.label, ": ") {
				work = ""
			}
			if _, ok := works[work]; !ok {
				works[work] = len(works)
			}
			if works[work] > 0 {
				line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
				points.Shape = draw.PyramidGlyph{}
			}
			line.Width = vg.Points(1.5)
			p.Add(line, points)
			p.Legend.Add(l.label, line, points)
		}
		// The legend goes in the top corner the lines leave free: the left
		// one when they end higher than they start.
		p.Legend.Left = c.highest(mi, len(c.xs)-1) > c.highest(mi, 0)
		if c.dim.logY {
			p.Y.Max *= 2
		} else {
			p.Y.Max *= 1.1
		}
		panels[mi] = p
	}
	width, height := vg.Length(5*len(panels))*vg.Inch, 3.8*vg.Inch
	img := vgimg.New(width, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 3,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{panels}, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// renderGrowth writes the report's "How cost grows": per dimension, what
// grows, its chart and a table of every point's medians, spreads and
// ratios.
func renderGrowth(b *strings.Builder, results []result) {
	charts := growthCharts(results)
	if len(charts) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## How cost grows\n\nThroughput and the tail of latency as one dimension of the work grows, each point a "+
		"scenario of its own whose raw and warren variants alternate, %d rounds at most. Each chart has a panel per figure, "+
		"warren in green, raw in grey; each table gives the medians with their spread (lowest – highest round) "+
		"and warren's ratio to raw at that point.\n", growthRounds)
	for _, c := range charts {
		fmt.Fprintf(b, "\n### %s\n\n%s\n\n![%s](%s)\n\n", c.dim.title, c.dim.about, c.dim.title, c.file())
		header, rule := "| "+c.dim.axis+" |", "|---|"
		hasWork := slices.ContainsFunc(c.results, func(r result) bool { return r.scenario.growth.work != "" })
		if hasWork {
			header, rule = header+" work |", rule+"---|"
		}
		for _, m := range c.metrics {
			ratio := "warren ÷ raw"
			if m.lowerBetter {
				ratio += " (lower is better)"
			}
			header += fmt.Sprintf(" raw %s | warren %s | %s |", m.name, m.name, ratio)
			rule += "---:|---:|---:|"
		}
		fmt.Fprintf(b, "%s one measurement | rounds |\n%s---|---:|\n", header, rule)
		for _, r := range c.results {
			g := r.scenario.growth
			fmt.Fprintf(b, "| %s |", g.x)
			if hasWork {
				fmt.Fprintf(b, " %s |", g.work)
			}
			for mi := range c.metrics {
				raw, warren := "–", "–"
				ratio := "–"
				for vi, v := range r.scenario.variants {
					xs := r.column(vi, mi)
					cell := fmt.Sprintf("%s (%s – %s)", num(median(xs)), num(slices.Min(xs)), num(slices.Max(xs)))
					if v.baseline {
						raw = cell
					} else if !v.peer {
						warren = cell
						if best := r.best(mi); best > 0 {
							ratio = fmt.Sprintf("%.2f", median(xs)/best)
						}
					}
				}
				fmt.Fprintf(b, " %s | %s | %s |", raw, warren, ratio)
			}
			fmt.Fprintf(b, " %s | %d |\n", r.size, r.rounds)
		}
	}
}
