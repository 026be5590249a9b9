package vip_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/ha/vip"
	"github.com/sluicegw/sluice/internal/lab"
)

// testTimeout bounds each test; waitTimeout each wait for a condition.
const (
	testTimeout = 60 * time.Second
	waitTimeout = 5 * time.Second
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func haAddr(s string) config.HAAddress {
	p, dev, _ := strings.Cut(s, " dev ")
	return config.HAAddress{Prefix: netip.MustParsePrefix(p), Dev: dev}
}

// addrs returns the addresses of dev in ns, with their flags.
func addrs(t *testing.T, ns *lab.Netns, dev string) map[netip.Prefix]int {
	t.Helper()
	m := map[netip.Prefix]int{}
	err := ns.Do(func() error {
		lk, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		as, err := netlink.AddrList(lk, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, a := range as {
			ip, _ := netip.AddrFromSlice(a.IP)
			ones, _ := a.Mask.Size()
			m[netip.PrefixFrom(ip.Unmap(), ones)] = a.Flags
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// in runs fn in ns, failing the test on its error.
func in(t *testing.T, ns *lab.Netns, what string, fn func() error) {
	t.Helper()
	if err := ns.Do(fn); err != nil {
		t.Fatalf("%s in %s: %v", what, ns, err)
	}
}

// TestAddRemove: Add puts the address on its device, usable at once (an
// IPv6 one not tentative), and a second Add is no error; Remove takes it
// away, and a second Remove, or one on a device that is not there, is no
// error. An address on a device that is not there is refused.
func TestAddRemove(t *testing.T) {
	lab.Require(t)
	ctx := testContext(t)
	l := lab.NewForTest(t, nil)
	a, err := l.NewNetns(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.NewNetns(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Veth(a, "wan0", b, "wan0"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"192.0.2.10/24 dev wan0", "2001:db8::10/64 dev wan0"} {
		v := haAddr(s)
		t.Run(s, func(t *testing.T) {
			for i := range 2 {
				in(t, a, fmt.Sprintf("Add #%d", i+1), func() error { return vip.Add(v) })
				flags, ok := addrs(t, a, "wan0")[v.Prefix]
				if !ok {
					t.Fatalf("after Add #%d: %s not on wan0: %v", i+1, v.Prefix, addrs(t, a, "wan0"))
				}
				if flags&unix.IFA_F_TENTATIVE != 0 {
					t.Errorf("%s is tentative (flags %#x): not usable at once", v.Prefix, flags)
				}
			}
			// Usable at once: a socket binds to it.
			in(t, a, "bind", func() error {
				c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(v.Prefix.Addr(), 0)))
				if err == nil {
					c.Close()
				}
				return err
			})
			for i := range 2 {
				in(t, a, fmt.Sprintf("Remove #%d", i+1), func() error { return vip.Remove(v) })
				if _, ok := addrs(t, a, "wan0")[v.Prefix]; ok {
					t.Fatalf("after Remove #%d: %s still on wan0", i+1, v.Prefix)
				}
			}
		})
	}
	gone := haAddr("192.0.2.10/24 dev nosuch0")
	in(t, a, "Remove on a missing device", func() error { return vip.Remove(gone) })
	err = a.Do(func() error { return vip.Add(gone) })
	if err == nil || !strings.HasPrefix(err.Error(), "vip: ") || !strings.Contains(err.Error(), "nosuch0") {
		t.Errorf("Add on a missing device: %v, want a vip: error naming nosuch0", err)
	}
}

// TestRemoveKeepsOtherGroup: two groups' IPv4 addresses in one subnet on
// one device, with no other address there (active/active: the first is
// the kernel's primary address, the second its secondary). Removing the
// first must not take the second with it, as Linux does by default with
// the secondaries of a primary address that goes.
func TestRemoveKeepsOtherGroup(t *testing.T) {
	lab.Require(t)
	ctx := testContext(t)
	l := lab.NewForTest(t, nil)
	a, err := l.NewNetns(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.NewNetns(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Veth(a, "wan0", b, "wan0"); err != nil {
		t.Fatal(err)
	}
	g1, g2 := haAddr("192.0.2.10/24 dev wan0"), haAddr("192.0.2.11/24 dev wan0")
	in(t, a, "Add g1", func() error { return vip.Add(g1) })
	in(t, a, "Add g2", func() error { return vip.Add(g2) })
	in(t, a, "Remove g1", func() error { return vip.Remove(g1) })
	got := addrs(t, a, "wan0")
	if _, ok := got[g2.Prefix]; !ok {
		t.Errorf("removing %s took %s with it: %v", g1.Prefix, g2.Prefix, got)
	}
	if _, ok := got[g1.Prefix]; ok {
		t.Errorf("%s still there", g1.Prefix)
	}
}

// pair is two gateways, a and b, and a router, c, on one Ethernet
// segment: a bridge in c with a veth to each gateway's wan0.
type pair struct {
	a, b, c    *lab.Netns
	macA, macB net.HardwareAddr
}

func newPair(t *testing.T, ctx context.Context) *pair {
	t.Helper()
	l := lab.NewForTest(t, nil)
	p := &pair{}
	for _, ns := range []struct {
		n   **lab.Netns
		sfx string
	}{{&p.a, "a"}, {&p.b, "b"}, {&p.c, "c"}} {
		var err error
		if *ns.n, err = l.NewNetns(ctx, ns.sfx); err != nil {
			t.Fatal(err)
		}
	}
	// No multicast snooping: the bridge floods ff02::1 to every port and
	// delivers it to c itself, as an unmanaged switch does.
	if _, err := p.c.Exec(ctx, "ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"); err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		ns   *lab.Netns
		port string
	}{{p.a, "pa"}, {p.b, "pb"}} {
		if err := l.Veth(g.ns, "wan0", p.c, g.port); err != nil {
			t.Fatal(err)
		}
		if _, err := p.c.Exec(ctx, "ip", "link", "set", g.port, "master", "br0"); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.c.LinkUp("br0"); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		ns  *lab.Netns
		dev string
		v4  string
		v6  string
	}{{p.a, "wan0", "192.0.2.1/24", "2001:db8::1/64"}, {p.b, "wan0", "192.0.2.2/24", "2001:db8::2/64"}, {p.c, "br0", "192.0.2.3/24", "2001:db8::3/64"}} {
		for _, s := range []string{x.v4, x.v6} {
			if err := x.ns.AddAddr(x.dev, netip.MustParsePrefix(s)); err != nil {
				t.Fatal(err)
			}
		}
	}
	p.macA, p.macB = mac(t, p.a, "wan0"), mac(t, p.b, "wan0")
	return p
}

func mac(t *testing.T, ns *lab.Netns, dev string) net.HardwareAddr {
	t.Helper()
	var hw net.HardwareAddr
	in(t, ns, "link "+dev, func() error {
		lk, err := netlink.LinkByName(dev)
		if err == nil {
			hw = lk.Attrs().HardwareAddr
		}
		return err
	})
	return hw
}

// neighbour returns c's neighbour entry for ip on br0: its link-layer
// address, and its state.
func (p *pair) neighbour(ip netip.Addr) (net.HardwareAddr, int, error) {
	var hw net.HardwareAddr
	state := 0
	err := p.c.Do(func() error {
		lk, err := netlink.LinkByName("br0")
		if err != nil {
			return err
		}
		family := netlink.FAMILY_V4
		if ip.Is6() {
			family = netlink.FAMILY_V6
		}
		ns, err := netlink.NeighList(lk.Attrs().Index, family)
		if err != nil {
			return err
		}
		for _, n := range ns {
			if a, _ := netip.AddrFromSlice(n.IP); a.Unmap() == ip {
				hw, state = n.HardwareAddr, n.State
				return nil
			}
		}
		return fmt.Errorf("no neighbour entry for %s", ip)
	})
	return hw, state, err
}

// waitNeighbour waits until c's entry for ip has the link-layer address
// want (owner names it).
func (p *pair) waitNeighbour(t *testing.T, ctx context.Context, ip netip.Addr, want net.HardwareAddr, owner string) {
	t.Helper()
	err := lab.WaitFor(ctx, fmt.Sprintf("c's neighbour %s at %s's %s", ip, owner, want), waitTimeout, 0, func() (bool, error) {
		hw, state, err := p.neighbour(ip)
		if err != nil {
			return false, err
		}
		if !bytes.Equal(hw, want) {
			return false, fmt.Errorf("%s (state %#x)", hw, state)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTakeover moves a virtual address from gateway a to gateway b as a
// takeover does: c, a router on their segment, reaches it at a (its
// neighbour entry holds a's MAC); a lets the address go, b adds it and
// announces it, and c's entry holds b's MAC at once, without c sending
// anything and without the entry ageing (a gratuitous ARP for IPv4, an
// unsolicited neighbour advertisement with the override flag for IPv6).
// Then c reaches the address at b.
func TestTakeover(t *testing.T) {
	lab.Require(t)
	for _, s := range []string{"192.0.2.10/24 dev wan0", "2001:db8::10/64 dev wan0"} {
		v := haAddr(s)
		t.Run(s, func(t *testing.T) {
			ctx := testContext(t)
			p := newPair(t, ctx)
			ip := v.Prefix.Addr().String()
			in(t, p.a, "Add", func() error { return vip.Add(v) })
			in(t, p.a, "Announce", func() error { return vip.Announce(v) })
			if _, err := p.c.Exec(ctx, "ping", "-n", "-c", "1", "-W", "5", ip); err != nil {
				t.Fatal(err)
			}
			p.waitNeighbour(t, ctx, v.Prefix.Addr(), p.macA, "a")

			in(t, p.a, "Remove", func() error { return vip.Remove(v) })
			in(t, p.b, "Add", func() error { return vip.Add(v) })
			in(t, p.b, "Announce", func() error { return vip.Announce(v) })
			p.waitNeighbour(t, ctx, v.Prefix.Addr(), p.macB, "b")

			// The address answers at b.
			if _, err := p.c.Exec(ctx, "ping", "-n", "-c", "1", "-W", "5", ip); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAnnounceErrors: Announce on a device that is not there is an error
// that names it; on a device without neighbours to tell (loopback here, a
// TUN device in a gateway) it sends nothing and is no error.
func TestAnnounceErrors(t *testing.T) {
	lab.Require(t)
	ctx := testContext(t)
	l := lab.NewForTest(t, nil)
	a, err := l.NewNetns(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	err = a.Do(func() error { return vip.Announce(haAddr("192.0.2.10/24 dev nosuch0")) })
	if err == nil || !strings.HasPrefix(err.Error(), "vip: ") || !strings.Contains(err.Error(), "nosuch0") {
		t.Errorf("Announce on a missing device: %v, want a vip: error naming nosuch0", err)
	}
	// lo has no link-layer address: nothing to announce.
	for _, s := range []string{"198.51.100.10/32 dev lo", "2001:db8::10/128 dev lo"} {
		v := haAddr(s)
		in(t, a, "Add "+s, func() error { return vip.Add(v) })
		in(t, a, "Announce "+s, func() error { return vip.Announce(v) })
	}
}
