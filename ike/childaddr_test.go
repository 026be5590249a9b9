package ike

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestMOBIKEMoveBack: the initiator moves its end away and back
// (UpdateAddresses A -> A2 -> A); each move is a move of the Child SA on
// both sides, the one back to where the Child SA was made included: the
// initiator (the side that moves) and the responder (whose peer moved
// away and back) report each through OnChildAddress, with the
// addresses of that move.
func TestMOBIKEMoveBack(t *testing.T) {
	p := newMobikePair(t, nil)
	c, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	bc := p.bChildFor(t, c)
	home, away, bAddr := netip.AddrPortFrom(addrA, 500), netip.AddrPortFrom(addrA2, 500), netip.AddrPortFrom(addrB, 500)
	for i, to := range []netip.Addr{addrA2, addrA} {
		if err := p.a.UpdateAddresses(ctx(t), c, to); err != nil {
			t.Fatalf("move %d, to %v: %v (a %+v, b %+v)", i+1, to, err, p.a.Stats(), p.b.Stats())
		}
		// b's Child SA moves after its return routability check,
		// which follows its answer to a's update.
		waitFor(t, func() bool { return p.b.Stats().RoutabilityChecked == uint64(i+1) && idle(p.b) })
		at := netip.AddrPortFrom(to, 500)
		if l, r, ok := p.a.ChildAddrs(c); !ok || l != at || r != bAddr {
			t.Errorf("move %d: a's ChildAddrs %v <-> %v (%v), want %v <-> %v", i+1, l, r, ok, at, bAddr)
		}
		if l, r, ok := p.b.ChildAddrs(bc); !ok || l != bAddr || r != at {
			t.Errorf("move %d: b's ChildAddrs %v <-> %v (%v), want %v <-> %v", i+1, l, r, ok, bAddr, at)
		}
	}
	// The ChildSAs handed out keep the addresses they were made with.
	if c.Local != home || bc.Remote != home {
		t.Errorf("the Child SAs reported changed: a's %v, b's %v", c.Local, bc.Remote)
	}
	if _, _, ok := p.b.ChildAddrs(c); ok {
		t.Error("b's ChildAddrs of a's Child SA: ok")
	}
	p.mu.Lock()
	am, bm := slices.Clone(p.aMoves), slices.Clone(p.moves)
	p.mu.Unlock()
	wantA := []mobikeMoved{{c, away, bAddr}, {c, home, bAddr}}
	wantB := []mobikeMoved{{bc, bAddr, away}, {bc, bAddr, home}}
	if !slices.Equal(am, wantA) {
		t.Errorf("a's Child SA moves %v, want %v", am, wantA)
	}
	if !slices.Equal(bm, wantB) {
		t.Errorf("b's Child SA moves %v, want %v", bm, wantB)
	}
	if l := p.b.IKESAs(); len(l) != 1 || l[0].Remote != home {
		t.Errorf("b's IKE SAs %+v", l)
	}
}

// TestNATFollowSnapshot: b, not behind a NAT, follows a's new NAT
// mapping (natupdate.go) and then a's way back to the first one; the
// snapshot taken after each move carries the Child SA at the mapping
// it moved to, so a standby that adopts it sends ESP there and not to
// the mapping the NAT forgot.
func TestNATFollowSnapshot(t *testing.T) {
	var (
		mu    sync.Mutex
		moved []netip.AddrPort
	)
	clk := newFakeClock()
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.NoMOBIKE = true
	p := newPair(t, pa, pb, func(a, b *Config) {
		withClock(clk)(a, b)
		b.OnChildAddress = func(c *ChildSA, local, remote netip.AddrPort) {
			mu.Lock()
			moved = append(moved, remote)
			mu.Unlock()
		}
	})
	clk.settleOn(t, p)
	nat := newNATBox(t, p, clk)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	cb := p.respChild(t)
	first := netip.AddrPortFrom(addrNAT, 14500)
	if cb.Remote != first {
		t.Fatalf("b's Child SA made at %v, want %v", cb.Remote, first)
	}
	var want []netip.AddrPort
	for i, off := range []uint16{20000, 10000} {
		// a stopped past the NAT's timeout: the NAT forgot its
		// mapping and gives a's next datagram another (the second
		// time, the first one again).
		clk.Advance(30 * time.Second)
		clk.stall(25 * time.Second)
		nat.remap(off, false)
		clk.Advance(0)
		waitFor(t, settled(p))
		to := netip.AddrPortFrom(addrNAT, 4500+off)
		want = append(want, to)
		if sas := p.b.IKESAs(); len(sas) != 1 || sas[0].Remote != to {
			t.Fatalf("move %d: b's IKE SA %+v, want remote %v", i+1, sas, to)
		}
		mu.Lock()
		got := slices.Clone(moved)
		mu.Unlock()
		if !slices.Equal(got, want) {
			t.Fatalf("move %d: b moved its Child SA to %v, want %v", i+1, got, want)
		}
		if l, r, ok := p.b.ChildAddrs(cb); !ok || l != cb.Local || r != to {
			t.Errorf("move %d: b's ChildAddrs %v <-> %v (%v), want %v <-> %v", i+1, l, r, ok, cb.Local, to)
		}
		snaps := p.b.Snapshots()
		if len(snaps) != 1 {
			t.Fatalf("b has %d snapshots", len(snaps))
		}
		var adopted []*ChildSA
		standby, err := NewEndpoint(Config{Peers: []*Peer{pb}, clock: clk, OnChildSA: func(c *ChildSA) { adopted = append(adopted, c) }}, nopTransport{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { standby.Close() })
		if err := standby.Adopt(snaps[0].Data); err != nil {
			t.Fatal(err)
		}
		if len(adopted) != 1 {
			t.Fatalf("move %d: the standby adopted %d Child SAs", i+1, len(adopted))
		}
		if c := adopted[0]; c.InSPI != cb.InSPI || c.Remote != to || c.Local != cb.Local || !c.Encap {
			t.Errorf("move %d: the standby's Child SA %08x at %v <-> %v (encap %v), want %08x at %v <-> %v",
				i+1, c.InSPI, c.Local, c.Remote, c.Encap, cb.InSPI, cb.Local, to)
		}
	}
	if cb.Remote != first {
		t.Errorf("b's Child SA as reported changed to %v", cb.Remote)
	}
	if st := p.b.Stats(); st.NATPeerMoved != 2 {
		t.Errorf("b: %d NAT-T moves, want 2", st.NATPeerMoved)
	}
}

func (m mobikeMoved) String() string { return m.local.String() + " <-> " + m.remote.String() }
