package control

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/control/controltest"
	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/ha"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/internal/buildinfo"
	"github.com/sluicegw/sluice/tls"
)

func TestCollector(t *testing.T) {
	b := controltest.New()
	c := NewCollector(b.Stats)
	const want = `
# HELP sluice_tunnel_packets_total Packets the tunnel sealed (direction out) or opened and accepted (direction in), over all its SAs.
# TYPE sluice_tunnel_packets_total counter
sluice_tunnel_packets_total{direction="in",tunnel="to-b"} 7
sluice_tunnel_packets_total{direction="out",tunnel="to-b"} 10
# HELP sluice_tunnel_bytes_total Plaintext bytes of the packets the tunnel sealed or opened.
# TYPE sluice_tunnel_bytes_total counter
sluice_tunnel_bytes_total{direction="in",tunnel="to-b"} 700
sluice_tunnel_bytes_total{direction="out",tunnel="to-b"} 1000
# HELP sluice_tunnel_needs_rekey 1 when a current SA of the tunnel is near or at its sequence number or lifetime limit and needs a rekey.
# TYPE sluice_tunnel_needs_rekey gauge
sluice_tunnel_needs_rekey{direction="in",tunnel="to-b"} 0
sluice_tunnel_needs_rekey{direction="out",tunnel="to-b"} 0
# HELP sluice_worker_sealed_total Packets the data-plane worker encrypted.
# TYPE sluice_worker_sealed_total counter
sluice_worker_sealed_total{worker="0"} 10
sluice_worker_sealed_total{worker="1"} 0
# HELP sluice_receiver_packets_total Packets a receive goroutine read (side plain: from the TUN device; esp: from the network).
# TYPE sluice_receiver_packets_total counter
sluice_receiver_packets_total{receiver="0",side="plain"} 13
sluice_receiver_packets_total{receiver="1",side="esp"} 10
# HELP sluice_receiver_bytes_total Bytes a receive goroutine read.
# TYPE sluice_receiver_bytes_total counter
sluice_receiver_bytes_total{receiver="0",side="plain"} 1300
sluice_receiver_bytes_total{receiver="1",side="esp"} 1500
# HELP sluice_tls_handshakes_total TLS handshakes completed, full and resumed.
# TYPE sluice_tls_handshakes_total counter
sluice_tls_handshakes_total{listener="web"} 10
# HELP sluice_tls_bytes_total Plaintext bytes carried from clients to the backend (direction in) and from the backend to clients (out).
# TYPE sluice_tls_bytes_total counter
sluice_tls_bytes_total{direction="in",listener="web"} 5120
sluice_tls_bytes_total{direction="out",listener="web"} 1.048576e+06
# HELP sluice_tls_sign_max_batch The largest batch of handshake signatures submitted to the engine.
# TYPE sluice_tls_sign_max_batch gauge
sluice_tls_sign_max_batch{listener="web"} 4
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "sluice_tunnel_packets_total", "sluice_tunnel_bytes_total",
		"sluice_tunnel_needs_rekey", "sluice_worker_sealed_total", "sluice_receiver_packets_total", "sluice_receiver_bytes_total",
		"sluice_tls_handshakes_total", "sluice_tls_bytes_total", "sluice_tls_sign_max_batch"); err != nil {
		t.Fatal(err)
	}
	body := scrape(t, c)
	for _, want := range []string{
		`sluice_tunnel_drops_total{direction="in",reason="replay",tunnel="to-b"} 2`,
		`sluice_tunnel_drops_total{direction="in",reason="auth_failed",tunnel="to-b"} 1`,
		`sluice_worker_drops_total{reason="no_route",worker="0"} 3`,
		`sluice_receiver_drops_total{reason="unknown_spi",receiver="1",side="esp"} 1`,
		`sluice_tls_handshake_failures_total{listener="web",reason="protocol"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
}

// scrape returns what a Prometheus scrape of c reads, in the text format.
func scrape(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.PanicOnError}).
		ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// TestCollectorRekey: a rekey (an SA replaced in its tunnel) makes no new
// series, and no series is labelled by SPI or SA: an operator's query by
// tunnel goes on across it.
func TestCollectorRekey(t *testing.T) {
	b := controltest.New()
	c := NewCollector(b.Stats)
	before := testutil.CollectAndCount(c)
	sas, err := config.ParseSAs("test", []byte(saTOML))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddSA("to-b", "in", &sas[0]); err != nil {
		t.Fatal(err)
	}
	if after := testutil.CollectAndCount(c); after != before {
		t.Errorf("%d series after a rekey, %d before", after, before)
	}
	for _, line := range strings.Split(scrape(t, c), "\n") {
		if strings.Contains(line, "spi=") || strings.Contains(line, "sa=\"") {
			t.Fatalf("a series by SA: %s", line)
		}
	}
}

// TestCollectorFromStart: a fresh gateway's first scrape lists every drop
// and failure reason at 0: a tunnel's by direction, each worker's and
// receiver's, each TLS listener's handshake failures and every IKE
// counter, so that rate() and alerts work before the first drop.
func TestCollectorFromStart(t *testing.T) {
	ikeInfo := &gateway.IKEInfo{Stats: gateway.IKEStatsMap(ike.Stats{}),
		Connections: []gateway.IKEConnInfo{{Name: "site-b", State: "down", Children: []gateway.IKEChildInfo{{Name: "net-b", State: "down"}}}}}
	st := gateway.Stats{
		Tunnels: []gateway.TunnelStats{{Tunnel: "t", Direction: "in"}, {Tunnel: "t", Direction: "out"}},
		Dataplane: dataplane.Stats{Workers: []dataplane.WorkerStats{{Index: 0}},
			Receivers: []dataplane.RxStats{{Plain: true}, {Name: "udp/0"}}},
		TLS: []gateway.TLSInfo{{Name: "web"}},
		IKE: ikeInfo,
	}
	body := scrape(t, NewCollector(func() gateway.Stats { return st }))
	var want []string
	for _, dir := range []string{"in", "out"} {
		for _, r := range gateway.DropReasons(dir) {
			want = append(want, fmt.Sprintf(`sluice_tunnel_drops_total{direction=%q,reason=%q,tunnel="t"} 0`, dir, r))
		}
	}
	for _, r := range dataplane.ReasonNames() {
		want = append(want, fmt.Sprintf(`sluice_worker_drops_total{reason=%q,worker="0"} 0`, r),
			fmt.Sprintf(`sluice_receiver_drops_total{reason=%q,receiver="0",side="plain"} 0`, r),
			fmt.Sprintf(`sluice_receiver_drops_total{reason=%q,receiver="1",side="esp"} 0`, r))
	}
	for _, r := range tls.FailureReasons() {
		want = append(want, fmt.Sprintf(`sluice_tls_handshake_failures_total{listener="web",reason=%q} 0`, r))
	}
	for _, exch := range []string{"IKE_SA_INIT", "IKE_AUTH", "CREATE_CHILD_SA", "INFORMATIONAL"} {
		for _, role := range []string{"initiator", "responder"} {
			want = append(want, fmt.Sprintf(`sluice_ike_exchanges_total{exchange=%q,role=%q} 0`, exch, role))
		}
	}
	want = append(want, `sluice_ike_drops_total{reason="integrity_failed"} 0`, `sluice_ike_failures_total{reason="auth_failed"} 0`,
		`sluice_ike_busy_total{reason="sa_computing"} 0`, "sluice_ike_cookies_sent_total 0", "sluice_ike_reassembled_total 0",
		`sluice_ike_connection_up{connection="site-b"} 0`, `sluice_ike_child_installed{child="net-b",connection="site-b"} 0`)
	for _, w := range want {
		if !strings.Contains(body, w+"\n") {
			t.Errorf("first scrape lacks %s", w)
		}
	}
}

// TestCollectorIKEFamilies: every counter of ike.Stats has its family;
// the exchanges family has exchanges only, busy and cookie counters have
// their own, and reassembled messages are no drop.
func TestCollectorIKEFamilies(t *testing.T) {
	events := map[string]bool{"liveness_checks": true, "restarts": true, "rekey_collisions": true,
		"initial_contacts": true, "keep_alives": true, "nat_mapping_checks": true}
	for k := range gateway.IKEStatsMap(ike.Stats{}) {
		s, ok := ikeSeries[k]
		if !ok && !events[k] {
			t.Errorf("ike.Stats counter %q has no family (it would be an event)", k)
		}
		if ok && s.desc == ikeExchanges && !strings.HasSuffix(k, "_initiated") && !strings.HasSuffix(k, "_answered") {
			t.Errorf("%q is not an exchange", k)
		}
		if ok && s.desc == ikeDrops && (strings.Contains(k, "reassembled") || strings.Contains(k, "busy") || strings.Contains(k, "cookie") && k != "rx_bad_cookie") {
			t.Errorf("%q counted as a drop", k)
		}
	}
}

// TestCollectorTLSOnly: a TLS-only gateway's scrape has its TLS series and
// no ESP series; a name listed twice (a reload under the read) does not
// fail the scrape.
func TestCollectorTLSOnly(t *testing.T) {
	l := gateway.TLSInfo{Name: "web", Kind: "terminate", Handshakes: 3, HandshakeFailures: map[string]uint64{}}
	o := gateway.TLSInfo{Name: "api", Kind: "originate", Handshakes: 1, HandshakeFailures: map[string]uint64{"timeout": 2}, BackendFailures: 3}
	c := NewCollector(func() gateway.Stats { return gateway.Stats{TLS: []gateway.TLSInfo{l, o, l}} })
	if n := testutil.CollectAndCount(c, "sluice_tls_handshakes_total"); n != 2 {
		t.Errorf("%d handshake series, want 2", n)
	}
	if n, want := testutil.CollectAndCount(c, "sluice_tls_handshake_failures_total"), 2*len(tls.FailureReasons()); n != want {
		t.Errorf("%d failure series, want %d (every reason of each)", n, want)
	}
	if n := testutil.CollectAndCount(c, "sluice_tunnel_packets_total", "sluice_worker_sealed_total", "sluice_receiver_packets_total"); n != 0 {
		t.Errorf("%d ESP series on a TLS-only gateway", n)
	}
	// A backend that cannot be reached is its own counter, not a
	// handshake failure.
	want := "# HELP sluice_tls_backend_failures_total Connections whose backend could not be resolved or reached (not handshake failures).\n" +
		"# TYPE sluice_tls_backend_failures_total counter\n" +
		"sluice_tls_backend_failures_total{listener=\"api\"} 3\nsluice_tls_backend_failures_total{listener=\"web\"} 0\n"
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "sluice_tls_backend_failures_total"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
}

// A tunnel listed twice in one read must not fail the scrape.
func TestCollectorDuplicateTunnel(t *testing.T) {
	ts := gateway.TunnelStats{Tunnel: "t", Direction: "in", Packets: 1}
	c := NewCollector(func() gateway.Stats { return gateway.Stats{Tunnels: []gateway.TunnelStats{ts, ts}} })
	if n := testutil.CollectAndCount(c, "sluice_tunnel_packets_total"); n != 1 {
		t.Fatalf("%d series, want 1", n)
	}
}

func TestMetricsServer(t *testing.T) {
	b := controltest.New()
	m, err := ServeMetrics("127.0.0.1:0", b.Stats, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	resp, err := http.Get("http://" + m.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %s: %s", resp.Status, body)
	}
	for _, want := range []string{
		`sluice_tunnel_packets_total{direction="out",tunnel="to-b"} 10`,
		`sluice_tunnel_drops_total{direction="in",reason="replay",tunnel="to-b"} 2`,
		`sluice_build_info{commit=`,
		`sluice_worker_drops_total{reason="no_route",worker="0"} 3`,
		`sluice_receiver_packets_total{receiver="1",side="esp"} 10`,
		"go_goroutines ",
		"process_open_fds ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if b.Calls("Stats") != 1 {
		t.Errorf("Stats called %d times for one scrape", b.Calls("Stats"))
	}
	if resp, err := http.Get("http://" + m.Addr().String() + "/"); err != nil || resp.StatusCode != 404 {
		t.Errorf("GET /: %v %v", resp.Status, err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := http.Get("http://" + m.Addr().String() + "/metrics"); err == nil {
		t.Fatal("scrape after Close succeeded")
	}
	if _, err := ServeMetrics("127.0.0.1:99999", b.Stats, nil); err == nil || !strings.HasPrefix(err.Error(), "control: metrics: ") {
		t.Fatalf("bad address: %v", err)
	}
}

// TestCollectorStateFailing: a tunnel whose SA's reservations cannot be
// recorded shows it in sluice_tunnel_state_failing and
// sluice_tunnel_state_failures_total.
func TestCollectorStateFailing(t *testing.T) {
	st := gateway.Stats{Tunnels: []gateway.TunnelStats{{Tunnel: "t", Direction: "out", StateFailing: true, StateFailures: 3}}}
	c := NewCollector(func() gateway.Stats { return st })
	const want = `
# HELP sluice_tunnel_state_failing 1 while a current SA of the tunnel cannot record its sequence-number reservation in the state directory (it drops its packets).
# TYPE sluice_tunnel_state_failing gauge
sluice_tunnel_state_failing{direction="out",tunnel="t"} 1
# HELP sluice_tunnel_state_failures_total Sequence-number reservations of the tunnel's SAs that could not be recorded in the state directory.
# TYPE sluice_tunnel_state_failures_total counter
sluice_tunnel_state_failures_total{direction="out",tunnel="t"} 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "sluice_tunnel_state_failing", "sluice_tunnel_state_failures_total"); err != nil {
		t.Fatal(err)
	}
}

// TestCollectorIKE: the IKE counters as sluice_ike_* families, by what
// each counts, each connection's and child's state, and each virtual IP
// pool's size, leases (online, offline) and free addresses.
func TestCollectorIKE(t *testing.T) {
	b := controltest.New()
	stats := gateway.IKEStatsMap(ike.Stats{RxPackets: 12, TxPackets: 11, RxMalformed: 2, AuthFailed: 1, TxRetransmits: 3, RxRetransmits: 4,
		IKESAEstablished: 1, ChildSARekeyed: 5, RxBusy: 6, CookiesSent: 7, RxReassembled: 8, RxFragments: 9,
		IKEAuthInitiated: 1, CreateChildSAAnswered: 5, LivenessChecks: 2})
	b.SetIKE(&gateway.IKEInfo{
		Connections: []gateway.IKEConnInfo{{Name: "site-b", State: "established", IKESPIi: "0102030405060708", Children: []gateway.IKEChildInfo{{Name: "net-b", State: "installed"}}},
			{Name: "site-c", State: "down"}},
		Stats: stats,
		Pools: []gateway.IKEPoolInfo{{Name: "rw4", Size: 254, Online: 3, Offline: 1, Free: 250}, {Name: "rw6", Size: 65536, Free: 65536}},
	})
	body := scrape(t, NewCollector(b.Stats))
	for _, want := range []string{
		`sluice_ike_packets_total{direction="rx"} 12`,
		`sluice_ike_packets_total{direction="tx"} 11`,
		`sluice_ike_drops_total{reason="malformed"} 2`,
		`sluice_ike_failures_total{reason="auth_failed"} 1`,
		`sluice_ike_retransmits_total{direction="rx"} 4`,
		`sluice_ike_retransmits_total{direction="tx"} 3`,
		`sluice_ike_exchanges_total{exchange="IKE_AUTH",role="initiator"} 1`,
		`sluice_ike_exchanges_total{exchange="CREATE_CHILD_SA",role="responder"} 5`,
		`sluice_ike_sa_events_total{event="established",sa="ike"} 1`,
		`sluice_ike_sa_events_total{event="rekeyed",sa="child"} 5`,
		`sluice_ike_busy_total{reason="sa_computing"} 6`,
		`sluice_ike_cookies_sent_total 7`,
		`sluice_ike_reassembled_total 8`,
		`sluice_ike_fragments_total{direction="rx"} 9`,
		`sluice_ike_events_total{event="liveness_checks"} 2`,
		`sluice_ike_sa_up{connection="site-b"} 1`,
		`sluice_ike_sa_up{connection="site-c"} 0`,
		`sluice_ike_connection_up{connection="site-b"} 1`,
		`sluice_ike_connection_up{connection="site-c"} 0`,
		`sluice_ike_child_installed{child="net-b",connection="site-b"} 1`,
		`sluice_ike_pool_addresses{pool="rw4"} 254`,
		`sluice_ike_pool_leased{pool="rw4",state="online"} 3`,
		`sluice_ike_pool_leased{pool="rw4",state="offline"} 1`,
		`sluice_ike_pool_free{pool="rw4"} 250`,
		`sluice_ike_pool_addresses{pool="rw6"} 65536`,
		`sluice_ike_pool_leased{pool="rw6",state="online"} 0`,
		`sluice_ike_pool_free{pool="rw6"} 65536`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "sluice_ike_exchanges_total") && !strings.Contains(line, "exchange=") {
			t.Errorf("not an exchange: %s", line)
		}
	}
	if problems, err := testutil.CollectAndLint(NewCollector(b.Stats)); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
}

// TestRegistryLint: every family the endpoint serves, the build info and
// the Go and process collectors' included, follows Prometheus' naming
// conventions (promlint: units as suffixes, _bytes_total, _total on
// counters only), and sluice_build_info is 1 with what the binary is.
func TestRegistryLint(t *testing.T) {
	b := controltest.New()
	b.SetIKE(&gateway.IKEInfo{Stats: gateway.IKEStatsMap(ike.Stats{})})
	reg := NewRegistry(b.Stats)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_build_info" {
			continue
		}
		m := mf.GetMetric()
		if len(m) != 1 || m[0].GetGauge().GetValue() != 1 {
			t.Fatalf("sluice_build_info: %v", m)
		}
		labels := map[string]string{}
		for _, l := range m[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		in := buildinfo.Get()
		if labels["version"] != in.Version || labels["go"] != runtime.Version() || !strings.Contains(labels["engines"], "soft") {
			t.Fatalf("sluice_build_info labels %v", labels)
		}
		if _, ok := labels["commit"]; !ok {
			t.Fatalf("sluice_build_info has no commit label: %v", labels)
		}
		return
	}
	t.Fatal("no sluice_build_info")
}

// TestCollectorHA: a member of a pair has the sluice_ha_* series, and
// they lint.
func TestCollectorHA(t *testing.T) {
	b := controltest.New()
	b.SetHA(&ha.Status{Name: "a",
		Members: []ha.MemberStatus{{Name: "a", Self: true, Up: true}, {Name: "b", Up: true}},
		Groups: []ha.GroupStatus{{Name: "site", Role: "owner", Owner: "a", Standby: "b", Epoch: 3, InSync: true,
			SyncLag: 250 * time.Microsecond, SyncLagMax: 2 * time.Millisecond, LastGap: 40 * time.Millisecond}},
		Counters: ha.Counters{Takeovers: 2, Handovers: 1}})
	body := scrape(t, NewCollector(b.Stats))
	for _, want := range []string{
		`sluice_ha_peer_up 1`,
		`sluice_ha_group_owner{group="site"} 1`,
		`sluice_ha_group_fenced{group="site"} 0`,
		`sluice_ha_group_in_sync{group="site"} 1`,
		`sluice_ha_group_epoch{group="site"} 3`,
		`sluice_ha_sync_lag_seconds{group="site"} 0.00025`,
		`sluice_ha_sync_lag_max_seconds{group="site"} 0.002`,
		`sluice_ha_takeover_gap_seconds{group="site"} 0.04`,
		`sluice_ha_events_total{event="takeovers"} 2`,
		`sluice_ha_events_total{event="handovers"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if problems, err := testutil.CollectAndLint(NewCollector(b.Stats)); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	// Without [ha], none.
	if body := scrape(t, NewCollector(controltest.New().Stats)); strings.Contains(body, "sluice_ha_") {
		t.Error("a gateway without [ha] has sluice_ha_ series")
	}
}
