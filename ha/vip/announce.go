package vip

// announce.go tells the neighbours on a link that an address moved to
// this member's link-layer address, without waiting for their entries to
// age: a gratuitous ARP for IPv4 (RFC 5227 section 3, RFC 826), an
// unsolicited neighbour advertisement for IPv6 (RFC 4861 section 7.2.6).

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/config"
)

// Announce sends, once, the announcement of the address a on its device
// with the device's link-layer address: for IPv4 a gratuitous ARP in both
// forms (a request, and a reply whose target hardware address is ours too,
// since neighbours differ in which they take), broadcast; for IPv6 an
// unsolicited neighbour advertisement to all nodes (ff02::1) with the
// override flag set and the solicited flag clear, carrying our link-layer
// address in a target link-layer address option. The address must be on
// the device (Add). A device without neighbours to tell (loopback, or
// without ARP, as a TUN device) gets nothing, and that is no error.
func Announce(a config.HAAddress) error {
	lk, err := netlink.LinkByName(a.Dev)
	if err != nil {
		return fmt.Errorf("vip: announce %s: %w", a, err)
	}
	at := lk.Attrs()
	if at.RawFlags&(unix.IFF_LOOPBACK|unix.IFF_NOARP) != 0 || len(at.HardwareAddr) != 6 {
		return nil
	}
	if a.Prefix.Addr().Is4() {
		err = garp(a, at.Index, at.HardwareAddr)
	} else {
		err = unsolicitedNA(a, at.Index, at.HardwareAddr)
	}
	if err != nil {
		return fmt.Errorf("vip: announce %s: %w", a, err)
	}
	return nil
}

// ARP (RFC 826) over Ethernet for IPv4.
const (
	arpRequest = 1
	arpReply   = 2
	arpLen     = 28
)

// garp sends the two gratuitous ARPs of a from an AF_PACKET socket on the
// device ifindex, whose Ethernet address is mac.
func garp(a config.HAAddress, ifindex int, mac net.HardwareAddr) error {
	// Protocol 0: the socket sends only, and queues nothing it would
	// receive.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("packet socket: %w", err)
	}
	// Closing a packet socket waits for an RCU grace period
	// (synchronize_net, several milliseconds) after the frames are
	// queued: the takeover need not wait for it.
	defer closeLater(fd)
	to := &unix.SockaddrLinklayer{
		Protocol: htons(unix.ETH_P_ARP),
		Ifindex:  ifindex,
		Halen:    6,
		Addr:     [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	}
	ip := a.Prefix.Addr().As4()
	for _, op := range []uint16{arpRequest, arpReply} {
		var p [arpLen]byte
		binary.BigEndian.PutUint16(p[0:], 1)      // hardware type: Ethernet
		binary.BigEndian.PutUint16(p[2:], 0x0800) // protocol type: IPv4
		p[4], p[5] = 6, 4
		binary.BigEndian.PutUint16(p[6:], op)
		copy(p[8:14], mac)
		copy(p[14:18], ip[:])
		if op == arpReply {
			// Linux takes a reply as gratuitous only when its target
			// hardware address is the sender's too.
			copy(p[18:24], mac)
		}
		copy(p[24:28], ip[:])
		if err := unix.Sendto(fd, p[:], 0, to); err != nil {
			return fmt.Errorf("send gratuitous ARP: %w", err)
		}
	}
	return nil
}

// Neighbour advertisement (RFC 4861 section 4.4).
const (
	icmpv6NA     = 136
	naRouter     = 0x80
	naOverride   = 0x20
	optTargetLL  = 2
	naLen        = 32 // ICMPv6 header, flags, target, target link-layer option
	ndpHopLimit  = 255
	allNodesByte = 0x01
)

// unsolicitedNA sends the neighbour advertisement of a to ff02::1 from a
// raw ICMPv6 socket bound to the device ifindex and to a itself, whose
// link-layer address is mac. The kernel fills in the checksum. The
// router flag is set when the device forwards IPv6, as the kernel sets it
// in its own advertisements, so that a neighbour that uses the address as
// its router keeps it as one.
func unsolicitedNA(a config.HAAddress, ifindex int, mac net.HardwareAddr) error {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return fmt.Errorf("ICMPv6 socket: %w", err)
	}
	defer unix.Close(fd)
	// Receive nothing: an ICMPv6 filter that blocks every type.
	var filter unix.ICMPv6Filter
	for i := range filter.Data {
		filter.Data[i] = 0xffffffff
	}
	for _, o := range []struct {
		level, name, v int
		what           string
	}{
		{unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, ndpHopLimit, "IPV6_MULTICAST_HOPS"},
		{unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, ndpHopLimit, "IPV6_UNICAST_HOPS"},
		{unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifindex, "IPV6_MULTICAST_IF"},
		{unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP, 0, "IPV6_MULTICAST_LOOP"},
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.v); err != nil {
			return fmt.Errorf("%s: %w", o.what, err)
		}
	}
	if err := unix.SetsockoptICMPv6Filter(fd, unix.SOL_ICMPV6, unix.ICMPV6_FILTER, &filter); err != nil {
		return fmt.Errorf("ICMPV6_FILTER: %w", err)
	}
	ip := a.Prefix.Addr().As16()
	// Bound to the address: it is the source, as RFC 4861 section 7.2.6
	// wants (an address of the interface), whatever the link-local
	// address's state.
	if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: ip, ZoneId: uint32(ifindex)}); err != nil {
		return fmt.Errorf("bind %s: %w", a.Prefix.Addr(), err)
	}
	var p [naLen]byte
	p[0] = icmpv6NA
	p[4] = naOverride
	if forwarding(a.Dev) {
		p[4] |= naRouter
	}
	copy(p[8:24], ip[:])
	p[24], p[25] = optTargetLL, 1 // length in units of 8 bytes
	copy(p[26:32], mac)
	to := &unix.SockaddrInet6{ZoneId: uint32(ifindex)}
	to.Addr[0], to.Addr[1], to.Addr[15] = 0xff, 0x02, allNodesByte
	if err := unix.Sendto(fd, p[:], 0, to); err != nil {
		return fmt.Errorf("send neighbour advertisement: %w", err)
	}
	return nil
}

// forwarding reports whether dev forwards IPv6
// (net.ipv6.conf.DEV.forwarding); false when it cannot be read.
func forwarding(dev string) bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + dev + "/forwarding")
	return err == nil && len(b) > 0 && b[0] == '1'
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// closeLater closes fd in the background.
func closeLater(fd int) { go unix.Close(fd) }
