package chart

import (
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// errXYs are a line's points with their repetitions' range, for
// plotter.YErrorBars.
type errXYs []point

func (e errXYs) Len() int                    { return len(e) }
func (e errXYs) XY(i int) (float64, float64) { return e[i].x, e[i].v }
func (e errXYs) YError(i int) (float64, float64) {
	return e[i].v - e[i].lo, e[i].hi - e[i].v
}

// lineChart draws each series as a line over x (tunnel counts), with its
// points marked and error bars; the x axis has a tick at every measured x,
// and is logarithmic when they span decades.
func lineChart(title string, better Better, xlabel, ylabel string, ss []series) (*plot.Plot, plot.Legend, error) {
	p := newPlot(title, better)
	leg := plot.NewLegend()
	var xs []float64
	for i, s := range ss {
		pts := slices.Clone(s.pts)
		slices.SortFunc(pts, func(a, b point) int { return int(a.x - b.x) })
		for _, pt := range pts {
			if !slices.Contains(xs, pt.x) {
				xs = append(xs, pt.x)
			}
		}
		xy := errXYs(pts)
		l, sc, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, leg, err
		}
		l.Color, l.Width = s.color, vg.Points(2)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		sc.Color = s.color
		sc.Shape = shapes[i%len(shapes)]
		sc.Radius = vg.Points(3.5)
		eb, err := plotter.NewYErrorBars(xy)
		if err != nil {
			return nil, leg, err
		}
		eb.Color = s.color
		eb.CapWidth = vg.Points(8)
		p.Add(l, sc, eb)
		leg.Add(s.name, l, sc)
	}
	p.Add(plotter.NewGrid())
	slices.Sort(xs)
	p.X.Label.Text = xlabel
	ticks := make([]plot.Tick, len(xs))
	for i, x := range xs {
		ticks[i] = plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if len(xs) > 0 {
		lo, hi := xs[0], xs[len(xs)-1]
		if spansDecades(xs) {
			p.X.Scale = plot.LogScale{}
			p.X.Min, p.X.Max = lo/1.5, hi*1.5
			p.X.Label.Text += " (log scale)"
		} else {
			pad := math.Max((hi-lo)*0.08, 0.5)
			p.X.Min, p.X.Max = lo-pad, hi+pad
		}
	}
	valueAxis(&p.Y, ylabel, values(ss))
	return p, leg, nil
}

// shapes tell lines of one colour apart.
var shapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}}
