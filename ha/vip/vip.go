// Package vip moves the virtual addresses of a high-availability group
// (config.HAGroup) between the members of a pair of gateways: Add puts an
// address on its device, Remove takes it away, Announce tells the
// neighbours on the device's link that the address is now at this
// member's link-layer address, and RunHook runs the operator's hook for
// what the link cannot carry (BGP, cloud routes).
//
// A takeover is Add, then Announce (a caller may repeat Announce, as
// keepalived repeats its gratuitous ARPs, for neighbours that miss the
// first); a release is Remove. Every function acts in the network
// namespace of the calling thread, and is safe for concurrent use.
package vip

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/pktio/netutil"
)

// localTimeout bounds how long Add waits for an address to become local
// (its route in the local table), which the kernel does asynchronously
// for IPv6.
const localTimeout = 2 * time.Second

// Add puts the address a on its device, usable at once: an IPv6 address
// skips duplicate address detection (IFA_F_NODAD), as the other member
// gave it up, and Add returns once the kernel takes it as local. An
// address that is there already is no error. For an IPv4 address Add also
// turns on the device's promote_secondaries, so that removing one group's
// address never takes another group's in the same subnet with it (Linux
// deletes the secondary addresses of a primary address that goes unless
// they are promoted); where it cannot be set, Add fails only if another
// address shares the subnet.
func Add(a config.HAAddress) error {
	lk, err := netlink.LinkByName(a.Dev)
	if err != nil {
		return fmt.Errorf("vip: add %s: %w", a, err)
	}
	if a.Prefix.Addr().Is4() {
		if err := promoteSecondaries(lk, a); err != nil {
			return fmt.Errorf("vip: add %s: %w", a, err)
		}
	}
	na := &netlink.Addr{IPNet: ipNet(a.Prefix)}
	if a.Prefix.Addr().Is6() {
		na.Flags = unix.IFA_F_NODAD
	}
	// Replace creates the address, or refreshes it when it is there.
	if err := netlink.AddrReplace(lk, na); err != nil {
		return fmt.Errorf("vip: add %s: %w", a, err)
	}
	if err := netutil.WaitLocal(a.Prefix.Addr(), localTimeout); err != nil {
		return fmt.Errorf("vip: add %s: %w", a, err)
	}
	return nil
}

// Remove takes the address a off its device. An address that is not
// there, or a device that is not, is no error.
func Remove(a config.HAAddress) error {
	lk, err := netlink.LinkByName(a.Dev)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("vip: remove %s: %w", a, err)
	}
	err = netlink.AddrDel(lk, &netlink.Addr{IPNet: ipNet(a.Prefix)})
	if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("vip: remove %s: %w", a, err)
	}
	return nil
}

// promoteSecondaries sets net.ipv4.conf.DEV.promote_secondaries. Where
// it cannot (a read-only /proc/sys), that is an error only if the device
// has another address in a's subnet, the only case in which it matters.
func promoteSecondaries(lk netlink.Link, a config.HAAddress) error {
	p := "/proc/sys/net/ipv4/conf/" + a.Dev + "/promote_secondaries"
	if b, err := os.ReadFile(p); err == nil && len(b) > 0 && b[0] == '1' {
		return nil
	}
	werr := os.WriteFile(p, []byte("1\n"), 0o644)
	if werr == nil {
		return nil
	}
	as, err := netlink.AddrList(lk, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, x := range as {
		ip, _ := netip.AddrFromSlice(x.IP)
		ones, _ := x.Mask.Size()
		if ip = ip.Unmap(); ip != a.Prefix.Addr() && ones == a.Prefix.Bits() && a.Prefix.Masked().Contains(ip) {
			return fmt.Errorf("%s shares its subnet, and net.ipv4.conf.%s.promote_secondaries, which keeps one when the other goes, cannot be set: %w",
				ip, a.Dev, werr)
		}
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
