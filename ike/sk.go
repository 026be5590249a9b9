package ike

// The Encrypted and Authenticated payload (RFC 7296 section 3.14) with
// AES-CBC and an HMAC-SHA-2 integrity check (RFC 3602, RFC 4868), and with
// the AEADs AES-GCM with a 16-byte ICV (RFC 5282) and ChaCha20-Poly1305
// (RFC 7634).
//
// AEAD: the nonce is the 4-byte salt (the last bytes of SK_e) followed by
// the 8-byte IV carried in the payload; the additional data is everything
// from the start of the IKE header to the end of the SK payload's generic
// header (RFC 5282 section 5.1). CBC: the ICV is the truncated HMAC over
// everything from the start of the IKE header to the end of the
// ciphertext (section 3.14).

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"errors"
	"fmt"
	"hash"

	"golang.org/x/crypto/chacha20poly1305"
)

// skCrypto seals and opens SK payloads for one direction of an IKE SA.
type skCrypto struct {
	aead    cipher.AEAD // AEAD suites
	salt    []byte
	block   cipher.Block // CBC suites
	mac     func() hash.Hash
	macKey  []byte
	icvLen  int
	ivLen   int
	blkSize int
}

// newSKCrypto returns the SK protection for suite s with encryption key
// ek (salt included for AEADs) and integrity key ak.
func newSKCrypto(s Suite, ek, ak []byte) (*skCrypto, error) {
	c := &skCrypto{}
	switch s.Encr {
	case EncrAESGCM16:
		n := len(ek) - 4
		if n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("ike: AES-GCM key of %d bytes", len(ek))
		}
		b, err := aes.NewCipher(ek[:n])
		if err != nil {
			return nil, fmt.Errorf("ike: %w", err)
		}
		a, err := cipher.NewGCM(b)
		if err != nil {
			return nil, fmt.Errorf("ike: %w", err)
		}
		c.aead, c.salt, c.ivLen, c.icvLen, c.blkSize = a, ek[n:], 8, 16, 1
	case EncrChaCha20Poly1305:
		if len(ek) != 36 {
			return nil, fmt.Errorf("ike: ChaCha20-Poly1305 key of %d bytes", len(ek))
		}
		a, err := chacha20poly1305.New(ek[:32])
		if err != nil {
			return nil, fmt.Errorf("ike: %w", err)
		}
		c.aead, c.salt, c.ivLen, c.icvLen, c.blkSize = a, ek[32:], 8, 16, 1
	case EncrAESCBC:
		b, err := aes.NewCipher(ek)
		if err != nil {
			return nil, fmt.Errorf("ike: %w", err)
		}
		c.block, c.ivLen, c.blkSize = b, aes.BlockSize, aes.BlockSize
		switch s.Integ {
		case IntegHMACSHA1_96: // RFC 2404: 96 of 160 bits
			c.mac, c.icvLen = sha1.New, 12
		case IntegHMACSHA256_128:
			c.mac, c.icvLen = sha256.New, 16
		case IntegHMACSHA384_192:
			c.mac, c.icvLen = sha512.New384, 24
		case IntegHMACSHA512_256:
			c.mac, c.icvLen = sha512.New, 32
		default:
			return nil, fmt.Errorf("ike: integrity algorithm %d is not supported", s.Integ)
		}
		if len(ak) != integKeyLen(s.Integ) {
			return nil, fmt.Errorf("ike: integrity key of %d bytes", len(ak))
		}
		c.macKey = ak
	default:
		return nil, fmt.Errorf("ike: encryption algorithm %d is not supported", s.Encr)
	}
	return c, nil
}

// seal returns the wire form of a message with header h, the payloads
// clear (sent unencrypted before the SK payload; usually none) and the
// payloads inner inside the SK payload.
func (c *skCrypto) seal(h Header, clear, inner []Payload) ([]byte, error) {
	plain, first, err := encodeInner(inner)
	if err != nil {
		return nil, err
	}
	return c.sealPlain(h, clear, first, plain, 0, 0)
}

// encodeInner encodes the payloads an SK payload carries: the plaintext,
// and the type of the first (its Next Payload field).
func encodeInner(inner []Payload) (plain []byte, first PayloadType, err error) {
	plain, err = appendPayloads(nil, inner)
	if err != nil {
		return nil, 0, err
	}
	first = NoNextPayload
	if len(inner) > 0 {
		first = inner[0].Type()
	}
	return plain, first, nil
}

// sealPlain protects plain (an encoded payload chain whose first payload
// is of type first) in an SK payload, or with total > 0 in the SKF
// payload of fragment number of total (RFC 7383 section 2.5), whose
// header the ICV covers as well.
func (c *skCrypto) sealPlain(h Header, clear []Payload, first PayloadType, plain []byte, number, total uint16) ([]byte, error) {
	// Padding: to the block size, with the pad length byte last.
	pad := 0
	if c.blkSize > 1 {
		pad = (c.blkSize - (len(plain)+1)%c.blkSize) % c.blkSize
	}
	ptLen := len(plain) + pad + 1
	body := make([]byte, c.ivLen+ptLen+c.icvLen)
	var sk Payload = &Encrypted{Inner: first, Data: body}
	if total > 0 {
		sk = &EncryptedFragment{Inner: first, Number: number, Total: total, Data: body}
	}
	m := &Message{Header: h, Payloads: append(append([]Payload(nil), clear...), sk)}
	b, err := m.Encode()
	if err != nil {
		return nil, err
	}
	skBody := len(b) - len(body)
	iv := b[skBody : skBody+c.ivLen]
	if _, err := rand.Read(iv); err != nil {
		return nil, fmt.Errorf("ike: %w", err)
	}
	ct := b[skBody+c.ivLen : skBody+c.ivLen+ptLen]
	copy(ct, plain)
	for i := 0; i < pad; i++ {
		ct[len(plain)+i] = 0
	}
	ct[ptLen-1] = byte(pad)
	if c.aead != nil {
		nonce := append(append(make([]byte, 0, 12), c.salt...), iv...)
		out := c.aead.Seal(ct[:0], nonce, ct, b[:skBody])
		if len(out) != ptLen+c.icvLen {
			return nil, errors.New("ike: AEAD output length")
		}
		return b, nil
	}
	cipher.NewCBCEncrypter(c.block, iv).CryptBlocks(ct, ct)
	mac := hmac.New(c.mac, c.macKey)
	mac.Write(b[:len(b)-c.icvLen])
	copy(b[len(b)-c.icvLen:], mac.Sum(nil))
	return b, nil
}

// fragmentRoom returns how many plaintext bytes one fragment of a message
// at most max bytes long carries: max less the IKE header, the SKF
// payload's header and fields, IV, ICV and the pad length octet, cut to
// the cipher's block size.
func (c *skCrypto) fragmentRoom(max int) int {
	room := max - HeaderLen - genericLen - 4 - c.ivLen - c.icvLen
	if c.blkSize > 1 {
		room -= room % c.blkSize
	}
	return room - 1
}

// sealFragments returns the message with header h and the payloads inner
// in an SK payload, or, when that would be longer than max (max > 0),
// in SKF fragments of at most max bytes each (RFC 7383 section 2.5), each
// protected on its own and all with h's message ID.
func (c *skCrypto) sealFragments(h Header, inner []Payload, max int) ([][]byte, error) {
	plain, err := appendPayloads(nil, inner)
	if err != nil {
		return nil, err
	}
	first := NoNextPayload
	if len(inner) > 0 {
		first = inner[0].Type()
	}
	room := c.fragmentRoom(max)
	if max <= 0 || HeaderLen+genericLen+c.ivLen+len(plain)+c.blkSize+c.icvLen <= max {
		b, err := c.sealPlain(h, nil, first, plain, 0, 0)
		return [][]byte{b}, err
	}
	if room < 1 {
		return nil, fmt.Errorf("ike: fragment size %d leaves no room for data", max)
	}
	n := (len(plain) + room - 1) / room
	if n > maxFragments {
		return nil, fmt.Errorf("ike: a message of %d bytes needs %d fragments of %d", len(plain), n, max)
	}
	out := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		chunk := plain[i*room : min((i+1)*room, len(plain))]
		inType := NoNextPayload
		if i == 0 {
			inType = first
		}
		b, err := c.sealPlain(h, nil, inType, chunk, uint16(i+1), uint16(n))
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// open checks and decrypts the SK payload of raw (whose decoded form is
// m, with the *Encrypted last) and returns the inner payloads. It fails
// without detail on any integrity failure.
func (c *skCrypto) open(raw []byte, m *Message) ([]Payload, error) {
	if len(m.Payloads) == 0 {
		return nil, errors.New("ike: no SK payload")
	}
	e, ok := m.Payloads[len(m.Payloads)-1].(*Encrypted)
	if !ok {
		return nil, errors.New("ike: no SK payload")
	}
	pt, err := c.openData(raw, m, e.Data)
	if err != nil {
		return nil, err
	}
	return parsePayloads(e.Inner, pt, false)
}

// openFragment checks and decrypts the SKF payload f of raw (decoded as
// m) and returns its piece of the plaintext (RFC 7383 section 2.5).
func (c *skCrypto) openFragment(raw []byte, m *Message, f *EncryptedFragment) ([]byte, error) {
	return c.openData(raw, m, f.Data)
}

// openData checks and decrypts data, the body of the SK or SKF payload
// that ends raw after IV (raw's length is m's header's), and returns
// the plaintext without its padding.
func (c *skCrypto) openData(raw []byte, m *Message, data []byte) ([]byte, error) {
	raw = raw[:m.Header.Length]
	skBody := len(raw) - len(data)
	if len(data) < c.ivLen+c.icvLen+1 || skBody < HeaderLen+genericLen {
		return nil, fmt.Errorf("ike: SK payload of %d bytes", len(data))
	}
	iv := data[:c.ivLen]
	body := data[c.ivLen:]
	var pt []byte
	if c.aead != nil {
		nonce := append(append(make([]byte, 0, 12), c.salt...), iv...)
		var err error
		pt, err = c.aead.Open(nil, nonce, body, raw[:skBody])
		if err != nil {
			return nil, errors.New("ike: SK payload failed its integrity check")
		}
	} else {
		ct := body[:len(body)-c.icvLen]
		mac := hmac.New(c.mac, c.macKey)
		mac.Write(raw[:len(raw)-c.icvLen])
		if subtle.ConstantTimeCompare(mac.Sum(nil)[:c.icvLen], body[len(body)-c.icvLen:]) != 1 {
			return nil, errors.New("ike: SK payload failed its integrity check")
		}
		if len(ct) == 0 || len(ct)%c.blkSize != 0 {
			return nil, fmt.Errorf("ike: SK ciphertext of %d bytes", len(ct))
		}
		pt = make([]byte, len(ct))
		cipher.NewCBCDecrypter(c.block, iv).CryptBlocks(pt, ct)
	}
	if len(pt) == 0 {
		return nil, errors.New("ike: empty SK plaintext")
	}
	padLen := int(pt[len(pt)-1])
	if padLen+1 > len(pt) {
		return nil, fmt.Errorf("ike: SK pad length %d in %d bytes", padLen, len(pt))
	}
	return pt[:len(pt)-1-padLen], nil
}
