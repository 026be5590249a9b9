package ike

import (
	"bytes"
	"testing"
)

// TestKEMExchange: ML-KEM as draft-ietf-ipsecme-ikev2-mlkem section 2.1
// uses it: the initiator's KE data is the encapsulation key, the
// responder's the ciphertext, both end with the same 32-byte secret; the
// data sizes are the draft's table (768: 1184 / 1088, 1024: 1568 / 1568).
func TestKEMExchange(t *testing.T) {
	for _, c := range []struct {
		method uint16
		ek, ct int
	}{{MLKEM768, 1184, 1088}, {MLKEM1024, 1568, 1568}} {
		i, err := NewDH(c.method)
		if err != nil {
			t.Fatal(err)
		}
		if i.Group() != c.method || len(i.Public()) != c.ek {
			t.Fatalf("method %d: encapsulation key of %d bytes", c.method, len(i.Public()))
		}
		ct, rs, err := RespondKE(c.method, i.Public())
		if err != nil {
			t.Fatal(err)
		}
		if len(ct) != c.ct || len(rs) != 32 {
			t.Fatalf("method %d: ciphertext of %d bytes, secret of %d", c.method, len(ct), len(rs))
		}
		is, err := i.Shared(ct)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(is, rs) {
			t.Fatalf("method %d: the two sides' secrets differ", c.method)
		}
		// Each exchange has its own key (the draft's section 4).
		j, _ := NewDH(c.method)
		if bytes.Equal(j.Public(), i.Public()) {
			t.Fatal("two encapsulation keys are the same")
		}
		// An altered ciphertext decapsulates to another secret (FIPS 203
		// implicit rejection); the IKE SA's checks catch it.
		bad := append([]byte(nil), ct...)
		bad[0] ^= 1
		if s, err := i.Shared(bad); err != nil || bytes.Equal(s, rs) {
			t.Fatalf("method %d: altered ciphertext: %v", c.method, err)
		}
	}
}

// TestKEMMalformed: malformed KE data is an error, never a panic (the
// draft's section 2.2, "Recipient Tests"): a responder checks the
// encapsulation key's length and FIPS 203 section 7.2's modulus check; an
// initiator the ciphertext's length (section 7.3).
func TestKEMMalformed(t *testing.T) {
	i, _ := NewDH(MLKEM768)
	ek := i.Public()
	for name, peer := range map[string][]byte{
		"empty":     nil,
		"short":     ek[:len(ek)-1],
		"long":      append(append([]byte(nil), ek...), 0),
		"1024-size": make([]byte, 1568),
		// The first 12-bit coefficient 0xfff is not below q = 3329.
		"modulus": append([]byte{0xff, 0x0f}, ek[2:]...),
	} {
		if _, _, err := RespondKE(MLKEM768, peer); err == nil {
			t.Errorf("encapsulation key %s accepted", name)
		}
	}
	ct, _, err := RespondKE(MLKEM768, ek)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string][]byte{"empty": nil, "short": ct[:len(ct)-1], "long": append(append([]byte(nil), ct...), 0)} {
		if _, err := i.Shared(c); err == nil {
			t.Errorf("ciphertext %s accepted", name)
		}
	}
	// ML-KEM-1024's key and ciphertext have one size; a 768 key is not
	// one.
	k, _ := NewDH(MLKEM1024)
	if _, err := k.Shared(ct); err == nil {
		t.Error("768 ciphertext accepted by a 1024 key")
	}
	if _, _, err := RespondKE(MLKEM1024, ek); err == nil {
		t.Error("768 key accepted for 1024")
	}
	if _, _, err := RespondKE(MLKEM512, make([]byte, 800)); err == nil {
		t.Error("ML-KEM-512 accepted")
	}
}

// TestRespondKEDH: RespondKE for a DH group is NewDH and Shared.
func TestRespondKEDH(t *testing.T) {
	i, _ := NewDH(DHCurve25519)
	pub, s, err := RespondKE(DHCurve25519, i.Public())
	if err != nil {
		t.Fatal(err)
	}
	is, err := i.Shared(pub)
	if err != nil || !bytes.Equal(is, s) {
		t.Fatalf("x25519 secrets differ: %v", err)
	}
	if _, _, err := RespondKE(DHCurve25519, make([]byte, 31)); err == nil {
		t.Fatal("short x25519 value accepted")
	}
}
