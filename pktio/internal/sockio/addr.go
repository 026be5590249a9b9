package sockio

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PutSockaddr writes addr and port to sa as the socket's family wants it:
// sockaddr_in on an IPv4 socket, sockaddr_in6 on an IPv6 socket (an IPv4
// address as v4-mapped). It returns the address length, or false when the
// address cannot be reached from the socket (an IPv6 address on an IPv4
// socket, or an invalid address). Zones are not carried.
func PutSockaddr(sa *unix.RawSockaddrInet6, addr netip.Addr, port uint16, v6sock bool) (uint32, bool) {
	if !addr.IsValid() {
		return 0, false
	}
	if !v6sock {
		if !addr.Is4() && !addr.Is4In6() {
			return 0, false
		}
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*s4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: addr.Unmap().As4()}
		putPort(&s4.Port, port)
		return unix.SizeofSockaddrInet4, true
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: addr.As16()}
	putPort(&sa.Port, port)
	return unix.SizeofSockaddrInet6, true
}

// Sockaddr reads the address a message's name holds; an IPv4-mapped
// IPv6 address is unmapped. Zones are dropped.
func Sockaddr(sa *unix.RawSockaddrInet6) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), getPort(&s4.Port))
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), getPort(&sa.Port))
	}
	return netip.AddrPort{}
}

// The port of a sockaddr is in network byte order.
func putPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

func getPort(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}
