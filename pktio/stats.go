package pktio

import "sync/atomic"

// LinkStats are a Link's counters. The link's reader and writer add to them
// atomically, once per batch; anyone may read them at any time (Snapshot
// gives a consistent-enough copy for display and tests).
type LinkStats struct {
	RxPackets atomic.Uint64 // packets delivered by Read
	RxBytes   atomic.Uint64 // bytes delivered by Read (data windows, synthesised headers included)
	TxPackets atomic.Uint64 // packets Write handed to the kernel (or to the pipe's peer)
	TxBytes   atomic.Uint64 // bytes of those packets (data windows as given to Write)

	// Receive drops.
	RxErrors    atomic.Uint64 // receive calls that failed, or packets lost inside the backend (bad offload metadata)
	RxShort     atomic.Uint64 // packets longer than the buffer's tailroom, dropped
	RxInvalid   atomic.Uint64 // packets dropped as malformed (wrong family, inconsistent lengths)
	RxIKE       atomic.Uint64 // udp: packets with the non-ESP marker (IKE), not delivered
	RxKeepalive atomic.Uint64 // udp: NAT-keepalives (one byte 0xff), not delivered
	RxGRO       atomic.Uint64 // udp: packets that arrived as segments of a GRO super-datagram (delivered; not a drop)

	// Transmit drops.
	TxErrors  atomic.Uint64 // packets the kernel refused (per-packet errors such as EMSGSIZE, ENETUNREACH)
	TxInvalid atomic.Uint64 // packets not sent: malformed outer header, wrong family or protocol, no headroom for the backend's header, oversize
	TxFull    atomic.Uint64 // pipe: packets dropped because the peer's queue was full
	TxGSO     atomic.Uint64 // udp: packets sent as segments of a GSO super-datagram (sent; not a drop)
}

// Counters is a plain copy of LinkStats.
type Counters struct {
	RxPackets, RxBytes, TxPackets, TxBytes                  uint64
	RxErrors, RxShort, RxInvalid, RxIKE, RxKeepalive, RxGRO uint64
	TxErrors, TxInvalid, TxFull, TxGSO                      uint64
}

// Snapshot copies the counters. Each is read atomically; the set is not a
// single atomic snapshot.
func (s *LinkStats) Snapshot() Counters {
	return Counters{
		RxPackets: s.RxPackets.Load(), RxBytes: s.RxBytes.Load(),
		TxPackets: s.TxPackets.Load(), TxBytes: s.TxBytes.Load(),
		RxErrors: s.RxErrors.Load(), RxShort: s.RxShort.Load(), RxInvalid: s.RxInvalid.Load(),
		RxIKE: s.RxIKE.Load(), RxKeepalive: s.RxKeepalive.Load(), RxGRO: s.RxGRO.Load(),
		TxErrors: s.TxErrors.Load(), TxInvalid: s.TxInvalid.Load(), TxFull: s.TxFull.Load(),
		TxGSO: s.TxGSO.Load(),
	}
}

// RxDrops is the sum of the receive drop counters (IKE and keepalives
// included: they are not delivered as packets).
func (c Counters) RxDrops() uint64 {
	return c.RxErrors + c.RxShort + c.RxInvalid + c.RxIKE + c.RxKeepalive
}

// TxDrops is the sum of the transmit drop counters.
func (c Counters) TxDrops() uint64 { return c.TxErrors + c.TxInvalid + c.TxFull }

// Tally accumulates one batch's counts in a goroutine's own memory and adds
// them to a LinkStats in one go, so that a batch costs a few atomic adds
// whatever its size.
type Tally struct {
	RxPackets, RxBytes, TxPackets, TxBytes                  uint64
	RxErrors, RxShort, RxInvalid, RxIKE, RxKeepalive, RxGRO uint64
	TxErrors, TxInvalid, TxFull, TxGSO                      uint64
}

// AddTo adds the tally to s (only the non-zero counts) and zeroes it.
func (t *Tally) AddTo(s *LinkStats) {
	add := func(c *atomic.Uint64, v uint64) {
		if v != 0 {
			c.Add(v)
		}
	}
	add(&s.RxPackets, t.RxPackets)
	add(&s.RxBytes, t.RxBytes)
	add(&s.TxPackets, t.TxPackets)
	add(&s.TxBytes, t.TxBytes)
	add(&s.RxErrors, t.RxErrors)
	add(&s.RxShort, t.RxShort)
	add(&s.RxInvalid, t.RxInvalid)
	add(&s.RxIKE, t.RxIKE)
	add(&s.RxKeepalive, t.RxKeepalive)
	add(&s.RxGRO, t.RxGRO)
	add(&s.TxErrors, t.TxErrors)
	add(&s.TxInvalid, t.TxInvalid)
	add(&s.TxFull, t.TxFull)
	add(&s.TxGSO, t.TxGSO)
	*t = Tally{}
}
