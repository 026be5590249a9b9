package gateway

import (
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/sad"
)

const vipDoc = `[tun]
addresses = ["10.2.0.1/24"]

[[pool]]
name = "rw"
addrs = "10.3.0.0/24"
dns = ["10.3.0.53"]

[[pool]]
name = "big6"
addrs = "fd00:3::/64"

[[connection]]
name = "rw"
local_addrs = ["192.0.2.2"]
remote_addrs = ["%any"]
pools = ["rw", "big6"]
  [connection.local]
  auth = "psk"
  id = "gw.example"
  [connection.remote]
  auth = "psk"
  [[connection.children]]
  name = "rw"
  local_ts = ["10.2.0.0/24"]
  remote_ts = ["10.3.0.0/24"]

[[connection]]
name = "home"
local_addrs = ["192.0.2.2"]
remote_addrs = ["192.0.2.7"]
vips = ["0.0.0.0", "::"]
  [connection.local]
  auth = "psk"
  id = "client.example"
  [connection.remote]
  auth = "psk"
  id = "home.example"
  [[connection.children]]
  name = "home"
  local_ts = ["10.9.0.0/24"]
  remote_ts = ["10.7.0.0/24"]

[[secret]]
type = "ike"
secret = "0x00112233445566778899aabbccddeeff"
`

// TestVIPPeer: a connection's pools become its peer's, made once per
// [[pool]] and kept by a reload that leaves the pool as it was (its
// leases with it); its vips become the peer's VIPs. An IPv6 prefix of
// more than 2^31 addresses is cut to its first 2^31, as strongSwan does.
func TestVIPPeer(t *testing.T) {
	parse := func(doc string) *config.Gateway {
		t.Helper()
		cfg, err := config.ParseGateway("vip.toml", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	g := &Gateway{}
	cfg := parse(vipDoc)
	peer := func(cfg *config.Gateway, i int) *ike.Peer {
		t.Helper()
		p := &ike.Peer{}
		if err := g.vipPeer(cfg, i, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rw := peer(cfg, 0)
	if len(rw.Pools) != 2 || rw.Pools[0].Name() != "rw" || rw.Pools[0].First() != netip.MustParseAddr("10.3.0.1") ||
		!slices.Equal(rw.Pools[0].DNS(), []netip.Addr{netip.MustParseAddr("10.3.0.53")}) || rw.Pools[1].Size() != 1<<31-2 {
		t.Fatalf("pools %v", rw.Pools)
	}
	if home := peer(cfg, 1); !slices.Equal(home.VIPs, []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}) || len(home.Pools) != 0 {
		t.Fatalf("home: VIPs %v, pools %v", home.VIPs, home.Pools)
	}
	a, err := rw.Pools[0].Acquire("carol", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	// A reload with the same pool keeps it, and carol's lease.
	again := peer(parse(vipDoc), 0)
	if again.Pools[0] != rw.Pools[0] {
		t.Fatal("a reload made the unchanged pool again")
	}
	if id, _, ok := again.Pools[0].Lease(a); !ok || id != "carol" {
		t.Fatal("carol's lease is gone")
	}
	// A changed pool is the same one with new addresses (reloaded in
	// place: the running peers and IKE SAs keep it), and a reload notices
	// it; carol's lease, outside it now, stays hers until she lets go.
	changedDoc := parse(strings.Replace(vipDoc, `addrs = "10.3.0.0/24"`, `addrs = "10.3.0.10-10.3.0.20"`, 1))
	if !g.poolsChanged(changedDoc) || g.poolsChanged(parse(vipDoc)) {
		t.Fatal("poolsChanged does not see the change, or sees one where there is none")
	}
	changed := peer(changedDoc, 0)
	if changed.Pools[0] != rw.Pools[0] || changed.Pools[0].First() != netip.MustParseAddr("10.3.0.10") || changed.Pools[0].Size() != 11 {
		t.Fatalf("changed pool: %v-%v (same %v)", changed.Pools[0].First(), changed.Pools[0].Last(), changed.Pools[0] == rw.Pools[0])
	}
	if g.poolsChanged(changedDoc) {
		t.Fatal("a change applied is still a change")
	}
	if got, _ := changed.Pools[0].Acquire("dave", netip.Addr{}); got != netip.MustParseAddr("10.3.0.10") {
		t.Fatalf("dave got %v", got)
	}
	if !changed.Pools[0].Release("carol", a) {
		t.Fatal("carol's lease outside the changed pool was lost")
	}
	// Another family: a new pool.
	six := peer(parse(strings.Replace(vipDoc, `addrs = "10.3.0.0/24"`, `addrs = "fd00:9::/120"`, 1)), 0)
	if six.Pools[0] == rw.Pools[0] || !six.Pools[0].Is6() {
		t.Fatal("a pool of the other family was not made anew")
	}
}

// TestIKEPoolInfo: `sluice ike list` and the metrics see each pool's
// size, its leases online and offline and its free addresses.
func TestIKEPoolInfo(t *testing.T) {
	cfg, err := config.ParseGateway("vip.toml", []byte(vipDoc))
	if err != nil {
		t.Fatal(err)
	}
	g := &Gateway{store: sad.NewStore(nil)}
	t.Cleanup(g.store.Close)
	p := &ike.Peer{}
	if err := g.vipPeer(cfg, 0, p); err != nil {
		t.Fatal(err)
	}
	rw := p.Pools[0]
	a, err := rw.Acquire("carol", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Acquire("dave", netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	rw.Release("carol", a) // offline, kept for carol
	got := g.IKE().Pools
	want := []IKEPoolInfo{{Name: "big6", Size: 1<<31 - 2, Free: 1<<31 - 2}, {Name: "rw", Size: 254, Online: 1, Offline: 1, Free: 252}}
	if !slices.Equal(got, want) {
		t.Fatalf("pools %+v, want %+v", got, want)
	}
}

// TestChildVIPs: the gateway puts on its TUN device only what ike would
// have taken of a Child SA's virtual IPs (one unicast host address per
// family, inside the Child SA's local selectors), whatever road the
// Child SA came by; vipChildUp logs the rest at WARN and holds nothing
// of them.
func TestChildVIPs(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	ts := []ike.Selector{ike.SelectorFromPrefix(netip.MustParsePrefix("10.3.0.0/24")), ike.SelectorFromPrefix(netip.MustParsePrefix("fd00:3::/112"))}
	c := &ike.ChildSA{Name: "home", LocalTS: ts,
		VIPs: addrs("127.0.0.1", "10.9.9.9", "10.3.0.1", "10.3.0.2", "fe80::1", "224.0.0.1", "0.0.0.0", "255.255.255.255", "::ffff:10.3.0.7", "ff02::1", "fd00:3::1")}
	got, refused := childVIPs(c)
	if want := addrs("10.3.0.1", "fd00:3::1"); !slices.Equal(got, want) {
		t.Fatalf("childVIPs %v, want %v", got, want)
	}
	for i, want := range []string{"127.0.0.1 is a loopback address", "10.9.9.9 is outside the Child SA's local traffic selectors",
		"10.3.0.2 is a second one of its family", "fe80::1 is a link-local address", "224.0.0.1 is a multicast address",
		"0.0.0.0 is the unspecified address", "255.255.255.255 is the broadcast address",
		"::ffff:10.3.0.7 is an IPv4-mapped IPv6 address", "ff02::1 is a multicast address"} {
		want = "virtual IP " + want
		if i >= len(refused) || refused[i] != want {
			t.Fatalf("refused %q, want %q at %d", refused, want, i)
		}
	}

	// Only refused addresses: nothing goes on the device (no device is
	// touched), nothing is held, and a WARN line names them.
	var buf strings.Builder
	g := &Gateway{ikeLog: slog.New(slog.NewTextHandler(&buf, nil))}
	g.vip.conns = map[string][]netip.Prefix{"home": {netip.MustParsePrefix("10.7.0.0/24")}}
	bad := &ike.ChildSA{Name: "home", LocalTS: ts, VIPs: addrs("127.0.0.1", "10.9.9.9")}
	g.vipChildUp(bad)
	if len(g.vip.held) != 0 {
		t.Fatalf("held %v", g.vip.held)
	}
	if out := buf.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "virtual IPs not put on the TUN device") ||
		!strings.Contains(out, "virtual IP 127.0.0.1 is a loopback address; virtual IP 10.9.9.9 is outside") {
		t.Fatalf("log: %s", out)
	}
	g.vipChildDown(bad) // lets go of nothing, touches no device
	if len(g.vip.held) != 0 {
		t.Fatalf("held %v after down", g.vip.held)
	}
}
