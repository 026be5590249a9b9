package gateway

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/sad"
)

// newRWBed is a holdBed whose connection has no remote address (remote
// %any, a pool): a responder for road warriors.
func newRWBed(t *testing.T) *holdBed {
	old := DrainTime
	DrainTime = time.Hour
	t.Cleanup(func() { DrainTime = old })
	g, _ := testGateway(t, t.TempDir())
	g.store = sad.NewStore(nil)
	t.Cleanup(g.store.Close)
	conn := &config.Connection{Name: "rw", Local: netip.MustParseAddr("192.0.2.1"), Pools: []string{"rw"},
		Children: []config.Child{{Name: "net", RemoteTS: []netip.Prefix{netip.MustParsePrefix("10.3.0.0/24")}}}}
	b := &holdBed{t: t, g: g, spi: 0x1000}
	ctl := g.controller()
	t.Cleanup(func() { ctl.Close(time.Second) })
	g.ike.dp.setConfig([]config.Connection{*conn})
	g.ike.conns = []config.Connection{*conn} // what the endpoint would be built from
	b.ec.Peers = []*ike.Peer{{Name: "rw", ChildName: "net", Local: conn.Local}}
	ctl.Prepare(&b.ec, []ike.ChildPolicy{{Peer: "rw", Child: "net"}})
	ctl.Attach(nil)
	return b
}

// rwPair makes a pair of road warrior i: from 198.51.100.i, its virtual
// IP 10.3.0.i.
func (b *holdBed) rwPair(i int, hold bool) *ike.ChildSA {
	b.spi += 2
	key := bytes.Repeat([]byte{byte(b.spi)}, 20)
	vip := netip.AddrFrom4([4]byte{10, 3, 0, byte(i)})
	return &ike.ChildSA{Name: "rw", Child: "net", Local: netip.MustParseAddrPort("192.0.2.1:4500"),
		Remote: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), 4500),
		InSPI:  b.spi, OutSPI: b.spi + 1, Suite: "aes128gcm16", InKey: key, OutKey: key, Encap: true, HoldOutbound: hold,
		VIPs: []netip.Addr{vip}, RemoteTS: []ike.Selector{ike.SelectorFromPrefix(netip.PrefixFrom(vip, 32))}}
}

// rwCheck wants road warrior i's tunnel "net/10.3.0.i" to send with out,
// take in and route the road warrior's virtual IP only.
func (b *holdBed) rwCheck(what string, i int, out *ike.ChildSA, in ...*ike.ChildSA) {
	b.t.Helper()
	name := fmt.Sprintf("net/10.3.0.%d", i)
	db := b.g.store.Load()
	tn := db.Tunnel(name)
	if tn == nil || tn.Out() == nil || tn.Out().SA.SPI() != out.OutSPI {
		b.t.Fatalf("%s: tunnel %s does not send with %#x: %+v", what, name, out.OutSPI, tn)
	}
	if want := fmt.Sprintf("[10.3.0.%d/32]", i); fmt.Sprint(tn.Remote) != want {
		b.t.Fatalf("%s: tunnel %s routes %v, want %s", what, name, tn.Remote, want)
	}
	for _, c := range in {
		if s := db.Inbound(c.InSPI); s == nil || s.Tunnel != tn {
			b.t.Fatalf("%s: inbound SA %#x not in tunnel %s", what, c.InSPI, name)
		}
	}
}

// TestIKERoadWarriorTunnels: the Child SAs of several road warriors of
// one responder-only connection each go into a tunnel of their own,
// named by the child and the road warrior's virtual IP, routing that
// address: a rekey of one (held until the peer's Delete) stays in its
// tunnel, the end of one takes its tunnel and leaves the others', and
// once all went, neither the SAD nor the data plane keeps anything of
// them.
func TestIKERoadWarriorTunnels(t *testing.T) {
	b := newRWBed(t)
	const n = 3
	cur := make([]*ike.ChildSA, n+1)
	for i := 1; i <= n; i++ {
		cur[i] = b.rwPair(i, false)
		b.up(cur[i])
	}
	for i := 1; i <= n; i++ {
		b.rwCheck("all up", i, cur[i], cur[i])
	}
	// Road warrior 2 rekeys: the new pair is held, then sends.
	next := b.rwPair(2, true)
	b.up(next)
	b.rwCheck("rw2's rekey held", 2, cur[2], cur[2], next)
	b.down(cur[2])
	b.rwCheck("rw2 rekeyed", 2, next, next)
	cur[2] = next
	for _, i := range []int{1, 3} {
		b.rwCheck("the others after rw2's rekey", i, cur[i], cur[i])
	}
	if !b.g.isIKEChild("net/10.3.0.2") {
		t.Error("a road warrior's tunnel is not taken for the child's (a reload would remove it)")
	}
	// Road warrior 1 goes; its late Delete of nothing changes nothing.
	b.down(cur[1])
	b.down(b.rwPair(1, false))
	if b.g.store.Load().Tunnel("net/10.3.0.1") != nil {
		t.Fatal("rw1's tunnel stays after its Child SA went")
	}
	b.rwCheck("rw2 after rw1 went", 2, cur[2], cur[2])
	b.rwCheck("rw3 after rw1 went", 3, cur[3], cur[3])
	// Road warriors come and go: nothing of them stays.
	for round := range 20 {
		c := b.rwPair(10+round%5, false)
		b.up(c)
		r := b.rwPair(10+round%5, true)
		b.up(r)
		b.down(c)
		b.down(r)
	}
	b.down(cur[2])
	b.down(cur[3])
	if tns := b.g.store.Load().Tunnels(); len(tns) != 0 {
		t.Errorf("the SAD keeps %d tunnels of road warriors gone", len(tns))
	}
	d := b.g.ike.dp
	d.mu.Lock()
	left := len(d.tunnels)
	d.mu.Unlock()
	if left != 0 {
		t.Errorf("the data plane keeps %d tunnels' state of road warriors gone", left)
	}
	if sts := b.g.ike.ctl.Children(); len(sts) != 1 || sts[0].Pair != nil {
		t.Errorf("the Controller keeps %+v", sts)
	}
}

// TestIKERoadWarriorsRebuild: a new endpoint (a reload that changed the
// [ike] options) takes the road warriors' tunnels down: their IKE SAs
// ended with the old endpoint, which will report nothing more of them,
// and no initiation of ours brings them back.
func TestIKERoadWarriorsRebuild(t *testing.T) {
	b := newRWBed(t)
	rw1 := b.rwPair(1, false)
	b.up(rw1)
	b.rwCheck("up", 1, rw1, rw1)
	ec := ike.Config{Peers: b.ec.Peers}
	b.g.ike.ctl.Prepare(&ec, []ike.ChildPolicy{{Peer: "rw", Child: "net"}})
	if b.g.store.Load().Tunnel("net/10.3.0.1") != nil {
		t.Fatal("the road warrior's tunnel stays after the endpoint was replaced")
	}
	b.down(rw1) // the old endpoint's: ignored
	ec.OnChildSA(b.rwPair(1, false))
	if tn := b.g.store.Load().Tunnel("net/10.3.0.1"); tn == nil {
		t.Fatal("the road warrior's next Child SA, on the new endpoint, has no tunnel")
	}
}

// TestIKERoadWarriorMoved: a road warrior without a virtual IP, whose
// address MOBIKE moved, rekeys on the same IKE SA: the new pair goes to
// its tunnel (named by the address it came from), not to a second one,
// and the tunnel goes with the pair's Delete.
func TestIKERoadWarriorMoved(t *testing.T) {
	b := newRWBed(t)
	first := b.rwPair(1, false)
	first.VIPs, first.IKESPIi, first.IKESPIr = nil, 0x11, 0x22
	first.RemoteTS = []ike.Selector{ike.SelectorFromPrefix(netip.MustParsePrefix("10.3.0.1/32"))}
	b.up(first)
	name := "net/" + first.Remote.String()
	if b.g.store.Load().Tunnel(name) == nil {
		t.Fatalf("no tunnel %s", name)
	}
	next := *first
	next.InSPI, next.OutSPI = first.InSPI+100, first.OutSPI+100
	next.Remote = netip.MustParseAddrPort("203.0.113.9:4500") // MOBIKE moved it
	b.up(&next)
	db := b.g.store.Load()
	if tn := db.Tunnel(name); tn == nil || tn.Out() == nil || tn.Out().SA.SPI() != next.OutSPI {
		t.Fatalf("the rekeyed pair is not in the road warrior's tunnel %s: %+v", name, tn)
	}
	if n := len(db.Tunnels()); n != 1 {
		t.Fatalf("%d tunnels, want the road warrior's one", n)
	}
	b.down(first)
	b.down(&next)
	if n := len(b.g.store.Load().Tunnels()); n != 0 {
		t.Fatalf("%d tunnels after the road warrior went", n)
	}
}
