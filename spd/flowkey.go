package spd

import (
	"encoding/binary"
	"net/netip"

	"github.com/sluicegw/sluice/packet"
)

// FlowKey holds the selector fields of one packet: what the SPD and the flow
// cache look up. Ports are 0 (OPAQUE) when the packet has none or they cannot
// be read; see PortRange.
type FlowKey struct {
	Src, Dst     netip.Addr
	Proto        uint8
	SPort, DPort uint16
}

// Address families of a FlowKey.
const (
	famNone = iota // invalid key: matches nothing
	fam4
	fam6
)

// family returns fam4 or fam6 for a key whose addresses are valid, of one
// family and without an IPv6 zone, and famNone for any other.
func (k *FlowKey) family() int {
	switch {
	case k.Src.Is4() && k.Dst.Is4():
		return fam4
	case k.Src.Is6() && k.Dst.Is6() && k.Src.Zone() == "" && k.Dst.Zone() == "":
		return fam6
	}
	return famNone
}

// IPv6 extension headers that ExtractFlowKey skips to find the next-layer
// protocol (RFC 8200 section 4).
const (
	ip6HopByHop = 0
	ip6Routing  = 43
	ip6Fragment = 44
	ip6DestOpts = 60
)

// ExtractFlowKey fills k from the IPv4 or IPv6 packet pkt and reports whether
// pkt is well-formed enough to classify. It does not allocate and does not
// retain pkt. On false, k is zeroed; the caller drops the packet as
// malformed.
//
// The protocol is IPv4's Protocol field, or for IPv6 the header that follows
// any hop-by-hop, routing, destination options and fragment headers (AH,
// ESP, Mobility and any other header end the walk and are the protocol).
// IPv4 bytes past TotalLength and IPv6 bytes past the payload length are
// ignored. IPv6 jumbograms (payload length 0) are not supported.
//
// Ports are read for TCP, UDP and SCTP; other protocols, ICMP included, get
// ports 0. Fragments follow RFC 4301 section 7: a non-first fragment (offset
// not 0) has no ports, so its ports are OPAQUE (0) and it matches only
// policies with ANY ports; for an IPv6 non-first fragment the protocol is
// the fragment header's next header, which may itself be an extension header
// that cannot be looked past. A first fragment, or any packet, too short to
// hold the ports of its protocol is rejected rather than treated as OPAQUE:
// otherwise a tiny first fragment (RFC 1858) could dodge a port-specific
// policy and match a broader one. Fragments are not reassembled and no
// state is kept across them.
func ExtractFlowKey(pkt []byte, k *FlowKey) bool {
	*k = FlowKey{}
	var l4 []byte
	switch packet.IPVersion(pkt) {
	case 4:
		ip := packet.IPv4(pkt)
		if !ip.IsValid() {
			return false
		}
		k.Src, k.Dst, k.Proto = ip.Src(), ip.Dst(), ip.Protocol()
		if ip.FragmentOffset() != 0 {
			return true
		}
		l4 = ip.Payload()
	case 6:
		ip := packet.IPv6(pkt)
		if !ip.IsValid() {
			return false
		}
		nh, b := ip.NextHeader(), ip.Payload()
	walk:
		for {
			switch nh {
			case ip6HopByHop, ip6Routing, ip6DestOpts:
				// Next header, length in 8-octet units not counting the
				// first 8 (RFC 8200 sections 4.3, 4.4, 4.6).
				if len(b) < 8 {
					return false
				}
				n := (int(b[1]) + 1) * 8
				if len(b) < n {
					return false
				}
				nh, b = b[0], b[n:]
			case ip6Fragment:
				// Next header, reserved, offset (13 bits) and flags, ID
				// (RFC 8200 section 4.5).
				if len(b) < 8 {
					return false
				}
				nh = b[0]
				if binary.BigEndian.Uint16(b[2:])>>3 != 0 {
					k.Src, k.Dst, k.Proto = ip.Src(), ip.Dst(), nh
					return true
				}
				b = b[8:]
			default:
				break walk
			}
		}
		k.Src, k.Dst, k.Proto = ip.Src(), ip.Dst(), nh
		l4 = b
	default:
		return false
	}
	if hasPorts(k.Proto) {
		if len(l4) < 4 {
			*k = FlowKey{}
			return false
		}
		k.SPort = binary.BigEndian.Uint16(l4)
		k.DPort = binary.BigEndian.Uint16(l4[2:])
	}
	return true
}
