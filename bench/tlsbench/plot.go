package tlsbench

// Charts of a run (gonum.org/v1/plot), each as PNG and SVG:
//
//   - handshakes-VERSION: server CPU per full handshake by key type, and per
//     resumed handshake, one bar per server;
//   - requests-cpu and requests-mib: server CPU per request and MiB per
//     server CPU-second by response size, one bar per server;
//   - storm: p50 and p99 of the latency probes, idle and during the storm,
//     by server;
//   - ratios: every target ratio next to its bound.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotFormats are the file types each chart is written in.
var plotFormats = []string{"png", "svg"}

// bars is the data of a grouped bar chart: a value per series and
// category.
type bars struct {
	title, ylabel string
	categories    []string
	series        []string
	values        map[[2]string]float64 // {series, category}
}

func newBars(title, ylabel string) *bars {
	return &bars{title: title, ylabel: ylabel, values: map[[2]string]float64{}}
}

func (b *bars) set(series, category string, v float64) {
	if !slices.Contains(b.series, series) {
		b.series = append(b.series, series)
	}
	if !slices.Contains(b.categories, category) {
		b.categories = append(b.categories, category)
	}
	b.values[[2]string{series, category}] = v
}

func (b *bars) empty() bool { return len(b.values) == 0 }

// plot draws b: one group of bars per category, one bar per series.
func (b *bars) plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = b.title
	p.Y.Label.Text = b.ylabel
	p.Legend.Top = true
	w := vg.Points(max(4, 60/float64(len(b.series))))
	for i, s := range b.series {
		vals := make(plotter.Values, len(b.categories))
		for j, c := range b.categories {
			vals[j] = b.values[[2]string{s, c}]
		}
		bc, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		bc.Color = plotutil.Color(i)
		bc.LineStyle.Width = 0
		bc.Offset = w * vg.Length(float64(i)-float64(len(b.series)-1)/2)
		p.Add(bc)
		p.Legend.Add(s, bc)
	}
	p.Add(plotter.NewGrid())
	p.NominalX(b.categories...)
	p.Y.Min = 0
	p.Y.Max *= 1.25 // room for the legend
	return p, nil
}

// WritePlots writes the charts of doc into dir (created if need be) and
// returns the files written.
func WritePlots(dir string, doc *Document) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tlsbench: plots: %w", err)
	}
	var files []string
	save := func(b *bars, name string) error {
		if b.empty() {
			return nil
		}
		p, err := b.plot()
		if err != nil {
			return fmt.Errorf("tlsbench: plot %s: %w", name, err)
		}
		for _, ext := range plotFormats {
			f := filepath.Join(dir, name+"."+ext)
			if err := p.Save(9*vg.Inch, 5*vg.Inch, f); err != nil {
				return fmt.Errorf("tlsbench: plot %s: %w", f, err)
			}
			files = append(files, f)
		}
		return nil
	}
	var versions []string
	for _, r := range doc.Results {
		if r.Metric == HSFullCPU && !slices.Contains(versions, r.Version) {
			versions = append(versions, r.Version)
		}
	}
	for _, v := range versions {
		b := newBars("Server CPU per handshake, TLS "+v+" (lower is better)", "µs")
		for _, r := range doc.Results {
			if r.Version != v {
				continue
			}
			switch r.Metric {
			case HSFullCPU:
				b.set(r.Server.String(), "full "+r.Key, r.Value)
			case HSResumedCPU:
				b.set(r.Server.String(), "resumed "+r.Key, r.Value)
			}
		}
		if err := save(b, "handshakes-"+v); err != nil {
			return files, err
		}
	}
	cpu := newBars("Server CPU per keep-alive request (lower is better)", "µs")
	mib := newBars("Response bytes per server CPU-second (higher is better)", "MiB per CPU-s")
	for _, r := range doc.Results {
		cat := SizeLabel(r.Size) + " TLS " + r.Version
		switch r.Metric {
		case ReqCPU:
			cpu.set(r.Server.String(), cat, r.Value)
		case ReqGiBCPU:
			mib.set(r.Server.String(), cat, mibPerCPUs(r.Value))
		}
	}
	if err := save(cpu, "requests-cpu"); err != nil {
		return files, err
	}
	if err := save(mib, "requests-mib"); err != nil {
		return files, err
	}
	storm := newBars("Small requests on open connections: idle and during an RSA-4096 handshake storm", "µs")
	for _, r := range doc.Results {
		switch r.Metric {
		case LatIdleP50, LatIdleP99, LatStormP50, LatStormP99:
			storm.set(metricLabels[r.Metric], r.Server.String(), r.Value)
		}
	}
	if err := save(storm, "storm"); err != nil {
		return files, err
	}
	ratios := newBars("Target ratios of issue 10 (bounds: <= 1, <= 1.2, <= 1.3, >= 1, <= 2)", "ratio")
	for _, r := range doc.Ratios {
		cat := r.Target + " " + r.Version
		ratios.set(r.Server.String(), cat, r.Value)
	}
	if err := save(ratios, "ratios"); err != nil {
		return files, err
	}
	return files, nil
}
