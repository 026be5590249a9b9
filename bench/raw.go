package bench

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/subtle"
	"hash"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
)

// rawSym is the baseline for a symmetric suite: Go's cipher.AEAD, or
// AES-CBC with a truncated HMAC, called directly. It is what an engine
// would cost if it cost nothing. Not safe for concurrent use.
type rawSym struct {
	icvLen int
	aead   cipher.AEAD
	nonce  [12]byte // salt || IV
	// Chained suites (RFC 3602 with RFC 4868, RFC 2410 NULL).
	enc, dec cipher.BlockMode // nil for NULL encryption
	mac      hash.Hash
	sum      [64]byte
}

type ivSetter interface{ SetIV([]byte) }

// newRawSym expands encKey (key || salt for AEAD suites) and authKey.
func newRawSym(alg cryptodev.Alg, encKey, authKey []byte) (*rawSym, error) {
	info := alg.Info()
	r := &rawSym{icvLen: info.ICVLen}
	var err error
	if info.AEAD {
		copy(r.nonce[:4], encKey[info.KeyLen:])
		r.aead, err = soft.NewAEAD(alg, encKey[:info.KeyLen])
		return r, err
	}
	if info.KeyLen > 0 {
		b, err := aes.NewCipher(encKey)
		if err != nil {
			return nil, err
		}
		var iv [aes.BlockSize]byte
		r.enc, r.dec = cipher.NewCBCEncrypter(b, iv[:]), cipher.NewCBCDecrypter(b, iv[:])
	}
	r.mac = hmac.New(soft.HashFunc(info.Hash), authKey)
	return r, nil
}

// seal encrypts data[:n] in place and writes the ICV to data[n:n+icvLen],
// as ESP lays a packet out.
func (r *rawSym) seal(data []byte, n int, iv, aad []byte) {
	if r.aead != nil {
		copy(r.nonce[4:], iv)
		r.aead.Seal(data[:0], r.nonce[:], data[:n], aad)
		return
	}
	if r.enc != nil {
		r.enc.(ivSetter).SetIV(iv)
		r.enc.CryptBlocks(data[:n], data[:n])
	}
	copy(data[n:n+r.icvLen], r.hmac(data[:n], iv, aad))
}

// open verifies data[n:n+icvLen] and decrypts data[:n] in place.
func (r *rawSym) open(data []byte, n int, iv, aad []byte) bool {
	if r.aead != nil {
		copy(r.nonce[4:], iv)
		_, err := r.aead.Open(data[:0], r.nonce[:], data[:n+r.icvLen], aad)
		return err == nil
	}
	if subtle.ConstantTimeCompare(r.hmac(data[:n], iv, aad), data[n:n+r.icvLen]) != 1 {
		return false
	}
	if r.dec != nil {
		r.dec.(ivSetter).SetIV(iv)
		r.dec.CryptBlocks(data[:n], data[:n])
	}
	return true
}

// hmac is the truncated HMAC over AAD || IV || ciphertext (RFC 4303 section
// 3.3.2.1 order, without ESN high bits).
func (r *rawSym) hmac(ct, iv, aad []byte) []byte {
	r.mac.Reset()
	r.mac.Write(aad)
	r.mac.Write(iv)
	r.mac.Write(ct)
	return r.mac.Sum(r.sum[:0])[:r.icvLen]
}

// dataLen is the length an op of size bytes encrypts: CBC works on whole
// blocks, so it rounds up to the block as ESP padding does.
func dataLen(alg cryptodev.Alg, size int) int {
	info := alg.Info()
	if !info.AEAD && info.KeyLen > 0 {
		return (size + aes.BlockSize - 1) &^ (aes.BlockSize - 1)
	}
	return size
}
