package cryptodev

import "sync/atomic"

// MaxSyncInFlight bounds the batches a synchronous engine's queue (see
// NewSyncQueue) holds before they are dequeued.
const MaxSyncInFlight = 1024

// syncQueue is a synchronous engine's queue: Submit completes the batch
// through the queue's Processor, and a fixed ring keeps completed batches
// in submission order until they are dequeued.
type syncQueue struct {
	p      Processor
	closed *atomic.Bool
	ring   [MaxSyncInFlight]*Batch
	head   int // index of the oldest batch
	n      int // batches in the ring
	done   bool
}

// NewSyncQueue returns the Queue of a synchronous engine over p, which it
// owns (Close closes it). Submit runs the batch through p before it
// returns; it fails with ErrClosed once engineClosed is true or the queue
// is closed, and with ErrQueueFull when MaxSyncInFlight batches wait to be
// dequeued. Like any Queue it is for one goroutine at a time, and it
// allocates nothing per batch.
func NewSyncQueue(p Processor, engineClosed *atomic.Bool) Queue {
	return &syncQueue{p: p, closed: engineClosed}
}

func (q *syncQueue) Submit(b *Batch) error {
	if q.done || q.closed.Load() {
		return ErrClosed
	}
	if q.n == MaxSyncInFlight {
		return ErrQueueFull
	}
	q.p.Process(b.Ops)
	q.ring[(q.head+q.n)%MaxSyncInFlight] = b
	q.n++
	return nil
}

func (q *syncQueue) Dequeue(bool) *Batch {
	if q.n == 0 {
		return nil
	}
	b := q.ring[q.head]
	q.ring[q.head] = nil
	q.head = (q.head + 1) % MaxSyncInFlight
	q.n--
	return b
}

func (q *syncQueue) InFlight() int { return q.n }

func (q *syncQueue) Close() {
	if !q.done {
		q.done = true
		q.p.Close()
	}
}
