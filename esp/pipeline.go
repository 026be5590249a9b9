package esp

import (
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/packet"
)

// Direction of a Batch.
type Direction uint8

const (
	Outbound Direction = iota
	Inbound
)

// Batch is a vector of packets going through ESP in one direction, each
// with its SA. The caller fills Bufs and SAs (and, inbound, Parsed, from
// Parse) and may mark packets it already dropped in Reasons; after the batch
// completes, Reasons[i] is ReasonNone for every packet that made it, and its
// Buf holds the result.
type Batch struct {
	Dir     Direction
	Bufs    []*packet.Buf
	SAs     []*SA
	Parsed  []Parsed
	Reasons []Reason

	work   []Work
	opPkt  []int32 // op index -> packet index
	crypto *cryptodev.Batch
}

// NewBatch returns a batch with room for n packets.
func NewBatch(n int) *Batch {
	return &Batch{
		Bufs: make([]*packet.Buf, 0, n), SAs: make([]*SA, 0, n), Parsed: make([]Parsed, 0, n),
		Reasons: make([]Reason, 0, n), work: make([]Work, n), opPkt: make([]int32, 0, n),
		crypto: cryptodev.NewBatch(n),
	}
}

// Reset empties the batch for n packets in direction dir, keeping its
// memory. n must not exceed the capacity it was made with.
func (b *Batch) Reset(dir Direction, n int) {
	b.Dir = dir
	b.Bufs = b.Bufs[:n]
	b.SAs = b.SAs[:n]
	b.Parsed = b.Parsed[:n]
	b.Reasons = b.Reasons[:n]
	clear(b.Bufs)
	clear(b.SAs)
	clear(b.Reasons)
}

// Len is the number of packets.
func (b *Batch) Len() int { return len(b.Bufs) }

// Pipeline drives ESP batches through one crypto queue. Prepare runs in
// Submit and Finish in Complete, both on the caller's goroutine and in
// submission order, each with the packet's SA locked: the lock is taken once
// per run of consecutive packets of one SA and released before the crypto,
// so several pipelines (one per data-plane goroutine) may carry the same SA
// and its sequence numbers and replay window still have one writer at a
// time, while the crypto runs wherever the engine puts it. A Pipeline itself
// is not safe for concurrent use: one per data-plane goroutine.
type Pipeline struct {
	q cryptodev.Queue
	// SocketChecksums says that the packets leave through sockets, whose
	// kernel computes the outer UDP checksum: Finish then leaves the IPv6
	// UDP checksum zero instead of summing the whole packet for nothing.
	SocketChecksums bool
}

// NewPipeline wraps an engine queue.
func NewPipeline(q cryptodev.Queue) *Pipeline { return &Pipeline{q: q} }

// Queue returns the underlying crypto queue.
func (pl *Pipeline) Queue() cryptodev.Queue { return pl.q }

// runLock holds the lock of the SA of the current run of packets.
type runLock struct{ sa *SA }

// to makes sa the locked SA, releasing the previous one. It inlines: a
// packet of the current run costs a comparison.
func (l *runLock) to(sa *SA) {
	if l.sa != sa {
		l.switchTo(sa)
	}
}

func (l *runLock) switchTo(sa *SA) {
	if l.sa != nil {
		l.sa.Unlock()
	}
	l.sa = sa
	sa.Lock()
}

func (l *runLock) release() {
	if l.sa != nil {
		l.sa.Unlock()
		l.sa = nil
	}
}

// Submit prepares every packet of b and hands their crypto to the engine.
// If the engine refuses the batch, every packet that was prepared is dropped
// with ReasonQueueFull and Submit returns the engine's error; b is then
// complete and still the caller's. Otherwise b belongs to the pipeline until
// Complete returns it.
func (pl *Pipeline) Submit(b *Batch) error {
	cb := b.crypto
	cb.Reset(0)
	cb.Ops = cb.Ops[:cap(cb.Ops)]
	// Indexed, not appended: an append writes the slice back to the
	// batch at every packet.
	opPkt := b.opPkt[:cap(b.opPkt)]
	if len(b.work) < len(b.Bufs) || len(opPkt) < len(b.Bufs) {
		panic("esp: batch larger than its capacity")
	}
	var lk runLock
	nops := 0
	for i, p := range b.Bufs {
		sa := b.SAs[i]
		if b.Reasons[i] != ReasonNone || sa == nil || p == nil {
			if b.Reasons[i] == ReasonNone {
				b.Reasons[i] = ReasonUnknownSPI
			}
			continue
		}
		lk.to(sa)
		op := &cb.Ops[nops]
		var r Reason
		if b.Dir == Outbound {
			r = sa.prepareOutboundLocked(p, &b.work[i], op)
		} else {
			r = sa.PrepareInbound(p, &b.Parsed[i], &b.work[i], op)
		}
		if r != ReasonNone {
			b.Reasons[i] = r
			sa.Counters.Drops.Inc(r)
			continue
		}
		opPkt[nops] = int32(i)
		nops++
	}
	lk.release()
	b.opPkt = opPkt[:nops]
	cb.Ops = cb.Ops[:nops]
	cb.User = b
	if err := pl.q.Submit(cb); err != nil {
		for _, i := range b.opPkt {
			lk.to(b.SAs[i])
			b.Reasons[i] = ReasonQueueFull
			b.SAs[i].Counters.Drops.Inc(ReasonQueueFull)
		}
		lk.release()
		return err
	}
	return nil
}

// Complete returns the oldest submitted batch once its crypto is done, after
// finishing each of its packets, or nil. With wait it blocks for the oldest
// batch; it returns nil at once if none is in flight.
func (pl *Pipeline) Complete(wait bool) *Batch {
	cb := pl.q.Dequeue(wait)
	if cb == nil {
		return nil
	}
	b := cb.User.(*Batch)
	var lk runLock
	udpSum := !pl.SocketChecksums
	for k, i := range b.opPkt {
		sa, op := b.SAs[i], &cb.Ops[k]
		lk.to(sa)
		var r Reason
		if b.Dir == Outbound {
			if op.Status == cryptodev.StatusOK && (!udpSum || sa.udpLen == 0) && !sa.limited {
				// finishOutbound's work for most packets: count them.
				sa.pendPackets++
				sa.pendBytes += uint64(b.work[i].n)
				continue
			}
			r = sa.finishOutbound(b.Bufs[i], &b.work[i], op, udpSum)
		} else {
			r = sa.finishInbound(b.Bufs[i], &b.work[i], op)
		}
		if r != ReasonNone {
			b.Reasons[i] = r
			sa.Counters.Drops.Inc(r)
		}
	}
	lk.release()
	return b
}

// InFlight is the number of batches submitted and not yet completed.
func (pl *Pipeline) InFlight() int { return pl.q.InFlight() }

// Run submits b and waits for it: for callers with nothing else in flight.
func (pl *Pipeline) Run(b *Batch) error {
	if err := pl.Submit(b); err != nil {
		return err
	}
	for {
		switch pl.Complete(true) {
		case b:
			return nil
		case nil:
			return cryptodev.ErrClosed
		}
	}
}
