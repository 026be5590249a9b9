package ike

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memNet delivers datagrams between endpoints in memory, each endpoint's
// input on its own goroutine (Send is called with the sender's lock held,
// so delivery must not be synchronous). drop, if set, decides per datagram.
type memNet struct {
	mu   sync.Mutex
	eps  map[netip.Addr]*Endpoint
	q    chan memPkt
	drop func(n int, from, to netip.AddrPort, pkt []byte) bool
	// deliver, if set, takes over a delivery when it returns true.
	deliver func(to, from netip.AddrPort, pkt []byte) bool
	sent    int
	// inflight counts datagrams queued or being delivered (quiet).
	inflight atomic.Int64
	done     chan struct{}
	wg       sync.WaitGroup
}

type memPkt struct {
	from, to netip.AddrPort
	pkt      []byte
}

func newMemNet(t testing.TB) *memNet {
	n := &memNet{eps: map[netip.Addr]*Endpoint{}, q: make(chan memPkt, 256), done: make(chan struct{})}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			select {
			case p := <-n.q:
				n.mu.Lock()
				e, d := n.eps[p.to.Addr()], n.deliver
				n.mu.Unlock()
				if d == nil || !d(p.to, p.from, p.pkt) {
					if e != nil {
						e.Receive(p.to, p.from, p.pkt)
					}
				}
				n.inflight.Add(-1)
			case <-n.done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(n.done)
		n.wg.Wait()
		for _, e := range n.eps {
			if e != nil {
				e.Close()
			}
		}
	})
	return n
}

type memPort struct {
	n *memNet
}

func (p memPort) Send(local, remote netip.AddrPort, pkt []byte) error {
	n := p.n
	n.mu.Lock()
	n.sent++
	k := n.sent
	drop := n.drop != nil && n.drop(k, local, remote, pkt)
	n.mu.Unlock()
	if drop {
		return nil
	}
	n.inflight.Add(1)
	select {
	case n.q <- memPkt{local, remote, append([]byte(nil), pkt...)}:
	default: // a full queue drops, like a network
		n.inflight.Add(-1)
	}
	return nil
}

var (
	addrA = netip.MustParseAddr("192.0.2.1")
	addrB = netip.MustParseAddr("192.0.2.2")
)

type pair struct {
	a, b     *Endpoint
	net      *memNet
	bChildMu sync.Mutex
	bChild   []*ChildSA
	bDeleted []*ChildSA
}

func mustProps(t testing.TB, proto uint8, s string) []Proposal {
	t.Helper()
	p, err := ParseProposals(proto, s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func peers(t testing.TB, ikeA, espA, ikeB, espB string) (*Peer, *Peer) {
	a := &Peer{Name: "to-b", Local: addrA, Remote: addrB, LocalID: ParseIdentity("a@example.net"), RemoteID: ParseIdentity("b.example.net"),
		PSK: []byte("secret"), IKE: mustProps(t, ProtoIKE, ikeA), ESP: mustProps(t, ProtoESP, espA),
		LocalTS: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, RemoteTS: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}}
	b := &Peer{Name: "to-a", Local: addrB, LocalID: ParseIdentity("b.example.net"), RemoteID: ParseIdentity("a@example.net"),
		PSK: []byte("secret"), IKE: mustProps(t, ProtoIKE, ikeB), ESP: mustProps(t, ProtoESP, espB),
		LocalTS: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}, RemoteTS: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}}
	return a, b
}

func newPair(t testing.TB, pa, pb *Peer, tweak func(a, b *Config)) *pair {
	t.Helper()
	n := newMemNet(t)
	p := &pair{net: n}
	// Long enough that a loaded machine (-race, shared cores) does not
	// retransmit where a test expects no retransmission.
	ca := Config{Peers: []*Peer{pa}, RetransmitTimeout: 250 * time.Millisecond, RetransmitTries: 3}
	cb := Config{Peers: []*Peer{pb}, RetransmitTimeout: 250 * time.Millisecond, RetransmitTries: 3,
		OnChildSA: func(c *ChildSA) { p.bChildMu.Lock(); p.bChild = append(p.bChild, c); p.bChildMu.Unlock() },
		OnDelete:  func(c *ChildSA) { p.bChildMu.Lock(); p.bDeleted = append(p.bDeleted, c); p.bChildMu.Unlock() }}
	if tweak != nil {
		tweak(&ca, &cb)
	}
	var err error
	if p.a, err = NewEndpoint(ca, memPort{n}); err != nil {
		t.Fatal(err)
	}
	if p.b, err = NewEndpoint(cb, memPort{n}); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	n.eps[addrA], n.eps[addrB] = p.a, p.b
	n.mu.Unlock()
	return p
}

func (p *pair) respChild(t *testing.T) *ChildSA {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		p.bChildMu.Lock()
		if len(p.bChild) > 0 {
			c := p.bChild[len(p.bChild)-1]
			p.bChildMu.Unlock()
			return c
		}
		p.bChildMu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("the responder reported no Child SA")
	return nil
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func checkMirror(t *testing.T, a, b *ChildSA, suite string, esn bool) {
	t.Helper()
	if a.InSPI != b.OutSPI || a.OutSPI != b.InSPI || a.InSPI == a.OutSPI {
		t.Fatalf("SPIs: a in %08x out %08x, b in %08x out %08x", a.InSPI, a.OutSPI, b.InSPI, b.OutSPI)
	}
	if !bytes.Equal(a.InKey, b.OutKey) || !bytes.Equal(a.OutKey, b.InKey) || !bytes.Equal(a.InAuthKey, b.OutAuthKey) || !bytes.Equal(a.OutAuthKey, b.InAuthKey) {
		t.Fatal("keys do not mirror")
	}
	if bytes.Equal(a.InKey, a.OutKey) {
		t.Fatal("both directions have one key")
	}
	if a.Suite != suite || b.Suite != suite || a.ESN != esn || b.ESN != esn {
		t.Fatalf("suite %s/%s esn %v/%v, want %s %v", a.Suite, b.Suite, a.ESN, b.ESN, suite, esn)
	}
	if !a.Initiator || b.Initiator || a.Encap != b.Encap {
		t.Fatalf("roles or encap: %+v %+v", a, b)
	}
}

func TestNegotiate(t *testing.T) {
	cases := []struct {
		ikeA, espA, ikeB, espB string
		suite                  string
		esn                    bool
		keyLen, authLen        int
	}{
		{"aes256gcm16-prfsha384-ecp384", "aes128gcm16", "aes256gcm16-prfsha384-ecp384", "aes128gcm16", "aes128gcm16", false, 20, 0},
		{"aes128-sha256-modp2048", "aes128-sha256", "aes128-sha256-modp2048", "aes128-sha256", "aes128-sha256", false, 16, 32},
		{"aes256-sha256-x25519", "aes256gcm16-esn", "aes256-sha256-x25519", "aes128gcm16,aes256gcm16-esn", "aes256gcm16", true, 36, 0},
		{"chacha20poly1305-prfsha256-ecp256", "chacha20poly1305", "aes128-sha256-ecp256,chacha20poly1305-prfsha256-ecp256", "chacha20poly1305", "chacha20poly1305", false, 36, 0},
		{"aes256-sha512-ecp256", "aes256-sha384", "aes256-sha512-ecp256", "aes256-sha384", "aes256-sha384", false, 32, 48},
	}
	for _, c := range cases {
		t.Run(c.ikeA+"/"+c.espA, func(t *testing.T) {
			pa, pb := peers(t, c.ikeA, c.espA, c.ikeB, c.espB)
			p := newPair(t, pa, pb, nil)
			ca, err := p.a.Initiate(ctx(t), "to-b")
			if err != nil {
				t.Fatal(err)
			}
			cb := p.respChild(t)
			checkMirror(t, ca, cb, c.suite, c.esn)
			if len(ca.OutKey) != c.keyLen || len(ca.OutAuthKey) != c.authLen {
				t.Fatalf("key lengths %d/%d", len(ca.OutKey), len(ca.OutAuthKey))
			}
			// The responder narrowed TSi to its 10.1.0.0/24.
			if len(ca.LocalTS) != 1 || ca.LocalTS[0].String() != "10.1.0.0/24" || ca.RemoteTS[0].String() != "10.2.0.0/16" {
				t.Fatalf("selectors %v %v", ca.LocalTS, ca.RemoteTS)
			}
			if cb.RemoteTS[0].String() != "10.1.0.0/24" || cb.LocalTS[0].String() != "10.2.0.0/16" {
				t.Fatalf("responder selectors %v %v", cb.LocalTS, cb.RemoteTS)
			}
			if ca.Encap || ca.Remote.Port() != 500 {
				t.Fatalf("encap without a NAT: %v %v", ca.Encap, ca.Remote)
			}
			sa, sb := p.a.Stats(), p.b.Stats()
			if sa.ChildSAEstablished != 1 || sb.ChildSAEstablished != 1 || sa.TxRetransmits != 0 {
				t.Fatalf("stats %+v %+v", sa, sb)
			}
			// Delete from the initiator: both sides forget.
			if err := p.a.Delete(ctx(t), ca); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return p.b.Stats().Deleted == 1 })
			p.bChildMu.Lock()
			nd := len(p.bDeleted)
			p.bChildMu.Unlock()
			if nd != 1 || p.a.Stats().Deleted != 1 {
				t.Fatal("Delete did not reach both sides")
			}
			if sa, sb := p.a.Stats(), p.b.Stats(); sa.InformationalInitiated != 1 || sb.InformationalAnswered != 1 ||
				sa.IKEAuthInitiated != 1 || sb.IKEAuthAnswered != 1 || sa.CreateChildSAInitiated+sb.CreateChildSAAnswered != 0 {
				t.Fatalf("exchanges: initiator %+v responder %+v", sa, sb)
			}
			if n := len(p.a.sas) + len(p.b.sas); n != 0 {
				t.Fatalf("%d SAs left", n)
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestNegotiateEncap(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pb.ForceEncap = true
	p := newPair(t, pa, pb, nil)
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	cb := p.respChild(t)
	if !ca.Encap || !cb.Encap || ca.Remote.Port() != 4500 || cb.Remote.Port() != 4500 || ca.Local.Port() != 4500 {
		t.Fatalf("encap %v %v, ports %v %v", ca.Encap, cb.Encap, ca.Remote, cb.Remote)
	}
}

func TestNegotiateFailures(t *testing.T) {
	t.Run("psk", func(t *testing.T) {
		pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
		pb.PSK = []byte("other")
		p := newPair(t, pa, pb, nil)
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
			t.Fatalf("err %v", err)
		}
		if p.b.Stats().AuthFailed != 1 || p.a.Stats().AuthFailed != 1 {
			t.Fatalf("stats %+v %+v", p.a.Stats(), p.b.Stats())
		}
	})
	t.Run("ike-proposal", func(t *testing.T) {
		pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes256-sha384-x25519", "aes128gcm16")
		p := newPair(t, pa, pb, nil)
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil || !strings.Contains(err.Error(), "NO_PROPOSAL_CHOSEN") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("esp-proposal", func(t *testing.T) {
		pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes256gcm16")
		p := newPair(t, pa, pb, nil)
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil || !strings.Contains(err.Error(), "NO_PROPOSAL_CHOSEN") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("ts", func(t *testing.T) {
		pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
		pb.RemoteTS = []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}
		p := newPair(t, pa, pb, nil)
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil || !strings.Contains(err.Error(), "TS_UNACCEPTABLE") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("identity", func(t *testing.T) {
		pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
		pa.RemoteID = ParseIdentity("someone.else")
		p := newPair(t, pa, pb, nil)
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil {
			t.Fatal("negotiated with the wrong responder identity")
		}
	})
}

func TestInvalidKE(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519-modp2048", "aes128gcm16", "aes128-sha256-modp2048", "aes128gcm16")
	p := newPair(t, pa, pb, nil)
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	checkMirror(t, ca, p.respChild(t), "aes128gcm16", false)
	if p.a.Stats().InvalidKE != 1 || p.b.Stats().InvalidKE != 1 {
		t.Fatalf("stats %+v %+v", p.a.Stats(), p.b.Stats())
	}
}

func TestCookie(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, func(a, b *Config) { b.CookieThreshold = -1 })
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	checkMirror(t, ca, p.respChild(t), "aes128gcm16", false)
	if s := p.b.Stats(); s.CookiesSent != 1 || s.RxBadCookie != 0 || s.IKESAInitAnswered != 1 {
		t.Fatalf("stats %+v", s)
	}
	// The challenge is not an exchange of its own.
	if s := p.a.Stats(); s.IKESAInitInitiated != 1 {
		t.Fatalf("initiator stats %+v", s)
	}
}

// TestRetransmit loses the first IKE_SA_INIT request and the first
// IKE_AUTH response: the initiator retransmits both, and the responder
// answers the repeated IKE_AUTH from its cache.
func TestRetransmit(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, func(a, b *Config) { a.RetransmitTimeout = 30 * time.Millisecond })
	var authResp int
	p.net.drop = func(n int, from, to netip.AddrPort, pkt []byte) bool {
		if n == 1 {
			return true
		}
		h, err := ParseHeader(pkt)
		if err == nil && h.Exchange == IKE_AUTH && h.IsResponse() {
			authResp++
			return authResp == 1
		}
		return false
	}
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	checkMirror(t, ca, p.respChild(t), "aes128gcm16", false)
	// At least the two losses; a slow machine may add more.
	if s := p.a.Stats(); s.TxRetransmits < 2 {
		t.Fatalf("initiator stats %+v", s)
	}
	if s := p.b.Stats(); s.RxRetransmits < 1 || s.ChildSAEstablished != 1 {
		t.Fatalf("responder stats %+v", s)
	}
	// Each exchange counts once on each side, retransmitted or not.
	sa, sb := p.a.Stats(), p.b.Stats()
	if sa.IKESAInitInitiated != 1 || sa.IKEAuthInitiated != 1 || sa.IKESAInitAnswered+sa.IKEAuthAnswered != 0 ||
		sb.IKESAInitAnswered != 1 || sb.IKEAuthAnswered != 1 || sb.IKESAInitInitiated+sb.IKEAuthInitiated != 0 {
		t.Fatalf("exchanges: initiator %+v responder %+v", sa, sb)
	}
}

func TestTimeout(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, func(a, b *Config) { a.RetransmitTimeout, a.RetransmitTries = 5*time.Millisecond, 3 })
	p.net.drop = func(int, netip.AddrPort, netip.AddrPort, []byte) bool { return true }
	start := time.Now()
	if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil || !strings.Contains(err.Error(), "retransmissions") {
		t.Fatalf("err %v", err)
	}
	// 5 + 10 + 20 + 40 ms of back-off.
	if d := time.Since(start); d < 75*time.Millisecond {
		t.Fatalf("gave up after %v", d)
	}
	if s := p.a.Stats(); s.Timeouts != 1 || s.TxRetransmits != 3 || s.TxPackets != 4 || len(p.a.sas) != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// initRequest returns a valid IKE_SA_INIT request from a fresh initiator.
func initRequest(t *testing.T, spi uint64, group uint16, props []Proposal) []byte {
	dh, err := NewDH(group)
	if err != nil {
		t.Fatal(err)
	}
	m := &Message{Header: Header{SPIi: spi, Exchange: IKE_SA_INIT, Flags: FlagInitiator}, Payloads: []Payload{
		&SA{Proposals: props}, &KE{Group: group, Data: dh.Public()}, &Nonce{Data: randomNonce()}}}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHalfOpenBound fills the responder with half-open SAs: beyond the
// cookie threshold it answers with cookies and keeps no state, beyond the
// limit it drops; a repeated request is answered from the cache.
func TestHalfOpenBound(t *testing.T) {
	_, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	var sent [][]byte
	var mu sync.Mutex
	tr := transportFunc(func(local, remote netip.AddrPort, pkt []byte) error {
		mu.Lock()
		sent = append(sent, append([]byte(nil), pkt...))
		mu.Unlock()
		return nil
	})
	// One source stands for many here: no limit per source.
	e, err := NewEndpoint(Config{Peers: []*Peer{pb}, MaxHalfOpen: 4, CookieThreshold: 2, BlockThreshold: 100, CookieThresholdIP: 100}, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	local, remote := netip.AddrPortFrom(addrB, 500), netip.AddrPortFrom(addrA, 500)
	for i := 1; i <= 10; i++ {
		e.Receive(local, remote, initRequest(t, uint64(i), DHCurve25519, pb.IKE))
	}
	s := e.Stats()
	if len(e.halfOpen) != 2 || s.CookiesSent != 8 {
		t.Fatalf("half-open %d, stats %+v", len(e.halfOpen), s)
	}
	// 8 cookies, and 2 responses sent once their keys are computed off
	// the lock.
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(sent) == 10 })
	// The answer to a repeated request comes from the cache.
	first := initRequest(t, 100, DHCurve25519, pb.IKE)
	e.cfg.CookieThreshold = 100
	mu.Lock()
	n := len(sent)
	mu.Unlock()
	e.Receive(local, remote, first)
	// The response goes out once its keys are computed off the lock.
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(sent) > n })
	e.Receive(local, remote, first)
	if s := e.Stats(); s.RxRetransmits != 1 || len(e.halfOpen) != 3 {
		t.Fatalf("stats %+v, half-open %d", s, len(e.halfOpen))
	}
	mu.Lock()
	if !bytes.Equal(sent[len(sent)-1], sent[len(sent)-2]) {
		t.Fatal("retransmitted request got a different answer")
	}
	mu.Unlock()
	for i := 200; i < 210; i++ {
		e.Receive(local, remote, initRequest(t, uint64(i), DHCurve25519, pb.IKE))
	}
	if s := e.Stats(); len(e.halfOpen) != 4 || s.RxHalfOpenLimit != 9 {
		t.Fatalf("half-open %d, stats %+v", len(e.halfOpen), s)
	}
}

type transportFunc func(local, remote netip.AddrPort, pkt []byte) error

func (f transportFunc) Send(local, remote netip.AddrPort, pkt []byte) error {
	return f(local, remote, pkt)
}

// TestDrops feeds an established responder garbage, replays, messages out
// of the window and forged ones: each is dropped under its reason.
func TestDrops(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, nil)
	var authReq []byte
	var mu sync.Mutex
	p.net.drop = func(n int, from, to netip.AddrPort, pkt []byte) bool {
		if h, err := ParseHeader(pkt); err == nil && h.Exchange == IKE_AUTH && !h.IsResponse() {
			mu.Lock()
			authReq = append([]byte(nil), pkt...)
			mu.Unlock()
		}
		return false
	}
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	p.respChild(t)
	local, remote := netip.AddrPortFrom(addrB, 500), netip.AddrPortFrom(addrA, 500)
	before := p.b.Stats()
	p.b.Receive(local, remote, []byte("not IKE at all, but long enough to look at its header"))
	p.b.Receive(netip.AddrPortFrom(addrB, 4500), remote, authReq) // no marker
	mu.Lock()
	replay := append([]byte(nil), authReq...)
	mu.Unlock()
	p.b.Receive(local, remote, replay) // a retransmission: answered from the cache
	other := append([]byte(nil), replay...)
	other[len(other)-1] ^= 1
	p.b.Receive(local, remote, other) // same ID, other bytes: out of window
	future := append([]byte(nil), replay...)
	future[20], future[21], future[22], future[23] = 0, 0, 0, 2 // the next ID, but forged
	p.b.Receive(local, remote, future)
	far := append([]byte(nil), replay...)
	far[23] = 9
	p.b.Receive(local, remote, far)
	unknown := append([]byte(nil), replay...)
	unknown[8] ^= 0xff // SPIr
	p.b.Receive(local, remote, unknown)
	s := p.b.Stats()
	got := [...]uint64{s.RxMalformed - before.RxMalformed, s.RxNoMarker - before.RxNoMarker, s.RxRetransmits - before.RxRetransmits,
		s.RxOutOfWindow - before.RxOutOfWindow, s.RxIntegrityFailed - before.RxIntegrityFailed, s.RxUnknownSPI - before.RxUnknownSPI}
	if got != [...]uint64{1, 1, 1, 2, 1, 1} {
		t.Fatalf("drops (malformed, no marker, retransmit, window, integrity, unknown SPI) = %v", got)
	}
}

// FuzzEndpointReceive feeds arbitrary datagrams to a responder (after a
// real IKE_SA_INIT, so that an SA exists to aim at): nothing may panic,
// and every datagram is either answered or counted.
func FuzzEndpointReceive(f *testing.F) {
	for _, b := range sampleMessages(f) {
		f.Add(b, false)
	}
	f.Add([]byte{0, 0, 0, 0, 1}, true)
	f.Fuzz(func(t *testing.T, pkt []byte, natt bool) {
		_, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
		e, err := NewEndpoint(Config{Peers: []*Peer{pb}}, transportFunc(func(netip.AddrPort, netip.AddrPort, []byte) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		local, remote := netip.AddrPortFrom(addrB, 500), netip.AddrPortFrom(addrA, 500)
		e.Receive(local, remote, initRequest(t, 1, DHCurve25519, pb.IKE))
		var spir uint64
		for s := range e.sas {
			spir = s
		}
		// Aim at the SA: its SPIs, when the datagram is long enough.
		if len(pkt) >= HeaderLen && pkt[0]&1 == 1 {
			binary.BigEndian.PutUint64(pkt[0:8], 1)
			binary.BigEndian.PutUint64(pkt[8:16], spir)
		}
		if natt {
			local = netip.AddrPortFrom(addrB, 4500)
		}
		e.Receive(local, remote, pkt)
	})
}

// TestDeliver runs a negotiation whose responder is fed through Deliver,
// and checks that a full queue drops and counts instead of blocking.
func TestDeliver(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, nil)
	b := p.b
	t.Cleanup(func() { b.Close() })
	p.net.mu.Lock()
	p.net.eps[addrB] = nil
	// The memNet goroutine hands B's datagrams to Deliver instead.
	p.net.deliver = func(to, from netip.AddrPort, pkt []byte) bool {
		if to.Addr() == addrB {
			b.Deliver(to, from, pkt)
			return true
		}
		return false
	}
	p.net.mu.Unlock()
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	checkMirror(t, ca, p.respChild(t), "aes128gcm16", false)

	_, pc := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	block := make(chan struct{})
	// Every request is answered with a cookie, at once, in Receive (a
	// response that needs keys would be sent by a job, off this path).
	e, err := NewEndpoint(Config{Peers: []*Peer{pc}, QueueLen: 2, CookieThreshold: -1},
		transportFunc(func(netip.AddrPort, netip.AddrPort, []byte) error { <-block; return nil }))
	if err != nil {
		t.Fatal(err)
	}
	local, remote := netip.AddrPortFrom(addrB, 500), netip.AddrPortFrom(addrA, 500)
	// The first is taken and blocks in Send; two fill the queue; the
	// rest drop.
	accepted := 0
	for i := 0; i < 10; i++ {
		if e.Deliver(local, remote, initRequest(t, uint64(i+1), DHCurve25519, pc.IKE)) {
			accepted++
		}
		if i == 0 {
			waitFor(t, func() bool { return len(e.queue) == 0 })
		}
	}
	close(block)
	e.Close()
	if accepted != 3 || e.Stats().RxQueueFull != 7 {
		t.Fatalf("accepted %d, stats %+v", accepted, e.Stats())
	}
	if e.Deliver(local, remote, initRequest(t, 99, DHCurve25519, pc.IKE)) {
		t.Fatal("Deliver after Close")
	}
}
