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
	"github.com/sluicegw/sluice/packet"
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
	_ cryptodev.Engine          = (*Engine)(nil)
	_ cryptodev.AsymEngine      = (*Engine)(nil)
	_ cryptodev.ProcessorEngine = (*Engine)(nil)
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

// processor runs ops in the calling goroutine: the engine's queues
// (cryptodev.NewSyncQueue) and sched's workers (sched:openssl) each have
// their own. It is not safe for concurrent use.
type processor struct {
	// Per-batch working memory, reused: the symmetric descriptors passed
	// to C, the op index each one came from, and the output of an
	// asymmetric op before it is known to have succeeded.
	descs []C.sl_op
	idx   []int
	out   [maxAsymOut]byte
	pins  packet.Pins
}

// NewQueue opens a queue. See cryptodev.Engine.
func (e *Engine) NewQueue() (cryptodev.Queue, error) {
	if e.closed.Load() {
		return nil, cryptodev.ErrClosed
	}
	return cryptodev.NewSyncQueue(new(processor), &e.closed), nil
}

// NewProcessor returns a processor for one goroutine, for a scheduling
// engine over this one (cryptodev.ProcessorEngine).
func (e *Engine) NewProcessor() (cryptodev.Processor, error) {
	if e.closed.Load() {
		return nil, cryptodev.ErrClosed
	}
	return new(processor), nil
}

// Process runs every op; see cryptodev.Processor.
func (q *processor) Process(ops []cryptodev.Op) { q.process(ops) }

// Close has nothing to release: the working memory is Go's.
func (q *processor) Close() {}

// process runs ops: asymmetric ones one cgo call each, as they come, and
// the symmetric ones together in one call after the loop. Each op's Status
// is its own.
func (q *processor) process(ops []cryptodev.Op) {
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
