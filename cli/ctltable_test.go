package cli

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/gateway"
)

// longStats are the counters of a big gateway with long names, IPv6
// addresses and big counters.
func longStats() gateway.Stats {
	drops := map[string]uint64{"replay": 123456, "auth_failed": 98765, "unknown_spi": 4567890, "queue_full": 1234567890, "no_route": 77}
	var st gateway.Stats
	for i := range 16 {
		st.Dataplane.Workers = append(st.Dataplane.Workers, dataplane.WorkerStats{Index: i, Sealed: 123456789012, Opened: 987654321098,
			TxPackets: 1111111111111, TxErrors: 12345, Drops: drops})
		st.Dataplane.Receivers = append(st.Dataplane.Receivers, dataplane.RxStats{Name: "udp/" + string(rune('a'+i)), Packets: 123456789012,
			Bytes: 123456789012345, Drops: drops})
	}
	for _, dir := range []string{"out", "in"} {
		st.SAs = append(st.SAs, gateway.SAInfo{Name: "frankfurt-dc2-to-singapore-" + dir + "-2", Tunnel: "frankfurt-dc2-to-singapore-dc1",
			Direction: dir, SPI: 0xc0ffee01, Alg: "chacha20poly1305", Mode: "tunnel", Encap: "udp", ESN: true, NeedsRekey: true,
			Engine: "sched:ipsecmb", Packets: 123456789012, Bytes: 123456789012345, Drops: drops})
	}
	st.TLS = []gateway.TLSInfo{{Name: "customer-portal-frontend-eu", Kind: "terminate", Listen: "[2001:db8:ffff:ffff:ffff:ffff:ffff:1]:8443",
		Open: 12345, Accepted: 123456789, Refused: 12345, IdleClosed: 123456, Handshakes: 123456789, Resumed: 12345678,
		BytesIn: 123456789012345, BytesOut: 1234567890123456, Requests: 123456789, SignOps: 1234567, SignBatches: 123456, SignMaxBatch: 64,
		SignQueueDepth: 12, HandshakeFailures: map[string]uint64{"protocol": 1234, "timeout": 56789, "backend": 12, "certificate": 3}}}
	info := longIKE()
	st.IKE = &info
	return st
}

func longIKE() gateway.IKEInfo {
	return gateway.IKEInfo{
		Connections: []gateway.IKEConnInfo{{Name: "frankfurt-dc2-to-singapore-dc1", Local: "2001:db8:ffff:ffff:ffff:ffff:ffff:fffe",
			Remote: "2001:db8:eeee:eeee:eeee:eeee:eeee:fffd", IKERemote: "[2001:db8:eeee:eeee:eeee:eeee:eeee:fffd]:4500", State: "established",
			IKESPIi: "0102030405060708", IKESPIr: "1112131415161718", IKEInitiator: true, IKEEstablished: time.Now().Add(-3 * time.Hour),
			IKESuite: "chacha20poly1305-prfsha512-x25519", LocalID: "C=DE, O=Example Corporation, OU=Network Operations, CN=gw1.fra.example.com",
			RemoteID: "C=SG, O=Example Corporation, OU=Network Operations, CN=gw1.sin.example.com",
			Proposal: "aes256gcm16-prfsha384-ecp384,chacha20poly1305-prfsha512-x25519", Error: "peer did not answer",
			Children: []gateway.IKEChildInfo{{Name: "frankfurt-dc2-to-singapore-net", StartAction: "start", State: "installed",
				InSPI: 0xc0010001, OutSPI: 0xc0020002, Suite: "chacha20poly1305", ESN: true, Encap: true,
				PeerAddr: "[2001:db8:eeee:eeee:eeee:eeee:eeee:fffd]:4500", LocalTS: []string{"2001:db8:1000::/48", "10.1.0.0/16"},
				RemoteTS: []string{"2001:db8:2000::/48", "10.2.0.0/16"}, BytesIn: 123456789012345, BytesOut: 1234567890123456,
				PacketsIn: 123456789012, PacketsOut: 1234567890123, Established: time.Now().Add(-59 * time.Minute),
				RekeyTime: "1h0m0s", LifeTime: "1h6m0s"}}}},
		Stats: map[string]uint64{"rx_packets": 4},
	}
}

// TestTablesFit100Columns: every table the client commands print, filled
// with long names, IPv6 addresses and big counters, fits 100 columns by
// default (cutting names with "…" where it must), also with the rates of
// stats --watch; -o wide shows the columns left out, and cuts nothing.
func TestTablesFit100Columns(t *testing.T) {
	st := longStats()
	prev := longStats()
	prev.SAs[0].Packets -= 5000
	rates := &ctlRates{prev: prev, dt: 2 * time.Second}
	tunnels := []gateway.TunnelInfo{{Name: "frankfurt-dc2-to-singapore-dc1", Local: "2001:db8:ffff:ffff:ffff:ffff:ffff:fffe",
		Peer: "2001:db8:eeee:eeee:eeee:eeee:eeee:fffd", Encap: "udp", MTU: 1380, Worker: 15, Out: "frankfurt-dc2-to-singapore-out-2",
		In:     []string{"frankfurt-dc2-to-singapore-in-1", "frankfurt-dc2-to-singapore-in-2"},
		Remote: []string{"2001:db8:2000::/48", "2001:db8:3000::/48", "10.2.0.0/16"}}}
	policies := []gateway.PolicyInfo{{Name: "singapore-web-servers-https", Tunnel: "frankfurt-dc2-to-singapore-dc1", Action: "protect",
		Selector: "2001:db8:1000:ffff::/64 -> 2001:db8:2000:ffff::/64 proto 6 sport any dport 443"}}
	tables := []struct {
		name  string
		print func(strings.Builder, ctlView) string
		wide  []string // headers only -o wide shows
	}{
		{"sa list", func(b strings.Builder, v ctlView) string { printSAs(&b, st.SAs, v); return b.String() }, []string{"MODE", "ENCAP", "ENGINE"}},
		{"tunnel list", func(b strings.Builder, v ctlView) string { printTunnels(&b, tunnels, v); return b.String() }, []string{"LOCAL", "WORKER"}},
		{"policy list", func(b strings.Builder, v ctlView) string { printPolicies(&b, policies, v); return b.String() }, nil},
		{"stats", func(b strings.Builder, v ctlView) string { printStats(&b, st, v); return b.String() },
			[]string{"ACCEPTED", "REFUSED", "IDLE CLOSED", "RESUMED", "REQUESTS", "SIGNS", "MEAN BATCH", "MAX BATCH", "QUEUE"}},
		{"stats --watch", func(b strings.Builder, v ctlView) string { v.rates = rates; printStats(&b, st, v); return b.String() },
			[]string{"SEALED  ", "PACKETS", "BYTES IN", "HANDSHAKES"}},
		{"ike list", func(b strings.Builder, v ctlView) string { printIKE(&b, longIKE(), v); return b.String() },
			[]string{"LOCAL ID", "IKE SPIS", "IKE PEER", "PROPOSALS", "LOCAL TS", "REMOTE TS", "PACKETS IN", "REKEY"}},
	}
	for _, tt := range tables {
		out := tt.print(strings.Builder{}, ctlView{})
		for _, l := range strings.Split(out, "\n") {
			if n := utf8.RuneCountInString(l); n > ctlWidth {
				t.Errorf("%s: a line of %d columns:\n%s", tt.name, n, l)
			}
		}
		wide := tt.print(strings.Builder{}, ctlView{wide: true})
		if strings.Contains(wide, "…") {
			t.Errorf("%s -o wide cuts:\n%s", tt.name, wide)
		}
		for _, h := range tt.wide {
			if strings.Contains(out, h) || !strings.Contains(wide, h) {
				t.Errorf("%s: column %q not only in -o wide:\n%s\n-o wide:\n%s", tt.name, h, out, wide)
			}
		}
		t.Logf("%s:\n%s", tt.name, out)
	}
}

// TestStatsRates: with the snapshot before and the time between, the
// stats show packets, bits, handshakes and drops per second; a counter
// that went back, or one the snapshot before lacked, shows "-".
func TestStatsRates(t *testing.T) {
	prev := gateway.Stats{
		Dataplane: dataplane.Stats{
			Workers:   []dataplane.WorkerStats{{Index: 0, Sealed: 100, Opened: 50, TxPackets: 150, Drops: map[string]uint64{"no_route": 1}}},
			Receivers: []dataplane.RxStats{{Name: "udp/0", Packets: 1000, Bytes: 100000, Drops: map[string]uint64{}}},
		},
		SAs: []gateway.SAInfo{
			{Name: "a-to-b", Tunnel: "to-b", Direction: "out", SPI: 0x1001, Packets: 10, Bytes: 1000},
			{Name: "b-to-a", Tunnel: "to-b", Direction: "in", SPI: 0x2001, Packets: 500, Bytes: 5000, Drops: map[string]uint64{"replay": 2}},
		},
		TLS: []gateway.TLSInfo{{Name: "web", Kind: "terminate", Listen: ":8443", Handshakes: 10, BytesIn: 1000, BytesOut: 2000}},
	}
	cur := gateway.Stats{
		Dataplane: dataplane.Stats{
			Workers:   []dataplane.WorkerStats{{Index: 0, Sealed: 2100, Opened: 1050, TxPackets: 3150, Drops: map[string]uint64{"no_route": 21}}},
			Receivers: []dataplane.RxStats{{Name: "udp/0", Packets: 3000, Bytes: 2600000, Drops: map[string]uint64{}}},
		},
		SAs: []gateway.SAInfo{
			{Name: "a-to-b", Tunnel: "to-b", Direction: "out", SPI: 0x1001, Packets: 1010, Bytes: 1001000},
			{Name: "b-to-a", Tunnel: "to-b", Direction: "in", SPI: 0x2001, Packets: 400, Bytes: 4000, Drops: map[string]uint64{"replay": 12}},
			{Name: "b-to-a-2", Tunnel: "to-b", Direction: "in", SPI: 0x2002, Packets: 7, Bytes: 700},
		},
		TLS: []gateway.TLSInfo{{Name: "web", Kind: "terminate", Listen: ":8443", Handshakes: 30, BytesIn: 251000, BytesOut: 2002000}},
	}
	var b strings.Builder
	if err := printStats(&b, cur, ctlView{rates: &ctlRates{prev: prev, dt: 2 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	ctlCheckLines(t, "stats with rates", b.String(),
		"WORKER  SEALED/S  OPENED/S  TX/S  TX ERRORS  DROPS/S  DROPS",
		"0       1.0k      500       1.5k  0          10       no_route=21",
		"",
		"RECEIVER  SIDE  PKTS/S  BITS/S  DROPS/S  DROPS",
		"0         esp   1.0k    10.0M   0        -",
		"",
		"TUNNEL  DIR  SA        SPI         PKTS/S  BITS/S  DROPS/S  DROPS",
		"to-b    out  a-to-b    0x00001001  500     4.0M    0        -",
		"to-b    in   b-to-a    0x00002001  -       -       5        replay=12",
		"to-b    in   b-to-a-2  0x00002002  -       -       -        -",
		"",
		"TLS  KIND       LISTEN  OPEN  HS/S  IN BIT/S  OUT BIT/S  FAILURES",
		"web  terminate  :8443   0     10    1.0M      8.0M       -",
	)
	// -o wide keeps the totals next to the rates.
	b.Reset()
	if err := printStats(&b, cur, ctlView{wide: true, rates: &ctlRates{prev: prev, dt: 2 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\nto-b    out  a-to-b    0x00001001  1010     500     1001000  4.0M    0        -\n") {
		t.Errorf("stats -o wide with rates:\n%s", b.String())
	}
}

// TestCtlRate: rates have three significant digits at most, with an SI
// prefix.
func TestCtlRate(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.4: "0", 12: "12", 999.4: "999", 999.6: "1.0k", 1234: "1.2k", 34.5e6: "34.5M",
		9.87e9: "9.9G", 1e21: "1000.0E"} {
		if got := ctlRate(v, true); got != want {
			t.Errorf("ctlRate(%v) = %q, want %q", v, got, want)
		}
	}
	if got := ctlRate(5, false); got != "-" {
		t.Errorf("ctlRate(5, false) = %q", got)
	}
}
