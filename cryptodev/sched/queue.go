package sched

import (
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/sluicegw/sluice/cryptodev"
)

// A submitted batch's state lives in its Batch.Private().State word:
//
//	bits  0-5   chunks claimed by workers (or by an abort)
//	bits  6-11  chunks done
//	bits 12-17  chunks in all (the batch's split, fixed at Submit)
//	bits 18-19  work list: 0 encryption, 1 decryption, 2 asymmetric
//	bits 20-31  stateTag, so that a word another engine left behind is
//	            never mistaken for claimable work
//
// The batch is queued while claimed == 0, claimed while claimed > 0, and
// done when done == total. A claim is a CAS that adds one to claimed; it
// gives the claimer chunk number claimed-before-the-CAS. Completion adds
// one to done; the worker that makes done reach total completes the batch.
//
// A worker finds batches through the submitter's ring, and may hold a
// pointer to a batch that its submitter has dequeued meanwhile and submitted
// again, even on another queue. Such a claim is still a real one (the CAS
// only succeeds on a submitted batch with work left), and the worker finds
// the queue to notify through the batch itself: Submit records the queue as
// the batch's Private().Owner.
const (
	chunkBits     = 6
	maxChunks     = 1<<chunkBits - 1
	chunkMask     = maxChunks
	doneShift     = chunkBits
	totalShift    = 2 * chunkBits
	dirShift      = 3 * chunkBits
	dirBits       = 2
	tagShift      = dirShift + dirBits
	stateTag      = 0x5c5 << tagShift
	tagMask       = (1<<32 - 1) >> tagShift << tagShift
	dirEnc        = 0
	dirDec        = 1
	dirAsym       = 2 // Sign and Agree: only the asymmetric workers claim these
	numDirs       = 3
	claimOne      = 1
	doneOne       = 1 << doneShift
	cacheLine     = 64
	padUint64     = cacheLine - 8
	padThreeWords = cacheLine - 24
)

func claimedOf(s uint32) uint32 { return s & chunkMask }
func doneOf(s uint32) uint32    { return s >> doneShift & chunkMask }
func totalOf(s uint32) uint32   { return s >> totalShift & chunkMask }
func dirOf(s uint32) uint32     { return s >> dirShift & (1<<dirBits - 1) }

// dirOfOp is the work list of a batch whose first op has direction d.
func dirOfOp(d cryptodev.Direction) uint32 {
	switch d {
	case cryptodev.Encrypt:
		return dirEnc
	case cryptodev.Sign, cryptodev.Agree:
		return dirAsym
	}
	return dirDec
}

// isDone reports whether every chunk of the batch is done.
func isDone(s uint32) bool { return doneOf(s) == totalOf(s) }

// claimable reports whether s is a sched batch of list dir with a chunk
// left to claim.
func claimable(s, dir uint32) bool {
	return s&tagMask == stateTag && dirOf(s) == dir && claimedOf(s) < totalOf(s)
}

// finish counts one chunk of b done and, if it was the last, notifies b's
// submitter. It reports whether it woke the submitter. It reads the owner
// before the count: once b is done its submitter may dequeue it and clear
// the owner.
func finish(b *cryptodev.Batch) bool {
	p := b.Private()
	q := p.Owner
	if s := p.State.Add(doneOne); isDone(s) {
		return q.Complete(b)
	}
	return false
}

// queue is one submitter's ring. The ring records submission order; slots
// hold the batches of positions [head, tail). Only the submitter writes
// head, tail and the slots; workers read them to find work. The encryption
// and decryption work lists are the ring's batches filed under each
// direction; cursor[d] is a position before which list d has nothing left to
// claim (a hint workers advance; it never passes unclaimed work).
type queue struct {
	e     *Engine
	ring  []atomic.Pointer[cryptodev.Batch]
	mask  uint64
	depth uint64

	// Submitter-only state.
	head, tail uint64 // private copies of pubHead, pubTail
	closed     bool
	removed    bool
	proc       cryptodev.Processor // for help; closed by unregister

	_       [padUint64]byte
	pubTail atomic.Uint64 // written by the submitter on Submit
	_       [padUint64]byte
	pubHead atomic.Uint64 // written by the submitter on Dequeue
	_       [padUint64]byte
	cursor  [numDirs]atomic.Uint64 // written by workers
	_       [padThreeWords]byte

	// waiting is set by a submitter about to park in Dequeue(true); the
	// worker that completes the head batch clears it and sends on wake.
	waiting atomic.Bool
	wake    chan struct{}
}

func newQueue(e *Engine) (*queue, error) {
	size := 1
	for size < e.depth {
		size <<= 1
	}
	q := &queue{
		e:     e,
		ring:  make([]atomic.Pointer[cryptodev.Batch], size),
		mask:  uint64(size - 1),
		depth: uint64(e.depth),
		wake:  make(chan struct{}, 1),
	}
	p, err := e.inner.NewProcessor()
	if err != nil {
		return nil, fmt.Errorf("sched: %s: %w", e.inner.Name(), err)
	}
	q.proc = p
	return q, nil
}

// Submit queues b. It never blocks: on a full ring it returns
// cryptodev.ErrQueueFull and the caller keeps b. See cryptodev.Queue.
func (q *queue) Submit(b *cryptodev.Batch) error {
	if q.closed || q.e.closed.Load() {
		return cryptodev.ErrClosed
	}
	if q.tail-q.head >= q.depth {
		return cryptodev.ErrQueueFull
	}
	n := len(b.Ops)
	dir := uint32(dirEnc)
	if n > 0 {
		dir = dirOfOp(b.Ops[0].Dir)
	}
	total := q.e.chunks(n, dir)
	s := uint32(stateTag) | total<<totalShift | dir<<dirShift
	p := b.Private()
	p.Owner = q
	// The Store publishes b (ops, owner) to any worker whose claim CAS
	// reads this word; the tail Store publishes the slot.
	p.State.Store(s)
	q.ring[q.tail&q.mask].Store(b)
	q.tail++
	q.pubTail.Store(q.tail)
	if q.e.closed.Load() {
		// Close raced with us and its workers may be gone: nothing else
		// will run b, so it is aborted at the next Dequeue. It was
		// accepted, so this is not an error.
		return nil
	}
	if dir == dirAsym {
		q.e.asym.wakeUp(total)
	} else {
		q.e.sym.wakeUp(total)
	}
	return nil
}

// Dequeue returns the oldest batch if it is done. See cryptodev.Queue.
func (q *queue) Dequeue(wait bool) *cryptodev.Batch {
	if q.head == q.tail {
		return nil
	}
	slot := &q.ring[q.head&q.mask]
	b := slot.Load()
	st := &b.Private().State
	if !isDone(st.Load()) {
		if q.e.closed.Load() {
			q.abort()
		}
		if wait {
			q.waitDone(st)
		} else if !isDone(st.Load()) {
			return nil
		}
	}
	slot.Store(nil)
	q.head++
	q.pubHead.Store(q.head)
	b.Private().Owner = nil
	if q.closed && q.head == q.tail {
		q.unregister()
	}
	return b
}

// Spinning in waitDone before parking: check busyWaits times, then yield
// the processor between checks (on a machine with as many workers as cores
// the submitter must not keep a worker from running).
const (
	busyWaits  = 64
	yieldWaits = 16
)

// waitDone blocks until the state word st says done. While any chunk of a
// symmetric batch in its own ring is unclaimed, the submitter runs it
// itself, as a VPP worker runs frames in its crypto dequeue: its core would
// otherwise idle. Asymmetric chunks it leaves to the asymmetric workers.
func (q *queue) waitDone(st *atomic.Uint32) {
	for !isDone(st.Load()) && !q.e.closed.Load() && q.help() {
	}
	for i := range busyWaits + yieldWaits {
		if isDone(st.Load()) {
			return
		}
		if i >= busyWaits {
			runtime.Gosched()
		}
	}
	for {
		if q.e.closed.Load() {
			q.abort()
		}
		// Announce the wait, then check: the worker that completes the
		// batch adds to done, then reads waiting; one of us sees the other.
		q.waiting.Store(true)
		if isDone(st.Load()) {
			q.waiting.Store(false)
			return
		}
		<-q.wake
	}
}

// Complete is called once b is done. If the submitter is parked waiting
// for b (its head), it wakes it and reports true. See cryptodev.Completer.
func (q *queue) Complete(b *cryptodev.Batch) bool {
	if !q.waiting.Load() {
		return false
	}
	// head does not move while the submitter waits.
	if q.ring[q.pubHead.Load()&q.mask].Load() != b {
		return false
	}
	if q.waiting.CompareAndSwap(true, false) {
		q.wakeSubmitter()
		return true
	}
	return false
}

func (q *queue) wakeSubmitter() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// claim looks for a chunk to run in work list dir, from the list's cursor
// to the tail, and claims the first one it finds.
func (q *queue) claim(dir uint32) (b *cryptodev.Batch, k, total uint32, ok bool) {
	t := q.pubTail.Load()
	cur := &q.cursor[dir]
	p := cur.Load()
	if p >= t {
		return nil, 0, 0, false
	}
	if h := q.pubHead.Load(); p < h {
		p = h
	}
	// Every position before skip has nothing left to claim in list dir.
	// A slot read here holds position p's batch, or nil or a later
	// position's batch if p has been dequeued meanwhile: the tail Load
	// above orders the read after the Submit that filled the slot.
	skip := p
	for ; p < t; p++ {
		b = q.ring[p&q.mask].Load()
		if b == nil {
			if skip == p {
				skip++
			}
			continue
		}
		st := &b.Private().State
		for {
			s := st.Load()
			if !claimable(s, dir) {
				if skip == p {
					skip++
				}
				break
			}
			if st.CompareAndSwap(s, s+claimOne) {
				k, total = claimedOf(s), totalOf(s)
				if skip == p && k+1 == total {
					skip++
				}
				advance(cur, skip)
				return b, k, total, true
			}
		}
	}
	advance(cur, skip)
	return nil, 0, 0, false
}

// help claims the oldest unclaimed chunk of a symmetric batch (either
// direction) in the submitter's own ring and runs it. It reports whether it
// found one. Asymmetric batches are never helped: they run only on the
// low-priority asymmetric workers (see Engine).
func (q *queue) help() bool {
	for p := q.head; p < q.tail; p++ {
		b := q.ring[p&q.mask].Load()
		st := &b.Private().State
		for {
			s := st.Load()
			if dirOf(s) == dirAsym || !claimable(s, dirOf(s)) {
				break
			}
			if st.CompareAndSwap(s, s+claimOne) {
				q.e.run(b, claimedOf(s), totalOf(s), q.proc, true)
				return true
			}
		}
	}
	return false
}

// advance moves a cursor forward to v; it never moves back.
func advance(cur *atomic.Uint64, v uint64) {
	for {
		o := cur.Load()
		if v <= o || cur.CompareAndSwap(o, v) {
			return
		}
	}
}

// abort claims every chunk still unclaimed in the ring and marks its ops
// StatusAborted. Only the submitter calls it, after the engine closed, so
// every slot it reads holds one of its own batches.
func (q *queue) abort() {
	for p := q.head; p < q.tail; p++ {
		b := q.ring[p&q.mask].Load()
		st := &b.Private().State
		for {
			s := st.Load()
			if claimedOf(s) >= totalOf(s) {
				break
			}
			if !st.CompareAndSwap(s, s+claimOne) {
				continue
			}
			n := len(b.Ops)
			k, total := int(claimedOf(s)), int(totalOf(s))
			for i := k * n / total; i < (k+1)*n/total; i++ {
				b.Ops[i].Status = cryptodev.StatusAborted
			}
			finish(b)
		}
	}
}

// InFlight is the number of batches submitted and not yet dequeued.
func (q *queue) InFlight() int { return int(q.tail - q.head) }

// Close stops the queue accepting batches; those in flight can still be
// dequeued. The engine stops scanning the queue once it is empty.
func (q *queue) Close() {
	if q.closed {
		return
	}
	q.closed = true
	if q.head == q.tail {
		q.unregister()
	}
}

func (q *queue) unregister() {
	if !q.removed {
		q.removed = true
		q.e.unregister(q)
		q.proc.Close()
	}
}
