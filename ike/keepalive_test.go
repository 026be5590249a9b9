package ike

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// natted puts a between a NAT and b on p's network: a's datagrams reach b
// from addrNAT, ports plus 10000, and b's answers to that find a. It
// returns a counter of the NAT-keepalives a sends (which go no further)
// and the addresses they went between.
func natted(t *testing.T, p *pair) (*atomic.Int64, func() (from, to netip.AddrPort)) {
	addrNAT := netip.MustParseAddr("198.51.100.7")
	var (
		n        atomic.Int64
		mu       sync.Mutex
		lastFrom netip.AddrPort
		lastTo   netip.AddrPort
	)
	p.net.mu.Lock()
	p.net.drop = func(_ int, from, to netip.AddrPort, pkt []byte) bool {
		if len(pkt) == 1 && pkt[0] == 0xff {
			if from.Addr() != addrA {
				t.Errorf("a NAT-keepalive from %v, which is not behind the NAT", from)
			}
			n.Add(1)
			mu.Lock()
			lastFrom, lastTo = from, to
			mu.Unlock()
			return true
		}
		return false
	}
	p.net.deliver = func(to, from netip.AddrPort, pkt []byte) bool {
		switch {
		case from.Addr() == addrA:
			p.b.Receive(to, netip.AddrPortFrom(addrNAT, from.Port()+10000), pkt)
		case to.Addr() == addrNAT:
			p.a.Receive(netip.AddrPortFrom(addrA, to.Port()-10000), from, pkt)
		default:
			return false
		}
		return true
	}
	p.net.mu.Unlock()
	return &n, func() (netip.AddrPort, netip.AddrPort) { mu.Lock(); defer mu.Unlock(); return lastFrom, lastTo }
}

// TestKeepAlive: the side behind a NAT (NAT detection found its own
// address translated) sends a one-byte 0xFF datagram from its NAT-T port
// to the peer's every KeepAlive while it sends nothing else
// (Config.ESPSent), and none while ESP goes out; the side not behind the
// NAT sends none; a rekeyed IKE SA hands the keepalives to its successor;
// a negative KeepAlive sends none.
func TestKeepAlive(t *testing.T) {
	const every = 20 * time.Second
	var esp atomic.Uint64
	clk := newFakeClock()
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, func(a, b *Config) {
		withClock(clk)(a, b)
		a.ESPSent = func(*ChildSA) uint64 { return esp.Load() }
	})
	clk.settleOn(t, p)
	kas, where := natted(t, p)
	c, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Encap || c.Local.Port() != 4500 {
		t.Fatalf("behind the NAT: encap %v, local %v", c.Encap, c.Local)
	}
	waitFor(t, settled(p))
	clk.Advance(every - time.Millisecond)
	if n := kas.Load(); n != 0 {
		t.Fatalf("%d keepalives before KeepAlive passed", n)
	}
	clk.Advance(time.Millisecond)
	if n := kas.Load(); n != 1 {
		t.Fatalf("%d keepalives after KeepAlive, want 1", n)
	}
	if from, to := where(); from != netip.AddrPortFrom(addrA, 4500) || to != netip.AddrPortFrom(addrB, 4500) {
		t.Fatalf("keepalive from %v to %v, want the NAT-T ports", from, to)
	}
	clk.Advance(3 * every)
	if n := kas.Load(); n != 4 {
		t.Fatalf("%d keepalives after 4 KeepAlive intervals idle, want 4", n)
	}
	// ESP going out: no keepalives.
	for range 8 {
		esp.Add(1)
		clk.Advance(every / 2)
	}
	if n := kas.Load(); n != 4 {
		t.Fatalf("%d keepalives while ESP went out, want still 4", n)
	}
	// Idle again: the first keepalive comes within KeepAlive.
	clk.Advance(every)
	if n := kas.Load(); n != 5 {
		t.Fatalf("%d keepalives within KeepAlive of the last ESP, want 5", n)
	}
	// A rekey of the IKE SA: its successor keeps sending them, the old
	// one no more.
	if err := p.a.RekeyIKE(ctx(t), c); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	base := kas.Load()
	clk.Advance(2 * every)
	if n := kas.Load() - base; n != 2 {
		t.Fatalf("%d keepalives in 2 KeepAlive intervals after the IKE SA rekey, want 2", n)
	}
	if st := p.a.Stats(); st.KeepAlives != uint64(kas.Load()) {
		t.Fatalf("Stats.KeepAlives %d, sent %d", st.KeepAlives, kas.Load())
	}
	if st := p.b.Stats(); st.KeepAlives != 0 {
		t.Fatalf("the side not behind the NAT sent %d keepalives", st.KeepAlives)
	}
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
	kas, _ := natted(t, p)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	clk.Advance(time.Hour)
	if n := kas.Load(); n != 0 {
		t.Fatalf("%d keepalives with KeepAlive off", n)
	}
}
