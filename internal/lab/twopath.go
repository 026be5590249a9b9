package lab

// The topology of the MOBIKE tests (RFC 4555): a road warrior with two
// paths to a gateway, each its own veth pair with an address of its own,
// that can lose either.
//
//	road warrior (Host)                          gateway (Gateway)
//	path0 192.0.2.10/24    ==== veth ====   path0 192.0.2.1/24
//	path1 198.51.100.10/24 ==== veth ====   path1 198.51.100.1/24
//	                                        lo    203.0.113.1/32 (GatewayAddr)
//
// The gateway's one address, on its loopback, is reachable over either
// path: the host routes it through path 0 (metric 100) and, behind that,
// through path 1 (metric 200). Taking path 0 down (Down) removes its
// address and its route from the host, so that the host's source
// address for the gateway becomes the one of path 1, as a laptop's does
// when it leaves a Wi-Fi network for a mobile one; a MOBIKE client
// (charon's kernel-netlink sees the change) then moves its IKE SA with
// UPDATE_SA_ADDRESSES. Up restores a path as a backup (metric 300): the
// host keeps the path it uses until that one goes down too, so that a
// client moves when a test takes a path away, not when one comes back.
// The gateway answers each path on its connected route. IPv4 only.

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// The addresses of a TwoPath.
var (
	twoPathHost   = [2]netip.Prefix{netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("198.51.100.10/24")}
	twoPathRouter = [2]netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("198.51.100.1/24")}
	twoPathGW     = netip.MustParsePrefix("203.0.113.1/32")
)

// TwoPathIf names the interfaces of path i on both sides.
func TwoPathIf(i int) string { return fmt.Sprintf("path%d", i) }

// TwoPath is a host with two paths to a gateway (see above).
type TwoPath struct {
	Host, Gateway *Netns
}

// NewTwoPath creates the namespaces "host" and "gw" of the lab and the two
// paths between them, both up.
func (l *Lab) NewTwoPath(ctx context.Context) (*TwoPath, error) {
	host, err := l.NewNetns(ctx, "host")
	if err != nil {
		return nil, err
	}
	gw, err := l.NewNetns(ctx, "gw")
	if err != nil {
		return nil, err
	}
	tp := &TwoPath{Host: host, Gateway: gw}
	for i := range 2 {
		if err := l.Veth(host, TwoPathIf(i), gw, TwoPathIf(i)); err != nil {
			return nil, err
		}
		if err := gw.AddAddr(TwoPathIf(i), twoPathRouter[i]); err != nil {
			return nil, err
		}
		if err := tp.up(i, 100*(i+1)); err != nil {
			return nil, err
		}
	}
	if err := gw.AddAddr("lo", twoPathGW); err != nil {
		return nil, err
	}
	return tp, nil
}

// GatewayAddr is the gateway's address, the same over both paths.
func (tp *TwoPath) GatewayAddr() netip.Addr { return twoPathGW.Addr() }

// HostAddr is the host's address on path i.
func (tp *TwoPath) HostAddr(i int) netip.Addr { return twoPathHost[i].Addr() }

// Up brings path i of the host back after a Down: its link, its address
// and its route to the gateway, behind the routes of the paths that are
// up (metric 300 + i: two paths brought back in turn have routes of
// different metrics, which the kernel needs for one destination).
func (tp *TwoPath) Up(i int) error { return tp.up(i, 300+i) }

// up brings path i up with a route of metric prio.
func (tp *TwoPath) up(i, prio int) error {
	ifname := TwoPathIf(i)
	if err := tp.Host.LinkUp(ifname); err != nil {
		return err
	}
	if err := tp.Host.AddAddr(ifname, twoPathHost[i]); err != nil {
		return err
	}
	lk, err := tp.Host.link(ifname)
	if err != nil {
		return err
	}
	r := &netlink.Route{LinkIndex: lk.Attrs().Index, Dst: ipNet(twoPathGW), Gw: twoPathRouter[i].Addr().AsSlice(),
		Priority: prio}
	if err := tp.Host.nl.RouteAdd(r); err != nil {
		return fmt.Errorf("lab: route %s via %s in %s: %w", twoPathGW, twoPathRouter[i].Addr(), tp.Host, err)
	}
	return nil
}

// Down takes path i of the host away: its address (with it, its routes)
// and its link, as a network the host leaves. What was on the way over it
// is lost.
func (tp *TwoPath) Down(i int) error {
	ifname := TwoPathIf(i)
	lk, err := tp.Host.link(ifname)
	if err != nil {
		return err
	}
	if err := tp.Host.nl.AddrDel(lk, &netlink.Addr{IPNet: ipNet(twoPathHost[i])}); err != nil {
		return fmt.Errorf("lab: delete %s from %s in %s: %w", twoPathHost[i], ifname, tp.Host, err)
	}
	if err := tp.Host.nl.LinkSetDown(lk); err != nil {
		return fmt.Errorf("lab: %s down in %s: %w", ifname, tp.Host, err)
	}
	return nil
}
