package tun

import (
	"encoding/binary"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
)

// maxSegments bounds the packets one coalesced write carries (and so its
// iovecs).
const maxSegments = 64

// TCP flags the coalescing looks at.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpPSH = 0x08
	tcpACK = 0x10
)

// segment is what the coalescing needs to know of a TCP or UDP packet.
type segment struct {
	p       []byte // the packet
	l4      int    // offset of the transport header
	hl      int    // bytes of IP and transport header
	proto   uint8
	payload int    // bytes after the transport header
	seq     uint32 // TCP
	flags   uint8  // TCP
}

// segmentOf parses p as far as the coalescing needs; ok is false for a
// packet it never coalesces (not TCP or UDP, a fragment, IPv4 options,
// IPv6 extension headers, a UDP length other than the IP payload's, a bad
// IPv4 header checksum, too short).
func segmentOf(p []byte) (s segment, ok bool) {
	s.p = p
	switch packet.IPVersion(p) {
	case 4:
		ip := packet.IPv4(p)
		// A bad header checksum is the kernel's to drop: coalesced,
		// the headers would be rewritten with a good one.
		if len(p) < packet.IPv4MinHeader || ip.HeaderLength() != packet.IPv4MinHeader ||
			ip.MoreFragments() || ip.FragmentOffset() != 0 || checksum(p[:packet.IPv4MinHeader], 0) != 0xffff {
			return s, false
		}
		s.l4, s.proto = packet.IPv4MinHeader, ip.Protocol()
	case 6:
		if len(p) < packet.IPv6Header {
			return s, false
		}
		s.l4, s.proto = packet.IPv6Header, p[6]
	default:
		return s, false
	}
	switch s.proto {
	case packet.ProtoTCP:
		if len(p) < s.l4+20 {
			return s, false
		}
		th := int(p[s.l4+12]>>4) * 4
		if th < 20 || len(p) < s.l4+th {
			return s, false
		}
		s.hl = s.l4 + th
		s.seq = binary.BigEndian.Uint32(p[s.l4+4:])
		s.flags = p[s.l4+13]
	case packet.ProtoUDP:
		// A UDP length other than the IP payload's (bytes trailing the
		// datagram, or a short one) is the kernel's to judge: coalesced
		// or with a partial checksum over the whole, the trailing bytes
		// would become data or be summed.
		if len(p) < s.l4+packet.UDPHeader || int(binary.BigEndian.Uint16(p[s.l4+4:])) != len(p)-s.l4 {
			return s, false
		}
		s.hl = s.l4 + packet.UDPHeader
	default:
		return s, false
	}
	s.payload = len(p) - s.hl
	return s, true
}

// canStart reports whether s may be the first packet of a super-packet:
// it has a payload, and a TCP segment carries no flag but ACK (PSH ends a
// super-packet, so a segment with it can only be the last).
func (s *segment) canStart(udp bool) bool {
	if s.payload == 0 {
		return false
	}
	if s.proto == packet.ProtoUDP {
		return udp
	}
	return s.flags == tcpACK
}

// joins reports whether cur may follow prev in the super-packet that
// head starts, size bytes long so far: the receiving kernel must see the
// same packets it would have seen one by one. Everything in the headers
// but the lengths, the IPv4 identification and checksum, and the TCP
// sequence number, checksum and PSH must be the same (the super-packet
// carries the first packet's headers; the kernel's own GRO is as strict,
// the TCP window and reserved bits included, but also wants the IPv4
// identifications of packets without DF to count up); all segments but
// the last have the first one's size; TCP sequence numbers are
// contiguous.
func joins(head, prev, cur *segment, size int) bool {
	if cur.proto != head.proto || cur.hl != head.hl || cur.payload == 0 ||
		cur.payload > head.payload || prev.payload != head.payload ||
		size+cur.payload > pktio.MaxPacket {
		return false
	}
	h, c := head.p, cur.p
	if packet.IPVersion(c) != packet.IPVersion(h) {
		return false
	}
	if head.l4 == packet.IPv4MinHeader {
		// TOS, the DF flag, TTL, protocol, addresses.
		if h[1] != c[1] || h[6] != c[6] || h[8] != c[8] || h[9] != c[9] || string(h[12:20]) != string(c[12:20]) {
			return false
		}
	} else if string(h[0:4]) != string(c[0:4]) || string(h[6:40]) != string(c[6:40]) {
		// Traffic class, flow label, next header, hop limit, addresses.
		return false
	}
	l4 := head.l4
	if string(h[l4:l4+4]) != string(c[l4:l4+4]) { // ports
		return false
	}
	if cur.proto == packet.ProtoUDP {
		return true
	}
	// TCP: acknowledgment, window, reserved bits and options equal,
	// contiguous, only ACK (and PSH on the last), the previous one
	// without PSH.
	return prev.flags == tcpACK && (cur.flags == tcpACK || cur.flags == tcpACK|tcpPSH) &&
		cur.seq == prev.seq+uint32(prev.payload) &&
		string(h[l4+8:l4+13]) == string(c[l4+8:l4+13]) &&
		string(h[l4+14:l4+16]) == string(c[l4+14:l4+16]) &&
		string(h[l4+20:head.hl]) == string(c[l4+20:cur.hl])
}

// runEnd returns the end (exclusive) of the run of packets that starts at
// q.wpkts[i] and can be written as one super-packet; i+1 means alone.
func (q *Queue) runEnd(i int) int {
	head, ok := segmentOf(q.wpkts[i])
	if !ok || !head.canStart(q.uso) || i+1 == len(q.wpkts) {
		return i + 1
	}
	prev := head
	size := len(head.p)
	j := i + 1
	for ; j < len(q.wpkts) && j-i < maxSegments; j++ {
		cur, ok := segmentOf(q.wpkts[j])
		if !ok || !joins(&head, &prev, &cur, size) {
			break
		}
		size += cur.payload
		prev = cur
		if cur.payload < head.payload || cur.flags&tcpPSH != 0 {
			j++
			break
		}
	}
	return j
}

// setPseudoSum writes into the checksum field at p[at:] what
// VIRTIO_NET_HDR_F_NEEDS_CSUM asks for: the folded pseudo-header sum of
// the packet that starts with p (size bytes long, its transport header at
// l4), not inverted; the kernel, or whoever segments the packet,
// completes it. Only the headers in p are read.
func setPseudoSum(p []byte, size, l4, at int, proto uint8) {
	var src, dst []byte
	if packet.IPVersion(p) == 4 {
		src, dst = p[12:16], p[16:20]
	} else {
		src, dst = p[8:24], p[24:40]
	}
	binary.BigEndian.PutUint16(p[at:], packet.Checksum(nil, packet.PseudoHeaderSum(src, dst, proto, size-l4)))
}

// coalesce turns the run q.wpkts[i:j] (j > i+1) into one super-packet
// written with writev: the first packet's headers are rewritten in place
// for the whole (lengths, IPv4 checksum, PSH of the last segment, the
// pseudo-header sum in the transport checksum field), the virtio-net
// header goes into its headroom, and the others contribute their payloads
// where they lie. Nothing is copied. It returns the iovecs' bytes.
func (q *Queue) coalesce(i, j int) int {
	head, _ := segmentOf(q.wpkts[i])
	last, _ := segmentOf(q.wpkts[j-1])
	size := len(head.p)
	for _, p := range q.wpkts[i+1 : j] {
		size += len(p) - head.hl
	}
	p := head.p
	if head.l4 == packet.IPv4MinHeader {
		ip := packet.IPv4(p)
		ip.SetTotalLength(uint16(size))
		ip.SetChecksum()
	} else {
		binary.BigEndian.PutUint16(p[4:], uint16(size-packet.IPv6Header))
	}
	h := virtioHdr{
		flags:     flagNeedsCsum,
		hdrLen:    uint16(head.hl),
		gsoSize:   uint16(head.payload),
		csumStart: uint16(head.l4),
	}
	l4 := head.l4
	at := l4 + tcpCsumOffset
	if head.proto == packet.ProtoTCP {
		p[l4+13] |= last.flags & tcpPSH
		h.gsoType = gsoTCPv6
		if head.l4 == packet.IPv4MinHeader {
			h.gsoType = gsoTCPv4
		}
		h.csumOffset = tcpCsumOffset
	} else {
		binary.BigEndian.PutUint16(p[l4+4:], uint16(size-l4))
		h.gsoType = gsoUDPL4
		h.csumOffset = udpCsumOffset
		at = l4 + udpCsumOffset
	}
	setPseudoSum(p, size, l4, at, head.proto)
	full := q.wfull[i]
	h.encode(full)
	q.wiov = q.wiov[:0]
	q.wiov = append(q.wiov, iovec(full))
	for _, p := range q.wpkts[i+1 : j] {
		q.wiov = append(q.wiov, iovec(p[head.hl:]))
	}
	return VirtioHeaderRoom + size
}
