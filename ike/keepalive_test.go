package ike

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var addrNAT = netip.MustParseAddr("198.51.100.7")

// natBox puts a between a NAT and b on p's network: a's datagrams reach b
// from addrNAT with the ports the NAT's current mapping gives them (a's
// port plus off), and b's datagrams to a mapped port find a; those to a
// port no mapping gives any more are dropped. NAT-keepalives are counted
// and go no further. It records when (by clk) each datagram of a's left,
// and keeps the last raw message a sent b.
type natBox struct {
	t   testing.TB
	clk *fakeClock

	mu       sync.Mutex
	off      uint16   // the current mapping: port + off
	valid    []uint16 // offsets b's datagrams still find a through
	kas      int
	kaFrom   netip.AddrPort
	kaTo     netip.AddrPort
	out      []time.Time // a's datagrams to b, keepalives and IKE
	sent     [][]byte    // a's IKE messages as b received them, in order
	toStale  int         // b's datagrams to a port no longer mapped
	fromPort uint16      // the port b saw a's last datagram from
}

func newNATBox(t testing.TB, p *pair, clk *fakeClock) *natBox {
	n := &natBox{t: t, clk: clk, off: 10000, valid: []uint16{10000}}
	p.net.mu.Lock()
	p.net.drop = func(_ int, from, to netip.AddrPort, pkt []byte) bool {
		if from.Addr() != addrA {
			if len(pkt) == 1 && pkt[0] == 0xff {
				t.Errorf("a NAT-keepalive from %v, which is not behind the NAT", from)
			}
			return false
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		n.out = append(n.out, clk.Now())
		if len(pkt) == 1 && pkt[0] == 0xff {
			n.kas++
			n.kaFrom, n.kaTo = from, to
			return true
		}
		return false
	}
	p.net.deliver = func(to, from netip.AddrPort, pkt []byte) bool {
		n.mu.Lock()
		switch {
		case from.Addr() == addrA:
			src := netip.AddrPortFrom(addrNAT, from.Port()+n.off)
			n.fromPort = src.Port()
			m := pkt
			if len(m) >= 4 && string(m[:4]) == string(nonESPMarker) {
				m = m[4:]
			}
			n.sent = append(n.sent, append([]byte(nil), m...))
			n.mu.Unlock()
			p.b.Receive(to, src, pkt)
		case to.Addr() == addrNAT:
			var off uint16
			for _, o := range n.valid {
				if to.Port() > o && (to.Port()-o == 500 || to.Port()-o == 4500) {
					off = o
				}
			}
			if off == 0 {
				n.toStale++
				n.mu.Unlock()
				return true
			}
			n.mu.Unlock()
			p.a.Receive(netip.AddrPortFrom(addrA, to.Port()-off), from, pkt)
		default:
			n.mu.Unlock()
			return false
		}
		return true
	}
	p.net.mu.Unlock()
	return n
}

// remap makes the NAT forget a's mapping and give it port + off from now
// on; with keepOld, what b sends to the old mapping still reaches a.
func (n *natBox) remap(off uint16, keepOld bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.off = off
	if keepOld {
		n.valid = append(n.valid, off)
	} else {
		n.valid = []uint16{off}
	}
}

func (n *natBox) keepalives() int { n.mu.Lock(); defer n.mu.Unlock(); return n.kas }

// stall moves c's time on by d without running the timers due meanwhile:
// the process was stopped (or the machine loaded) and each timer fires
// late, at the next Advance.
func (c *fakeClock) stall(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestKeepAlive: the side behind a NAT (NAT detection found its own
// address translated) sends a one-byte 0xFF datagram from its NAT-T port
// to the peer's whenever it sent nothing else for KeepAlive less a tenth
// (Config.ESPSent), and none while ESP goes out; the side not behind the
// NAT sends none; a rekeyed IKE SA hands the keepalives to its successor.
func TestKeepAlive(t *testing.T) {
	const keepAlive = 20 * time.Second
	every := keepAlive * 9 / 10
	var esp atomic.Uint64
	clk := newFakeClock()
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, func(a, b *Config) {
		withClock(clk)(a, b)
		a.ESPSent = func(*ChildSA) uint64 { return esp.Load() }
	})
	clk.settleOn(t, p)
	nat := newNATBox(t, p, clk)
	c, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Encap || c.Local.Port() != 4500 {
		t.Fatalf("behind the NAT: encap %v, local %v", c.Encap, c.Local)
	}
	waitFor(t, settled(p))
	clk.Advance(every - time.Millisecond)
	if n := nat.keepalives(); n != 0 {
		t.Fatalf("%d keepalives before %v passed", n, every)
	}
	clk.Advance(time.Millisecond)
	if n := nat.keepalives(); n != 1 {
		t.Fatalf("%d keepalives after %v, want 1", n, every)
	}
	if nat.kaFrom != netip.AddrPortFrom(addrA, 4500) || nat.kaTo != netip.AddrPortFrom(addrB, 4500) {
		t.Fatalf("keepalive from %v to %v, want the NAT-T ports", nat.kaFrom, nat.kaTo)
	}
	clk.Advance(3 * every)
	if n := nat.keepalives(); n != 4 {
		t.Fatalf("%d keepalives after 4 intervals idle, want 4", n)
	}
	// ESP going out: no keepalives.
	for range 16 {
		esp.Add(1)
		clk.Advance(keepAlive / 4)
	}
	if n := nat.keepalives(); n != 4 {
		t.Fatalf("%d keepalives while ESP went out, want still 4", n)
	}
	// Idle again: the first keepalive comes within KeepAlive*9/10 of
	// the last ESP.
	clk.Advance(every)
	if n := nat.keepalives(); n != 5 {
		t.Fatalf("%d keepalives within %v of the last ESP, want 5", n, every)
	}
	// A rekey of the IKE SA: its successor keeps sending them, the old
	// one no more.
	if err := p.a.RekeyIKE(ctx(t), c); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	base := nat.keepalives()
	clk.Advance(2 * every)
	if n := nat.keepalives() - base; n != 2 {
		t.Fatalf("%d keepalives in 2 intervals after the IKE SA rekey, want 2", n)
	}
	if st := p.a.Stats(); st.KeepAlives != uint64(nat.keepalives()) || st.NATMappingChecks != 0 {
		t.Fatalf("Stats.KeepAlives %d, sent %d; NATMappingChecks %d with timers on time", st.KeepAlives, nat.keepalives(), st.NATMappingChecks)
	}
	if st := p.b.Stats(); st.KeepAlives != 0 {
		t.Fatalf("the side not behind the NAT sent %d keepalives", st.KeepAlives)
	}
}

// TestKeepAliveGap: however ESP falls between the looks at the data
// plane's counters, no more than KeepAlive*9/10 passes between two
// datagrams the side behind the NAT sends (ESP, IKE or keepalive), so a
// NAT whose mappings live exactly KeepAlive keeps the mapping even when a
// timer fires a tenth of KeepAlive late. (The coarse tick of KeepAlive/2
// before let up to KeepAlive pass: no room for a late timer.)
func TestKeepAliveGap(t *testing.T) {
	const keepAlive = 20 * time.Second
	var esp atomic.Uint64
	clk := newFakeClock()
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, func(a, b *Config) {
		withClock(clk)(a, b)
		a.ESPSent = func(*ChildSA) uint64 { return esp.Load() }
	})
	clk.settleOn(t, p)
	nat := newNATBox(t, p, clk)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	// ESP at every phase of the looks: a packet, then silence for a
	// while that is not a multiple of anything the looks use.
	var espAt []time.Time
	for _, idle := range []time.Duration{time.Millisecond, 999 * time.Millisecond, 1001 * time.Millisecond, 10*time.Second + time.Millisecond,
		9999 * time.Millisecond, 17 * time.Second, 19*time.Second + 500*time.Millisecond, 33 * time.Second, 5 * time.Second,
		10*time.Second + 7*time.Millisecond, 41 * time.Second} {
		esp.Add(1)
		espAt = append(espAt, clk.Now())
		clk.Advance(idle)
	}
	nat.mu.Lock()
	out := append(slices.Clone(nat.out), espAt...)
	nat.mu.Unlock()
	slices.SortFunc(out, func(x, y time.Time) int { return x.Compare(y) })
	var worst time.Duration
	for i := 1; i < len(out); i++ {
		worst = max(worst, out[i].Sub(out[i-1]))
	}
	if limit := keepAlive * 9 / 10; worst > limit {
		t.Fatalf("%v between two datagrams sent through the NAT, want at most %v", worst, limit)
	}
	t.Logf("longest gap between datagrams sent through the NAT: %v (%d keepalives)", worst, nat.keepalives())
}

// TestKeepAliveLateMapping: the side behind the NAT was stopped for
// longer than KeepAlive, and the NAT meanwhile forgot its mapping; its
// late look sends a keepalive and an authenticated INFORMATIONAL through
// the NAT's new mapping, and the peer, not behind a NAT, moves the IKE SA
// and its Child SA there (RFC 7296 section 2.23; with MOBIKE agreed the
// initiator sends UPDATE_SA_ADDRESSES and the peer moves by MOBIKE's
// rules), so that the peer's next request reaches it.
func TestKeepAliveLateMapping(t *testing.T) {
	for _, mobike := range []bool{false, true} {
		t.Run(map[bool]string{false: "nat-t", true: "mobike"}[mobike], func(t *testing.T) {
			var (
				mu    sync.Mutex
				moved []netip.AddrPort
			)
			clk := newFakeClock()
			pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
			pa.NoMOBIKE = !mobike
			p := newPair(t, pa, pb, func(a, b *Config) {
				withClock(clk)(a, b)
				b.RekeyDeleteDelay = -1 // its Rekey below: no timer of the fake clock to wait for
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
			if !cb.Encap || cb.Remote != netip.AddrPortFrom(addrNAT, 14500) {
				t.Fatalf("b's Child SA: encap %v, remote %v", cb.Encap, cb.Remote)
			}
			clk.Advance(30 * time.Second)
			if st := p.a.Stats(); st.NATMappingChecks != 0 || st.LivenessChecks != 0 {
				t.Fatalf("on time: %d mapping checks, %d liveness checks", st.NATMappingChecks, st.LivenessChecks)
			}
			// Stopped for 25 s: the NAT's mapping is gone, the next
			// one has another port.
			clk.stall(25 * time.Second)
			nat.remap(20000, false)
			clk.Advance(0)
			waitFor(t, settled(p))
			if st := p.a.Stats(); st.NATMappingChecks != 1 {
				t.Fatalf("a late look behind the NAT: %d mapping checks, want 1", st.NATMappingChecks)
			}
			want := netip.AddrPortFrom(addrNAT, 24500)
			if sas := p.b.IKESAs(); len(sas) != 1 || sas[0].Remote != want {
				t.Fatalf("b's IKE SA after the NAT's new mapping: %+v, want remote %v", sas, want)
			}
			mu.Lock()
			got := slices.Clone(moved)
			mu.Unlock()
			if len(got) != 1 || got[0] != want {
				t.Fatalf("b moved its Child SA to %v, want once to %v", got, want)
			}
			st := p.b.Stats()
			if mobike && (st.MOBIKEUpdates != 1 || st.NATPeerMoved != 0) {
				t.Fatalf("with MOBIKE: %d MOBIKE updates, %d NAT-T moves; want 1, 0", st.MOBIKEUpdates, st.NATPeerMoved)
			}
			if !mobike && st.NATPeerMoved != 1 {
				t.Fatalf("%d NAT-T moves, want 1", st.NATPeerMoved)
			}
			// b's own request finds a through the new mapping.
			if _, err := p.b.Rekey(ctx(t), cb); err != nil {
				t.Fatalf("b's rekey after the move: %v", err)
			}
		})
	}
}

// TestNATFollowRefused: what must not move the IKE SA of a peer behind a
// NAT: its old requests replayed from another address (a retransmission
// of the last one and an older one) and a new one whose integrity check
// fails; the peer's next genuine request, from the NAT's new mapping,
// does move it. A response from a new mapping (the NAT kept the old one
// for what comes in) moves it too.
func TestNATFollowRefused(t *testing.T) {
	clk := newFakeClock()
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.NoMOBIKE = true
	pa.DPDDelay = 30 * time.Second
	var moves atomic.Int64
	p := newPair(t, pa, pb, func(a, b *Config) {
		withClock(clk)(a, b)
		b.RekeyDeleteDelay = -1 // its Rekey below: no timer of the fake clock to wait for
		b.OnChildAddress = func(*ChildSA, netip.AddrPort, netip.AddrPort) { moves.Add(1) }
	})
	clk.settleOn(t, p)
	nat := newNATBox(t, p, clk)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	home := netip.AddrPortFrom(addrNAT, 14500)
	remoteOfB := func() netip.AddrPort {
		sas := p.b.IKESAs()
		if len(sas) != 1 {
			t.Fatalf("b has %d IKE SAs", len(sas))
		}
		return sas[0].Remote
	}
	// Two liveness checks of a's (DPD): captured as b received them.
	clk.Advance(30 * time.Second)
	clk.Advance(30 * time.Second)
	waitFor(t, settled(p))
	nat.mu.Lock()
	var reqs [][]byte
	for _, m := range nat.sent {
		if h, err := ParseHeader(m); err == nil && h.Exchange == INFORMATIONAL && !h.IsResponse() {
			reqs = append(reqs, m)
		}
	}
	nat.mu.Unlock()
	if len(reqs) < 2 {
		t.Fatalf("%d liveness checks captured, want 2", len(reqs))
	}
	last, older := reqs[len(reqs)-1], reqs[len(reqs)-2]
	local := netip.AddrPortFrom(addrB, 4500)
	spoofed := netip.AddrPortFrom(netip.MustParseAddr("203.0.113.66"), 4500)
	before := p.b.Stats()
	p.b.Receive(local, spoofed, withMarker(last))
	p.b.Receive(local, spoofed, withMarker(older))
	p.b.Receive(local, netip.AddrPortFrom(addrNAT, 31337), withMarker(last))
	forged := nextID(last)
	p.b.Receive(local, netip.AddrPortFrom(addrNAT, 31337), withMarker(forged))
	waitFor(t, settled(p))
	after := p.b.Stats()
	if r := remoteOfB(); r != home || moves.Load() != 0 || after.NATPeerMoved != 0 {
		t.Fatalf("replayed and forged messages moved b's IKE SA to %v (%d Child SA moves)", r, moves.Load())
	}
	if after.RxRetransmits-before.RxRetransmits != 2 || after.RxOutOfWindow-before.RxOutOfWindow != 1 || after.RxIntegrityFailed-before.RxIntegrityFailed != 1 {
		t.Fatalf("b counted %d retransmissions (want 2), %d out of window (want 1), %d integrity failures (want 1)",
			after.RxRetransmits-before.RxRetransmits, after.RxOutOfWindow-before.RxOutOfWindow, after.RxIntegrityFailed-before.RxIntegrityFailed)
	}
	// The NAT's mapping changes; a's next liveness check moves b.
	nat.remap(20000, false)
	clk.Advance(30 * time.Second)
	waitFor(t, settled(p))
	if r, want := remoteOfB(), netip.AddrPortFrom(addrNAT, 24500); r != want || moves.Load() != 1 {
		t.Fatalf("a's next request from the new mapping: b's IKE SA at %v (want %v), %d Child SA moves (want 1)", r, want, moves.Load())
	}
	// A response from a new mapping (what b sends to the old one still
	// reaches a): b's request, a's answer from port +30000.
	nat.remap(30000, true)
	cb := p.respChild(t)
	if _, err := p.b.Rekey(ctx(t), cb); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	if r, want := remoteOfB(), netip.AddrPortFrom(addrNAT, 34500); r != want {
		t.Fatalf("a's response from the new mapping: b's IKE SA at %v, want %v", r, want)
	}
}

// TestNATFollowNotBehindNAT: a side that is itself behind a NAT does not
// follow the peer's address (section 2.23), even when it found a NAT in
// front of the peer too (b fakes one: ForceEncap): b's request from
// another port moves nothing on a.
func TestNATFollowNotBehindNAT(t *testing.T) {
	clk := newFakeClock()
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.NoMOBIKE = true
	pb.ForceEncap = true
	pb.DPDDelay = 30 * time.Second
	p := newPair(t, pa, pb, withClock(clk))
	clk.settleOn(t, p)
	newNATBox(t, p, clk)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	// b's liveness check, delivered to a as if from another port of b's.
	p.net.mu.Lock()
	deliver := p.net.deliver
	p.net.deliver = func(to, from netip.AddrPort, pkt []byte) bool {
		if from.Addr() == addrB {
			from = netip.AddrPortFrom(addrB, 4501)
		}
		return deliver(to, from, pkt)
	}
	p.net.mu.Unlock()
	clk.Advance(30 * time.Second)
	waitFor(t, settled(p))
	if sas := p.a.IKESAs(); len(sas) != 1 || sas[0].Remote != netip.AddrPortFrom(addrB, 4500) {
		t.Fatalf("a, behind the NAT, followed b: %+v", sas)
	}
	if st := p.b.Stats(); st.LivenessChecks != 1 {
		t.Fatalf("b sent %d liveness checks, want 1", st.LivenessChecks)
	}
	if st := p.a.Stats(); st.NATPeerMoved != 0 {
		t.Fatalf("a, behind the NAT, counted %d NAT moves", st.NATPeerMoved)
	}
	a := p.a
	a.mu.Lock()
	for _, sa := range a.sas {
		if !sa.natHere || !sa.natThere {
			t.Errorf("a's IKE SA: natHere %v, natThere %v; the test wants both", sa.natHere, sa.natThere)
		}
	}
	a.mu.Unlock()
}

// TestKeepAliveOff: a negative KeepAlive sends none, behind a NAT too.
func TestKeepAliveOff(t *testing.T) {
	clk := newFakeClock()
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, func(a, b *Config) {
		withClock(clk)(a, b)
		a.KeepAlive = -1
	})
	clk.settleOn(t, p)
	nat := newNATBox(t, p, clk)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	clk.Advance(time.Hour)
	if n := nat.keepalives(); n != 0 {
		t.Fatalf("%d keepalives with KeepAlive off", n)
	}
}

// withMarker puts the non-ESP marker before an IKE message for port 4500.
func withMarker(m []byte) []byte { return append(append([]byte(nil), nonESPMarker...), m...) }

// nextID returns a copy of the IKE message m with its message ID one
// higher (its ICV no longer matches).
func nextID(m []byte) []byte {
	f := slices.Clone(m)
	f[23]++
	return f
}

// BenchmarkKeepAliveLook is the IKE side of one look at an IKE SA behind
// a NAT with one Child SA (keepAliveDue: two turns of the lock, the
// Child SAs noted, the timer armed again), ESPSent a stub. A look comes
// every KeepAlive/10 per such IKE SA; the data path pays nothing for it.
//
//	go test -run - -bench KeepAliveLook ./ike/
func BenchmarkKeepAliveLook(b *testing.B) {
	var esp atomic.Uint64
	pa, pb := peers(b, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(b, pa, pb, func(a, _ *Config) { a.ESPSent = func(*ChildSA) uint64 { return esp.Load() } })
	newNATBox(b, p, newFakeClock())
	if _, err := p.a.Initiate(ctx(b), "to-b"); err != nil {
		b.Fatal(err)
	}
	var sa *ikeSA
	p.a.mu.Lock()
	for _, s := range p.a.sas {
		sa = s
	}
	p.a.mu.Unlock()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		esp.Add(1)
		p.a.mu.Lock()
		stop(sa.ka.t)
		p.a.mu.Unlock()
		p.a.keepAliveDue(sa)
	}
}

// TestNATThereSnapshot: that NAT detection found the peer behind a NAT
// goes with the IKE SA to a standby (snapshot.go), so that the standby
// follows the peer's mapping too.
func TestNATThereSnapshot(t *testing.T) {
	clk := newFakeClock()
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, withClock(clk))
	clk.settleOn(t, p)
	newNATBox(t, p, clk)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	var data []byte
	p.b.mu.Lock()
	for _, sa := range p.b.sas {
		if !sa.natThere || sa.natHere {
			t.Errorf("b: natThere %v, natHere %v; want true, false", sa.natThere, sa.natHere)
		}
		data = sa.snapLocked().encode()
	}
	p.b.mu.Unlock()
	standby, err := NewEndpoint(Config{Peers: []*Peer{pb}, clock: clk}, nopTransport{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Close() })
	if err := standby.Adopt(data); err != nil {
		t.Fatal(err)
	}
	standby.mu.Lock()
	defer standby.mu.Unlock()
	for _, sa := range standby.sas {
		if !sa.natThere || sa.natHere {
			t.Errorf("the standby's IKE SA: natThere %v, natHere %v; want true, false", sa.natThere, sa.natHere)
		}
	}
	if len(standby.sas) != 1 {
		t.Fatalf("the standby holds %d IKE SAs", len(standby.sas))
	}
}
