package experiment

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/grpo-dev/grpo/config"
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
// test.png (per arm, checkpoint kind and n, the test reward, deadlock rate
// and meals, each with the 95% CI across seeds). Rewards of different
// functions (or weights) are on different scales: each reward function's
// arms get a panel of their own in both plots.
func (f *File) WritePlots(dir string, s Summary, results []RunResult) ([]string, error) {
	groups, err := f.rewardGroups()
	if err != nil {
		return nil, err
	}
	var curves []*plot.Plot
	for _, g := range groups {
		p, err := f.curvesPlot(results, g)
		if err != nil {
			return nil, err
		}
		curves = append(curves, p)
	}
	if err := savePNG(filepath.Join(dir, "curves.png"), curves...); err != nil {
		return nil, err
	}
	test, err := f.testPanels(s, groups)
	if err != nil {
		return nil, err
	}
	if err := savePNG(filepath.Join(dir, "test.png"), test...); err != nil {
		return nil, err
	}
	return []string{"curves.png", "test.png"}, nil
}

// rewardGroup is the arms scored by one reward function and weights:
// their rewards share a scale, and so a plot's axis.
type rewardGroup struct {
	label string // "shaped reward"; with the weights when two groups share the function
	arms  []string
}

// rewardGroups groups the arms by the reward their runs are scored by, in
// the order of the arms.
func (f *File) rewardGroups() ([]rewardGroup, error) {
	seed := int64(1)
	if len(f.Seeds) > 0 {
		seed = f.Seeds[0]
	}
	var rewards []config.Reward
	var groups []rewardGroup
	for _, a := range f.Arms {
		cfg, err := f.Config(a.Name, seed)
		if err != nil {
			return nil, err
		}
		i := slices.Index(rewards, cfg.Reward)
		if i < 0 {
			rewards, groups = append(rewards, cfg.Reward), append(groups, rewardGroup{})
			i = len(groups) - 1
		}
		groups[i].arms = append(groups[i].arms, a.Name)
	}
	for i, r := range rewards {
		groups[i].label = string(r.Function) + " reward"
		if slices.ContainsFunc(rewards, func(o config.Reward) bool { return o != r && o.Function == r.Function }) {
			w := r.Weights
			groups[i].label += fmt.Sprintf(" (alpha %g, beta %g, gamma %g, delta %g)", w.Alpha, w.Beta, w.Gamma, w.Delta)
		}
	}
	return groups, nil
}

// armColor is arm's colour in every plot and panel.
func (f *File) armColor(arm string) color.RGBA {
	i := max(0, slices.IndexFunc(f.Arms, func(a Arm) bool { return a.Name == arm }))
	return palette[i%len(palette)]
}

// Plot sizes: a plot alone, a panel of several stacked in one image, and
// the margin kept around each and around its legend.
const (
	plotWidth, plotHeight = 8 * vg.Inch, 5 * vg.Inch
	panelHeight           = 3.5 * vg.Inch
	plotMargin            = 6 * vg.Millimeter / 2
)

// savePNG draws panels one above the other into a PNG file, each with its
// legend in a column right of it (inside, it covered the last steps'
// markers) and a margin above its title (which the image's edge otherwise
// clipped).
func savePNG(file string, panels ...*plot.Plot) error {
	height := plotHeight
	if len(panels) > 1 {
		height = vg.Length(len(panels)) * panelHeight
	}
	c, err := draw.NewFormattedCanvas(plotWidth, height, "png")
	if err != nil {
		return fmt.Errorf("draw %s: %w", filepath.Base(file), err)
	}
	each := height / vg.Length(len(panels))
	for i, p := range panels {
		top := vg.Length(i) * each
		drawPanel(draw.Crop(draw.New(c), 0, 0, height-top-each, -top), p)
	}
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

// drawPanel draws p into dc with its legend in a column at the right.
func drawPanel(dc draw.Canvas, p *plot.Plot) {
	legend := p.Legend
	p.Legend = plot.NewLegend()
	defer func() { p.Legend = legend }()
	column := legend.Rectangle(dc).Size().X + 2*plotMargin
	p.Draw(draw.Crop(dc, plotMargin, -column, plotMargin, -plotMargin))
	legend.Top, legend.Left = true, true
	legend.Draw(draw.Crop(dc, plotWidth-column+plotMargin, -plotMargin, 0, -2*plotMargin-p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y))
}

// curvesPlot draws the validation curves of group's arms.
func (f *File) curvesPlot(results []RunResult, group rewardGroup) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = f.Name + ": validation " + group.label + " by step (circle: best step, triangle: last step)"
	p.X.Label.Text = "step"
	p.Y.Label.Text = "validation " + group.label
	var bands, lines []plot.Plotter // bands first, so no arm's band hides another's lines
	for _, a := range f.Arms {
		if !slices.Contains(group.arms, a.Name) {
			continue
		}
		col := f.armColor(a.Name)
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

// testPanels draws the test split's results: a reward panel per reward
// group, then the deadlock rate and the meals of every arm.
func (f *File) testPanels(s Summary, groups []rewardGroup) ([]*plot.Plot, error) {
	all := make([]string, len(f.Arms))
	for i, a := range f.Arms {
		all[i] = a.Name
	}
	var panels []*plot.Plot
	for _, g := range groups {
		p, err := f.testPanel(s, "test "+g.label, g.arms, func(c TestCell) float64 { return c.RewardMean }, math.Inf(-1), math.Inf(1))
		if err != nil {
			return nil, err
		}
		panels = append(panels, p)
	}
	for _, m := range []struct {
		what   string
		of     func(TestCell) float64
		lo, hi float64
	}{
		{"test deadlock rate", func(c TestCell) float64 { return c.DeadlockRate }, 0, 1},
		{"test meals per episode", func(c TestCell) float64 { return c.MealsMean }, 0, math.Inf(1)},
	} {
		p, err := f.testPanel(s, m.what, all, m.of, m.lo, m.hi)
		if err != nil {
			return nil, err
		}
		panels = append(panels, p)
	}
	return panels, nil
}

// testPanel draws metric of the arms named, per checkpoint kind and n, side
// by side: the mean across seeds with its 95% CI, cut to the values the
// metric can take, [lo, hi] (a t interval over few seeds reaches past a
// rate's 0 and 1).
func (f *File) testPanel(s Summary, what string, arms []string, metric func(TestCell) float64, lo, hi float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s, mean of seeds with 95%% CI (%d tables per n)", f.Name, what, f.Test.Episodes)
	p.Y.Label.Text = what
	type cell struct{ kind, n string }
	var labels []string
	var cells []cell
	for _, k := range f.Test.Steps {
		for _, n := range f.Test.N {
			labels = append(labels, fmt.Sprintf("%s n=%d", k, n))
			cells = append(cells, cell{k, strconv.Itoa(n)})
		}
	}
	width := 0.8 / float64(max(1, len(arms)))
	for _, a := range s.Arms {
		slot := slices.Index(arms, a.Name)
		if slot < 0 {
			continue
		}
		col := f.armColor(a.Name)
		var pts plotter.XYs
		var errs plotter.YErrors
		for i, at := range cells {
			var vals []float64
			for _, r := range a.Runs {
				if c, ok := r.Test[at.kind][at.n]; ok {
					vals = append(vals, metric(c))
				}
			}
			if len(vals) == 0 {
				continue
			}
			sum := grpo.Summarize(vals)
			half := (sum.CI95[1] - sum.CI95[0]) / 2
			if math.IsNaN(half) {
				half = 0
			}
			pts = append(pts, plotter.XY{X: float64(i) - 0.4 + width*(float64(slot)+0.5), Y: sum.Mean})
			errs = append(errs, struct{ Low, High float64 }{min(half, sum.Mean-lo), min(half, hi-sum.Mean)})
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
