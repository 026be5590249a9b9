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
func (sa *SA) PrepareOutbound(p *packet.Buf, w *Work, op *cryptodev.Op) Reason {
	if sa.hardExpired() {
		return ReasonLifetime
	}
	if sa.seq >= sa.maxSeq {
		sa.exhausted.Store(true)
		return ReasonSeqExhausted
	}
	data := p.Bytes()
	var nh, tos uint8
	hl := 0 // transport: IP header length kept in front
	switch packet.IPVersion(data) {
	case 4:
		ip := packet.IPv4(data)
		if !ip.IsValid() || int(ip.TotalLength()) != len(data) {
			return ReasonMalformed
		}
		nh, tos = packet.ProtoIPv4, ip.TOS()
		if sa.cfg.Mode == Transport {
			if ip.FragmentOffset() != 0 || ip.MoreFragments() {
				return ReasonUnsupported // RFC 4303 section 3.3.4: transport mode applies to whole datagrams
			}
			nh, hl = ip.Protocol(), ip.HeaderLength()
		}
	case 6:
		ip := packet.IPv6(data)
		if !ip.IsValid() || packet.IPv6Header+int(ip.PayloadLength()) != len(data) {
			return ReasonMalformed
		}
		nh, tos = packet.ProtoIPv6, ip.TrafficClass()
		if sa.cfg.Mode == Transport {
			if isIPv6ExtHeader(ip.NextHeader()) {
				return ReasonUnsupported
			}
			nh, hl = ip.NextHeader(), packet.IPv6Header
		}
	default:
		return ReasonMalformed
	}

	info := sa.info
	plen := len(data) - hl
	padLen := -(plen + TrailerLen) & (info.BlockSize - 1) // block sizes are 4 or 16
	udp := 0
	if sa.cfg.Encap == EncapUDP {
		udp = packet.UDPHeader
	}
	outer := 0
	if sa.cfg.Mode == Tunnel {
		outer = packet.IPv4MinHeader
		if sa.cfg.Dst.Is6() {
			outer = packet.IPv6Header
		}
	}
	ehl := HeaderLen + info.IVLen
	if p.Headroom() < outer+udp+ehl || p.Tailroom() < padLen+TrailerLen+info.ICVLen {
		return ReasonNoRoom
	}
	total := outer + hl + udp + ehl + plen + padLen + TrailerLen + info.ICVLen
	limit := 0xffff // IPv4 total length, or IPv6 payload length
	if outer == packet.IPv6Header || (outer == 0 && packet.IPVersion(data) == 6) {
		limit += packet.IPv6Header
	}
	if total > limit {
		return ReasonNoRoom
	}

	if sa.seq >= sa.reserved.next && !sa.reserved.cover(sa.seq+1, sa.maxSeq) {
		return sa.reserved.refusal()
	}
	sa.seq++
	seq := sa.seq

	tr := p.Append(padLen + TrailerLen + info.ICVLen)
	for i := 0; i < padLen; i++ {
		tr[i] = byte(i + 1) // RFC 4303 section 2.4: 1, 2, 3, ...
	}
	tr[padLen] = byte(padLen)
	tr[padLen+1] = nh

	p.Prepend(outer + udp + ehl)
	data = p.Bytes()
	if hl > 0 {
		copy(data[:hl], data[udp+ehl:udp+ehl+hl]) // move the IP header forward
	}
	off := outer + hl + udp
	eh := data[off : off+ehl]
	binary.BigEndian.PutUint32(eh[0:], sa.cfg.SPI)
	binary.BigEndian.PutUint32(eh[4:], uint32(seq))
	iv := eh[HeaderLen:]
	switch {
	case info.AEAD:
		// RFC 4106 section 3.1 / RFC 7634 section 2 ask only that the IV
		// be unique under the key: a random epoch and a counter, not the
		// sequence number, whose persistence may fail (package doc).
		binary.BigEndian.PutUint64(iv, sa.nextAEADIV())
	case len(iv) == 16:
		binary.BigEndian.PutUint64(iv[0:], sa.ivSalt)
		binary.BigEndian.PutUint64(iv[8:], seq)
		sa.ivGen.Encrypt(iv, iv)
	}
	if sa.testIV != nil {
		copy(iv, sa.testIV)
	}

	*op = cryptodev.Op{Key: sa.cfg.Key, Dir: cryptodev.Encrypt}
	end := len(data) - info.ICVLen
	op.Src = data[off+ehl : end]
	op.Dst = op.Src
	op.Tag = data[end:]
	op.IV = iv
	sa.fillAAD(w, op, eh[:HeaderLen], seq)

	// Outer headers.
	if hl > 0 {
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
	} else {
		sa.writeOuter(data, outer, tos)
	}
	if udp > 0 {
		packet.UDP(data[off-udp:]).Encode(sa.udpSrc, sa.udpDst, uint16(len(data)-off+udp))
	}
	w.seq, w.espOff, w.n = seq, off, plen
	return ReasonNone
}

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

// buildOuterTemplate prepares the outer header of a tunnel SA, from its
// current outer addresses (SetOuter calls it again with the lock held).
func (sa *SA) buildOuterTemplate() {
	proto := uint8(packet.ProtoESP)
	if sa.cfg.Encap == EncapUDP {
		proto = packet.ProtoUDP
	}
	if sa.outerDst.Is4() {
		packet.IPv4(sa.outerTmpl[:20]).Encode(&packet.IPv4Fields{TTL: sa.cfg.TTL, Protocol: proto,
			Src: sa.outerSrc.As4(), Dst: sa.outerDst.As4()})
		sa.outerTmpl[10], sa.outerTmpl[11] = 0, 0
		sa.outerSum = uint32(packet.Checksum(sa.outerTmpl[:20], 0))
		return
	}
	packet.IPv6(sa.outerTmpl[:40]).Encode(&packet.IPv6Fields{NextHeader: proto, HopLimit: sa.cfg.TTL,
		Src: sa.outerSrc.As16(), Dst: sa.outerDst.As16()})
}

// writeOuter writes the tunnel's outer IP header into data[:outer] from the
// SA's template. The DSCP and ECN bits are copied from the inner header
// (RFC 4301 section 5.1.2.1, RFC 6040 normal mode); the outer IPv4 header
// never sets DF, so a too-big ESP packet can still be fragmented on its
// path.
func (sa *SA) writeOuter(data []byte, outer int, tos uint8) {
	if outer == packet.IPv4MinHeader {
		sa.ipID++
		h := data[:20]
		copy(h, sa.outerTmpl[:20])
		h[1] = tos
		binary.BigEndian.PutUint16(h[2:], uint16(len(data)))
		binary.BigEndian.PutUint16(h[4:], sa.ipID)
		sum := sa.outerSum + uint32(tos) + uint32(len(data)) + uint32(sa.ipID)
		sum = sum>>16 + sum&0xffff
		sum += sum >> 16
		binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
		return
	}
	h := data[:40]
	copy(h, sa.outerTmpl[:40])
	h[0] = 0x60 | tos>>4
	h[1] = tos << 4
	binary.BigEndian.PutUint16(h[4:], uint16(len(data)-packet.IPv6Header))
}

// FinishOutbound completes a packet after its op ran.
func (sa *SA) FinishOutbound(p *packet.Buf, w *Work, op *cryptodev.Op) Reason {
	return sa.finishOutbound(p, w, op, true)
}

// finishOutbound is FinishOutbound; udpSum says whether the IPv6 outer UDP
// checksum is needed (false when a socket sends the packet and the kernel
// computes its own).
func (sa *SA) finishOutbound(p *packet.Buf, w *Work, op *cryptodev.Op, udpSum bool) Reason {
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
