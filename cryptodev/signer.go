package cryptodev

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"sync"
)

// SignerIdleQueues bounds the queues a Signer keeps open between Sign
// calls. More Sign calls than this may run at once; each extra one opens a
// queue and closes it when done.
const SignerIdleQueues = 8

// NewSigner returns a crypto.Signer whose private key stays in the engine:
// each Sign call is a batch of one Sign op, submitted on a queue of eng and
// waited for (Run). crypto/tls and crypto/x509 take it as a private key
// (tls.Certificate.PrivateKey, x509.CreateCertificate).
//
// key must be a signing key (RSA, ECDSA, Ed25519) that eng made. The Signer
// is safe for concurrent use: it keeps a small pool of queues, one per Sign
// call in progress. It also implements io.Closer, which closes the idle
// queues; closing is optional for the soft engine and releases resources
// for engines whose queues hold them.
//
// Sign's rand argument is ignored: the engine draws its own randomness
// (crypto/rand) for ECDSA and PSS. opts.HashFunc() is the digest's hash;
// see the key types in asym.go for which hashes are accepted. For RSA,
// *rsa.PSSOptions selects PSS, whose salt is always as long as the hash:
// SaltLength must be rsa.PSSSaltLengthEqualsHash, the hash's size, or
// rsa.PSSSaltLengthAuto (which lets the signer choose; verifiers using
// Auto accept any salt length). For Ed25519, digest is the whole message
// and opts must be crypto.Hash(0) (or *ed25519.Options without Hash and
// Context): Ed25519ph and Ed25519ctx are not supported.
func NewSigner(eng Engine, key *Key) (crypto.Signer, error) {
	if eng == nil || key == nil {
		return nil, errors.New("cryptodev: NewSigner needs an engine and a key")
	}
	if !key.Alg().CanSign() {
		return nil, fmt.Errorf("cryptodev: %v keys do not sign", key.Alg())
	}
	if key.Engine() != eng.Name() {
		return nil, fmt.Errorf("cryptodev: key belongs to engine %q, not %q", key.Engine(), eng.Name())
	}
	pub := key.Public()
	if pub == nil {
		return nil, errors.New("cryptodev: key has no public half (destroyed?)")
	}
	return &signer{eng: eng, key: key, pub: pub, idle: make(chan *signCtx, SignerIdleQueues)}, nil
}

type signer struct {
	eng  Engine
	key  *Key
	pub  crypto.PublicKey
	idle chan *signCtx

	mu     sync.Mutex
	closed bool
}

// signCtx is one Sign call's working set, reused through signer.idle.
type signCtx struct {
	q   Queue
	b   *Batch
	dst []byte
}

func (s *signer) Public() crypto.PublicKey { return s.pub }

func (s *signer) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	alg := s.key.Alg()
	hash, pss, err := SignParams(alg, digest, opts)
	if err != nil {
		return nil, err
	}

	c, err := s.get()
	if err != nil {
		return nil, err
	}
	c.b.Reset(1)
	op := &c.b.Ops[0]
	op.Key, op.Dir, op.Src, op.Dst, op.Hash, op.PSS = s.key, Sign, digest, c.dst, hash, pss
	if err := Run(c.q, c.b); err != nil {
		// An engine that lost or refused the batch leaves the queue in a
		// state not worth reusing.
		c.q.Close()
		return nil, fmt.Errorf("cryptodev: sign: %w", err)
	}
	st, n := op.Status, op.N
	var sig []byte
	if st == StatusOK {
		sig = append([]byte(nil), c.dst[:n]...)
	}
	c.b.Reset(0) // drop references to the caller's digest
	s.put(c)
	if st != StatusOK {
		return nil, fmt.Errorf("cryptodev: sign with %v key on engine %s: %v", alg, s.eng.Name(), st)
	}
	return sig, nil
}

// SignParams checks what a crypto.Signer's Sign was given for a key of
// type alg, as NewSigner's doc comment states it, and returns the Hash and
// PSS fields of the Sign op that makes that signature. Signers over an
// engine (this package's, and the batching ones of packages such as tls)
// share it so that they accept the same things.
func SignParams(alg Alg, digest []byte, opts crypto.SignerOpts) (hash crypto.Hash, pss bool, err error) {
	if opts != nil {
		hash = opts.HashFunc()
	}
	switch o := opts.(type) {
	case *rsa.PSSOptions:
		if alg.RSABits() == 0 {
			return 0, false, fmt.Errorf("cryptodev: PSS options for a %v key", alg)
		}
		if !knownHash(hash) {
			return 0, false, fmt.Errorf("cryptodev: PSS with unknown hash %v", hash)
		}
		switch o.SaltLength {
		case rsa.PSSSaltLengthEqualsHash, rsa.PSSSaltLengthAuto, hash.Size():
		default:
			return 0, false, fmt.Errorf("cryptodev: PSS salt length %d; the engine only signs with salt length = hash length (%d)", o.SaltLength, hash.Size())
		}
		pss = true
	case *ed25519.Options:
		if o.Context != "" {
			return 0, false, errors.New("cryptodev: Ed25519ctx is not supported")
		}
	}
	if alg == Ed25519 && hash != 0 {
		return 0, false, fmt.Errorf("cryptodev: Ed25519 signs whole messages (hash 0), not %v digests (Ed25519ph is not supported)", hash)
	}
	if alg != Ed25519 && (!knownHash(hash) || len(digest) != hash.Size()) {
		return 0, false, fmt.Errorf("cryptodev: %d-byte digest for hash %v", len(digest), hash)
	}
	return hash, pss, nil
}

// knownHash reports whether h is a crypto.Hash value whose Size does not
// panic. (The engine decides which hashes it signs.)
func knownHash(h crypto.Hash) bool { return h >= crypto.MD4 && h <= crypto.BLAKE2b_512 }

func (s *signer) get() (*signCtx, error) {
	select {
	case c := <-s.idle:
		return c, nil
	default:
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	q, err := s.eng.NewQueue()
	if err != nil {
		return nil, err
	}
	return &signCtx{q: q, b: NewBatch(1), dst: make([]byte, s.key.Alg().MaxOutLen())}, nil
}

func (s *signer) put(c *signCtx) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		select {
		case s.idle <- c:
			return
		default:
		}
	}
	c.q.Close()
}

// Close closes the idle queues; later Sign calls fail with ErrClosed. It
// does not destroy the key.
func (s *signer) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	for {
		select {
		case c := <-s.idle:
			c.q.Close()
		default:
			return nil
		}
	}
}

// RunAgree runs one key agreement on q and waits for it (it cannot be
// called Agree: that is the Direction): key (X25519 or
// ECDHP256) with the peer's public key, the shared secret written to out
// (at least 32 bytes). It returns the secret's length. q must have nothing
// else in flight (see Run); an engine whose op fails returns an error
// naming the op's status.
func RunAgree(q Queue, key *Key, peer []byte, out []byte) (int, error) {
	if key == nil || !key.Alg().CanAgree() {
		return 0, errors.New("cryptodev: RunAgree needs an X25519 or ECDH key")
	}
	b := NewBatch(1)
	b.Reset(1)
	op := &b.Ops[0]
	op.Key, op.Dir, op.Src, op.Dst = key, Agree, peer, out
	if err := Run(q, b); err != nil {
		return 0, fmt.Errorf("cryptodev: agree: %w", err)
	}
	if op.Status != StatusOK {
		return 0, fmt.Errorf("cryptodev: agree with %v key: %v", key.Alg(), op.Status)
	}
	return op.N, nil
}
