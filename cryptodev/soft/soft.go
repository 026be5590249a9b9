// Package soft is the synchronous software engine: Go's crypto (AES-NI and
// CLMUL assembly for GCM, x/crypto for ChaCha20-Poly1305), run in the
// submitter's goroutine. Submit completes the whole batch before it returns.
//
// Its Process function is the building block of the asynchronous software
// engines too (package sched runs it on worker goroutines).
package soft

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"errors"
	"fmt"
	"hash"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/sluicegw/sluice/cryptodev"
)

// Name is the engine's registry name.
const Name = "soft"

func init() {
	cryptodev.Register(Name, 10, func() (cryptodev.Engine, error) { return New(), nil })
}

// Engine is the synchronous software engine. It is safe for concurrent use;
// each Queue is for one goroutine.
type Engine struct {
	closed atomic.Bool
}

// New returns the software engine.
func New() *Engine { return &Engine{} }

func (*Engine) Name() string                  { return Name }
func (*Engine) Async() bool                   { return false }
func (*Engine) Supports(a cryptodev.Alg) bool { return a.Valid() }

// Close makes later NewQueue and Submit calls fail with ErrClosed. Nothing is
// ever in flight in a synchronous engine, so there is nothing to drain.
func (e *Engine) Close() error {
	e.closed.Store(true)
	return nil
}

// NewKey expands the key. See cryptodev.Engine.
func (e *Engine) NewKey(alg cryptodev.Alg, encKey, authKey []byte) (*cryptodev.Key, error) {
	k, err := NewKeyState(alg, encKey, authKey)
	if err != nil {
		return nil, err
	}
	return cryptodev.NewKeyHandle(alg, Name, k, k.zero), nil
}

// KeyState is the soft engine's expanded key. Other software engines built
// on Process hold one of these in their cryptodev.Key.
type KeyState struct {
	alg    cryptodev.Alg
	icvLen int
	// AEAD suites.
	aead cipher.AEAD
	salt [4]byte
	// Chained suites.
	block   cipher.Block // nil for NULL encryption
	newHash func() hash.Hash
	authKey []byte
	chains  sync.Pool // *chainCtx: CBC modes and HMAC state are not concurrency-safe
}

// chainCtx is the per-use state of a chained suite, pooled per key so that
// concurrent workers never share a hash or a block mode.
type chainCtx struct {
	enc, dec cipher.BlockMode
	mac      hash.Hash
	sum      [64]byte
}

type ivSetter interface{ SetIV([]byte) }

// NewKeyState expands a key for alg. It copies the key material.
func NewKeyState(alg cryptodev.Alg, encKey, authKey []byte) (*KeyState, error) {
	if !alg.Valid() {
		return nil, cryptodev.ErrUnsupported
	}
	info := alg.Info()
	if len(encKey) != alg.EncKeyLen() {
		return nil, fmt.Errorf("soft: %s takes %d bytes of encryption key material, got %d", alg, alg.EncKeyLen(), len(encKey))
	}
	if len(authKey) != info.AuthKeyLen {
		return nil, fmt.Errorf("soft: %s takes %d bytes of authentication key, got %d", alg, info.AuthKeyLen, len(authKey))
	}
	k := &KeyState{alg: alg, icvLen: info.ICVLen}
	var err error
	if info.AEAD {
		copy(k.salt[:], encKey[info.KeyLen:])
		k.aead, err = NewAEAD(alg, encKey[:info.KeyLen])
		return k, err
	}
	if info.KeyLen > 0 {
		if k.block, err = aes.NewCipher(encKey); err != nil {
			return nil, err
		}
	}
	if k.newHash = HashFunc(info.Hash); k.newHash == nil {
		return nil, errors.New("soft: chained suite without a hash")
	}
	k.authKey = append([]byte(nil), authKey...)
	k.chains.New = func() any {
		c := &chainCtx{mac: hmac.New(k.newHash, k.authKey)}
		if k.block != nil {
			var iv [aes.BlockSize]byte
			c.enc = cipher.NewCBCEncrypter(k.block, iv[:])
			c.dec = cipher.NewCBCDecrypter(k.block, iv[:])
		}
		return c
	}
	return k, nil
}

// NewAEAD returns Go's AEAD for an AEAD suite's key (without the salt):
// AES-GCM through crypto/cipher, ChaCha20-Poly1305 through x/crypto.
func NewAEAD(alg cryptodev.Alg, key []byte) (cipher.AEAD, error) {
	if alg == cryptodev.ChaCha20Poly1305 {
		return chacha20poly1305.New(key)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// HashFunc returns the hash constructor of a chained suite's HMAC, or nil
// for HashNone.
func HashFunc(h cryptodev.Hash) func() hash.Hash {
	switch h {
	case cryptodev.HashSHA256:
		return sha256.New
	case cryptodev.HashSHA384:
		return sha512.New384
	case cryptodev.HashSHA512:
		return sha512.New
	}
	return nil
}

// zero wipes the key material this engine holds. Go's expanded AES and
// HMAC states cannot be reached to be wiped; they are dropped for the GC.
func (k *KeyState) zero() {
	clear(k.authKey)
	clear(k.salt[:])
	k.aead = nil
	k.block = nil
}

// Scratch is per-goroutine working memory for Process. The zero value is
// ready; it must not be shared between goroutines running at once.
type Scratch struct {
	nonce [12]byte
}

// Process runs every op in ops and sets its Status. It never fails as a
// whole. Symmetric ops allocate only on the slow path of an AEAD op whose
// Tag does not directly follow its data; asymmetric ops allocate as Go's
// crypto packages do.
func Process(ops []cryptodev.Op, s *Scratch) {
	for i := range ops {
		op := &ops[i]
		if op.Dir >= cryptodev.Sign { // Sign, Agree: asym.go
			op.Status = asymOp(op)
			continue
		}
		if op.Key == nil {
			op.Status = cryptodev.StatusInvalid
			continue
		}
		ks, ok := op.Key.State().(*KeyState)
		if !ok || ks == nil {
			op.Status = cryptodev.StatusInvalid
			continue
		}
		if ks.aead != nil {
			op.Status = ks.aeadOp(op, s)
		} else {
			op.Status = ks.chainOp(op)
		}
	}
}

// follows reports whether b starts right where a ends, in the same array.
func follows(a, b []byte) bool {
	if len(b) == 0 || cap(a)-len(a) < len(b) {
		return false
	}
	return unsafe.SliceData(a[len(a):cap(a)]) == unsafe.SliceData(b)
}

func (k *KeyState) aeadOp(op *cryptodev.Op, s *Scratch) cryptodev.Status {
	if len(op.IV) != 8 || len(op.Dst) != len(op.Src) || len(op.Tag) != k.icvLen {
		return cryptodev.StatusInvalid
	}
	nonce := s.nonce[:]
	copy(nonce[:4], k.salt[:])
	copy(nonce[4:], op.IV)
	n := len(op.Src)
	if op.Dir == cryptodev.Encrypt {
		if follows(op.Dst, op.Tag) {
			k.aead.Seal(op.Dst[:0], nonce, op.Src, op.AAD)
			return cryptodev.StatusOK
		}
		out := k.aead.Seal(make([]byte, 0, n+k.icvLen), nonce, op.Src, op.AAD)
		copy(op.Dst, out[:n])
		copy(op.Tag, out[n:])
		return cryptodev.StatusOK
	}
	var err error
	if follows(op.Src, op.Tag) {
		_, err = k.aead.Open(op.Dst[:0], nonce, op.Src[:n+k.icvLen], op.AAD)
	} else {
		in := make([]byte, n+k.icvLen)
		copy(in, op.Src)
		copy(in[n:], op.Tag)
		var out []byte
		if out, err = k.aead.Open(in[:0], nonce, in, op.AAD); err == nil {
			copy(op.Dst, out)
		}
	}
	if err != nil {
		return cryptodev.StatusAuthFailed
	}
	return cryptodev.StatusOK
}

func (k *KeyState) chainOp(op *cryptodev.Op) cryptodev.Status {
	if len(op.Dst) != len(op.Src) || len(op.Tag) != k.icvLen {
		return cryptodev.StatusInvalid
	}
	if k.block != nil {
		if len(op.IV) != aes.BlockSize || len(op.Src)%aes.BlockSize != 0 {
			return cryptodev.StatusInvalid
		}
	} else if len(op.IV) != 0 {
		return cryptodev.StatusInvalid
	}
	c := k.chains.Get().(*chainCtx)
	defer k.chains.Put(c)
	if op.Dir == cryptodev.Encrypt {
		if k.block != nil {
			c.enc.(ivSetter).SetIV(op.IV)
			c.enc.CryptBlocks(op.Dst, op.Src)
		} else {
			copy(op.Dst, op.Src)
		}
		copy(op.Tag, k.mac(c, op, op.Dst))
		return cryptodev.StatusOK
	}
	if subtle.ConstantTimeCompare(k.mac(c, op, op.Src), op.Tag) != 1 {
		return cryptodev.StatusAuthFailed
	}
	if k.block != nil {
		c.dec.(ivSetter).SetIV(op.IV)
		c.dec.CryptBlocks(op.Dst, op.Src)
	} else {
		copy(op.Dst, op.Src)
	}
	return cryptodev.StatusOK
}

// mac computes the truncated HMAC over AAD || IV || ciphertext || AuthTrailer
// into c.sum and returns the ICV-length prefix (RFC 4868 section 2.3).
func (k *KeyState) mac(c *chainCtx, op *cryptodev.Op, ciphertext []byte) []byte {
	m := c.mac
	m.Reset()
	m.Write(op.AAD)
	m.Write(op.IV)
	m.Write(ciphertext)
	m.Write(op.AuthTrailer)
	return m.Sum(c.sum[:0])[:k.icvLen]
}

// processor is a Processor: Process with a Scratch of its own.
type processor struct{ s Scratch }

func (p *processor) Process(ops []cryptodev.Op) { Process(ops, &p.s) }
func (p *processor) Close()                     {}

// NewProcessor returns a Processor for one goroutine (package sched runs
// one per worker). See cryptodev.ProcessorEngine.
func (e *Engine) NewProcessor() (cryptodev.Processor, error) { return new(processor), nil }

var _ cryptodev.ProcessorEngine = (*Engine)(nil)

// MaxInFlight bounds the batches a soft queue holds before they are
// dequeued.
const MaxInFlight = cryptodev.MaxSyncInFlight

// NewQueue opens a queue. See cryptodev.Engine.
func (e *Engine) NewQueue() (cryptodev.Queue, error) {
	if e.closed.Load() {
		return nil, cryptodev.ErrClosed
	}
	return cryptodev.NewSyncQueue(new(processor), &e.closed), nil
}
