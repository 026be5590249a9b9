package ike_test

import (
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/internal/lab"
)

// TestStrongSwanFailover: sluice's Endpoint establishes an IKE SA with
// charon and reports its snapshots (Config.OnSnapshot); it then dies
// (Close: nothing is sent) and a new Endpoint on the same address adopts
// the last snapshot. charon keeps its IKE SA (same SPIs, same unique ID:
// no new negotiation), a Child SA rekey by the adopter and an IKE SA
// rekey by charon (swanctl --rekey --ike) succeed on it.
func TestStrongSwanFailover(t *testing.T) {
	lab.RequireCharon(t)
	var mu sync.Mutex
	var last []byte
	b := newBed(t, "aes256gcm16-prfsha384-ecp384", "aes128gcm16", nil, func(_ *ike.Peer, c *ike.Config) {
		c.OnSnapshot = func(s ike.Snapshot, gone bool) {
			mu.Lock()
			defer mu.Unlock()
			if gone {
				last = nil
			} else {
				last = s.Data
			}
		}
	})
	child, err := b.ep.Initiate(b.ctx, "strongswan")
	if err != nil {
		t.Fatal(err)
	}
	// One exchange past IKE_AUTH, so that the message IDs moved on.
	child, err = b.ep.Rekey(b.ctx, child)
	if err != nil {
		t.Fatal(err)
	}
	before := b.oneIKESA(t)
	b.charonHasIKESA(t, before)
	id := charonIKEID(t, b)
	inits := initCount(t, b)

	// The owner dies; another Endpoint takes its address and the IKE SA.
	b.ep.Close()
	b.tr.Close()
	var conns []*net.UDPConn
	for _, port := range []uint16{500, 4500} {
		uc, err := b.slNS.ListenUDP(netip.AddrPortFrom(slWAN.Addr(), port))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, uc)
	}
	tr, err := ike.NewUDPTransport(conns...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	cfg := b.cfg
	cfg.OnSnapshot = nil
	ep, err := ike.NewEndpoint(cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	tr.Serve(ep)
	mu.Lock()
	snap := last
	mu.Unlock()
	est0, _ := b.counts()
	if err := ep.Adopt(snap); err != nil {
		t.Fatal(err)
	}
	b.ep = ep
	adopted := b.waitChild(t, est0+1, "the adopter to report the Child SA")
	if adopted.InSPI != child.InSPI || adopted.OutSPI != child.OutSPI {
		t.Fatalf("adopted Child SA %08x/%08x, was %08x/%08x", adopted.InSPI, adopted.OutSPI, child.InSPI, child.OutSPI)
	}
	if got := b.oneIKESA(t); got.SPIi != before.SPIi || got.SPIr != before.SPIr {
		t.Fatalf("adopted IKE SA %+v, was %+v", got, before)
	}

	// The adopter rekeys the Child SA: charon takes the next message ID.
	fresh, err := ep.Rekey(b.ctx, adopted)
	if err != nil {
		t.Fatal(err)
	}
	checkKeys(t, fresh, charonChild(t, b.ctx, b.c.Log(), fresh), true, "aes128gcm16")
	b.charonHasIKESA(t, before)
	if got := charonIKEID(t, b); got != id {
		t.Fatalf("charon's IKE SA is #%s now, was #%s: a new negotiation", got, id)
	}

	// charon rekeys the IKE SA: its requests' message IDs continue too.
	if out, err := b.c.Swanctl(b.ctx, "--rekey", "--ike", "interop"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	err = lab.WaitFor(b.ctx, "the IKE SA to be replaced", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
		l := ep.IKESAs()
		return len(l) == 1 && l[0].SPIi != before.SPIi && l[0].State == "established", nil
	})
	if err != nil {
		t.Fatalf("%v: %+v", err, ep.IKESAs())
	}
	after := b.oneIKESA(t)
	b.charonHasIKESA(t, after)
	s := ep.Stats()
	t.Logf("adopter's stats: %+v", s)
	if s.Adopted != 1 || s.IKESARekeyed != 1 || s.IKESAInitInitiated+s.IKESAInitAnswered+s.IKEAuthInitiated+s.IKEAuthAnswered != 0 ||
		s.RxMalformed+s.RxIntegrityFailed+s.RxUnknownSPI+s.RxOutOfWindow != 0 {
		t.Errorf("stats %+v", s)
	}
	if n := initCount(t, b); n != inits {
		t.Errorf("charon's log names IKE_SA_INIT %d times, %d before the failover", n, inits)
	}
}

// initCount counts the lines of charon's log that name IKE_SA_INIT.
func initCount(t *testing.T, b *bed) int {
	t.Helper()
	log, err := os.ReadFile(b.c.Log())
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(log), "IKE_SA_INIT")
}

var ikeIDRe = regexp.MustCompile(`interop: #(\d+)`)

// charonIKEID returns the unique ID of charon's one IKE SA.
func charonIKEID(t *testing.T, b *bed) string {
	t.Helper()
	out, err := b.c.Swanctl(b.ctx, "--list-sas")
	if err != nil {
		t.Fatal(err)
	}
	m := ikeIDRe.FindAllStringSubmatch(out, -1)
	if len(m) != 1 {
		t.Fatalf("charon lists %d IKE SAs:\n%s", len(m), out)
	}
	return m[0][1]
}
