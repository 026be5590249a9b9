// Package cryptodev is sluice's crypto framework: keys (sessions) expanded
// once and referenced by handle, operations gathered into batches, and one
// Engine interface that synchronous and asynchronous engines both implement.
//
// The caller's code is the same for every engine: open a Queue, Submit
// batches, and Dequeue them when complete. A synchronous engine completes a
// batch inside Submit; an asynchronous engine completes it later. Either way
// a Queue returns batches in the order they were submitted, and every op in a
// batch carries its own Status, so one failed authentication does not fail
// the batch.
//
// Data is named by slices. Packet memory in sluice is carved from a few large
// arenas (see package packet), so an engine written in C can turn each slice
// into (arena, offset, length) and take a whole batch in one call.
package cryptodev

import (
	"crypto"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Errors returned by engines and queues.
var (
	// ErrQueueFull is returned by Queue.Submit when the engine's queue is at
	// its bound. The caller still owns the batch; the data plane drops and
	// counts.
	ErrQueueFull = errors.New("cryptodev: queue full")
	// ErrClosed is returned after the engine or queue is closed.
	ErrClosed = errors.New("cryptodev: engine closed")
	// ErrUnsupported is returned for an algorithm the engine does not implement.
	ErrUnsupported = errors.New("cryptodev: algorithm not supported by engine")
)

// Direction says what an op does.
type Direction uint8

const (
	// Encrypt encrypts Src into Dst and writes the ICV into Tag.
	Encrypt Direction = iota
	// Decrypt verifies Tag and decrypts Src into Dst.
	Decrypt
	// Sign signs Src (a digest, or the message for Ed25519) with a private
	// key and writes the signature into Dst, setting N to its length.
	Sign
	// Agree computes a key agreement (X25519, ECDH) between a private key
	// and the peer's public key in Src, writing the shared secret into Dst
	// and setting N to its length.
	Agree
)

// Status is the outcome of one op.
type Status uint8

const (
	// StatusPending: not processed yet.
	StatusPending Status = iota
	// StatusOK: processed; on decryption the ICV verified.
	StatusOK
	// StatusAuthFailed: the ICV did not verify. Dst is unspecified.
	StatusAuthFailed
	// StatusInvalid: the op's lengths or key do not fit its algorithm.
	StatusInvalid
	// StatusUnsupported: the engine cannot run this op.
	StatusUnsupported
	// StatusAborted: the engine was closed before the op ran.
	StatusAborted
)

var statusNames = [...]string{"pending", "ok", "auth_failed", "invalid", "unsupported", "aborted"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Op is one symmetric operation. The slices are borrowed from the caller
// for as long as the op's batch is submitted; the engine writes only Dst,
// Tag (on encryption) and Status.
//
// For AEAD suites (RFC 4106, RFC 7634) the nonce is the key's 4-byte salt
// followed by IV, and AAD is the associated data (SPI || sequence number,
// with the ESN high bits between them when ESN is on).
//
// For chained suites (AES-CBC or NULL with HMAC, RFC 3602, RFC 2410,
// RFC 4868) IV is the CBC IV (empty for NULL) and the ICV is the truncated
// HMAC over AAD || IV || ciphertext || AuthTrailer: AAD is the ESP header and
// AuthTrailer the ESN high bits, which are authenticated but not sent
// (RFC 4303 section 3.3.2.1). On encryption the engine encrypts before it
// authenticates; on decryption it verifies before it decrypts.
//
// Dst must be as long as Src. It may be exactly Src (in place) but must not
// otherwise overlap it. For decryption Tag is read; for encryption Tag is
// written and must have the suite's ICV length. Engines are fastest when Tag
// directly follows Dst (encryption) or Src (decryption) in memory, as it
// does in an ESP packet.
type Op struct {
	Key         *Key
	Dir         Direction
	Status      Status
	Src, Dst    []byte
	IV          []byte
	AAD         []byte
	AuthTrailer []byte
	Tag         []byte

	// Asymmetric ops (Sign, Agree) only.
	Hash crypto.Hash // the digest's hash for RSA and ECDSA signatures
	PSS  bool        // RSA: PSS (salt length = hash length) instead of PKCS #1 v1.5
	N    int         // bytes written to Dst
}

// Batch is a set of ops from one submitter. Between Submit and the Dequeue
// that returns it, the batch and everything its ops reference belong to the
// engine.
type Batch struct {
	Ops []Op
	// User is the submitter's context for the batch (for example the
	// packets the ops belong to). Engines never touch it.
	User any

	priv Private
}

// Private is the engine-private slot of a Batch: the state an engine keeps
// per batch between Submit and the Dequeue that returns it. Only the engine
// the batch is submitted to may use it, and only in that time; Reset clears
// it. Submitters never read or write it.
type Private struct {
	// State is an atomic word of per-batch state (for example "queued",
	// "claimed", "done"), for engines whose workers claim work with a CAS.
	State atomic.Uint32
	// Owner is the engine's queue the batch was submitted to, as the
	// engine records it at Submit, so that whoever completes the batch (a
	// worker, a poller) can tell the queue without a lookup.
	Owner Completer
}

// Completer is implemented by an engine's queue that wants to hear when one
// of its batches is complete (set as Private.Owner at Submit). Complete
// reports whether it woke the submitter.
type Completer interface {
	Complete(b *Batch) bool
}

// Private returns the batch's engine-private slot. See Private.
func (b *Batch) Private() *Private { return &b.priv }

// Reset prepares the batch for reuse with n ops, clearing their statuses.
// It keeps the Ops backing array; n must not exceed cap(b.Ops).
func (b *Batch) Reset(n int) {
	b.Ops = b.Ops[:n]
	for i := range b.Ops {
		b.Ops[i] = Op{}
	}
	b.User = nil
	b.priv.Owner = nil
	b.priv.State.Store(0)
}

// NewBatch returns a batch with room for n ops.
func NewBatch(n int) *Batch { return &Batch{Ops: make([]Op, 0, n)} }

// Key is a session: the expanded form of one secret for one algorithm,
// owned by the engine that made it. It is safe for concurrent use by ops in
// flight. Destroy it when no op in flight references it any more; the engine
// then zeroes the key material it holds.
type Key struct {
	alg     Alg
	engine  string
	state   any
	destroy func()
	once    sync.Once
	dead    atomic.Bool
}

// NewKeyHandle is for engine implementations: it wraps the engine's
// private expanded key.
func NewKeyHandle(alg Alg, engine string, state any, destroy func()) *Key {
	return &Key{alg: alg, engine: engine, state: state, destroy: destroy}
}

// Alg returns the key's algorithm.
func (k *Key) Alg() Alg { return k.alg }

// Engine returns the name of the engine that owns the key.
func (k *Key) Engine() string { return k.engine }

// State returns the engine's private expanded key. Only the owning engine
// may use it.
func (k *Key) State() any { return k.state }

// Destroy releases the key and zeroes its material. It is idempotent. The
// caller must ensure no op in flight still references the key.
func (k *Key) Destroy() {
	k.once.Do(func() {
		if k.destroy != nil {
			k.destroy()
		}
		k.state = nil
		k.dead.Store(true)
	})
}

// Destroyed reports whether Destroy has run. Any goroutine may call it.
func (k *Key) Destroyed() bool { return k.dead.Load() }

// Engine is a crypto engine: software, another core, or an accelerator.
type Engine interface {
	// Name is the registry name ("soft", "sched", ...).
	Name() string
	// Async reports whether Submit may return before the batch is complete.
	Async() bool
	// Supports reports whether the engine implements alg.
	Supports(alg Alg) bool
	// NewKey expands a key for alg. encKey is the cipher key (followed by
	// the salt for AEAD suites); authKey is the HMAC key of chained suites.
	// The engine copies both; the caller may zero its copies afterwards.
	NewKey(alg Alg, encKey, authKey []byte) (*Key, error)
	// NewQueue opens a submission queue for one submitter. A Queue is used
	// by one goroutine at a time.
	NewQueue() (Queue, error)
	// Close stops the engine. Batches still in flight complete with
	// StatusAborted on their unprocessed ops and can still be dequeued.
	Close() error
}

// Queue is one submitter's channel to an engine. It returns batches in the
// order they were submitted. It is not safe for concurrent use.
type Queue interface {
	// Submit hands b to the engine. On success the engine owns b until
	// Dequeue returns it. On error (ErrQueueFull, ErrClosed) the caller
	// still owns b and no op was processed.
	Submit(b *Batch) error
	// Dequeue returns the oldest submitted batch if it is complete, or nil.
	// With wait set it blocks until the oldest batch is complete; it
	// returns nil at once if nothing is in flight.
	Dequeue(wait bool) *Batch
	// InFlight is the number of batches submitted and not yet dequeued.
	InFlight() int
	// Close releases the queue. Batches in flight may still be dequeued
	// with Dequeue(true) until InFlight is 0.
	Close()
}

// Run submits b on q and waits for it: the synchronous convenience form
// for callers that have nothing else to do meanwhile. Batches submitted
// earlier on q are dequeued and discarded first, so use it only on a queue
// with nothing else in flight.
func Run(q Queue, b *Batch) error {
	if err := q.Submit(b); err != nil {
		return err
	}
	for {
		d := q.Dequeue(true)
		if d == nil {
			return errors.New("cryptodev: batch lost by engine")
		}
		if d == b {
			return nil
		}
	}
}
