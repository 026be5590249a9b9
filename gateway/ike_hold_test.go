package gateway

import (
	"bytes"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/sad"
)

// holdBed is a gateway with one IKE child and a Controller without an
// endpoint: the tests call the OnChildSA and OnDelete callbacks the
// Controller gave the endpoint's configuration (up, down), as an
// endpoint would.
type holdBed struct {
	t   *testing.T
	g   *Gateway
	ec  ike.Config
	spi uint32
}

func (b *holdBed) up(c *ike.ChildSA)   { b.ec.OnChildSA(c) }
func (b *holdBed) down(c *ike.ChildSA) { b.ec.OnDelete(c) }

func newHoldBed(t *testing.T) *holdBed {
	old := DrainTime
	DrainTime = time.Hour // the drained inbound SAs stay for the checks
	t.Cleanup(func() { DrainTime = old })
	g, _ := testGateway(t, t.TempDir())
	g.store = sad.NewStore(nil)
	t.Cleanup(g.store.Close)
	conn := &config.Connection{Name: "peer", Local: netip.MustParseAddr("192.0.2.1"), Remote: netip.MustParseAddr("192.0.2.2"),
		Children: []config.Child{{Name: "net", RemoteTS: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/24")}}}}
	b := &holdBed{t: t, g: g, spi: 0x1000}
	ctl := g.controller()
	t.Cleanup(func() { ctl.Close(time.Second) })
	g.ike.dp.setConfig([]config.Connection{*conn})
	b.ec.Peers = []*ike.Peer{{Name: "peer", ChildName: "net", Local: conn.Local, Remote: conn.Remote}}
	ctl.Prepare(&b.ec, []ike.ChildPolicy{{Peer: "peer", Child: "net"}})
	ctl.Attach(nil)
	return b
}

// pair makes a negotiated pair of new SPIs.
func (b *holdBed) pair(hold bool) *ike.ChildSA {
	b.spi += 2
	key := bytes.Repeat([]byte{byte(b.spi)}, 20)
	return &ike.ChildSA{Name: "peer", Child: "net", Local: netip.MustParseAddrPort("192.0.2.1:4500"), Remote: netip.MustParseAddrPort("192.0.2.2:4500"),
		InSPI: b.spi, OutSPI: b.spi + 1, Suite: "aes128gcm16", InKey: key, OutKey: key, Encap: true, HoldOutbound: hold}
}

// check wants the tunnel to send with out and to take in.
func (b *holdBed) check(what string, out *ike.ChildSA, in ...*ike.ChildSA) {
	b.t.Helper()
	db := b.g.store.Load()
	tn := db.Tunnel("net")
	if tn == nil || tn.Out() == nil || tn.Out().SA.SPI() != out.OutSPI {
		b.t.Fatalf("%s: the tunnel does not send with %#x: %+v", what, out.OutSPI, tn)
	}
	for _, c := range in {
		if s := db.Inbound(c.InSPI); s == nil || s.Tunnel != tn {
			b.t.Fatalf("%s: inbound SA %#x not in the tunnel", what, c.InSPI)
		}
	}
	var cur *ike.ChildSA
	for _, st := range b.g.ike.ctl.Children() {
		if st.Child == "net" {
			cur = st.Pair
		}
	}
	if cur != out {
		b.t.Fatalf("%s: the child's current pair is %+v, want the one sending", what, cur)
	}
}

func (b *holdBed) held() *ike.ChildSA {
	d := b.g.ike.dp
	d.mu.Lock()
	defer d.mu.Unlock()
	if tn := d.tunnels["net"]; tn != nil {
		return tn.held
	}
	return nil
}

// TestIKEHoldOutbound: a pair the peer's rekey made (HoldOutbound) takes
// the peer's packets at once, but the tunnel sends on the old pair until
// the peer deletes it; in a rekey collision (RFC 7296 section 2.8.1) the
// tunnel ends up on the surviving pair whichever side won.
func TestIKEHoldOutbound(t *testing.T) {
	t.Run("peer rekeys", func(t *testing.T) {
		b := newHoldBed(t)
		old := b.pair(false)
		b.up(old)
		b.check("first pair", old, old)
		next := b.pair(true)
		b.up(next)
		b.check("held", old, old, next)
		b.down(old)
		b.check("the peer deleted the old pair", next, next)
		if b.held() != nil {
			t.Fatal("a pair still held")
		}
	})
	t.Run("collision won by us", func(t *testing.T) {
		b := newHoldBed(t)
		old := b.pair(false)
		b.up(old)
		theirs, ours := b.pair(true), b.pair(false)
		b.up(theirs)
		b.up(ours)
		b.check("both made", ours, old, theirs, ours)
		b.down(old)    // we delete the old pair
		b.down(theirs) // the peer deletes its redundant one
		b.check("after the deletes", ours, ours)
		if b.held() != nil {
			t.Fatal("the peer's redundant pair still held")
		}
	})
	t.Run("collision won by the peer", func(t *testing.T) {
		b := newHoldBed(t)
		old := b.pair(false)
		b.up(old)
		ours, theirs := b.pair(false), b.pair(true)
		b.up(ours)
		b.up(theirs)
		b.down(ours) // we delete our redundant pair
		b.check("ours deleted", theirs, theirs)
		b.down(old) // the peer deletes the old pair
		b.check("after the deletes", theirs, theirs)
	})
}

// TestIKEPairKeepsNoState: a negotiated pair keeps no sequence state in
// the state directory. Its keys live in memory only and are never
// installed again, so the state protects nothing, and recording it put a
// write and fsync in the install (before a rekey's answer could leave)
// and on a lane at the first packet each way (the lane, all its tunnels
// with it, stalled for the fsync: 40 to 600 ms under load, seen as late
// pings across rekeys).
func TestIKEPairKeepsNoState(t *testing.T) {
	b := newHoldBed(t)
	dir := b.g.cfg0.StateDir
	if dir == "" {
		t.Fatal("the test gateway has no state directory")
	}
	first := b.pair(false)
	b.up(first)
	b.check("first pair", first, first)
	next := b.pair(true)
	b.up(next)
	b.down(first)
	b.check("rekeyed", next, next)
	db := b.g.store.Load()
	for _, s := range []*sad.SA{db.Tunnel("net").Out(), db.Inbound(next.InSPI), db.Inbound(first.InSPI)} {
		// (Retired is set for every SA: the tunnel's counter totals.)
		if s.State != nil {
			t.Errorf("SA %s keeps durable sequence state", s.Name)
		}
	}
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Errorf("state directory holds %s after negotiated pairs were installed", f.Name())
	}
}
