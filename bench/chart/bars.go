package chart

import (
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// groupWidth is the share of a category's slot its bars fill at most, and
// maxBarWidth the share one bar does (a chart of few series).
const (
	groupWidth  = 0.8
	maxBarWidth = 0.3
)

// groupedBars draws one group of bars per category, a bar per series,
// in data coordinates (so that every group lies inside the frame and its
// error bars sit on its bars), with an error bar from each bar's smallest
// to its largest repetition and a dashed line across a category at its
// bound, if it has one.
type groupedBars struct {
	cats   []string
	series []series
	base   float64 // where bars start (a ratio's 1); 0: the axis's bottom
}

// barChart makes a grouped bar chart of ss over cats.
// Bars start at base (0: at the axis's bottom).
func barChart(title string, better Better, ylabel string, cats []string, ss []series, base float64) (*plot.Plot, plot.Legend) {
	p := newPlot(title, better)
	g := &groupedBars{cats: cats, series: ss, base: base}
	p.Add(g)
	p.NominalX(cats...)
	p.X.Min, p.X.Max = -0.5, float64(len(cats))-0.5
	p.X.Tick.Label.Rotation = 0
	if len(cats) > 5 {
		p.X.Tick.Label.Rotation = 0.35
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	}
	valueAxis(&p.Y, ylabel, values(ss))
	leg := plot.NewLegend()
	for _, s := range ss {
		leg.Add(s.name, swatch{s.color})
	}
	if hasBounds(ss) {
		leg.Add("target bound", boundThumb{})
	}
	return p, leg
}

func hasBounds(ss []series) bool {
	for _, s := range ss {
		for _, p := range s.pts {
			if p.bound > 0 {
				return true
			}
		}
	}
	return false
}

// Plot implements plot.Plotter.
func (g *groupedBars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	// The series that have a bar in each category, in order: a category's
	// bars are packed and centred in its slot, with no gap for a series
	// it lacks.
	present := make([][]int, len(g.cats))
	for i, s := range g.series {
		for _, p := range s.pts {
			if !slices.Contains(present[p.cat], i) {
				present[p.cat] = append(present[p.cat], i)
			}
		}
	}
	bw := min(groupWidth/float64(len(g.series)), maxBarWidth)
	if g.base > 0 {
		y := trY(g.base)
		c.StrokeLine2(draw.LineStyle{Color: color.Gray{Y: 0x60}, Width: vg.Points(0.75)}, c.Min.X, y, c.Max.X, y)
	}
	errStyle := draw.LineStyle{Color: color.Black, Width: vg.Points(1)}
	boundStyle := draw.LineStyle{Color: color.Black, Width: vg.Points(1.5), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}
	for i, s := range g.series {
		for _, p := range s.pts {
			n := float64(len(present[p.cat]))
			x0 := float64(p.cat) - n*bw/2 + float64(slices.Index(present[p.cat], i))*bw
			x1 := x0 + bw
			top, bottom := trY(p.v), c.Min.Y
			if g.base > 0 {
				bottom = trY(g.base)
			}
			if p.v > 0 {
				c.FillPolygon(s.color, []vg.Point{{X: trX(x0), Y: bottom}, {X: trX(x1), Y: bottom}, {X: trX(x1), Y: top}, {X: trX(x0), Y: top}})
			}
			if p.hi > p.lo && p.lo > 0 {
				xm := trX((x0 + x1) / 2)
				capw := (trX(x1) - trX(x0)) / 4
				ylo, yhi := trY(p.lo), trY(p.hi)
				c.StrokeLine2(errStyle, xm, ylo, xm, yhi)
				c.StrokeLine2(errStyle, xm-capw, ylo, xm+capw, ylo)
				c.StrokeLine2(errStyle, xm-capw, yhi, xm+capw, yhi)
			}
		}
	}
	for _, s := range g.series {
		for _, p := range s.pts {
			if p.bound > 0 {
				y := trY(p.bound)
				c.StrokeLine2(boundStyle, trX(float64(p.cat)-0.48), y, trX(float64(p.cat)+0.48), y)
			}
		}
	}
}

// DataRange implements plot.DataRanger: every category's slot, and the
// values with their spreads and bounds.
func (g *groupedBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	vs := values(g.series)
	ymin, ymax = 0, 0
	for _, v := range vs {
		ymax = max(ymax, v)
	}
	return -0.5, float64(len(g.cats)) - 0.5, ymin, ymax
}

// boundThumb is the legend thumbnail of a bound: a dashed line.
type boundThumb struct{}

// Thumbnail implements plot.Thumbnailer.
func (boundThumb) Thumbnail(c *draw.Canvas) {
	y := c.Center().Y
	c.StrokeLine2(draw.LineStyle{Color: color.Black, Width: vg.Points(1.5), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}, c.Min.X, y, c.Max.X, y)
}
