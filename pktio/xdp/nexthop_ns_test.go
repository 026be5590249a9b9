package xdp_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/internal/lab"
	"github.com/sluicegw/sluice/pktio/xdp"
)

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
	var r *xdp.Resolver
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
		r = xdp.NewResolver(h, lk.Attrs().Index)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	for _, dst := range []netip.Addr{netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("203.0.113.9")} {
		r.Want(dst)
		r.Refresh()
		if _, ok := r.Lookup(dst); ok {
			t.Fatalf("%v: resolved on x0", dst)
		}
		if n := r.Asked(); n != 0 {
			t.Errorf("%v (out of x1, or unroutable): the lookup after a refresh asked again (%d queued)", dst, n)
		}
	}
}
