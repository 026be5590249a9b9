//go:build openssl

package openssl

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
)

// TestSlotsExhausted: with every context slot of a key taken, ops still
// run correctly on temporary contexts.
func TestSlotsExhausted(t *testing.T) {
	e, err := New()
	if err != nil {
		t.Fatal(err)
	}
	material := make([]byte, 20)
	rand.Read(material)
	k, err := e.NewKey(cryptodev.AES128GCM16, material, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Destroy()
	block, _ := aes.NewCipher(material[:16])
	gcm, _ := cipher.NewGCM(block)
	q, _ := e.NewQueue()
	for _, hold := range []bool{true, false} {
		holdSlots(k, hold)
		pt := make([]byte, 100)
		rand.Read(pt)
		iv := []byte{1, 2, 3, 4, 5, 6, 7, 8}
		aad := []byte{0, 0, 0, 1, 0, 0, 0, 2}
		dst, tag := make([]byte, len(pt)), make([]byte, 16)
		b := &cryptodev.Batch{Ops: []cryptodev.Op{{Key: k, Dir: cryptodev.Encrypt, Src: pt, Dst: dst, IV: iv, AAD: aad, Tag: tag}}}
		if err := cryptodev.Run(q, b); err != nil {
			t.Fatal(err)
		}
		want := gcm.Seal(nil, append(append([]byte(nil), material[16:]...), iv...), pt, aad)
		if st := b.Ops[0].Status; st != cryptodev.StatusOK || !bytes.Equal(append(dst, tag...), want) {
			t.Errorf("slots held %v: status %v, output differs from Go's", hold, st)
		}
	}
}
