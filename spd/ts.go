package spd

// Traffic selectors of an SA pair: what a route-based tunnel's SAs were
// negotiated (IKEv2, RFC 7296 section 2.9) or configured (a static
// tunnel's routed remote prefixes, as WireGuard's AllowedIPs) to carry.
// Every packet a tunnel decrypts must fall inside them (RFC 4301 section
// 5.2), and every packet it seals too (RFC 7296 section 2.9: the
// responder's narrowing binds both sides).

import (
	"net/netip"
	"strconv"
)

// Range is one traffic selector (RFC 7296 section 3.13.1): an inclusive
// range of addresses of one family, a next-layer protocol (0 = ANY) and a
// port range. Its ports are matched as a Selector's (PortRange: OPAQUE
// ports, ICMP's included, match only ANY).
type Range struct {
	Start, End netip.Addr
	Proto      uint8
	Ports      PortRange
}

// RangeOf returns the Range of every address of prefix p, any protocol
// and any port.
func RangeOf(p netip.Prefix) Range {
	p = p.Masked()
	return Range{Start: p.Addr(), End: lastAddr(p)}
}

// lastAddr returns the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	a16 := p.Addr().As16()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	for i := bits; i < 128; i++ {
		a16[i/8] |= 0x80 >> (i % 8)
	}
	if p.Addr().Is4() {
		return netip.AddrFrom4([4]byte(a16[12:]))
	}
	return netip.AddrFrom16(a16)
}

// contains reports whether a is in r's address range. An address of the
// other family (or with an IPv6 zone) is not.
func (r *Range) contains(a netip.Addr) bool {
	return a.BitLen() == r.Start.BitLen() && a.Zone() == "" && r.Start.Compare(a) <= 0 && a.Compare(r.End) <= 0
}

// matches reports whether an address, protocol and port of a packet are
// inside r.
func (r *Range) matches(a netip.Addr, proto uint8, port uint16) bool {
	return r.contains(a) && (r.Proto == 0 || r.Proto == proto) && r.Ports.Contains(port)
}

// Prefixes returns the fewest prefixes that cover exactly r's addresses,
// lowest first: the routes a tunnel with these selectors takes. Protocol
// and ports are not routes; the SA's check applies them.
func (r Range) Prefixes() []netip.Prefix {
	if !r.Start.IsValid() || r.Start.BitLen() != r.End.BitLen() || r.Start.Compare(r.End) > 0 {
		return nil
	}
	var out []netip.Prefix
	for a := r.Start; ; {
		var p netip.Prefix
		for bits := 0; bits <= a.BitLen(); bits++ {
			q := netip.PrefixFrom(a, bits)
			if q.Masked().Addr() == a && lastAddr(q).Compare(r.End) <= 0 {
				p = q
				break
			}
		}
		out = append(out, p)
		last := lastAddr(p)
		if last == r.End {
			return out
		}
		a = last.Next()
	}
}

// String returns "START-END" or the prefix when it is one, followed by
// "[proto P, ports LO-HI]" where they are not ANY.
func (r Range) String() string {
	s := r.Start.String() + "-" + r.End.String()
	if ps := r.Prefixes(); len(ps) == 1 {
		s = ps[0].String()
	}
	if r.Proto != 0 || !r.Ports.IsAny() {
		s += "[proto " + strconv.Itoa(int(r.Proto)) + ", ports " + r.Ports.String() + "]"
	}
	return s
}

// SATS are the traffic selectors of one SA pair: Local our side's, Remote
// the peer's. A packet is inside them when its addresses, protocol and
// ports fall in one Local selector on our side and one Remote selector on
// the peer's (each TS payload is a set, RFC 7296 section 2.9). An SATS is
// immutable once made (NewSATS), so the data path reads it without a
// lock; its methods do not allocate.
type SATS struct {
	Local, Remote []Range
	// What NewSATS learned once so that the data path need not: Local
	// holds every address of both families with any protocol and port,
	// and Remote restricts neither protocol nor ports.
	localAny, remoteAddrOnly bool
}

// NewSATS returns the selectors local === remote. The slices are kept,
// not copied: the caller does not change them afterwards.
func NewSATS(local, remote []Range) *SATS {
	s := &SATS{Local: local, Remote: remote, remoteAddrOnly: true}
	var any4, any6 bool
	for _, r := range local {
		if r.Proto == 0 && r.Ports.IsAny() {
			any4 = any4 || r.Start == AnyAddress[0].Start && r.End == AnyAddress[0].End
			any6 = any6 || r.Start == AnyAddress[1].Start && r.End == AnyAddress[1].End
		}
	}
	s.localAny = any4 && any6
	for _, r := range remote {
		if r.Proto != 0 || !r.Ports.IsAny() {
			s.remoteAddrOnly = false
		}
	}
	return s
}

// Routed reports whether every packet whose destination is in Remote's
// addresses is inside s, whatever its source, protocol and ports: then a
// packet that the tunnel's routes (the Prefixes of Remote) gave to the SA
// needs no Outbound check. It holds for a static tunnel's selectors.
func (s *SATS) Routed() bool { return s.localAny && s.remoteAddrOnly }

// AnyAddress is the Local side of a tunnel that does not restrict its own
// side: every IPv4 and every IPv6 address.
var AnyAddress = []Range{
	{Start: netip.IPv4Unspecified(), End: netip.AddrFrom4([4]byte{255, 255, 255, 255})},
	{Start: netip.IPv6Unspecified(), End: netip.AddrFrom16([16]byte{
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})},
}

// Inbound reports whether a decrypted packet with flow key k is inside s:
// its source in Remote, its destination in Local.
func (s *SATS) Inbound(k *FlowKey) bool {
	return inAny(s.Remote, k.Src, k.Proto, k.SPort) && (s.localAny || inAny(s.Local, k.Dst, k.Proto, k.DPort))
}

// Outbound reports whether a packet to seal with flow key k is inside s:
// its source in Local, its destination in Remote.
func (s *SATS) Outbound(k *FlowKey) bool {
	return (s.localAny || inAny(s.Local, k.Src, k.Proto, k.SPort)) && inAny(s.Remote, k.Dst, k.Proto, k.DPort)
}

func inAny(rs []Range, a netip.Addr, proto uint8, port uint16) bool {
	for i := range rs {
		if rs[i].matches(a, proto, port) {
			return true
		}
	}
	return false
}
