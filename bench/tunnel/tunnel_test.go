package tunnel

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/gateway"
)

func testOptions() Options {
	return Options{Systems: Systems, Engines: []string{"soft", "sched"}, Algs: []string{"aes128gcm16"},
		Sizes: []int{64, 1400}, Tunnels: []int{1, 10}, Duration: time.Second, Repeat: 3, LatencyRate: 1000}
}

func TestCells(t *testing.T) {
	o := testOptions()
	cs := o.Cells()
	// veth once, sluice 2 engines x 2 tunnel counts, wireguard-go 2.
	if len(cs) != 1+4+2 {
		t.Fatalf("%d cells, want 7: %v", len(cs), cs)
	}
	if cs[0].System != Veth || cs[0].Tunnels != 1 {
		t.Errorf("first cell %+v, want veth", cs[0])
	}
	for _, c := range cs[1:5] {
		if c.System != Sluice || c.Encap != "udp" || c.Workers != 0 {
			t.Errorf("cell %+v, want sluice with default workers", c)
		}
	}
	if c := cs[6]; c.System != WireGuard || c.Alg != WireGuardAlg || c.Tunnels != 10 {
		t.Errorf("last cell %+v", c)
	}
	o.Workers = []int{1, 2}
	if n := len(o.Cells()); n != 1+8+2 {
		t.Errorf("with two worker counts: %d cells, want 11", n)
	}
	if got := o.StepsPerCell(); got != 3*(4+2) {
		t.Errorf("StepsPerCell = %d", got)
	}
	if s := (Cell{System: Sluice, Engine: "soft", Alg: "aes128gcm16", Tunnels: 10, Workers: 2}).String(); s != "sluice soft aes128gcm16 x10 w2" {
		t.Errorf("label %q", s)
	}
	if s := (Cell{System: Sluice, Engine: "soft", Alg: "aes128gcm16", Link: LinkXDP, Tunnels: 10}).String(); s != "sluice soft aes128gcm16 xdp x10" {
		t.Errorf("label %q", s)
	}
}

// TestCellsLinks: --links socket,xdp measures sluice once per link, in
// one run beside veth and wireguard-go, which have no link of their own.
func TestCellsLinks(t *testing.T) {
	o := testOptions()
	o.Engines, o.Tunnels = []string{"soft"}, []int{1}
	o.Links = []string{LinkSocket, LinkXDP}
	cs := o.Cells()
	if len(cs) != 1+2+1 {
		t.Fatalf("%d cells, want 4: %v", len(cs), cs)
	}
	if cs[0].Link != "" || cs[3].Link != "" {
		t.Errorf("veth or wireguard-go cell with a link: %v", cs)
	}
	if cs[1].Link != LinkSocket || cs[2].Link != LinkXDP || cs[1].System != Sluice || cs[2].System != Sluice {
		t.Errorf("sluice cells %+v and %+v, want socket then xdp", cs[1], cs[2])
	}
	o.Links = nil
	if cs := o.Cells(); cs[1].Link != LinkAuto {
		t.Errorf("no --links: cell %+v, want link auto (the default a user gets)", cs[1])
	}
	o.Links = []string{"dpdk"}
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "--links") {
		t.Errorf("unknown link: %v", err)
	}
}

// TestLinkGot: the link column says what both gateways reported: the
// AF_XDP mode, or the sockets (and that auto fell back).
func TestLinkGot(t *testing.T) {
	xdp := &gateway.ESPLinkInfo{Config: "xdp", Kind: "xdp", Mode: "copy native", Interface: "wan0", Queues: 1}
	sock := &gateway.ESPLinkInfo{Config: "socket", Kind: "socket"}
	auto := &gateway.ESPLinkInfo{Config: "auto", Kind: "socket", Why: "AF_XDP: no"}
	for _, tc := range []struct {
		a, b *gateway.ESPLinkInfo
		want string
	}{
		{xdp, xdp, "xdp copy native"},
		{sock, sock, "socket"},
		{auto, auto, "socket"},
		{xdp, auto, "A xdp copy native; B socket"},
		{nil, nil, "?"},
	} {
		if got := linkGot([2]*gateway.ESPLinkInfo{tc.a, tc.b}); got != tc.want {
			t.Errorf("linkGot(%+v, %+v) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	if err := func() error { o := testOptions(); return o.Check() }(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for name, mod := range map[string]func(*Options){
		"no systems":     func(o *Options) { o.Systems = nil },
		"unknown system": func(o *Options) { o.Systems = []string{"ipsec"} },
		"short":          func(o *Options) { o.Duration = 500 * time.Millisecond },
		"repeat 0":       func(o *Options) { o.Repeat = 0 },
		"size small":     func(o *Options) { o.Sizes = []int{20} },
		"size big":       func(o *Options) { o.Sizes = []int{1500} },
		"no tunnels":     func(o *Options) { o.Tunnels = nil },
		"tunnels 300":    func(o *Options) { o.Tunnels = []int{300} },
		"workers 0":      func(o *Options) { o.Workers = []int{0} },
		"unknown link":   func(o *Options) { o.Links = []string{"kernel"} },
		"no engines":     func(o *Options) { o.Engines = nil },
		"rate 0":         func(o *Options) { o.LatencyRate = 0 },
	} {
		o := testOptions()
		mod(&o)
		if err := o.Check(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestSluiceConfigs: the generated configurations of 200 tunnels (and of
// one, with workers) pass the gateway's own validation, and mirror each
// other.
func TestSluiceConfigs(t *testing.T) {
	for _, c := range []Cell{
		{System: Sluice, Encap: "udp", Engine: "soft", Alg: "aes128gcm16", Tunnels: 200, Link: LinkAuto},
		{System: Sluice, Encap: "udp", Engine: "sched", Alg: "aes128-sha256", Tunnels: 1, Workers: 2, Link: LinkXDP},
		{System: Sluice, Encap: "udp", Engine: "soft", Alg: "aes128gcm16", Tunnels: 1, Link: LinkSocket},
	} {
		texts, err := SluiceConfigs(c, [2]string{"/tmp/state-a", "/tmp/state-b"})
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range []string{"a.toml", "b.toml"} {
			g, err := config.ParseGateway(name, texts[i])
			if err != nil {
				t.Fatalf("%v: %s: %v", c, name, err)
			}
			if len(g.Tunnels) != c.Tunnels || len(g.SAs) != 2*c.Tunnels || len(g.TUN.Addresses) != c.Tunnels {
				t.Errorf("%v: %s: %d tunnels, %d SAs, %d addresses", c, name, len(g.Tunnels), len(g.SAs), len(g.TUN.Addresses))
			}
			if g.Workers != c.Workers || g.Engine != c.Engine || g.UDP == nil || !g.UDP.GSO || !g.UDP.GRO { // the defaults: both on
				t.Errorf("%v: %s: workers %d engine %q udp %+v: want the cell's and the defaults", c, name, g.Workers, g.Engine, g.UDP)
			}
			if g.UDP.Link != c.Link {
				t.Errorf("%v: %s: [udp] link %q, want the cell's %q", c, name, g.UDP.Link, c.Link)
			}
			if c.Link == LinkAuto && bytes.Contains(texts[i], []byte("link")) {
				t.Errorf("%v: %s: link written although auto is the default", c, name)
			}
			last := g.Tunnels[len(g.Tunnels)-1]
			k := c.Tunnels - 1
			wantRemote := innerB(k).Masked()
			if i == 1 {
				wantRemote = innerA(k).Masked()
			}
			if len(last.Remote) != 1 || last.Remote[0] != wantRemote {
				t.Errorf("%v: %s: last tunnel's remote %v, want %v", c, name, last.Remote, wantRemote)
			}
		}
		if c.Workers == 0 && bytes.Contains(texts[0], []byte("workers")) {
			t.Errorf("workers set although the cell leaves the default")
		}
		// The same SA has the same keys on both sides.
		var gws [2]*config.Gateway
		for i := range gws {
			if gws[i], err = config.ParseGateway("site", texts[i]); err != nil {
				t.Fatal(err)
			}
		}
		a, b := gws[0].SA("a-to-b-0"), gws[1].SA("a-to-b-0")
		if a == nil || b == nil || !bytes.Equal(a.EncKey, b.EncKey) || !bytes.Equal(a.AuthKey, b.AuthKey) || len(a.EncKey) == 0 {
			t.Errorf("a-to-b-0 has different keys at A and B")
		}
	}
	if _, err := SluiceConfigs(Cell{Alg: "rsa2048", Tunnels: 1}, [2]string{}); err == nil {
		t.Errorf("an asymmetric algorithm was accepted")
	}
}

func TestUAPIConfig(t *testing.T) {
	priv := bytes.Repeat([]byte{1}, 32)
	pub := bytes.Repeat([]byte{0xab}, 32)
	got := UAPIConfig(priv, pub, 51820, netip.MustParseAddrPort("192.0.2.2:51820"),
		[]netip.Prefix{netip.MustParsePrefix("10.2.0.1/24"), netip.MustParsePrefix("10.2.1.0/24")})
	want := "set=1\nprivate_key=" + strings.Repeat("01", 32) + "\nlisten_port=51820\nreplace_peers=true\n" +
		"public_key=" + strings.Repeat("ab", 32) + "\nendpoint=192.0.2.2:51820\nreplace_allowed_ips=true\n" +
		"allowed_ip=10.2.0.0/24\nallowed_ip=10.2.1.0/24\n\n"
	if got != want {
		t.Errorf("UAPIConfig:\n%q\nwant\n%q", got, want)
	}
	k, err := newWGKey()
	if err != nil {
		t.Fatal(err)
	}
	priv2, err := ecdh.X25519().NewPrivateKey(k.private)
	if err != nil || hex.EncodeToString(priv2.PublicKey().Bytes()) != hex.EncodeToString(k.public) {
		t.Errorf("key pair does not match: %v", err)
	}
}

func TestParsers(t *testing.T) {
	bps, err := parseIperf([]byte(`{"start":{},"end":{"sum_sent":{"bits_per_second":2e9},"sum_received":{"bits_per_second":1.5e9}}}`))
	if err != nil || bps != 1.5e9 {
		t.Errorf("parseIperf = %v, %v", bps, err)
	}
	if _, err := parseIperf([]byte(`{"error":"unable to connect to server"}`)); err == nil || !strings.Contains(err.Error(), "unable to connect") {
		t.Errorf("parseIperf error: %v", err)
	}
	avg, err := parsePing([]byte("--- 10.2.0.1 ping statistics ---\n100 packets transmitted, 100 received, 0% packet loss, time 1010ms\nrtt min/avg/max/mdev = 0.051/0.139/0.420/0.030 ms\n"))
	if err != nil || avg != 0.139 {
		t.Errorf("parsePing = %v, %v", avg, err)
	}
	if _, err := parsePing([]byte("100 packets transmitted, 0 received")); err == nil {
		t.Errorf("parsePing without a summary: no error")
	}
	// A command name with spaces and a parenthesis; utime 250, stime 50.
	stat := "1234 (my (prog) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 100 0 0"
	cpu, err := parseStat([]byte(stat))
	if err != nil || cpu != 3*time.Second {
		t.Errorf("parseStat = %v, %v; want 3s", cpu, err)
	}
	if _, err := cpuTime(os.Getpid()); err != nil {
		t.Errorf("cpuTime(self): %v", err)
	}
	if iperfSeconds(1400*time.Millisecond) != 1 || iperfSeconds(100*time.Millisecond) != 1 || iperfSeconds(5*time.Second) != 5 {
		t.Errorf("iperfSeconds")
	}
}

// sampleDoc is a run of sluice and wireguard-go at one and ten tunnels.
func sampleDoc() *Document {
	var rs []Result
	s1 := Cell{System: Sluice, Encap: "udp", Engine: "soft", Alg: "aes128gcm16", Tunnels: 1, Link: LinkAuto, LinkGot: "xdp copy native"}
	w1 := Cell{System: WireGuard, Encap: "udp", Engine: "-", Alg: WireGuardAlg, Tunnels: 1}
	add := func(c Cell, size int, m string, v float64) {
		rs = append(rs, Result{Cell: c, Size: size, Metric: m, Value: v, Unit: Units[m], Spread: Spread{Min: v * 0.9, Max: v * 1.1, N: 3}})
	}
	for _, c := range []Cell{s1, s1.WithTunnels(10), w1, w1.WithTunnels(10)} {
		f := 1.0
		if c.System == WireGuard {
			f = 0.5
		}
		if c.Tunnels == 10 {
			f *= 0.95
		}
		add(c, 0, TCP1, 2*f)
		add(c, 0, TCP4, 3*f)
		add(c, 0, TCP1PerCPU, 1.6*f)
		add(c, 0, PingAvg, 0.1/f)
		add(c, 0, LatP50, 80/f)
		add(c, 0, LatP99, 200/f)
		add(c, 0, LatP999, 400/f)
		for _, s := range []int{64, 1400} {
			add(c, s, UDPRate, f*float64(s)/1000)
			add(c, s, UDPPPS, f*100000)
			add(c, s, UDPLoss, 1)
		}
	}
	d := &Document{Results: rs}
	d.Ratios = Ratios(rs)
	return d
}

func TestRatios(t *testing.T) {
	d := sampleDoc()
	type key struct {
		target string
		cell   Cell
		size   int
	}
	got := map[key]Ratio{}
	for _, r := range d.Ratios {
		got[key{r.Target, r.Cell, r.Size}] = r
	}
	check := func(target string, c Cell, size int, want float64, met bool) {
		t.Helper()
		r, ok := got[key{target, c, size}]
		if !ok {
			t.Errorf("no ratio %s for %v size %d; have %v", target, c, size, d.Ratios)
			return
		}
		if r.Value < want-1e-9 || r.Value > want+1e-9 || r.Met != met {
			t.Errorf("%s %v %d: %v (met %v), want %v (met %v)", target, c, size, r.Value, r.Met, want, met)
		}
	}
	s1 := Cell{System: Sluice, Encap: "udp", Engine: "soft", Alg: "aes128gcm16", Tunnels: 1, Link: LinkAuto, LinkGot: "xdp copy native"}
	w10 := Cell{System: WireGuard, Encap: "udp", Engine: "-", Alg: WireGuardAlg, Tunnels: 10}
	check("tcp1", s1, 0, 2, true)
	check("tcp1_per_cpu", s1, 0, 2, true)
	check("udp_large_pps", s1, 1400, 2, true)
	check("udp_small_pps", s1, 64, 2, true)
	check("ping_avg", s1, 0, 0.5, true)
	check("lat_p99", s1.WithTunnels(10), 0, 0.5, true)
	check("tunnels_scale", w10, 1400, 0.95, true)
	check("tunnels_scale", s1.WithTunnels(10), 64, 0.95, true)
	if len(d.Ratios) != 2*7+2*2 {
		t.Errorf("%d ratios, want 18", len(d.Ratios))
	}
	var b bytes.Buffer
	WriteRatios(&b, d.Ratios)
	if !strings.Contains(b.String(), "tunnels_scale") || strings.Contains(b.String(), "MISSED") {
		t.Errorf("ratio table:\n%s", b.String())
	}
}

func TestTable(t *testing.T) {
	d := sampleDoc()
	var tb Table
	h := strings.Split(tb.Header(), "\n")
	c := Cell{System: Sluice, Encap: "udp", Engine: "soft", Alg: "aes128gcm16", Tunnels: 1, Link: LinkXDP, LinkGot: "xdp copy native"}
	for i := range d.Results {
		if d.Results[i].System == Sluice && d.Results[i].Tunnels == 1 {
			d.Results[i].Cell = c
		}
	}
	var mine []Result
	for _, r := range d.Results {
		if r.Cell == c {
			mine = append(mine, r)
		}
	}
	rows := tb.Rows(c, mine)
	if len(h) != 2 || len(rows) != 3 {
		t.Fatalf("header %d lines, %d rows; want 2 and 3 (one plus a row per size)", len(h), len(rows))
	}
	for _, row := range rows {
		if len(row) != len(h[1]) {
			t.Errorf("row width %d, header %d:\n%s\n%s", len(row), len(h[1]), h[1], row)
		}
	}
	if !strings.Contains(h[1], "link") || !strings.Contains(rows[0], "xdp copy native") || !strings.Contains(rows[2], "xdp copy native") {
		t.Errorf("no link column:\n%s\n%s", strings.Join(h, "\n"), strings.Join(rows, "\n"))
	}
	if !strings.Contains(rows[0], "2.000") || !strings.Contains(rows[0], "0.100") || !strings.Contains(rows[2], "1400") || !strings.Contains(rows[2], "100000") {
		t.Errorf("rows:\n%s", strings.Join(rows, "\n"))
	}
}

// TestJSONShape: the document has results with exactly the fields issue 7
// asks for, and the spread.
func TestJSONShape(t *testing.T) {
	var b bytes.Buffer
	if err := sampleDoc().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []map[string]any `json:"results"`
		Ratios  []map[string]any `json:"ratios"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) == 0 || len(doc.Ratios) == 0 {
		t.Fatalf("empty document:\n%s", b.String())
	}
	want := []string{"system", "encap", "engine", "alg", "size", "tunnels", "workers", "metric", "value", "unit", "spread"}
	for _, r := range doc.Results {
		if r["system"] == Sluice {
			// sluice's cells name the link asked for and the link got.
			want := append(slices.Clone(want), "link", "link_got")
			for _, k := range want[len(want)-2:] {
				if _, ok := r[k]; !ok {
					t.Errorf("sluice result lacks %q: %v", k, r)
				}
			}
			delete(r, "link")
			delete(r, "link_got")
		}
		if len(r) != len(want) {
			t.Errorf("result has %d fields, want %d: %v", len(r), len(want), r)
		}
		for _, k := range want {
			if _, ok := r[k]; !ok {
				t.Errorf("result lacks %q: %v", k, r)
			}
		}
		sp := r["spread"].(map[string]any)
		if sp["min"].(float64) > r["value"].(float64) || sp["max"].(float64) < r["value"].(float64) || sp["n"].(float64) != 3 {
			t.Errorf("spread %v of value %v", sp, r["value"])
		}
	}
	var empty bytes.Buffer
	(&Document{}).WriteJSON(&empty)
	if !strings.Contains(empty.String(), `"results": []`) {
		t.Errorf("empty document: %s", empty.String())
	}
}

// TestFindWireGuardGiven: a path given is used as is, without a build.
func TestFindWireGuardGiven(t *testing.T) {
	exe, built, err := FindWireGuard(context.Background(), "/opt/wg/wireguard-go", "")
	if err != nil || built || exe != "/opt/wg/wireguard-go" {
		t.Errorf("FindWireGuard = %q, %v, %v", exe, built, err)
	}
}
