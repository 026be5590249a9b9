package esp

// Inbound processing (RFC 4303 section 3.4), in place:
//
//  1. Parse: outer IPv4/IPv6, ESP-in-UDP framing (non-ESP marker and NAT
//     keepalive recognised), SPI. The caller looks the SA up.
//  2. Prepare: length checks, anti-replay pre-check that also infers the ESN
//     high bits (RFC 4303 Appendix A), and the op.
//  3. The engine verifies the ICV and decrypts, here or on another core.
//  4. Finish, in order: status, authoritative replay check-and-advance,
//     padding and next header, and the inner packet (tunnel) or rebuilt IP
//     packet (transport) left as the buffer's data.

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/packet"
)

// Parsed is what Parse learns about an inbound packet.
type Parsed struct {
	Src, Dst     netip.Addr
	SPI          uint32
	IPHdrLen     int  // length of the outer IP header, IPv6 extension headers included
	NHOff        int  // offset of the protocol / next-header byte that announced ESP (or UDP)
	ESPOff       int  // offset of the ESP header in the packet
	End          int  // end of the IP packet (its total length)
	UDP          bool // ESP-in-UDP (RFC 3948)
	SPort, DPort uint16
}

// Parse classifies an IP packet. natt lists the UDP ports on which ESP-in-UDP
// is expected (usually just 4500); a UDP packet to or from one of them is
// ESP unless it carries the non-ESP marker (ReasonIKE) or is a NAT-keepalive
// (ReasonKeepalive). It fills pp and returns ReasonNone for an ESP packet.
// It does not allocate.
func Parse(data []byte, natt []uint16, pp *Parsed) Reason {
	*pp = Parsed{}
	var proto uint8
	switch packet.IPVersion(data) {
	case 4:
		ip := packet.IPv4(data)
		if !ip.IsValid() || !ipv4ChecksumValid(ip) {
			return ReasonMalformed
		}
		if ip.MoreFragments() || ip.FragmentOffset() != 0 {
			return ReasonFragment
		}
		pp.Src, pp.Dst = ip.Src(), ip.Dst()
		pp.IPHdrLen, pp.End = ip.HeaderLength(), int(ip.TotalLength())
		proto = ip.Protocol()
		pp.NHOff = 9
	case 6:
		ip := packet.IPv6(data)
		if !ip.IsValid() {
			return ReasonMalformed
		}
		pp.Src, pp.Dst = ip.Src(), ip.Dst()
		pp.IPHdrLen, pp.End = packet.IPv6Header, packet.IPv6Header+int(ip.PayloadLength())
		proto = ip.NextHeader()
		pp.NHOff = 6
		// Walk the extension headers that may precede ESP (RFC 8200
		// section 4.1): hop-by-hop, routing and destination options.
		for proto == 0 || proto == 43 || proto == 60 {
			off := pp.IPHdrLen
			if off+8 > pp.End {
				return ReasonMalformed
			}
			pp.NHOff = off
			proto = data[off]
			pp.IPHdrLen += (int(data[off+1]) + 1) * 8
			if pp.IPHdrLen > pp.End {
				return ReasonMalformed
			}
		}
		if proto == 44 {
			return ReasonFragment
		}
	default:
		return ReasonMalformed
	}
	off := pp.IPHdrLen
	switch proto {
	case packet.ProtoESP:
	case packet.ProtoUDP:
		if pp.End-off < packet.UDPHeader {
			return ReasonMalformed
		}
		u := packet.UDP(data[off:pp.End])
		if int(u.Length()) != len(u) {
			return ReasonMalformed
		}
		pp.SPort, pp.DPort = u.SrcPort(), u.DstPort()
		if !hasPort(natt, pp.SPort) && !hasPort(natt, pp.DPort) {
			return ReasonNotESP
		}
		pp.UDP = true
		off += packet.UDPHeader
		pl := data[off:pp.End]
		switch {
		case len(pl) == 1 && pl[0] == 0xff:
			return ReasonKeepalive // RFC 3948 section 2.3
		case len(pl) >= 4 && pl[0]|pl[1]|pl[2]|pl[3] == 0:
			return ReasonIKE // RFC 3948 section 2.2: non-ESP marker
		}
	default:
		return ReasonNotESP
	}
	if pp.End-off < HeaderLen {
		return ReasonMalformed
	}
	pp.ESPOff = off
	pp.SPI = binary.BigEndian.Uint32(data[off:])
	return ReasonNone
}

// ipv4ChecksumValid is packet.IPv4.ChecksumValid, with the common
// 20-byte header summed in five 32-bit words (their sum folds to the sum
// of the 16-bit words, RFC 1071 section 2).
func ipv4ChecksumValid(ip packet.IPv4) bool {
	if ip.HeaderLength() != packet.IPv4MinHeader || len(ip) < packet.IPv4MinHeader {
		return ip.ChecksumValid()
	}
	s := uint64(binary.BigEndian.Uint32(ip[0:])) + uint64(binary.BigEndian.Uint32(ip[4:])) +
		uint64(binary.BigEndian.Uint32(ip[8:])) + uint64(binary.BigEndian.Uint32(ip[12:])) +
		uint64(binary.BigEndian.Uint32(ip[16:]))
	s = s>>32 + s&0xffffffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	return s == 0xffff
}

func hasPort(ports []uint16, p uint16) bool {
	for _, x := range ports {
		if x == p {
			return true
		}
	}
	return false
}

// PrepareInbound checks the ESP packet in p (as Parse described it in pp)
// and fills op to verify and decrypt it in place.
func (sa *SA) PrepareInbound(p *packet.Buf, pp *Parsed, w *Work, op *cryptodev.Op) Reason {
	if sa.hardExpired() {
		return ReasonLifetime
	}
	if extra := p.Len() - pp.End; extra > 0 {
		p.TrimBack(extra) // link-layer padding after the IP packet
	}
	data := p.Bytes()
	if len(data) != pp.End || pp.ESPOff+HeaderLen > pp.End {
		return ReasonMalformed
	}
	info := sa.info
	ehl := HeaderLen + info.IVLen
	ct := pp.End - pp.ESPOff - ehl - info.ICVLen
	// RFC 4303 section 2.4: the ciphertext ends on a 4-byte boundary, and on
	// the cipher's block boundary for block ciphers.
	if ct < TrailerLen || ct&sa.padMask != 0 {
		return ReasonBadLength
	}
	eh := data[pp.ESPOff : pp.ESPOff+ehl]
	seq, ok := sa.window.Check(binary.BigEndian.Uint32(eh[4:]), sa.cfg.ESN)
	if !ok {
		return sa.replayReason(seq)
	}
	start := pp.ESPOff + ehl
	fillOp(op, sa.cfg.Key, cryptodev.Decrypt, data[start:start+ct], data[start+ct:pp.End], eh[HeaderLen:])
	sa.fillAAD(w, op, eh[:HeaderLen], seq)
	w.seq, w.espOff, w.hdrLen, w.nhOff = seq, pp.ESPOff, pp.IPHdrLen, pp.NHOff
	return ReasonNone
}

// FinishInbound completes a packet after its op ran. On success p's data is
// the inner IP packet (tunnel mode) or the rebuilt IP packet (transport
// mode). The packet is added to Counters at once.
func (sa *SA) FinishInbound(p *packet.Buf, w *Work, op *cryptodev.Op) Reason {
	r := sa.finishInbound(p, w, op)
	sa.publishLocked()
	return r
}

// finishInbound is FinishInbound; the packet is counted by the next
// publishLocked (Unlock).
func (sa *SA) finishInbound(p *packet.Buf, w *Work, op *cryptodev.Op) Reason {
	switch op.Status {
	case cryptodev.StatusOK:
	case cryptodev.StatusAuthFailed:
		return ReasonAuthFailed
	default:
		return ReasonCryptoError
	}
	if w.seq > sa.reserved.next && sa.window.Size() > 0 {
		// Record a bound above w.seq before the window moves there; only
		// authenticated packets get here, so a forger cannot make us
		// write. w.seq is above the window's top, so Update accepts it.
		if !sa.reserved.cover(w.seq, sa.maxSeq) {
			return sa.reserved.refusal()
		}
	}
	if !sa.window.Update(w.seq) {
		return sa.replayReason(w.seq)
	}
	pt := op.Dst
	n := len(pt)
	padLen := int(pt[n-2])
	nh := pt[n-1]
	if padLen+TrailerLen > n {
		return ReasonBadPadding
	}
	pad := pt[n-TrailerLen-padLen : n-TrailerLen]
	for i, b := range pad {
		if b != byte(i+1) {
			return ReasonBadPadding
		}
	}
	inner := pt[:n-TrailerLen-padLen]
	if nh == packet.ProtoNoNext {
		return ReasonDummy
	}
	data := p.Bytes()
	start := w.espOff + HeaderLen + sa.info.IVLen
	if sa.cfg.Mode == Tunnel {
		l, ok := innerLength(inner, nh)
		if !ok {
			return ReasonBadInner
		}
		// Anything after the inner packet is TFC padding (RFC 4303
		// section 2.7): tolerated and dropped.
		p.SetWindow(p.Offset()+start, l)
		sa.account(l)
		return ReasonNone
	}
	// Transport: put the IP header right in front of the payload.
	hl := w.hdrLen
	ns := start - hl
	copy(data[ns:start], data[:hl])
	switch packet.IPVersion(data[ns:]) {
	case 4:
		ip := packet.IPv4(data[ns:])
		ip.SetProtocol(nh)
		ip.SetTotalLength(uint16(hl + len(inner)))
		ip.SetChecksum()
	case 6:
		data[ns+w.nhOff] = nh // the fixed header's or the last extension header's
		packet.IPv6(data[ns:]).SetPayloadLength(uint16(hl - packet.IPv6Header + len(inner)))
	}
	p.SetWindow(p.Offset()+ns, hl+len(inner))
	sa.account(len(inner))
	return ReasonNone
}

// innerLength validates a tunnel-mode inner packet and returns its length
// without TFC padding.
func innerLength(b []byte, nh uint8) (int, bool) {
	switch nh {
	case packet.ProtoIPv4:
		ip := packet.IPv4(b)
		if !ip.IsValid() {
			return 0, false
		}
		return int(ip.TotalLength()), true
	case packet.ProtoIPv6:
		ip := packet.IPv6(b)
		if !ip.IsValid() {
			return 0, false
		}
		return packet.IPv6Header + int(ip.PayloadLength()), true
	}
	return 0, false
}

// replayReason is the reason a replayed packet with number seq is
// dropped for: ReasonTakeover at or below where a takeover resumed the SA
// and within TakeoverWindow of it (the peer's packets that the old owner
// never accepted arrive then, beside replays), ReasonReplay otherwise.
func (sa *SA) replayReason(seq uint64) Reason {
	if seq != 0 && seq <= sa.resumedAt && leaseNow().Before(sa.resumedUntil) {
		return ReasonTakeover
	}
	return ReasonReplay
}

// TakeoverWindow is how long after a takeover (SA.Resume) the packets it
// refuses are counted as ReasonTakeover: the peer passes the replicated
// bound within a lease step (at most LeaseStepMax of traffic), and a
// replay of old packets later is an ordinary one.
const TakeoverWindow = time.Second
