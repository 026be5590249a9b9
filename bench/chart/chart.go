package chart

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Formats are the file types each chart is written in.
var Formats = []string{"png", "svg"}

// Chart sizes: the plot, and the strip beside it that holds the legend.
const (
	chartWidth  = 10 * vg.Inch
	chartHeight = 5 * vg.Inch
	legendPad   = 8 // points between the plot and its legend
)

// Better says which way a chart's figures improve; titles say it.
type Better int

const (
	Higher Better = iota
	Lower
)

func (b Better) String() string {
	if b == Lower {
		return "lower is better"
	}
	return "higher is better"
}

// Systems' hues: one per system, the same in every chart. A system's
// variants (sluice's engines, algorithms, workers) are shades of its hue.
var hues = map[string][]color.RGBA{
	"sluice": {
		{0x1f, 0x5f, 0xb4, 0xff}, {0x6b, 0xae, 0xd6, 0xff}, {0x08, 0x30, 0x6b, 0xff},
		{0x41, 0x8e, 0xc8, 0xff}, {0x9e, 0xca, 0xe1, 0xff}, {0x21, 0x71, 0xb5, 0xff},
	},
	"wireguard-go": {{0xd6, 0x27, 0x28, 0xff}, {0xf0, 0x7c, 0x7c, 0xff}},
	"nginx":        {{0x2c, 0xa0, 0x2c, 0xff}, {0x8c, 0xd1, 0x7d, 0xff}},
	"veth":         {{0x70, 0x70, 0x70, 0xff}},
}

// systemOrder is the order of systems in every legend.
var systemOrder = []string{"veth", "wireguard-go", "nginx", "sluice"}

// sortSeries orders ss as every legend is: by system, then by the
// variant's place in the palette (its shade); the metric's place (a dashed
// second metric) keeps its order within a variant.
func (p *palette) sortSeries(ss []series) {
	rank := func(s series) (int, int) {
		r := slices.Index(systemOrder, s.system)
		if r < 0 {
			r = len(systemOrder)
		}
		return r, slices.Index(p.variants[s.system], s.variant)
	}
	slices.SortStableFunc(ss, func(a, b series) int {
		ra, va := rank(a)
		rb, vb := rank(b)
		if ra != rb {
			return ra - rb
		}
		return va - vb
	})
}

// otherHue is the colour of a system not in hues.
var otherHue = color.RGBA{0x94, 0x67, 0xbd, 0xff}

// palette gives each series of a document its colour: the system's hue,
// shaded by the variant's place among that system's variants (sorted by
// engine, then by name, so that a variant keeps its shade in every chart
// of the document).
type palette struct {
	variants map[string][]string // system -> its variants, sorted
}

func newPalette() *palette { return &palette{variants: map[string][]string{}} }

// add registers a variant of system.
func (p *palette) add(system, variant string) {
	vs := p.variants[system]
	if !slices.Contains(vs, variant) {
		vs = append(vs, variant)
		slices.SortFunc(vs, func(a, b string) int {
			if ra, rb := engineRank(a), engineRank(b); ra != rb {
				return ra - rb
			}
			return strings.Compare(a, b)
		})
		p.variants[system] = vs
	}
}

// engineOrder ranks sluice's engines, so that an engine keeps its shade
// from run to run whatever others ran beside it: soft is always the first
// (the system's own hue).
var engineOrder = []string{"soft", "sched", "openssl", "ipsecmb"}

// engineRank is the place of the first engine named in a variant's words,
// or len(engineOrder).
func engineRank(variant string) int {
	for _, w := range strings.FieldsFunc(variant, func(r rune) bool { return r == ' ' || r == '/' || r == ':' }) {
		if i := slices.Index(engineOrder, w); i >= 0 {
			return i
		}
	}
	return len(engineOrder)
}

// color is the colour of a variant of system (added before).
func (p *palette) color(system, variant string) color.Color {
	shades, ok := hues[system]
	if !ok {
		return otherHue
	}
	i := max(0, slices.Index(p.variants[system], variant))
	return shades[i%len(shades)]
}

// spansDecades reports whether the positive values in vs differ by a
// factor of 10 or more: such an axis is drawn logarithmic.
func spansDecades(vs []float64) bool {
	lo, hi := math.Inf(1), 0.0
	for _, v := range vs {
		if v > 0 {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	return hi > 0 && hi/lo >= 10
}

// logAxis makes a a logarithmic axis over the positive values in vs, with
// a margin so that no mark sits on the frame.
func logAxis(a *plot.Axis, vs []float64) {
	lo, hi := math.Inf(1), 0.0
	for _, v := range vs {
		if v > 0 {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	a.Scale = plot.LogScale{}
	a.Tick.Marker = logTicks{}
	a.Min, a.Max = lo/1.6, hi*1.6
}

// valueAxis sets a value axis for vs (with bounds, which must show too):
// logarithmic when they span decades, else linear from 0.
func valueAxis(a *plot.Axis, label string, vs []float64) {
	a.Label.Text = label
	if spansDecades(vs) {
		logAxis(a, vs)
		a.Label.Text += " (log scale)"
		return
	}
	hi := 0.0
	for _, v := range vs {
		hi = max(hi, v)
	}
	a.Min, a.Max = 0, max(hi*1.08, 1e-9)
	a.Tick.Marker = linearTicks{}
}

// linearTicks marks a linear axis at about six round values (1, 2, 2.5 or
// 5 times a power of ten apart), each labelled, with a minor tick between
// two (gonum's default labels as few as two on some ranges).
type linearTicks struct{}

// Ticks implements plot.Ticker.
func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', 4, 64)}}
	}
	raw := (hi - lo) / 6
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * p
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*p >= raw {
			step = m * p
			break
		}
	}
	var ts []plot.Tick
	for i := math.Ceil(lo / step * 2); i*step/2 <= hi*(1+1e-9); i++ {
		v := i * step / 2
		t := plot.Tick{Value: v}
		if int(i)%2 == 0 {
			t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			if math.Abs(v) < step*1e-9 {
				t.Label = "0"
			}
		}
		ts = append(ts, t)
	}
	return ts
}

// swatch is a legend thumbnail: a filled square.
type swatch struct{ c color.Color }

// Thumbnail implements plot.Thumbnailer.
func (s swatch) Thumbnail(c *draw.Canvas) {
	r := c.Rectangle
	c.FillPolygon(s.c, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}})
}

// saveAll writes p with leg beside it as every Format and returns the
// files written.
func saveAll(dir, name string, p *plot.Plot, leg plot.Legend) ([]string, error) {
	var files []string
	for _, ext := range Formats {
		f := filepath.Join(dir, name+"."+ext)
		if err := save(f, ext, p, leg); err != nil {
			return files, fmt.Errorf("chart: %s: %w", f, err)
		}
		files = append(files, f)
	}
	return files, nil
}

func save(file, format string, p *plot.Plot, leg plot.Legend) error {
	c, err := draw.NewFormattedCanvas(chartWidth, chartHeight, format)
	if err != nil {
		return err
	}
	dc := draw.New(c)
	// A title wider than the chart is set smaller until it fits.
	for p.Title.TextStyle.Rectangle(p.Title.Text).Size().X > dc.Size().X-10 && p.Title.TextStyle.Font.Size > 7 {
		p.Title.TextStyle.Font.Size -= 0.5
	}
	leg.Top, leg.Left = true, true
	leg.Padding = vg.Points(3)
	plotArea := dc
	if r := leg.Rectangle(dc); r.Size().X > 0 {
		w := r.Size().X + legendPad
		plotArea = draw.Crop(dc, 0, -w-legendPad, 0, 0)
		// The legend starts below the title, beside the data.
		top := p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding + 4
		leg.Draw(draw.Crop(dc, dc.Size().X-w, 0, 0, -top))
	}
	p.Draw(plotArea)
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// newPlot is a plot with a title saying which way is better.
func newPlot(title string, better Better) *plot.Plot {
	p := plot.New()
	p.Title.Text = title + " (" + better.String() + ")"
	p.Title.Padding = vg.Points(6)
	return p
}

// series is one bar series or line of a chart: its name and colour, and a
// value with its repetitions' range per category (bars) or x (lines).
type series struct {
	name    string
	system  string // the system measured
	variant string // its variant (the palette's key)
	color   color.Color
	dashed  bool
	pts     []point
}

// point is one value with the smallest and largest repetition (lo = hi =
// v when there is no spread).
type point struct {
	cat   int     // bars: the category's index
	x     float64 // lines: the x value
	v     float64
	lo    float64
	hi    float64
	bound float64 // bars: a target bound drawn across the category (0: none)
}

// values are every figure of ss, for the value axis.
func values(ss []series) []float64 {
	var vs []float64
	for _, s := range ss {
		for _, p := range s.pts {
			vs = append(vs, p.v, p.lo, p.hi)
			if p.bound > 0 {
				vs = append(vs, p.bound)
			}
		}
	}
	return vs
}

// label joins the non-empty parts of a series name.
func label(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" && p != "-" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " ")
}

// logTicks marks a logarithmic axis at 1, 2 and 5 times each power of ten,
// labelled, with unlabelled minor ticks between (plot.LogTicks labels only
// the powers of ten, too few on an axis that spans one or two decades).
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		p := math.Pow(10, e)
		for m := 1; m < 10; m++ {
			v := float64(m) * p
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}
