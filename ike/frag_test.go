package ike

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// fragOf returns the exchange, direction and fragment number of an IKE
// datagram (0 when it is not a fragment).
func fragOf(pkt []byte) (ExchangeType, bool, int) {
	m, err := ParseMessage(pkt)
	if err != nil {
		return 0, false, 0
	}
	if f, ok := fragment(m); ok {
		return m.Header.Exchange, m.Header.IsResponse(), int(f.Number)
	}
	return m.Header.Exchange, m.Header.IsResponse(), 0
}

// TestFragmentation negotiates with certificates and a fragment size
// small enough that IKE_AUTH goes in fragments both ways (RFC 7383),
// with an AEAD and with CBC+HMAC; then with fragment 2 of the request and
// of the response lost once each: the initiator retransmits every
// fragment, the responder keeps what it had and answers a retransmitted
// fragment 1 with every fragment of its cached response.
func TestFragmentation(t *testing.T) {
	for _, c := range []struct{ name, ike, esp, suite string }{
		{"aead", "aes256gcm16-prfsha384-ecp384", "aes128gcm16", "aes128gcm16"},
		{"cbc", "aes256-sha256-x25519", "aes256-sha256", "aes256-sha256"},
		{"lossy", "aes256gcm16-prfsha384-ecp384", "aes128gcm16", "aes128gcm16"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pa, pb, _ := certPeers(t, "rsa", "p384")
			pa.IKE, pb.IKE = mustProps(t, ProtoIKE, c.ike), mustProps(t, ProtoIKE, c.ike)
			pa.ESP, pb.ESP = mustProps(t, ProtoESP, c.esp), mustProps(t, ProtoESP, c.esp)
			p := newPair(t, pa, pb, func(a, b *Config) {
				a.FragmentSize, b.FragmentSize = 400, 400
				if c.name == "lossy" {
					a.RetransmitTimeout = 100 * time.Millisecond
				}
			})
			var mu sync.Mutex
			lost := map[bool]bool{}
			var sizes []int
			p.net.mu.Lock()
			p.net.drop = func(_ int, _, _ netip.AddrPort, pkt []byte) bool {
				mu.Lock()
				defer mu.Unlock()
				sizes = append(sizes, len(pkt))
				exch, resp, n := fragOf(pkt)
				if c.name == "lossy" && exch == IKE_AUTH && n == 2 && !lost[resp] {
					lost[resp] = true
					return true
				}
				return false
			}
			p.net.mu.Unlock()
			ca, err := p.a.Initiate(ctx(t), "to-b")
			if err != nil {
				t.Fatalf("%v\na %+v\nb %+v", err, p.a.Stats(), p.b.Stats())
			}
			checkMirror(t, ca, p.respChild(t), c.suite, false)
			sa, sb := p.a.Stats(), p.b.Stats()
			t.Logf("a %+v\nb %+v", sa, sb)
			if sa.TxFragments < 2 || sb.TxFragments < 2 || sa.RxReassembled != 1 || sb.RxReassembled != 1 {
				t.Fatal("IKE_AUTH did not go in fragments both ways")
			}
			mu.Lock()
			for _, n := range sizes {
				if n > 400 {
					t.Errorf("a datagram of %d bytes with a fragment size of 400", n)
				}
			}
			mu.Unlock()
			if c.name == "lossy" {
				// Request: every fragment again, the ones b held are
				// duplicates. Response: b's fragments again for a's
				// fragment 1; a's other fragments are ignored.
				if !lost[false] || !lost[true] || sa.TxRetransmits < 2 || sb.RxFragDuplicate == 0 || sb.RxRetransmits == 0 {
					t.Fatal("the losses were not recovered by retransmitting the fragments")
				}
			}
			// Small messages after IKE_AUTH go whole.
			before := p.a.Stats().TxFragments
			if _, err := p.a.Rekey(ctx(t), ca); err != nil {
				t.Fatal(err)
			}
			if s := p.a.Stats(); s.TxFragments != before {
				t.Fatalf("a rekey went in fragments: %+v", s)
			}
		})
	}
}

// TestFragmentBounds feeds the responder fragments of made-up requests
// on an established IKE SA: duplicates, more than maxFragments, fewer
// than before, more plaintext than a message may hold, and an incomplete
// message outliving HalfOpenTimeout are each dropped and counted; a
// complete set is answered. Without fragmentation negotiated, fragments
// are dropped.
func TestFragmentBounds(t *testing.T) {
	for _, negotiated := range []bool{true, false} {
		name := "negotiated"
		if !negotiated {
			name = "off"
		}
		t.Run(name, func(t *testing.T) {
			pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
			clk := newFakeClock()
			p := newPair(t, pa, pb, func(a, b *Config) {
				withClock(clk)(a, b)
				if !negotiated {
					b.FragmentSize = -1
				}
			})
			if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, settled(p))
			sa, _ := only(t, p.a)
			p.a.mu.Lock()
			frag := sa.frag
			id := sa.nextReq
			p.a.mu.Unlock()
			if frag != negotiated {
				t.Fatalf("fragmentation negotiated: %v", frag)
			}
			send := func(number, total int, data []byte) {
				t.Helper()
				p.a.mu.Lock()
				pkt, err := sa.out.sealPlain(sa.header(INFORMATIONAL, id, false), nil, PayloadVendorID, data, uint16(number), uint16(total))
				local, remote := sa.remote, sa.local
				p.a.mu.Unlock()
				if err != nil {
					t.Fatal(err)
				}
				p.b.Receive(local, remote, pkt)
			}
			if !negotiated {
				send(1, 2, make([]byte, 100))
				if s := p.b.Stats(); s.RxFragInvalid != 1 || s.RxFragments != 0 {
					t.Fatalf("stats %+v", s)
				}
				return
			}
			// The made-up request is one VendorID payload of 3 x 100
			// bytes (header included), in three fragments.
			vid, err := appendPayloads(nil, []Payload{&VendorID{Data: bytes.Repeat([]byte{7}, 296)}})
			if err != nil {
				t.Fatal(err)
			}
			send(1, 3, vid[:100])
			send(1, 3, vid[:100])  // duplicate
			send(1, 65, vid[:100]) // beyond maxFragments
			send(2, 2, vid[:100])  // fewer than before
			clk.Advance(31 * time.Second)
			s := p.b.Stats()
			if s.RxFragments != 1 || s.RxFragDuplicate != 1 || s.RxFragInvalid != 2 || s.RxFragTimeout != 1 {
				t.Fatalf("stats %+v", s)
			}
			big := make([]byte, 30000)
			send(1, 3, big)
			send(2, 3, big)
			send(3, 3, big[:10000])
			if s := p.b.Stats(); s.RxFragTooLarge != 1 || s.RxReassembled != 0 {
				t.Fatalf("stats %+v", s)
			}
			// Out of order, and whole: answered (the answer is
			// unexpected at a, which sent nothing).
			send(3, 3, vid[200:])
			send(1, 3, vid[:100])
			send(2, 3, vid[100:200])
			waitFor(t, func() bool { return p.b.Stats().RxReassembled == 1 })
			waitFor(t, func() bool { return p.a.Stats().RxUnexpected == 1 })
		})
	}
}
