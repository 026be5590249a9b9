package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/gateway"
)

// TestIKECommands: sluice ike list shows each connection with its IKE
// suite and both identities, its child with its SPIs, ESP suite and bytes
// each way, and the counters; -o wide adds the IKE SPIs, selectors and
// lifetimes; initiate and terminate name the connection; an unknown one
// exits with status 2.
func TestIKECommands(t *testing.T) {
	path, b := fakeGateway(t)
	b.SetIKE(&gateway.IKEInfo{
		Connections: []gateway.IKEConnInfo{{Name: "site-b", Local: "192.0.2.1", Remote: "192.0.2.2", State: "established",
			IKESPIi: "0102030405060708", IKESPIr: "1112131415161718", IKESuite: "aes256gcm16-prfsha384-ecp384",
			LocalID: "gw-a.example.com", RemoteID: "C=CH, O=Example, CN=gw-b",
			Children: []gateway.IKEChildInfo{{Name: "site-b-net", StartAction: "start", State: "installed", InSPI: 0xc0010001, OutSPI: 0xc0020002,
				Suite: "aes128gcm16", ESN: true, BytesIn: 12345, BytesOut: 67890, PacketsIn: 12, PacketsOut: 34, PeerAddr: "192.0.2.2:4500", LocalTS: []string{"10.1.0.0/24"}, RemoteTS: []string{"10.2.0.0/24"},
				Established: time.Now().Add(-time.Minute), RekeyTime: "1h0m0s", LifeTime: "1h6m0s"}}}},
		Stats: map[string]uint64{"rx_packets": 4, "tx_packets": 4, "child_sa_established": 1, "auth_failed": 0},
	})
	code, out, errOut := ctlRun("ike", "list", "--socket", path)
	if code != 0 {
		t.Fatalf("ike list: exit %d: %s", code, errOut)
	}
	ctlCheckLines(t, "ike list", out,
		"CONNECTION  STATE        REMOTE     REMOTE ID                 IKE SUITE",
		"site-b      established  192.0.2.2  C=CH, O=Example, CN=gw-b  aes256gcm16-prfsha384-ecp384",
		"",
		"CHILD       STATE      IN SPI      OUT SPI     ESP SUITE    BYTES IN  BYTES OUT  AGE",
		"site-b-net  installed  0xc0010001  0xc0020002  aes128gcm16  12345     67890      1m0s",
		"",
		"ike: child_sa_established=1 rx_packets=4 tx_packets=4")
	_, out, _ = ctlRun("ike", "list", "-o", "wide", "--socket", path)
	for _, want := range []string{"LOCAL ID", "gw-a.example.com", "10.2.0.0/24", "0102030405060708_i", "192.0.2.2:4500", "PACKETS IN", "1h6m0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("ike list -o wide lacks %q:\n%s", want, out)
		}
	}
	if code, out, _ := ctlRun("ike", "initiate", "site-b", "--socket", path); code != 0 || !strings.Contains(out, "site-b established") {
		t.Errorf("ike initiate: %d %q", code, out)
	}
	if code, out, _ := ctlRun("ike", "terminate", "site-b", "--socket", path); code != 0 || !strings.Contains(out, "site-b terminated") {
		t.Errorf("ike terminate: %d %q", code, out)
	}
	if code, _, errOut := ctlRun("ike", "terminate", "nope", "--socket", path); code != ExitUsage || !strings.Contains(errOut, `no IKE connection "nope"`) {
		t.Errorf("ike terminate nope: %d %q", code, errOut)
	}
	if code, out, _ := ctlRun("stats", "--socket", path); code != 0 || !strings.Contains(out, "ike: child_sa_established=1") {
		t.Errorf("stats lacks the IKE counters: %d\n%s", code, out)
	}
}

// TestIKEListRoadWarriors: sluice ike list shows, for each road warrior
// of a responder-only connection (a tunnel "<child>/<virtual IP>"), the
// identity its IKE SA proved, and the pools' occupancy.
func TestIKEListRoadWarriors(t *testing.T) {
	path, b := fakeGateway(t)
	b.SetIKE(&gateway.IKEInfo{
		Connections: []gateway.IKEConnInfo{{Name: "rw", Local: "192.0.2.1", Remote: "%any", State: "established",
			IKESuite: "aes128gcm16-prfsha256-x25519", LocalID: "gw.example", RemoteID: "dave@example.com",
			Children: []gateway.IKEChildInfo{
				{Name: "net", Tunnel: "net/10.3.0.1", VIPs: []string{"10.3.0.1"}, RemoteID: "carol@example.com", State: "installed",
					InSPI: 0xc0010001, OutSPI: 0xc0020002, Suite: "aes128gcm16", BytesIn: 1, BytesOut: 2, Established: time.Now().Add(-time.Minute)},
				{Name: "net", Tunnel: "net/10.3.0.2", VIPs: []string{"10.3.0.2"}, RemoteID: "dave@example.com", State: "installed",
					InSPI: 0xc0010003, OutSPI: 0xc0020004, Suite: "aes128gcm16", BytesIn: 3, BytesOut: 4, Established: time.Now().Add(-time.Minute)}}}},
		Pools: []gateway.IKEPoolInfo{{Name: "rw4", Size: 254, Online: 2, Offline: 1, Free: 251}},
		Stats: map[string]uint64{"child_sa_established": 2},
	})
	code, out, errOut := ctlRun("ike", "list", "--socket", path)
	if code != 0 {
		t.Fatalf("ike list: exit %d: %s", code, errOut)
	}
	ctlCheckLines(t, "ike list", out,
		"CONNECTION  STATE        REMOTE  REMOTE ID         IKE SUITE",
		"rw          established  %any    dave@example.com  aes128gcm16-prfsha256-x25519",
		"",
		"CHILD         STATE      REMOTE ID          IN SPI      OUT SPI     BYTES IN  BYTES OUT  AGE",
		"net/10.3.0.1  installed  carol@example.com  0xc0010001  0xc0020002  1         2          1m0s",
		"net/10.3.0.2  installed  dave@example.com   0xc0010003  0xc0020004  3         4          1m0s",
		"",
		"POOL  SIZE  ONLINE  OFFLINE  FREE",
		"rw4   254   2       1        251",
		"",
		"ike: child_sa_established=2")
}
