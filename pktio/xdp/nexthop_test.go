package xdp

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"
)

// The resolver's destinations are bounded, and the bound does not stay
// full of destinations nobody sends to any more (peers that left or
// moved): those idle for idleAfter make room for a new one, while one
// that Write keeps using stays.
func TestResolverForgetsIdle(t *testing.T) {
	r := newResolver(nil, 0, slog.New(slog.DiscardHandler))
	clock := time.Unix(1e9, 0)
	r.now = func() time.Time { return clock }
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	for i := range maxDests {
		r.want(addr(i))
	}
	if len(r.wanted) != maxDests {
		t.Fatalf("%d destinations followed, want %d", len(r.wanted), maxDests)
	}
	for step := time.Duration(0); step <= idleAfter; step += idleAfter / 4 {
		r.wanted[addr(7)].used.Store(true) // Write sent to it
		clock = clock.Add(idleAfter / 4)
		r.forget(clock) // as each refresh round does first
	}
	clock = clock.Add(time.Second)
	fresh := netip.MustParseAddr("198.51.100.7")
	r.want(fresh)
	if _, ok := r.wanted[fresh]; !ok {
		t.Fatalf("a new destination is not followed after %d others were idle for %v", maxDests, idleAfter)
	}
	if _, ok := r.wanted[addr(7)]; !ok {
		t.Errorf("the destination Write kept using was forgotten")
	}
	if len(r.wanted) != 2 {
		t.Errorf("%d destinations followed, want 2", len(r.wanted))
	}
}
