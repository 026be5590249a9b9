package packet

import (
	"encoding/binary"
	"net/netip"
)

// IP protocol numbers used by sluice.
const (
	ProtoICMP     = 1
	ProtoIPv4     = 4 // IP-in-IP: the next header of an ESP tunnel carrying IPv4
	ProtoTCP      = 6
	ProtoUDP      = 17
	ProtoIPv6     = 41
	ProtoESP      = 50
	ProtoICMPv6   = 58
	ProtoNoNext   = 59 // RFC 4303 dummy packets
	IPv4MinHeader = 20
	IPv6Header    = 40
	UDPHeader     = 8
)

// IPVersion returns the version nibble of an IP packet, or 0 if b is empty.
func IPVersion(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return int(b[0] >> 4)
}

// IPv4 is a view of an IPv4 header and what follows it.
type IPv4 []byte

// IsValid reports whether b holds a whole IPv4 header whose lengths agree
// with len(b) (the packet may be longer than TotalLength: padding is allowed
// by the caller trimming to TotalLength).
func (b IPv4) IsValid() bool {
	if len(b) < IPv4MinHeader || b[0]>>4 != 4 {
		return false
	}
	hl := b.HeaderLength()
	tl := int(b.TotalLength())
	return hl >= IPv4MinHeader && hl <= tl && tl <= len(b)
}
func (b IPv4) HeaderLength() int       { return int(b[0]&0xf) * 4 }
func (b IPv4) TOS() uint8              { return b[1] }
func (b IPv4) TotalLength() uint16     { return binary.BigEndian.Uint16(b[2:]) }
func (b IPv4) ID() uint16              { return binary.BigEndian.Uint16(b[4:]) }
func (b IPv4) Flags() uint8            { return b[6] >> 5 }
func (b IPv4) DontFragment() bool      { return b[6]&0x40 != 0 }
func (b IPv4) FragmentOffset() uint16  { return binary.BigEndian.Uint16(b[6:]) & 0x1fff }
func (b IPv4) MoreFragments() bool     { return b[6]&0x20 != 0 }
func (b IPv4) TTL() uint8              { return b[8] }
func (b IPv4) Protocol() uint8         { return b[9] }
func (b IPv4) Src() netip.Addr         { return netip.AddrFrom4([4]byte(b[12:16])) }
func (b IPv4) Dst() netip.Addr         { return netip.AddrFrom4([4]byte(b[16:20])) }
func (b IPv4) Payload() []byte         { return b[b.HeaderLength():b.TotalLength()] }
func (b IPv4) SetTotalLength(n uint16) { binary.BigEndian.PutUint16(b[2:], n) }
func (b IPv4) SetProtocol(p uint8)     { b[9] = p }

// SetChecksum computes and stores the header checksum.
func (b IPv4) SetChecksum() {
	b[10], b[11] = 0, 0
	binary.BigEndian.PutUint16(b[10:], ^Checksum(b[:b.HeaderLength()], 0))
}

// ChecksumValid reports whether the header checksum verifies.
func (b IPv4) ChecksumValid() bool { return Checksum(b[:b.HeaderLength()], 0) == 0xffff }

// IPv4Fields are the fields Encode writes.
type IPv4Fields struct {
	TOS      uint8
	Length   uint16 // total length
	ID       uint16
	DF       bool
	TTL      uint8
	Protocol uint8
	Src, Dst [4]byte
}

// Encode writes a 20-byte header (no options) with its checksum.
func (b IPv4) Encode(f *IPv4Fields) {
	b[0] = 0x45
	b[1] = f.TOS
	binary.BigEndian.PutUint16(b[2:], f.Length)
	binary.BigEndian.PutUint16(b[4:], f.ID)
	if f.DF {
		b[6], b[7] = 0x40, 0
	} else {
		b[6], b[7] = 0, 0
	}
	b[8] = f.TTL
	b[9] = f.Protocol
	copy(b[12:16], f.Src[:])
	copy(b[16:20], f.Dst[:])
	b.SetChecksum()
}

// IPv6 is a view of an IPv6 fixed header and what follows it.
type IPv6 []byte

// IsValid reports whether b holds a fixed header and the payload length
// it announces.
func (b IPv6) IsValid() bool {
	return len(b) >= IPv6Header && b[0]>>4 == 6 && IPv6Header+int(b.PayloadLength()) <= len(b)
}
func (b IPv6) TrafficClass() uint8       { return b[0]<<4 | b[1]>>4 }
func (b IPv6) PayloadLength() uint16     { return binary.BigEndian.Uint16(b[4:]) }
func (b IPv6) NextHeader() uint8         { return b[6] }
func (b IPv6) HopLimit() uint8           { return b[7] }
func (b IPv6) Src() netip.Addr           { return netip.AddrFrom16([16]byte(b[8:24])) }
func (b IPv6) Dst() netip.Addr           { return netip.AddrFrom16([16]byte(b[24:40])) }
func (b IPv6) Payload() []byte           { return b[IPv6Header : IPv6Header+int(b.PayloadLength())] }
func (b IPv6) SetPayloadLength(n uint16) { binary.BigEndian.PutUint16(b[4:], n) }
func (b IPv6) SetNextHeader(p uint8)     { b[6] = p }

// IPv6Fields are the fields Encode writes.
type IPv6Fields struct {
	TrafficClass  uint8
	FlowLabel     uint32
	PayloadLength uint16
	NextHeader    uint8
	HopLimit      uint8
	Src, Dst      [16]byte
}

// Encode writes the 40-byte fixed header.
func (b IPv6) Encode(f *IPv6Fields) {
	binary.BigEndian.PutUint32(b[0:], 6<<28|uint32(f.TrafficClass)<<20|f.FlowLabel&0xfffff)
	binary.BigEndian.PutUint16(b[4:], f.PayloadLength)
	b[6] = f.NextHeader
	b[7] = f.HopLimit
	copy(b[8:24], f.Src[:])
	copy(b[24:40], f.Dst[:])
}

// UDP is a view of a UDP header and payload.
type UDP []byte

func (b UDP) SrcPort() uint16  { return binary.BigEndian.Uint16(b[0:]) }
func (b UDP) DstPort() uint16  { return binary.BigEndian.Uint16(b[2:]) }
func (b UDP) Length() uint16   { return binary.BigEndian.Uint16(b[4:]) }
func (b UDP) Checksum() uint16 { return binary.BigEndian.Uint16(b[6:]) }

// Encode writes the header with a zero checksum.
func (b UDP) Encode(sport, dport, length uint16) {
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], length)
	b[6], b[7] = 0, 0
}

// SetChecksumIPv6 computes the UDP checksum over the IPv6 pseudo-header
// (RFC 8200 section 8.1); b must be exactly the UDP datagram.
func (b UDP) SetChecksumIPv6(src, dst []byte) {
	b[6], b[7] = 0, 0
	s := PseudoHeaderSum(src, dst, ProtoUDP, len(b))
	c := ^Checksum(b, s)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(b[6:], c)
}

// SetChecksumIPv4 computes the UDP checksum over the IPv4 pseudo-header.
func (b UDP) SetChecksumIPv4(src, dst []byte) { b.SetChecksumIPv6(src, dst) }

// PseudoHeaderSum is the unfolded one's complement sum of an IPv4 or IPv6
// pseudo-header (the address lengths decide which).
func PseudoHeaderSum(src, dst []byte, proto uint8, length int) uint32 {
	var s uint32
	for i := 0; i+1 < len(src); i += 2 {
		s += uint32(src[i])<<8 | uint32(src[i+1])
		s += uint32(dst[i])<<8 | uint32(dst[i+1])
	}
	s += uint32(proto)
	s += uint32(length>>16) + uint32(length&0xffff)
	return s
}

// Checksum returns the folded one's complement sum of b added to initial
// (RFC 1071), not inverted.
func Checksum(b []byte, initial uint32) uint16 {
	s := uint64(initial)
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		s += v >> 48
		s += v >> 32 & 0xffff
		s += v >> 16 & 0xffff
		s += v & 0xffff
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}
