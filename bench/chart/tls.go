package chart

// The charts of `sluice bench tls`, one bar per server:
//
//   - handshakes-VERSION: server CPU per full handshake by key type, and
//     per resumed handshake;
//   - requests-cpu: server CPU per keep-alive request by response size;
//   - requests-mib: response MiB per server CPU-second by response size;
//   - storm-p50, storm-p99: small requests on open connections, idle and
//     during an RSA-4096 handshake storm;
//   - ratios-higher and ratios-lower: sluice's figure over nginx's for each
//     target (the storm's: a server's own p99 during the storm over idle),
//     with the target's bound.

import (
	"fmt"
	"os"
	"slices"

	"github.com/sluicegw/sluice/bench/tlsbench"
)

// TLS writes the charts of doc into dir (created if need be) and returns
// the files written.
func TLS(dir string, doc *tlsbench.Document) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	pal := newPalette()
	for _, r := range doc.Results {
		pal.add(r.System, r.Server.String())
	}
	var files []string
	bars := func(name, title string, better Better, ylabel string, pick func(r tlsbench.Result) (cat string, ok bool), f func(float64) float64) error {
		var cats []string
		var ss []series
		idx := map[string]int{}
		for _, r := range doc.Results {
			cat, ok := pick(r)
			if !ok || r.Value <= 0 {
				continue
			}
			ci := indexOrAdd(&cats, cat)
			s := r.Server.String()
			i, ok := idx[s]
			if !ok {
				i = len(ss)
				idx[s] = i
				ss = append(ss, series{name: s, system: r.System, variant: s, color: pal.color(r.System, s)})
			}
			v, lo, hi := r.Value, r.Value, r.Value
			if r.Spread.N > 1 {
				lo, hi = r.Spread.Min, r.Spread.Max
			}
			if f != nil {
				// A decreasing transformation swaps the range's ends.
				v, lo, hi = f(v), f(hi), f(lo)
			}
			ss[i].pts = append(ss[i].pts, point{cat: ci, v: v, lo: lo, hi: hi})
		}
		if len(ss) == 0 {
			return nil
		}
		pal.sortSeries(ss)
		p, leg := barChart(title, better, ylabel, cats, ss, 0)
		fs, err := saveAll(dir, name, p, leg)
		files = append(files, fs...)
		return err
	}
	var versions []string
	for _, r := range doc.Results {
		if r.Metric == tlsbench.HSFullCPU && !slices.Contains(versions, r.Version) {
			versions = append(versions, r.Version)
		}
	}
	for _, v := range versions {
		err := bars("handshakes-"+v, "Server CPU per handshake, TLS "+v, Lower, "µs per handshake", func(r tlsbench.Result) (string, bool) {
			switch {
			case r.Version != v:
				return "", false
			case r.Metric == tlsbench.HSFullCPU:
				return "full " + r.Key, true
			case r.Metric == tlsbench.HSResumedCPU:
				return "resumed " + r.Key, true
			}
			return "", false
		}, nil)
		if err != nil {
			return files, err
		}
	}
	reqCat := func(metric string) func(r tlsbench.Result) (string, bool) {
		return func(r tlsbench.Result) (string, bool) {
			return tlsbench.SizeLabel(r.Size) + " TLS " + r.Version, r.Metric == metric
		}
	}
	if err := bars("requests-cpu", "Server CPU per keep-alive request", Lower, "µs per request", reqCat(tlsbench.ReqCPU), nil); err != nil {
		return files, err
	}
	if err := bars("requests-mib", "Response bytes per server CPU-second", Higher, "MiB per CPU-second", reqCat(tlsbench.ReqGiBCPU), tlsbench.MiBPerCPUSecond); err != nil {
		return files, err
	}
	for _, q := range []struct{ name, idle, storm string }{
		{"p50", tlsbench.LatIdleP50, tlsbench.LatStormP50},
		{"p99", tlsbench.LatIdleP99, tlsbench.LatStormP99},
	} {
		err := bars("storm-"+q.name, "Small requests on open connections, idle and during an RSA-4096 handshake storm: "+q.name, Lower, "µs",
			func(r tlsbench.Result) (string, bool) {
				switch r.Metric {
				case q.idle:
					return "idle", true
				case q.storm:
					return "during the storm", true
				}
				return "", false
			}, nil)
		if err != nil {
			return files, err
		}
	}
	var rs []ratio
	for _, r := range doc.Ratios {
		cat := r.Target + " TLS " + r.Version
		rs = append(rs, ratio{cat: cat, system: r.Server.System, variant: r.Server.String(), value: r.Value, want: r.Want})
	}
	fs, err := ratioCharts(dir, "sluice / nginx", "", " (storm_p99: a server's own, storm / idle)", rs, pal)
	return append(files, fs...), err
}
