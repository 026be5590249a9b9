package ike

import (
	"slices"
	"testing"
)

// ikeChildren returns the child names of e's one live IKE SA's Child
// SAs, and that IKE SA.
func ikeChildren(t *testing.T, e *Endpoint) ([]string, *ikeSA) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	var live []*ikeSA
	for _, sa := range e.sas {
		if sa.up() {
			live = append(live, sa)
		}
	}
	if len(live) != 1 {
		t.Fatalf("%d live IKE SAs, want 1", len(live))
	}
	var names []string
	for _, c := range live[0].children {
		names = append(names, c.Child)
	}
	return names, live[0]
}

// TestDeleteChild: either side deletes one Child SA of several with an
// INFORMATIONAL carrying D(ESP) for it alone (section 1.4.1); both report
// that one through OnDelete, and the IKE SA and the other Child SAs stay
// and rekey.
func TestDeleteChild(t *testing.T) {
	pa, pb := childPeers(t)
	p := newPair(t, pa, pb, nil)
	var aDeleted []*ChildSA
	p.a.cfg.OnDelete = func(c *ChildSA) { p.bChildMu.Lock(); aDeleted = append(aDeleted, c); p.bChildMu.Unlock() }
	net, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.a.InitiateChild(ctx(t), "to-b", "second")
	if err != nil {
		t.Fatal(err)
	}
	pfs, err := p.a.InitiateChild(ctx(t), "to-b", "pfs")
	if err != nil {
		t.Fatal(err)
	}
	bSecond, bPFS := p.bChildFor(t, second), p.bChildFor(t, pfs)
	_, aIKE := ikeChildren(t, p.a)
	_, bIKE := ikeChildren(t, p.b)

	// a, the IKE SA's initiator, deletes "second".
	if err := p.a.DeleteChild(ctx(t), second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		p.bChildMu.Lock()
		defer p.bChildMu.Unlock()
		return len(p.bDeleted) == 1 && len(aDeleted) == 1
	})
	p.bChildMu.Lock()
	if p.bDeleted[0] != bSecond || aDeleted[0] != second {
		t.Fatalf("deleted: a %v, b %v; want the pair of \"second\"", aDeleted, p.bDeleted)
	}
	p.bChildMu.Unlock()
	for _, e := range []*Endpoint{p.a, p.b} {
		names, sa := ikeChildren(t, e)
		if !slices.Equal(names, []string{"net", "pfs"}) || (sa != aIKE && sa != bIKE) {
			t.Fatalf("children left %v on IKE SA %p", names, sa)
		}
	}
	if err := p.a.DeleteChild(ctx(t), second); err == nil {
		t.Fatal("a deleted Child SA deleted again")
	}

	// b, the IKE SA's responder, deletes its "pfs"; "net" stays and
	// still rekeys on the same IKE SA.
	if err := p.b.DeleteChild(ctx(t), bPFS); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		p.bChildMu.Lock()
		defer p.bChildMu.Unlock()
		return len(p.bDeleted) == 2 && len(aDeleted) == 2
	})
	p.bChildMu.Lock()
	if p.bDeleted[1] != bPFS || aDeleted[1] != pfs {
		t.Fatalf("deleted: a %v, b %v; want the pair of \"pfs\"", aDeleted, p.bDeleted)
	}
	p.bChildMu.Unlock()
	fresh, err := p.a.Rekey(ctx(t), net)
	if err != nil {
		t.Fatal(err)
	}
	checkMirror(t, fresh, p.bChildFor(t, fresh), "aes128gcm16", false)
	for _, e := range []*Endpoint{p.a, p.b} {
		if names, _ := ikeChildren(t, e); !slices.Equal(names, []string{"net"}) {
			t.Fatalf("children left %v", names)
		}
	}
	if s := p.a.Stats(); s.Deleted != 0 || s.RxUnexpected != 0 {
		t.Fatalf("a's stats %+v", s)
	}
	if len(p.a.IKESAs()) != 1 || len(p.b.IKESAs()) != 1 {
		t.Fatal("the IKE SA went")
	}
}
