package ike

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// childEvents records, in order, what OnChildSA ("+name") and OnDelete
// ("-name") reported.
type childEvents struct {
	mu  sync.Mutex
	ev  []string
	add map[*ChildSA]bool
}

func (r *childEvents) hook(c *Config) {
	r.add = map[*ChildSA]bool{}
	c.OnChildSA = func(s *ChildSA) { r.mu.Lock(); r.ev = append(r.ev, "+"+s.Child); r.add[s] = true; r.mu.Unlock() }
	c.OnDelete = func(s *ChildSA) { r.mu.Lock(); r.ev = append(r.ev, "-"+s.Child); r.mu.Unlock() }
}

func (r *childEvents) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ev)
}

// replacedFirst checks that each child deleted was reported again
// before its Delete: nothing went down.
func replacedFirst(t *testing.T, side string, ev []string) {
	t.Helper()
	up := map[string]int{}
	for _, e := range ev {
		switch e[0] {
		case '+':
			up[e[1:]]++
		case '-':
			if up[e[1:]]--; up[e[1:]] < 1 {
				t.Fatalf("%s: %q went down: events %v", side, e[1:], ev)
			}
		}
	}
}

// TestReauth: at Peer.ReauthTime (less up to a tenth) the initiator makes
// a new IKE SA with IKE_SA_INIT and IKE_AUTH, its IKE_AUTH child with it
// and its other child with CREATE_CHILD_SA, and then deletes the old IKE
// SA (section 2.8.3, make-before-break): the IKE SPIs and the Child SAs
// change, each child is reported again before its old SA goes, and the
// peer keeps the old IKE SA until the Delete (no INITIAL_CONTACT).
func TestReauth(t *testing.T) {
	pa, pb := childPeers(t)
	pa.ReauthTime = 100 * time.Second
	clk := newFakeClock()
	var ea, eb childEvents
	p := newPair(t, pa, pb, func(a, b *Config) {
		withClock(clk)(a, b)
		ea.hook(a)
		eb.hook(b)
	})
	clk.settleOn(t, p)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.a.InitiateChild(ctx(t), "to-b", "second"); err != nil {
		t.Fatal(err)
	}
	_, before := ikeChildren(t, p.a)
	oldSPIs := childSPIs(p.a)

	clk.Advance(90*time.Second - time.Millisecond)
	if s := p.a.Stats(); s.IKESAEstablished != 1 {
		t.Fatal("reauthenticated before reauth_time less a tenth")
	}
	clk.Advance(10 * time.Second)
	waitFor(t, func() bool {
		s := p.a.Stats()
		return s.IKESAEstablished == 2 && s.Deleted == 1 && idle(p.a) && idle(p.b) && len(p.b.IKESAs()) == 1
	})
	names, after := ikeChildren(t, p.a)
	if after.spii == before.spii || after.spir == before.spir || !slices.Equal(names, []string{"net", "second"}) {
		t.Fatalf("after the reauthentication: SPIs %016x/%016x (before %016x/%016x), children %v",
			after.spii, after.spir, before.spii, before.spir, names)
	}
	bnames, bsa := ikeChildren(t, p.b)
	if bsa.spii != after.spii || !slices.Equal(bnames, []string{"net", "second"}) {
		t.Fatalf("b: IKE SA %016x, children %v", bsa.spii, bnames)
	}
	for _, spi := range childSPIs(p.a) {
		if slices.Contains(oldSPIs, spi) {
			t.Fatalf("Child SA %08x was not replaced", spi)
		}
	}
	want := []string{"+net", "+second", "+net", "+second", "-net", "-second"}
	for _, side := range []struct {
		name string
		ev   []string
	}{{"a", ea.events()}, {"b", eb.events()}} {
		if !slices.Equal(side.ev, want) {
			t.Fatalf("%s's events %v, want %v", side.name, side.ev, want)
		}
		replacedFirst(t, side.name, side.ev)
	}
	if s := p.b.Stats(); s.InitialContacts != 0 || s.IKESAEstablished != 2 {
		t.Fatalf("b's stats %+v", s)
	}
	// The new IKE SA reauthenticates in its turn.
	clk.Advance(100 * time.Second)
	waitFor(t, func() bool { return p.a.Stats().IKESAEstablished == 3 && p.a.Stats().Deleted == 2 && idle(p.a) })
}

// TestControllerReauth: with Controllers on both sides (real UDP on
// loopback), a reauthentication replaces each child's pair with the
// new IKE SA's, under the same child, and retires the old pairs: no
// tunnel goes down on either side, and the inbound SAs in service are
// the new pairs' alone.
func TestControllerReauth(t *testing.T) {
	a, b := ctlPair(t, ChildPolicy{Peer: "to-b", Child: "net", Start: StartStart}, ChildPolicy{Peer: "to-b", Child: "more", Start: StartStart})
	a.peer.ReauthTime = 2 * time.Second
	a.ctl.Start(func(st ChildStatus) bool { return st.Start == StartStart })
	net1, more1 := a.waitUp(t, "net"), a.waitUp(t, "more")
	before := a.ep.IKESAs()
	if len(before) != 1 {
		t.Fatalf("%d IKE SAs", len(before))
	}
	waitFor(t, func() bool {
		l := a.ep.IKESAs()
		return len(l) == 1 && l[0].SPIi != before[0].SPIi && len(l[0].Children) == 2 && len(b.ep.IKESAs()) == 1 && idle(a.ep) && idle(b.ep)
	})
	net2, more2 := a.dp.sending("net"), a.dp.sending("more")
	if net2 == nil || more2 == nil || net2 == net1 || more2 == more1 {
		t.Fatalf("pairs after the reauthentication: net %v (was %v), more %v (was %v)", net2, net1, more2, more1)
	}
	waitFor(t, func() bool {
		c, d := b.dp.sending(b.rw("net")), b.dp.sending(b.rw("more"))
		return c != nil && d != nil && c.InSPI == net2.OutSPI && d.InSPI == more2.OutSPI
	})
	for _, s := range []*ctlSide{a, b} {
		waitFor(t, func() bool {
			s.dp.mu.Lock()
			defer s.dp.mu.Unlock()
			return len(s.dp.in) == 2 && len(s.dp.retired) >= 2
		})
		s.dp.mu.Lock()
		downs := s.dp.downs
		s.dp.mu.Unlock()
		if downs != 0 {
			t.Fatalf("%d tunnels went down", downs)
		}
	}
	for _, st := range a.ctl.Children() {
		if st.Pair == nil || st.LastErr != "" {
			t.Fatalf("child %+v", st)
		}
	}
}

// TestReauthAfterIKERekey: an IKE SA rekey (section 2.18) carries the
// reauthentication time over to the new IKE SA: the reauthentication
// comes at ReauthTime from the first IKE SA's establishment, not from the
// rekey's.
func TestReauthAfterIKERekey(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.ReauthTime = 100 * time.Second
	// The rekey at 59-60 s; its IKE SA's rekey would come at 118-120 s.
	pa.IKELifetime = Lifetime{RekeyTime: 60 * time.Second, LifeTime: 500 * time.Second, RandTime: time.Second}
	clk := newFakeClock()
	p := newPair(t, pa, pb, withClock(clk))
	clk.settleOn(t, p)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(60 * time.Second)
	waitFor(t, func() bool { return p.a.Stats().IKESARekeyed == 1 && idle(p.a) && idle(p.b) && len(p.a.IKESAs()) == 1 })
	clk.Advance(40 * time.Second) // t = 100 s: the reauthentication (90-100 s)
	// Deleted counts the rekeyed IKE SA too.
	waitFor(t, func() bool { s := p.a.Stats(); return s.IKESAEstablished == 2 && s.Deleted == 2 && idle(p.a) })
	if s := p.a.Stats(); s.IKESARekeyed != 1 {
		t.Fatalf("stats %+v", s)
	}
}
