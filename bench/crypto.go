package bench

// sluice bench crypto: the `openssl speed -evp ... -multi N` of sluice.
//
// Each thread is a goroutine with its own Queue (or, for raw, its own
// cipher state) and its own batches: Threads x InFlight batches of Batch ops
// over a per-thread arena laid out as ESP lays out a packet (data, then the
// tag right behind it, encrypted in place). A step writes a fresh IV into
// every op of a free batch (a counter: nonces never repeat under a key),
// submits it, and collects whatever is complete; a synchronous engine
// completes it at once, an asynchronous one keeps up to InFlight batches in
// flight and the thread blocks only when all of them are.

import (
	"context"
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/packet"
)

// CryptoSpec is one crypto measurement.
type CryptoSpec struct {
	// Engine is Raw or a registered engine name.
	Engine string
	// Alg is a symmetric suite (encrypt ops) or an asymmetric key type
	// (sign ops; agree ops for X25519 and ECDHP256).
	Alg cryptodev.Alg
	// Size is the bytes per symmetric op; ignored for asymmetric ones.
	Size int
	// Threads is the number of submitting goroutines, each with its own
	// queue.
	Threads int
	// Batch is the ops per batch. Asymmetric runs use at most MaxAsymBatch.
	Batch int
	// InFlight is the batches each thread keeps in flight on an
	// asynchronous engine; 0 means DefaultInFlight.
	InFlight int
	// Duration is the measured window; Warmup runs before it (0 means
	// DefaultWarmup(Duration)).
	Duration, Warmup time.Duration
	// SchedWorkers, when > 0, is the sched engine's worker count (by
	// default one per CPU).
	SchedWorkers int
}

// MaxAsymBatch caps the batch of a signature or agreement run, so that a
// run of a couple of seconds completes many batches even for RSA-4096
// (about 7 ms a signature).
const MaxAsymBatch = 8

// tagRoom is the most an ICV takes (HMAC-SHA-512-256).
const tagRoom = 32

// batch returns the effective batch size of s.
func (s *CryptoSpec) batch() int {
	if s.Alg.IsAsymmetric() {
		return min(s.Batch, MaxAsymBatch)
	}
	return s.Batch
}

func (s *CryptoSpec) check() error {
	switch {
	case !s.Alg.Valid():
		return fmt.Errorf("bench: invalid algorithm %v", s.Alg)
	case s.Alg.IsAsymmetric() && !s.Alg.CanSign() && !s.Alg.CanAgree():
		return fmt.Errorf("bench: %v neither signs nor agrees", s.Alg)
	case !s.Alg.IsAsymmetric() && s.Size <= 0:
		return fmt.Errorf("bench: size %d: want > 0", s.Size)
	case s.Threads <= 0:
		return fmt.Errorf("bench: threads %d: want > 0", s.Threads)
	case s.Batch <= 0:
		return fmt.Errorf("bench: batch %d: want > 0", s.Batch)
	case s.Duration <= 0:
		return fmt.Errorf("bench: duration %v: want > 0", s.Duration)
	}
	return CheckEngine(s.Engine)
}

// opName is the op a run of alg measures.
func opName(alg cryptodev.Alg) string {
	switch {
	case alg.CanSign():
		return "sign"
	case alg.CanAgree():
		return "agree"
	}
	return "encrypt"
}

// RunCrypto measures s. progress, if not nil, gets the fraction done.
func RunCrypto(ctx context.Context, s CryptoSpec, progress func(float64)) (CryptoResult, error) {
	if err := s.check(); err != nil {
		return CryptoResult{}, err
	}
	res := CryptoResult{Engine: s.Engine, Alg: s.Alg.String(), Op: opName(s.Alg), Threads: s.Threads, Batch: s.batch()}
	if !s.Alg.IsAsymmetric() {
		res.Size = s.Size
	}
	loops, cleanup, note, err := cryptoLoops(&s)
	if err != nil {
		return res, err
	}
	defer cleanup()
	res.Note = note
	w, err := measure(ctx, loops, s.Warmup, s.Duration, progress)
	if err != nil {
		return res, err
	}
	if w.ops == 0 {
		return res, fmt.Errorf("bench: %s %v: no batch completed in %v; use a longer duration or a smaller batch", s.Engine, s.Alg, s.Duration)
	}
	res.Ops, res.Seconds, res.CPUSeconds = w.ops, w.elapsed.Seconds(), w.cpu.Seconds()
	res.OpsPerSec, res.BytesPerSec = w.opsPerSec(), w.bytesPerSec()
	return res, nil
}

// cryptoLoops builds s.Threads loops and returns them with the function
// that releases what they share (keys, the engine).
func cryptoLoops(s *CryptoSpec) (loops []loop, cleanup func(), note string, err error) {
	var cleanups cleanupStack
	cleanup = cleanups.run
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	if s.Alg.IsAsymmetric() {
		if findBaseline(s.Engine) != nil {
			return nil, cleanup, "", fmt.Errorf("%w: %s measures symmetric suites only", cryptodev.ErrUnsupported, s.Engine)
		}
		priv, err := privateKey(s.Alg)
		if err != nil {
			return nil, cleanup, "", err
		}
		peer, err := peerPublic(s.Alg)
		if err != nil {
			return nil, cleanup, "", err
		}
		if s.Engine == Raw {
			for range s.Threads {
				loops = append(loops, newRawAsymLoop(s.Alg, priv, peer, s.batch()))
			}
			return loops, cleanup, "", nil
		}
		e, err := openEngine(s.Engine, s.SchedWorkers)
		if err != nil {
			return nil, cleanup, "", err
		}
		cleanups.push(func() { e.Close() })
		key, err := importPrivateKey(e, priv)
		if err != nil {
			return nil, cleanup, "", err
		}
		cleanups.push(key.Destroy)
		for range s.Threads {
			l, err := newEngineLoop(e, inFlight(e, s.InFlight), s.batch(), 0, func(op *cryptodev.Op, _ []byte) {
				fillAsymOp(op, key, peer)
			})
			if err != nil {
				return nil, cleanup, note, err
			}
			cleanups.push(l.close)
			loops = append(loops, l)
		}
		return loops, cleanup, note, nil
	}

	info := s.Alg.Info()
	encKey := make([]byte, s.Alg.EncKeyLen())
	authKey := make([]byte, info.AuthKeyLen)
	rand.Read(encKey)
	rand.Read(authKey)
	n := dataLen(s.Alg, s.Size)
	if b := findBaseline(s.Engine); b != nil {
		for range s.Threads {
			l, free, err := b.symLoop(s.Alg, encKey, n, s.Size, s.Batch, opSlotLen(s.Size))
			if err != nil {
				return nil, cleanup, "", err
			}
			cleanups.push(free)
			loops = append(loops, l)
		}
		return loops, cleanup, "", nil
	}
	if s.Engine == Raw {
		for range s.Threads {
			l, err := newRawSymLoop(s.Alg, encKey, authKey, n, s.Size, s.Batch)
			if err != nil {
				return nil, cleanup, "", err
			}
			loops = append(loops, l)
		}
		return loops, cleanup, "", nil
	}
	e, err := openEngine(s.Engine, s.SchedWorkers)
	if err != nil {
		return nil, cleanup, "", err
	}
	cleanups.push(func() { e.Close() })
	if !e.Supports(s.Alg) {
		return nil, cleanup, "", fmt.Errorf("%w: %s does not support %v", cryptodev.ErrUnsupported, e.Name(), s.Alg)
	}
	key, err := e.NewKey(s.Alg, encKey, authKey)
	if err != nil {
		return nil, cleanup, "", err
	}
	cleanups.push(key.Destroy)
	if d := cryptodev.Describe(e); d != e.Name() {
		note = d
	}
	for range s.Threads {
		l, err := newEngineLoop(e, inFlight(e, s.InFlight), s.Batch, s.Size, func(op *cryptodev.Op, slot []byte) {
			fillSymOp(op, key, slot, n, info)
		})
		if err != nil {
			return nil, cleanup, note, err
		}
		cleanups.push(l.close)
		loops = append(loops, l)
	}
	return loops, cleanup, note, nil
}

// opSlotLen is the per-op memory of a symmetric run of size-byte ops: the
// data (at most size rounded up to a block) with room for the tag behind
// it, then the IV (16 bytes) and the AAD (8). Slots start on cache lines.
func opSlotLen(size int) int { return ((size+15)&^15 + tagRoom + 16 + 8 + 63) &^ 63 }

// fillSymOp describes an in-place encryption of slot[:n] with the tag
// behind it.
func fillSymOp(op *cryptodev.Op, key *cryptodev.Key, slot []byte, n int, info *cryptodev.AlgInfo) {
	meta := slot[n+tagRoom:]
	*op = cryptodev.Op{Key: key, Dir: cryptodev.Encrypt}
	op.Src = slot[: n : n+info.ICVLen]
	op.Dst = op.Src
	op.Tag = slot[n : n+info.ICVLen]
	op.IV = meta[:info.IVLen]
	op.AAD = meta[16:24] // SPI || sequence number
	binary.BigEndian.PutUint32(op.AAD, 0x1001)
}

// engineLoop is one thread on an engine: its queue, its batches, and the
// ones of them not in flight.
type engineLoop struct {
	q     cryptodev.Queue
	all   []*cryptodev.Batch
	free  []*cryptodev.Batch
	size  int    // bytes counted per op
	ivCtr uint64 // next IV
	unpin func()
}

// newEngineLoop makes depth batches of n ops; fill sets up each op over its
// slot of the loop's arena (size > 0: symmetric ops of size bytes).
func newEngineLoop(e cryptodev.Engine, depth, n, size int, fill func(op *cryptodev.Op, slot []byte)) (*engineLoop, error) {
	q, err := e.NewQueue()
	if err != nil {
		return nil, err
	}
	l := &engineLoop{q: q, size: size}
	slotLen := 0
	if size > 0 {
		slotLen = opSlotLen(size)
	}
	arena := make([]byte, depth*n*slotLen)
	// Pinned, as a packet pool's arenas are: engines written in C take
	// addresses in it without pinning per batch.
	l.unpin = packet.PinArena(arena)
	for range depth {
		b := cryptodev.NewBatch(n)
		b.Ops = b.Ops[:n]
		for i := range b.Ops {
			slot := arena[:slotLen:slotLen]
			arena = arena[slotLen:]
			fill(&b.Ops[i], slot)
		}
		l.all = append(l.all, b)
		l.free = append(l.free, b)
	}
	return l, nil
}

func (l *engineLoop) step() (ops, bytes int, err error) {
	wait := true
	if k := len(l.free); k > 0 {
		b := l.free[k-1]
		for i := range b.Ops {
			if iv := b.Ops[i].IV; len(iv) >= 8 {
				binary.BigEndian.PutUint64(iv, l.ivCtr)
				l.ivCtr++
			}
		}
		switch err := l.q.Submit(b); {
		case err == nil:
			l.free = l.free[:k-1]
			wait = k == 1
		case errors.Is(err, cryptodev.ErrQueueFull):
		default:
			return 0, 0, err
		}
	}
	for b := l.q.Dequeue(wait); b != nil; b = l.q.Dequeue(false) {
		for i := range b.Ops {
			if st := b.Ops[i].Status; st != cryptodev.StatusOK {
				return ops, ops * l.size, fmt.Errorf("bench: op %d of a batch ended %v", i, st)
			}
		}
		ops += len(b.Ops)
		l.free = append(l.free, b)
	}
	return ops, ops * l.size, nil
}

func (l *engineLoop) drain() {
	for l.q.InFlight() > 0 {
		if b := l.q.Dequeue(true); b != nil {
			l.free = append(l.free, b)
		}
	}
}

func (l *engineLoop) close() {
	l.q.Close()
	l.unpin()
}

// rawSymLoop is one raw thread: the same arena layout, Go's crypto called
// directly on each slot.
type rawSymLoop struct {
	r      *rawSym
	slots  [][]byte
	n      int // bytes encrypted per op
	size   int // bytes counted per op
	ivLen  int
	ivCtr  uint64
	aadOff int
}

func newRawSymLoop(alg cryptodev.Alg, encKey, authKey []byte, n, size, batch int) (*rawSymLoop, error) {
	r, err := newRawSym(alg, encKey, authKey)
	if err != nil {
		return nil, err
	}
	l := &rawSymLoop{r: r, n: n, size: size, ivLen: alg.Info().IVLen, aadOff: n + tagRoom + 16}
	slotLen := opSlotLen(size)
	arena := make([]byte, batch*slotLen)
	for i := range batch {
		slot := arena[i*slotLen : (i+1)*slotLen : (i+1)*slotLen]
		binary.BigEndian.PutUint32(slot[l.aadOff:], 0x1001)
		l.slots = append(l.slots, slot)
	}
	return l, nil
}

func (l *rawSymLoop) step() (ops, bytes int, err error) {
	n := l.n
	for _, slot := range l.slots {
		iv := slot[n+tagRoom : n+tagRoom+l.ivLen]
		if l.ivLen >= 8 {
			binary.BigEndian.PutUint64(iv, l.ivCtr)
			l.ivCtr++
		}
		l.r.seal(slot, n, iv, slot[l.aadOff:l.aadOff+8])
	}
	return len(l.slots), len(l.slots) * l.size, nil
}

func (l *rawSymLoop) drain() {}

// The message every signature run signs: its SHA-256 digest for RSA and
// ECDSA, the message itself for Ed25519.
var (
	signMsg    = []byte("sluice bench: a message of sixty-four bytes to sign, in one op..")
	signDigest = sha256.Sum256(signMsg)
)

// peerPublic returns a peer's public key for an agreement run, in the form
// an Agree op carries it, or nil for a signature run.
func peerPublic(alg cryptodev.Alg) ([]byte, error) {
	if !alg.CanAgree() {
		return nil, nil
	}
	k, err := cryptodev.GenerateKey(alg)
	if err != nil {
		return nil, err
	}
	return k.(*ecdh.PrivateKey).PublicKey().Bytes(), nil
}

// fillAsymOp describes one signature (of signDigest, or signMsg for
// Ed25519) or one agreement with peer.
func fillAsymOp(op *cryptodev.Op, key *cryptodev.Key, peer []byte) {
	alg := key.Alg()
	*op = cryptodev.Op{Key: key, Dst: make([]byte, alg.MaxOutLen())}
	switch {
	case alg.CanAgree():
		op.Dir, op.Src = cryptodev.Agree, peer
	case alg == cryptodev.Ed25519:
		op.Dir, op.Src = cryptodev.Sign, signMsg
	default:
		op.Dir, op.Src, op.Hash = cryptodev.Sign, signDigest[:], crypto.SHA256
	}
}

// rawAsymLoop is one raw thread of a signature or agreement run: the
// standard library called directly, as the soft engine calls it.
type rawAsymLoop struct {
	batch int
	op    func() error
}

func newRawAsymLoop(alg cryptodev.Alg, priv crypto.PrivateKey, peer []byte, batch int) *rawAsymLoop {
	l := &rawAsymLoop{batch: batch}
	switch k := priv.(type) {
	case *rsa.PrivateKey:
		l.op = func() error { _, err := rsa.SignPKCS1v15(nil, k, crypto.SHA256, signDigest[:]); return err }
	case *ecdsa.PrivateKey:
		l.op = func() error { _, err := ecdsa.SignASN1(rand.Reader, k, signDigest[:]); return err }
	case ed25519.PrivateKey:
		l.op = func() error { ed25519.Sign(k, signMsg); return nil }
	case *ecdh.PrivateKey:
		l.op = func() error {
			pub, err := k.Curve().NewPublicKey(peer)
			if err == nil {
				_, err = k.ECDH(pub)
			}
			return err
		}
	default:
		l.op = func() error { return fmt.Errorf("bench: raw %v: unexpected key %T", alg, priv) }
	}
	return l
}

func (l *rawAsymLoop) step() (ops, bytes int, err error) {
	for range l.batch {
		if err := l.op(); err != nil {
			return 0, 0, err
		}
	}
	return l.batch, 0, nil
}

func (l *rawAsymLoop) drain() {}
