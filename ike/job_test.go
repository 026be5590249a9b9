package ike

import (
	"crypto"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var addrC = netip.MustParseAddr("192.0.2.3")

// gate blocks the first call that passes it until open, and reports when
// that call is waiting.
type gate struct {
	calls   atomic.Int32
	waiting chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{waiting: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(g.open) // a failed test must not leave a job blocked
	return g
}

func (g *gate) pass() {
	if g.calls.Add(1) == 1 {
		close(g.waiting)
		<-g.release
	}
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// slowSigner is a crypto.Signer whose first Sign blocks until its gate
// opens, like an engine whose queue is busy.
type slowSigner struct {
	crypto.Signer
	g *gate
}

func (s slowSigner) Sign(r io.Reader, d []byte, o crypto.SignerOpts) ([]byte, error) {
	s.g.pass()
	return s.Signer.Sign(r, d, o)
}

// slowDH is a DH whose first Shared blocks until its gate opens.
type slowDH struct {
	DH
	g *gate
}

func (d slowDH) Shared(peer []byte) ([]byte, error) {
	d.g.pass()
	return d.DH.Shared(peer)
}

// trio is responder b with two initiators: a (certificates; b signs) and
// c (PSK), each with its own IKE SA on b.
type trio struct {
	net     *memNet
	a, b, c *Endpoint
}

func newTrio(t *testing.T, tweakB func(pa, pc *Peer, cb *Config)) *trio {
	t.Helper()
	pa, pba, _ := certPeers(t, "p256", "p256")
	pba.Remote = addrA
	pc, pbc := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pc.Name, pc.Local, pc.LocalID = "c-to-b", addrC, ParseIdentity("c@example.net")
	pbc.Name, pbc.Remote, pbc.RemoteID = "to-c", addrC, pc.LocalID
	n := newMemNet(t)
	cfg := func(ps ...*Peer) Config {
		return Config{Peers: ps, RetransmitTimeout: 250 * time.Millisecond, RetransmitTries: 3}
	}
	cb := cfg(pba, pbc)
	tweakB(pba, pbc, &cb)
	tr := &trio{net: n}
	var err error
	for _, x := range []struct {
		e   **Endpoint
		cfg Config
		at  netip.Addr
	}{{&tr.a, cfg(pa), addrA}, {&tr.b, cb, addrB}, {&tr.c, cfg(pc), addrC}} {
		if *x.e, err = NewEndpoint(x.cfg, memPort{n}); err != nil {
			t.Fatal(err)
		}
		n.mu.Lock()
		n.eps[x.at] = *x.e
		n.mu.Unlock()
	}
	return tr
}

// TestSlowCryptoOffLock: while the responder's signature for one peer
// (a Signer blocked in its engine) or its Diffie-Hellman for it is under
// way, another peer's exchanges with the same Endpoint complete; then
// the first completes too, or, if its IKE SA went meanwhile, the result
// is dropped and counted.
func TestSlowCryptoOffLock(t *testing.T) {
	for _, kind := range []string{"signer", "dh", "stale"} {
		t.Run(kind, func(t *testing.T) {
			g := newGate(t)
			tr := newTrio(t, func(pa, pc *Peer, cb *Config) {
				if kind == "signer" {
					pa.Signer = slowSigner{pa.Signer, g}
					return
				}
				cb.newDH = func(group uint16) (DH, error) {
					d, err := NewDH(group)
					return slowDH{d, g}, err
				}
			})
			type res struct {
				c   *ChildSA
				err error
			}
			first := make(chan res, 1)
			go func() {
				c, err := tr.a.Initiate(ctx(t), "to-b")
				first <- res{c, err}
			}()
			<-g.waiting // b is computing for a, off its lock
			// c's whole negotiation, a rekey and a liveness check go
			// through b meanwhile.
			cc, err := tr.c.Initiate(ctx(t), "c-to-b")
			if err != nil {
				t.Fatalf("c while b computes for a: %v", err)
			}
			if _, err := tr.c.Rekey(ctx(t), cc); err != nil {
				t.Fatalf("c's rekey while b computes for a: %v", err)
			}
			select {
			case r := <-first:
				t.Fatalf("a finished while b's computation was blocked: %+v", r)
			default:
			}
			if kind == "stale" {
				// a's half-open SA on b goes while b computes for it.
				tr.b.mu.Lock()
				var after []func()
				for _, sa := range tr.b.halfOpen {
					after = append(after, tr.b.removeLocked(sa, nil)...)
				}
				tr.b.mu.Unlock()
				run(after)
				g.open()
				waitFor(t, func() bool { return tr.b.Stats().CryptoStale == 1 })
				return
			}
			g.open()
			r := <-first
			if r.err != nil {
				t.Fatalf("a after b's computation: %v (b %+v)", r.err, tr.b.Stats())
			}
			if s := tr.b.Stats(); s.IKESAEstablished != 2 || s.CryptoStale != 0 || s.CryptoBusy != 0 {
				t.Fatalf("b's stats %+v", s)
			}
		})
	}
}

// TestCryptoJobBound: with MaxCryptoJobs computations in flight, a
// message that needs one more is dropped and counted, and its
// retransmission gets through once a slot is free.
func TestCryptoJobBound(t *testing.T) {
	g := newGate(t)
	tr := newTrio(t, func(pa, pc *Peer, cb *Config) {
		pa.Signer = slowSigner{pa.Signer, g}
		cb.MaxCryptoJobs = 1
	})
	done := make(chan error, 1)
	go func() {
		_, err := tr.a.Initiate(ctx(t), "to-b")
		done <- err
	}()
	<-g.waiting
	errc := make(chan error, 1)
	go func() {
		_, err := tr.c.Initiate(ctx(t), "c-to-b")
		errc <- err
	}()
	waitFor(t, func() bool { return tr.b.Stats().CryptoBusy > 0 })
	g.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("c after the slot was freed: %v (b %+v)", err, tr.b.Stats())
	}
}
