// Package netutil configures network interfaces over netlink (for the TUN
// devices of package tun): bring a link up, set its MTU, add addresses and
// routes. It acts in the network namespace of the calling thread.
package netutil

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Up brings the interface up.
func Up(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netutil: %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("netutil: %s up: %w", name, err)
	}
	return nil
}

// SetMTU sets the interface's MTU.
func SetMTU(name string, mtu int) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netutil: %s: %w", name, err)
	}
	if err := netlink.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("netutil: %s mtu %d: %w", name, mtu, err)
	}
	return nil
}

// AddAddr adds the address prefix (for example 10.0.0.1/24) to the
// interface. IPv6 addresses skip duplicate address detection, so they are
// usable at once.
func AddAddr(name string, prefix netip.Prefix) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netutil: %s: %w", name, err)
	}
	a := &netlink.Addr{IPNet: ipNet(prefix)}
	if prefix.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := netlink.AddrAdd(l, a); err != nil {
		return fmt.Errorf("netutil: %s add %s: %w", name, prefix, err)
	}
	return nil
}

// DelAddr removes the address prefix from the interface; an address that
// is not there is not an error.
func DelAddr(name string, prefix netip.Prefix) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netutil: %s: %w", name, err)
	}
	if err := netlink.AddrDel(l, &netlink.Addr{IPNet: ipNet(prefix)}); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("netutil: %s delete %s: %w", name, prefix, err)
	}
	return nil
}

// AddRoute routes dst through the interface (a device route: no gateway).
func AddRoute(name string, dst netip.Prefix) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netutil: %s: %w", name, err)
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(dst.Masked()), Scope: netlink.SCOPE_LINK}
	if err := netlink.RouteAdd(r); err != nil {
		return fmt.Errorf("netutil: route %s dev %s: %w", dst, name, err)
	}
	return nil
}

// ReplaceRoute routes dst into the interface, replacing a route to dst
// that is there already (so that it may be called again for the same
// prefix).
func ReplaceRoute(name string, dst netip.Prefix) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netutil: %s: %w", name, err)
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(dst.Masked()), Scope: netlink.SCOPE_LINK}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("netutil: route %s dev %s: %w", dst, name, err)
	}
	return nil
}

// ReplaceRouteFrom is ReplaceRoute with a preferred source address: what
// the host sends to dst leaves from src (a local address) unless the
// sender chose another. The zero src replaces the route with one
// without a source.
func ReplaceRouteFrom(name string, dst netip.Prefix, src netip.Addr) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netutil: %s: %w", name, err)
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(dst.Masked()), Scope: netlink.SCOPE_LINK}
	if src.IsValid() {
		r.Src = src.AsSlice()
	}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("netutil: route %s dev %s src %v: %w", dst, name, src, err)
	}
	return nil
}

// DelRoute removes the route of dst into the interface; a route that is
// not there is not an error.
func DelRoute(name string, dst netip.Prefix) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netutil: %s: %w", name, err)
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(dst.Masked()), Scope: netlink.SCOPE_LINK}
	if err := netlink.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("netutil: delete route %s dev %s: %w", dst, name, err)
	}
	return nil
}

// Configure brings the interface up with the given addresses and routes,
// and returns once the addresses are usable (WaitLocal).
func Configure(name string, addrs, routes []netip.Prefix) error {
	for _, a := range addrs {
		if err := AddAddr(name, a); err != nil {
			return err
		}
	}
	if err := Up(name); err != nil {
		return err
	}
	for _, r := range routes {
		if err := AddRoute(name, r); err != nil {
			return err
		}
	}
	for _, a := range addrs {
		if err := WaitLocal(a.Addr(), localTimeout); err != nil {
			return err
		}
	}
	return nil
}

const localTimeout = 5 * time.Second

// WaitLocal waits until addr is a local address of the host: until the
// kernel has installed its route in the local table. An IPv6 address
// becomes local asynchronously after it is added and its link is up (the
// kernel's DAD work installs the route, even with IFA_F_NODAD); until then
// packets to it are dropped (Ip6InAddrErrors). It polls every millisecond
// and gives up after timeout.
func WaitLocal(addr netip.Addr, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		routes, err := netlink.RouteGet(addr.AsSlice())
		if err == nil && len(routes) > 0 && routes[0].Type == unix.RTN_LOCAL {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("not local after %v", timeout)
			}
			return fmt.Errorf("netutil: %s: %w", addr, err)
		}
		time.Sleep(time.Millisecond)
	}
}

func ipNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}
}
