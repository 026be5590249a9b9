package chart

// The charts of `sluice bench tunnel`, each against the tunnel count:
//
//   - udp-SIZE: UDP flood throughput, for each flood size;
//   - tcp: TCP throughput, one stream (solid) and four (dashed);
//   - latency-p50, latency-p99: UDP echo round trips at a fixed rate;
//   - ratios-throughput and ratios-latency: sluice's figure over
//     wireguard-go's for each target, with the target's bound.

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/sluicegw/sluice/bench/tunnel"
)

// Tunnel writes the charts of doc into dir (created if need be) and
// returns the files written.
func Tunnel(dir string, doc *tunnel.Document) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	pal := newPalette()
	for _, r := range doc.Results {
		pal.add(r.System, r.Cell.WithTunnels(0).String())
	}
	var sizes []int
	for _, r := range doc.Results {
		if r.Size > 0 && !slices.Contains(sizes, r.Size) {
			sizes = append(sizes, r.Size)
		}
	}
	slices.Sort(sizes)
	var files []string
	line := func(name, title string, better Better, ylabel string, size int, metrics ...string) error {
		ss := tunnelSeries(doc.Results, pal, size, metrics)
		if len(ss) == 0 {
			return nil
		}
		p, leg, err := lineChart(title, better, "tunnels", ylabel, ss)
		if err != nil {
			return fmt.Errorf("chart: %s: %w", name, err)
		}
		fs, err := saveAll(dir, name, p, leg)
		files = append(files, fs...)
		return err
	}
	for _, s := range sizes {
		if err := line("udp-"+strconv.Itoa(s), fmt.Sprintf("UDP flood, %d-byte packets: received throughput", s), Higher,
			"Gbit/s (UDP payload)", s, tunnel.UDPRate); err != nil {
			return files, err
		}
	}
	for _, c := range []struct {
		name, title string
		better      Better
		ylabel      string
		metrics     []string
	}{
		{"tcp", "TCP throughput through tunnel 0 (iperf3; dashed: 4 streams)", Higher, "Gbit/s", []string{tunnel.TCP1, tunnel.TCP4}},
		{"latency-p50", "UDP echo round trip at a fixed rate: p50", Lower, "µs", []string{tunnel.LatP50}},
		{"latency-p99", "UDP echo round trip at a fixed rate: p99", Lower, "µs", []string{tunnel.LatP99}},
	} {
		if err := line(c.name, c.title, c.better, c.ylabel, 0, c.metrics...); err != nil {
			return files, err
		}
	}
	var rs []ratio
	for _, r := range doc.Ratios {
		cat := r.Target
		if r.Size > 0 {
			cat += " " + strconv.Itoa(r.Size) + "B"
		}
		if r.Cell.Tunnels > 1 {
			cat += fmt.Sprintf(" x%d", r.Cell.Tunnels)
		}
		rs = append(rs, ratio{cat: cat, system: r.Cell.System, variant: r.Cell.WithTunnels(0).String(), value: r.Value, want: r.Want})
	}
	fs, err := ratioCharts(dir, "sluice / wireguard-go", " (tunnels_scale: most tunnels / one)", "", rs, pal)
	return append(files, fs...), err
}

// tunnelSeries are the lines of metrics at size: one per system
// configuration (its cell without the tunnel count) and metric, the second
// metric dashed.
func tunnelSeries(rs []tunnel.Result, pal *palette, size int, metrics []string) []series {
	var ss []series
	idx := map[string]int{}
	for _, r := range rs {
		mi := slices.Index(metrics, r.Metric)
		if r.Size != size || mi < 0 || r.Value <= 0 {
			continue
		}
		variant := r.Cell.WithTunnels(0).String()
		name := variant
		if len(metrics) > 1 {
			name += " " + metricNames[r.Metric]
		}
		i, ok := idx[name]
		if !ok {
			i = len(ss)
			idx[name] = i
			ss = append(ss, series{name: name, system: r.System, variant: variant, color: pal.color(r.System, variant), dashed: mi > 0})
		}
		lo, hi := r.Value, r.Value
		if r.Spread.N > 1 {
			lo, hi = r.Spread.Min, r.Spread.Max
		}
		ss[i].pts = append(ss[i].pts, point{x: float64(r.Tunnels), v: r.Value, lo: lo, hi: hi})
	}
	pal.sortSeries(ss)
	return ss
}

// metricNames label the metrics that share a chart.
var metricNames = map[string]string{
	tunnel.TCP1: "1 stream",
	tunnel.TCP4: "4 streams",
}
