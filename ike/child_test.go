package ike

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

// childPeers are peers with two further children each: "second"
// (10.3/24 on a's side, 10.4/24 on b's) and "pfs" (10.5/24, 10.6/24,
// with a DH group for PFS); a also has "stray", which b does not
// know.
func childPeers(t *testing.T) (*Peer, *Peer) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.ChildName, pb.ChildName = "net", "net"
	pa.Children = []Child{
		{Name: "second", LocalTS: prefixes("10.3.0.0/24"), RemoteTS: prefixes("10.4.0.0/24")},
		{Name: "pfs", LocalTS: prefixes("10.5.0.0/24"), RemoteTS: prefixes("10.6.0.0/24"), ESP: mustProps(t, ProtoESP, "aes256gcm16-ecp256")},
		{Name: "stray", LocalTS: prefixes("10.7.0.0/24"), RemoteTS: prefixes("10.8.0.0/24")},
	}
	pb.Children = []Child{
		{Name: "second", LocalTS: prefixes("10.4.0.0/24"), RemoteTS: prefixes("10.3.0.0/24")},
		{Name: "pfs", LocalTS: prefixes("10.6.0.0/24"), RemoteTS: prefixes("10.5.0.0/24"), ESP: mustProps(t, ProtoESP, "aes256gcm16-ecp256")},
	}
	return pa, pb
}

// bChildFor waits for b to report the Child SA that mirrors a's c.
func (p *pair) bChildFor(t *testing.T, c *ChildSA) *ChildSA {
	t.Helper()
	var got *ChildSA
	waitFor(t, func() bool {
		p.bChildMu.Lock()
		defer p.bChildMu.Unlock()
		for _, x := range p.bChild {
			if x.InSPI == c.OutSPI {
				got = x
				return true
			}
		}
		return false
	})
	return got
}

func checkTS(t *testing.T, c *ChildSA, local, remote string) {
	t.Helper()
	if len(c.LocalTS) != 1 || len(c.RemoteTS) != 1 || c.LocalTS[0].String() != local || c.RemoteTS[0].String() != remote {
		t.Fatalf("child %q: TS %v === %v, want %s === %s", c.Child, c.LocalTS, c.RemoteTS, local, remote)
	}
}

// TestAdditionalChild: either side adds Child SAs to the IKE SA with
// CREATE_CHILD_SA (section 1.3.1), each for its own child's selectors
// and proposals (PFS included); they rekey as themselves; a child the
// responder has no selectors for is refused, and so is one beyond
// MaxChildSAs.
func TestAdditionalChild(t *testing.T) {
	pa, pb := childPeers(t)
	p := newPair(t, pa, pb, func(a, b *Config) { b.MaxChildSAs = 3 })
	// No IKE SA yet: InitiateChild makes it first.
	second, err := p.a.InitiateChild(ctx(t), "to-b", "second")
	if err != nil {
		t.Fatal(err)
	}
	first := p.bChildFor(t, second) // b's view of "second"
	checkMirror(t, second, first, "aes128gcm16", false)
	if second.Child != "second" || first.Child != "second" {
		t.Fatalf("child names %q and %q", second.Child, first.Child)
	}
	checkTS(t, second, "10.3.0.0/24", "10.4.0.0/24")
	checkTS(t, first, "10.4.0.0/24", "10.3.0.0/24")
	if l := p.a.IKESAs(); len(l) != 1 || len(l[0].Children) != 2 || l[0].Children[0].Child != "net" {
		t.Fatalf("a's IKE SAs %+v", l)
	}

	// b (the IKE SA's responder) adds one with PFS.
	pfsB, err := p.b.InitiateChild(ctx(t), "to-a", "pfs")
	if err != nil {
		t.Fatal(err)
	}
	if pfsB.Child != "pfs" || pfsB.Suite != "aes256gcm16" {
		t.Fatalf("b's pfs child %+v", pfsB)
	}
	checkTS(t, pfsB, "10.6.0.0/24", "10.5.0.0/24")

	// "second" rekeys as "second".
	fresh, err := p.a.Rekey(ctx(t), second)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Child != "second" {
		t.Fatalf("rekeyed child %q", fresh.Child)
	}
	checkTS(t, fresh, "10.3.0.0/24", "10.4.0.0/24")
	checkMirror(t, fresh, p.bChildFor(t, fresh), "aes128gcm16", false)

	// b knows no "stray"; and b carries MaxChildSAs (3) already.
	if _, err := p.a.InitiateChild(ctx(t), "to-b", "stray"); err == nil || !strings.Contains(err.Error(), "NO_ADDITIONAL_SAS") {
		t.Fatalf("a child beyond MaxChildSAs: %v", err)
	}
	p.b.mu.Lock()
	p.b.cfg.MaxChildSAs = 8
	p.b.mu.Unlock()
	if _, err := p.a.InitiateChild(ctx(t), "to-b", "stray"); err == nil || !strings.Contains(err.Error(), "TS_UNACCEPTABLE") {
		t.Fatalf("a child b has no selectors for: %v", err)
	}
	if _, err := p.a.InitiateChild(ctx(t), "to-b", "nonesuch"); err == nil {
		t.Fatal("a child that is not configured")
	}
	waitFor(t, func() bool { return idle(p.a) && idle(p.b) })
	sa, sb := p.a.Stats(), p.b.Stats()
	if sa.ChildSAAdded != 2 || sb.ChildSAAdded != 2 || sb.ChildSALimit != 1 || sb.TSUnacceptable != 1 || sa.ChildSARekeyed != 1 {
		t.Fatalf("stats\n%+v\n%+v", sa, sb)
	}
	if got := len(childSPIs(p.a)); got != 3 {
		t.Fatalf("a holds %d Child SAs, want 3", got)
	}
	// Deleting the IKE SA takes every Child SA with it.
	if err := p.a.Delete(ctx(t), fresh); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(childSPIs(p.a)) == 0 && len(childSPIs(p.b)) == 0 })
}

// TestDPDRestartChildren: after a dead peer's restart (DPDAction
// restart), the new IKE SA carries the additional Child SAs the dead one
// carried, not only IKE_AUTH's; a child that was never up stays out.
func TestDPDRestartChildren(t *testing.T) {
	pa, pb := childPeers(t)
	pa.DPDDelay = 30 * time.Second
	pa.DPDAction = ActionRestart
	clk := newFakeClock()
	p := newPair(t, pa, pb, func(a, b *Config) {
		withClock(clk)(a, b)
		a.RetransmitTimeout = time.Second
		a.RetransmitTries = 2
	})
	clk.settleOn(t, p)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"second", "pfs"} {
		if _, err := p.a.InitiateChild(ctx(t), "to-b", name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.a.InitiateChild(ctx(t), "to-b", "stray"); err == nil {
		t.Fatal("b took a child it has no selectors for")
	}
	names := func(e *Endpoint) []string {
		var out []string
		for _, s := range e.IKESAs() {
			if s.State == "established" {
				for _, c := range s.Children {
					out = append(out, c.Child)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	want := []string{"net", "pfs", "second"}
	waitFor(t, func() bool { return idle(p.a) && idle(p.b) && slices.Equal(names(p.a), want) })

	// The peer goes silent: a liveness check, two retransmissions, dead.
	p.net.mu.Lock()
	p.net.drop = func(int, netip.AddrPort, netip.AddrPort, []byte) bool { return true }
	p.net.mu.Unlock()
	clk.Advance(30*time.Second + time.Second + 2*time.Second + 4*time.Second)
	waitFor(t, func() bool { return p.a.Stats().PeersDead == 1 })
	p.net.mu.Lock()
	p.net.drop = nil
	p.net.mu.Unlock()
	// Retransmissions and restarts on the fake clock until it is up
	// again with its three Child SAs.
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(names(p.a), want) || !idle(p.a) {
		if time.Now().After(deadline) {
			t.Fatalf("after the restart a has %v, want %v: %+v", names(p.a), want, p.a.Stats())
		}
		clk.Advance(time.Second)
		time.Sleep(time.Millisecond)
	}
	if l := p.a.IKESAs(); len(l) != 1 {
		t.Fatalf("a has %d IKE SAs after the restart, want 1", len(l))
	}
	waitFor(t, func() bool { return slices.Equal(names(p.b), want) && len(p.b.IKESAs()) == 1 })
	if s := p.a.Stats(); s.RestartChildFailed != 0 || s.Restarts == 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestAuthChildMatchesEveryChild: the Child SA of IKE_AUTH is matched
// against every child of the responder's connection, as CREATE_CHILD_SA's
// is, not only against its first: an initiator whose first child is the
// responder's second gets that child (issue 16).
func TestAuthChildMatchesEveryChild(t *testing.T) {
	pa, pb := childPeers(t)
	// a's only child is b's "second" (10.3/24 on a's side, 10.4/24 on
	// b's); b's first child ("net", 10.1/24 === 10.2/16) does not fit it.
	pa.ChildName, pa.LocalTS, pa.RemoteTS, pa.Children = "second", prefixes("10.3.0.0/24"), prefixes("10.4.0.0/24"), nil
	p := newPair(t, pa, pb, nil)
	c, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatalf("IKE_AUTH with the responder's second child: %v", err)
	}
	b := p.bChildFor(t, c)
	checkMirror(t, c, b, "aes128gcm16", false)
	if b.Child != "second" {
		t.Fatalf("the responder made child %q, want \"second\"", b.Child)
	}
	checkTS(t, c, "10.3.0.0/24", "10.4.0.0/24")
	checkTS(t, b, "10.4.0.0/24", "10.3.0.0/24")
	if st := p.b.Stats(); st.TSUnacceptable != 0 {
		t.Fatalf("responder counted %d TS_UNACCEPTABLE", st.TSUnacceptable)
	}
}
