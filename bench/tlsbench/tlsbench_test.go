package tlsbench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
)

func TestParseProcStat(t *testing.T) {
	// The name holds spaces and a ')': fields count from the last ')'.
	line := "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 1000 0 0\n"
	st, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != 17 || st.CPU != 3250*time.Millisecond {
		t.Errorf("got %+v, want ppid 17 and 3.25s", st)
	}
	for _, bad := range []string{"", "12 (x S 1 2", "12 (x) S 1 2 3", "12 (x) S a 1 1 0 -1 0 0 0 0 0 1 1"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestTreeCPU: a process's CPU time is its own and its descendants',
// not its siblings'.
func TestTreeCPU(t *testing.T) {
	root := t.TempDir()
	write := func(pid, ppid, ut, st int) {
		d := filepath.Join(root, itoa(pid))
		os.Mkdir(d, 0o755)
		line := itoa(pid) + " (p) S " + itoa(ppid) + " 1 1 0 -1 0 0 0 0 0 " + itoa(ut) + " " + itoa(st) + " 0 0 20 0 1 0 1 0 0\n"
		if err := os.WriteFile(filepath.Join(d, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(100, 1, 10, 5)      // nginx master
	write(101, 100, 200, 100) // worker
	write(102, 101, 1, 1)     // a worker's child
	write(200, 1, 999, 999)   // someone else
	os.Mkdir(filepath.Join(root, "self"), 0o755)
	d, n, err := treeCPU(root, 100)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || d != 3170*time.Millisecond {
		t.Errorf("got %v over %d processes, want 3.17s over 3", d, n)
	}
	if _, _, err := treeCPU(root, 300); err == nil {
		t.Error("no error for a missing process")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestSizes(t *testing.T) {
	for _, tc := range []struct {
		in    string
		n     int
		label string
	}{{"1k", 1024, "1k"}, {"64K", 65536, "64k"}, {"1m", 1 << 20, "1m"}, {"1000", 1000, "1000"}, {"2048", 2048, "2k"}} {
		n, err := ParseSize(tc.in)
		if err != nil || n != tc.n || SizeLabel(n) != tc.label {
			t.Errorf("%q: %d %v %q, want %d %q", tc.in, n, err, SizeLabel(n), tc.n, tc.label)
		}
	}
	for _, bad := range []string{"", "0", "-1k", "k", "1g", "65m", "1.5k"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// material makes an ECDSA certificate and the files of sizes once per test.
func material(t *testing.T, keys []string, sizes ...int) *Material {
	t.Helper()
	m, err := NewMaterial(t.TempDir(), keys, sizes)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNginxConfig(t *testing.T) {
	m := material(t, []string{ECDSAP256}, 1024)
	prefix := t.TempDir()
	conf := NginxConfig(prefix, m.WWW, []NginxSite{{Listen: "127.0.0.1:1", Cert: m.Certs[ECDSAP256], Version: "1.2"}})
	for _, want := range []string{"worker_processes 1;", "listen 127.0.0.1:1 ssl;", "ssl_protocols TLSv1.2;",
		"ssl_session_tickets on;", "keepalive_requests", "root " + m.WWW + ";", "pid " + filepath.Join(prefix, "nginx.pid"),
		"ssl_certificate_key " + m.Certs[ECDSAP256].Key + ";"} {
		if !strings.Contains(conf, want) {
			t.Errorf("configuration lacks %q:\n%s", want, conf)
		}
	}
	// nginx itself accepts it, when installed.
	exe, err := FindNginx("")
	if err != nil {
		t.Logf("nginx -t skipped: %v", err)
		return
	}
	os.MkdirAll(filepath.Join(prefix, "tmp"), 0o755)
	file := filepath.Join(prefix, "nginx.conf")
	os.WriteFile(file, []byte(conf), 0o644)
	if out, err := exec.Command(exe, "-t", "-p", prefix, "-c", file, "-e", filepath.Join(prefix, "error.log")).CombinedOutput(); err != nil {
		t.Errorf("nginx -t: %v: %s", err, out)
	}
}

// TestSluiceConfig: the generated configuration is a TLS-only gateway
// with the one listener the contract describes.
func TestSluiceConfig(t *testing.T) {
	m := material(t, []string{ECDSAP256}, 1024)
	dir := t.TempDir()
	text, err := SluiceConfig(SluiceSite{Listen: "127.0.0.1:8443", Cert: m.Certs[ECDSAP256], Version: "1.3", Engine: "sched",
		WWW: m.WWW, StateDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	g, err := config.ParseGateway(filepath.Join(dir, "gateway.toml"), text)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if !g.TLSOnly() || len(g.TLS) != 1 {
		t.Fatalf("TLS-only %v with %d listeners, want one", g.TLSOnly(), len(g.TLS))
	}
	l := g.TLS[0]
	if l.Listen != "127.0.0.1:8443" || l.Engine != "sched" || l.MinVersion != tls.VersionTLS13 || l.MaxVersion != tls.VersionTLS13 ||
		!l.SessionTickets || len(l.Certs) != 1 || l.Certs[0].Cert != m.Certs[ECDSAP256].Cert || !strings.HasSuffix(l.Backend, m.WWW) {
		t.Errorf("listener %+v", l)
	}
}

// testServer is an httptest TLS server of m's files with m's ECDSA
// certificate, tickets on, TLS 1.2 and 1.3.
func testServer(t *testing.T, m *Material) *httptest.Server {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(m.Certs[ECDSAP256].Cert, m.Certs[ECDSAP256].Key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.FileServer(http.Dir(m.WWW)))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the loads' last connections end mid-handshake
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func noCPU() (time.Duration, error) { return 0, nil }

// TestLoad runs each load of the Go client against an httptest server.
func TestLoad(t *testing.T) {
	m := material(t, []string{ECDSAP256}, 1024, 65536)
	srv := testServer(t, m)
	addr := srv.Listener.Addr().String()
	ctx := context.Background()
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		tg := Target{Addr: addr, Roots: m.Roots, Version: v}
		t.Run(tls.VersionName(v), func(t *testing.T) {
			if err := Check(ctx, tg, ECDSAP256, m.Files[1024], 1024); err != nil {
				t.Fatal(err)
			}
			if err := Check(ctx, tg, RSA2048, m.Files[1024], 1024); err == nil {
				t.Error("Check accepted the wrong key type")
			}
			for _, resume := range []bool{false, true} {
				l := handshakeLoad(tg, 4, 0, resume, m.Files[1024])
				w, err := measure(ctx, 50*time.Millisecond, 300*time.Millisecond, noCPU, nil, l)
				if err != nil {
					t.Fatal(err)
				}
				c := w.Counts[0]
				if c.Ops == 0 || c.Failed != 0 {
					t.Errorf("resume %v: %+v (%v)", resume, c, l.c.err())
				}
				if resume && (c.Resumed != c.Ops || c.Missed != 0) {
					t.Errorf("resumed %d and missed %d of %d", c.Resumed, c.Missed, c.Ops)
				}
				if !resume && c.Resumed != 0 {
					t.Errorf("full handshakes resumed: %+v", c)
				}
			}
			l := requestLoad(tg, 3, 0, m.Files[65536], 0)
			w, err := measure(ctx, 50*time.Millisecond, 300*time.Millisecond, noCPU, nil, l)
			if err != nil {
				t.Fatal(err)
			}
			if c := w.Counts[0]; c.Ops == 0 || c.Bytes != c.Ops*65536 || c.Failed != 0 {
				t.Errorf("requests: %+v (%v)", c, l.c.err())
			}
			// Probes at 100/s per connection, during a handshake storm.
			p := requestLoad(tg, 2, 8, m.Files[1024], 10*time.Millisecond)
			w, err = measure(ctx, 50*time.Millisecond, 500*time.Millisecond, noCPU, nil, p, handshakeLoad(tg, 2, 0, false, ""))
			if err != nil {
				t.Fatal(err)
			}
			q, n := quantiles(p.c.lats, w.Start, w.End, 0.5, 0.99)
			if n < 1 || n > 150 || q[0] <= 0 || q[1] < q[0] || w.Counts[1].Ops == 0 {
				t.Errorf("%d probes in the window (want up to about 100), p50 %v p99 %v, %d handshakes", n, q[0], q[1], w.Counts[1].Ops)
			}
		})
	}
}

// TestMeasureCPU: the window's CPU is the difference of the two reads.
func TestMeasureCPU(t *testing.T) {
	var calls time.Duration
	cpu := func() (time.Duration, error) { calls += time.Second; return calls, nil }
	l := &load{conns: 1, worker: func(ctx context.Context, i int, c *counters) {
		for ctx.Err() == nil {
			c.ops.Add(1)
			time.Sleep(time.Millisecond)
		}
	}}
	w, err := measure(context.Background(), 10*time.Millisecond, 50*time.Millisecond, cpu, nil, l)
	if err != nil || w.CPU != time.Second || w.Counts[0].Ops == 0 || w.Seconds() < 0.05 {
		t.Errorf("%+v %v", w, err)
	}
}

// TestMeasureOpensFirst: a load with opened (the storm's probes) has its
// connections up before measure starts the loads after it (the storm),
// and a worker that never connects delays them at most openWait.
func TestMeasureOpensFirst(t *testing.T) {
	var probesUp, stormSawDown atomic.Int32
	opened := make(chan struct{}, 3)
	probes := &load{conns: 3, opened: opened, worker: func(ctx context.Context, i int, c *counters) {
		time.Sleep(time.Duration(i) * 20 * time.Millisecond) // a slow handshake
		probesUp.Add(1)
		opened <- struct{}{}
		<-ctx.Done()
	}}
	storm := &load{conns: 2, worker: func(ctx context.Context, i int, c *counters) {
		if probesUp.Load() < 3 {
			stormSawDown.Add(1)
		}
		<-ctx.Done()
	}}
	if _, err := measure(context.Background(), 0, 10*time.Millisecond, noCPU, nil, probes, storm); err != nil {
		t.Fatal(err)
	}
	if n := stormSawDown.Load(); n != 0 {
		t.Errorf("%d storm workers started before every probe connection was up", n)
	}
}

func TestReadResponse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int64
		fail bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP", 3, false},
		{"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nConnection: close\r\n\r\n", 0, true},
		{"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", 0, true},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 0, true},
		{"HTTP/1.1 200 OK\r\n\r\n", 0, true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", 0, true},
	} {
		n, err := readResponse(bufioReader(tc.in))
		if (err != nil) != tc.fail || n != tc.n {
			t.Errorf("%q: %d %v", tc.in, n, err)
		}
	}
}

func TestParseWrk(t *testing.T) {
	out := `Running 10s test @ https://127.0.0.1:8443/1k.bin
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   500.00us  100.00us   5.00ms   90.00%
    Req/Sec    30.00k     1.00k   35.00k    70.00%
  600123 requests in 10.01s, 650.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 0
Requests/sec:  59952.35
Transfer/sec:     64.94MB
`
	r, err := parseWrk([]byte(out))
	if err != nil || r.Requests != 600123 || r.Elapsed != 10010*time.Millisecond || r.SocketErrors != "connect 0, read 2, write 0, timeout 0" {
		t.Errorf("%+v %v", r, err)
	}
	if _, err := parseWrk([]byte(strings.Replace(out, "  Socket", "  Non-2xx or 3xx responses: 7\n  Socket", 1))); err == nil {
		t.Error("non-2xx responses accepted")
	}
	if _, err := parseWrk([]byte("unable to connect to 127.0.0.1:1 Connection refused")); err == nil {
		t.Error("no error without a count")
	}
	args := strings.Join(wrkArgs("wrk", "https://x/1k.bin", 1, 300*time.Millisecond), " ")
	if args != "wrk -t 1 -c 1 -d 1s --timeout 10s https://x/1k.bin" {
		t.Errorf("wrk args %q", args)
	}
}

// TestResults: records, the table's ratio columns,
// the targets and the charts.
func TestResults(t *testing.T) {
	servers := []Server{{Nginx, "-"}, {Sluice, "soft"}, {Sluice, "sched"}}
	s := map[sampleKey][]float64{
		{0, 0, HSFullCPU}: {200, 220, 210}, {1, 0, HSFullCPU}: {180, 170, 190}, {2, 0, HSFullCPU}: {250, 260, 240},
		{0, 0, HSResumedCPU}: {100}, {1, 0, HSResumedCPU}: {90},
		{0, 1024, ReqCPU}: {10}, {1, 1024, ReqCPU}: {14},
		{0, 1 << 20, ReqGiBCPU}: {0.7}, {1, 1 << 20, ReqGiBCPU}: {0.5},
	}
	rs := collect(servers, ECDSAP256, "1.3", s)
	storm := collect(servers, RSA4096, "1.3", map[sampleKey][]float64{
		{0, 0, LatIdleP99}: {100}, {0, 0, LatStormP99}: {150}, {2, 0, LatIdleP99}: {100}, {2, 0, LatStormP99}: {300}})
	rs = append(rs, storm...)
	if rs[0].Server != servers[0] || rs[0].Metric != HSFullCPU || rs[0].Value != 210 || rs[0].Unit != unitUs || rs[0].Spread != (Spread{Min: 200, Max: 220, N: 3}) {
		t.Errorf("first record %+v", rs[0])
	}
	doc := &Document{Results: rs, Ratios: Ratios(rs)}
	var buf bytes.Buffer
	if err := doc.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"system", "key", "engine", "version", "size", "metric", "value", "unit", "spread"} {
		if _, ok := back.Results[0][f]; !ok {
			t.Errorf("record without %q: %v", f, back.Results[0])
		}
	}
	got := map[string]string{}
	for _, r := range doc.Ratios {
		got[r.Target+" "+r.Server.String()] = fmtValue(r.Value) + map[bool]string{true: " met", false: " missed"}[r.Met] + map[bool]string{true: "", false: " report"}[r.Binding]
	}
	want := map[string]string{
		"ecdsa_full sluice/soft":    "0.8571 met",
		"ecdsa_full sluice/sched":   "1.19 missed",
		"ecdsa_resumed sluice/soft": "0.9 met",
		"req_1k sluice/soft":        "1.4 missed",
		"req_1m sluice/soft":        "1.4 met",
		"storm_p99 nginx":           "1.5 met report",
		"storm_p99 sluice/sched":    "3 missed",
	}
	if len(got) != len(want) {
		t.Errorf("ratios %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	tb := Table{Servers: servers}
	if h := tb.Header(); strings.Count(h, "/nginx") != 2 {
		t.Errorf("header %q: want a ratio column beside each sluice column", h)
	}
	rows := tb.Rows(Group{Key: ECDSAP256, Version: "1.3"}, rs[:len(rs)-len(storm)])
	if len(rows) != 4 {
		t.Errorf("%d rows: %q", len(rows), rows)
	}
	if !strings.Contains(rows[0], "0.86") || !strings.Contains(rows[0], "1.19") {
		t.Errorf("row %q: want the ratios 0.86 and 1.19", rows[0])
	}
	var out bytes.Buffer
	WriteRatios(&out, doc.Ratios)
	if !strings.Contains(out.String(), "MISSED") || !strings.Contains(out.String(), "(reported)") {
		t.Errorf("ratios:\n%s", out.String())
	}
}

// TestGroups: what runs where.
func TestGroups(t *testing.T) {
	o := Options{Systems: []string{Sluice, Nginx}, Keys: Keys, Engines: []string{"soft", "sched"}, Versions: Versions,
		Sizes: []int{1024, 1 << 20}, Conns: 1, Duration: time.Second, Repeat: 2, Storm: true, Client: ClientAuto}
	if err := o.Check(); err != nil {
		t.Fatal(err)
	}
	gs := o.Groups()
	if len(gs) != 7 {
		t.Fatalf("%d groups", len(gs))
	}
	first, storm := gs[0], gs[6]
	if first.Key != ECDSAP256 || first.Version != "1.2" || len(first.Servers) != 3 || first.Servers[0].System != Nginx ||
		len(first.Full) != 3 || len(first.Resumed) != 2 || len(first.Requests) != 2 || len(first.Sizes) != 2 || len(gs[1].Requests) != 0 {
		t.Errorf("first group %+v", first)
	}
	if storm.Key != RSA4096 || storm.Version != "1.3" || len(storm.Storm) != 3 || len(storm.Full) != 0 {
		t.Errorf("storm group %+v", storm)
	}
	if n := o.Steps(); n != 2*(2*(3*(3+2)+2*2)+3*2) {
		t.Errorf("%d steps", n)
	}
	for _, bad := range []func(*Options){
		func(o *Options) { o.Systems = []string{"apache"} },
		func(o *Options) { o.Keys = []string{"ed25519"} },
		func(o *Options) { o.Versions = []string{"1.1"} },
		func(o *Options) { o.Conns = 0 },
		func(o *Options) { o.Repeat = 0 },
		func(o *Options) { o.Client = "curl" },
		func(o *Options) { o.Engines = nil },
	} {
		c := o
		bad(&c)
		if c.Check() == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }
