package tls

// The handshake signing queue: one per engine, apart from all other work.
//
//  1. Sign (a handshake's goroutine, inside crypto/tls): the request goes
//     into the engine's bounded channel, or fails at once when it is full.
//     The goroutine then waits for its signature or for the handshake's
//     context, whichever comes first; an abandoned request is skipped.
//  2. Collect (a lane): a lane blocks for one request, then takes whatever
//     else is waiting, up to maxSignBatch, into one cryptodev.Batch; for a
//     synchronous engine at most its fair share (waiting / lanes), so that
//     no lane signs serially what other lanes could sign in parallel.
//  3. Submit (the lane, on its own cryptodev.Queue opened only for
//     handshakes): a synchronous engine runs the batch inside Submit, so
//     there are as many lanes as GOMAXPROCS and signatures use every core;
//     an asynchronous engine spreads batches over its workers, so one lane
//     splits what it collects into one batch per signing core (all cores
//     but one, signCores) of at most partOps ops (one RSA signature; 16
//     others), and submits them all before waiting for any. sched runs
//     them on its asymmetric workers only: at most all cores but one, on
//     threads at a low priority (nice 10), so the runtime keeps a P
//     and the kernel a core for the connections already open while a storm of
//     handshakes waits for signatures (BENCHMARKS.md section j).
//  4. Complete (the lane): as each batch comes back, in the order they
//     were submitted, each of its waiters gets a copy of its signature.

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
)

const (
	// maxSignBatch bounds the ops a lane puts in one batch.
	maxSignBatch = 64
	// signQueueLen bounds the requests waiting for a lane; one more fails
	// its handshake (counted under "sign").
	signQueueLen = 4096
	// maxPartOps bounds the ops of one batch handed to an asynchronous
	// engine (partOps: RSA signatures go one per batch).
	maxPartOps = 16
	// maxSigLen is the Dst each op gets: an RSA-4096 signature.
	maxSigLen = 512
)

// errSignQueueFull is the error a handshake gets when the engine's signing
// queue is at its bound.
var errSignQueueFull = errors.New("tls: handshake signing queue full")

// errSign marks every failure of the signing path, so that a failed
// handshake is counted under "sign".
var errSign = errors.New("tls: sign")

// signReq is one Sign call. The requesting goroutine owns it until it is
// sent on the queue; then the lane that receives it writes sig and err and
// closes done. A waiter that gives up (its context ended) sets abandoned
// and never reads the request again.
type signReq struct {
	ctx context.Context
	key *cryptodev.Key
	// store holds a reference on key's certificates from the enqueue
	// until the lane is done with the op, which the lane then releases:
	// a handshake that gives up releases its own reference, and a Reload
	// must not destroy the key while the lane still signs with it.
	store  *certStore
	digest []byte
	hash   crypto.Hash
	pss    bool

	sig  []byte
	err  error
	done chan struct{}
}

// signQueue is one engine's handshake signing queue and its lanes. It is
// safe for concurrent use; its lanes are its only consumers.
type signQueue struct {
	eng   cryptodev.Engine
	async bool
	reqs  chan *signReq
	quit  chan struct{}
	wg    sync.WaitGroup
	lanes []cryptodev.Queue
	split int // sub-batches per collection (async engines), else 1

	depth    atomic.Int64
	ops      atomic.Uint64
	batches  atomic.Uint64
	maxBatch atomic.Uint64

	closeOnce sync.Once
}

// signCores is how many cores an asynchronous engine's handshake
// signatures may keep busy at once: all but one when there are several.
func signCores(procs int) int { return max(1, procs-1) }

// newSignQueue opens the lanes' queues on eng and starts the lanes. Close
// stops them; it does not close eng.
func newSignQueue(eng cryptodev.Engine) (*signQueue, error) {
	procs := runtime.GOMAXPROCS(0)
	q := &signQueue{
		eng:   eng,
		async: eng.Async(),
		reqs:  make(chan *signReq, signQueueLen),
		quit:  make(chan struct{}),
		split: 1,
	}
	n := procs
	if q.async {
		// The queueing engine signs on all cores but one: one lane hands
		// it at most signCores batches at a time, which it runs on its
		// asymmetric workers (as many, at a low priority), so a storm
		// of handshakes leaves a core to the connections already open (see
		// the package doc).
		n = 1
		q.split = signCores(procs)
	}
	for range n {
		cq, err := eng.NewQueue()
		if err != nil {
			for _, l := range q.lanes {
				l.Close()
			}
			return nil, fmt.Errorf("tls: engine %s: handshake queue: %w", eng.Name(), err)
		}
		q.lanes = append(q.lanes, cq)
	}
	for _, cq := range q.lanes {
		q.wg.Add(1)
		go q.lane(cq)
	}
	return q, nil
}

// close stops the lanes and fails the requests still waiting. It is
// idempotent and waits for the lanes.
func (q *signQueue) close() {
	q.closeOnce.Do(func() {
		close(q.quit)
		q.wg.Wait()
		for {
			select {
			case r := <-q.reqs:
				q.depth.Add(-1)
				r.err = fmt.Errorf("%w: %w", errSign, cryptodev.ErrClosed)
				close(r.done)
				r.store.release()
			default:
				return
			}
		}
	})
}

// sign enqueues one signature with key, which store (nil for none) holds,
// and waits for it or for ctx.
func (q *signQueue) sign(ctx context.Context, store *certStore, key *cryptodev.Key, digest []byte, hash crypto.Hash, pss bool) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !store.tryAcquire() {
		return nil, fmt.Errorf("%w: %w", errSign, cryptodev.ErrClosed)
	}
	r := &signReq{ctx: ctx, key: key, store: store, digest: digest, hash: hash, pss: pss, done: make(chan struct{})}
	select {
	case <-q.quit:
		store.release()
		return nil, fmt.Errorf("%w: %w", errSign, cryptodev.ErrClosed)
	default:
	}
	select {
	case q.reqs <- r:
		q.depth.Add(1)
	default:
		store.release()
		return nil, fmt.Errorf("%w: %w", errSign, errSignQueueFull)
	}
	select {
	case <-r.done:
		return r.sig, r.err
	case <-ctx.Done():
		// The lane may still run the op; it then writes into r, which
		// nobody reads. The digest belongs to crypto/tls's abandoned
		// handshake and is only read.
		return nil, ctx.Err()
	}
}

// lane is one consumer of q.reqs, submitting on cq.
func (q *signQueue) lane(cq cryptodev.Queue) {
	defer q.wg.Done()
	defer cq.Close()
	batches := make([]*cryptodev.Batch, q.split)
	for i := range batches {
		batches[i] = cryptodev.NewBatch(maxSignBatch)
	}
	dst := make([]byte, maxSignBatch*maxSigLen)
	reqs := make([]*signReq, 0, maxSignBatch)
	for {
		var r *signReq
		select {
		case r = <-q.reqs:
		case <-q.quit:
			return
		}
		reqs = append(reqs[:0], r)
		// A synchronous engine signs a batch on this lane's core alone:
		// take a fair share of what waits, so the other lanes sign the
		// rest in parallel. An asynchronous engine spreads the batch
		// itself.
		limit := min(maxSignBatch, q.split*partOps(r.key.Alg()))
		if !q.async {
			lanes := int64(max(1, len(q.lanes)))
			limit = int(min(int64(maxSignBatch), max(1, (q.depth.Load()+lanes-1)/lanes)))
		}
	collect:
		for len(reqs) < limit {
			select {
			case r = <-q.reqs:
				reqs = append(reqs, r)
			default:
				break collect
			}
		}
		q.depth.Add(-int64(len(reqs)))
		// Drop the requests whose handshakes gave up meanwhile.
		live := reqs[:0]
		for _, r := range reqs {
			if r.ctx.Err() != nil {
				r.err = r.ctx.Err()
				close(r.done)
				r.store.release()
				continue
			}
			live = append(live, r)
		}
		if len(live) > 0 {
			q.run(cq, batches, dst, live)
		}
		clear(reqs[:cap(reqs)])
	}
}

// run signs reqs in one batch (or, for an asynchronous engine, in up to
// len(bs) batches submitted together) and completes every request: those
// of each batch as soon as the engine returns it.
func (q *signQueue) run(cq cryptodev.Queue, bs []*cryptodev.Batch, dst []byte, reqs []*signReq) {
	n := len(reqs)
	parts := min(len(bs), n)
	per := (n + parts - 1) / parts
	parts = (n + per - 1) / per
	submitted := 0
	var subErr error // the Submit that failed
	for p := 0; p < parts; p++ {
		lo, hi := p*per, min(n, (p+1)*per)
		b := bs[p]
		b.Reset(hi - lo)
		for i := lo; i < hi; i++ {
			r := reqs[i]
			op := &b.Ops[i-lo]
			op.Key, op.Dir, op.Src, op.Hash, op.PSS = r.key, cryptodev.Sign, r.digest, r.hash, r.pss
			op.Dst = dst[i*maxSigLen : (i+1)*maxSigLen]
		}
		if subErr = cq.Submit(b); subErr != nil {
			break
		}
		submitted++
		q.batches.Add(1)
		for m, cur := uint64(hi-lo), q.maxBatch.Load(); m > cur && !q.maxBatch.CompareAndSwap(cur, m); cur = q.maxBatch.Load() {
		}
	}
	var lost error // a batch the engine did not return, failing it and the rest
	lostAt := parts
	for p := 0; p < parts; p++ {
		lo, hi := p*per, min(n, (p+1)*per)
		err := lost
		if p >= submitted {
			err = subErr
		} else if lost == nil && cq.Dequeue(true) == nil {
			lost = errors.New("tls: batch lost by engine")
			err, lostAt = lost, p
		}
		if err != nil {
			for _, r := range reqs[lo:hi] {
				r.err = fmt.Errorf("%w: engine %s: %w", errSign, q.eng.Name(), err)
				close(r.done)
			}
			continue
		}
		for i, r := range reqs[lo:hi] {
			op := &bs[p].Ops[i]
			if op.Status != cryptodev.StatusOK {
				r.err = fmt.Errorf("%w: %v key on engine %s: %v", errSign, r.key.Alg(), q.eng.Name(), op.Status)
			} else {
				r.sig = append([]byte(nil), op.Dst[:op.N]...)
				q.ops.Add(1)
			}
			close(r.done)
		}
	}
	for _, b := range bs[:parts] {
		b.Reset(0) // drop the digests and keys
	}
	for i, r := range reqs {
		if p := i / per; p >= lostAt && p < submitted {
			continue // the engine may still hold the op: its key stays
		}
		r.store.release()
	}
}

// partOps is how many signatures with a key of type alg one batch handed
// to an asynchronous engine holds: one for RSA, whose signature takes
// milliseconds, maxPartOps for the rest. A batch comes back whole, so a
// batch of 16 RSA-4096 signatures would hold 15 finished handshakes back
// for about 100 ms and then release them together: a burst of handshake
// work queued ahead of the open connections' requests.
func partOps(alg cryptodev.Alg) int {
	if alg.RSABits() > 0 {
		return 1
	}
	return maxPartOps
}

// engineKey is one private key held by an engine, with its public half.
type engineKey struct {
	key *cryptodev.Key
	pub crypto.PublicKey
	q   *signQueue
}

// handshakeSigner is the crypto.Signer one handshake gets: it signs on
// the key's engine queue and gives up when the handshake's context ends.
// It is used by the one goroutine of its handshake.
type handshakeSigner struct {
	k     *engineKey
	ctx   context.Context
	store *certStore // holds k; nil for none
}

func (s *handshakeSigner) Public() crypto.PublicKey { return s.k.pub }

// Sign implements crypto.Signer; rand is ignored (the engine draws its
// own randomness). Under a listener's handshakeCtx, the wait ends at the
// handshake's deadline or when the Service closes.
func (s *handshakeSigner) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	hash, pss, err := cryptodev.SignParams(s.k.key.Alg(), digest, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errSign, err)
	}
	ctx := s.ctx
	if lim, ok := ctx.Value(limitsKey{}).(*handshakeLimits); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, lim.deadline)
		defer cancel()
		defer context.AfterFunc(lim.svc, cancel)()
	}
	return s.k.q.sign(ctx, s.store, s.k.key, digest, hash, pss)
}

// handshakeCtx is the context a listener's handshake runs under. It is
// never cancelled, so crypto/tls arms nothing to cancel it by (a context
// that can end costs every handshake a timer, a cancellation registered
// with its parent and an AfterFunc); the connection's deadline bounds the
// handshake's I/O instead. What bounds a signature's wait, the only other
// place a handshake blocks, it carries as a value for handshakeSigner.
type handshakeCtx struct {
	lim handshakeLimits
}

// handshakeLimits bound a handshake's signature: its deadline, and the
// Service's context, which Close cancels.
type handshakeLimits struct {
	deadline time.Time
	svc      context.Context
}

// limitsKey is the context key of a handshake's *handshakeLimits.
type limitsKey struct{}

func (*handshakeCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*handshakeCtx) Done() <-chan struct{}       { return nil }
func (*handshakeCtx) Err() error                  { return nil }
func (c *handshakeCtx) Value(key any) any {
	if _, ok := key.(limitsKey); ok {
		return &c.lim
	}
	return nil
}
