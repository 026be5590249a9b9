package tun

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/packet"
)

// The virtio-net header (struct virtio_net_hdr, include/uapi/linux/
// virtio_net.h) the kernel puts in front of every packet it hands a TUN
// opened with IFF_VNET_HDR, and expects in front of every packet written
// to it. Its fields are in the host's byte order (the device is not set to
// a fixed endianness with TUNSETVNETLE/BE).
type virtioHdr struct {
	flags      uint8
	gsoType    uint8
	hdrLen     uint16
	gsoSize    uint16
	csumStart  uint16
	csumOffset uint16
}

const (
	flagNeedsCsum = unix.VIRTIO_NET_HDR_F_NEEDS_CSUM
	flagDataValid = unix.VIRTIO_NET_HDR_F_DATA_VALID
	gsoNone       = unix.VIRTIO_NET_HDR_GSO_NONE
	gsoTCPv4      = unix.VIRTIO_NET_HDR_GSO_TCPV4
	gsoTCPv6      = unix.VIRTIO_NET_HDR_GSO_TCPV6
	gsoUDPL4      = unix.VIRTIO_NET_HDR_GSO_UDP_L4
	gsoECN        = unix.VIRTIO_NET_HDR_GSO_ECN
)

func (h *virtioHdr) decode(b []byte) {
	_ = b[VirtioHeaderRoom-1]
	h.flags, h.gsoType = b[0], b[1]
	h.hdrLen = binary.NativeEndian.Uint16(b[2:])
	h.gsoSize = binary.NativeEndian.Uint16(b[4:])
	h.csumStart = binary.NativeEndian.Uint16(b[6:])
	h.csumOffset = binary.NativeEndian.Uint16(b[8:])
}

func (h *virtioHdr) encode(b []byte) {
	_ = b[VirtioHeaderRoom-1]
	b[0], b[1] = h.flags, h.gsoType
	binary.NativeEndian.PutUint16(b[2:], h.hdrLen)
	binary.NativeEndian.PutUint16(b[4:], h.gsoSize)
	binary.NativeEndian.PutUint16(b[6:], h.csumStart)
	binary.NativeEndian.PutUint16(b[8:], h.csumOffset)
}

// Offsets of the checksum field within the transport header.
const (
	tcpCsumOffset = 16
	udpCsumOffset = 6
)

// completeChecksum fills in the checksum of a packet the kernel handed over
// with VIRTIO_NET_HDR_F_NEEDS_CSUM (CHECKSUM_PARTIAL): the field at
// start+off holds the pseudo-header sum, and the checksum covers
// p[start:]. It reports false for offsets outside the packet.
func completeChecksum(p []byte, start, off int) bool {
	at := start + off
	if start >= len(p) || at+2 > len(p) {
		return false
	}
	c := ^checksum(p[start:], 0)
	if c == 0 && off == udpCsumOffset {
		c = 0xffff // zero means "no checksum" in UDP
	}
	binary.BigEndian.PutUint16(p[at:], c)
	return true
}

// transportChecksum computes the TCP or UDP checksum of p, whose transport
// header starts at l4, and writes it into the header.
func transportChecksum(p []byte, l4 int, proto uint8) {
	var src, dst []byte
	if packet.IPVersion(p) == 4 {
		src, dst = p[12:16], p[16:20]
	} else {
		src, dst = p[8:24], p[24:40]
	}
	at := l4 + tcpCsumOffset
	if proto == packet.ProtoUDP {
		at = l4 + udpCsumOffset
	}
	p[at], p[at+1] = 0, 0
	c := ^checksum(p[l4:], packet.PseudoHeaderSum(src, dst, proto, len(p)-l4))
	if c == 0 && proto == packet.ProtoUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(p[at:], c)
}

// superPacket is a TSO or USO super-packet the kernel handed over, being
// split: its bytes lie in the first buffer (head, up to the buffer's room)
// and continue in the spill buffer.
type superPacket struct {
	head, spill []byte
	size        int    // bytes of the packet in head and spill together
	l4          int    // offset of the transport header (csum_start)
	hl          int    // bytes of IP and transport header
	gso         int    // payload bytes per segment
	proto       uint8  // packet.ProtoTCP or packet.ProtoUDP
	v4          bool   // IPv4 (else IPv6)
	segs        int    // segments
	seq         uint32 // TCP: the first segment's sequence number
	id          uint16 // IPv4: the first segment's identification
	// pseudo is the pseudo-header sum the kernel left in the checksum
	// field with NEEDS_CSUM (for the whole transport length), if
	// partial: it has the addresses the checksum covers, which for
	// IPv6 with a routing header is the final destination, not the
	// header's.
	pseudo  uint16
	partial bool
}

// parseSuper validates the virtio header h of a GSO packet of size bytes
// whose first len(head) bytes are in head, and describes its segments. It
// reports false for anything the kernel would not hand over: an unknown
// GSO type, a type that does not match the IP version, headers or the
// first segment beyond the first buffer, a zero segment size.
func parseSuper(h *virtioHdr, head, spill []byte, size int, sp *superPacket) bool {
	*sp = superPacket{head: head, spill: spill, size: size, l4: int(h.csumStart), gso: int(h.gsoSize)}
	if len(head) < packet.IPv4MinHeader || sp.gso == 0 {
		return false
	}
	v := packet.IPVersion(head)
	switch h.gsoType &^ gsoECN {
	case gsoTCPv4:
		sp.proto, sp.v4 = packet.ProtoTCP, true
		if v != 4 {
			return false
		}
	case gsoTCPv6:
		sp.proto = packet.ProtoTCP
		if v != 6 {
			return false
		}
	case gsoUDPL4:
		sp.proto, sp.v4 = packet.ProtoUDP, v == 4
		if v != 4 && v != 6 {
			return false
		}
	default:
		return false
	}
	minL4 := packet.IPv6Header
	if sp.v4 {
		minL4 = packet.IPv4(head).HeaderLength()
		if minL4 < packet.IPv4MinHeader {
			return false
		}
	}
	// hdr_len is not trusted: on the forwarding path the kernel sets it
	// to the whole linear part. The transport header says its length.
	if sp.l4 < minL4 || sp.l4+packet.UDPHeader > len(head) {
		return false
	}
	th := packet.UDPHeader
	if sp.proto == packet.ProtoTCP {
		if sp.l4+20 > len(head) {
			return false
		}
		th = int(head[sp.l4+12]>>4) * 4
		if th < 20 {
			return false
		}
		sp.seq = binary.BigEndian.Uint32(head[sp.l4+4:])
	}
	sp.hl = sp.l4 + th
	if sp.hl >= size || sp.hl+min(sp.gso, size-sp.hl) > len(head) {
		return false
	}
	if sp.v4 {
		sp.id = binary.BigEndian.Uint16(head[4:])
	}
	off := tcpCsumOffset
	if sp.proto == packet.ProtoUDP {
		off = udpCsumOffset
	}
	if h.flags&flagNeedsCsum != 0 && int(h.csumOffset) == off {
		sp.pseudo, sp.partial = binary.BigEndian.Uint16(head[sp.l4+off:]), true
	}
	sp.segs = (size - sp.hl + sp.gso - 1) / sp.gso
	return true
}

// segLen is the payload length of segment i.
func (sp *superPacket) segLen(i int) int {
	return min(sp.gso, sp.size-sp.hl-i*sp.gso)
}

// copySegment copies segment i (i > 0) into dst: the headers from the
// first segment and the payload from wherever it lies in head and spill.
// dst must have room for hl+segLen(i) bytes; it returns the packet's
// length. The headers are fixed up by finishSegment.
func (sp *superPacket) copySegment(dst []byte, i int) int {
	n := sp.segLen(i)
	copy(dst, sp.head[:sp.hl])
	from := sp.hl + i*sp.gso
	out := dst[sp.hl : sp.hl+n]
	if from < len(sp.head) {
		k := copy(out, sp.head[from:])
		out, from = out[k:], len(sp.head)
	}
	if len(out) > 0 {
		copy(out, sp.spill[from-len(sp.head):])
	}
	return sp.hl + n
}

// finishSegment makes p, segment i of the super-packet with its headers
// copied from the first, a packet of its own: lengths, the IPv4
// identification and checksum, the TCP sequence number and flags (FIN and
// PSH only on the last segment, CWR only on the first), and the transport
// checksum.
func (sp *superPacket) finishSegment(p []byte, i int) {
	if sp.v4 {
		ip := packet.IPv4(p)
		ip.SetTotalLength(uint16(len(p)))
		binary.BigEndian.PutUint16(p[4:], sp.id+uint16(i))
		ip.SetChecksum()
	} else {
		binary.BigEndian.PutUint16(p[4:], uint16(len(p)-packet.IPv6Header))
	}
	t := p[sp.l4:]
	if sp.proto == packet.ProtoTCP {
		binary.BigEndian.PutUint32(t[4:], sp.seq+uint32(i*sp.gso))
		const fin, psh, cwr = 0x01, 0x08, 0x80
		if i != sp.segs-1 {
			t[13] &^= fin | psh
		}
		if i != 0 {
			t[13] &^= cwr
		}
	} else {
		binary.BigEndian.PutUint16(t[4:], uint16(len(t)))
	}
	if !sp.partial {
		transportChecksum(p, sp.l4, sp.proto)
		return
	}
	// The kernel's pseudo-header sum, its length replaced by the
	// segment's (one's complement: add the complement to subtract).
	total, at := sp.size-sp.l4, tcpCsumOffset
	if sp.proto == packet.ProtoUDP {
		at = udpCsumOffset
	}
	t[at], t[at+1] = 0, 0
	init := uint32(sp.pseudo) + uint32(^uint16(total>>16)) + uint32(^uint16(total)) + uint32(len(t)>>16) + uint32(len(t)&0xffff)
	c := ^checksum(t, init)
	if c == 0 && sp.proto == packet.ProtoUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(t[at:], c)
}
