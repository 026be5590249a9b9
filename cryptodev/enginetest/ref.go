package enginetest

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"hash"
	"math/rand/v2"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/sluicegw/sluice/cryptodev"
)

// The reference: every expected output in the suite is computed here with
// Go's crypto packages directly, never through an engine, so the suite
// checks the soft engine as strictly as any other.

// material is a key's secret as the caller holds it.
type material struct {
	enc, auth []byte
}

// refSeal encrypts pt the way an ESP suite does and returns the ciphertext
// and the ICV. See cryptodev.Op for the AAD, IV and AuthTrailer rules.
func refSeal(alg cryptodev.Alg, m material, iv, aad, trailer, pt []byte) (ct, tag []byte) {
	info := alg.Info()
	if info.AEAD {
		a := refAEAD(alg, m)
		out := a.Seal(nil, refNonce(alg, m, iv), pt, aad)
		return out[:len(pt)], out[len(pt):]
	}
	ct = append([]byte(nil), pt...)
	if info.KeyLen > 0 {
		b, err := aes.NewCipher(m.enc)
		if err != nil {
			panic(err)
		}
		cipher.NewCBCEncrypter(b, iv).CryptBlocks(ct, ct)
	}
	return ct, refICV(alg, m, iv, aad, trailer, ct)
}

// refICV is the truncated HMAC of a chained suite over
// AAD || IV || ciphertext || AuthTrailer (RFC 4303 section 3.3.2.1,
// RFC 4868 section 2.3).
func refICV(alg cryptodev.Alg, m material, iv, aad, trailer, ct []byte) []byte {
	info := alg.Info()
	var h func() hash.Hash
	switch info.Hash {
	case cryptodev.HashSHA256:
		h = sha256.New
	case cryptodev.HashSHA384:
		h = sha512.New384
	case cryptodev.HashSHA512:
		h = sha512.New
	default:
		panic("enginetest: chained suite without a hash: " + alg.String())
	}
	mac := hmac.New(h, m.auth)
	mac.Write(aad)
	mac.Write(iv)
	mac.Write(ct)
	mac.Write(trailer)
	return mac.Sum(nil)[:info.ICVLen]
}

func refAEAD(alg cryptodev.Alg, m material) cipher.AEAD {
	key := m.enc[:alg.Info().KeyLen]
	var a cipher.AEAD
	var err error
	if alg == cryptodev.ChaCha20Poly1305 {
		a, err = chacha20poly1305.New(key)
	} else {
		var b cipher.Block
		if b, err = aes.NewCipher(key); err == nil {
			a, err = cipher.NewGCM(b)
		}
	}
	if err != nil {
		panic(err)
	}
	return a
}

// refNonce is salt || IV (RFC 4106 section 4, RFC 7634 section 2).
func refNonce(alg cryptodev.Alg, m material, iv []byte) []byte {
	return append(append([]byte(nil), m.enc[alg.Info().KeyLen:]...), iv...)
}

// isCBC reports whether alg's cipher is AES-CBC, which takes only whole
// blocks of plaintext.
func isCBC(alg cryptodev.Alg) bool {
	info := alg.Info()
	return !info.AEAD && info.KeyLen > 0
}

// payloadLen is the plaintext length the suite uses for a nominal size n:
// n rounded up to whole blocks for CBC, n for AEAD and NULL suites.
func payloadLen(alg cryptodev.Alg, n int) int {
	if isCBC(alg) {
		return (n + aes.BlockSize - 1) / aes.BlockSize * aes.BlockSize
	}
	return n
}

// newRand returns the suite's deterministic random source.
func newRand(seed uint64) *rand.Rand {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return rand.New(rand.NewChaCha8(s))
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// newKey makes random key material for alg and expands it in e.
func newKey(t *testing.T, e cryptodev.Engine, alg cryptodev.Alg, r *rand.Rand) (*cryptodev.Key, material) {
	t.Helper()
	m := material{enc: randBytes(r, alg.EncKeyLen()), auth: randBytes(r, alg.Info().AuthKeyLen)}
	k, err := e.NewKey(alg, m.enc, m.auth)
	if err != nil {
		t.Fatalf("NewKey(%s): %v", alg, err)
	}
	if k.Alg() != alg || k.Engine() != e.Name() {
		t.Errorf("NewKey(%s): key says alg %s, engine %q; want %s, %q", alg, k.Alg(), k.Engine(), alg, e.Name())
	}
	t.Cleanup(k.Destroy)
	return k, m
}

// sample is one op's inputs and expected outputs under one key.
type sample struct {
	alg              cryptodev.Alg
	key              *cryptodev.Key
	m                material
	iv, aad, trailer []byte
	pt, ct, tag      []byte
	ctTag            []byte // ct || tag in one array: the ESP layout
}

// newSample draws IV, AAD (8 bytes, or 12 as with ESN) and, for chained
// suites, sometimes an ESN AuthTrailer, and computes the expected outputs.
func newSample(alg cryptodev.Alg, key *cryptodev.Key, m material, pt []byte, r *rand.Rand) *sample {
	info := alg.Info()
	s := &sample{alg: alg, key: key, m: m, pt: pt, iv: randBytes(r, info.IVLen)}
	esn := r.IntN(2) == 0
	if info.AEAD && esn {
		s.aad = randBytes(r, 12)
	} else {
		s.aad = randBytes(r, 8)
	}
	if !info.AEAD && esn {
		s.trailer = randBytes(r, 4)
	}
	s.ct, s.tag = refSeal(alg, m, s.iv, s.aad, s.trailer, pt)
	s.ctTag = append(append([]byte(nil), s.ct...), s.tag...)
	s.ct, s.tag = s.ctTag[:len(s.ct):len(s.ct)], s.ctTag[len(s.ct):]
	return s
}

// encOp and decOp are ops on the sample's shared inputs, writing to dst
// (len(pt) + ICV bytes: data, then the tag for encryption).
func (s *sample) encOp(dst []byte) cryptodev.Op {
	n := len(s.pt)
	return cryptodev.Op{Key: s.key, Dir: cryptodev.Encrypt, Src: s.pt, Dst: dst[:n], Tag: dst[n : n+len(s.tag)],
		IV: s.iv, AAD: s.aad, AuthTrailer: s.trailer}
}

func (s *sample) decOp(dst []byte) cryptodev.Op {
	n := len(s.pt)
	return cryptodev.Op{Key: s.key, Dir: cryptodev.Decrypt, Src: s.ctTag[:n], Dst: dst[:n], Tag: s.ctTag[n:],
		IV: s.iv, AAD: s.aad, AuthTrailer: s.trailer}
}
