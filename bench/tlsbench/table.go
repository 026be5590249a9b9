package tlsbench

// The terminal output: a table with one row per metric of a group (and
// size), one column per server, and beside each sluice column its ratio to
// nginx's figure in the same row; then the ratios that the project's TLS targets
// are stated in.

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Table formats results; Servers are its columns, in order.
type Table struct {
	Servers []Server
}

// nginxColumn is the index of nginx among t's servers, or -1.
func (t Table) nginxColumn() int {
	return slices.IndexFunc(t.Servers, func(s Server) bool { return s.System == Nginx })
}

// ratioColumn says whether server i has a ratio column beside it.
func (t Table) ratioColumn(i int) bool {
	return t.Servers[i].System == Sluice && t.nginxColumn() >= 0
}

const (
	labelWidth = 50
	valueWidth = 13
	ratioWidth = 7
)

// Header is the table's header line.
func (t Table) Header() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s", labelWidth, "group / metric")
	for i, s := range t.Servers {
		fmt.Fprintf(&b, " %*s", valueWidth, s)
		if t.ratioColumn(i) {
			fmt.Fprintf(&b, " %*s", ratioWidth, "/nginx")
		}
	}
	return b.String()
}

// metricLabels are the table's names of the metrics.
var metricLabels = map[string]string{
	HSFull:        "full handshakes/s",
	HSFullCPU:     "full: server CPU us/handshake",
	HSFullCores:   "full: server cores busy",
	HSResumed:     "resumed handshakes/s",
	HSResumedCPU:  "resumed: server CPU us/handshake",
	HSResumedMiss: "resumed: % not resumed",
	Req:           "requests/s",
	ReqCPU:        "server CPU us/request",
	ReqMiBs:       "MiB/s",
	ReqGiBCPU:     "server CPU s/GiB",
	ReqCores:      "server cores busy",
	LatIdleP50:    "idle: p50 us",
	LatIdleP99:    "idle: p99 us",
	LatStormP50:   "storm: p50 us",
	LatStormP99:   "storm: p99 us",
	StormHS:       "storm: RSA handshakes/s",
	StormCores:    "storm: server cores busy",
}

// Rows formats one group's results: a row per metric and size.
func (t Table) Rows(g Group, rs []Result) []string {
	type rowKey struct {
		size   int
		metric string
	}
	var keys []rowKey
	for _, r := range rs {
		k := rowKey{r.Size, r.Metric}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.SortStableFunc(keys, func(a, b rowKey) int {
		if a.size != b.size {
			return a.size - b.size
		}
		return slices.Index(metricOrder, a.metric) - slices.Index(metricOrder, b.metric)
	})
	get := func(s Server, k rowKey) (float64, bool) {
		for _, r := range rs {
			if r.Server == s && r.Size == k.size && r.Metric == k.metric {
				return r.Value, true
			}
		}
		return 0, false
	}
	var out []string
	ng := t.nginxColumn()
	for _, k := range keys {
		label := g.String() + " "
		if k.size > 0 {
			label += SizeLabel(k.size) + " "
		}
		label += metricLabels[k.metric]
		var b strings.Builder
		fmt.Fprintf(&b, "%-*s", labelWidth, label)
		for i, s := range t.Servers {
			v, ok := get(s, k)
			cell := "-"
			if ok {
				cell = fmtValue(v)
			}
			fmt.Fprintf(&b, " %*s", valueWidth, cell)
			if t.ratioColumn(i) {
				ratio := "-"
				if base, okb := get(t.Servers[ng], k); ok && okb && base > 0 {
					ratio = fmt.Sprintf("%.2f", v/base)
				}
				fmt.Fprintf(&b, " %*s", ratioWidth, ratio)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// fmtValue prints a value with four significant digits, without an
// exponent.
func fmtValue(v float64) string {
	s := strconv.FormatFloat(v, 'g', 4, 64)
	if strings.Contains(s, "e") {
		s = strconv.FormatFloat(v, 'f', 0, 64)
	}
	return s
}

// Ratio is one of the project's TLS targets, computed from one run: a sluice
// server's figure over nginx's in the same group (or, for the storm, a
// server's p99 during the storm over its own idle p99).
type Ratio struct {
	Target  string  `json:"target"`
	Server  Server  `json:"server"`
	Key     string  `json:"key"`
	Version string  `json:"version"`
	Size    int     `json:"size"`
	Value   float64 `json:"value"` // the ratio
	Of      float64 `json:"of"`    // the numerator's value
	Over    float64 `json:"over"`  // the denominator's value
	Unit    string  `json:"unit"`  // of Of and Over
	Want    string  `json:"want"`  // "<= 1.2", ">= 1"
	// Binding says whether the target applies to this server (the RSA-2048
	// target is the openssl engine's, the storm's is sched's; the others
	// are reported beside them). Met is only meaningful when it does.
	Binding bool   `json:"binding"`
	Met     bool   `json:"met"`
	Explain string `json:"explain"`
}

// target is one ratio target of the TLS gateway.
type target struct {
	name    string
	key     string // "" any
	size    int    // 0: handshakes and storm
	metric  string
	min     float64 // 0: no lower bound
	max     float64 // 0: no upper bound
	engines []string
	expl    string
	// of turns a result's value into the figure compared (nil: as is), in
	// unit.
	of   func(float64) float64
	unit string
}

// MiBPerCPUSecond turns CPU seconds per GiB into MiB per CPU-second.
func MiBPerCPUSecond(sPerGiB float64) float64 {
	if sPerGiB <= 0 {
		return 0
	}
	return 1024 / sPerGiB
}

var targets = []target{
	{name: "ecdsa_full", key: ECDSAP256, metric: HSFullCPU, max: 1, expl: "ECDSA P-256 full handshake, server CPU per handshake, sluice / nginx", unit: unitUs},
	{name: "ecdsa_resumed", key: ECDSAP256, metric: HSResumedCPU, max: 1, expl: "ECDSA P-256 resumed handshake, server CPU per handshake, sluice / nginx", unit: unitUs},
	{name: "rsa2048_full", key: RSA2048, metric: HSFullCPU, max: 1.2, engines: []string{"openssl"}, expl: "RSA-2048 full handshake, server CPU per handshake, sluice / nginx (the openssl engine's target; soft and sched beside it)", unit: unitUs},
	{name: "req_1m", size: 1 << 20, metric: ReqGiBCPU, min: 1, of: MiBPerCPUSecond, expl: "1 MiB responses, MiB per server CPU-second, sluice / nginx", unit: "MiB/cpu-s"},
	{name: "req_1k", size: 1 << 10, metric: ReqCPU, max: 1.3, expl: "1 KiB keep-alive responses, server CPU per request, sluice / nginx", unit: unitUs},
}

// stormTarget is the storm's target: a server's own p99 during the storm
// over its idle p99, at most 2 with sched.
var stormTarget = target{name: "storm_p99", metric: LatStormP99, max: 2, engines: []string{"sched"},
	expl: "p99 of small requests on open connections during an RSA-4096 handshake storm / idle (the sched engine's target; every server reported)", unit: unitUs}

// Ratios computes the TLS target ratios from results.
func Ratios(rs []Result) []Ratio {
	find := func(s Server, key, version string, size int, metric string) (float64, bool) {
		for _, r := range rs {
			if r.Server == s && r.Key == key && r.Version == version && r.Size == size && r.Metric == metric {
				return r.Value, true
			}
		}
		return 0, false
	}
	var out []Ratio
	add := func(t target, r Result, of, over float64) {
		if over <= 0 {
			return
		}
		v := of / over
		met := (t.min == 0 || v >= t.min) && (t.max == 0 || v <= t.max)
		want := fmt.Sprintf("<= %g", t.max)
		if t.min > 0 {
			want = fmt.Sprintf(">= %g", t.min)
		}
		binding := len(t.engines) == 0 || slices.Contains(t.engines, r.Engine)
		out = append(out, Ratio{Target: t.name, Server: r.Server, Key: r.Key, Version: r.Version, Size: r.Size,
			Value: v, Of: of, Over: over, Unit: t.unit, Want: want, Binding: binding, Met: met, Explain: t.expl})
	}
	nginx := Server{System: Nginx, Engine: "-"}
	for _, t := range targets {
		for _, r := range rs {
			if r.System != Sluice || r.Metric != t.metric || r.Size != t.size || (t.key != "" && r.Key != t.key) {
				continue
			}
			base, ok := find(nginx, r.Key, r.Version, r.Size, r.Metric)
			if !ok {
				continue
			}
			of, over := r.Value, base
			if t.of != nil {
				of, over = t.of(of), t.of(over)
			}
			add(t, r, of, over)
		}
	}
	for _, r := range rs {
		if r.Metric != LatStormP99 {
			continue
		}
		if idle, ok := find(r.Server, r.Key, r.Version, 0, LatIdleP99); ok {
			add(stormTarget, r, r.Value, idle)
		}
	}
	return out
}

// WriteRatios prints the ratios as a table.
func WriteRatios(w io.Writer, rs []Ratio) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nsluice's TLS targets against nginx (ratios from this run):\n")
	fmt.Fprintf(w, "%-14s %-14s %-10s %4s %5s %10s %10s %-10s %6s %6s %s\n", "target", "server", "key", "tls", "size", "value", "against", "unit", "ratio", "want", "")
	for _, r := range rs {
		size := "-"
		if r.Size > 0 {
			size = SizeLabel(r.Size)
		}
		met := "met"
		switch {
		case !r.Binding:
			met = "(reported)"
		case !r.Met:
			met = "MISSED"
		}
		against := fmtValue(r.Over)
		if r.Target == stormTarget.name {
			against += " idle"
		}
		fmt.Fprintf(w, "%-14s %-14s %-10s %4s %5s %10s %10s %-10s %6.2f %6s %s\n", r.Target, r.Server, r.Key, r.Version, size,
			fmtValue(r.Of), against, r.Unit, r.Value, r.Want, met)
	}
}
