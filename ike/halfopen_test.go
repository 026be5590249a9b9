package ike

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// withCookie returns the IKE_SA_INIT request req with a COOKIE notify
// first (section 2.6).
func withCookie(t testing.TB, req, cookie []byte) []byte {
	m, err := ParseMessage(req)
	if err != nil {
		t.Fatal(err)
	}
	m.Payloads = append([]Payload{&Notify{NType: Cookie, Data: cookie}}, m.Payloads...)
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cookieOf returns the cookie of an IKE_SA_INIT response, or nil.
func cookieOf(resp []byte) []byte {
	m, err := ParseMessage(resp)
	if err != nil || !m.Header.IsResponse() || m.Header.Exchange != IKE_SA_INIT || len(m.Payloads) == 0 {
		return nil
	}
	if n, ok := m.Payloads[0].(*Notify); ok && n.NType == Cookie {
		return n.Data
	}
	return nil
}

// TestCookieSecretRotation: the cookie secret changes every
// CookieSecretLifetime (default 2m; RFC 7296 section 2.6); a cookie made
// with the secret before the current one is still accepted, one made two
// secrets ago is refused.
func TestCookieSecretRotation(t *testing.T) {
	_, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	var mu sync.Mutex
	var last []byte
	tr := transportFunc(func(local, remote netip.AddrPort, pkt []byte) error {
		mu.Lock()
		last = append([]byte(nil), pkt...)
		mu.Unlock()
		return nil
	})
	clk := newFakeClock()
	e, err := NewEndpoint(Config{Peers: []*Peer{pb}, CookieThreshold: -1, clock: clk}, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	local, remote := netip.AddrPortFrom(addrB, 500), netip.AddrPortFrom(addrA, 500)
	cookieFor := func(req []byte) []byte {
		e.Receive(local, remote, req)
		mu.Lock()
		defer mu.Unlock()
		c := cookieOf(last)
		if c == nil {
			t.Fatal("no cookie demanded")
		}
		return c
	}
	r1, r2 := initRequest(t, 1, DHCurve25519, pb.IKE), initRequest(t, 2, DHCurve25519, pb.IKE)
	c1, c2 := cookieFor(r1), cookieFor(r2)
	halfOpen := func() int { e.mu.Lock(); defer e.mu.Unlock(); return len(e.halfOpen) }

	// One change later, the old secret's cookie still serves.
	clk.Advance(2 * time.Minute)
	if c := cookieFor(initRequest(t, 3, DHCurve25519, pb.IKE)); string(c[:4]) == string(c1[:4]) {
		t.Fatalf("the cookie secret did not change: version %x both", c[:4])
	}
	e.Receive(local, remote, withCookie(t, r1, c1))
	if s := e.Stats(); halfOpen() != 1 || s.RxBadCookie != 0 {
		t.Fatalf("a cookie of the previous secret: half-open %d, stats %+v", halfOpen(), s)
	}
	// Two changes later it is refused. (The half-open SA of r1 has
	// expired meanwhile.)
	clk.Advance(2 * time.Minute)
	e.Receive(local, remote, withCookie(t, r2, c2))
	if s := e.Stats(); halfOpen() != 0 || s.RxBadCookie != 1 {
		t.Fatalf("a cookie two secrets old was accepted: half-open %d, stats %+v", halfOpen(), s)
	}
}

// TestHalfOpenPerSource: over real UDP on loopback, one host (127.0.0.3)
// sends IKE_SA_INIT requests with fresh SPIs as fast as it can and
// answers every cookie challenge; it holds no more than BlockThreshold
// (5, strongSwan's block_threshold) half-open SAs, its further requests
// are dropped and counted (RxBlocked), and a legitimate initiator on
// 127.0.0.2 connects while the attack goes on. Without a limit per
// source the attacker took every half-open place (MaxHalfOpen) and the
// legitimate initiator timed out (issue 16, defect 8).
func TestHalfOpenPerSource(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	resp, legit, attacker := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	pa.Local, pa.Remote, pb.Local, pb.Remote = legit, resp, resp, netip.Addr{}

	// The responder and the legitimate initiator on one port number.
	var rc, lc *net.UDPConn
	var port uint16
	for try := 0; lc == nil; try++ {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(resp, 0)))
		if err != nil {
			t.Fatal(err)
		}
		port = uint16(c.LocalAddr().(*net.UDPAddr).Port)
		if lc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(legit, port))); err != nil {
			c.Close()
			if try == 10 {
				t.Fatal(err)
			}
			continue
		}
		rc = c
	}
	serve := func(c *net.UDPConn, cfg Config) *Endpoint {
		tr, err := NewUDPTransport(c)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Port, cfg.NATTPort = port, port+1
		e, err := NewEndpoint(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		tr.Serve(e)
		t.Cleanup(func() { e.Close(); tr.Close() })
		return e
	}
	// Small limits, so that the attack fills them at once: cookies from
	// 4 half-open SAs on, at most 32.
	b := serve(rc, Config{Peers: []*Peer{pb}, MaxHalfOpen: 32, CookieThreshold: 4})
	a := serve(lc, Config{Peers: []*Peer{pa}, RetransmitTimeout: 250 * time.Millisecond, RetransmitTries: 5})

	// The attacker.
	ac, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(attacker, 0)))
	if err != nil {
		t.Fatal(err)
	}
	sent, answered := Flood(t, ac, netip.AddrPortFrom(resp, port), pb.IKE)

	WaitFlood(t, b, answered)

	// The legitimate initiator, during the attack.
	before := sent.Load()
	start := time.Now()
	ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer icancel()
	child, err := a.Initiate(ictx, "to-b")
	took := time.Since(start)
	during := sent.Load() - before
	s := b.Stats()
	t.Logf("legitimate initiator: %v after %v, while the attacker sent %d requests (%d in all, %d cookies answered); responder %+v",
		err, took.Round(time.Millisecond), during, sent.Load(), answered.Load(), s)
	if err != nil {
		t.Fatalf("the legitimate initiator did not connect during the attack: %v", err)
	}
	if child == nil {
		t.Fatal("no Child SA")
	}
	FloodGoesOn(t, sent)
	held := HalfOpenFrom(b, attacker)
	if s.RxBlocked == 0 || held > DefaultBlockThreshold {
		t.Fatalf("the attacker holds %d half-open SAs (limit %d), RxBlocked %d", held, DefaultBlockThreshold, s.RxBlocked)
	}
}

// Flood attacks the responder at to from c, until the test ends: bursts
// of IKE_SA_INIT requests (5 a millisecond) for proposals props, each
// with a fresh SPI, and the same request again with each cookie the
// responder sends back (section 2.6), as a host that answers cookies
// does. It counts the requests sent and the cookies answered.
func Flood(t *testing.T, c *net.UDPConn, to netip.AddrPort, props []Proposal) (sent, answered *atomic.Uint64) {
	tmpl := initRequest(t, 1, DHCurve25519, props)
	sent, answered = new(atomic.Uint64), new(atomic.Uint64)
	dst := net.UDPAddrFromAddrPort(to)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // requests
		defer wg.Done()
		req := append([]byte(nil), tmpl...)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for spi := uint64(1); ; {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for range 5 {
				spi++
				binary.BigEndian.PutUint64(req, spi)
				c.WriteToUDP(req, dst)
				sent.Add(1)
			}
		}
	}()
	go func() { // cookies
		defer wg.Done()
		buf := make([]byte, 2048)
		req := append([]byte(nil), tmpl...)
		for {
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			if ck := cookieOf(buf[:n]); ck != nil {
				copy(req, buf[:8]) // its SPIi
				c.WriteToUDP(withCookie(t, req, ck), dst)
				answered.Add(1)
			}
		}
	}()
	t.Cleanup(func() { close(stop); c.Close(); wg.Wait() })
	return sent, answered
}

// WaitFlood waits (at most 10s) until a Flood is at full force against
// e: 200 of its requests refused (per source or over all) and 200
// cookies answered.
func WaitFlood(t testing.TB, e *Endpoint, answered *atomic.Uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := e.Stats(); s.RxBlocked+s.RxHalfOpenLimit < 200 || answered.Load() < 200; s = e.Stats() {
		select {
		case <-ctx.Done():
			t.Fatalf("the flood did not get going: cookies answered %d, stats %+v", answered.Load(), s)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// FloodGoesOn waits (at most 10s) until a Flood sends one more request:
// it was still going when whatever the test did during it ended.
func FloodGoesOn(t testing.TB, sent *atomic.Uint64) {
	t.Helper()
	n := sent.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for sent.Load() == n {
		select {
		case <-ctx.Done():
			t.Fatal("the flood stopped")
		case <-time.After(time.Millisecond):
		}
	}
}

// HalfOpenFrom is how many half-open SAs e holds for initiator address a.
func HalfOpenFrom(e *Endpoint, a netip.Addr) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.halfOpenBy[halfOpenSource(netip.AddrPortFrom(a, 0))]
}

// TestHalfOpenLifeUnderPressure: a half-open SA made while cookies are
// due lives HalfOpenTimeout/5 (6s of 30s), one made before lives
// HalfOpenTimeout.
func TestHalfOpenLifeUnderPressure(t *testing.T) {
	_, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pb.Remote = netip.Addr{}
	var mu sync.Mutex
	var last []byte
	tr := transportFunc(func(local, remote netip.AddrPort, pkt []byte) error {
		mu.Lock()
		last = append([]byte(nil), pkt...)
		mu.Unlock()
		return nil
	})
	clk := newFakeClock()
	e, err := NewEndpoint(Config{Peers: []*Peer{pb}, CookieThreshold: 2, clock: clk}, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	local := netip.AddrPortFrom(addrB, 500)
	from := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), 500)
	}
	halfOpen := func() int { e.mu.Lock(); defer e.mu.Unlock(); return len(e.halfOpen) }
	for i := 1; i <= 2; i++ { // no pressure yet
		e.Receive(local, from(i), initRequest(t, uint64(i), DHCurve25519, pb.IKE))
	}
	r3 := initRequest(t, 3, DHCurve25519, pb.IKE)
	e.Receive(local, from(3), r3) // two half open: a cookie is due
	mu.Lock()
	c := cookieOf(last)
	mu.Unlock()
	if c == nil {
		t.Fatal("no cookie demanded")
	}
	e.Receive(local, from(3), withCookie(t, r3, c))
	if n := halfOpen(); n != 3 {
		t.Fatalf("half-open %d, want 3", n)
	}
	clk.Advance(6 * time.Second)
	if n := halfOpen(); n != 2 {
		t.Fatalf("after 6s: half-open %d, want 2 (the one made under pressure gone)", n)
	}
	clk.Advance(24 * time.Second)
	if n := halfOpen(); n != 0 {
		t.Fatalf("after 30s: half-open %d, want 0", n)
	}
}

// TestHalfOpenPerSourceIPv6: an IPv6 initiator's half-open SAs count per
// /64, which one host holds: fresh addresses in it do not spare it the
// cookies due from CookieThresholdIP (3) on; another /64 has places of
// its own.
func TestHalfOpenPerSourceIPv6(t *testing.T) {
	_, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pb.Remote = netip.Addr{}
	e, err := NewEndpoint(Config{Peers: []*Peer{pb}, CookieThreshold: 100}, transportFunc(func(netip.AddrPort, netip.AddrPort, []byte) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	local := netip.AddrPortFrom(addrB, 500)
	for i := 1; i <= 10; i++ {
		src := netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i)}), 500)
		e.Receive(local, src, initRequest(t, uint64(i), DHCurve25519, pb.IKE))
	}
	e.Receive(local, netip.MustParseAddrPort("[2001:db8:0:1::1]:500"), initRequest(t, 11, DHCurve25519, pb.IKE))
	if s := e.Stats(); s.CookiesSent != 7 || HalfOpenFrom(e, netip.MustParseAddr("2001:db8::7")) != DefaultCookieThresholdIP ||
		HalfOpenFrom(e, netip.MustParseAddr("2001:db8:0:1::9")) != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestHalfOpenForgedSource: a sender that forges a peer's address (and
// so never sees the cookies sent to it) takes no more than
// CookieThresholdIP (3) of that address's BlockThreshold (5) places: the
// peer itself, returning its cookie, still gets one.
func TestHalfOpenForgedSource(t *testing.T) {
	_, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	var mu sync.Mutex
	var last []byte
	tr := transportFunc(func(local, remote netip.AddrPort, pkt []byte) error {
		mu.Lock()
		last = append([]byte(nil), pkt...)
		mu.Unlock()
		return nil
	})
	e, err := NewEndpoint(Config{Peers: []*Peer{pb}}, tr) // global cookie threshold 128: far away
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	local, peer := netip.AddrPortFrom(addrB, 500), netip.AddrPortFrom(addrA, 500)
	for i := 1; i <= 20; i++ { // forged: the cookies go to the real peer, unanswered
		e.Receive(local, peer, initRequest(t, uint64(i), DHCurve25519, pb.IKE))
	}
	if held, s := HalfOpenFrom(e, addrA), e.Stats(); held != DefaultCookieThresholdIP || s.CookiesSent != 20-DefaultCookieThresholdIP {
		t.Fatalf("the forger holds %d half-open SAs (want %d), stats %+v", held, DefaultCookieThresholdIP, s)
	}
	// The peer asks, gets a cookie, returns it: it has a place.
	req := initRequest(t, 100, DHCurve25519, pb.IKE)
	e.Receive(local, peer, req)
	mu.Lock()
	c := cookieOf(last)
	mu.Unlock()
	if c == nil {
		t.Fatal("no cookie demanded")
	}
	e.Receive(local, peer, withCookie(t, req, c))
	if held, s := HalfOpenFrom(e, addrA), e.Stats(); held != DefaultCookieThresholdIP+1 || s.RxBlocked != 0 {
		t.Fatalf("the peer did not get its place: %d held, stats %+v", held, s)
	}
}
