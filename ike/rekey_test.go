package ike

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// TestRekey rekeys the Child SA from either side, with and without PFS
// (and an INVALID_KE round for the Child SA's group), and checks that the
// new SA replaces the old one on both sides.
func TestRekey(t *testing.T) {
	cases := []struct {
		name, espA, espB string
		byResponder      bool
	}{
		{"initiator", "aes128gcm16", "aes128gcm16", false},
		{"responder", "aes256-sha256", "aes256-sha256", true},
		{"pfs", "aes128gcm16-ecp256", "aes128gcm16-ecp256", false},
		{"pfs-invalid-ke", "aes128gcm16-x25519-ecp256", "aes128gcm16-ecp256", false},
		{"pfs-responder", "aes128gcm16-modp2048", "aes128gcm16-modp2048", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pa, pb := peers(t, "aes128-sha256-x25519", c.espA, "aes128-sha256-x25519", c.espB)
			p := newPair(t, pa, pb, nil)
			oldA, err := p.a.Initiate(ctx(t), "to-b")
			if err != nil {
				t.Fatal(err)
			}
			oldB := p.respChild(t)
			suite := oldA.Suite
			var newA, newB *ChildSA
			for round := 0; round < 2; round++ {
				if c.byResponder {
					if newB, err = p.b.Rekey(ctx(t), oldB); err != nil {
						t.Fatal(err)
					}
					waitFor(t, func() bool { p.a.mu.Lock(); defer p.a.mu.Unlock(); return len(p.a.sas[oldA.IKESPIi].children) == 1 })
					p.a.mu.Lock()
					newA = p.a.sas[oldA.IKESPIi].children[0]
					p.a.mu.Unlock()
				} else {
					if newA, err = p.a.Rekey(ctx(t), oldA); err != nil {
						t.Fatal(err)
					}
					waitFor(t, func() bool {
						p.bChildMu.Lock()
						defer p.bChildMu.Unlock()
						return len(p.bDeleted) == round+1
					})
					newB = p.respChild(t)
				}
				if newA.InSPI != newB.OutSPI || newA.OutSPI != newB.InSPI || !bytes.Equal(newA.OutKey, newB.InKey) ||
					!bytes.Equal(newA.InKey, newB.OutKey) || !bytes.Equal(newA.OutAuthKey, newB.InAuthKey) {
					t.Fatal("the new Child SA does not mirror")
				}
				if newA.InSPI == oldA.InSPI || bytes.Equal(newA.OutKey, oldA.OutKey) || newA.Suite != suite {
					t.Fatal("the new Child SA repeats the old one")
				}
				p.bChildMu.Lock()
				last := p.bDeleted[len(p.bDeleted)-1]
				p.bChildMu.Unlock()
				if last.InSPI != oldB.InSPI {
					t.Fatalf("responder deleted %08x, not the old %08x", last.InSPI, oldB.InSPI)
				}
				for _, e := range []*Endpoint{p.a, p.b} {
					e.mu.Lock()
					for _, sa := range e.sas {
						if len(sa.children) != 1 {
							t.Errorf("%d Child SAs after the rekey", len(sa.children))
						}
					}
					e.mu.Unlock()
				}
				oldA, oldB = newA, newB
			}
			if sa, sb := p.a.Stats(), p.b.Stats(); sa.ChildSARekeyed != 2 || sb.ChildSARekeyed != 2 || sa.RxIntegrityFailed+sb.RxIntegrityFailed+sa.RxOutOfWindow+sb.RxOutOfWindow != 0 {
				t.Fatalf("stats %+v %+v", sa, sb)
			}
			// Each rekey is one exchange, initiated by one side and
			// answered by the other.
			if sa, sb := p.a.Stats(), p.b.Stats(); sa.CreateChildSAInitiated+sb.CreateChildSAInitiated < 2 ||
				sa.CreateChildSAInitiated != sb.CreateChildSAAnswered || sb.CreateChildSAInitiated != sa.CreateChildSAAnswered {
				t.Fatalf("CREATE_CHILD_SA exchanges: initiator %+v responder %+v", sa, sb)
			}
			if c.name == "pfs-invalid-ke" && p.a.Stats().InvalidKE != 2 {
				t.Fatalf("no INVALID_KE round: %+v", p.a.Stats())
			}
			// The IKE SA still works: delete it.
			if err := p.a.Delete(ctx(t), oldA); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRekeyRefused(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16-ecp256", "aes128-sha256-x25519", "aes128gcm16-x25519")
	p := newPair(t, pa, pb, nil)
	old, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	// B has no group in common with A's PFS proposal.
	if _, err := p.a.Rekey(ctx(t), old); err == nil {
		t.Fatal("rekeyed without a common PFS group")
	}
	// The old Child SA and the IKE SA are still there.
	if err := p.a.Delete(ctx(t), old); err != nil {
		t.Fatal(err)
	}
	if _, err := p.a.Rekey(ctx(t), old); err == nil {
		t.Fatal("rekeyed a deleted Child SA")
	}
}

// TestRekeyInstallsFirst: OnChildSA reports a rekey's new Child SA
// before the peer can use it: the responder's CREATE_CHILD_SA answer, and
// the requester's Delete of the old Child SA (with no hold), go to the
// Transport only after OnChildSA returned. The responder's new Child SA
// says HoldOutbound, the requester's does not.
func TestRekeyInstallsFirst(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	var (
		mu              sync.Mutex
		answers, delets int // CREATE_CHILD_SA answers by b, INFORMATIONAL requests by a
		seen            []string
	)
	report := func(who string) func(*ChildSA) {
		return func(c *ChildSA) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, fmt.Sprintf("%s %08x hold=%v answers=%d deletes=%d", who, c.InSPI, c.HoldOutbound, answers, delets))
		}
	}
	var p *pair
	p = newPair(t, pa, pb, func(a, b *Config) {
		a.RekeyDeleteDelay = -1
		a.OnChildSA = report("a")
		onB := b.OnChildSA
		b.OnChildSA = func(c *ChildSA) { report("b")(c); onB(c) }
	})
	p.net.mu.Lock()
	p.net.drop = func(_ int, from, _ netip.AddrPort, pkt []byte) bool {
		h, err := ParseHeader(pkt)
		if err != nil {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case from.Addr() == addrB && h.Exchange == CREATE_CHILD_SA && h.IsResponse():
			answers++
		case from.Addr() == addrA && h.Exchange == INFORMATIONAL && !h.IsResponse():
			delets++
		}
		return false
	}
	p.net.mu.Unlock()
	old, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	p.respChild(t)
	fresh, err := p.a.Rekey(ctx(t), old)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		// IKE_AUTH's answer, too, leaves after the responder's install.
		fmt.Sprintf("b %08x hold=false answers=0 deletes=0", old.OutSPI),
		fmt.Sprintf("a %08x hold=false answers=0 deletes=0", old.InSPI),
		fmt.Sprintf("b %08x hold=true answers=0 deletes=0", fresh.OutSPI),
		fmt.Sprintf("a %08x hold=false answers=1 deletes=0", fresh.InSPI),
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("OnChildSA saw\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}
