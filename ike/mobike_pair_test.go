package ike

import (
	"bytes"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// mobikePair is a pair whose initiator a also owns addrA2, a second
// address (a second path), and whose responder b reports Child SA moves.
type mobikePair struct {
	*pair
	mu     sync.Mutex
	moves  []mobikeMoved // b's
	aMoves []mobikeMoved // a's
}

type mobikeMoved struct {
	c             *ChildSA
	local, remote netip.AddrPort
}

var addrA2 = netip.MustParseAddr("198.51.100.1")

func newMobikePair(t *testing.T, tweak func(pa, pb *Peer)) *mobikePair {
	t.Helper()
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	if tweak != nil {
		tweak(pa, pb)
	}
	mp := &mobikePair{}
	mp.pair = newPair(t, pa, pb, func(a, b *Config) {
		a.OnChildAddress = func(c *ChildSA, local, remote netip.AddrPort) {
			mp.mu.Lock()
			mp.aMoves = append(mp.aMoves, mobikeMoved{c, local, remote})
			mp.mu.Unlock()
		}
		b.RetransmitTimeout = 100 * time.Millisecond
		b.OnChildAddress = func(c *ChildSA, local, remote netip.AddrPort) {
			mp.mu.Lock()
			mp.moves = append(mp.moves, mobikeMoved{c, local, remote})
			mp.mu.Unlock()
		}
	})
	mp.net.mu.Lock()
	mp.net.eps[addrA2] = mp.a
	mp.net.mu.Unlock()
	return mp
}

// oneSA returns e's one established IKE SA; e's lock must be held.
func oneSALocked(t *testing.T, e *Endpoint) *ikeSA {
	t.Helper()
	var found *ikeSA
	for _, sa := range e.sas {
		if sa.up() {
			if found != nil {
				t.Fatal("more than one IKE SA")
			}
			found = sa
		}
	}
	if found == nil {
		t.Fatal("no IKE SA")
	}
	return found
}

// sendUpdate has e's IKE SA move to local, its address on another path,
// and send UPDATE_SA_ADDRESSES from there with NAT detection, COOKIE2 and
// extra, as a MOBIKE initiator does (RFC 4555 section 3.5): a stand-in
// for strongSwan's side. The response's payloads arrive on the channel.
func sendUpdate(t *testing.T, e *Endpoint, local netip.AddrPort, cookie []byte, extra ...Payload) chan []Payload {
	t.Helper()
	got := make(chan []Payload, 1)
	e.mu.Lock()
	sa := oneSALocked(t, e)
	sa.setAddrsLocked(local, sa.remote)
	ps := append(natNotifies(sa.spii, sa.spir, local, sa.remote, false), &Notify{NType: UpdateSAAddresses}, &Notify{NType: Cookie2, Data: cookie})
	ps = append(ps, extra...)
	after := sa.enqueueLocked(op{
		run: func(sa *ikeSA) []func() {
			if err := sa.startLocked(&request{exch: INFORMATIONAL}, &sendTask{ps: ps, got: got}); err != nil {
				t.Error(err)
			}
			return nil
		},
		fail: func(err error) []func() { t.Error(err); return nil },
	})
	e.unlock()
	run(after)
	return got
}

// sendTask sends ps in a request of ours and hands the response's
// payloads to got.
type sendTask struct {
	ps  []Payload
	got chan []Payload
}

func (t *sendTask) build(x *exchange) taskStatus { x.add(t.ps...); return taskMore }

func (t *sendTask) process(x *exchange) taskStatus { t.got <- x.in; return taskDone }

// TestMOBIKEResponder: an initiator that moved to another address sends
// UPDATE_SA_ADDRESSES (RFC 4555); the responder answers with NAT
// detection for the new addresses and its COOKIE2 echoed, moves the IKE
// SA, checks the new address (its own COOKIE2, which the initiator
// echoes) and only then reports the Child SA's new outer addresses.
func TestMOBIKEResponder(t *testing.T) {
	p := newMobikePair(t, nil)
	c, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	bc := p.bChildFor(t, c)
	moved := netip.AddrPortFrom(addrA2, 500)
	cookie := bytes.Repeat([]byte{0x5a}, 16)
	var resp []Payload
	select {
	case resp = <-sendUpdate(t, p.a, moved, cookie):
	case <-ctx(t).Done():
		t.Fatalf("no answer to UPDATE_SA_ADDRESSES (b's stats %+v)", p.b.Stats())
	}
	if n := findNotify(resp, Cookie2); n == nil || !bytes.Equal(n.Data, cookie) {
		t.Errorf("COOKIE2 not echoed: %v", resp)
	}
	if ourNAT, peerNAT := natCheck(resp, c.IKESPIi, c.IKESPIr, moved, netip.AddrPortFrom(addrB, 500)); ourNAT || peerNAT || findNotify(resp, NATDetectionSourceIP) == nil {
		t.Errorf("NAT detection of the answer: %v %v in %v", ourNAT, peerNAT, resp)
	}
	waitFor(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.moves) > 0
	})
	p.mu.Lock()
	mv := p.moves[0]
	p.mu.Unlock()
	if mv.c != bc || mv.remote != moved || mv.local != netip.AddrPortFrom(addrB, 500) {
		t.Errorf("moved %p (want %p) to %v <-> %v", mv.c, bc, mv.local, mv.remote)
	}
	if l := p.b.IKESAs(); len(l) != 1 || l[0].Remote != moved {
		t.Errorf("b's IKE SAs %+v", l)
	}
	if s := p.b.Stats(); s.MOBIKEUpdates != 1 || s.RoutabilityChecked != 1 || s.RoutabilityFailed+s.MOBIKERefused != 0 || s.InformationalInitiated != 1 {
		t.Errorf("b's stats: updates %d, checked %d, failed %d, refused %d, informational initiated %d",
			s.MOBIKEUpdates, s.RoutabilityChecked, s.RoutabilityFailed, s.MOBIKERefused, s.InformationalInitiated)
	}
	// The IKE SA goes on at the new address: a rekey works there.
	if _, err := p.a.Rekey(ctx(t), c); err != nil {
		t.Fatalf("rekey after the move: %v", err)
	}
}

// TestMOBIKERefused: UPDATE_SA_ADDRESSES on an IKE SA that did not agree
// MOBIKE (the initiator's NoMOBIKE), or whose NO_NATS_ALLOWED names other
// addresses than those it arrived with (UNEXPECTED_NAT_DETECTED), moves
// nothing and is counted.
func TestMOBIKERefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		tweak  func(pa, pb *Peer)
		extra  func(local netip.AddrPort) []Payload
		notify NotifyType
	}{
		{"not-agreed", func(pa, _ *Peer) { pa.NoMOBIKE = true }, nil, 0},
		{"responder-off", func(_, pb *Peer) { pb.NoMOBIKE = true }, nil, 0},
		{"nat-not-allowed", nil, func(local netip.AddrPort) []Payload {
			// What the initiator saw: another source than the one b
			// sees (a NAT between).
			return []Payload{&Notify{NType: NoNATsAllowed, Data: noNATsData(netip.MustParseAddrPort("10.0.0.1:500"), netip.AddrPortFrom(addrB, 500))}}
		}, UnexpectedNATDetected},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newMobikePair(t, c.tweak)
			ch, err := p.a.Initiate(ctx(t), "to-b")
			if err != nil {
				t.Fatal(err)
			}
			p.bChildFor(t, ch)
			moved := netip.AddrPortFrom(addrA2, 500)
			var extra []Payload
			if c.extra != nil {
				extra = c.extra(moved)
			}
			var resp []Payload
			select {
			case resp = <-sendUpdate(t, p.a, moved, bytes.Repeat([]byte{1}, 8), extra...):
			case <-ctx(t).Done():
				t.Fatal("no answer")
			}
			if c.notify != 0 && (len(resp) != 1 || resp[0].(*Notify).NType != c.notify) {
				t.Errorf("answer %v, want %v", resp, c.notify)
			}
			s := p.b.Stats()
			if s.MOBIKERefused != 1 || s.MOBIKEUpdates != 0 || s.RoutabilityChecked != 0 {
				t.Errorf("b's stats: refused %d, updates %d, checked %d", s.MOBIKERefused, s.MOBIKEUpdates, s.RoutabilityChecked)
			}
			if l := p.b.IKESAs(); len(l) != 1 || l[0].Remote.Addr() != addrA {
				t.Errorf("b's IKE SA moved: %+v", l)
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.moves) != 0 {
				t.Errorf("Child SAs moved: %+v", p.moves)
			}
		})
	}
}

// TestMOBIKEUnreachable: the responder's return routability check gets
// no answer from the new address; the Child SA does not move, and the
// IKE SA is given up as after any unanswered request.
func TestMOBIKEUnreachable(t *testing.T) {
	p := newMobikePair(t, nil)
	c, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	p.bChildFor(t, c)
	moved := netip.AddrPortFrom(addrA2, 500)
	// b's requests to the new address are lost (its answers arrive):
	// its return routability check goes unanswered.
	p.net.mu.Lock()
	p.net.drop = func(_ int, from, to netip.AddrPort, pkt []byte) bool {
		h, err := ParseHeader(pkt)
		return err == nil && from.Addr() == addrB && to.Addr() == addrA2 && !h.IsResponse()
	}
	p.net.mu.Unlock()
	got := sendUpdate(t, p.a, moved, bytes.Repeat([]byte{2}, 8))
	select {
	case <-got:
	case <-ctx(t).Done():
		t.Fatal("no answer")
	}
	waitFor(t, func() bool { s := p.b.Stats(); return s.Timeouts+s.PeersDead > 0 })
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.moves) != 0 {
		t.Errorf("Child SAs moved without a check: %+v", p.moves)
	}
	if s := p.b.Stats(); s.MOBIKEUpdates != 1 || s.RoutabilityChecked != 0 {
		t.Errorf("b's stats: updates %d, checked %d", s.MOBIKEUpdates, s.RoutabilityChecked)
	}
}

// TestMOBIKEInitiator: sluice moves its own end (Endpoint.UpdateAddresses):
// its UPDATE_SA_ADDRESSES from the new address carries a COOKIE2 the
// peer echoes; the peer (sluice as responder) moves the IKE SA, checks
// the new address (a's update task echoes b's cookie) and moves its
// Child SA; both report the new outer addresses, and the IKE SA goes on
// there (a rekey). Without MOBIKE agreed it is refused at once.
func TestMOBIKEInitiator(t *testing.T) {
	p := newMobikePair(t, nil)
	c, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	bc := p.bChildFor(t, c)
	if err := p.a.UpdateAddresses(ctx(t), c, addrA2); err != nil {
		t.Fatalf("UpdateAddresses: %v (a %+v, b %+v)", err, p.a.Stats(), p.b.Stats())
	}
	moved, bAddr := netip.AddrPortFrom(addrA2, 500), netip.AddrPortFrom(addrB, 500)
	waitFor(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.moves) > 0 && len(p.aMoves) > 0
	})
	p.mu.Lock()
	am, bm := p.aMoves[0], p.moves[0]
	p.mu.Unlock()
	if am.c != c || am.local != moved || am.remote != bAddr {
		t.Errorf("a moved %p (want %p) to %v <-> %v", am.c, c, am.local, am.remote)
	}
	if bm.c != bc || bm.local != bAddr || bm.remote != moved {
		t.Errorf("b moved %p (want %p) to %v <-> %v", bm.c, bc, bm.local, bm.remote)
	}
	if l := p.a.IKESAs(); len(l) != 1 || l[0].Local != moved {
		t.Errorf("a's IKE SAs %+v", l)
	}
	if l := p.b.IKESAs(); len(l) != 1 || l[0].Remote != moved {
		t.Errorf("b's IKE SAs %+v", l)
	}
	if sa, sb := p.a.Stats(), p.b.Stats(); sa.MOBIKEUpdates != 1 || sb.MOBIKEUpdates != 1 || sb.RoutabilityChecked != 1 {
		t.Errorf("updates a %d b %d, b checked %d", sa.MOBIKEUpdates, sb.MOBIKEUpdates, sb.RoutabilityChecked)
	}
	if _, err := p.a.Rekey(ctx(t), c); err != nil {
		t.Fatalf("rekey after the move: %v", err)
	}

	q := newMobikePair(t, func(_, pb *Peer) { pb.NoMOBIKE = true })
	c2, err := q.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.a.UpdateAddresses(ctx(t), c2, addrA2); err == nil || !strings.Contains(err.Error(), "MOBIKE was not agreed") {
		t.Errorf("without MOBIKE: %v", err)
	}
}
