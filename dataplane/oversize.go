package dataplane

// Plaintext packets larger than the tunnel MTU (the underlay MTU less the
// ESP overhead). IPv4 without DF is fragmented before encryption when so
// configured (RFC 4459 section 3, "pre-fragmentation"), so the peer
// reassembles nothing and the ESP packets fit the path. IPv4 with DF, and
// all IPv6, get an ICMP "fragmentation needed" / ICMPv6 "packet too big"
// (RFC 1191, RFC 8201) back into the plaintext side, built in the packet's
// own buffer.
//
// The error's source is the packet's destination, as if the router that
// could not forward it sat at the tunnel's far end (RFC 4459 section 3:
// the encapsulator reports the inner MTU to the source). The kernel takes
// what the TUN device hands it as arriving from outside: an error from
// one of its own addresses (the TUN's) is a martian that it drops
// unread, and the sender, which never learns the MTU, resends the same
// packet until it gives up. The destination is routed into the tunnel,
// so the error passes reverse path filtering too.

import (
	"encoding/binary"
	"net/netip"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/sad"
)

func (ln *lane) oversize(t *sad.Tunnel, sa *sad.SA, p *packet.Buf) {
	data := p.Bytes()
	if packet.IPVersion(data) == 4 {
		ip := packet.IPv4(data)
		if !ip.IsValid() {
			ln.drop(p, Reason(esp.ReasonMalformed))
			return
		}
		if !ip.DontFragment() && ln.d.cfg.Oversize == OversizeFragment {
			ln.fragment(t, sa, p)
			return
		}
	}
	if !ln.tooBig(p, t.MTU) {
		ln.drop(p, ReasonTooBig)
		return
	}
	ln.counters.rxDrops.inc(ReasonTooBig)
	ln.txTun = append(ln.txTun, p)
}

// fragment splits an IPv4 packet into fragments of at most the tunnel MTU
// and hands each to ESP; the original buffer carries the first.
func (ln *lane) fragment(t *sad.Tunnel, sa *sad.SA, p *packet.Buf) {
	data := p.Bytes()
	ip := packet.IPv4(data)
	hl := ip.HeaderLength()
	chunk := (t.MTU - hl) &^ 7
	payload := len(data) - hl
	if chunk <= 0 {
		ln.drop(p, ReasonTooBig)
		return
	}
	nfrag := (payload + chunk - 1) / chunk
	if nfrag > len(ln.frags) {
		ln.drop(p, ReasonTooBig)
		return
	}
	pool := ln.d.cfg.Pool
	extra := ln.frags[:nfrag-1]
	if got := pool.GetN(extra); got < len(extra) {
		pool.PutN(extra[:got])
		ln.drop(p, ReasonNoBuffer)
		return
	}
	baseOff := ip.FragmentOffset()
	lastMF := ip.MoreFragments()
	for k := nfrag - 1; k >= 0; k-- { // the last ones first: the first fragment is cut from p in place
		start := k * chunk
		n := min(chunk, payload-start)
		var f []byte
		if k == 0 {
			p.SetWindow(p.Offset(), hl+n)
			f = p.Bytes()
		} else {
			b := extra[k-1]
			b.Reset(pool.Headroom())
			f = b.Append(hl + n)
			copy(f, data[:hl])
			copy(f[hl:], data[hl+start:hl+start+n])
		}
		fi := packet.IPv4(f)
		fi.SetTotalLength(uint16(hl + n))
		mf := k < nfrag-1 || lastMF
		flags := uint16(baseOff) + uint16(start/8)
		if mf {
			flags |= 0x2000
		}
		binary.BigEndian.PutUint16(f[6:], flags)
		fi.SetChecksum()
	}
	ln.add(sa, p, esp.Outbound, nil)
	for _, b := range extra {
		ln.add(sa, b, esp.Outbound, nil)
	}
	clear(extra)
}

// tooBig rewrites p in place into the ICMP error that tells its sender the
// tunnel MTU. It returns false when no error may be sent (the packet is
// itself an ICMP error, or malformed).
func (ln *lane) tooBig(p *packet.Buf, mtu int) bool {
	data := p.Bytes()
	switch packet.IPVersion(data) {
	case 4:
		ip := packet.IPv4(data)
		hl := ip.HeaderLength()
		if !ip.IsValid() || ip.FragmentOffset() != 0 || isICMPError(ip.Protocol(), data[hl:]) || p.Headroom() < 28 {
			return false
		}
		src, dst := ip.Dst(), ip.Src()
		if !unicast(src) || !unicast(dst) { // RFC 1812 section 4.3.2.7
			return false
		}
		quote := min(len(data), hl+8) // RFC 792: header + 64 bits
		p.SetWindow(p.Offset(), quote)
		p.Prepend(28)
		out := p.Bytes()
		packet.IPv4(out).Encode(&packet.IPv4Fields{Length: uint16(len(out)), TTL: 64, Protocol: packet.ProtoICMP,
			Src: src.As4(), Dst: dst.As4()})
		icmp := out[20:]
		icmp[0], icmp[1] = 3, 4 // destination unreachable, fragmentation needed
		icmp[2], icmp[3], icmp[4], icmp[5] = 0, 0, 0, 0
		binary.BigEndian.PutUint16(icmp[6:], uint16(mtu))
		binary.BigEndian.PutUint16(icmp[2:], ^packet.Checksum(icmp, 0))
		return true
	case 6:
		ip := packet.IPv6(data)
		if len(data) < packet.IPv6Header || isICMPError6(ip.NextHeader(), data[packet.IPv6Header:]) || p.Headroom() < 48 {
			return false
		}
		src, dst := ip.Dst(), ip.Src()
		if !unicast(src) || !unicast(dst) { // RFC 4443 section 2.2: never from a multicast address
			return false
		}
		quote := min(len(data), 1280-48) // RFC 4443 section 2.4 (c)
		p.SetWindow(p.Offset(), quote)
		p.Prepend(48)
		out := p.Bytes()
		packet.IPv6(out).Encode(&packet.IPv6Fields{PayloadLength: uint16(len(out) - 40), NextHeader: packet.ProtoICMPv6,
			HopLimit: 64, Src: src.As16(), Dst: dst.As16()})
		icmp := out[40:]
		icmp[0], icmp[1], icmp[2], icmp[3] = 2, 0, 0, 0 // packet too big
		binary.BigEndian.PutUint32(icmp[4:], uint32(mtu))
		sum := packet.PseudoHeaderSum(out[8:24], out[24:40], packet.ProtoICMPv6, len(icmp))
		binary.BigEndian.PutUint16(icmp[2:], ^packet.Checksum(icmp, sum))
		return true
	}
	return false
}

// unicast reports an address an ICMP error may come from and go to: not
// unspecified, multicast or the IPv4 limited broadcast.
func unicast(a netip.Addr) bool {
	return !a.IsUnspecified() && !a.IsMulticast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// isICMPError reports an ICMPv4 error message, to which no error is sent
// (RFC 1812 section 4.3.2.7).
func isICMPError(proto uint8, l4 []byte) bool {
	if proto != packet.ProtoICMP || len(l4) == 0 {
		return false
	}
	switch l4[0] {
	case 3, 4, 5, 11, 12:
		return true
	}
	return false
}

// isICMPError6 reports an ICMPv6 error message (types below 128, RFC 4443
// section 2.4 (e)).
func isICMPError6(nh uint8, l4 []byte) bool {
	return nh == packet.ProtoICMPv6 && len(l4) > 0 && l4[0] < 128
}
