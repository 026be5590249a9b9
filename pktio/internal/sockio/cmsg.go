package sockio

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Control buffer sizes: the most a message carries in each direction.
const (
	// RecvCtrlSize holds IP_PKTINFO, IPV6_PKTINFO (a dual-stack socket may
	// get both for an IPv4 datagram), IP_TOS, IPV6_TCLASS and UDP_GRO.
	RecvCtrlSize = 160
	// SendCtrlSize holds a PKTINFO, a TOS/TCLASS and a UDP_SEGMENT.
	SendCtrlSize = 96
)

// RecvInfo is what the control messages of one received datagram say.
type RecvInfo struct {
	Dst     netip.Addr // the datagram's destination address (PKTINFO); invalid if absent
	TOS     uint8      // IPv4 TOS or IPv6 traffic class
	GSOSize int        // UDP_GRO: the segment size of a coalesced datagram, 0 if not coalesced
}

// ParseRecv reads the control messages in b into ri. Unknown ones are
// skipped; a truncated one ends the parse. It does not allocate.
func ParseRecv(b []byte, ri *RecvInfo) {
	*ri = RecvInfo{}
	for len(b) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(b) {
			return
		}
		data := b[unix.CmsgLen(0):l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			// struct in_pktinfo { int ifindex; in_addr spec_dst; in_addr addr }:
			// addr is the header's destination.
			ri.Dst = netip.AddrFrom4([4]byte(data[8:12]))
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			ri.Dst = netip.AddrFrom16([16]byte(data[0:16])).Unmap()
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			ri.TOS = data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			ri.TOS = uint8(binary.NativeEndian.Uint32(data))
		case h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			ri.GSOSize = int(binary.NativeEndian.Uint32(data))
		}
		sp := unix.CmsgSpace(l - unix.CmsgLen(0))
		if sp >= len(b) {
			return
		}
		b = b[sp:]
	}
}

// putCmsg writes a control message header at b[off:] and returns its data
// (n bytes) and the offset of the next message.
func putCmsg(b []byte, off int, level, typ int32, n int) ([]byte, int) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[off]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(n))
	start := off + unix.CmsgLen(0)
	data := b[start : start+n]
	clear(b[start : off+unix.CmsgSpace(n)])
	return data, off + unix.CmsgSpace(n)
}

// PutSend writes the control messages for one datagram to b (at least
// SendCtrlSize bytes) and returns their length: the source address when
// src is valid and not unspecified (IP_PKTINFO/IPV6_PKTINFO, chosen by
// dst4, the destination's family), the TOS or traffic class when tos is
// not zero, and UDP_SEGMENT when gsoSize is not zero.
func PutSend(b []byte, dst4 bool, src netip.Addr, tos uint8, gsoSize int) int {
	off := 0
	if src.IsValid() && !src.IsUnspecified() {
		if dst4 {
			if src.Is4() || src.Is4In6() {
				d, next := putCmsg(b, off, unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo)
				a := src.Unmap().As4()
				copy(d[4:8], a[:]) // ipi_spec_dst: the source address to use
				off = next
			}
		} else if src.Is6() && !src.Is4In6() {
			d, next := putCmsg(b, off, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo)
			a := src.As16()
			copy(d[0:16], a[:])
			off = next
		}
	}
	if tos != 0 {
		level, typ := int32(unix.IPPROTO_IPV6), int32(unix.IPV6_TCLASS)
		if dst4 {
			level, typ = unix.IPPROTO_IP, unix.IP_TOS
		}
		d, next := putCmsg(b, off, level, typ, 4)
		binary.NativeEndian.PutUint32(d, uint32(tos))
		off = next
	}
	if gsoSize > 0 {
		d, next := putCmsg(b, off, unix.IPPROTO_UDP, unix.UDP_SEGMENT, 2)
		binary.NativeEndian.PutUint16(d, uint16(gsoSize))
		off = next
	}
	return off
}
