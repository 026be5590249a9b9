package ike

// ML-KEM (FIPS 203) as an IKEv2 key exchange method
// (draft-ietf-ipsecme-ikev2-mlkem section 2): the initiator's KE data is
// its encapsulation key (ByteEncode, FIPS 203 section 7.1), the
// responder's the ciphertext of Encaps, and the 32-byte shared secret
// takes the place of g^ir. A KEM does not fit the DH interface on the
// responder's side, which needs the initiator's data before it has any of
// its own; RespondKE is that side for DH groups and KEMs alike.

import (
	"crypto/mlkem"
	"fmt"
)

// Key exchange method IDs of ML-KEM (transform type 4 and the additional
// key exchange types 6 to 12; the IANA "Transform Type 4 - Key Exchange
// Method Transform IDs" registry, draft-ietf-ipsecme-ikev2-mlkem section
// 5). Go's crypto/mlkem has no ML-KEM-512, so this package does not
// support 35.
const (
	MLKEM512  uint16 = 35
	MLKEM768  uint16 = 36
	MLKEM1024 uint16 = 37
)

// isKEM reports whether method is a KEM this package implements.
func isKEM(method uint16) bool { return method == MLKEM768 || method == MLKEM1024 }

// kemSizes returns the encapsulation key and ciphertext lengths of an
// ML-KEM method (FIPS 203 section 8, table 3; the draft's section 2.1
// table).
func kemSizes(method uint16) (ek, ct int) {
	if method == MLKEM1024 {
		return mlkem.EncapsulationKeySize1024, mlkem.CiphertextSize1024
	}
	return mlkem.EncapsulationKeySize768, mlkem.CiphertextSize768
}

// kemKey is the initiator's side of an ML-KEM exchange: a fresh
// decapsulation key (the draft's section 4 requires one per exchange).
// Public is the encapsulation key; Shared decapsulates the responder's
// ciphertext.
type kemKey struct {
	method uint16
	dk768  *mlkem.DecapsulationKey768
	dk1024 *mlkem.DecapsulationKey1024
}

func newKEM(method uint16) (*kemKey, error) {
	k := &kemKey{method: method}
	var err error
	if method == MLKEM1024 {
		k.dk1024, err = mlkem.GenerateKey1024()
	} else {
		k.dk768, err = mlkem.GenerateKey768()
	}
	if err != nil {
		return nil, fmt.Errorf("ike: key exchange method %d: %w", method, err)
	}
	return k, nil
}

func (k *kemKey) Group() uint16 { return k.method }

func (k *kemKey) Public() []byte {
	if k.dk1024 != nil {
		return k.dk1024.EncapsulationKey().Bytes()
	}
	return k.dk768.EncapsulationKey().Bytes()
}

// Shared decapsulates ct. The draft's section 2.2 (FIPS 203 section 7.3,
// the ciphertext type check): a ciphertext of the wrong length is an
// error. A well-formed but altered one yields a secret the responder does
// not share (implicit rejection), which the IKE SA's integrity checks
// then catch.
func (k *kemKey) Shared(ct []byte) ([]byte, error) {
	if _, n := kemSizes(k.method); len(ct) != n {
		return nil, fmt.Errorf("ike: key exchange method %d ciphertext of %d bytes, want %d", k.method, len(ct), n)
	}
	var s []byte
	var err error
	if k.dk1024 != nil {
		s, err = k.dk1024.Decapsulate(ct)
	} else {
		s, err = k.dk768.Decapsulate(ct)
	}
	if err != nil {
		return nil, fmt.Errorf("ike: key exchange method %d: %w", k.method, err)
	}
	return s, nil
}

// RespondKE is the responder's side of a key exchange of method (a DH
// group or a KEM) against the initiator's KE data peer: it returns the
// responder's KE data and the shared secret. For a DH group that is a
// fresh key pair's public value and g^ir; for ML-KEM the ciphertext of
// encapsulating to peer and the KEM's shared secret. Malformed peer data
// (a wrong length, an encapsulation key failing FIPS 203 section 7.2's
// modulus check, a DH value out of range) is an error; the draft's
// section 2.2 says to answer it with INVALID_SYNTAX.
func RespondKE(method uint16, peer []byte) (public, shared []byte, err error) {
	if !isKEM(method) {
		dh, err := NewDH(method)
		if err != nil {
			return nil, nil, err
		}
		s, err := dh.Shared(peer)
		if err != nil {
			return nil, nil, err
		}
		return dh.Public(), s, nil
	}
	if n, _ := kemSizes(method); len(peer) != n {
		return nil, nil, fmt.Errorf("ike: key exchange method %d encapsulation key of %d bytes, want %d", method, len(peer), n)
	}
	if method == MLKEM1024 {
		ek, err := mlkem.NewEncapsulationKey1024(peer)
		if err != nil {
			return nil, nil, fmt.Errorf("ike: key exchange method %d: %w", method, err)
		}
		shared, ct := ek.Encapsulate()
		return ct, shared, nil
	}
	ek, err := mlkem.NewEncapsulationKey768(peer)
	if err != nil {
		return nil, nil, fmt.Errorf("ike: key exchange method %d: %w", method, err)
	}
	shared, ct := ek.Encapsulate()
	return ct, shared, nil
}
