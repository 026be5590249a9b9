//go:build openssl

package openssl

/*
#include "ossl.h"
*/
import "C"

import (
	"crypto"
	"crypto/ecdh"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
)

// maxAsymOut is the longest output of an asymmetric op: an RSA-4096
// signature.
const maxAsymOut = 512

// asymKey is the engine's private key: an EVP_PKEY made from the caller's
// key, and the public half as the standard library holds it.
type asymKey struct {
	alg  cryptodev.Alg
	kind C.int
	pub  crypto.PublicKey
	c    unsafe.Pointer // *C.struct_sl_pkey; nil once destroyed (atomic)
}

// Public returns the public half (cryptodev.Key.Public uses it).
func (k *asymKey) Public() crypto.PublicKey { return k.pub }

func (k *asymKey) destroy() {
	if c := atomic.SwapPointer(&k.c, nil); c != nil {
		C.sl_pkey_free((*C.struct_sl_pkey)(c))
	}
}

func kindOf(alg cryptodev.Alg) C.int {
	switch alg {
	case cryptodev.RSA2048, cryptodev.RSA3072, cryptodev.RSA4096:
		return C.SL_RSA
	case cryptodev.ECDSAP256, cryptodev.ECDSAP384:
		return C.SL_ECDSA
	case cryptodev.Ed25519:
		return C.SL_ED25519
	case cryptodev.X25519:
		return C.SL_X25519
	}
	return C.SL_ECDH
}

// NewPrivateKey imports a private key into libcrypto. See
// cryptodev.AsymEngine: it takes the key types soft takes and validates them
// the same way (it runs soft.NewAsymKeyState on them first), then hands
// libcrypto the key as PKCS #8 DER, which it overwrites afterwards. priv is
// not modified. Destroy frees the EVP_PKEY; libcrypto clears the private
// values it frees. Not reachable, and left to the garbage collector: the
// temporaries of Go's DER encoder.
func (e *Engine) NewPrivateKey(priv crypto.PrivateKey) (*cryptodev.Key, error) {
	ks, err := soft.NewAsymKeyState(priv)
	if err != nil {
		return nil, fmt.Errorf("openssl: %w", err)
	}
	alg := ks.Alg()
	pub, err := copyPublic(ks.Public())
	ks.Zero()
	if err != nil {
		return nil, err
	}
	if p, ok := priv.(*rsa.PrivateKey); ok {
		// MarshalPKCS8PrivateKey precomputes the CRT values of the key it
		// is given: give it a shallow copy, so that priv is not written.
		c := *p
		priv = &c
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("openssl: %v key: %w", alg, err)
	}
	c := C.sl_pkey_new(kindOf(alg), bytesPtr(der), C.size_t(len(der)))
	clear(der)
	if c == nil {
		return nil, fmt.Errorf("openssl: libcrypto refused the %v key", alg)
	}
	k := &asymKey{alg: alg, kind: kindOf(alg), pub: pub}
	k.c = unsafe.Pointer(c)
	return cryptodev.NewKeyHandle(alg, Name, k, k.destroy), nil
}

// copyPublic returns a copy of pub that shares no memory with it, of the
// same type (PKIX would turn an ECDH P-256 key into an ECDSA one).
func copyPublic(pub crypto.PublicKey) (crypto.PublicKey, error) {
	if p, ok := pub.(*ecdh.PublicKey); ok {
		return p.Curve().NewPublicKey(p.Bytes())
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("openssl: public key: %w", err)
	}
	return x509.ParsePKIXPublicKey(der)
}

// sigHash is the C digest number of a hash the engine signs digests of
// when digest has its length, or 0. As in soft, SHA-1 and the rest are
// refused on purpose.
func sigHash(h crypto.Hash, digest []byte) C.int {
	if len(digest) != 0 && len(digest) == sizeOf(h) {
		switch h {
		case crypto.SHA256:
			return C.SL_SHA256
		case crypto.SHA384:
			return C.SL_SHA384
		case crypto.SHA512:
			return C.SL_SHA512
		}
	}
	return 0
}

func sizeOf(h crypto.Hash) int {
	switch h {
	case crypto.SHA256:
		return 32
	case crypto.SHA384:
		return 48
	case crypto.SHA512:
		return 64
	}
	return -1
}

// asymOp runs one Sign or Agree op in one cgo call. The result goes to
// the queue's scratch first and to Dst only on success, so that a failed
// op leaves Dst as it was; a shared secret is wiped from the scratch.
func (q *processor) asymOp(op *cryptodev.Op) cryptodev.Status {
	op.N = 0
	if op.Key == nil {
		return cryptodev.StatusInvalid
	}
	k, ok := op.Key.State().(*asymKey)
	if !ok || k == nil || len(op.Dst) < k.alg.MaxOutLen() {
		return cryptodev.StatusInvalid
	}
	c := (*C.struct_sl_pkey)(atomic.LoadPointer(&k.c))
	if c == nil {
		return cryptodev.StatusInvalid
	}
	outLen := C.size_t(len(q.out))
	var good C.int
	switch {
	case op.Dir == cryptodev.Sign && k.alg == cryptodev.Ed25519:
		if op.PSS || op.Hash != 0 {
			return cryptodev.StatusInvalid
		}
		var empty [1]byte
		msg := (*C.uint8_t)(&empty[0])
		if len(op.Src) > 0 {
			msg = bytesPtr(op.Src)
		}
		good = C.sl_sign(c, 0, 0, msg, C.size_t(len(op.Src)), (*C.uint8_t)(&q.out[0]), &outLen)
	case op.Dir == cryptodev.Sign && k.alg.CanSign():
		h := sigHash(op.Hash, op.Src)
		if h == 0 || op.PSS && k.kind != C.SL_RSA {
			return cryptodev.StatusInvalid
		}
		pss := C.int(0)
		if op.PSS {
			pss = 1
		}
		good = C.sl_sign(c, h, pss, bytesPtr(op.Src), C.size_t(len(op.Src)), (*C.uint8_t)(&q.out[0]), &outLen)
	case op.Dir == cryptodev.Agree && k.alg.CanAgree():
		if op.PSS || op.Hash != 0 || !peerShapeOK(k.alg, op.Src) {
			return cryptodev.StatusInvalid
		}
		good = C.sl_derive(c, bytesPtr(op.Src), C.size_t(len(op.Src)), (*C.uint8_t)(&q.out[0]), &outLen)
	default: // an op the key type cannot do
		return cryptodev.StatusInvalid
	}
	n := int(outLen)
	defer clear(q.out[:min(n, len(q.out))])
	if good != 1 || n <= 0 || n > len(op.Dst) || n > k.alg.MaxOutLen() {
		return cryptodev.StatusInvalid
	}
	op.N = copy(op.Dst, q.out[:n])
	return cryptodev.StatusOK
}

// peerShapeOK checks the encoding of a peer's public key before libcrypto
// decodes it: 32 bytes for X25519 (RFC 7748), and for P-256 the 65-byte
// uncompressed point only, as crypto/ecdh takes it (libcrypto would also
// take a compressed one).
func peerShapeOK(alg cryptodev.Alg, peer []byte) bool {
	switch alg {
	case cryptodev.X25519:
		return len(peer) == 32
	case cryptodev.ECDHP256:
		return len(peer) == 65 && peer[0] == 4
	}
	return false
}
