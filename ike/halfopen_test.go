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

	// The attacker: bursts of requests with fresh SPIs, and the same
	// request again with each cookie it is sent.
	ac, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(attacker, 0)))
	if err != nil {
		t.Fatal(err)
	}
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(resp, port))
	tmpl := initRequest(t, 1, DHCurve25519, pb.IKE)
	var sent, answered atomic.Uint64
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
				ac.WriteToUDP(req, to)
				sent.Add(1)
			}
		}
	}()
	go func() { // cookies
		defer wg.Done()
		buf := make([]byte, 2048)
		req := append([]byte(nil), tmpl...)
		for {
			n, _, err := ac.ReadFromUDP(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			if c := cookieOf(buf[:n]); c != nil {
				copy(req, buf[:8]) // its SPIi
				ac.WriteToUDP(withCookie(t, req, c), to)
				answered.Add(1)
			}
		}
	}()
	t.Cleanup(func() { close(stop); ac.Close(); wg.Wait() })

	// The attack at full force: many of its requests refused, cookies
	// answered.
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := b.Stats(); s.RxBlocked+s.RxHalfOpenLimit < 200 || answered.Load() < 200; s = b.Stats() {
		select {
		case <-wctx.Done():
			t.Fatalf("the attack did not get going: sent %d, cookies answered %d, stats %+v", sent.Load(), answered.Load(), s)
		case <-time.After(5 * time.Millisecond):
		}
	}

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
	if child == nil || during == 0 {
		t.Fatalf("child %v; the attack sent %d requests meanwhile", child, during)
	}
	b.mu.Lock()
	held := b.halfOpenBy[attacker]
	b.mu.Unlock()
	if s.RxBlocked == 0 || held > DefaultBlockThreshold {
		t.Fatalf("the attacker holds %d half-open SAs (limit %d), RxBlocked %d", held, DefaultBlockThreshold, s.RxBlocked)
	}
}
