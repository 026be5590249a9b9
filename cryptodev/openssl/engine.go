//go:build openssl

package openssl

/*
#cgo LDFLAGS: -lcrypto
#include "ossl.h"
*/
import "C"

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/sluicegw/sluice/cryptodev"
)

// Name is the engine's registry name.
const Name = "openssl"

func init() {
	// Below soft (10) and sched (5): chosen by name, never by default.
	cryptodev.Register(Name, 3, func() (cryptodev.Engine, error) { return New() })
}

var (
	initOnce sync.Once
	initErr  error
)

// libInit fetches libcrypto's ciphers and HMAC once per process.
func libInit() error {
	initOnce.Do(func() {
		if C.sl_init() != 1 {
			initErr = errors.New("openssl: libcrypto lacks AES-GCM, ChaCha20-Poly1305, AES-CBC or HMAC")
		}
	})
	return initErr
}

// Engine is the synchronous libcrypto engine. It is safe for concurrent use;
// each Queue is for one goroutine at a time.
type Engine struct {
	closed atomic.Bool
}

var (
	_ cryptodev.Engine     = (*Engine)(nil)
	_ cryptodev.AsymEngine = (*Engine)(nil)
)

// New returns the engine, or an error if libcrypto lacks an algorithm.
func New() (*Engine, error) {
	if err := libInit(); err != nil {
		return nil, err
	}
	return &Engine{}, nil
}

func (*Engine) Name() string { return Name }
func (*Engine) Async() bool  { return false }

// Supports reports true for every symmetric suite and asymmetric key type
// cryptodev defines.
func (*Engine) Supports(a cryptodev.Alg) bool { return a.Valid() }

// Close makes later NewQueue and Submit calls fail with ErrClosed. Nothing
// is ever in flight in a synchronous engine. Keys stay valid until
// destroyed.
func (e *Engine) Close() error {
	e.closed.Store(true)
	return nil
}

// MaxInFlight bounds the completed batches a queue holds before they are
// dequeued.
const MaxInFlight = 1024

// queue completes each batch in Submit and keeps it until Dequeue, oldest
// first, in a ring that grows (by doubling) up to MaxInFlight. It is not
// safe for concurrent use.
type queue struct {
	e      *Engine
	ring   []*cryptodev.Batch // len is a power of two
	head   int                // index of the oldest batch
	n      int                // batches in the ring
	closed bool

	// Per-batch working memory, reused: the symmetric descriptors passed
	// to C, the op index each one came from, and the output of an
	// asymmetric op before it is known to have succeeded.
	descs []C.sl_op
	idx   []int
	out   [maxAsymOut]byte
}

// NewQueue opens a queue. See cryptodev.Engine.
func (e *Engine) NewQueue() (cryptodev.Queue, error) {
	if e.closed.Load() {
		return nil, cryptodev.ErrClosed
	}
	return &queue{e: e, ring: make([]*cryptodev.Batch, 8)}, nil
}

// Submit runs every op of b and keeps b for Dequeue.
func (q *queue) Submit(b *cryptodev.Batch) error {
	if q.closed || q.e.closed.Load() {
		return cryptodev.ErrClosed
	}
	if q.n == MaxInFlight {
		return cryptodev.ErrQueueFull
	}
	if q.n == len(q.ring) {
		grown := make([]*cryptodev.Batch, 2*len(q.ring))
		for i := range q.n {
			grown[i] = q.ring[(q.head+i)&(len(q.ring)-1)]
		}
		q.ring, q.head = grown, 0
	}
	q.process(b.Ops)
	q.ring[(q.head+q.n)&(len(q.ring)-1)] = b
	q.n++
	return nil
}

// Dequeue returns the oldest batch, which is always complete, or nil.
func (q *queue) Dequeue(bool) *cryptodev.Batch {
	if q.n == 0 {
		return nil
	}
	b := q.ring[q.head]
	q.ring[q.head] = nil
	q.head = (q.head + 1) & (len(q.ring) - 1)
	q.n--
	return b
}

func (q *queue) InFlight() int { return q.n }

// Close refuses later batches; completed ones can still be dequeued.
func (q *queue) Close() { q.closed = true }

// process runs ops: asymmetric ones one cgo call each, as they come, and
// the symmetric ones together in one call after the loop. Each op's Status
// is its own.
func (q *queue) process(ops []cryptodev.Op) {
	q.descs, q.idx = q.descs[:0], q.idx[:0]
	for i := range ops {
		op := &ops[i]
		if op.Dir >= cryptodev.Sign {
			op.Status = q.asymOp(op)
			continue
		}
		if st := q.addSym(op); st != cryptodev.StatusPending {
			op.Status = st
			continue
		}
		q.idx = append(q.idx, i)
	}
	q.runSym(ops)
}
