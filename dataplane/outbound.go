package dataplane

// Outbound: plaintext from a TUN queue to ESP on the wire, in one lane (one
// goroutine), with no handoff:
//
//  1. Read: one read of the TUN queue; a TSO super-packet arrives already
//     cut into segments (pktio/tun), up to the link's batch size.
//  2. Classify: each packet to its tunnel by route (or by policy), to the
//     tunnel's outbound SA, whose traffic selectors must hold it (RFC 7296
//     section 2.9: what the peer narrowed away is dropped as ts_mismatch,
//     not sent for the peer to discard); check the tunnel MTU
//     (pre-fragment, or answer with ICMP "too big").
//  3. Seal: the packets join one ESP batch per engine; a batch is submitted
//     when full and at the end of the read. The SA's lock is held while its
//     packets take sequence numbers (esp.Pipeline), not during the crypto.
//  4. Transmit: every sealed packet of the read goes out in one call per
//     link, on this lane's ESP-in-UDP socket (consecutive equal-sized
//     packets to one peer become one UDP GSO send) or a raw ESP socket.

import (
	"net/netip"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/sad"
	"github.com/sluicegw/sluice/spd"
)

// outbound carries one read of plaintext packets to completion (stages 2
// and 3; flush does 4).
func (ln *lane) outbound(db *sad.DB, pkts []*packet.Buf) {
	for _, p := range pkts {
		ln.counters.packets.inc()
		ln.counters.bytes.add(uint64(p.Len()))
		t, why := ln.tunnelOf(db, p.Bytes())
		if t == nil {
			ln.drop(p, why)
			continue
		}
		sa := t.Out()
		if sa == nil {
			ln.drop(p, ReasonNoSA)
			if f := ln.d.cfg.NoSA; f != nil {
				f(t)
			}
			continue
		}
		// A route to a tunnel whose selectors are its routes (a static
		// tunnel's) says all the check would.
		if ts := sa.TS; ts != nil && !(ln.classify == nil && ts.Routed()) &&
			!(spd.ExtractFlowKey(p.Bytes(), &ln.flow) && ts.Outbound(&ln.flow)) {
			ln.drop(p, ReasonTSMismatch)
			continue
		}
		if t.MTU > 0 && p.Len() > t.MTU {
			ln.oversize(t, sa, p)
			continue
		}
		ln.add(sa, p, esp.Outbound, nil)
	}
}

// tunnelOf classifies a plaintext packet: by policy when the lane has a
// classifier, else by the route table.
func (ln *lane) tunnelOf(db *sad.DB, data []byte) (*sad.Tunnel, Reason) {
	if ln.classify != nil {
		return ln.classify.Classify(db, data)
	}
	dst, ok := innerDst(data)
	if !ok {
		return nil, Reason(esp.ReasonMalformed)
	}
	if t := db.Route(dst); t != nil {
		return t, 0
	}
	return nil, ReasonNoRoute
}

// innerDst reads the destination of an IP packet.
func innerDst(b []byte) (netip.Addr, bool) {
	switch packet.IPVersion(b) {
	case 4:
		if len(b) >= packet.IPv4MinHeader {
			return packet.IPv4(b).Dst(), true
		}
	case 6:
		if len(b) >= packet.IPv6Header {
			return packet.IPv6(b).Dst(), true
		}
	}
	return netip.Addr{}, false
}

// emitOutbound puts the sealed packets of a completed batch on the
// transmit list of their link.
func (ln *lane) emitOutbound(b *batch) {
	for i, p := range b.Bufs {
		if r := b.Reasons[i]; r != esp.ReasonNone {
			ln.counters.drops.inc(Reason(r))
			ln.release = append(ln.release, p)
			continue
		}
		ln.counters.sealed.inc()
		switch {
		case b.SAs[i].Encap() == esp.EncapUDP && ln.net != nil:
			ln.txNet = append(ln.txNet, p)
		case packet.IPVersion(p.Bytes()) == 4 && ln.raw4 != nil:
			ln.txRaw4 = append(ln.txRaw4, p)
		case packet.IPVersion(p.Bytes()) == 6 && ln.raw6 != nil:
			ln.txRaw6 = append(ln.txRaw6, p)
		default:
			ln.counters.drops.inc(ReasonLinkError)
			ln.release = append(ln.release, p)
		}
	}
}
