package ike

import (
	"bytes"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock that moves only in Advance, which runs the timers
// that fall due, in order, on the caller's goroutine.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	// settle, if set, runs after each timer that Advance fires: it waits
	// until what the timer sent has been answered, so that one Advance
	// does not also fire the retransmissions of a request whose answer
	// is on its way.
	settle func()
}

type fakeTimer struct {
	c    *fakeClock
	when time.Time
	f    func()
	done bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, when: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// Advance moves the clock by d, running each timer due on the way.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	for {
		var next *fakeTimer
		live := c.timers[:0]
		for _, t := range c.timers {
			if t.done {
				continue
			}
			live = append(live, t)
			if !t.when.After(target) && (next == nil || t.when.Before(next.when)) {
				next = t
			}
		}
		c.timers = live
		if next == nil {
			c.now = target
			c.mu.Unlock()
			return
		}
		if next.when.After(c.now) {
			c.now = next.when
		}
		next.done = true
		c.mu.Unlock()
		next.f()
		if c.settle != nil {
			c.settle()
		}
		c.mu.Lock()
	}
}

// settleOn makes c wait, after each timer it fires, until p's network
// has delivered everything.
func (c *fakeClock) settleOn(t *testing.T, p *pair) {
	c.settle = func() { waitFor(t, func() bool { return p.net.inflight.Load() == 0 }) }
}

// idle reports whether no IKE SA of e has a request outstanding or
// queued.
func idle(e *Endpoint) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, sa := range e.sas {
		if sa.pending != nil || len(sa.queue) > 0 {
			return false
		}
	}
	return true
}

// childSPIs returns the inbound SPIs of e's established Child SAs.
func childSPIs(e *Endpoint) []uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []uint32
	for spi := range e.children {
		out = append(out, spi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// only returns e's one live (not rekeyed) IKE SA and its one Child SA.
func only(t *testing.T, e *Endpoint) (*ikeSA, *ChildSA) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	var live []*ikeSA
	for _, sa := range e.sas {
		if !sa.rekeyed {
			live = append(live, sa)
		}
	}
	if len(live) != 1 || len(live[0].children) != 1 || len(e.children) != 1 {
		n := 0
		if len(live) == 1 {
			n = len(live[0].children)
		}
		t.Fatalf("%d live IKE SAs (of %d), %d Child SAs on it, %d in all", len(live), len(e.sas), n, len(e.children))
	}
	return live[0], live[0].children[0]
}

// settled reports whether both endpoints are idle with one IKE SA and
// one Child SA each.
func settled(p *pair) func() bool {
	return func() bool {
		if !idle(p.a) || !idle(p.b) {
			return false
		}
		for _, e := range []*Endpoint{p.a, p.b} {
			e.mu.Lock()
			n, c := len(e.sas), len(e.children)
			e.mu.Unlock()
			if n != 1 || c != 1 {
				return false
			}
		}
		return true
	}
}

// checkPair checks that the endpoints' one IKE SA and one Child SA are
// each other's.
func checkPair(t *testing.T, p *pair) (*ChildSA, *ChildSA) {
	t.Helper()
	sa, ca := only(t, p.a)
	sb, cb := only(t, p.b)
	if sa.spii != sb.spii || sa.spir != sb.spir || sa.initiator == sb.initiator {
		t.Fatalf("IKE SAs %016x/%016x (initiator %v) and %016x/%016x", sa.spii, sa.spir, sa.initiator, sb.spii, sb.spir)
	}
	if ca.InSPI != cb.OutSPI || ca.OutSPI != cb.InSPI || !bytes.Equal(ca.InKey, cb.OutKey) || !bytes.Equal(ca.OutKey, cb.InKey) {
		t.Fatalf("Child SAs do not mirror: a in %08x out %08x, b in %08x out %08x", ca.InSPI, ca.OutSPI, cb.InSPI, cb.OutSPI)
	}
	return ca, cb
}

func withClock(c *fakeClock) func(a, b *Config) {
	return func(a, b *Config) { a.clock, b.clock = c, c }
}

// TestLifetimes: the initiator's Child SA is rekeyed at its rekey time
// minus jitter and not before, make-before-break (the responder reports
// the new SA before it deletes the old), and again on the new SA's own
// schedule; the IKE SA is rekeyed at its own.
func TestLifetimes(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.ChildLifetime = Lifetime{RekeyTime: 60 * time.Second, LifeTime: 70 * time.Second, RandTime: 5 * time.Second}
	pa.IKELifetime = Lifetime{RekeyTime: 200 * time.Second}
	clk := newFakeClock()
	p := newPair(t, pa, pb, withClock(clk))
	clk.settleOn(t, p)
	var events []string
	p.b.cfg.OnChildSA = func(c *ChildSA) {
		p.bChildMu.Lock()
		events = append(events, "add")
		p.bChild = append(p.bChild, c)
		p.bChildMu.Unlock()
	}
	p.b.cfg.OnDelete = func(c *ChildSA) {
		p.bChildMu.Lock()
		events = append(events, "del")
		p.bDeleted = append(p.bDeleted, c)
		p.bChildMu.Unlock()
	}
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	first, _ := checkPair(t, p)
	clk.Advance(55*time.Second - time.Millisecond)
	if !idle(p.a) || p.a.Stats().ChildSARekeyed != 0 {
		t.Fatal("rekeyed before rekey_time - rand_time")
	}
	clk.Advance(5 * time.Second)
	waitFor(t, func() bool { return p.a.Stats().ChildSARekeyed == 1 })
	settleAfterRekey(t, clk, p)
	second, _ := checkPair(t, p)
	if second.InSPI == first.InSPI {
		t.Fatal("no new Child SA")
	}
	p.bChildMu.Lock()
	if len(events) != 3 || events[1] != "add" || events[2] != "del" {
		t.Fatalf("responder's events %v: want add, add, del (make-before-break)", events)
	}
	p.bChildMu.Unlock()
	// The new one's clock started at its creation: 55-60 s later, again.
	// It was made at 55-60 s: it is due at 110-120 s.
	clk.Advance(50 * time.Second)
	if p.a.Stats().ChildSARekeyed != 1 {
		t.Fatal("the new Child SA was rekeyed early")
	}
	clk.Advance(10 * time.Second)
	waitFor(t, func() bool { return p.a.Stats().ChildSARekeyed == 2 })
	settleAfterRekey(t, clk, p)
	checkPair(t, p)
	// The IKE SA at 200 s minus up to 20 s.
	ikeBefore, _ := only(t, p.a)
	clk.Advance(80 * time.Second) // t = 200+
	waitFor(t, func() bool { return p.a.Stats().IKESARekeyed == 1 && p.b.Stats().IKESARekeyed == 1 })
	waitFor(t, settled(p))
	ikeAfter, _ := only(t, p.a)
	if ikeAfter == ikeBefore || ikeAfter.spii == ikeBefore.spii || !ikeAfter.initiator {
		t.Fatal("the IKE SA was not replaced")
	}
	checkPair(t, p)
	if s := p.a.Stats(); s.ChildSAExpired+s.IKESAExpired+s.RxIntegrityFailed+s.RxOutOfWindow+s.RxUnexpected != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestChildExpiry: a Child SA whose rekey gets no answer is deleted at
// its life time.
func TestChildExpiry(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.ChildLifetime = Lifetime{RekeyTime: 60 * time.Second, LifeTime: 70 * time.Second, RandTime: time.Second}
	clk := newFakeClock()
	p := newPair(t, pa, pb, func(a, b *Config) {
		withClock(clk)(a, b)
		a.RetransmitTimeout = 20 * time.Second // the SA outlives the child's life time
	})
	clk.settleOn(t, p)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	p.net.mu.Lock()
	p.net.drop = func(int, netip.AddrPort, netip.AddrPort, []byte) bool { return true }
	p.net.mu.Unlock()
	clk.Advance(60 * time.Second)
	if idle(p.a) {
		t.Fatal("no rekey at rekey time")
	}
	if len(childSPIs(p.a)) != 1 {
		t.Fatal("the Child SA went before its life time")
	}
	clk.Advance(10 * time.Second)
	if n := len(childSPIs(p.a)); n != 0 || p.a.Stats().ChildSAExpired != 1 {
		t.Fatalf("%d Child SAs after the life time, stats %+v", n, p.a.Stats())
	}
}

// TestRequestRekey: the data plane's rekey request is served at once, a
// second one while it runs is folded into it, and one for an unknown SA
// fails.
func TestRequestRekey(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, nil)
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	cb := p.respChild(t)
	release := hold(t, p)
	if err := p.b.RequestRekey(cb); err != nil {
		t.Fatal(err)
	}
	if err := p.b.RequestRekey(cb); err != nil {
		t.Fatal(err)
	}
	release()
	waitFor(t, settled(p))
	if s := p.b.Stats(); s.ChildSARekeyed != 1 {
		t.Fatalf("stats %+v", s)
	}
	checkPair(t, p)
	if err := p.a.RequestRekey(ca); err == nil {
		t.Fatal("rekey of a Child SA that is gone")
	}
}

// TestIKERekey rekeys the IKE SA from either side: the Child SA moves to
// the new IKE SA, the old one goes on both sides, and the new one carries
// a Child SA rekey and the final Delete.
func TestIKERekey(t *testing.T) {
	for _, byResponder := range []bool{false, true} {
		name := "initiator"
		if byResponder {
			name = "responder"
		}
		t.Run(name, func(t *testing.T) {
			pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16-ecp256", "aes128-sha256-x25519,aes256gcm16-prfsha384-ecp384", "aes128gcm16-ecp256")
			p := newPair(t, pa, pb, nil)
			ca, err := p.a.Initiate(ctx(t), "to-b")
			if err != nil {
				t.Fatal(err)
			}
			cb := p.respChild(t)
			oldA, _ := only(t, p.a)
			oldD := append([]byte(nil), oldA.keys.D...)
			for round := 0; round < 2; round++ {
				if byResponder {
					err = p.b.RekeyIKE(ctx(t), cb)
				} else {
					err = p.a.RekeyIKE(ctx(t), ca)
				}
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, settled(p))
				ca2, cb2 := checkPair(t, p)
				if ca2 != ca || cb2 != cb {
					t.Fatal("the Child SA changed with the IKE SA")
				}
				newA, _ := only(t, p.a)
				if newA.spii == oldA.spii || newA.initiator == byResponder || bytes.Equal(newA.keys.D, oldD) {
					t.Fatal("the IKE SA was not replaced as it should be")
				}
				oldA, oldD = newA, append([]byte(nil), newA.keys.D...)
			}
			if sa, sb := p.a.Stats(), p.b.Stats(); sa.IKESARekeyed != 2 || sb.IKESARekeyed != 2 || sa.RxUnknownSPI+sb.RxUnknownSPI+sa.RxIntegrityFailed+sb.RxIntegrityFailed != 0 {
				t.Fatalf("stats %+v %+v", sa, sb)
			}
			// The Child SA rekeys on the new IKE SA (PFS), found by its SPI.
			na, err := p.a.Rekey(ctx(t), ca)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, settled(p))
			ca, _ = checkPair(t, p)
			if ca != na {
				t.Fatal("Rekey's result is not the Child SA left")
			}
			if err := p.a.Delete(ctx(t), ca); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return len(childSPIs(p.b)) == 0 && len(p.b.sas) == 0 })
		})
	}
}

// hold makes the pair's network keep every datagram until release, which
// then delivers in lock-step rounds: everything held, in order, then
// everything those sent, and so on until nothing more is sent. Requests
// sent by both sides before release cross.
func hold(t *testing.T, p *pair) (release func()) {
	var mu sync.Mutex
	var held []memPkt
	holding := true
	p.net.mu.Lock()
	p.net.deliver = func(to, from netip.AddrPort, pkt []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		if holding {
			held = append(held, memPkt{from, to, pkt})
		}
		return holding
	}
	p.net.mu.Unlock()
	return func() {
		for {
			waitFor(t, func() bool { return p.net.inflight.Load() == 0 })
			mu.Lock()
			pkts := held
			held = nil
			if len(pkts) == 0 {
				holding = false
			}
			mu.Unlock()
			if len(pkts) == 0 {
				return
			}
			for _, m := range pkts {
				p.net.mu.Lock()
				e := p.net.eps[m.to.Addr()]
				p.net.mu.Unlock()
				e.Receive(m.to, m.from, m.pkt)
			}
		}
	}
}

// TestRekeyCollision rekeys the Child SA and the IKE SA from both sides at
// once (sections 2.8.1, 2.8.2), several times so that either side's
// exchange holds the lowest nonce: both exchanges complete, the redundant
// SA and the old one go, and both sides are left with one pair that
// mirrors.
func TestRekeyCollision(t *testing.T) {
	for _, kind := range []string{"child", "ike", "child-pfs"} {
		t.Run(kind, func(t *testing.T) {
			esp := "aes128gcm16"
			if kind == "child-pfs" {
				esp = "aes128gcm16-x25519" // the DH runs off the lock
			}
			pa, pb := peers(t, "aes128-sha256-x25519", esp, "aes128-sha256-x25519", esp)
			p := newPair(t, pa, pb, nil)
			if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, settled(p))
			for round := 0; round < 6; round++ {
				release := hold(t, p)
				for _, e := range []*Endpoint{p.a, p.b} {
					sa, c := only(t, e)
					e.mu.Lock()
					var after []func()
					if kind != "ike" {
						after = e.rekeyChildLocked(e.children[c.InSPI], nil)
					} else {
						after = e.rekeyIKELocked(sa, nil)
					}
					e.unlock() // sends what the rekey queued
					run(after)
				}
				release()
				if !waitUntil(settled(p)) {
					dumpSAs(t, "a", p.a)
					dumpSAs(t, "b", p.b)
					t.Fatal("not settled")
				}
				checkPair(t, p)
			}
			sa, sb := p.a.Stats(), p.b.Stats()
			if sa.RekeyCollisions != 6 || sb.RekeyCollisions != 6 {
				t.Fatalf("collisions %d and %d, want 6: %+v %+v", sa.RekeyCollisions, sb.RekeyCollisions, sa, sb)
			}
			if sa.RxIntegrityFailed+sb.RxIntegrityFailed+sa.RxOutOfWindow+sb.RxOutOfWindow+sa.Timeouts+sb.Timeouts != 0 {
				t.Fatalf("stats %+v %+v", sa, sb)
			}
		})
	}
}

// TestDPD: an idle IKE SA is checked every DPDDelay; when the peer stops
// answering it is declared dead after the retransmissions, its Child SA
// goes, and DPDAction restart initiates again until the peer answers; the
// peer drops the stale IKE SA on the new one's INITIAL_CONTACT.
func TestDPD(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.DPDDelay = 30 * time.Second
	pa.DPDAction = ActionRestart
	clk := newFakeClock()
	var mu sync.Mutex
	var dead []string
	var aDeleted int
	p := newPair(t, pa, pb, func(a, b *Config) {
		withClock(clk)(a, b)
		a.RetransmitTimeout = time.Second
		a.RetransmitTries = 2
		a.OnPeerDead = func(name string, err error) { mu.Lock(); dead = append(dead, name); mu.Unlock() }
		a.OnDelete = func(*ChildSA) { mu.Lock(); aDeleted++; mu.Unlock() }
	})
	clk.settleOn(t, p)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	checkPair(t, p)
	clk.Advance(30 * time.Second)
	waitFor(t, func() bool { return p.a.Stats().LivenessChecks == 1 && idle(p.a) })
	// Traffic from the peer postpones the next check.
	clk.Advance(15 * time.Second)
	_, cb := only(t, p.b)
	rekeyOnClock(t, clk, p.b, cb)
	waitFor(t, settled(p))
	clk.Advance(15 * time.Second)
	if p.a.Stats().LivenessChecks != 1 {
		t.Fatal("a liveness check although the peer was heard")
	}
	// The peer goes silent.
	p.net.mu.Lock()
	p.net.drop = func(int, netip.AddrPort, netip.AddrPort, []byte) bool { return true }
	p.net.mu.Unlock()
	clk.Advance(15 * time.Second)
	if p.a.Stats().LivenessChecks != 2 {
		t.Fatalf("no liveness check: %+v", p.a.Stats())
	}
	clk.Advance(time.Second + 2*time.Second + 4*time.Second) // two retransmissions, then the last wait
	// Two Child SAs went: the one the rekey replaced, and the last.
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(dead) == 1 && aDeleted == 2 })
	if s := p.a.Stats(); s.PeersDead != 1 || s.Timeouts != 1 || len(childSPIs(p.a)) != 0 {
		t.Fatalf("stats %+v", s)
	}
	// The restart initiates (into the void) and retries.
	waitFor(t, func() bool { return p.a.Stats().Restarts >= 1 })
	waitFor(t, func() bool { p.a.mu.Lock(); defer p.a.mu.Unlock(); return len(p.a.sas) == 1 })
	p.net.mu.Lock()
	p.net.drop = nil
	p.net.mu.Unlock()
	// Retransmissions and restarts on the fake clock until it is up.
	deadline := time.Now().Add(5 * time.Second)
	for p.a.Stats().IKESAEstablished < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no restart: %+v", p.a.Stats())
		}
		clk.Advance(time.Second)
		time.Sleep(time.Millisecond)
	}
	waitFor(t, settled(p))
	checkPair(t, p)
	if s := p.b.Stats(); s.InitialContacts != 1 {
		t.Fatalf("the responder kept the stale IKE SA: %+v", s)
	}
}

// TestQueueBound: requests beyond maxQueued on one IKE SA fail and are
// counted.
func TestQueueBound(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, nil)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	release := hold(t, p)
	sa, _ := only(t, p.a)
	var errs int
	p.a.mu.Lock()
	for i := 0; i < maxQueued+3; i++ {
		run(sa.enqueueLocked(op{
			run:  func(sa *ikeSA) []func() { sa.requestOutLocked(INFORMATIONAL, nil); return nil },
			fail: func(error) []func() { errs++; return nil },
		}))
	}
	p.a.unlock() // sends what was queued
	if errs != 2 || p.a.Stats().RequestQueueFull != 2 {
		t.Fatalf("%d failed, stats %+v", errs, p.a.Stats())
	}
	release()
	waitFor(t, func() bool { return idle(p.a) })
}

// heldDeletes counts e's Child SAs whose Delete after a rekey is held.
func heldDeletes(e *Endpoint) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ent := range e.children {
		if ent.held != nil {
			n++
		}
	}
	return n
}

// settleAfterRekey waits until p settles after a Child SA rekey of a's
// that clk started. The rekey's DH runs off the endpoint's lock, so the
// exchange may end after clk last moved; the Delete of the old Child SA
// is then held on clk (Config.RekeyDeleteDelay) until clk moves past it.
func settleAfterRekey(t *testing.T, clk *fakeClock, p *pair) {
	t.Helper()
	waitFor(t, func() bool { return heldDeletes(p.a) > 0 || settled(p)() })
	if heldDeletes(p.a) > 0 {
		clk.Advance(p.a.cfg.RekeyDeleteDelay)
	}
	waitFor(t, settled(p))
}

// rekeyOnClock rekeys c on e when e runs on clk: it moves clk past the
// hold of the old Child SA's Delete (Config.RekeyDeleteDelay).
func rekeyOnClock(t *testing.T, clk *fakeClock, e *Endpoint, c *ChildSA) *ChildSA {
	t.Helper()
	type res struct {
		c   *ChildSA
		err error
	}
	done := make(chan res, 1)
	go func() { n, err := e.Rekey(ctx(t), c); done <- res{n, err} }()
	waitFor(t, func() bool { return heldDeletes(e) == 1 })
	clk.Advance(e.cfg.RekeyDeleteDelay)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.c
}

// infoRequests counts the INFORMATIONAL requests a memNet carried, by
// their unencrypted header.
type infoRequests struct{ n atomic.Int64 }

func (r *infoRequests) drop(_ int, _, _ netip.AddrPort, pkt []byte) bool {
	if h, err := ParseHeader(pkt); err == nil && h.Exchange == INFORMATIONAL && !h.IsResponse() {
		r.n.Add(1)
	}
	return false
}

// TestRekeyDeleteHeld: after a Child SA rekey, the Delete of the old SA
// waits Config.RekeyDeleteDelay on the Endpoint's clock (the peer keeps
// its inbound SA for ESP in flight meanwhile, and the IKE SA's window is
// free); Close during the hold sends nothing and answers the waiter.
func TestRekeyDeleteHeld(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	clk := newFakeClock()
	const hold = 300 * time.Millisecond
	var info infoRequests
	p := newPair(t, pa, pb, func(a, b *Config) {
		withClock(clk)(a, b)
		a.RekeyDeleteDelay = hold
	})
	clk.settleOn(t, p)
	p.net.mu.Lock()
	p.net.drop = info.drop
	p.net.mu.Unlock()
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	_, old := only(t, p.a)

	done := make(chan error, 1)
	var fresh *ChildSA
	go func() {
		c, err := p.a.Rekey(ctx(t), old)
		fresh = c
		done <- err
	}()
	waitFor(t, func() bool { return heldDeletes(p.a) == 1 && idle(p.a) && p.net.inflight.Load() == 0 })
	if n := info.n.Load(); n != 0 {
		t.Fatalf("%d INFORMATIONAL requests before the hold", n)
	}
	if n := len(childSPIs(p.b)); n != 2 {
		t.Fatalf("the peer holds %d Child SAs during the hold, want the old and the new", n)
	}
	clk.Advance(hold - time.Millisecond)
	if n := info.n.Load(); n != 0 {
		t.Fatalf("%d INFORMATIONAL requests before the hold ended", n)
	}
	clk.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	if n := info.n.Load(); n != 1 {
		t.Fatalf("%d INFORMATIONAL requests, want the Delete", n)
	}
	ca, _ := checkPair(t, p)
	if ca != fresh || ca.InSPI == old.InSPI {
		t.Fatal("the old Child SA stayed")
	}

	// Close during the hold: the waiter learns, nothing is sent.
	go func() { _, err := p.a.Rekey(ctx(t), fresh); done <- err }()
	waitFor(t, func() bool { return heldDeletes(p.a) == 1 && idle(p.a) && p.net.inflight.Load() == 0 })
	sent := p.a.Stats().TxPackets
	p.a.Close()
	if err := <-done; err == nil {
		t.Fatal("Rekey succeeded although the endpoint closed before the Delete")
	}
	clk.Advance(hold)
	if s := p.a.Stats(); s.TxPackets != sent {
		t.Fatalf("%d datagrams sent after Close", s.TxPackets-sent)
	}
}
