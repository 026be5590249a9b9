package tunnel

// The terminal output: one table with a row per cell (TCP, ping, latency)
// and a row per cell and size (UDP floods), each naming the ESP link the
// gateways reported (sluice: "socket", or "xdp" with its AF_XDP mode),
// then the ratios sluice / wireguard-go that the project's targets are
// stated in.

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Table formats results as fixed-width rows.
type Table struct{}

// Header is the table's header lines.
func (Table) Header() string {
	return fmt.Sprintf("%-36s %-20s %5s %7s %7s %8s %5s %7s %7s %7s %8s %7s %9s %6s %8s\n%-36s %-20s %5s %7s %7s %8s %5s %7s %7s %7s %8s %7s %9s %6s %8s",
		"", "ESP", "", "TCP 1", "TCP 4", "TCP 1", "gw", "ping", "lat", "lat", "lat", "UDP", "UDP", "UDP", "UDP",
		"cell", "link", "size", "Gbit/s", "Gbit/s", "Gb/cpu-s", "cores", "avg ms", "p50 us", "p99 us", "p99.9 us", "Gbit/s", "pps", "loss%", "Gb/cpu-s")
}

// Rows formats one cell's results: its size-independent row, then one row
// per flood size.
func (Table) Rows(c Cell, rs []Result) []string {
	get := func(size int, metric, format string) string {
		for _, r := range rs {
			if r.Size == size && r.Metric == metric && r.Cell == c {
				return fmt.Sprintf(format, r.Value)
			}
		}
		return "-"
	}
	var sizes []int
	for _, r := range rs {
		if r.Size > 0 && !slices.Contains(sizes, r.Size) {
			sizes = append(sizes, r.Size)
		}
	}
	slices.Sort(sizes)
	label, link := c.String(), c.LinkGot
	if link == "" {
		link = "-"
	}
	out := []string{fmt.Sprintf("%-36s %-20s %5s %7s %7s %8s %5s %7s %7s %7s %8s %7s %9s %6s %8s", label, link, "-",
		get(0, TCP1, "%.3f"), get(0, TCP4, "%.3f"), get(0, TCP1PerCPU, "%.2f"), get(0, GatewayCPU, "%.2f"),
		get(0, PingAvg, "%.3f"), get(0, LatP50, "%.0f"), get(0, LatP99, "%.0f"), get(0, LatP999, "%.0f"), "", "", "", "")}
	for _, s := range sizes {
		out = append(out, fmt.Sprintf("%-36s %-20s %5d %7s %7s %8s %5s %7s %7s %7s %8s %7s %9s %6s %8s", label, link, s,
			"", "", "", "", "", "", "", "",
			get(s, UDPRate, "%.3f"), get(s, UDPPPS, "%.0f"), get(s, UDPLoss, "%.1f"), get(s, UDPPerCPU, "%.2f")))
	}
	return out
}

// Ratio is one of the project's targets for tunnels, computed from one run: sluice's
// figure over wireguard-go's in the same tunnel count (or, for Scale, a
// system's figure at its most tunnels over its figure at one tunnel).
type Ratio struct {
	Target  string  `json:"target"`
	Cell    Cell    `json:"cell"` // the sluice cell (or, for scale, the cell with the most tunnels)
	Size    int     `json:"size"`
	Metric  string  `json:"metric"`
	Value   float64 `json:"value"` // the ratio
	Of      float64 `json:"of"`    // the numerator's value
	Over    float64 `json:"over"`  // the denominator's value
	Want    string  `json:"want"`  // ">= 1.5", "<= 1"
	Met     bool    `json:"met"`
	Explain string  `json:"explain"`
}

// target is one ratio target for tunnels.
type target struct {
	name   string
	metric string
	size   int // 0: size-independent; -1: the largest size; -2: the smallest
	min    float64
	max    float64 // 0: no upper bound
	expl   string
}

var targets = []target{
	{"tcp1", TCP1, 0, 1.5, 0, "TCP one stream, sluice / wireguard-go"},
	{"tcp4", TCP4, 0, 1.5, 0, "TCP four streams, sluice / wireguard-go"},
	{"tcp1_per_cpu", TCP1PerCPU, 0, 1.5, 0, "bits per CPU-second of both gateways (TCP one stream), sluice / wireguard-go"},
	{"udp_large_pps", UDPPPS, -1, 1.5, 0, "UDP flood of the largest size, packets delivered, sluice / wireguard-go"},
	{"udp_small_pps", UDPPPS, -2, 1.5, 0, "UDP flood of the smallest size, packets delivered, sluice / wireguard-go"},
	{"ping_avg", PingAvg, 0, 0, 1, "ping average, sluice / wireguard-go"},
	{"lat_p99", LatP99, 0, 0, 1, "UDP echo p99 at a fixed rate, sluice / wireguard-go"},
}

// Ratios computes the target ratios from results: for each sluice
// cell with a wireguard-go cell of the same tunnel count, and, for every
// tunnel system measured with more than one tunnel count, the UDP
// throughput at its most tunnels over its throughput at one tunnel.
func Ratios(rs []Result) []Ratio {
	find := func(c Cell, size int, metric string) (float64, bool) {
		for _, r := range rs {
			if r.Cell == c && r.Size == size && r.Metric == metric {
				return r.Value, true
			}
		}
		return 0, false
	}
	var cells []Cell
	var sizes []int
	for _, r := range rs {
		if !slices.Contains(cells, r.Cell) {
			cells = append(cells, r.Cell)
		}
		if r.Size > 0 && !slices.Contains(sizes, r.Size) {
			sizes = append(sizes, r.Size)
		}
	}
	slices.Sort(sizes)
	var out []Ratio
	add := func(t target, c Cell, size int, of, over float64) {
		if over == 0 {
			return
		}
		v := of / over
		met := v >= t.min && (t.max == 0 || v <= t.max)
		want := fmt.Sprintf(">= %g", t.min)
		if t.max > 0 {
			want = fmt.Sprintf("<= %g", t.max)
		}
		out = append(out, Ratio{Target: t.name, Cell: c, Size: size, Metric: t.metric, Value: v, Of: of, Over: over, Want: want, Met: met, Explain: t.expl})
	}
	for _, c := range cells {
		if c.System != Sluice {
			continue
		}
		wg := Cell{System: WireGuard, Encap: "udp", Engine: "-", Alg: WireGuardAlg, Tunnels: c.Tunnels}
		for _, t := range targets {
			size := t.size
			switch {
			case size == -1 && len(sizes) > 0:
				size = sizes[len(sizes)-1]
			case size == -2 && len(sizes) > 1:
				size = sizes[0]
			case size < 0:
				continue
			}
			of, ok1 := find(c, size, t.metric)
			over, ok2 := find(wg, size, t.metric)
			if ok1 && ok2 {
				add(t, c, size, of, over)
			}
		}
	}
	// Scale: most tunnels against one, by system configuration.
	scale := target{"tunnels_scale", UDPRate, 0, 0.9, 0, "UDP flood throughput at the most tunnels / at one tunnel"}
	for _, c := range cells {
		if c.Tunnels <= 1 {
			continue
		}
		one := c.WithTunnels(1)
		most := 0
		for _, x := range cells {
			if x.WithTunnels(1) == one {
				most = max(most, x.Tunnels)
			}
		}
		if !slices.Contains(cells, one) || c.Tunnels != most {
			continue // no one-tunnel cell, or not the most tunnels
		}
		for _, s := range sizes {
			of, ok1 := find(c, s, UDPRate)
			over, ok2 := find(one, s, UDPRate)
			if ok1 && ok2 {
				add(scale, c, s, of, over)
			}
		}
	}
	return out
}

// WriteRatios prints the ratios as a table.
func WriteRatios(w io.Writer, rs []Ratio) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nsluice's targets against wireguard-go (ratios from this run):\n")
	fmt.Fprintf(w, "%-14s %-36s %5s %10s %10s %7s %6s %s\n", "target", "cell", "size", "value", "against", "ratio", "want", "")
	for _, r := range rs {
		size := "-"
		if r.Size > 0 {
			size = strconv.Itoa(r.Size)
		}
		met := "met"
		if !r.Met {
			met = "MISSED"
		}
		fmt.Fprintf(w, "%-14s %-36s %5s %10s %10s %7.2f %6s %s\n", r.Target, r.Cell, size, fmtValue(r.Of), fmtValue(r.Over), r.Value, r.Want, met)
	}
}

// fmtValue prints a value with four significant digits.
func fmtValue(v float64) string {
	s := strconv.FormatFloat(v, 'g', 4, 64)
	if strings.Contains(s, "e") {
		s = strconv.FormatFloat(v, 'f', 0, 64)
	}
	return s
}
