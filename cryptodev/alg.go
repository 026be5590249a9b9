package cryptodev

import (
	"fmt"
	"strings"
)

// Alg names a symmetric suite as ESP uses it: an AEAD (RFC 4106, RFC 7634)
// or a cipher chained with a truncated HMAC (RFC 3602 with RFC 4868, RFC 2410
// NULL encryption with RFC 4868).
type Alg uint8

const (
	AlgInvalid Alg = iota
	AES128GCM16
	AES192GCM16
	AES256GCM16
	ChaCha20Poly1305
	AES128CBCSHA256 // AES-CBC-128 (RFC 3602) + HMAC-SHA-256-128 (RFC 4868)
	AES256CBCSHA256 // AES-CBC-256 + HMAC-SHA-256-128
	AES256CBCSHA384 // AES-CBC-256 + HMAC-SHA-384-192
	AES256CBCSHA512 // AES-CBC-256 + HMAC-SHA-512-256
	NullSHA256      // NULL encryption (RFC 2410) + HMAC-SHA-256-128
	AES128CBCSHA384 // AES-CBC-128 + HMAC-SHA-384-192
	AES128CBCSHA512 // AES-CBC-128 + HMAC-SHA-512-256
	numAlgs
)

// Hash identifies the HMAC hash of a chained suite.
type Hash uint8

const (
	HashNone Hash = iota
	HashSHA256
	HashSHA384
	HashSHA512
)

// AlgInfo describes the wire shape of a suite.
type AlgInfo struct {
	// Name is the strongSwan ESP proposal keyword.
	Name string
	// AEAD is true for combined-mode suites (GCM, ChaCha20-Poly1305).
	AEAD bool
	// KeyLen is the cipher key length in bytes, without the salt.
	KeyLen int
	// SaltLen is the length of the salt appended to the AEAD key material
	// (RFC 4106 section 8.1, RFC 7634 section 4).
	SaltLen int
	// IVLen is the length of the IV carried in each ESP packet.
	IVLen int
	// BlockSize is the alignment the ESP payload, pad length and next header
	// must reach (RFC 4303 section 2.4): the cipher block size, or 4.
	BlockSize int
	// ICVLen is the length of the integrity check value.
	ICVLen int
	// Hash and AuthKeyLen describe the HMAC of a chained suite.
	Hash       Hash
	AuthKeyLen int
}

var algInfo = [numAlgs]AlgInfo{
	AES128GCM16:      {Name: "aes128gcm16", AEAD: true, KeyLen: 16, SaltLen: 4, IVLen: 8, BlockSize: 4, ICVLen: 16},
	AES192GCM16:      {Name: "aes192gcm16", AEAD: true, KeyLen: 24, SaltLen: 4, IVLen: 8, BlockSize: 4, ICVLen: 16},
	AES256GCM16:      {Name: "aes256gcm16", AEAD: true, KeyLen: 32, SaltLen: 4, IVLen: 8, BlockSize: 4, ICVLen: 16},
	ChaCha20Poly1305: {Name: "chacha20poly1305", AEAD: true, KeyLen: 32, SaltLen: 4, IVLen: 8, BlockSize: 4, ICVLen: 16},
	AES128CBCSHA256:  {Name: "aes128-sha256", KeyLen: 16, IVLen: 16, BlockSize: 16, ICVLen: 16, Hash: HashSHA256, AuthKeyLen: 32},
	AES256CBCSHA256:  {Name: "aes256-sha256", KeyLen: 32, IVLen: 16, BlockSize: 16, ICVLen: 16, Hash: HashSHA256, AuthKeyLen: 32},
	AES256CBCSHA384:  {Name: "aes256-sha384", KeyLen: 32, IVLen: 16, BlockSize: 16, ICVLen: 24, Hash: HashSHA384, AuthKeyLen: 48},
	AES256CBCSHA512:  {Name: "aes256-sha512", KeyLen: 32, IVLen: 16, BlockSize: 16, ICVLen: 32, Hash: HashSHA512, AuthKeyLen: 64},
	NullSHA256:       {Name: "null-sha256", KeyLen: 0, IVLen: 0, BlockSize: 4, ICVLen: 16, Hash: HashSHA256, AuthKeyLen: 32},
	AES128CBCSHA384:  {Name: "aes128-sha384", KeyLen: 16, IVLen: 16, BlockSize: 16, ICVLen: 24, Hash: HashSHA384, AuthKeyLen: 48},
	AES128CBCSHA512:  {Name: "aes128-sha512", KeyLen: 16, IVLen: 16, BlockSize: 16, ICVLen: 32, Hash: HashSHA512, AuthKeyLen: 64},
}

// Info returns the suite's description. For an asymmetric algorithm (see
// IsAsymmetric) only Name is set. It panics on an invalid Alg.
func (a Alg) Info() *AlgInfo {
	if a.IsAsymmetric() {
		return &asymInfo[a-asymBase]
	}
	if a == AlgInvalid || a >= numAlgs {
		panic(fmt.Sprintf("cryptodev: invalid algorithm %d", a))
	}
	return &algInfo[a]
}

// Valid reports whether a names a known algorithm: a symmetric suite or an
// asymmetric key type. Code that needs an ESP suite must also check
// !a.IsAsymmetric().
func (a Alg) Valid() bool { return a > AlgInvalid && a < numAlgs || a.IsAsymmetric() }

// IsAsymmetric reports whether a is an asymmetric key type (RSA2048 ...
// ECDHP256, see asym.go) rather than a symmetric ESP suite.
func (a Alg) IsAsymmetric() bool { return a >= asymBase && a < endAsymAlgs }

// String returns the strongSwan proposal keyword of a symmetric suite, or
// the name ParseAsymAlg accepts for an asymmetric key type.
func (a Alg) String() string {
	if !a.Valid() {
		return fmt.Sprintf("alg(%d)", uint8(a))
	}
	return a.Info().Name
}

// EncKeyLen is the length of the encryption key material the suite takes:
// the key followed by the salt for AEAD suites, as ip-xfrm and Wireshark
// take it.
func (a Alg) EncKeyLen() int {
	i := a.Info()
	return i.KeyLen + i.SaltLen
}

// Algs lists every symmetric suite in a stable order (AsymAlgs lists the
// asymmetric key types).
func Algs() []Alg {
	out := make([]Alg, 0, numAlgs-1)
	for a := AlgInvalid + 1; a < numAlgs; a++ {
		out = append(out, a)
	}
	return out
}

// ParseAlg accepts a strongSwan ESP proposal keyword (case-insensitive).
func ParseAlg(name string) (Alg, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	switch n { // aliases strongSwan also accepts
	case "aes128gcm128":
		n = "aes128gcm16"
	case "aes192gcm128":
		n = "aes192gcm16"
	case "aes256gcm128":
		n = "aes256gcm16"
	}
	for a := AlgInvalid + 1; a < numAlgs; a++ {
		if algInfo[a].Name == n {
			return a, nil
		}
	}
	names := make([]string, 0, numAlgs)
	for _, a := range Algs() {
		names = append(names, a.String())
	}
	return AlgInvalid, fmt.Errorf("cryptodev: unknown ESP algorithm %q (valid: %s)", name, strings.Join(names, ", "))
}
