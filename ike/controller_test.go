package ike

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// fakeDP is a data plane that keeps what a Controller installs: per
// child the pair it sends with and a held one, the inbound SPIs in
// service, the retired pairs and the trap tunnels; Traffic returns the
// counters the test set (by inbound SPI).
type fakeDP struct {
	mu      sync.Mutex
	out     map[string]*ChildSA
	held    map[string]*ChildSA
	in      map[uint32]bool
	traps   map[string]bool
	retired []*ChildSA
	downs   int
	traffic map[uint32]Traffic
	reads   int // Traffic calls
}

func newFakeDP() *fakeDP {
	return &fakeDP{out: map[string]*ChildSA{}, held: map[string]*ChildSA{}, in: map[uint32]bool{},
		traps: map[string]bool{}, traffic: map[uint32]Traffic{}}
}

func (d *fakeDP) Install(child string, c *ChildSA, hold bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.in[c.InSPI] = true
	delete(d.traps, child)
	if hold {
		d.held[child] = c
	} else {
		d.out[child] = c
	}
	return nil
}

func (d *fakeDP) Promote(child string, c *ChildSA) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held[child] != c {
		return errors.New("fake: not held")
	}
	delete(d.held, child)
	d.out[child] = c
	return nil
}

func (d *fakeDP) Retire(child string, c *ChildSA) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.in, c.InSPI)
	if d.held[child] == c {
		delete(d.held, child)
	}
	d.retired = append(d.retired, c)
}

func (d *fakeDP) Down(child string, _ *ChildSA, trap bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.out[child]; c != nil {
		delete(d.in, c.InSPI)
	}
	delete(d.out, child)
	delete(d.held, child)
	d.downs++
	if trap {
		d.traps[child] = true
	} else {
		delete(d.traps, child)
	}
}

func (d *fakeDP) Trap(child string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.out[child] == nil {
		d.traps[child] = true
	}
}

func (d *fakeDP) Traffic(child string, c *ChildSA) Traffic {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads++
	return d.traffic[c.InSPI]
}

// settle waits until the Controller read the counters a few more times:
// what it would do about them it has done.
func (d *fakeDP) settle(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	n := d.reads
	d.mu.Unlock()
	waitFor(t, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.reads >= n+3
	})
}

// sending returns the pair the child's tunnel sends with.
func (d *fakeDP) sending(child string) *ChildSA {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out[child]
}

func (d *fakeDP) trapped(child string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.traps[child]
}

// count sets the counters of c's SAs.
func (d *fakeDP) count(c *ChildSA, t Traffic) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.traffic[c.InSPI] = t
}

// ctlSide is one Endpoint on loopback UDP with its Controller.
type ctlSide struct {
	ctl  *Controller
	dp   *fakeDP
	ep   *Endpoint
	tr   *UDPTransport
	peer *Peer
}

var (
	loA = netip.MustParseAddr("127.0.0.1")
	loB = netip.MustParseAddr("127.0.0.2")
)

// ctlPeers makes the peers of A (initiator, 127.0.0.1) and B (responder,
// 127.0.0.2), each with the child "net" in IKE_AUTH and "more" beyond it.
func ctlPeers(t *testing.T) (*Peer, *Peer) {
	t.Helper()
	pfx := netip.MustParsePrefix
	a := &Peer{Name: "to-b", Local: loA, Remote: loB, LocalID: ParseIdentity("a@example.net"), RemoteID: ParseIdentity("b.example.net"),
		PSK: []byte("secret"), IKE: mustProps(t, ProtoIKE, "aes128gcm16-prfsha256-x25519"), ESP: mustProps(t, ProtoESP, "aes128gcm16"),
		LocalTS: []netip.Prefix{pfx("10.1.0.0/16")}, RemoteTS: []netip.Prefix{pfx("10.2.0.0/16")}, ChildName: "net",
		Children: []Child{{Name: "more", LocalTS: []netip.Prefix{pfx("10.11.0.0/16")}, RemoteTS: []netip.Prefix{pfx("10.12.0.0/16")}}}}
	b := &Peer{Name: "to-a", Local: loB, LocalID: ParseIdentity("b.example.net"), RemoteID: ParseIdentity("a@example.net"),
		PSK: []byte("secret"), IKE: a.IKE, ESP: a.ESP,
		LocalTS: []netip.Prefix{pfx("10.2.0.0/16")}, RemoteTS: []netip.Prefix{pfx("10.1.0.0/16")}, ChildName: "net",
		Children: []Child{{Name: "more", LocalTS: []netip.Prefix{pfx("10.12.0.0/16")}, RemoteTS: []netip.Prefix{pfx("10.11.0.0/16")}}}}
	return a, b
}

// ctlPair runs A and B on one UDP port of 127.0.0.1 and 127.0.0.2, with
// a Controller each: A's children have the policies pols, B's start
// nothing.
func ctlPair(t *testing.T, pols ...ChildPolicy) (a, b *ctlSide) {
	t.Helper()
	pa, pb := ctlPeers(t)
	var ca, cb *net.UDPConn
	var port uint16
	for try := 0; ca == nil; try++ {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(loA, 0)))
		if err != nil {
			t.Fatal(err)
		}
		port = uint16(c.LocalAddr().(*net.UDPAddr).Port)
		if cb, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(loB, port))); err != nil {
			c.Close()
			if try == 10 {
				t.Fatal(err)
			}
			continue
		}
		ca = c
	}
	side := func(c *net.UDPConn, p *Peer, pols []ChildPolicy) *ctlSide {
		tr, err := NewUDPTransport(c)
		if err != nil {
			t.Fatal(err)
		}
		s := &ctlSide{dp: newFakeDP(), peer: p, tr: tr}
		s.ctl = NewController(ControllerConfig{DataPlane: s.dp, CheckInterval: 5 * time.Millisecond, TrapHoldDown: 50 * time.Millisecond,
			InitiateTimeout: 5 * time.Second, RetryDelay: 20 * time.Millisecond})
		cfg := Config{Peers: []*Peer{p}, Port: port, NATTPort: port + 1, RetransmitTimeout: 250 * time.Millisecond, RetransmitTries: 3}
		if s.ep, err = s.ctl.Open(cfg, tr, pols); err != nil {
			t.Fatal(err)
		}
		tr.Serve(s.ep)
		t.Cleanup(func() { s.ctl.Close(time.Second); tr.Close() })
		return s
	}
	b = side(cb, pb, []ChildPolicy{{Peer: "to-a", Child: "net"}, {Peer: "to-a", Child: "more"}})
	a = side(ca, pa, pols)
	return a, b
}

// waitUp waits for s's child to send with a pair and returns it.
func (s *ctlSide) waitUp(t *testing.T, child string) *ChildSA {
	t.Helper()
	var c *ChildSA
	waitFor(t, func() bool { c = s.dp.sending(child); return c != nil })
	return c
}

// rw is the tunnel of s's child as B, a responder-only peer, names it
// for its one road warrior, A (TunnelName: A's address and port).
func (s *ctlSide) rw(child string) string {
	return child + "/" + netip.AddrPortFrom(loA, s.ep.cfg.Port).String()
}

// status is s's Controller's status of child.
func (s *ctlSide) status(child string) ChildStatus {
	for _, st := range s.ctl.Children() {
		if st.Child == child {
			return st
		}
	}
	return ChildStatus{}
}

// TestControllerStart: Start initiates the children that start, a
// peer's IKE_AUTH child first and the next on its IKE SA; both sides
// install mirrored pairs; DPD restarts the peer whose first child starts.
func TestControllerStart(t *testing.T) {
	a, b := ctlPair(t, ChildPolicy{Peer: "to-b", Child: "net", Start: StartStart}, ChildPolicy{Peer: "to-b", Child: "more", Start: StartStart})
	if a.peer.DPDAction != ActionRestart || b.peer.DPDAction != ActionNone {
		t.Errorf("DPD actions %v and %v, want restart for the initiator only", a.peer.DPDAction, b.peer.DPDAction)
	}
	a.ctl.Start(func(st ChildStatus) bool { return st.Start == StartStart })
	for _, child := range []string{"net", "more"} {
		ca, cb := a.waitUp(t, child), b.waitUp(t, b.rw(child))
		if ca.InSPI != cb.OutSPI || ca.OutSPI != cb.InSPI {
			t.Fatalf("%s: A's pair %#x/%#x, B's %#x/%#x: not mirrored", child, ca.InSPI, ca.OutSPI, cb.InSPI, cb.OutSPI)
		}
		// The pair is installed before the initiation returns and the
		// child stops being busy (CI once read it in between): wait for
		// the child to settle.
		var st ChildStatus
		waitFor(t, func() bool { st = a.status(child); return !st.Busy })
		if st.Pair != ca || st.LastErr != "" {
			t.Errorf("%s: status %+v", child, st)
		}
	}
	if n := len(a.ep.IKESAs()); n != 1 {
		t.Errorf("%d IKE SAs, want the children on one", n)
	}
}

// TestControllerRetry: a child that starts, whose initiation failed (the
// peer refused its key), is tried again with backoff until it is up; one
// that does not start is not.
func TestControllerRetry(t *testing.T) {
	a, b := ctlPair(t, ChildPolicy{Peer: "to-b", Child: "net", Start: StartStart}, ChildPolicy{Peer: "to-b", Child: "more"})
	_, wrong := ctlPeers(t)
	wrong.PSK = []byte("not the secret")
	bpols := []ChildPolicy{{Peer: "to-a", Child: "net"}, {Peer: "to-a", Child: "more"}}
	if err := b.ctl.Reload([]*Peer{wrong}, bpols, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	a.ctl.Start(func(st ChildStatus) bool { return st.Start == StartStart })
	waitFor(t, func() bool { return a.status("net").LastErr != "" })
	_, right := ctlPeers(t)
	if err := b.ctl.Reload([]*Peer{right}, bpols, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	a.waitUp(t, "net")
	if st := a.status("net"); st.LastErr != "" {
		t.Errorf("the error stays after the retry succeeded: %+v", st)
	}
	if a.dp.sending("more") != nil || a.status("more").Busy {
		t.Error("a child that does not start was initiated")
	}
}

// TestControllerTrap: a trap child has a tunnel without SAs; a packet
// for it (Trap) negotiates it, and it is trapped again once its pair is
// deleted.
func TestControllerTrap(t *testing.T) {
	a, _ := ctlPair(t, ChildPolicy{Peer: "to-b", Child: "net", Start: StartTrap})
	if !a.dp.trapped("net") {
		t.Fatal("no trap tunnel for the trap child")
	}
	a.ctl.Trap("net")
	c := a.waitUp(t, "net")
	if err := a.ctl.Terminate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return a.dp.trapped("net") && a.dp.sending("net") == nil })
	if st := a.status("net"); st.Pair != nil || !st.Terminated {
		t.Fatalf("after Terminate: %+v (pair %v)", st, c)
	}
	// Terminated: its packets negotiate nothing until Initiate.
	a.ctl.Trap("net")
	if err := a.ctl.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	if next := a.waitUp(t, "net"); next == c {
		t.Fatal("the old pair again")
	}
	if err := a.ctl.Initiate(ctx(t), "nobody"); !errors.Is(err, ErrUnknownPeer) {
		t.Errorf("Initiate of an unknown peer: %v", err)
	}
}

// TestControllerRekeyLimits: a pair whose SAs reach their child's
// rekey_packets or rekey_bytes, or near the sequence-number limit, is
// rekeyed (make-before-break: the new pair sends, the old one retires);
// one below every limit is not.
func TestControllerRekeyLimits(t *testing.T) {
	for _, c := range []struct {
		name string
		pol  ChildPolicy
		over Traffic // what makes the pair due
	}{
		{"rekey_packets", ChildPolicy{RekeyPackets: 100}, Traffic{PacketsOut: 100}},
		{"rekey_packets inbound", ChildPolicy{RekeyPackets: 100}, Traffic{PacketsIn: 105}},
		{"rekey_bytes", ChildPolicy{RekeyBytes: 1 << 20}, Traffic{BytesOut: 1 << 20}},
		{"sequence limit", ChildPolicy{}, Traffic{SeqLimit: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pol := c.pol
			pol.Peer, pol.Child, pol.Start = "to-b", "net", StartStart
			a, b := ctlPair(t, pol)
			a.ctl.Start(func(st ChildStatus) bool { return st.Start == StartStart })
			first := a.waitUp(t, "net")
			// Below the limits: no rekey.
			a.dp.count(first, Traffic{PacketsIn: 99, PacketsOut: 99, BytesIn: 1<<20 - 1, BytesOut: 1<<20 - 1})
			a.dp.settle(t)
			if got := a.dp.sending("net"); got != first {
				t.Fatalf("rekeyed below the limits (pair %#x after %#x)", got.InSPI, first.InSPI)
			}
			a.dp.count(first, c.over)
			var next *ChildSA
			waitFor(t, func() bool { next = a.dp.sending("net"); return next != first })
			waitFor(t, func() bool { return b.dp.sending(b.rw("net")) != nil && b.dp.sending(b.rw("net")).InSPI == next.OutSPI })
			a.dp.mu.Lock()
			retired := len(a.dp.retired) == 1 && a.dp.retired[0] == first && !a.dp.in[first.InSPI]
			a.dp.mu.Unlock()
			if !retired {
				waitFor(t, func() bool {
					a.dp.mu.Lock()
					defer a.dp.mu.Unlock()
					return len(a.dp.retired) >= 1 && a.dp.retired[0] == first
				})
			}
		})
	}
}

// TestControllerLifeLimits: a pair whose SAs reach their child's
// life_packets or life_bytes is deleted, on both sides, and its child
// goes down (a trap child back to its trap); without life_packets,
// rekey_packets plus 10% is the limit (swanctl's default).
func TestControllerLifeLimits(t *testing.T) {
	for _, c := range []struct {
		name string
		pol  ChildPolicy
		over Traffic
	}{
		{"life_packets", ChildPolicy{LifePackets: 50}, Traffic{PacketsOut: 50}},
		{"life_bytes", ChildPolicy{LifeBytes: 5000}, Traffic{BytesIn: 6000}},
		// A pair that was not rekeyed in time (the peer does not answer
		// rekeys, say): the life limit beats the rekey one.
		{"life past rekey", ChildPolicy{RekeyPackets: 1000, LifePackets: 1100}, Traffic{PacketsIn: 1100}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pol := c.pol
			pol.Peer, pol.Child, pol.Start = "to-b", "net", StartTrap
			a, b := ctlPair(t, pol)
			a.ctl.Trap("net")
			first := a.waitUp(t, "net")
			b.waitUp(t, b.rw("net"))
			a.dp.count(first, Traffic{PacketsOut: 49, BytesIn: 4999})
			a.dp.settle(t)
			if a.dp.sending("net") != first {
				t.Fatal("the pair went below its limits")
			}
			a.dp.count(first, c.over)
			waitFor(t, func() bool { return a.dp.sending("net") == nil && a.dp.trapped("net") })
			waitFor(t, func() bool { return b.dp.sending(b.rw("net")) == nil })
			if st := a.status("net"); st.Pair != nil {
				t.Fatalf("the child still has a pair: %+v", st)
			}
		})
	}
}

// TestControllerLifeLimitOthers: a child past its life limit is deleted
// alone (Endpoint.DeleteChild, RFC 7296 section 1.4.1): the peer's other
// child keeps its pair and the IKE SA stays.
func TestControllerLifeLimitOthers(t *testing.T) {
	a, b := ctlPair(t, ChildPolicy{Peer: "to-b", Child: "net", Start: StartStart}, ChildPolicy{Peer: "to-b", Child: "more", LifePackets: 10})
	a.ctl.Start(func(st ChildStatus) bool { return st.Start == StartStart })
	net1 := a.waitUp(t, "net")
	a.ctl.Start(func(st ChildStatus) bool { return st.Child == "more" })
	more := a.waitUp(t, "more")
	if n := len(a.ep.IKESAs()); n != 1 {
		t.Fatalf("%d IKE SAs, want both children on one", n)
	}
	before := a.ep.IKESAs()[0]
	a.dp.count(more, Traffic{PacketsOut: 10})
	waitFor(t, func() bool { return a.dp.sending("more") == nil && b.dp.sending(b.rw("more")) == nil })
	if a.dp.sending("net") != net1 || b.dp.sending(b.rw("net")) == nil || b.dp.sending(b.rw("net")).InSPI != net1.OutSPI {
		t.Fatal("net lost its pair")
	}
	l := a.ep.IKESAs()
	if len(l) != 1 || l[0].SPIi != before.SPIi || len(l[0].Children) != 1 || l[0].Children[0] != net1 {
		t.Fatalf("IKE SAs after the delete %+v, want the one before with net alone", l)
	}
	if s := a.ep.Stats(); s.Deleted != 0 {
		t.Fatalf("an IKE SA was deleted: %+v", s)
	}
}

// TestControllerReload: a reload keeps the pair of an unchanged peer,
// negotiates again the children of a changed one that were up, takes
// the tunnels of removed children down, and installs the traps of new
// ones.
func TestControllerReload(t *testing.T) {
	a, _ := ctlPair(t, ChildPolicy{Peer: "to-b", Child: "net", Start: StartStart})
	a.ctl.Start(func(st ChildStatus) bool { return st.Start == StartStart })
	first := a.waitUp(t, "net")

	// Unchanged (the same *Peer, as SetPeers tells them apart): the same
	// pair, also once the endpoint is done with the reload.
	if err := a.ctl.Reload([]*Peer{a.peer}, []ChildPolicy{{Peer: "to-b", Child: "net", Start: StartStart}}, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	a.dp.settle(t)
	if a.dp.sending("net") != first || a.status("net").Pair != first {
		t.Fatal("an unchanged peer lost its pair")
	}

	// Changed (the child is now none, but it was up): SetPeers deletes
	// its SAs, and it is negotiated again.
	changed, _ := ctlPeers(t)
	if err := a.ctl.Reload([]*Peer{changed}, []ChildPolicy{{Peer: "to-b", Child: "net"}, {Peer: "to-b", Child: "more", Start: StartTrap}},
		func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { c := a.dp.sending("net"); return c != nil && c != first })
	if !a.dp.trapped("more") {
		t.Error("the added trap child has no trap tunnel")
	}

	// Removed: its SAs are deleted and its tunnel goes.
	gone := a.ctl.Remove(func(child string) bool { return child != "net" }, time.Second)
	if fmt.Sprint(gone) != "[net]" {
		t.Errorf("removed %v, want [net]", gone)
	}
	waitFor(t, func() bool { return a.dp.sending("net") == nil })
}

// TestControllerRebuild: a new Endpoint in place of the old (Detach,
// Open) carries the children's pairs until the new Endpoint's replace
// them; the old pair then retires.
func TestControllerRebuild(t *testing.T) {
	a, _ := ctlPair(t, ChildPolicy{Peer: "to-b", Child: "net", Start: StartStart})
	a.ctl.Start(func(st ChildStatus) bool { return st.Start == StartStart })
	first := a.waitUp(t, "net")
	port := a.ep.cfg.Port
	a.ctl.Detach()
	a.tr.Close()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(loA, port)))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewUDPTransport(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	pa, _ := ctlPeers(t)
	ep, err := a.ctl.Open(Config{Peers: []*Peer{pa}, Port: port, NATTPort: port + 1, RetransmitTimeout: 250 * time.Millisecond},
		tr, []ChildPolicy{{Peer: "to-b", Child: "net", Start: StartStart}})
	if err != nil {
		t.Fatal(err)
	}
	tr.Serve(ep)
	if a.status("net").Pair != first {
		t.Fatal("the pair was not carried over")
	}
	a.ctl.Start(func(st ChildStatus) bool { return st.Pair != nil })
	waitFor(t, func() bool { c := a.dp.sending("net"); return c != nil && c != first })
	waitFor(t, func() bool {
		a.dp.mu.Lock()
		defer a.dp.mu.Unlock()
		return len(a.dp.retired) == 1 && a.dp.retired[0] == first
	})
}

// TestControllerClose: Close deletes the IKE SAs, telling the peer.
func TestControllerClose(t *testing.T) {
	a, b := ctlPair(t, ChildPolicy{Peer: "to-b", Child: "net", Start: StartStart})
	a.ctl.Start(func(st ChildStatus) bool { return st.Start == StartStart })
	a.waitUp(t, "net")
	b.waitUp(t, b.rw("net"))
	a.ctl.Close(2 * time.Second)
	waitFor(t, func() bool { return b.dp.sending(b.rw("net")) == nil })
}

var loC = netip.MustParseAddr("127.0.0.3")

// ctlInitiator is one more initiator to B like A, at local on B's port
// with the identity id (INITIAL_CONTACT makes B drop the IKE SAs of the
// same identity), with a Controller whose children have the policies
// pols.
func ctlInitiator(t *testing.T, local netip.Addr, port uint16, id string, pols ...ChildPolicy) *ctlSide {
	t.Helper()
	p, _ := ctlPeers(t)
	p.Local, p.LocalID = local, ParseIdentity(id)
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, port)))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewUDPTransport(c)
	if err != nil {
		t.Fatal(err)
	}
	s := &ctlSide{dp: newFakeDP(), peer: p, tr: tr}
	s.ctl = NewController(ControllerConfig{DataPlane: s.dp, CheckInterval: 5 * time.Millisecond, InitiateTimeout: 5 * time.Second})
	cfg := Config{Peers: []*Peer{p}, Port: port, NATTPort: port + 1, RetransmitTimeout: 250 * time.Millisecond, RetransmitTries: 3}
	if s.ep, err = s.ctl.Open(cfg, tr, pols); err != nil {
		t.Fatal(err)
	}
	tr.Serve(s.ep)
	t.Cleanup(func() { s.ctl.Close(time.Second); tr.Close() })
	return s
}

// TestControllerRoadWarriors: B's peer has no Remote address (a
// responder-only connection), so it runs in several IKE SAs at once, one
// per road warrior (A at 127.0.0.1, C at 127.0.0.3): each road
// warrior's pairs go to tunnels of their own (TunnelName), which keep
// their names through a rekey of the Child SA and of the IKE SA; the
// end of one road warrior's IKE SA takes its tunnels down and leaves the
// other's alone; a pair's packet limit rekeys that road warrior's only;
// and the Controller keeps nothing of a road warrior that went.
func TestControllerRoadWarriors(t *testing.T) {
	pols := []ChildPolicy{{Peer: "to-b", Child: "net", Start: StartStart}, {Peer: "to-b", Child: "more", Start: StartStart}}
	a, b := ctlPair(t, pols...)
	port := b.ep.cfg.Port
	// B takes any identity (with its PSK), and rekeys a pair of "net"
	// past 100 packets.
	bpeer := *b.peer
	bpeer.RemoteID = Identity{}
	if err := b.ctl.Reload([]*Peer{&bpeer}, []ChildPolicy{{Peer: "to-a", Child: "net", RekeyPackets: 100}, {Peer: "to-a", Child: "more"}},
		func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	c := ctlInitiator(t, loC, port, "c@example.net", pols...)
	rwA := func(child string) string { return child + "/" + netip.AddrPortFrom(loA, port).String() }
	rwC := func(child string) string { return child + "/" + netip.AddrPortFrom(loC, port).String() }
	a.ctl.Start(func(st ChildStatus) bool { return st.Start == StartStart })
	c.ctl.Start(func(st ChildStatus) bool { return st.Start == StartStart })
	mirrored := func(what string, x *ctlSide, child, tunnel string) *ChildSA {
		t.Helper()
		var xs *ChildSA
		waitFor(t, func() bool {
			xs = x.dp.sending(child)
			bs := b.dp.sending(tunnel)
			return xs != nil && bs != nil && bs.InSPI == xs.OutSPI && bs.OutSPI == xs.InSPI
		})
		return xs
	}
	for _, child := range []string{"net", "more"} {
		mirrored("A", a, child, rwA(child))
		mirrored("C", c, child, rwC(child))
	}
	tunnels := func() []string {
		var out []string
		for _, st := range b.ctl.Children() {
			out = append(out, st.Child+"="+st.Tunnel)
		}
		return out
	}
	want := fmt.Sprint([]string{"net=", "net=" + rwA("net"), "net=" + rwC("net"), "more=", "more=" + rwA("more"), "more=" + rwC("more")})
	if got := fmt.Sprint(tunnels()); got != want {
		t.Fatalf("B's children %s, want %s", got, want)
	}

	// C rekeys its Child SA, then its IKE SA, then the Child SA again
	// (now made by the new IKE SA): the pairs stay in C's tunnel, and
	// A's is untouched.
	aNet := a.dp.sending("net")
	cNet := c.dp.sending("net")
	if _, err := c.ep.Rekey(ctx(t), cNet); err != nil {
		t.Fatal(err)
	}
	cNet = mirrored("C rekeyed", c, "net", rwC("net"))
	if err := c.ep.RekeyIKE(ctx(t), cNet); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ep.Rekey(ctx(t), cNet); err != nil {
		t.Fatal(err)
	}
	mirrored("C rekeyed after its IKE SA", c, "net", rwC("net"))
	if got := fmt.Sprint(tunnels()); got != want {
		t.Fatalf("after C's rekeys, B's children %s, want %s", got, want)
	}
	if b.dp.sending(rwA("net")).OutSPI != aNet.InSPI {
		t.Fatal("C's rekeys moved A's tunnel")
	}

	// C's pair at B reaches rekey_packets: B rekeys it, in C's tunnel.
	cNet = c.dp.sending("net")
	b.dp.count(b.dp.sending(rwC("net")), Traffic{PacketsIn: 100})
	waitFor(t, func() bool { x := c.dp.sending("net"); return x != nil && x != cNet })
	mirrored("C rekeyed by B at its limit", c, "net", rwC("net"))
	if b.dp.sending(rwA("net")).OutSPI != aNet.InSPI {
		t.Fatal("C's limit rekeyed A's pair")
	}

	// A goes: its tunnels and instances with it; C's stay.
	a.ctl.Close(time.Second)
	waitFor(t, func() bool { return b.dp.sending(rwA("net")) == nil && b.dp.sending(rwA("more")) == nil })
	want = fmt.Sprint([]string{"net=", "net=" + rwC("net"), "more=", "more=" + rwC("more")})
	if got := fmt.Sprint(tunnels()); got != want {
		t.Fatalf("after A went, B's children %s, want %s", got, want)
	}
	mirrored("C after A went", c, "more", rwC("more"))

	// Road warriors come and go: B keeps nothing of those gone.
	for i := range 3 {
		d := ctlInitiator(t, netip.AddrFrom4([4]byte{127, 0, 0, byte(10 + i)}), port, fmt.Sprintf("d%d@example.net", i), pols[0])
		d.ctl.Start(func(st ChildStatus) bool { return st.Start == StartStart })
		mirrored("D", d, "net", "net/"+netip.AddrPortFrom(d.peer.Local, port).String())
		d.ctl.Close(time.Second)
	}
	c.ctl.Close(time.Second)
	waitFor(t, func() bool { return len(b.ctl.Children()) == 2 })
	b.ctl.mu.Lock()
	for name, ch := range b.ctl.children {
		if len(ch.insts) != 0 || ch.cur != nil {
			t.Errorf("child %s keeps %d road warriors, pair %v", name, len(ch.insts), ch.cur)
		}
	}
	b.ctl.mu.Unlock()
	b.dp.mu.Lock()
	defer b.dp.mu.Unlock()
	if len(b.dp.out) != 0 || len(b.dp.held) != 0 || len(b.dp.in) != 0 {
		t.Errorf("B's data plane keeps tunnels %v, held %v, inbound SAs %v", b.dp.out, b.dp.held, b.dp.in)
	}
}

// TestControllerInitiateUp: Initiate of a peer whose children are up
// keeps their pairs and makes no second IKE SA; while an initiation of
// one of them is under way it says so (ErrInitiating) and starts
// nothing; and IKE_AUTH's child, down while another child holds the IKE
// SA, comes back on that IKE SA (issue 29 item 6).
func TestControllerInitiateUp(t *testing.T) {
	a, _ := ctlPair(t, ChildPolicy{Peer: "to-b", Child: "net"}, ChildPolicy{Peer: "to-b", Child: "more"})
	if err := a.ctl.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	net, more := a.waitUp(t, "net"), a.waitUp(t, "more")
	if err := a.ctl.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatalf("Initiate of a peer that is up: %v", err)
	}
	if n := len(a.ep.IKESAs()); n != 1 {
		t.Fatalf("%d IKE SAs after a second Initiate, want 1", n)
	}
	if a.dp.sending("net") != net || a.dp.sending("more") != more {
		t.Fatal("a second Initiate replaced a pair that was up")
	}

	// An initiation under way (as the Controller's own start or retry
	// marks it).
	a.ctl.mu.Lock()
	for _, ch := range a.ctl.children {
		if ch.pol.Child == "more" {
			ch.busy = true
		}
	}
	a.ctl.mu.Unlock()
	if err := a.ctl.Initiate(ctx(t), "to-b"); !errors.Is(err, ErrInitiating) {
		t.Fatalf("Initiate while one is under way: %v, want ErrInitiating", err)
	}
	a.ctl.mu.Lock()
	for _, ch := range a.ctl.children {
		ch.busy = false
	}
	a.ctl.mu.Unlock()

	// IKE_AUTH's child alone goes; "more" keeps the IKE SA.
	if err := a.ep.DeleteChild(ctx(t), net); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return a.dp.sending("net") == nil })
	if err := a.ctl.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	if c := a.waitUp(t, "net"); c == net {
		t.Fatal("the deleted pair is back")
	}
	if n := len(a.ep.IKESAs()); n != 1 {
		t.Fatalf("%d IKE SAs after IKE_AUTH's child came back, want 1", n)
	}
}

// TestControllerReauthTerminated: a child the operator terminated
// (TerminateChild) while another child keeps the IKE SA is not made
// again by a later reauthentication, though its IKE_AUTH carries the
// peer's first child: the pair is deleted without being installed, on
// both sides, and the other child moves to the new IKE SA (issue 29
// item 6).
func TestControllerReauthTerminated(t *testing.T) {
	a, b := ctlPair(t, ChildPolicy{Peer: "to-b", Child: "net"}, ChildPolicy{Peer: "to-b", Child: "more"})
	a.peer.ReauthTime = 2 * time.Second
	if err := a.ctl.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	a.waitUp(t, "net")
	more1 := a.waitUp(t, "more")
	if err := a.ctl.TerminateChild(ctx(t), "net"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return a.dp.sending("net") == nil && b.dp.sending(b.rw("net")) == nil })
	before := a.ep.IKESAs()
	if len(before) != 1 {
		t.Fatalf("%d IKE SAs", len(before))
	}
	// The reauthentication: a new IKE SA carrying "more" alone, the old
	// one gone.
	var after []IKESAInfo
	waitFor(t, func() bool {
		after = a.ep.IKESAs()
		return len(after) == 1 && after[0].SPIi != before[0].SPIi && len(b.ep.IKESAs()) == 1 && a.dp.sending("more") != more1
	})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		after = a.ep.IKESAs()
		if len(after) == 1 && len(after[0].Children) == 1 && idle(a.ep) && idle(b.ep) {
			break
		}
		if time.Now().After(deadline) {
			var names []string
			for _, c := range after[0].Children {
				names = append(names, c.Child)
			}
			t.Fatalf("the reauthenticated IKE SA carries %v, want [more] (net sending: %v)", names, a.dp.sending("net") != nil)
		}
	}
	if c := a.dp.sending("net"); c != nil {
		t.Fatalf("the terminated child is back after the reauthentication: %+v", c)
	}
	if st := a.status("net"); st.Pair != nil || !st.Terminated {
		t.Fatalf("status of the terminated child: %+v", st)
	}
	if ch := after[0].Children[0]; ch.Child != "more" {
		t.Fatalf("the new IKE SA carries %q, want more", ch.Child)
	}
	waitFor(t, func() bool { return b.dp.sending(b.rw("net")) == nil && b.dp.sending(b.rw("more")) != nil })
}
