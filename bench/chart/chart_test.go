package chart

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/bench"
	"github.com/sluicegw/sluice/bench/tlsbench"
	"github.com/sluicegw/sluice/bench/tunnel"
)

// chartDir is where a test draws its charts: SLUICE_CHART_DIR when set
// (to look at them), else a temporary directory.
func chartDir(t *testing.T, name string) string {
	if d := os.Getenv("SLUICE_CHART_DIR"); d != "" {
		return filepath.Join(d, name)
	}
	return filepath.Join(t.TempDir(), name)
}

// spread is a made-up range of three repetitions around v.
func spread(v float64) bench.Spread { return bench.Spread{Min: v * 0.9, Max: v * 1.07, N: 3} }

// sampleTunnel is a run of every system, two sluice algorithms, 1, 10 and
// 200 tunnels and two sizes, with figures of the shapes seen on this
// machine.
func sampleTunnel() *tunnel.Document {
	doc := &tunnel.Document{}
	add := func(c tunnel.Cell, size int, m string, v float64) {
		doc.Results = append(doc.Results, tunnel.Result{Cell: c, Size: size, Metric: m, Value: v, Spread: spread(v)})
	}
	cells := []struct {
		c     tunnel.Cell
		scale float64
	}{
		{tunnel.Cell{System: tunnel.Veth, Encap: "-", Engine: "-", Alg: "-", Tunnels: 1}, 12},
	}
	for _, n := range []int{1, 10, 200} {
		f := 1 / (1 + float64(n)/400)
		cells = append(cells,
			struct {
				c     tunnel.Cell
				scale float64
			}{tunnel.Cell{System: tunnel.Sluice, Encap: "udp", Engine: "soft", Alg: "aes128gcm16", Tunnels: n}, 1.2 * f},
			struct {
				c     tunnel.Cell
				scale float64
			}{tunnel.Cell{System: tunnel.Sluice, Encap: "udp", Engine: "soft", Alg: tunnel.WireGuardAlg, Tunnels: n}, 1.0 * f},
			struct {
				c     tunnel.Cell
				scale float64
			}{tunnel.Cell{System: tunnel.WireGuard, Encap: "udp", Engine: "-", Alg: tunnel.WireGuardAlg, Tunnels: n}, 0.9 * f})
	}
	for _, c := range cells {
		add(c.c, 0, tunnel.TCP1, 1.1*c.scale)
		add(c.c, 0, tunnel.TCP4, 1.6*c.scale)
		add(c.c, 0, tunnel.PingAvg, 0.2/c.scale)
		add(c.c, 0, tunnel.LatP50, 60/c.scale)
		add(c.c, 0, tunnel.LatP99, 900/c.scale)
		for _, s := range []int{64, 1400} {
			add(c.c, s, tunnel.UDPRate, c.scale*float64(s)/1400)
			add(c.c, s, tunnel.UDPPPS, c.scale*1e5)
		}
	}
	doc.Ratios = tunnel.Ratios(doc.Results)
	return doc
}

// sampleTLS is a run of nginx and sluice with three engines, three key
// types, both versions, three sizes and the storm.
func sampleTLS() *tlsbench.Document {
	doc := &tlsbench.Document{}
	servers := []tlsbench.Server{{System: tlsbench.Nginx, Engine: "-"}, {System: tlsbench.Sluice, Engine: "soft"},
		{System: tlsbench.Sluice, Engine: "sched"}, {System: tlsbench.Sluice, Engine: "openssl"}}
	add := func(s tlsbench.Server, key, v string, size int, m string, x float64) {
		doc.Results = append(doc.Results, tlsbench.Result{Server: s, Key: key, Version: v, Size: size, Metric: m, Value: x, Unit: tlsbench.Units[m], Spread: spread(x)})
	}
	for _, v := range []string{"1.2", "1.3"} {
		for ki, k := range []string{tlsbench.ECDSAP256, tlsbench.RSA2048, tlsbench.RSA4096} {
			for si, s := range servers {
				f := 1 + 0.15*float64(si)
				add(s, k, v, 0, tlsbench.HSFullCPU, []float64{150, 900, 5200}[ki]*f)
				if si < 2 {
					add(s, k, v, 0, tlsbench.HSResumedCPU, 45*f)
				}
				if ki == 0 && si < 2 {
					for zi, z := range []int{1 << 10, 64 << 10, 1 << 20} {
						add(s, k, v, z, tlsbench.ReqCPU, []float64{12, 60, 800}[zi]*f)
						add(s, k, v, z, tlsbench.ReqGiBCPU, []float64{11, 1.1, 0.8}[zi]*f)
					}
				}
			}
		}
	}
	for si, s := range servers {
		f := 1 + 0.5*float64(si)
		add(s, tlsbench.RSA4096, "1.3", 0, tlsbench.LatIdleP50, 90*f)
		add(s, tlsbench.RSA4096, "1.3", 0, tlsbench.LatIdleP99, 400*f)
		add(s, tlsbench.RSA4096, "1.3", 0, tlsbench.LatStormP50, 300*f)
		add(s, tlsbench.RSA4096, "1.3", 0, tlsbench.LatStormP99, 9000*f)
	}
	doc.Ratios = tlsbench.Ratios(doc.Results)
	return doc
}

// checkCharts checks that files are the charts named want, each as PNG
// and SVG, the PNGs decodable.
func checkCharts(t *testing.T, files []string, want []string) {
	t.Helper()
	var got []string
	for _, f := range files {
		got = append(got, filepath.Base(f))
	}
	for _, n := range want {
		for _, ext := range Formats {
			if !slices.Contains(got, n+"."+ext) {
				t.Errorf("no %s.%s in %v", n, ext, got)
			}
		}
	}
	if len(got) != len(want)*len(Formats) {
		t.Errorf("charts %v, want %v", got, want)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".png") {
			if _, err := png.Decode(bytes.NewReader(b)); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
		if strings.HasSuffix(f, ".svg") && !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("%s is not an SVG", f)
		}
	}
}

func TestTunnelCharts(t *testing.T) {
	files, err := Tunnel(chartDir(t, "tunnel"), sampleTunnel())
	if err != nil {
		t.Fatal(err)
	}
	checkCharts(t, files, []string{"udp-64", "udp-1400", "tcp", "latency-p50", "latency-p99", "ratios-higher", "ratios-lower"})
}

func TestTLSCharts(t *testing.T) {
	files, err := TLS(chartDir(t, "tls"), sampleTLS())
	if err != nil {
		t.Fatal(err)
	}
	checkCharts(t, files, []string{"handshakes-1.2", "handshakes-1.3", "requests-cpu", "requests-mib", "storm-p50", "storm-p99", "ratios-higher", "ratios-lower"})
}

// TestPalette: a system has its own hue in every chart, and an engine its
// shade whatever other engines ran beside it.
func TestPalette(t *testing.T) {
	a, b := newPalette(), newPalette()
	for _, v := range []string{"sluice/sched", "sluice/soft", "sluice/openssl"} {
		a.add("sluice", v)
	}
	b.add("sluice", "sluice/soft")
	if a.color("sluice", "sluice/soft") != b.color("sluice", "sluice/soft") {
		t.Errorf("sluice/soft changes colour with the engines beside it")
	}
	seen := map[any]string{}
	for _, sys := range []string{"veth", "sluice", "wireguard-go", "nginx"} {
		a.add(sys, sys)
		c := a.color(sys, sys)
		if other, ok := seen[c]; ok {
			t.Errorf("%s and %s share a colour", sys, other)
		}
		seen[c] = sys
	}
}

// TestLinearTicks: a linear axis is labelled at round values, at least
// four of them.
func TestLinearTicks(t *testing.T) {
	var labels []string
	for _, tk := range (linearTicks{}).Ticks(0, 2.6) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if strings.Join(labels, " ") != "0 0.5 1 1.5 2 2.5" {
		t.Errorf("labels %q", labels)
	}
}
