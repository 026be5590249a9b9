package soft

import (
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"math/big"

	"github.com/sluicegw/sluice/cryptodev"
)

// AsymKeyState is the soft engine's private key: the engine's own copy of
// an imported RSA, ECDSA, Ed25519 or ECDH key. Other software engines built
// on Process hold one of these in their cryptodev.Key (see
// NewAsymKeyState), and Process runs Sign and Agree ops on it.
//
// It is safe for concurrent use by ops in flight.
type AsymKeyState struct {
	alg   cryptodev.Alg
	rsa   *rsa.PrivateKey
	ecdsa *ecdsa.PrivateKey
	ed    ed25519.PrivateKey
	ecdh  *ecdh.PrivateKey
	pub   crypto.PublicKey
}

var _ cryptodev.AsymEngine = (*Engine)(nil)

// NewPrivateKey imports a private key. See cryptodev.AsymEngine.
func (e *Engine) NewPrivateKey(priv crypto.PrivateKey) (*cryptodev.Key, error) {
	k, err := NewAsymKeyState(priv)
	if err != nil {
		return nil, err
	}
	return cryptodev.NewKeyHandle(k.alg, Name, k, k.Zero), nil
}

// NewAsymKeyState copies priv (*rsa.PrivateKey of 2048, 3072 or 4096
// bits, *ecdsa.PrivateKey on P-256 or P-384, ed25519.PrivateKey,
// *ecdh.PrivateKey on X25519 or P-256) into a new key state, validating
// it. priv is not modified, and the state shares no memory with it.
func NewAsymKeyState(priv crypto.PrivateKey) (*AsymKeyState, error) {
	alg, err := cryptodev.AsymAlgOf(priv)
	if err != nil {
		return nil, err
	}
	k := &AsymKeyState{alg: alg}
	switch p := priv.(type) {
	case *rsa.PrivateKey:
		if p.D == nil || len(p.Primes) < 2 {
			return nil, errors.New("soft: RSA key without its private part")
		}
		c := &rsa.PrivateKey{
			PublicKey: rsa.PublicKey{N: new(big.Int).Set(p.N), E: p.E},
			D:         new(big.Int).Set(p.D),
			Primes:    make([]*big.Int, len(p.Primes)),
		}
		for i, q := range p.Primes {
			if q == nil {
				return nil, errors.New("soft: RSA key with a nil prime")
			}
			c.Primes[i] = new(big.Int).Set(q)
		}
		// Precompute derives (and checks) the CRT values and the
		// standard library's internal form of the key once, so no Sign
		// op pays for it.
		c.Precompute()
		if err := c.Validate(); err != nil {
			zeroRSA(c)
			return nil, fmt.Errorf("soft: invalid RSA key: %w", err)
		}
		k.rsa, k.pub = c, &c.PublicKey
	case *ecdsa.PrivateKey:
		raw, err := p.Bytes()
		if err != nil {
			return nil, fmt.Errorf("soft: invalid ECDSA key: %w", err)
		}
		c, err := ecdsa.ParseRawPrivateKey(p.Curve, raw)
		clear(raw)
		if err != nil {
			return nil, fmt.Errorf("soft: invalid ECDSA key: %w", err)
		}
		k.ecdsa, k.pub = c, &c.PublicKey
	case ed25519.PrivateKey:
		// The seed determines the key; rebuilding from it also checks
		// that the public half stored in priv belongs to it.
		seed := p.Seed()
		c := ed25519.NewKeyFromSeed(seed)
		clear(seed)
		if !c.Public().(ed25519.PublicKey).Equal(p.Public()) {
			clear(c)
			return nil, errors.New("soft: invalid Ed25519 key: public half does not match the seed")
		}
		k.ed, k.pub = c, c.Public()
	case *ecdh.PrivateKey:
		raw := p.Bytes()
		c, err := p.Curve().NewPrivateKey(raw)
		clear(raw)
		if err != nil {
			return nil, fmt.Errorf("soft: invalid ECDH key: %w", err)
		}
		k.ecdh, k.pub = c, c.PublicKey()
	default:
		return nil, fmt.Errorf("%w: key type %T", cryptodev.ErrUnsupported, priv)
	}
	return k, nil
}

// Alg returns the key type.
func (k *AsymKeyState) Alg() cryptodev.Alg { return k.alg }

// Public returns the public half of the key (cryptodev.Key.Public uses it).
func (k *AsymKeyState) Public() crypto.PublicKey { return k.pub }

// Zero wipes what the engine can reach of the key and drops the rest; it
// is the Key's destroy function. Call it only when no op in flight uses the
// key. The big.Int words of an RSA key and of an ECDSA scalar, and the
// Ed25519 key bytes, are overwritten. Not reachable, and left to the
// garbage collector: the copies the standard library derives and keeps
// inside its own types (the FIPS-module forms of RSA and ECDSA keys, the
// scalar inside an ecdh.PrivateKey, temporaries of big.Int arithmetic).
func (k *AsymKeyState) Zero() {
	if k.rsa != nil {
		zeroRSA(k.rsa)
	}
	if k.ecdsa != nil {
		//lint:ignore SA1019 the deprecated field is the only way to wipe the scalar
		zeroInt(k.ecdsa.D)
	}
	clear(k.ed)
	k.rsa, k.ecdsa, k.ed, k.ecdh = nil, nil, nil, nil
}

func zeroRSA(p *rsa.PrivateKey) {
	zeroInt(p.D)
	for _, q := range p.Primes {
		zeroInt(q)
	}
	pc := &p.Precomputed
	zeroInt(pc.Dp)
	zeroInt(pc.Dq)
	zeroInt(pc.Qinv)
	//lint:ignore SA1019 wiped, not used
	for _, v := range pc.CRTValues {
		zeroInt(v.Exp)
		zeroInt(v.Coeff)
		zeroInt(v.R)
	}
}

// zeroInt overwrites x's words in place (Bits shares x's backing array)
// and leaves x equal to 0.
func zeroInt(x *big.Int) {
	if x == nil {
		return
	}
	clear(x.Bits())
	x.SetInt64(0)
}

// sigHashOK reports whether h is a hash the engine signs digests of and
// digest has its length. SHA-1 and the rest are refused on purpose: TLS 1.3
// and RFC 8247 (IKEv2) have no use for them in signatures.
func sigHashOK(h crypto.Hash, digest []byte) bool {
	switch h {
	case crypto.SHA256, crypto.SHA384, crypto.SHA512:
		return len(digest) == h.Size()
	}
	return false
}

// asymOp runs one Sign or Agree op. It never panics on a malformed op.
func asymOp(op *cryptodev.Op) cryptodev.Status {
	op.N = 0
	if op.Key == nil {
		return cryptodev.StatusInvalid
	}
	k, ok := op.Key.State().(*AsymKeyState)
	if !ok || k == nil {
		return cryptodev.StatusInvalid
	}
	need := k.alg.MaxOutLen()
	if len(op.Dst) < need {
		return cryptodev.StatusInvalid
	}
	var out []byte
	var err error
	switch {
	case op.Dir == cryptodev.Sign && k.rsa != nil:
		if !sigHashOK(op.Hash, op.Src) {
			return cryptodev.StatusInvalid
		}
		if op.PSS {
			out, err = rsa.SignPSS(rand.Reader, k.rsa, op.Hash, op.Src, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
		} else {
			out, err = rsa.SignPKCS1v15(nil, k.rsa, op.Hash, op.Src)
		}
	case op.Dir == cryptodev.Sign && k.ecdsa != nil:
		if op.PSS || !sigHashOK(op.Hash, op.Src) {
			return cryptodev.StatusInvalid
		}
		out, err = ecdsa.SignASN1(rand.Reader, k.ecdsa, op.Src)
	case op.Dir == cryptodev.Sign && k.ed != nil:
		if op.PSS || op.Hash != 0 {
			return cryptodev.StatusInvalid
		}
		out = ed25519.Sign(k.ed, op.Src)
	case op.Dir == cryptodev.Agree && k.ecdh != nil:
		if op.PSS || op.Hash != 0 {
			return cryptodev.StatusInvalid
		}
		var peer *ecdh.PublicKey
		if peer, err = k.ecdh.Curve().NewPublicKey(op.Src); err == nil {
			out, err = k.ecdh.ECDH(peer)
		}
	default: // a destroyed key, or an op its type cannot do
		return cryptodev.StatusInvalid
	}
	if err != nil || len(out) > len(op.Dst) {
		clear(out)
		return cryptodev.StatusInvalid
	}
	op.N = copy(op.Dst, out)
	if op.Dir == cryptodev.Agree {
		clear(out)
	}
	return cryptodev.StatusOK
}
