package control

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/control/controltest"
	"github.com/sluicegw/sluice/gateway"
)

func TestCollector(t *testing.T) {
	b := controltest.New()
	c := NewCollector(b.Stats)
	const want = `
# HELP sluice_sa_packets_total Packets the SA sealed (direction out) or opened and accepted (direction in).
# TYPE sluice_sa_packets_total counter
sluice_sa_packets_total{direction="in",sa="b-to-a",spi="0x00002001",tunnel="to-b"} 7
sluice_sa_packets_total{direction="out",sa="a-to-b",spi="0x00001001",tunnel="to-b"} 10
# HELP sluice_sa_bytes_total Plaintext bytes of the packets the SA sealed or opened.
# TYPE sluice_sa_bytes_total counter
sluice_sa_bytes_total{direction="in",sa="b-to-a",spi="0x00002001",tunnel="to-b"} 700
sluice_sa_bytes_total{direction="out",sa="a-to-b",spi="0x00001001",tunnel="to-b"} 1000
# HELP sluice_sa_drops_total Packets of the SA dropped, by reason.
# TYPE sluice_sa_drops_total counter
sluice_sa_drops_total{direction="in",reason="auth_failed",sa="b-to-a",spi="0x00002001",tunnel="to-b"} 1
sluice_sa_drops_total{direction="in",reason="replay",sa="b-to-a",spi="0x00002001",tunnel="to-b"} 2
# HELP sluice_sa_needs_rekey 1 when the SA is near or at its sequence number or lifetime limit and needs a rekey.
# TYPE sluice_sa_needs_rekey gauge
sluice_sa_needs_rekey{direction="in",sa="b-to-a",spi="0x00002001",tunnel="to-b"} 0
sluice_sa_needs_rekey{direction="out",sa="a-to-b",spi="0x00001001",tunnel="to-b"} 0
# HELP sluice_sa_state_failing 1 while the SA cannot record its sequence-number reservation in the state directory (it drops its packets).
# TYPE sluice_sa_state_failing gauge
sluice_sa_state_failing{direction="in",sa="b-to-a",spi="0x00002001",tunnel="to-b"} 0
sluice_sa_state_failing{direction="out",sa="a-to-b",spi="0x00001001",tunnel="to-b"} 0
# HELP sluice_sa_state_failures_total Sequence-number reservations of the SA that could not be recorded in the state directory.
# TYPE sluice_sa_state_failures_total counter
sluice_sa_state_failures_total{direction="in",sa="b-to-a",spi="0x00002001",tunnel="to-b"} 0
sluice_sa_state_failures_total{direction="out",sa="a-to-b",spi="0x00001001",tunnel="to-b"} 0
# HELP sluice_worker_sealed_total Packets the data-plane worker encrypted.
# TYPE sluice_worker_sealed_total counter
sluice_worker_sealed_total{worker="0"} 10
sluice_worker_sealed_total{worker="1"} 0
# HELP sluice_worker_opened_total Packets the data-plane worker decrypted and accepted.
# TYPE sluice_worker_opened_total counter
sluice_worker_opened_total{worker="0"} 7
sluice_worker_opened_total{worker="1"} 0
# HELP sluice_worker_tx_packets_total Packets the data-plane worker wrote to a link.
# TYPE sluice_worker_tx_packets_total counter
sluice_worker_tx_packets_total{worker="0"} 17
sluice_worker_tx_packets_total{worker="1"} 0
# HELP sluice_worker_tx_errors_total Packets a link refused to send for the worker.
# TYPE sluice_worker_tx_errors_total counter
sluice_worker_tx_errors_total{worker="0"} 0
sluice_worker_tx_errors_total{worker="1"} 0
# HELP sluice_worker_drops_total Packets the data-plane worker dropped, by reason.
# TYPE sluice_worker_drops_total counter
sluice_worker_drops_total{reason="no_route",worker="0"} 3
# HELP sluice_receiver_packets_total Packets a receive goroutine read (side plain: from the TUN device; esp: from the network).
# TYPE sluice_receiver_packets_total counter
sluice_receiver_packets_total{receiver="0",side="plain"} 13
sluice_receiver_packets_total{receiver="1",side="esp"} 10
# HELP sluice_receiver_bytes_total Bytes a receive goroutine read.
# TYPE sluice_receiver_bytes_total counter
sluice_receiver_bytes_total{receiver="0",side="plain"} 1300
sluice_receiver_bytes_total{receiver="1",side="esp"} 1500
# HELP sluice_receiver_drops_total Packets a receive goroutine dropped before handing them to a worker, by reason.
# TYPE sluice_receiver_drops_total counter
sluice_receiver_drops_total{reason="unknown_spi",receiver="1",side="esp"} 1
# HELP sluice_tls_accepted_total Connections the TLS listener or origin accepted.
# TYPE sluice_tls_accepted_total counter
sluice_tls_accepted_total{listener="web"} 12
# HELP sluice_tls_refused_total Connections the TLS listener or origin refused at its max_conns.
# TYPE sluice_tls_refused_total counter
sluice_tls_refused_total{listener="web"} 1
# HELP sluice_tls_open_connections Connections of the TLS listener or origin open now.
# TYPE sluice_tls_open_connections gauge
sluice_tls_open_connections{listener="web"} 2
# HELP sluice_tls_handshakes_total TLS handshakes completed, full and resumed.
# TYPE sluice_tls_handshakes_total counter
sluice_tls_handshakes_total{listener="web"} 10
# HELP sluice_tls_handshake_failures_total TLS handshakes that failed, by reason.
# TYPE sluice_tls_handshake_failures_total counter
sluice_tls_handshake_failures_total{listener="web",reason="protocol"} 1
sluice_tls_handshake_failures_total{listener="web",reason="timeout"} 1
# HELP sluice_tls_resumed_total TLS handshakes that resumed a session with a ticket.
# TYPE sluice_tls_resumed_total counter
sluice_tls_resumed_total{listener="web"} 4
# HELP sluice_tls_bytes_in_total Plaintext bytes carried from clients to the backend.
# TYPE sluice_tls_bytes_in_total counter
sluice_tls_bytes_in_total{listener="web"} 5120
# HELP sluice_tls_bytes_out_total Plaintext bytes carried from the backend to clients.
# TYPE sluice_tls_bytes_out_total counter
sluice_tls_bytes_out_total{listener="web"} 1.048576e+06
# HELP sluice_tls_idle_closed_total Connections closed by the idle timeout.
# TYPE sluice_tls_idle_closed_total counter
sluice_tls_idle_closed_total{listener="web"} 3
# HELP sluice_tls_requests_total Requests the static: backend answered.
# TYPE sluice_tls_requests_total counter
sluice_tls_requests_total{listener="web"} 7
# HELP sluice_tls_header_timeouts_total Connections the static: backend closed in the middle of a request head (header_timeout; also idle-closed).
# TYPE sluice_tls_header_timeouts_total counter
sluice_tls_header_timeouts_total{listener="web"} 0
# HELP sluice_tls_sign_queue_depth Handshake signatures waiting for the engine now.
# TYPE sluice_tls_sign_queue_depth gauge
sluice_tls_sign_queue_depth{listener="web"} 0
# HELP sluice_tls_sign_ops_total Handshake signatures the engine made.
# TYPE sluice_tls_sign_ops_total counter
sluice_tls_sign_ops_total{listener="web"} 6
# HELP sluice_tls_sign_batches_total Batches of handshake signatures submitted to the engine (sign_ops / sign_batches is the mean batch).
# TYPE sluice_tls_sign_batches_total counter
sluice_tls_sign_batches_total{listener="web"} 2
# HELP sluice_tls_sign_max_batch The largest batch of handshake signatures submitted to the engine.
# TYPE sluice_tls_sign_max_batch gauge
sluice_tls_sign_max_batch{listener="web"} 4
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	// Counters are read at scrape time.
	sas, err := config.ParseSAs("test", []byte(saTOML))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddSA("to-b", "in", &sas[0]); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "sluice_sa_packets_total"); n != 3 {
		t.Fatalf("after adding an SA: %d SA series, want 3", n)
	}
}

// TestCollectorTLSOnly: a TLS-only gateway's scrape has its TLS series and
// no ESP series; a name listed twice (a reload under the read) does not
// fail the scrape.
func TestCollectorTLSOnly(t *testing.T) {
	l := gateway.TLSInfo{Name: "web", Kind: "terminate", Handshakes: 3, HandshakeFailures: map[string]uint64{}}
	o := gateway.TLSInfo{Name: "api", Kind: "originate", Handshakes: 1, HandshakeFailures: map[string]uint64{"backend": 2}}
	c := NewCollector(func() gateway.Stats { return gateway.Stats{TLS: []gateway.TLSInfo{l, o, l}} })
	if n := testutil.CollectAndCount(c, "sluice_tls_handshakes_total"); n != 2 {
		t.Errorf("%d handshake series, want 2", n)
	}
	if n := testutil.CollectAndCount(c, "sluice_tls_handshake_failures_total"); n != 1 {
		t.Errorf("%d failure series, want 1 (only reasons counted)", n)
	}
	if n := testutil.CollectAndCount(c, "sluice_sa_packets_total", "sluice_worker_sealed_total", "sluice_receiver_packets_total"); n != 0 {
		t.Errorf("%d ESP series on a TLS-only gateway", n)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
}

// A duplicate SA in one read must not fail the scrape.
func TestCollectorDuplicateSA(t *testing.T) {
	sa := gateway.SAInfo{Name: "x", Tunnel: "t", Direction: "in", SPI: 0x100, Packets: 1}
	c := NewCollector(func() gateway.Stats { return gateway.Stats{SAs: []gateway.SAInfo{sa, sa}} })
	if n := testutil.CollectAndCount(c, "sluice_sa_packets_total"); n != 1 {
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
		`sluice_sa_packets_total{direction="out",sa="a-to-b",spi="0x00001001",tunnel="to-b"} 10`,
		`sluice_sa_drops_total{direction="in",reason="replay",sa="b-to-a",spi="0x00002001",tunnel="to-b"} 2`,
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

// TestCollectorStateFailing: an SA whose reservations cannot be recorded
// shows it in sluice_sa_state_failing and sluice_sa_state_failures_total.
func TestCollectorStateFailing(t *testing.T) {
	st := gateway.Stats{SAs: []gateway.SAInfo{{Name: "o", Tunnel: "t", Direction: "out", SPI: 0x1001,
		StateFailing: true, StateFailures: 3, StateError: "read-only file system"}}}
	c := NewCollector(func() gateway.Stats { return st })
	const want = `
# HELP sluice_sa_state_failing 1 while the SA cannot record its sequence-number reservation in the state directory (it drops its packets).
# TYPE sluice_sa_state_failing gauge
sluice_sa_state_failing{direction="out",sa="o",spi="0x00001001",tunnel="t"} 1
# HELP sluice_sa_state_failures_total Sequence-number reservations of the SA that could not be recorded in the state directory.
# TYPE sluice_sa_state_failures_total counter
sluice_sa_state_failures_total{direction="out",sa="o",spi="0x00001001",tunnel="t"} 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "sluice_sa_state_failing", "sluice_sa_state_failures_total"); err != nil {
		t.Fatal(err)
	}
}

// TestCollectorIKE: the IKE counters as sluice_ike_* families, by what
// each counts, and each connection's state.
func TestCollectorIKE(t *testing.T) {
	b := controltest.New()
	b.SetIKE(&gateway.IKEInfo{
		Connections: []gateway.IKEConnInfo{{Name: "site-b", State: "established"}, {Name: "site-c", State: "down"}},
		Stats: map[string]uint64{"rx_packets": 12, "tx_packets": 11, "rx_malformed": 2, "auth_failed": 1,
			"tx_retransmits": 3, "rx_retransmits": 4, "ike_sa_established": 1, "child_sa_rekeyed": 5},
	})
	c := NewCollector(b.Stats)
	const want = `
# HELP sluice_ike_packets_total IKE datagrams received (rx) and sent (tx, retransmissions included).
# TYPE sluice_ike_packets_total counter
sluice_ike_packets_total{direction="rx"} 12
sluice_ike_packets_total{direction="tx"} 11
# HELP sluice_ike_drops_total IKE datagrams dropped, by reason (ike.Stats).
# TYPE sluice_ike_drops_total counter
sluice_ike_drops_total{reason="malformed"} 2
# HELP sluice_ike_failures_total IKE negotiations that failed, by reason.
# TYPE sluice_ike_failures_total counter
sluice_ike_failures_total{reason="auth_failed"} 1
# HELP sluice_ike_retransmits_total IKE requests retransmitted by us (tx) and by the peers, answered from the cache (rx).
# TYPE sluice_ike_retransmits_total counter
sluice_ike_retransmits_total{direction="rx"} 4
sluice_ike_retransmits_total{direction="tx"} 3
# HELP sluice_ike_exchanges_total IKE SAs and Child SAs established, rekeyed and deleted, and the other events the endpoint counts.
# TYPE sluice_ike_exchanges_total counter
sluice_ike_exchanges_total{event="child_sa_rekeyed"} 5
sluice_ike_exchanges_total{event="ike_sa_established"} 1
# HELP sluice_ike_connection_up 1 while the IKE connection has an established child installed, else 0.
# TYPE sluice_ike_connection_up gauge
sluice_ike_connection_up{connection="site-b"} 1
sluice_ike_connection_up{connection="site-c"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "sluice_ike_packets_total", "sluice_ike_drops_total",
		"sluice_ike_failures_total", "sluice_ike_retransmits_total", "sluice_ike_exchanges_total", "sluice_ike_connection_up"); err != nil {
		t.Error(err)
	}
}
