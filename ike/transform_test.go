package ike

import (
	"bytes"
	"reflect"
	"testing"
)

func TestParseProposal(t *testing.T) {
	tr := func(typ TransformType, id, kl uint16) Transform { return Transform{Type: typ, ID: id, KeyLen: kl} }
	cases := []struct {
		proto uint8
		in    string
		want  []Transform
	}{
		{ProtoIKE, "aes256gcm16-prfsha384-ecp384", []Transform{tr(TransformEncr, EncrAESGCM16, 256), tr(TransformPRF, PRFHMACSHA384, 0), tr(TransformDH, DHECP384, 0)}},
		{ProtoIKE, "aes128-sha256-modp2048", []Transform{tr(TransformEncr, EncrAESCBC, 128), tr(TransformPRF, PRFHMACSHA256, 0), tr(TransformInteg, IntegHMACSHA256_128, 0), tr(TransformDH, DHModp2048, 0)}},
		{ProtoIKE, "aes256-sha256-x25519", []Transform{tr(TransformEncr, EncrAESCBC, 256), tr(TransformPRF, PRFHMACSHA256, 0), tr(TransformInteg, IntegHMACSHA256_128, 0), tr(TransformDH, DHCurve25519, 0)}},
		{ProtoIKE, "aes128-aes256-sha384-prfsha512-ecp256-x25519", []Transform{tr(TransformEncr, EncrAESCBC, 128), tr(TransformEncr, EncrAESCBC, 256), tr(TransformPRF, PRFHMACSHA512, 0), tr(TransformInteg, IntegHMACSHA384_192, 0), tr(TransformDH, DHECP256, 0), tr(TransformDH, DHCurve25519, 0)}},
		{ProtoESP, "aes128gcm16", []Transform{tr(TransformEncr, EncrAESGCM16, 128), tr(TransformESN, ESNNo, 0)}},
		{ProtoESP, "aes256gcm16-esn", []Transform{tr(TransformEncr, EncrAESGCM16, 256), tr(TransformESN, ESNYes, 0)}},
		{ProtoESP, "aes128-sha256", []Transform{tr(TransformEncr, EncrAESCBC, 128), tr(TransformInteg, IntegHMACSHA256_128, 0), tr(TransformESN, ESNNo, 0)}},
		{ProtoESP, "chacha20poly1305-noesn", []Transform{tr(TransformEncr, EncrChaCha20Poly1305, 0), tr(TransformESN, ESNNo, 0)}},
		{ProtoESP, "aes128gcm16-esn-noesn", []Transform{tr(TransformEncr, EncrAESGCM16, 128), tr(TransformESN, ESNYes, 0), tr(TransformESN, ESNNo, 0)}},
	}
	for _, c := range cases {
		p, err := ParseProposal(c.proto, c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if !reflect.DeepEqual(p.Transforms, c.want) {
			t.Errorf("%s: %+v", c.in, p.Transforms)
		}
	}
	for _, bad := range []struct {
		proto uint8
		in    string
	}{
		{ProtoIKE, "aes256gcm16-ecp384"}, {ProtoIKE, "aes128-sha256"}, {ProtoIKE, "aes128-modp2048"},
		{ProtoIKE, "aes128gcm16-sha256-prfsha256-ecp256"}, {ProtoIKE, "aes128-aes128gcm16-sha256-modp2048"},
		{ProtoESP, "sha256"}, {ProtoESP, "aes128"}, {ProtoESP, "aes128gcm16-prfsha256"}, {ProtoIKE, "aes128-sha256-esn-modp2048"},
		{ProtoESP, "3des-md5"}, {ProtoESP, ""},
	} {
		if _, err := ParseProposal(bad.proto, bad.in); err == nil {
			t.Errorf("%q accepted", bad.in)
		}
	}
}

func TestSelectProposal(t *testing.T) {
	ours, _ := ParseProposals(ProtoIKE, "aes256gcm16-prfsha384-ecp384,aes128-sha256-modp2048")
	theirs, _ := ParseProposals(ProtoIKE, "aes128-aes256-sha256-sha384-modp2048-ecp256")
	s, p, ok := selectProposal(ours, theirs, false)
	if !ok || p.Num != 1 {
		t.Fatal("no match")
	}
	want := Suite{Protocol: ProtoIKE, Encr: EncrAESCBC, KeyLen: 128, PRF: PRFHMACSHA256, Integ: IntegHMACSHA256_128, DH: DHModp2048}
	if s != want {
		t.Fatalf("%+v", s)
	}
	// The responder's answer: one transform of each type, which the
	// initiator accepts.
	if got, err := checkChosen(theirs, Proposal{Num: 1, Protocol: ProtoIKE, Transforms: s.transforms()}, false); err != nil || got != s {
		t.Fatalf("checkChosen: %+v %v", got, err)
	}
	if _, err := checkChosen(ours, Proposal{Num: 1, Protocol: ProtoIKE, Transforms: append(s.transforms(), s.transforms()[0])}, false); err == nil {
		t.Fatal("two ENCR transforms accepted")
	}
	// ESP: the peer asks for PFS; IKE_AUTH ignores DH.
	espOurs, _ := ParseProposals(ProtoESP, "aes128gcm16")
	espTheirs, _ := ParseProposals(ProtoESP, "aes256gcm16-aes128gcm16-ecp256-esn-noesn")
	if _, _, ok := selectProposal(espOurs, espTheirs, false); ok {
		t.Fatal("matched a PFS proposal without a group of ours")
	}
	s, _, ok = selectProposal(espOurs, espTheirs, true)
	if !ok || s.ESPName() != "aes128gcm16" || s.ESN {
		t.Fatalf("%+v %v", s, ok)
	}
	// No overlap.
	a, _ := ParseProposals(ProtoESP, "aes128-sha256")
	b, _ := ParseProposals(ProtoESP, "aes128-sha512")
	if _, _, ok := selectProposal(a, b, true); ok {
		t.Fatal("sha256 matched sha512")
	}
	// An unknown attribute rejects the transform (RFC 7296 3.3.6).
	b, _ = ParseProposals(ProtoESP, "aes128-sha256")
	b[0].Transforms[0].BadAttr = true
	if _, _, ok := selectProposal(a, b, true); ok {
		t.Fatal("transform with an unknown attribute matched")
	}
}

func TestESPName(t *testing.T) {
	for _, s := range []string{"aes128gcm16", "aes256gcm16", "chacha20poly1305", "aes128-sha256", "aes256-sha384", "aes256-sha512"} {
		p, err := ParseProposals(ProtoESP, s)
		if err != nil {
			t.Fatal(err)
		}
		suite, _, ok := selectProposal(p, p, true)
		if !ok || suite.ESPName() != s {
			t.Errorf("%s: %q", s, suite.ESPName())
		}
	}
}

// TestIKEName: an IKE suite's name is the proposal it was chosen from, in
// the keywords ParseProposal takes back (the PRF an integrity algorithm
// implies is spelt out).
func TestIKEName(t *testing.T) {
	for kw, want := range map[string]string{
		"aes256gcm16-prfsha384-ecp384":      "aes256gcm16-prfsha384-ecp384",
		"chacha20poly1305-prfsha256-x25519": "chacha20poly1305-prfsha256-x25519",
		"aes128-sha256-modp2048":            "aes128-sha256-prfsha256-modp2048",
		"aes192-sha512-ecp256":              "aes192-sha512-prfsha512-ecp256",
	} {
		p, err := ParseProposals(ProtoIKE, kw)
		if err != nil {
			t.Fatal(err)
		}
		suite, _, ok := selectProposal(p, p, false)
		if !ok || suite.Name() != want {
			t.Errorf("%s: %q, want %q", kw, suite.Name(), want)
			continue
		}
		if back, err := ParseProposals(ProtoIKE, want); err != nil || len(back) != 1 {
			t.Errorf("%s does not parse back: %v", want, err)
		}
	}
}

// TestSKRoundTrip seals and opens an SK payload with each suite, and
// checks that any change to the message is caught.
func TestSKRoundTrip(t *testing.T) {
	for _, kw := range []string{"aes128gcm16-prfsha256-x25519", "aes256gcm16-prfsha384-ecp384", "chacha20poly1305-prfsha256-x25519",
		"aes128-sha256-modp2048", "aes256-sha384-ecp256", "aes192-sha512-ecp256"} {
		props, err := ParseProposals(ProtoIKE, kw)
		if err != nil {
			t.Fatal(err)
		}
		s, _, _ := selectProposal(props, props, false)
		keys, err := DeriveIKEKeys(s, bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), []byte("g^ir"), 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		send, err := newSKCrypto(s, keys.Ei, keys.Ai)
		if err != nil {
			t.Fatal(err)
		}
		recv, _ := newSKCrypto(s, keys.Ei, keys.Ai)
		other, _ := newSKCrypto(s, keys.Er, keys.Ar)
		h := Header{SPIi: 1, SPIr: 2, Exchange: IKE_AUTH, Flags: FlagInitiator, MessageID: 1}
		inner := []Payload{&ID{IDType: IDFQDN, Data: []byte("initiator")}, &Auth{Method: AuthPSK, Data: bytes.Repeat([]byte{3}, 32)}}
		for _, n := range []int{0, 1, 2} {
			raw, err := send.seal(h, nil, inner[:n])
			if err != nil {
				t.Fatal(err)
			}
			m, err := ParseMessage(raw)
			if err != nil {
				t.Fatalf("%s: %v", kw, err)
			}
			got, err := recv.open(raw, m)
			if err != nil {
				t.Fatalf("%s: open: %v", kw, err)
			}
			if !reflect.DeepEqual(got, inner[:n]) && !(n == 0 && len(got) == 0) {
				t.Fatalf("%s: inner payloads %+v", kw, got)
			}
			if _, err := other.open(raw, m); err == nil {
				t.Fatalf("%s: opened with the other direction's keys", kw)
			}
			for i := 0; i < len(raw); i++ {
				c := append([]byte(nil), raw...)
				c[i] ^= 0x40
				m, err := ParseMessage(c)
				if err != nil {
					continue
				}
				if _, err := recv.open(c, m); err == nil {
					t.Fatalf("%s: byte %d changed and the message still opened", kw, i)
				}
			}
		}
	}
}

// TestKeyLayout checks the cut of prf+ output into the seven IKE SA keys
// and the Child SA keys (RFC 7296 sections 2.14 and 2.17) against prf+
// itself.
func TestKeyLayout(t *testing.T) {
	props, _ := ParseProposals(ProtoIKE, "aes128-sha256-modp2048")
	s, _, _ := selectProposal(props, props, false)
	ni, nr, gir := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), []byte("shared")
	k, err := DeriveIKEKeys(s, ni, nr, gir, 0x1122334455667788, 0x99aabbccddeeff00)
	if err != nil {
		t.Fatal(err)
	}
	prf, _ := NewPRF(PRFHMACSHA256)
	skeyseed := prf.Sum(append(append([]byte{}, ni...), nr...), gir)
	seed := append(append(append([]byte{}, ni...), nr...), 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0)
	all, _ := prf.Plus(skeyseed, seed, 32*3+32*2+16*2)
	got := bytes.Join([][]byte{k.D, k.Ai, k.Ar, k.Ei, k.Er, k.Pi, k.Pr}, nil)
	if !bytes.Equal(got, all) || len(k.D) != 32 || len(k.Ai) != 32 || len(k.Ei) != 16 {
		t.Fatal("IKE keys are not cut from prf+ in order")
	}
	esp, _ := ParseProposals(ProtoESP, "aes128gcm16")
	es, _, _ := selectProposal(esp, esp, true)
	ck, err := DeriveChildKeys(PRFHMACSHA256, k.D, es, nil, ni, nr)
	if err != nil {
		t.Fatal(err)
	}
	km, _ := prf.Plus(k.D, append(append([]byte{}, ni...), nr...), 40)
	if !bytes.Equal(ck.EncI, km[:20]) || !bytes.Equal(ck.EncR, km[20:]) || len(ck.IntegI) != 0 {
		t.Fatal("Child SA keys are not cut from KEYMAT in order")
	}
}
