package cryptodev

import (
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"strings"
)

// asymBase is the first asymmetric Alg, well above the symmetric suites
// (numAlgs) so that either list can grow.
const asymBase Alg = 64

// Asymmetric key types. They share the Alg type with the symmetric suites
// so that a *Key names its algorithm the same way for both, but they live
// in their own range (from 64), outside Algs() and ParseAlg: they are never
// ESP suites. AsymAlgs lists them and ParseAsymAlg parses their names.
//
// Each RSA modulus size is its own Alg, so that a key's Alg says everything
// an engine (or a benchmark table) needs to know about its cost, and
// NewPrivateKey rejects RSA moduli of any other size.
//
// What each type does with an Op:
//
//	Sign, RSA2048/3072/4096: Src is the digest of Hash (SHA-256, SHA-384 or
//	    SHA-512); PKCS #1 v1.5, or PSS with salt length = hash length when
//	    PSS is set. Dst receives the modulus-sized signature.
//	Sign, ECDSAP256/P384: Src is the digest of Hash (SHA-256, SHA-384 or
//	    SHA-512); Dst receives an ASN.1 DER signature (RFC 5480, what
//	    crypto/tls and x509 expect), at most MaxOutLen bytes.
//	Sign, Ed25519: Src is the whole message, Hash must be 0 (pure Ed25519,
//	    RFC 8032; no Ed25519ph or context). Dst receives 64 bytes.
//	Agree, X25519: Src is the peer's 32-byte public key (RFC 7748).
//	Agree, ECDHP256: Src is the peer's uncompressed 65-byte point.
//	    Both write the 32-byte shared secret to Dst.
//
// Dst must hold at least MaxOutLen bytes, or the op fails with
// StatusInvalid before any work is done; N is set to the bytes written. A
// hash outside the list above, a digest whose length is not the hash's, a
// PSS flag on a non-RSA key, an operation the key type cannot do (Sign with
// an X25519 key, Agree with an ECDSA key) and a peer key that does not
// decode or yields an all-zero X25519 secret all give StatusInvalid.
const (
	RSA2048 Alg = asymBase + iota
	RSA3072
	RSA4096
	ECDSAP256
	ECDSAP384
	Ed25519
	X25519
	ECDHP256
	endAsymAlgs
)

var asymInfo = [endAsymAlgs - asymBase]AlgInfo{
	RSA2048 - asymBase:   {Name: "rsa2048"},
	RSA3072 - asymBase:   {Name: "rsa3072"},
	RSA4096 - asymBase:   {Name: "rsa4096"},
	ECDSAP256 - asymBase: {Name: "ecdsap256"},
	ECDSAP384 - asymBase: {Name: "ecdsap384"},
	Ed25519 - asymBase:   {Name: "ed25519"},
	X25519 - asymBase:    {Name: "x25519"},
	ECDHP256 - asymBase:  {Name: "ecdhp256"},
}

// AsymAlgs lists every asymmetric key type in a stable order.
func AsymAlgs() []Alg {
	out := make([]Alg, 0, endAsymAlgs-asymBase)
	for a := asymBase; a < endAsymAlgs; a++ {
		out = append(out, a)
	}
	return out
}

// ParseAsymAlg accepts an asymmetric key type's name (case-insensitive):
// rsa2048, rsa3072, rsa4096, ecdsap256, ecdsap384, ed25519, x25519,
// ecdhp256.
func ParseAsymAlg(name string) (Alg, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for a := asymBase; a < endAsymAlgs; a++ {
		if asymInfo[a-asymBase].Name == n {
			return a, nil
		}
	}
	names := make([]string, 0, endAsymAlgs-asymBase)
	for _, a := range AsymAlgs() {
		names = append(names, a.String())
	}
	return AlgInvalid, fmt.Errorf("cryptodev: unknown asymmetric algorithm %q (valid: %s)", name, strings.Join(names, ", "))
}

// CanSign reports whether keys of type a make signatures (Dir Sign).
func (a Alg) CanSign() bool { return a >= RSA2048 && a <= Ed25519 }

// CanAgree reports whether keys of type a do key agreement (Dir Agree).
func (a Alg) CanAgree() bool { return a == X25519 || a == ECDHP256 }

// RSABits is the modulus size of an RSA key type, or 0.
func (a Alg) RSABits() int {
	switch a {
	case RSA2048:
		return 2048
	case RSA3072:
		return 3072
	case RSA4096:
		return 4096
	}
	return 0
}

// MaxOutLen is the Dst length a Sign or Agree op with a key of type a
// needs: the RSA modulus size, the longest DER ECDSA signature (72 bytes
// for P-256, 104 for P-384), 64 for Ed25519, 32 for a shared secret. It is
// 0 for a symmetric suite.
func (a Alg) MaxOutLen() int {
	switch a {
	case RSA2048, RSA3072, RSA4096:
		return a.RSABits() / 8
	case ECDSAP256:
		// SEQUENCE(2) { INTEGER(2+33), INTEGER(2+33) }
		return 72
	case ECDSAP384:
		// SEQUENCE(2) { INTEGER(2+49), INTEGER(2+49) }
		return 104
	case Ed25519:
		return ed25519.SignatureSize
	case X25519, ECDHP256:
		return 32
	}
	return 0
}

// AsymAlgOf returns the asymmetric key type of a private (or public) key
// from the standard library: *rsa.PrivateKey (2048, 3072 or 4096 bits),
// *ecdsa.PrivateKey (P-256, P-384), ed25519.PrivateKey, *ecdh.PrivateKey
// (X25519, P-256), or the matching public keys.
func AsymAlgOf(key any) (Alg, error) {
	switch k := key.(type) {
	case *rsa.PrivateKey:
		if k == nil {
			break
		}
		return AsymAlgOf(&k.PublicKey)
	case *rsa.PublicKey:
		if k == nil || k.N == nil {
			break
		}
		switch k.N.BitLen() {
		case 2048:
			return RSA2048, nil
		case 3072:
			return RSA3072, nil
		case 4096:
			return RSA4096, nil
		}
		return AlgInvalid, fmt.Errorf("%w: %d-bit RSA key (2048, 3072 and 4096 are supported)", ErrUnsupported, k.N.BitLen())
	case *ecdsa.PrivateKey:
		if k == nil {
			break
		}
		return AsymAlgOf(&k.PublicKey)
	case *ecdsa.PublicKey:
		if k == nil || k.Curve == nil {
			break
		}
		switch k.Curve {
		case elliptic.P256():
			return ECDSAP256, nil
		case elliptic.P384():
			return ECDSAP384, nil
		}
		return AlgInvalid, fmt.Errorf("%w: ECDSA on %s (P-256 and P-384 are supported)", ErrUnsupported, k.Curve.Params().Name)
	case ed25519.PrivateKey:
		if len(k) != ed25519.PrivateKeySize {
			return AlgInvalid, fmt.Errorf("cryptodev: Ed25519 private key of %d bytes", len(k))
		}
		return Ed25519, nil
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return AlgInvalid, fmt.Errorf("cryptodev: Ed25519 public key of %d bytes", len(k))
		}
		return Ed25519, nil
	case *ecdh.PrivateKey:
		if k == nil {
			break
		}
		return AsymAlgOf(k.PublicKey())
	case *ecdh.PublicKey:
		if k == nil {
			break
		}
		switch k.Curve() {
		case ecdh.X25519():
			return X25519, nil
		case ecdh.P256():
			return ECDHP256, nil
		}
		return AlgInvalid, fmt.Errorf("%w: ECDH on %v (X25519 and P-256 are supported)", ErrUnsupported, k.Curve())
	}
	return AlgInvalid, fmt.Errorf("%w: key type %T", ErrUnsupported, key)
}

// GenerateKey makes a fresh private key of type alg with the standard
// library, for tests and benchmarks (keys for service come from files or a
// key manager and are imported with AsymEngine.NewPrivateKey). It returns
// *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey or
// *ecdh.PrivateKey.
func GenerateKey(alg Alg) (crypto.PrivateKey, error) {
	switch alg {
	case RSA2048, RSA3072, RSA4096:
		return rsa.GenerateKey(rand.Reader, alg.RSABits())
	case ECDSAP256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case ECDSAP384:
		return ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case Ed25519:
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		return priv, err
	case X25519:
		return ecdh.X25519().GenerateKey(rand.Reader)
	case ECDHP256:
		return ecdh.P256().GenerateKey(rand.Reader)
	}
	return nil, fmt.Errorf("%w: %v is not an asymmetric algorithm", ErrUnsupported, alg)
}

// AsymEngine is implemented by engines that hold private keys. Their
// queues run Sign and Agree ops (see the key types above) in the same
// batches as symmetric ops.
type AsymEngine interface {
	Engine
	// NewPrivateKey imports a private key (*rsa.PrivateKey,
	// *ecdsa.PrivateKey, ed25519.PrivateKey, *ecdh.PrivateKey) into the
	// engine. The engine keeps its own copy: the caller may drop (or wipe)
	// priv afterwards, and destroying the Key does not touch priv. The
	// Key's Alg is the key type (AsymAlgOf). The Key's State must have a
	// method Public() crypto.PublicKey, which Key.Public uses.
	NewPrivateKey(priv crypto.PrivateKey) (*Key, error)
}

// publicKeyer is what the State of an asymmetric key implements.
type publicKeyer interface{ Public() crypto.PublicKey }

// Public returns the public half of an asymmetric key (*rsa.PublicKey,
// *ecdsa.PublicKey, ed25519.PublicKey or *ecdh.PublicKey), or nil for a
// symmetric or destroyed key.
func (k *Key) Public() crypto.PublicKey {
	if k == nil {
		return nil
	}
	if p, ok := k.State().(publicKeyer); ok {
		return p.Public()
	}
	return nil
}
