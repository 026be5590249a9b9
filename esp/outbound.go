package esp

// Outbound processing (RFC 4303 section 3.3), in place:
//
//  1. Prepare: take the next sequence number (never wrapping), append padding,
//     pad length, next header and room for the ICV behind the packet, write the
//     ESP header and IV into the headroom (moving the IP header forward in
//     transport mode), write the outer IP (and UDP) header, and describe the
//     crypto as one op.
//  2. The engine encrypts and writes the ICV, here or on another core.
//  3. Finish: check the op's status, fill in the IPv6 UDP checksum, count.

import (
	"encoding/binary"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/packet"
)

// isIPv6ExtHeader reports whether nh is an IPv6 extension header that
// precedes ESP in transport mode (RFC 8200 section 4.1).
func isIPv6ExtHeader(nh uint8) bool {
	switch nh {
	case 0, 43, 44, 60, 51, 135, 139, 140:
		return true
	}
	return false
}

// PrepareOutbound turns the IP packet in p into an ESP packet waiting for
// encryption, and fills op. In tunnel mode p holds the inner packet; in
// transport mode the packet to protect. On a drop it returns the reason and
// leaves p's data unspecified; the caller counts it (Pipeline does).
//
// In tunnel mode the inner packet is neither moved nor copied: the
// headers come from the SA's template (one fixed-size copy, then the
// packet's lengths, sequence number and IV) and the padding from a
// constant pattern.
func (sa *SA) PrepareOutbound(p *packet.Buf, w *Work, op *cryptodev.Op) Reason {
	return sa.prepareOutboundLocked(p, w, op)
}

// prepareOutboundLocked is PrepareOutbound. The tunnel-mode path is
// written for the fewest instructions per packet: every per-SA value is
// computed when the SA is made, and what is rare (a lifetime, a
// reservation, a new IV epoch) costs a comparison when it does not
// happen.
func (sa *SA) prepareOutboundLocked(p *packet.Buf, w *Work, op *cryptodev.Op) Reason {
	if sa.cfg.Mode != Tunnel {
		return sa.prepareTransportLocked(p, w, op)
	}
	if r := sa.refuseLocked(); r != ReasonNone {
		return r
	}
	data := p.Bytes()
	var nh, tos uint8
	switch packet.IPVersion(data) {
	case 4:
		ip := packet.IPv4(data)
		if !ip.IsValid() || int(ip.TotalLength()) != len(data) {
			return ReasonMalformed
		}
		nh, tos = packet.ProtoIPv4, data[1]
	case 6:
		ip := packet.IPv6(data)
		if !ip.IsValid() || packet.IPv6Header+int(ip.PayloadLength()) != len(data) {
			return ReasonMalformed
		}
		nh, tos = packet.ProtoIPv6, ip.TrafficClass()
	default:
		return ReasonMalformed
	}
	plen := len(data)
	padLen := -(plen + TrailerLen) & sa.padMask
	tail := padLen + sa.tailLen
	front := sa.front
	if p.Headroom() < front || p.Tailroom() < tail || front+plen+tail > sa.limit {
		return ReasonNoRoom
	}
	if sa.seq >= sa.reserved.next && !sa.reserved.cover(sa.seq+1, sa.maxSeq) {
		return sa.reserved.refusal()
	}
	sa.seq++
	seq := sa.seq

	// Padding (RFC 4303 section 2.4: 1, 2, 3, ...), pad length and next
	// header. The pattern is stored whole: what it writes beyond the
	// padding is the trailer's and the ICV's room (at least 18 bytes:
	// every suite's ICV has 16 or more, newSA checks), written next and by
	// the engine.
	tr := p.Append(tail)
	*(*[16]byte)(tr) = padPattern
	tr[padLen] = byte(padLen)
	tr[padLen+1] = nh

	// Headers: the template, then the lengths and the sequence number.
	// The DSCP and ECN bits are copied from the inner header (RFC 4301
	// section 5.1.2.1, RFC 6040 normal mode); the outer IPv4 header never
	// sets DF, so a too-big ESP packet can still be fragmented on its
	// path.
	p.Prepend(front)
	data = p.Bytes()
	n := len(data)
	t := &sa.hdrTmpl
	switch sa.hdrKind {
	case tmplV4:
		copyWords(data[:28], t[:28])
	case tmplV4UDP:
		copyWords(data[:36], t[:36])
		binary.BigEndian.PutUint16(data[24:], uint16(n-packet.IPv4MinHeader))
	case tmplV6:
		copyWords(data[:48], t[:48])
	default:
		copyWords(data[:56], t[:56])
		binary.BigEndian.PutUint16(data[44:], uint16(n-packet.IPv6Header))
	}
	off := sa.outerLen + sa.udpLen // the ESP header
	binary.BigEndian.PutUint32(data[off+4:], uint32(seq))
	if sa.outerLen == packet.IPv4MinHeader {
		sa.ipID++
		data[1] = tos
		binary.BigEndian.PutUint16(data[2:], uint16(n))
		binary.BigEndian.PutUint16(data[4:], sa.ipID)
		sum := sa.outerSum + uint32(tos) + uint32(n) + uint32(sa.ipID)
		sum = sum>>16 + sum&0xffff
		sum += sum >> 16
		binary.BigEndian.PutUint16(data[10:], ^uint16(sum))
	} else {
		data[0] = 0x60 | tos>>4
		data[1] = tos << 4
		binary.BigEndian.PutUint16(data[4:], uint16(n-packet.IPv6Header))
	}

	iv := data[off+HeaderLen : front]
	if sa.info.AEAD && sa.ivCount < 1<<32 && sa.testIV == nil {
		// nextAEADIV, inline: the epoch has IVs left.
		binary.BigEndian.PutUint64(iv, uint64(sa.ivEpoch)<<32|sa.ivCount)
		sa.ivCount++
	} else {
		sa.writeIVLocked(iv, seq)
	}
	end := n - sa.info.ICVLen
	fillOp(op, sa.cfg.Key, cryptodev.Encrypt, data[front:end], data[end:], iv)
	sa.fillAAD(w, op, data[off:off+HeaderLen], seq)
	w.seq, w.espOff, w.n = seq, off, plen
	if sa.limited {
		sa.takeOffLocked(plen)
	}
	return ReasonNone
}

// copyWords copies src into dst, of the same length, a multiple of 4, in
// 8-byte words: for a header template it is cheaper than the memmove call
// the compiler makes for a copy of a fixed-size array between slices.
func copyWords(dst, src []byte) {
	for len(src) >= 8 && len(dst) >= 8 {
		binary.LittleEndian.PutUint64(dst, binary.LittleEndian.Uint64(src))
		dst, src = dst[8:], src[8:]
	}
	if len(src) >= 4 && len(dst) >= 4 {
		binary.LittleEndian.PutUint32(dst, binary.LittleEndian.Uint32(src))
	}
}

// writeIVLocked writes a packet's IV: for an AEAD, the SA's epoch and
// counter (nextAEADIV; RFC 4106 section 3.1 and RFC 7634 section 2 ask
// only that it be unique under the key, so it does not depend on the
// sequence number, whose persistence may fail, see the package doc); for
// CBC, the sequence number encrypted under the SA's own IV key.
func (sa *SA) writeIVLocked(iv []byte, seq uint64) {
	switch {
	case sa.info.AEAD:
		binary.BigEndian.PutUint64(iv, sa.nextAEADIV())
	case len(iv) == 16:
		binary.BigEndian.PutUint64(iv[0:], sa.ivSalt)
		binary.BigEndian.PutUint64(iv[8:], seq)
		sa.ivGen.Encrypt(iv, iv)
	}
	if sa.testIV != nil {
		copy(iv, sa.testIV)
	}
}

// fillOp describes a packet's crypto in op: every field is set (the op
// is reused batch after batch), one by one, which is cheaper than
// clearing the whole struct first.
// The caller adds the associated data (fillAAD).
func fillOp(op *cryptodev.Op, key *cryptodev.Key, dir cryptodev.Direction, text, tag, iv []byte) {
	op.Key, op.Dir, op.Status = key, dir, cryptodev.StatusPending
	op.Src = text
	op.Dst = text
	op.Tag = tag
	op.IV = iv
	op.AuthTrailer = nil
	op.Hash, op.PSS, op.N = 0, false, 0
}

// refuseLocked says why the SA takes no more packets, if it does not: its
// hard lifetime is over, or its sequence numbers are used up. The common
// case (no lifetime, numbers left) is inlined.
func (sa *SA) refuseLocked() Reason {
	if !sa.limited && sa.seq < sa.maxSeq {
		return ReasonNone
	}
	return sa.refuseSlowLocked()
}

func (sa *SA) refuseSlowLocked() Reason {
	if sa.hardExpired() {
		return ReasonLifetime
	}
	if sa.seq >= sa.maxSeq {
		sa.exhausted.Store(true)
		return ReasonSeqExhausted
	}
	return ReasonNone
}

// prepareTransportLocked is PrepareOutbound in transport mode.
func (sa *SA) prepareTransportLocked(p *packet.Buf, w *Work, op *cryptodev.Op) Reason {
	if r := sa.refuseLocked(); r != ReasonNone {
		return r
	}
	data := p.Bytes()
	var nh uint8
	var hl int      // the IP header's length, kept in front
	limit := 0xffff // IPv4 total length, or IPv6 payload length
	switch packet.IPVersion(data) {
	case 4:
		ip := packet.IPv4(data)
		if !ip.IsValid() || int(ip.TotalLength()) != len(data) {
			return ReasonMalformed
		}
		if ip.FragmentOffset() != 0 || ip.MoreFragments() {
			return ReasonUnsupported // RFC 4303 section 3.3.4: transport mode applies to whole datagrams
		}
		nh, hl = ip.Protocol(), ip.HeaderLength()
	case 6:
		ip := packet.IPv6(data)
		if !ip.IsValid() || packet.IPv6Header+int(ip.PayloadLength()) != len(data) {
			return ReasonMalformed
		}
		if isIPv6ExtHeader(ip.NextHeader()) {
			return ReasonUnsupported
		}
		nh, hl = ip.NextHeader(), packet.IPv6Header
		limit += packet.IPv6Header
	default:
		return ReasonMalformed
	}

	plen := len(data) - hl
	padLen := -(plen + TrailerLen) & sa.padMask
	udp, ehl := sa.udpLen, sa.ehl
	if p.Headroom() < udp+ehl || p.Tailroom() < padLen+sa.tailLen {
		return ReasonNoRoom
	}
	if hl+udp+ehl+plen+padLen+sa.tailLen > limit {
		return ReasonNoRoom
	}
	if sa.seq >= sa.reserved.next && !sa.reserved.cover(sa.seq+1, sa.maxSeq) {
		return sa.reserved.refusal()
	}
	sa.seq++
	seq := sa.seq

	tr := p.Append(padLen + sa.tailLen)
	*(*[16]byte)(tr) = padPattern // as in tunnel mode
	tr[padLen] = byte(padLen)
	tr[padLen+1] = nh

	p.Prepend(udp + ehl)
	data = p.Bytes()
	copy(data[:hl], data[udp+ehl:udp+ehl+hl]) // move the IP header forward
	off := hl + udp
	binary.BigEndian.PutUint32(data[off:], sa.cfg.SPI)
	binary.BigEndian.PutUint32(data[off+4:], uint32(seq))
	switch packet.IPVersion(data) {
	case 4:
		ip := packet.IPv4(data)
		ip.SetTotalLength(uint16(len(data)))
		if udp > 0 {
			ip.SetProtocol(packet.ProtoUDP)
		} else {
			ip.SetProtocol(packet.ProtoESP)
		}
		ip.SetChecksum()
	case 6:
		ip := packet.IPv6(data)
		ip.SetPayloadLength(uint16(len(data) - packet.IPv6Header))
		if udp > 0 {
			ip.SetNextHeader(packet.ProtoUDP)
		} else {
			ip.SetNextHeader(packet.ProtoESP)
		}
	}
	if udp > 0 {
		packet.UDP(data[hl:]).Encode(sa.udpSrc, sa.udpDst, uint16(len(data)-hl))
	}
	iv := data[off+HeaderLen : off+ehl]
	sa.writeIVLocked(iv, seq)
	end := len(data) - sa.info.ICVLen
	fillOp(op, sa.cfg.Key, cryptodev.Encrypt, data[off+ehl:end], data[end:], iv)
	sa.fillAAD(w, op, data[off:off+HeaderLen], seq)
	w.seq, w.espOff, w.n = seq, off, plen
	if sa.limited {
		sa.takeOffLocked(plen)
	}
	return ReasonNone
}

// padPattern is ESP's padding (RFC 4303 section 2.4), as long as the
// longest: 15 bytes for a 16-byte block, and a sixteenth.
var padPattern = [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

// fillAAD sets the op's associated data for the suite: the ESP header,
// with the ESN high bits between SPI and sequence number for AEAD
// (RFC 4106 section 5) or after the ciphertext for HMAC (RFC 4303
// section 3.3.2.1).
func (sa *SA) fillAAD(w *Work, op *cryptodev.Op, hdr []byte, seq uint64) {
	op.AAD = hdr
	if !sa.cfg.ESN {
		return
	}
	if sa.info.AEAD {
		copy(w.aad[0:4], hdr[0:4])
		binary.BigEndian.PutUint32(w.aad[4:], uint32(seq>>32))
		copy(w.aad[8:12], hdr[4:8])
		op.AAD = w.aad[:]
		return
	}
	binary.BigEndian.PutUint32(w.seqHi[:], uint32(seq>>32))
	op.AuthTrailer = w.seqHi[:]
}

// Layouts of an outbound tunnel SA's header template (SA.hdrTmpl): the
// outer IP header, the UDP header with EncapUDP, and the ESP header
// without its IV (SPI and a zero sequence number).
const (
	tmplV4    = iota // IPv4, ESP: 20 + 8 bytes
	tmplV4UDP        // IPv4, UDP, ESP: 20 + 8 + 8
	tmplV6           // IPv6, ESP: 40 + 8
	tmplV6UDP        // IPv6, UDP, ESP: 40 + 8 + 8
	tmplMax   = packet.IPv6Header + packet.UDPHeader + HeaderLen
)

// buildOuterTemplate prepares the header template of a tunnel SA, from
// its current outer addresses and ports (SetOuter calls it again with the
// lock held).
func (sa *SA) buildOuterTemplate() {
	proto := uint8(packet.ProtoESP)
	if sa.cfg.Encap == EncapUDP {
		proto = packet.ProtoUDP
	}
	t := &sa.hdrTmpl
	clear(t[:])
	if sa.outerDst.Is4() {
		packet.IPv4(t[:20]).Encode(&packet.IPv4Fields{TTL: sa.cfg.TTL, Protocol: proto,
			Src: sa.outerSrc.As4(), Dst: sa.outerDst.As4()})
		t[10], t[11] = 0, 0
		sa.outerSum = uint32(packet.Checksum(t[:20], 0))
		sa.hdrKind = tmplV4
	} else {
		packet.IPv6(t[:40]).Encode(&packet.IPv6Fields{NextHeader: proto, HopLimit: sa.cfg.TTL,
			Src: sa.outerSrc.As16(), Dst: sa.outerDst.As16()})
		sa.hdrKind = tmplV6
	}
	off := sa.outerLen
	if sa.cfg.Encap == EncapUDP {
		u := packet.UDP(t[off : off+packet.UDPHeader])
		u.Encode(sa.udpSrc, sa.udpDst, 0) // checksum 0: none (IPv4) or filled in by Finish (IPv6)
		off += packet.UDPHeader
		sa.hdrKind++
	}
	binary.BigEndian.PutUint32(t[off:], sa.cfg.SPI)
}

// FinishOutbound completes a packet after its op ran.
// The packet is added to Counters at once.
func (sa *SA) FinishOutbound(p *packet.Buf, w *Work, op *cryptodev.Op) Reason {
	r := sa.finishOutbound(p, w, op, true)
	sa.publishLocked()
	return r
}

// finishOutbound is FinishOutbound; udpSum says whether the IPv6 outer UDP
// checksum is needed (false when a socket sends the packet and the kernel
// computes its own).
func (sa *SA) finishOutbound(p *packet.Buf, w *Work, op *cryptodev.Op, udpSum bool) Reason {
	sa.landLocked(w)
	if op.Status != cryptodev.StatusOK {
		return ReasonCryptoError
	}
	if udpSum && sa.cfg.Encap == EncapUDP {
		data := p.Bytes()
		if packet.IPVersion(data) == 6 {
			// RFC 8200 section 8.1: UDP over IPv6 carries a checksum.
			packet.UDP(data[w.espOff-packet.UDPHeader:]).SetChecksumIPv6(data[8:24], data[24:40])
		}
	}
	sa.account(w.n)
	return ReasonNone
}
