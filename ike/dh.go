package ike

// Diffie-Hellman groups for the KE payload: 14 (2048-bit MODP, RFC 3526
// section 3; and, where a configuration names them, the weak 2 and 5 of
// RFC 2409 section 6.2 and RFC 3526 section 2), 19 and 20 (NIST P-256 and P-384 as IKEv2 encodes them, RFC
// 5903) and 31 (Curve25519, RFC 8031).

import (
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// DH is one side's ephemeral key for a group: its public value as the KE
// payload carries it, and the shared secret with a peer's.
type DH interface {
	// Group is the transform ID of the group.
	Group() uint16
	// Public is the KE payload's key exchange data.
	Public() []byte
	// Shared returns g^ir from the peer's key exchange data, or an error
	// if that is malformed or out of range.
	Shared(peer []byte) ([]byte, error)
}

// NewDH generates an ephemeral key for group. For an ML-KEM method
// (kem.go) it is the initiator's side: Public is the encapsulation key and
// Shared decapsulates the responder's ciphertext; the responder uses
// RespondKE.
func NewDH(group uint16) (DH, error) {
	switch group {
	case MLKEM768, MLKEM1024:
		return newKEM(group)
	case DHModp2048, DHModp1536, DHModp1024:
		return newModp(modpPrime(group), group)
	case DHECP256, DHECP384, DHCurve25519:
		c := curveOf(group)
		k, err := c.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("ike: DH group %d: %w", group, err)
		}
		return &ecKey{group: group, k: k}, nil
	}
	return nil, fmt.Errorf("ike: DH group %d is not supported", group)
}

func curveOf(group uint16) ecdh.Curve {
	switch group {
	case DHECP256:
		return ecdh.P256()
	case DHECP384:
		return ecdh.P384()
	}
	return ecdh.X25519()
}

// ecKey is a key on an ECP group or Curve25519. RFC 5903 section 7: the
// public value is x | y without a point-format octet; the shared secret is
// the x coordinate. RFC 8031: Curve25519 values are the 32-byte strings of
// RFC 7748.
type ecKey struct {
	group uint16
	k     *ecdh.PrivateKey
}

func (e *ecKey) Group() uint16 { return e.group }

func (e *ecKey) Public() []byte {
	p := e.k.PublicKey().Bytes()
	if e.group != DHCurve25519 {
		return p[1:] // drop 0x04
	}
	return p
}

func (e *ecKey) Shared(peer []byte) ([]byte, error) {
	if e.group != DHCurve25519 {
		if len(peer) != len(e.Public()) {
			return nil, fmt.Errorf("ike: DH group %d public value of %d bytes", e.group, len(peer))
		}
		peer = append([]byte{4}, peer...)
	}
	pub, err := curveOf(e.group).NewPublicKey(peer)
	if err != nil {
		return nil, fmt.Errorf("ike: DH group %d: %w", e.group, err)
	}
	s, err := e.k.ECDH(pub)
	if err != nil {
		return nil, fmt.Errorf("ike: DH group %d: %w", e.group, err)
	}
	return s, nil
}

// modp2048 is the prime of the 2048-bit MODP group (RFC 3526 section 3);
// the generator is 2.
var modp2048 = mustHex(`
FFFFFFFF FFFFFFFF C90FDAA2 2168C234 C4C6628B 80DC1CD1
29024E08 8A67CC74 020BBEA6 3B139B22 514A0879 8E3404DD
EF9519B3 CD3A431B 302B0A6D F25F1437 4FE1356D 6D51C245
E485B576 625E7EC6 F44C42E9 A637ED6B 0BFF5CB6 F406B7ED
EE386BFB 5A899FA5 AE9F2411 7C4B1FE6 49286651 ECE45B3D
C2007CB8 A163BF05 98DA4836 1C55D39A 69163FA8 FD24CF5F
83655D23 DCA3AD96 1C62F356 208552BB 9ED52907 7096966D
670C354E 4ABC9804 F1746C08 CA18217C 32905E46 2E36CE3B
E39E772C 180E8603 9B2783A2 EC07A28F B5C55DF0 6F4C52C9
DE2BCBF6 95581718 3995497C EA956AE5 15D22618 98FA0510
15728E5A 8AACAA68 FFFFFFFF FFFFFFFF`)

// modp1024 is the prime of the 1024-bit MODP group, Oakley group 2 (RFC
// 2409 section 6.2); the generator is 2.
var modp1024 = mustHex(`
FFFFFFFF FFFFFFFF C90FDAA2 2168C234 C4C6628B 80DC1CD1
29024E08 8A67CC74 020BBEA6 3B139B22 514A0879 8E3404DD
EF9519B3 CD3A431B 302B0A6D F25F1437 4FE1356D 6D51C245
E485B576 625E7EC6 F44C42E9 A637ED6B 0BFF5CB6 F406B7ED
EE386BFB 5A899FA5 AE9F2411 7C4B1FE6 49286651 ECE65381
FFFFFFFF FFFFFFFF`)

// modp1536 is the prime of the 1536-bit MODP group (RFC 3526 section 2);
// the generator is 2.
var modp1536 = mustHex(`
FFFFFFFF FFFFFFFF C90FDAA2 2168C234 C4C6628B 80DC1CD1
29024E08 8A67CC74 020BBEA6 3B139B22 514A0879 8E3404DD
EF9519B3 CD3A431B 302B0A6D F25F1437 4FE1356D 6D51C245
E485B576 625E7EC6 F44C42E9 A637ED6B 0BFF5CB6 F406B7ED
EE386BFB 5A899FA5 AE9F2411 7C4B1FE6 49286651 ECE45B3D
C2007CB8 A163BF05 98DA4836 1C55D39A 69163FA8 FD24CF5F
83655D23 DCA3AD96 1C62F356 208552BB 9ED52907 7096966D
670C354E 4ABC9804 F1746C08 CA237327 FFFFFFFF FFFFFFFF`)

// modpPrime is the prime of a MODP group NewDH supports, nil for another.
func modpPrime(group uint16) *big.Int {
	switch group {
	case DHModp2048:
		return modp2048
	case DHModp1536:
		return modp1536
	case DHModp1024:
		return modp1024
	}
	return nil
}

func mustHex(s string) *big.Int {
	s = strings.Join(strings.Fields(s), "")
	n, ok := new(big.Int).SetString(s, 16)
	if !ok {
		panic("ike: bad MODP prime")
	}
	return n
}

type modpKey struct {
	group uint16
	p     *big.Int
	x     *big.Int
	pub   []byte
}

func newModp(p *big.Int, group uint16) (*modpKey, error) {
	// A 2048-bit group's exponent: 256 random bits give more strength
	// than the group itself has (RFC 3526 section 8 estimates 110-160).
	x, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 256))
	if err != nil {
		return nil, fmt.Errorf("ike: DH group %d: %w", group, err)
	}
	x.SetBit(x, 255, 1)
	y := new(big.Int).Exp(big.NewInt(2), x, p)
	return &modpKey{group: group, p: p, x: x, pub: y.FillBytes(make([]byte, (p.BitLen()+7)/8))}, nil
}

func (m *modpKey) Group() uint16  { return m.group }
func (m *modpKey) Public() []byte { return m.pub }

func (m *modpKey) Shared(peer []byte) ([]byte, error) {
	n := (m.p.BitLen() + 7) / 8
	if len(peer) != n {
		return nil, fmt.Errorf("ike: DH group %d public value of %d bytes, want %d", m.group, len(peer), n)
	}
	y := new(big.Int).SetBytes(peer)
	// 1 < y < p-1 (RFC 2631 style check; y = 1 or p-1 gives a trivial
	// secret).
	pm1 := new(big.Int).Sub(m.p, big.NewInt(1))
	if y.Cmp(big.NewInt(1)) <= 0 || y.Cmp(pm1) >= 0 {
		return nil, errors.New("ike: DH public value out of range")
	}
	s := new(big.Int).Exp(y, m.x, m.p)
	return s.FillBytes(make([]byte, n)), nil
}

// ecFromPrivate returns the key of group with the given private scalar
// (for known-answer tests).
func ecFromPrivate(group uint16, priv []byte) (DH, error) {
	k, err := curveOf(group).NewPrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("ike: DH group %d: %w", group, err)
	}
	return &ecKey{group: group, k: k}, nil
}
