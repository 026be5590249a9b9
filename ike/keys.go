package ike

// Keying (RFC 7296 sections 2.13, 2.14, 2.15 and 2.17): the PRF, prf+,
// SKEYSEED and the seven IKE SA keys, Child SA KEYMAT, and the AUTH value
// of a pre-shared key.

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
)

// prfHash returns the hash of a PRF transform.
func prfHash(id uint16) (func() hash.Hash, error) {
	switch id {
	case PRFHMACSHA1:
		return sha1.New, nil
	case PRFHMACSHA256:
		return sha256.New, nil
	case PRFHMACSHA384:
		return sha512.New384, nil
	case PRFHMACSHA512:
		return sha512.New, nil
	}
	return nil, fmt.Errorf("ike: PRF %d is not supported", id)
}

// PRF is a pseudorandom function of section 2.13: HMAC with one hash.
type PRF struct {
	h func() hash.Hash
}

// NewPRF returns the PRF of transform id (PRF_HMAC_SHA2_256, _384, _512,
// and PRF_HMAC_SHA1 where a configuration names it).
func NewPRF(id uint16) (PRF, error) {
	h, err := prfHash(id)
	return PRF{h: h}, err
}

// Size is the output length of the PRF, which is also its preferred key
// length (section 2.14: the length of SK_d, SK_pi and SK_pr).
func (p PRF) Size() int { return p.h().Size() }

// Sum returns prf(key, data[0] | data[1] | ...).
func (p PRF) Sum(key []byte, data ...[]byte) []byte {
	m := hmac.New(p.h, key)
	for _, d := range data {
		m.Write(d)
	}
	return m.Sum(nil)
}

// Plus returns the first n bytes of prf+(key, seed) (section 2.13):
// T1 = prf(K, S | 0x01), Ti = prf(K, Ti-1 | S | i), for at most 255
// blocks.
func (p PRF) Plus(key, seed []byte, n int) ([]byte, error) {
	size := p.Size()
	if n < 0 || n > 255*size {
		return nil, fmt.Errorf("ike: prf+ of %d bytes (at most %d)", n, 255*size)
	}
	out := make([]byte, 0, n+size)
	m := hmac.New(p.h, key)
	var t []byte
	for i := 1; len(out) < n; i++ {
		m.Reset()
		m.Write(t)
		m.Write(seed)
		m.Write([]byte{byte(i)})
		t = m.Sum(nil)
		out = append(out, t...)
	}
	return out[:n], nil
}

// cipherKeyLen returns the key length in bytes of an encryption transform,
// salt included (RFC 5282 section 7.1: 4 bytes of salt for AES-GCM; RFC
// 7634 section 2: 4 for ChaCha20-Poly1305), and that salt's length.
func cipherKeyLen(encr, keyBits uint16) (keyLen, saltLen int) {
	switch encr {
	case EncrAESGCM16:
		return int(keyBits)/8 + 4, 4
	case EncrChaCha20Poly1305:
		return 32 + 4, 4
	}
	return int(keyBits) / 8, 0
}

// integKeyLen is the key length in bytes of an integrity transform (RFC
// 4868 section 2.1.1: the hash's output length; RFC 2404 section 3: 20
// for HMAC-SHA1-96).
func integKeyLen(id uint16) int {
	switch id {
	case IntegHMACSHA1_96:
		return 20
	case IntegHMACSHA256_128:
		return 32
	case IntegHMACSHA384_192:
		return 48
	case IntegHMACSHA512_256:
		return 64
	}
	return 0
}

// Keys are the seven secrets of an IKE SA (section 2.14).
type Keys struct {
	D, Ai, Ar, Ei, Er, Pi, Pr []byte
}

// DeriveIKEKeys computes SKEYSEED = prf(Ni | Nr, g^ir) and
// {SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} =
// prf+(SKEYSEED, Ni | Nr | SPIi | SPIr) for the suite s (section 2.14).
func DeriveIKEKeys(s Suite, ni, nr, gir []byte, spii, spir uint64) (*Keys, error) {
	prf, err := NewPRF(s.PRF)
	if err != nil {
		return nil, err
	}
	skeyseed := prf.Sum(append(append([]byte(nil), ni...), nr...), gir)
	return expandIKEKeys(prf, s, skeyseed, ni, nr, spii, spir)
}

// deriveRekeyedIKEKeys computes the keys of an IKE SA made by rekeying
// another (section 2.18): SKEYSEED = prf(SK_d (old), g^ir (new) | Ni | Nr)
// with the old IKE SA's PRF, then prf+ of the new suite's PRF over
// Ni | Nr | SPIi | SPIr of the new SA, as in section 2.14.
func deriveRekeyedIKEKeys(oldPRF PRF, oldD []byte, s Suite, ni, nr, gir []byte, spii, spir uint64) (*Keys, error) {
	prf, err := NewPRF(s.PRF)
	if err != nil {
		return nil, err
	}
	return expandIKEKeys(prf, s, oldPRF.Sum(oldD, gir, ni, nr), ni, nr, spii, spir)
}

// expandIKEKeys cuts the seven keys of section 2.14 from
// prf+(SKEYSEED, Ni | Nr | SPIi | SPIr) and zeroes skeyseed.
func expandIKEKeys(prf PRF, s Suite, skeyseed, ni, nr []byte, spii, spir uint64) (*Keys, error) {
	seed := make([]byte, 0, len(ni)+len(nr)+16)
	seed = append(append(seed, ni...), nr...)
	seed = binary.BigEndian.AppendUint64(seed, spii)
	seed = binary.BigEndian.AppendUint64(seed, spir)
	ek, _ := cipherKeyLen(s.Encr, s.KeyLen)
	ak := integKeyLen(s.Integ)
	ps := prf.Size()
	km, err := prf.Plus(skeyseed, seed, 3*ps+2*ak+2*ek)
	if err != nil {
		return nil, err
	}
	clear(skeyseed)
	k := &Keys{}
	take := func(n int) []byte {
		b := km[:n:n]
		km = km[n:]
		return b
	}
	k.D, k.Ai, k.Ar, k.Ei, k.Er, k.Pi, k.Pr = take(ps), take(ak), take(ak), take(ek), take(ek), take(ps), take(ps)
	return k, nil
}

// ChildKeys are the keys of a Child SA's two directions (section 2.17):
// "I" protects what the IKE initiator sends, "R" what the responder
// sends. Encryption keys of an AEAD end with the salt.
type ChildKeys struct {
	EncI, IntegI, EncR, IntegR []byte
}

// DeriveChildKeys computes KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr)
// and cuts it as section 2.17 says: initiator-to-responder encryption key,
// then its integrity key, then the same for responder-to-initiator. prfID
// is the IKE SA's PRF; esp is the Child SA's suite.
func DeriveChildKeys(prfID uint16, skd []byte, esp Suite, gir, ni, nr []byte) (*ChildKeys, error) {
	prf, err := NewPRF(prfID)
	if err != nil {
		return nil, err
	}
	if esp.Protocol != ProtoESP {
		return nil, errors.New("ike: Child SA keys for a non-ESP suite")
	}
	ek, _ := cipherKeyLen(esp.Encr, esp.KeyLen)
	ak := integKeyLen(esp.Integ)
	seed := make([]byte, 0, len(gir)+len(ni)+len(nr))
	seed = append(append(append(seed, gir...), ni...), nr...)
	km, err := prf.Plus(skd, seed, 2*(ek+ak))
	if err != nil {
		return nil, err
	}
	take := func(n int) []byte {
		b := km[:n:n]
		km = km[n:]
		return b
	}
	c := &ChildKeys{}
	c.EncI, c.IntegI, c.EncR, c.IntegR = take(ek), take(ak), take(ek), take(ak)
	return c, nil
}

// keyPad is the string of section 2.15 that turns a shared secret into
// the PRF key of a PSK AUTH value.
const keyPad = "Key Pad for IKEv2"

// signedOctets returns a side's signed octets (section 2.15): its first
// message as sent, the peer's nonce, and prf(SK_px, its ID payload body),
// where idBody is ID type, three reserved bytes and the identification.
func signedOctets(prf PRF, msg, peerNonce, skp, idBody []byte) []byte {
	out := make([]byte, 0, len(msg)+len(peerNonce)+prf.Size())
	out = append(append(out, msg...), peerNonce...)
	return append(out, prf.Sum(skp, idBody)...)
}

// PSKAuth returns the AUTH data of a pre-shared key (section 2.15):
// prf(prf(psk, "Key Pad for IKEv2"), signed octets), with the signed
// octets built from the sender's first message msg, the other side's
// nonce, the sender's SK_p (SK_pi for the initiator, SK_pr for the
// responder) and the body of the sender's ID payload.
func PSKAuth(prf PRF, psk, msg, peerNonce, skp, idBody []byte) []byte {
	return prf.Sum(prf.Sum(psk, []byte(keyPad)), signedOctets(prf, msg, peerNonce, skp, idBody))
}

// idBody returns an ID payload's body as AUTH covers it: type, three
// reserved bytes, identification data.
func idBody(id *ID) []byte {
	b := []byte{byte(id.IDType), 0, 0, 0}
	return append(b, id.Data...)
}
