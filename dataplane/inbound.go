package dataplane

// Inbound: ESP from the wire to plaintext on a TUN queue, in one lane (one
// goroutine), with no handoff:
//
//  1. Read: one read of an ESP-in-UDP socket (with UDP GRO, a run of
//     datagrams of one peer arrives as one and is cut into packets by
//     pktio/udp) or a raw ESP socket.
//  2. Parse and look up: the ESP header (and the non-ESP marker of RFC
//     3948), the SA by SPI.
//  3. Open: the packets join one ESP batch per engine. The SA's lock is
//     held for the replay pre-check before the crypto and for the
//     authoritative replay update after it (esp.Pipeline, DESIGN.md
//     decision 5), not during the crypto.
//  4. Check the inner packet against the traffic selectors of the SA that
//     opened it (RFC 4301 section 5.2: the source in the peer's, the
//     destination in ours, protocol and ports where they were narrowed),
//     and against its tunnel's policy, if any: a packet outside them is
//     dropped as policy_mismatch.
//  5. Transmit: every packet of the read goes to this lane's TUN queue in
//     one write, where runs of one flow are coalesced into super-packets
//     (pktio/tun), so the kernel's receive path runs once per run.

import (
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/sad"
	"github.com/sluicegw/sluice/spd"
)

// inbound carries one read of ESP packets to completion (stages 2 and 3;
// flush does 4 and 5).
func (ln *lane) inbound(db *sad.DB, pkts []*packet.Buf) {
	pp := &ln.parsed
	for _, p := range pkts {
		ln.counters.packets.inc()
		ln.counters.bytes.add(uint64(p.Len()))
		if why := esp.Parse(p.Bytes(), ln.d.cfg.NATTPorts, pp); why != esp.ReasonNone {
			ln.drop(p, Reason(why))
			continue
		}
		sa := db.Inbound(pp.SPI)
		if sa == nil || sa.Tunnel == nil {
			ln.drop(p, Reason(esp.ReasonUnknownSPI))
			continue
		}
		ln.add(sa, p, esp.Inbound, pp)
	}
}

// emitInbound puts the opened packets of a completed batch that pass their
// SA's traffic selectors and their tunnel's policy on the TUN transmit
// list.
func (ln *lane) emitInbound(b *batch) {
	check := ln.d.cfg.InboundCheck
	for i, p := range b.Bufs {
		if r := b.Reasons[i]; r != esp.ReasonNone {
			ln.counters.drops.inc(Reason(r))
			ln.release = append(ln.release, p)
			continue
		}
		ln.counters.opened.inc()
		sa := b.sas[i]
		if ts := sa.TS; ts != nil && !(spd.ExtractFlowKey(p.Bytes(), &ln.flow) && ts.Inbound(&ln.flow)) ||
			check != nil && !check(sa.Tunnel, p.Bytes()) {
			ln.counters.drops.inc(ReasonPolicyMismatch)
			ln.release = append(ln.release, p)
			continue
		}
		ln.txTun = append(ln.txTun, p)
	}
}
