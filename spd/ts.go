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

// tsSpan is a Range as the data path matches it: its bounds as points of
// its family's value space (classify.go's u128), compared without netip's
// family and zone logic on every packet.
type tsSpan struct {
	start, end u128
	is4        bool
	proto      uint8
	ports      PortRange
}

// spanOf returns r's span; ok is false for a range that holds no address
// (invalid bounds, mixed families, a zone, start past end).
func spanOf(r Range) (tsSpan, bool) {
	if !r.Start.IsValid() || r.Start.BitLen() != r.End.BitLen() || r.Start.Zone() != "" || r.End.Zone() != "" || r.Start.Compare(r.End) > 0 {
		return tsSpan{}, false
	}
	return tsSpan{start: addrPoint(r.Start), end: addrPoint(r.End), is4: r.Start.Is4(), proto: r.Proto, ports: r.Ports}, true
}

func (s *tsSpan) matches(p u128, is4 bool, proto uint8, port uint16) bool {
	return s.is4 == is4 && s.start.compare(p) <= 0 && p.compare(s.end) <= 0 &&
		(s.proto == 0 || s.proto == proto) && s.ports.Contains(port)
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
//
// Only NewSATS makes a working SATS: the zero value matches nothing.
type SATS struct {
	// Local and Remote are the selectors as given, to be read (they
	// are not what the methods match against).
	Local, Remote []Range
	// What NewSATS prepared once so that the data path need not: the
	// ranges as spans; whether local holds every address of both
	// families with any protocol and port, and whether remote restricts
	// neither protocol nor ports.
	local, remote            []tsSpan
	localAny, remoteAddrOnly bool
}

// NewSATS returns the selectors local === remote. The slices are kept,
// not copied: the caller does not change them afterwards. A range that
// holds no address (invalid, of mixed families, backwards) matches
// nothing.
func NewSATS(local, remote []Range) *SATS {
	s := &SATS{Local: local, Remote: remote, remoteAddrOnly: true}
	for _, r := range local {
		if sp, ok := spanOf(r); ok {
			s.local = append(s.local, sp)
		}
	}
	for _, r := range remote {
		if sp, ok := spanOf(r); ok {
			s.remote = append(s.remote, sp)
		}
	}
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
	return inAny(s.remote, k.Src, k.Proto, k.SPort) && (s.localAny || inAny(s.local, k.Dst, k.Proto, k.DPort))
}

// Outbound reports whether a packet to seal with flow key k is inside s:
// its source in Local, its destination in Remote.
func (s *SATS) Outbound(k *FlowKey) bool {
	return (s.localAny || inAny(s.local, k.Src, k.Proto, k.SPort)) && inAny(s.remote, k.Dst, k.Proto, k.DPort)
}

func inAny(ss []tsSpan, a netip.Addr, proto uint8, port uint16) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	p, is4 := addrPoint(a), a.Is4()
	for i := range ss {
		if ss[i].matches(p, is4, proto, port) {
			return true
		}
	}
	return false
}
