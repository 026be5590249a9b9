package ike

import (
	"log/slog"
	"slices"
	"strings"
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

// TestControllerTerminateChild: terminating one child deletes its pair
// alone on both sides; the other child keeps its pair on the same IKE
// SA, and the terminated one is not initiated again until Initiate.
func TestControllerTerminateChild(t *testing.T) {
	a, b := ctlPair(t, ChildPolicy{Peer: "to-b", Child: "net", Start: StartStart}, ChildPolicy{Peer: "to-b", Child: "more", Start: StartStart})
	a.ctl.Start(func(st ChildStatus) bool { return st.Start == StartStart })
	net1 := a.waitUp(t, "net")
	a.waitUp(t, "more")
	before := a.ep.IKESAs()[0]
	if err := a.ctl.TerminateChild(ctx(t), "more"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return a.dp.sending("more") == nil && b.dp.sending("more") == nil })
	a.dp.settle(t) // the Controller's loop ran: no retry of "more"
	if st := a.status("more"); !st.Terminated || st.Pair != nil || st.Busy {
		t.Fatalf("more: %+v", st)
	}
	l := a.ep.IKESAs()
	if a.dp.sending("net") != net1 || len(l) != 1 || l[0].SPIi != before.SPIi || len(l[0].Children) != 1 {
		t.Fatalf("net %v (was %v), IKE SAs %+v", a.dp.sending("net"), net1, l)
	}
	if err := a.ctl.TerminateChild(ctx(t), "more"); err == nil {
		t.Fatal("a child without a pair terminated")
	}
	if err := a.ctl.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	a.waitUp(t, "more")
}

// TestDeleteChildCrossing: both sides delete the same Child SA at once,
// their requests crossing (section 1.4.1): each deletes it while
// processing the other's request and answers without a Delete payload
// for it ("the responses MUST NOT include delete payloads for the deleted
// SAs"); both DeleteChild calls succeed and report it once, and the other
// Child SA stays.
func TestDeleteChildCrossing(t *testing.T) {
	pa, pb := childPeers(t)
	p, buf := debugPair(t, pa, pb, slog.LevelDebug)
	var aDeleted []*ChildSA
	p.a.cfg.OnDelete = func(c *ChildSA) { p.bChildMu.Lock(); aDeleted = append(aDeleted, c); p.bChildMu.Unlock() }
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	second, err := p.a.InitiateChild(ctx(t), "to-b", "second")
	if err != nil {
		t.Fatal(err)
	}
	bSecond := p.bChildFor(t, second)
	release := hold(t, p)
	errs := make(chan error, 2)
	go func() { errs <- p.a.DeleteChild(ctx(t), second) }()
	go func() { errs <- p.b.DeleteChild(ctx(t), bSecond) }()
	waitFor(t, func() bool {
		n := 0
		for _, e := range []*Endpoint{p.a, p.b} {
			e.mu.Lock()
			for _, sa := range e.sas {
				if sa.pending != nil && sa.pending.kind == reqDeleteChild {
					n++
				}
			}
			e.mu.Unlock()
		}
		return n == 2
	})
	release()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	p.bChildMu.Lock()
	if len(aDeleted) != 1 || aDeleted[0] != second || len(p.bDeleted) != 1 || p.bDeleted[0] != bSecond {
		t.Fatalf("deleted: a %v, b %v", aDeleted, p.bDeleted)
	}
	p.bChildMu.Unlock()
	for _, e := range []*Endpoint{p.a, p.b} {
		if names, _ := ikeChildren(t, e); !slices.Equal(names, []string{"net"}) {
			t.Fatalf("children left %v", names)
		}
	}
	if l := buf.lines(`msg="ike: sending"`, "exchange=INFORMATIONAL", "response=true", "D(ESP"); len(l) != 0 {
		t.Fatalf("a response to the crossing Delete named the deleted SA:\n%s", strings.Join(l, "\n"))
	}
	if l := buf.lines(`msg="ike: sending"`, "exchange=INFORMATIONAL", "response=false", "D(ESP"); len(l) != 2 {
		t.Fatalf("want the two Delete requests, logged:\n%s", strings.Join(l, "\n"))
	}
}
