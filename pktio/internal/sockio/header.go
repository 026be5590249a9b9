package sockio

import (
	"net/netip"

	"github.com/sluicegw/sluice/packet"
)

// Header sizes the socket Links synthesise in front of received payloads.
const (
	IPv4UDPHeader = packet.IPv4MinHeader + packet.UDPHeader // 28
	IPv6UDPHeader = packet.IPv6Header + packet.UDPHeader    // 48
	synthTTL      = 64
)

// HeaderLen is the size of the header PrependHeader writes for a packet
// from src: IPv4 or IPv6, plus a UDP header if udp.
func HeaderLen(src netip.Addr, udp bool) int {
	n := packet.IPv6Header
	if src.Is4() {
		n = packet.IPv4MinHeader
	}
	if udp {
		n += packet.UDPHeader
	}
	return n
}

// PrependHeader writes, in b's headroom directly in front of its data (the
// received payload), an IP header from src to dst with the given TOS and,
// when proto is UDP, a UDP header from sport to dport. The IP version is
// src's; dst is replaced by the unspecified address of that version when it
// is of the other one or invalid. The IPv4 header checksum is computed; the
// UDP checksum is left zero. The caller has checked the headroom
// (HeaderLen) and that the packet fits its length fields.
func PrependHeader(b *packet.Buf, src, dst netip.Addr, sport, dport uint16, tos, proto uint8) {
	n := b.Len()
	udp := proto == packet.ProtoUDP
	if udp {
		packet.UDP(b.Prepend(packet.UDPHeader)).Encode(sport, dport, uint16(packet.UDPHeader+n))
		n += packet.UDPHeader
	}
	if src.Is4() {
		if !dst.Is4() {
			dst = netip.IPv4Unspecified()
		}
		packet.IPv4(b.Prepend(packet.IPv4MinHeader)).Encode(&packet.IPv4Fields{
			TOS: tos, Length: uint16(packet.IPv4MinHeader + n), TTL: synthTTL,
			Protocol: proto, Src: src.As4(), Dst: dst.As4(),
		})
		return
	}
	if !dst.Is6() {
		dst = netip.IPv6Unspecified()
	}
	packet.IPv6(b.Prepend(packet.IPv6Header)).Encode(&packet.IPv6Fields{
		TrafficClass: tos, PayloadLength: uint16(n), NextHeader: proto,
		HopLimit: synthTTL, Src: src.As16(), Dst: dst.As16(),
	})
}

// Outer is what the outer header of an outbound packet says.
type Outer struct {
	Src, Dst     netip.Addr
	SPort, DPort uint16 // UDP only
	TOS          uint8
}

// ParseOuter reads the outer IPv4 or IPv6 header at the front of data (and
// the UDP header after it when proto is UDP) and returns where the payload
// that goes to the socket starts and ends. It is false for a packet that is
// malformed, a fragment, or not of protocol proto directly after the fixed
// header (IPv6 extension headers are not supported). Bytes past the IP
// packet's length are ignored.
func ParseOuter(data []byte, proto uint8, o *Outer) (start, end int, ok bool) {
	switch packet.IPVersion(data) {
	case 4:
		ip := packet.IPv4(data)
		if !ip.IsValid() || ip.Protocol() != proto || ip.MoreFragments() || ip.FragmentOffset() != 0 {
			return 0, 0, false
		}
		o.Src, o.Dst, o.TOS = ip.Src(), ip.Dst(), ip.TOS()
		start, end = ip.HeaderLength(), int(ip.TotalLength())
	case 6:
		ip := packet.IPv6(data)
		if !ip.IsValid() || ip.NextHeader() != proto {
			return 0, 0, false
		}
		o.Src, o.Dst, o.TOS = ip.Src(), ip.Dst(), ip.TrafficClass()
		start, end = packet.IPv6Header, packet.IPv6Header+int(ip.PayloadLength())
	default:
		return 0, 0, false
	}
	o.SPort, o.DPort = 0, 0
	if proto == packet.ProtoUDP {
		if end-start < packet.UDPHeader {
			return 0, 0, false
		}
		u := packet.UDP(data[start:end])
		if int(u.Length()) != len(u) {
			return 0, 0, false
		}
		o.SPort, o.DPort = u.SrcPort(), u.DstPort()
		start += packet.UDPHeader
	}
	return start, end, true
}
