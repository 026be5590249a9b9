package ike

import (
	"encoding/binary"
	"net/netip"
	"runtime"
	"testing"
)

// TestHalfOpenFlood floods the responder with IKE_SA_INIT requests from
// many addresses and SPIs (section 2.6): it keeps no more half-open SAs
// than its cookie threshold, its memory stays bounded, and a legitimate
// initiator still gets through by returning the cookie.
func TestHalfOpenFlood(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, func(a, b *Config) { b.MaxHalfOpen, b.CookieThreshold = 64, 8 })
	// One request, replayed from many sources with fresh SPIs: the cost
	// is the responder's, not the flooder's.
	req := initRequest(t, 1, DHCurve25519, pb.IKE)
	local := netip.AddrPortFrom(addrB, 500)
	const n = 20000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint64(req[0:8], uint64(i+1))
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}), 500)
		p.b.Receive(local, src, req)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	p.b.mu.Lock()
	halfOpen, sas := len(p.b.halfOpen), len(p.b.sas)
	p.b.mu.Unlock()
	s := p.b.Stats()
	if halfOpen != 8 || sas != 8 || s.CookiesSent != n-8 {
		t.Fatalf("half-open %d, SAs %d, stats %+v", halfOpen, sas, s)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
		t.Fatalf("the heap grew by %d bytes under the flood", grew)
	}
	// A real initiator is asked for a cookie, returns it, and gets its SA.
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	checkMirror(t, ca, p.respChild(t), "aes128gcm16", false)
	if s := p.b.Stats(); s.CookiesSent != n-8+1 || s.RxBadCookie != 0 {
		t.Fatalf("stats %+v", s)
	}
}
