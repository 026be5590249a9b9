// Package pipe is an in-memory pair of pktio.Links for unit tests and
// in-process benchmarks: what is written on one end is read on the other.
// It is never a replacement for the real I/O path in integration tests
// (DESIGN.md decision 12).
//
// Each direction is a bounded queue of capacity packets. Write copies each
// packet into the queue (one slot per packet, reused, grown only to the
// largest packet that slot has held); when the queue is full Write drops
// the packet and counts it in TxFull, and never blocks (DESIGN.md decision
// 8). Read copies packets out into the reader's buffers, at each buffer's
// data offset, and blocks until there is at least one.
//
// Closing an end closes both directions: the closed end's Read and Write
// return pktio.ErrClosed at once; the other end's Write returns
// pktio.ErrClosed and its Read returns what was already queued, then
// pktio.ErrClosed.
package pipe

import (
	"sync"
	"sync/atomic"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
)

// New returns the two ends of a pipe whose queues hold capacity packets
// each. It panics if capacity < 1.
func New(capacity int) (a, b pktio.Link) {
	if capacity < 1 {
		panic("pipe: capacity must be at least 1")
	}
	ab, ba := newQueue(capacity), newQueue(capacity)
	batch := min(capacity, pktio.DefaultBatchSize)
	return &End{rx: ba, tx: ab, batch: batch}, &End{rx: ab, tx: ba, batch: batch}
}

// queue is one direction: a ring of packet slots.
type queue struct {
	mu     sync.Mutex
	ready  sync.Cond // signalled when a packet is queued or the queue closes
	slots  [][]byte  // ring; each slot's backing array is reused
	head   int       // oldest packet
	n      int       // packets queued
	closed bool
}

func newQueue(capacity int) *queue {
	q := &queue{slots: make([][]byte, capacity)}
	q.ready.L = &q.mu
	return q
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.ready.Broadcast()
}

// End is one end of a pipe.
type End struct {
	rx, tx *queue
	batch  int
	closed atomic.Bool
	stats  pktio.LinkStats
}

// Read copies queued packets into bufs (see pktio.Link). A packet longer
// than its buffer's room is dropped and counted (RxShort).
func (e *End) Read(bufs []*packet.Buf) (int, error) {
	if len(bufs) == 0 {
		return 0, pktio.ErrShortBuffer
	}
	q := e.rx
	var t pktio.Tally
	out := 0
	q.mu.Lock()
	for out == 0 {
		for q.n == 0 && !q.closed {
			q.ready.Wait()
		}
		if e.closed.Load() || q.n == 0 {
			q.mu.Unlock()
			t.AddTo(&e.stats)
			return 0, pktio.ErrClosed
		}
		for out < len(bufs) && q.n > 0 {
			p := q.slots[q.head]
			q.head = (q.head + 1) % len(q.slots)
			q.n--
			b := bufs[out]
			if len(p) > pktio.Room(b) {
				t.RxShort++
				continue
			}
			off := b.Offset()
			copy(b.Slot()[off:], p)
			b.SetWindow(off, len(p))
			t.RxPackets++
			t.RxBytes += uint64(len(p))
			out++
		}
	}
	q.mu.Unlock()
	t.AddTo(&e.stats)
	return out, nil
}

// Write queues copies of the packets for the other end (see pktio.Link).
// Packets longer than pktio.MaxPacket are dropped (TxInvalid), and so are
// packets that find the queue full (TxFull).
func (e *End) Write(bufs []*packet.Buf) (int, error) {
	if e.closed.Load() {
		return 0, pktio.ErrClosed
	}
	q := e.tx
	var t pktio.Tally
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return 0, pktio.ErrClosed
	}
	queued := false
	for _, b := range bufs {
		p := b.Bytes()
		switch {
		case len(p) > pktio.MaxPacket:
			t.TxInvalid++
		case q.n == len(q.slots):
			t.TxFull++
		default:
			i := (q.head + q.n) % len(q.slots)
			q.slots[i] = append(q.slots[i][:0], p...)
			q.n++
			queued = true
			t.TxPackets++
			t.TxBytes += uint64(len(p))
		}
	}
	q.mu.Unlock()
	if queued {
		q.ready.Signal()
	}
	t.AddTo(&e.stats)
	return len(bufs), nil
}

// BatchSize is min(capacity, pktio.DefaultBatchSize).
func (e *End) BatchSize() int { return e.batch }

// Close closes both directions of the pipe. It is idempotent.
func (e *End) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.rx.close()
	e.tx.close()
	return nil
}

// Stats returns the end's counters.
func (e *End) Stats() *pktio.LinkStats { return &e.stats }

// Queued reports how many packets wait to be read on this end.
func (e *End) Queued() int {
	e.rx.mu.Lock()
	defer e.rx.mu.Unlock()
	return e.rx.n
}
