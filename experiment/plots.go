package experiment

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/grpo-dev/grpo/grpo"
)

// palette colours the arms.
var palette = []color.RGBA{
	{R: 31, G: 119, B: 180, A: 255}, {R: 214, G: 39, B: 40, A: 255}, {R: 44, G: 160, B: 44, A: 255},
	{R: 148, G: 103, B: 189, A: 255}, {R: 255, G: 127, B: 14, A: 255}, {R: 140, G: 86, B: 75, A: 255},
}

// WritePlots draws the experiment's PNG plots into dir and returns their
// file names: curves.png (validation reward by step per arm: each seed's
// curve thin, the mean across seeds thick, the band between the lowest
// and highest seed, best steps as circles and last steps as triangles) and
// test.png (test reward per arm, checkpoint kind and n, with the 95% CI
// across seeds).
func (f *File) WritePlots(dir string, s Summary, results []RunResult) ([]string, error) {
	curves, err := f.curvesPlot(results)
	if err != nil {
		return nil, err
	}
	if err := savePNG(curves, filepath.Join(dir, "curves.png")); err != nil {
		return nil, err
	}
	test, err := f.testPlot(s)
	if err != nil {
		return nil, err
	}
	if err := savePNG(test, filepath.Join(dir, "test.png")); err != nil {
		return nil, err
	}
	return []string{"curves.png", "test.png"}, nil
}

// Plot sizes: the plot itself, and the margin kept around it and around
// its legend.
const (
	plotWidth, plotHeight = 8 * vg.Inch, 5 * vg.Inch
	plotMargin            = 6 * vg.Millimeter / 2
)

// savePNG draws p into a PNG file with its legend in a column right of the
// plot (inside, it covered the last steps' markers) and a margin above the
// title (which the image's edge otherwise clipped).
func savePNG(p *plot.Plot, file string) error {
	c, err := draw.NewFormattedCanvas(plotWidth, plotHeight, "png")
	if err != nil {
		return fmt.Errorf("draw %s: %w", filepath.Base(file), err)
	}
	dc := draw.New(c)
	legend := p.Legend
	p.Legend = plot.NewLegend()
	defer func() { p.Legend = legend }()
	column := legend.Rectangle(dc).Size().X + 2*plotMargin
	p.Draw(draw.Crop(dc, plotMargin, -column, plotMargin, -plotMargin))
	legend.Top, legend.Left = true, true
	legend.Draw(draw.Crop(dc, plotWidth-column+plotMargin, -plotMargin, 0, -2*plotMargin-p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y))
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	return f.Close()
}

func (f *File) curvesPlot(results []RunResult) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = f.Name + ": validation reward by step (circle: best step, triangle: last step)"
	p.X.Label.Text = "step"
	p.Y.Label.Text = "validation reward"
	var bands, lines []plot.Plotter // bands first, so no arm's band hides another's lines
	for ai, a := range f.Arms {
		col := palette[ai%len(palette)]
		light := color.NRGBA{R: col.R, G: col.G, B: col.B, A: 50}
		thin := color.NRGBA{R: col.R, G: col.G, B: col.B, A: 140}
		byStep := map[int][]float64{}
		var best, last plotter.XYs
		for _, r := range results {
			if r.Arm != a.Name {
				continue
			}
			var xy plotter.XYs
			for _, st := range sortedSteps(r.Validation) {
				v := r.Validation[st]
				xy = append(xy, plotter.XY{X: float64(st), Y: v})
				byStep[st] = append(byStep[st], v)
			}
			if len(xy) == 0 {
				continue
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return nil, err
			}
			l.Color, l.Width = thin, vg.Points(0.8)
			lines = append(lines, l)
			if v, ok := r.Validation[r.BestStep]; ok {
				best = append(best, plotter.XY{X: float64(r.BestStep), Y: v})
			}
			if v, ok := r.Validation[r.LastStep]; ok {
				last = append(last, plotter.XY{X: float64(r.LastStep), Y: v})
			}
		}
		steps := sortedSteps(byStep)
		if len(steps) == 0 {
			continue
		}
		var mean, band plotter.XYs
		var lo plotter.XYs
		for _, st := range steps {
			vs := byStep[st]
			mean = append(mean, plotter.XY{X: float64(st), Y: grpo.Summarize(vs).Mean})
			band = append(band, plotter.XY{X: float64(st), Y: slices.Max(vs)})
			lo = append(lo, plotter.XY{X: float64(st), Y: slices.Min(vs)})
		}
		slices.Reverse(lo)
		poly, err := plotter.NewPolygon(append(band, lo...))
		if err != nil {
			return nil, err
		}
		poly.Color, poly.LineStyle.Width = light, 0
		bands = append(bands, poly)
		ml, err := plotter.NewLine(mean)
		if err != nil {
			return nil, err
		}
		ml.Color, ml.Width = col, vg.Points(2.5)
		lines = append(lines, ml)
		p.Legend.Add(a.Name, ml)
		for _, m := range []struct {
			xy    plotter.XYs
			shape draw.GlyphDrawer
		}{{best, draw.CircleGlyph{}}, {last, draw.TriangleGlyph{}}} {
			if len(m.xy) == 0 {
				continue
			}
			sc, err := plotter.NewScatter(m.xy)
			if err != nil {
				return nil, err
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(4), Shape: m.shape}
			lines = append(lines, sc)
		}
	}
	p.Add(bands...)
	p.Add(lines...)
	return p, nil
}

// testPlot draws each arm's test reward (mean across seeds, 95% CI) per
// checkpoint kind and n, side by side.
func (f *File) testPlot(s Summary) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: test reward, mean of seeds with 95%% CI (%d tables per n)", f.Name, f.Test.Episodes)
	p.Y.Label.Text = "test reward"
	var labels []string
	for _, k := range f.Test.Steps {
		for _, n := range f.Test.N {
			labels = append(labels, fmt.Sprintf("%s n=%d", k, n))
		}
	}
	width := 0.8 / float64(max(1, len(s.Arms)))
	for ai, a := range s.Arms {
		col := palette[ai%len(palette)]
		var pts plotter.XYs
		var errs plotter.YErrors
		for _, row := range s.Table(a, f.Test.Steps, f.Test.N) {
			i := slices.Index(labels, fmt.Sprintf("%s n=%d", row.Kind, row.N))
			x := float64(i) - 0.4 + width*(float64(ai)+0.5)
			half := (row.Reward.CI95[1] - row.Reward.CI95[0]) / 2
			if math.IsNaN(half) {
				half = 0
			}
			pts = append(pts, plotter.XY{X: x, Y: row.Reward.Mean})
			errs = append(errs, struct{ Low, High float64 }{half, half})
		}
		if len(pts) == 0 {
			continue
		}
		type xyErr struct {
			plotter.XYs
			plotter.YErrors
		}
		eb, err := plotter.NewYErrorBars(xyErr{pts, errs})
		if err != nil {
			return nil, err
		}
		eb.Color = col
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(4), Shape: draw.CircleGlyph{}}
		p.Add(eb, sc)
		p.Legend.Add(a.Name, sc)
	}
	p.NominalX(labels...)
	return p, nil
}

func sortedSteps[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
