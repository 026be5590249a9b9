package lab_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// pings reports whether one ping from ns to dst is answered within a
// second.
func pings(ctx context.Context, ns *lab.Netns, dst netip.Addr) bool {
	_, err := ns.Exec(ctx, "ping", "-n", "-q", "-c", "1", "-W", "1", dst.String())
	return err == nil
}

// TestHATopology builds the HA test network and checks its paths: the
// peer reaches the wan virtual address through the wan router, the host
// reaches the lan virtual address through the lan router, the gateways
// reach each other over the sync links; CutSync stops the sync path only
// (and counts what it drops), Isolate cuts one gateway off, and both are
// undone.
func TestHATopology(t *testing.T) {
	lab.Require(t)
	ctx := testContext(t)
	l := labWithCleanup(t)
	topo, err := l.NewHATopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.AddVIPs(ctx, topo.A); err != nil {
		t.Fatal(err)
	}
	a, b := topo.A, topo.B
	if err := topo.WaitVIP(ctx, a, time.Second); err != nil {
		t.Fatal(err)
	}
	check := func(what string, ns *lab.Netns, dst netip.Addr, want bool) {
		t.Helper()
		if got := pings(ctx, ns, dst); got != want {
			t.Errorf("%s: ping %s from %s answered %v, want %v", what, dst, ns, got, want)
		}
	}
	check("peer to the wan VIP", topo.Peer, topo.WANVIP.Addr(), true)
	// The wan router learnt a's MAC for the virtual address.
	mac, err := a.NS.LinkMAC(lab.HAWANIf)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := topo.WAN.Neighbour(topo.WANVIP.Addr()); err != nil || got.String() != mac.String() {
		t.Errorf("the wan router's neighbour entry for %s: %v, %v; want a's MAC %v", topo.WANVIP.Addr(), got, err, mac)
	}
	check("peer to gateway b", topo.Peer, b.WAN.Addr(), true)
	check("host to the lan VIP", topo.Host, topo.LANVIP.Addr(), true)
	check("remote to the peer", topo.Remote, topo.PeerWAN.Addr(), true)
	check("a to b over sync", a.NS, b.Sync.Addr(), true)
	check("a to the witness's router", a.NS, topo.Witness.Addr(), true)
	// The witness listens: a connect completes (package ha counts
	// nothing less).
	if c, err := a.NS.Dial(ctx, "tcp", topo.Witness.String()); err != nil {
		t.Errorf("a's connect to the witness %v: %v", topo.Witness, err)
	} else {
		c.Close()
	}
	// The gateways refuse traffic for the remote network while no tunnel
	// routes it: nothing leaves in the clear.
	check("host to remote, no tunnel", topo.Host, topo.RemoteAddr, false)

	if err := topo.CutSync(ctx); err != nil {
		t.Fatal(err)
	}
	check("a to b over a cut sync link", a.NS, b.Sync.Addr(), false)
	check("a to b over the wan, sync cut", a.NS, b.WAN.Addr(), true)
	check("peer to the wan VIP, sync cut", topo.Peer, topo.WANVIP.Addr(), true)
	c, err := topo.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c["cut_sync"] == 0 || c["forwarded"] == 0 || c["sync_forwarded"] == 0 {
		t.Errorf("counters after a ping over the cut sync link: %v; want cut_sync, forwarded and sync_forwarded above 0", c)
	}
	if err := topo.HealSync(ctx); err != nil {
		t.Fatal(err)
	}
	check("a to b over a healed sync link", a.NS, b.Sync.Addr(), true)

	if err := topo.Isolate(ctx, a); err != nil {
		t.Fatal(err)
	}
	check("peer to isolated a", topo.Peer, topo.WANVIP.Addr(), false)
	check("isolated a to the router", a.NS, topo.RouterWAN, false)
	check("isolated a to b over sync", a.NS, b.Sync.Addr(), false)
	check("b to the router, a isolated", b.NS, topo.RouterWAN, true)
	if c, err = topo.Counters(ctx); err != nil || c["cut_a"] == 0 {
		t.Errorf("counters with a isolated: %v, %v; want cut_a above 0", c, err)
	}
	if err := topo.Rejoin(ctx, a); err != nil {
		t.Fatal(err)
	}
	check("peer to a, rejoined", topo.Peer, topo.WANVIP.Addr(), true)
	check("a to b over sync, rejoined", a.NS, b.Sync.Addr(), true)

	// Moved by hand: the wan router still has a's MAC until b announces
	// the address or the entry goes stale.
	if err := topo.RemoveVIPs(a); err != nil {
		t.Fatal(err)
	}
	if err := topo.WaitVIP(ctx, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := topo.AddVIPs(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := topo.WaitVIP(ctx, b, time.Second); err != nil {
		t.Fatal(err)
	}
}
