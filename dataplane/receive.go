package dataplane

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"sync/atomic"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/sad"
)

// Reason extends esp.Reason with the data plane's own drop reasons; the
// values below esp.NumReasons are esp's.
type Reason uint8

const (
	ReasonNoRoute        = Reason(esp.NumReasons) + iota // no tunnel for the destination
	ReasonNoSA                                           // the tunnel has no outbound SA
	ReasonHandoffFull                                    // the owning worker's queue was full
	ReasonNoBuffer                                       // the buffer pool was empty
	ReasonTooBig                                         // larger than the tunnel MTU; ICMP sent
	ReasonPolicyDiscard                                  // a discard policy matched, or none did
	ReasonPolicyMismatch                                 // a decrypted packet outside its SA's policy
	ReasonBypass                                         // a bypass policy matched (not forwarded)
	ReasonLinkError                                      // the link refused the packet
	numReasons
)

var extraNames = [...]string{"no_route", "no_sa", "handoff_full", "no_buffer", "too_big", "policy_discard", "policy_mismatch", "bypass", "link_error"}

func (r Reason) String() string {
	if r < Reason(esp.NumReasons) {
		return esp.Reason(r).String()
	}
	if i := int(r) - int(esp.NumReasons); i < len(extraNames) {
		return extraNames[i]
	}
	return "reason(?)"
}

// drops counts drops by reason; one writer per instance.
type drops [numReasons]atomic.Uint64

func (d *drops) inc(r Reason) { d[r].Store(d[r].Load() + 1) }

func (d *drops) Map() map[string]uint64 {
	m := map[string]uint64{}
	for r := Reason(1); r < numReasons; r++ {
		if v := d[r].Load(); v != 0 {
			m[r.String()] = v
		}
	}
	return m
}

// idle marks a receive goroutine that holds no snapshot of the SAD.
const idle = ^uint64(0)

type itemKind uint8

const (
	kindOut    itemKind = iota // plaintext packets for ESP encapsulation
	kindIn                     // ESP packets for decapsulation
	kindLocal                  // packets for the plaintext link as they are (ICMP errors)
	kindMarker                 // reclamation marker: call marker once everything before it is done
	numKinds
)

// item is a handoff batch from a receive goroutine to a worker.
type item struct {
	kind   itemKind
	n      int
	bufs   [batchSize]*packet.Buf
	sas    [batchSize]*sad.SA
	parsed [batchSize]esp.Parsed
	marker func()
}

type rxCounters struct {
	packets, bytes atomic.Uint64
	drops          drops
}

func (c *rxCounters) init() {}

// receiver reads one link and hands its packets to the owning workers.
type receiver struct {
	d        *Dataplane
	name     string
	link     Link
	plain    bool
	classify Classifier
	seen     atomic.Uint64 // SAD generation in use, or idle
	counters rxCounters

	bufs    []*packet.Buf // len: the link's batch size
	have    int
	pending [][numKinds]*item // per worker
	frags   [64]*packet.Buf
	parsed  esp.Parsed
}

func (r *receiver) run(ctx context.Context) {
	d := r.d
	pool := d.cfg.Pool
	r.pending = make([][numKinds]*item, len(d.workers))
	defer func() {
		if r.have > 0 {
			pool.PutN(r.bufs[:r.have])
		}
		r.seen.Store(idle)
	}()
	for {
		if r.have < len(r.bufs) {
			r.have += pool.GetN(r.bufs[r.have:])
			if r.have == 0 {
				r.counters.drops.inc(ReasonNoBuffer)
				if ctx.Err() != nil {
					return
				}
				runtime.Gosched()
				continue
			}
		}
		r.seen.Store(idle)
		n, err := r.link.Read(r.bufs[:r.have])
		if err != nil {
			if ctx.Err() != nil || d.closed.Load() {
				return
			}
			if n == 0 {
				r.counters.drops.inc(ReasonLinkError)
				if isClosed(err) {
					return
				}
				continue
			}
		}
		db := d.cfg.Store.Load()
		r.seen.Store(db.Generation())
		for i := range n {
			p := r.bufs[i]
			r.counters.packets.Store(r.counters.packets.Load() + 1)
			r.counters.bytes.Store(r.counters.bytes.Load() + uint64(p.Len()))
			if r.plain {
				r.outbound(db, p)
			} else {
				r.inbound(db, p)
			}
		}
		copy(r.bufs, r.bufs[n:r.have])
		r.have -= n
		r.flush()
	}
}

func isClosed(err error) bool {
	return errors.Is(err, pktio.ErrClosed) || errors.Is(err, context.Canceled)
}

func (r *receiver) drop(p *packet.Buf, why Reason) {
	r.counters.drops.inc(why)
	p.Release()
}

// outbound classifies a plaintext packet.
func (r *receiver) outbound(db *sad.DB, p *packet.Buf) {
	data := p.Bytes()
	var t *sad.Tunnel
	if r.classify != nil {
		var why Reason
		if t, why = r.classify.Classify(db, data); t == nil {
			r.drop(p, why)
			return
		}
	} else {
		dst, ok := innerDst(data)
		if !ok {
			r.drop(p, Reason(esp.ReasonMalformed))
			return
		}
		if t = db.Route(dst); t == nil {
			r.drop(p, ReasonNoRoute)
			return
		}
	}
	sa := t.Out()
	if sa == nil {
		r.drop(p, ReasonNoSA)
		return
	}
	if t.MTU > 0 && len(data) > t.MTU {
		r.oversize(t, sa, p)
		return
	}
	r.enqueue(t.Owner, kindOut, p, sa, nil)
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

// inbound parses an ESP packet and finds its SA.
func (r *receiver) inbound(db *sad.DB, p *packet.Buf) {
	pp := &r.parsed
	if why := esp.Parse(p.Bytes(), r.d.cfg.NATTPorts, pp); why != esp.ReasonNone {
		r.drop(p, Reason(why))
		return
	}
	sa := db.Inbound(pp.SPI)
	if sa == nil || sa.Tunnel == nil {
		r.drop(p, Reason(esp.ReasonUnknownSPI))
		return
	}
	r.enqueue(sa.Tunnel.Owner, kindIn, p, sa, pp)
}

// item returns the pending handoff item for (worker, kind), taking a free
// one if needed; nil if none is free.
func (r *receiver) item(w int, k itemKind) *item {
	it := r.pending[w][k]
	if it == nil {
		select {
		case it = <-r.d.items:
			it.kind, it.n = k, 0
			r.pending[w][k] = it
		default:
		}
	}
	return it
}

func (r *receiver) enqueue(w int, k itemKind, p *packet.Buf, sa *sad.SA, pp *esp.Parsed) {
	if w < 0 || w >= len(r.pending) {
		w = 0
	}
	it := r.item(w, k)
	if it == nil {
		r.drop(p, ReasonHandoffFull)
		return
	}
	it.bufs[it.n], it.sas[it.n] = p, sa
	if pp != nil {
		it.parsed[it.n] = *pp
	}
	it.n++
	if it.n == batchSize {
		r.send(w, k)
	}
}

func (r *receiver) send(w int, k itemKind) {
	it := r.pending[w][k]
	r.pending[w][k] = nil
	if it == nil || it.n == 0 {
		if it != nil {
			r.d.items <- it
		}
		return
	}
	select {
	case r.d.workers[w].in <- it:
	default:
		for i := range it.n {
			r.drop(it.bufs[i], ReasonHandoffFull)
			it.bufs[i], it.sas[i] = nil, nil
		}
		it.n = 0
		r.d.items <- it
	}
}

// flush hands every pending item to its worker.
func (r *receiver) flush() {
	for w := range r.pending {
		for k := range numKinds {
			if r.pending[w][k] != nil {
				r.send(w, k)
			}
		}
	}
}
