package ike_test

// sluice to sluice with ML-KEM as an additional key exchange (RFC 9370
// over RFC 9242's IKE_INTERMEDIATE): two Endpoints on real UDP sockets
// on the loopback of a network namespace of their own (127.0.0.1 and
// 127.0.0.2, ports 500 and 4500). strongSwan 5.9.8 here has no ML-KEM
// (strongswan_pq_test.go checks the fallback against it).

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/internal/lab"
)

type loopPair struct {
	a, b   *ike.Endpoint
	mu     sync.Mutex
	bChild []*ike.ChildSA
}

// newLoopPair starts endpoints a (the initiator, "to-b") and b on the
// loopback of a new namespace, both with IKE proposals props.
func newLoopPair(t *testing.T, props string, tweak func(a, b *ike.Config)) *loopPair {
	t.Helper()
	lab.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	l := lab.NewForTest(t, nil)
	ns, err := l.NewNetns(ctx, "pq")
	if err != nil {
		t.Fatal(err)
	}
	addrA, addrB := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	transport := func(a netip.Addr) *ike.UDPTransport {
		var conns []*net.UDPConn
		for _, port := range []uint16{500, 4500} {
			c, err := ns.ListenUDP(netip.AddrPortFrom(a, port))
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		tr, err := ike.NewUDPTransport(conns...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	ikeP, err := ike.ParseProposals(ike.ProtoIKE, props)
	if err != nil {
		t.Fatal(err)
	}
	espP, _ := ike.ParseProposals(ike.ProtoESP, "aes256gcm16")
	pa := &ike.Peer{Name: "to-b", Local: addrA, Remote: addrB, LocalID: ike.ParseIdentity("a.pq.sluice"), RemoteID: ike.ParseIdentity("b.pq.sluice"),
		PSK: []byte("post-quantum"), IKE: ikeP, ESP: espP,
		LocalTS: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, RemoteTS: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}}
	pb := &ike.Peer{Name: "to-a", Local: addrB, Remote: addrA, LocalID: ike.ParseIdentity("b.pq.sluice"), RemoteID: ike.ParseIdentity("a.pq.sluice"),
		PSK: []byte("post-quantum"), IKE: ikeP, ESP: espP,
		LocalTS: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}, RemoteTS: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}
	p := &loopPair{}
	ca := ike.Config{Peers: []*ike.Peer{pa}, RetransmitTimeout: 500 * time.Millisecond, RetransmitTries: 4}
	cb := ike.Config{Peers: []*ike.Peer{pb}, RetransmitTimeout: 500 * time.Millisecond, RetransmitTries: 4,
		OnChildSA: func(c *ike.ChildSA) { p.mu.Lock(); p.bChild = append(p.bChild, c); p.mu.Unlock() }}
	if tweak != nil {
		tweak(&ca, &cb)
	}
	ta, tb := transport(addrA), transport(addrB)
	if p.a, err = ike.NewEndpoint(ca, ta); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.a.Close() })
	if p.b, err = ike.NewEndpoint(cb, tb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.b.Close() })
	ta.Serve(p.a)
	tb.Serve(p.b)
	return p
}

// bChildN waits for b's n-th Child SA.
func (p *loopPair) bChildN(t *testing.T, n int) *ike.ChildSA {
	t.Helper()
	var c *ike.ChildSA
	err := lab.WaitFor(context.Background(), "the responder's Child SA", 10*time.Second, 5*time.Millisecond, func() (bool, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.bChild) >= n {
			c = p.bChild[n-1]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mirror(t *testing.T, a, b *ike.ChildSA) {
	t.Helper()
	if a.InSPI != b.OutSPI || a.OutSPI != b.InSPI || len(a.OutKey) != 36 ||
		!bytes.Equal(a.OutKey, b.InKey) || !bytes.Equal(a.InKey, b.OutKey) || bytes.Equal(a.InKey, a.OutKey) {
		t.Fatalf("Child SA keys do not mirror: a in %08x out %08x, b in %08x out %08x", a.InSPI, a.OutSPI, b.InSPI, b.OutSPI)
	}
}

// TestIntermediateMLKEM: sluice to sluice with x25519 in IKE_SA_INIT and
// ML-KEM in IKE_INTERMEDIATE (one exchange, its messages in IKE fragments
// at the default FragmentSize; two exchanges, 768 then 1024, unfragmented):
// the ESP Child SA's keys mirror, the IKE SA is named with its additional
// key exchanges, a Child SA rekey and an IKE SA rekey (with the base key
// exchange only: no IKE_FOLLOWUP_KE) work after it.
func TestIntermediateMLKEM(t *testing.T) {
	for _, c := range []struct {
		props    string
		frag     int
		rounds   uint64
		fragSeen bool
	}{
		{"aes256gcm16-prfsha384-x25519-ke1_mlkem768", 0, 1, true},
		{"aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke2_mlkem1024", -1, 2, false},
	} {
		t.Run(c.props, func(t *testing.T) {
			p := newLoopPair(t, c.props, func(a, b *ike.Config) { a.FragmentSize, b.FragmentSize = c.frag, c.frag })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			ca, err := p.a.Initiate(ctx, "to-b")
			if err != nil {
				t.Fatalf("initiate: %v (stats %+v / %+v)", err, p.a.Stats(), p.b.Stats())
			}
			t.Logf("established in %v", time.Since(start).Round(time.Millisecond))
			cb := p.bChildN(t, 1)
			mirror(t, ca, cb)
			for _, e := range []*ike.Endpoint{p.a, p.b} {
				l := e.IKESAs()
				if len(l) != 1 || l[0].Suite != c.props {
					t.Fatalf("IKE SAs %+v, want one of %s", l, c.props)
				}
			}
			sa, sb := p.a.Stats(), p.b.Stats()
			if sa.IKEIntermediateInitiated != c.rounds || sb.IKEIntermediateAnswered != c.rounds || sa.AddKEFailed+sb.AddKEFailed != 0 ||
				sa.RxIntegrityFailed+sb.RxIntegrityFailed+sa.AuthFailed+sb.AuthFailed != 0 {
				t.Fatalf("stats %+v / %+v", sa, sb)
			}
			// KEi of ML-KEM-768 (1184 bytes) is longer than a fragment
			// of 1232, KEr (1088) not.
			if (sa.TxFragments > 0) != c.fragSeen || (sb.RxReassembled > 0) != c.fragSeen || sb.TxFragments != 0 {
				t.Fatalf("fragments sent %d / %d, reassembled by b %d", sa.TxFragments, sb.TxFragments, sb.RxReassembled)
			}
			// A Child SA rekey on it.
			fresh, err := p.a.Rekey(ctx, ca)
			if err != nil {
				t.Fatalf("Child SA rekey: %v", err)
			}
			mirror(t, fresh, p.bChildN(t, 2))
			// An IKE SA rekey, with x25519 alone; the Child SA goes on
			// it and rekeys again.
			if err := p.a.RekeyIKE(ctx, fresh); err != nil {
				t.Fatalf("IKE SA rekey: %v (stats %+v / %+v)", err, p.a.Stats(), p.b.Stats())
			}
			err = lab.WaitFor(ctx, "one IKE SA each, rekeyed", 10*time.Second, 5*time.Millisecond, func() (bool, error) {
				la, lb := p.a.IKESAs(), p.b.IKESAs()
				return len(la) == 1 && len(lb) == 1 && la[0].SPIi == lb[0].SPIi && la[0].Suite == "aes256gcm16-prfsha384-x25519", nil
			})
			if err != nil {
				t.Fatalf("%v: %+v / %+v", err, p.a.IKESAs(), p.b.IKESAs())
			}
			again, err := p.a.Rekey(ctx, fresh)
			if err != nil {
				t.Fatalf("Child SA rekey on the rekeyed IKE SA: %v", err)
			}
			mirror(t, again, p.bChildN(t, 3))
		})
	}
}
