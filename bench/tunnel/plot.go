package tunnel

// Charts of a run (gonum.org/v1/plot), each as PNG and SVG:
//
//   - udp-SIZE: UDP flood throughput against tunnels, one line per system
//     configuration, for each flood size;
//   - tcp: TCP throughput (one and four streams) against tunnels;
//   - latency: UDP echo p50 and p99 against tunnels;
//   - ratios: sluice / wireguard-go for each target ratio, next to the
//     target, when both ran.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotFormats are the file types each chart is written in.
var plotFormats = []string{"png", "svg"}

// WritePlots writes the charts of doc into dir (created if need be) and
// returns the files written.
func WritePlots(dir string, doc *Document) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: plots: %w", err)
	}
	var files []string
	save := func(p *plot.Plot, name string) error {
		for _, ext := range plotFormats {
			f := filepath.Join(dir, name+"."+ext)
			if err := p.Save(8*vg.Inch, 5*vg.Inch, f); err != nil {
				return fmt.Errorf("bench: plot %s: %w", f, err)
			}
			files = append(files, f)
		}
		return nil
	}
	var sizes []int
	for _, r := range doc.Results {
		if r.Size > 0 && !slices.Contains(sizes, r.Size) {
			sizes = append(sizes, r.Size)
		}
	}
	slices.Sort(sizes)
	for _, s := range sizes {
		p, err := linesByTunnels(doc.Results, fmt.Sprintf("UDP flood, %d-byte packets: received throughput", s), "Gbit/s (UDP payload)", s, UDPRate)
		if err != nil {
			return files, err
		}
		if err := save(p, "udp-"+strconv.Itoa(s)); err != nil {
			return files, err
		}
	}
	for _, ch := range []struct {
		name, title, y string
		metrics        []string
	}{
		{"tcp", "TCP throughput (iperf3, through tunnel 0)", "Gbit/s", []string{TCP1, TCP4}},
		{"latency", "UDP echo round trip at a fixed rate", "µs", []string{LatP50, LatP99}},
	} {
		p, err := linesByTunnels(doc.Results, ch.title, ch.y, 0, ch.metrics...)
		if err != nil {
			return files, err
		}
		if err := save(p, ch.name); err != nil {
			return files, err
		}
	}
	if len(doc.Ratios) > 0 {
		p, err := ratioChart(doc.Ratios)
		if err != nil {
			return files, err
		}
		if err := save(p, "ratios"); err != nil {
			return files, err
		}
	}
	return files, nil
}

// linesByTunnels plots metrics at size against tunnel count, one line per
// system configuration and metric.
func linesByTunnels(rs []Result, title, ylabel string, size int, metrics ...string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "tunnels"
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	type key struct {
		cell   Cell
		metric string
	}
	var keys []key
	pts := map[key]plotter.XYs{}
	for _, r := range rs {
		if r.Size != size || !slices.Contains(metrics, r.Metric) {
			continue
		}
		k := key{r.Cell.WithTunnels(0), r.Metric}
		if _, ok := pts[k]; !ok {
			keys = append(keys, k)
		}
		pts[k] = append(pts[k], plotter.XY{X: float64(r.Tunnels), Y: r.Value})
	}
	var vs []any
	for _, k := range keys {
		xys := pts[k]
		slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
		name := k.cell.String()
		if len(metrics) > 1 {
			name += " " + k.metric
		}
		vs = append(vs, name, xys)
	}
	if len(vs) > 0 {
		if err := plotutil.AddLinePoints(p, vs...); err != nil {
			return nil, err
		}
	}
	p.Y.Max *= 1.3 // room for the legend above the lines
	p.X.Min, p.X.Max = min(p.X.Min, 0), p.X.Max+1
	return p, nil
}

// ratioChart draws each ratio as a bar, labelled with its target.
func ratioChart(rs []Ratio) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "sluice / wireguard-go (targets: >= 1.5 for throughput, <= 1 for latency)"
	p.Y.Label.Text = "ratio"
	var vals plotter.Values
	var names []string
	for _, r := range rs {
		vals = append(vals, r.Value)
		n := r.Target
		if r.Size > 0 {
			n += " " + strconv.Itoa(r.Size)
		}
		if r.Cell.Tunnels > 1 {
			n += fmt.Sprintf(" x%d", r.Cell.Tunnels)
		}
		names = append(names, n)
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(12))
	if err != nil {
		return nil, err
	}
	bars.Color = plotutil.Color(0)
	p.Add(bars, plotter.NewGrid())
	one := plotter.NewFunction(func(float64) float64 { return 1 })
	one.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(one)
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0.6
	p.X.Tick.Label.XAlign = -1.0 // left of the tick: rotated labels hang below it
	p.Y.Min = 0
	return p, nil
}
