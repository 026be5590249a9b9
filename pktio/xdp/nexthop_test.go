package xdp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/internal/lab"
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

// A destination routed out of another interface (or not routed at all) is
// the kernel's until the next refresh: Write's lookups of it neither ask
// again nor, therefore, make the resolver run a round (every route and
// the neighbour table again) every askGap for as long as packets go
// there.
func TestResolverOtherInterface(t *testing.T) {
	lab.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	l := lab.NewForTest(t, nil)
	gw, err := l.NewNetns(ctx, "gw")
	if err != nil {
		t.Fatal(err)
	}
	peer, err := l.NewNetns(ctx, "peer")
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"192.0.2.1/24", "198.51.100.1/24"} {
		name := fmt.Sprintf("x%d", i)
		if err := l.Veth(gw, name, peer, name); err != nil {
			t.Fatal(err)
		}
		if err := gw.AddAddr(name, netip.MustParsePrefix(p)); err != nil {
			t.Fatal(err)
		}
	}
	var r *resolver
	err = gw.Do(func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		lk, err := h.LinkByName("x0")
		if err != nil {
			h.Close()
			return err
		}
		r = newResolver(h, lk.Attrs().Index, slog.New(slog.DiscardHandler))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	for _, dst := range []netip.Addr{netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("203.0.113.9")} {
		r.want(dst)
		r.refresh()
		if _, ok := r.lookup(dst); ok {
			t.Fatalf("%v: resolved on x0", dst)
		}
		if n := len(r.ask); n != 0 {
			t.Errorf("%v (out of x1, or unroutable): the lookup after a refresh asked again (%d queued)", dst, n)
			<-r.ask
		}
	}
}
