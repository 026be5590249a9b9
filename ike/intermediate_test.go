package ike

// The key schedule of RFC 9370 section 2.2.2 and the IntAuth of RFC 9242
// section 3.3.2, each checked against the formula written out with HMAC
// directly. There are no published test vectors for either: RFC 9370,
// RFC 9242 and draft-ietf-ipsecme-ikev2-mlkem have none, and strongSwan's
// unit tests (src/libcharon/tests) have none for IKE_INTERMEDIATE.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/binary"
	"testing"
)

func hmac384(key []byte, data ...[]byte) []byte {
	m := hmac.New(sha512.New384, key)
	for _, d := range data {
		m.Write(d)
	}
	return m.Sum(nil)
}

// prfPlus384 is RFC 7296 section 2.13's prf+ written out.
func prfPlus384(key, seed []byte, n int) []byte {
	var out, t []byte
	for i := byte(1); len(out) < n; i++ {
		t = hmac384(key, t, seed, []byte{i})
		out = append(out, t...)
	}
	return out[:n]
}

// TestAddKEKeySchedule: after additional key exchange n,
// SKEYSEED(n) = prf(SK_d(n-1), SK(n) | Ni | Nr) and the seven keys are
// prf+(SKEYSEED(n), Ni | Nr | SPIi | SPIr) (RFC 9370 section 2.2.2), here
// for two exchanges in a row after IKE_SA_INIT.
func TestAddKEKeySchedule(t *testing.T) {
	props, _ := ParseProposals(ProtoIKE, "aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke2_mlkem1024")
	s, _, ok := selectProposal(props, props, false)
	if !ok {
		t.Fatal("no suite")
	}
	if got := s.addKEMethods(); len(got) != 2 || got[0] != MLKEM768 || got[1] != MLKEM1024 {
		t.Fatalf("order %v", got)
	}
	ni, nr := bytes.Repeat([]byte{0xa1}, 32), bytes.Repeat([]byte{0xb2}, 32)
	spii, spir := uint64(0x0102030405060708), uint64(0x1112131415161718)
	k0, err := DeriveIKEKeys(s, ni, nr, []byte("g^ir of x25519"), spii, spir)
	if err != nil {
		t.Fatal(err)
	}
	seed := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(append(append([]byte{}, ni...), nr...), spii), spir)
	prev := k0
	for n, sk := range [][]byte{bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)} {
		k, err := deriveAddKEKeys(s, prev, sk, ni, nr, spii, spir)
		if err != nil {
			t.Fatal(err)
		}
		skeyseed := hmac384(prev.D, sk, ni, nr)
		// SK_d, SK_pi, SK_pr: 48 bytes (the PRF's); no SK_a (AEAD); SK_e:
		// 32 + 4 bytes of salt (RFC 5282 section 7.1).
		want := prfPlus384(skeyseed, seed, 48+0+0+36+36+48+48)
		got := bytes.Join([][]byte{k.D, k.Ai, k.Ar, k.Ei, k.Er, k.Pi, k.Pr}, nil)
		if !bytes.Equal(got, want) {
			t.Fatalf("exchange %d: keys differ from RFC 9370 section 2.2.2", n+1)
		}
		if bytes.Equal(k.D, prev.D) || bytes.Equal(k.Ei, prev.Ei) || bytes.Equal(k.Pi, prev.Pi) {
			t.Fatalf("exchange %d: keys unchanged", n+1)
		}
		prev = k
	}
	if _, err := deriveAddKEKeys(s, k0, nil, ni, nr, spii, spir); err == nil {
		t.Fatal("empty shared secret accepted")
	}
	if _, err := deriveAddKEKeys(s, nil, []byte{1}, ni, nr, spii, spir); err == nil {
		t.Fatal("no previous keys accepted")
	}
}

// TestIntAuthOctets: IntAuth_*A | IntAuth_*P of RFC 9242 section 3.3.2 is
// the IKE header and the Encrypted payload header with lengths that count
// no IV, padding, pad length or ICV, then the plaintext inner payloads;
// so it does not depend on the cipher, and the receiver, decrypting,
// finds the sender's octets.
func TestIntAuthOctets(t *testing.T) {
	h := Header{SPIi: 0x0102030405060708, SPIr: 0x1112131415161718, Exchange: IKE_INTERMEDIATE, Flags: FlagInitiator, MessageID: 1}
	inner := []Payload{&KE{Group: MLKEM768, Data: bytes.Repeat([]byte{7}, 1184)}}
	plain, _ := appendPayloads(nil, inner)
	want := []byte{
		1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
		46, 0x20, 43, 0x08, 0, 0, 0, 1, // SK, 2.0, IKE_INTERMEDIATE, I, MID 1
		0, 0, 0x04, 0xc8, // 28 + 4 + 1192 (KE: 4 + 4 + 1184)
		34, 0, 0x04, 0xac, // first inner: KE; 4 + 1192
	}
	want = append(want, plain...)
	if got := intAuthOctets(h, PayloadKE, plain); !bytes.Equal(got, want) {
		t.Fatalf("A|P:\n got %x\nwant %x", got[:32], want[:32])
	}
	var seen [][]byte
	for _, kw := range []string{"aes256gcm16-prfsha384-x25519", "aes128-sha256-x25519", "chacha20poly1305-prfsha256-x25519"} {
		props, _ := ParseProposals(ProtoIKE, kw)
		s, _, _ := selectProposal(props, props, false)
		keys, _ := DeriveIKEKeys(s, bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), []byte("g^ir"), h.SPIi, h.SPIr)
		c, _ := newSKCrypto(s, keys.Ei, keys.Ai)
		raw, err := c.seal(h, nil, inner)
		if err != nil {
			t.Fatal(err)
		}
		m, err := ParseMessage(raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.open(raw, m)
		if err != nil {
			t.Fatal(err)
		}
		recv, err := intAuthOf(m.Header, got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(recv, want) {
			t.Fatalf("%s: the receiver's A|P differs from the sender's", kw)
		}
		seen = append(seen, raw)
	}
	if bytes.Equal(seen[0][:HeaderLen], seen[1][:HeaderLen]) {
		t.Fatal("the test's messages do not differ on the wire")
	}
	// Sent in fragments (RFC 7383), the message counts as if sent whole.
	props, _ := ParseProposals(ProtoIKE, "aes256gcm16-prfsha384-x25519")
	s, _, _ := selectProposal(props, props, false)
	keys, _ := DeriveIKEKeys(s, bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), []byte("g^ir"), h.SPIi, h.SPIr)
	c, _ := newSKCrypto(s, keys.Ei, keys.Ai)
	frags, err := c.sealFragments(h, inner, 500)
	if err != nil || len(frags) < 3 {
		t.Fatalf("%d fragments: %v", len(frags), err)
	}
	var pt []byte
	for _, f := range frags {
		m, err := ParseMessage(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.openFragment(f, m, m.Payloads[0].(*EncryptedFragment))
		if err != nil {
			t.Fatal(err)
		}
		pt = append(pt, p...)
	}
	fh, _ := ParseHeader(frags[0])
	if got := intAuthOctets(fh, PayloadKE, pt); !bytes.Equal(got, want) {
		t.Fatal("a fragmented message's A|P differs from the whole one's")
	}
}

// TestIntAuthChain: IntAuth_i1 = prf(SK_pi1, A|P_i1), IntAuth_i2 =
// prf(SK_pi2, IntAuth_i1 | A|P_i2), the same with SK_pr for the
// responder's messages, and IntAuth = IntAuth_iN | IntAuth_rN |
// IKE_AUTH's message ID (RFC 9242 section 3.3.2).
func TestIntAuthChain(t *testing.T) {
	prf, _ := NewPRF(PRFHMACSHA384)
	pi1, pr1, pi2, pr2 := []byte("SK_pi1"), []byte("SK_pr1"), []byte("SK_pi2"), []byte("SK_pr2")
	i1, r1, i2, r2 := []byte("request 1"), []byte("response 1"), []byte("request 2"), []byte("response 2")
	var a IntAuth
	if v := a.Value(3); v != nil {
		t.Fatalf("no IKE_INTERMEDIATE: IntAuth %x, want none", v)
	}
	a.Add(prf, pi1, true, i1)
	a.Add(prf, pr1, false, r1)
	a.Add(prf, pi2, true, i2)
	a.Add(prf, pr2, false, r2)
	wi := hmac384(pi2, hmac384(pi1, i1), i2)
	wr := hmac384(pr2, hmac384(pr1, r1), r2)
	want := append(append(append([]byte{}, wi...), wr...), 0, 0, 0, 3)
	if got := a.Value(3); !bytes.Equal(got, want) {
		t.Fatalf("IntAuth\n got %x\nwant %x", got, want)
	}
}

// TestAddKEExchanges runs two additional key exchanges (ML-KEM-768, then
// ML-KEM-1024) between an initiator and a responder as IKE_INTERMEDIATE
// messages sealed and opened with each round's keys, as RFC 9242 section
// 3.4's example: both sides must end with the same keys and IntAuth, and
// so with the same PSK AUTH value.
func TestAddKEExchanges(t *testing.T) {
	props, _ := ParseProposals(ProtoIKE, "aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke2_mlkem1024")
	s, _, _ := selectProposal(props, props, false)
	prf, _ := NewPRF(s.PRF)
	ni, nr := bytes.Repeat([]byte{0xa1}, 32), bytes.Repeat([]byte{0xb2}, 32)
	spii, spir := uint64(1), uint64(2)
	k0, _ := DeriveIKEKeys(s, ni, nr, []byte("g^ir"), spii, spir)
	ik, rk := k0, k0
	ia, ra := newAddKE(s), newAddKE(s)
	if newAddKE(Suite{}) != nil || !ia.pending() {
		t.Fatal("pending")
	}
	for mid := uint32(1); ia.pending(); mid++ {
		// Initiator: KEi under SK_ei(n-1).
		ke, err := ia.request()
		if err != nil {
			t.Fatal(err)
		}
		h := Header{SPIi: spii, SPIr: spir, Exchange: IKE_INTERMEDIATE, Flags: FlagInitiator, MessageID: mid}
		out, _ := newSKCrypto(s, ik.Ei, ik.Ai)
		raw, err := out.seal(h, nil, []Payload{ke})
		if err != nil {
			t.Fatal(err)
		}
		sent, _ := intAuthOf(h, []Payload{ke})
		ia.auth.Add(prf, ik.Pi, true, sent)
		// Responder.
		m, _ := ParseMessage(raw)
		in, _ := newSKCrypto(s, rk.Ei, rk.Ai)
		inner, err := in.open(raw, m)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := intAuthOf(m.Header, inner)
		ra.auth.Add(prf, rk.Pi, true, got)
		ker, shared, _, err := ra.respond(inner)
		if err != nil {
			t.Fatal(err)
		}
		rh := Header{SPIi: spii, SPIr: spir, Exchange: IKE_INTERMEDIATE, Flags: FlagResponse, MessageID: mid}
		rout, _ := newSKCrypto(s, rk.Er, rk.Ar)
		rraw, err := rout.seal(rh, nil, []Payload{ker})
		if err != nil {
			t.Fatal(err)
		}
		rsent, _ := intAuthOf(rh, []Payload{ker})
		ra.auth.Add(prf, rk.Pr, false, rsent)
		if rk, err = deriveAddKEKeys(s, rk, shared, ni, nr, spii, spir); err != nil {
			t.Fatal(err)
		}
		// Initiator.
		rm, _ := ParseMessage(rraw)
		iin, _ := newSKCrypto(s, ik.Er, ik.Ar)
		rinner, err := iin.open(rraw, rm)
		if err != nil {
			t.Fatal(err)
		}
		rgot, _ := intAuthOf(rm.Header, rinner)
		ia.auth.Add(prf, ik.Pr, false, rgot)
		ishared, err := ia.finish(rinner)
		if err != nil {
			t.Fatal(err)
		}
		if ik, err = deriveAddKEKeys(s, ik, ishared, ni, nr, spii, spir); err != nil {
			t.Fatal(err)
		}
	}
	if ra.pending() || ia.done != 2 {
		t.Fatal("exchanges left")
	}
	for i, pair := range [][2][]byte{{ik.D, rk.D}, {ik.Ei, rk.Ei}, {ik.Er, rk.Er}, {ik.Pi, rk.Pi}, {ik.Pr, rk.Pr}} {
		if !bytes.Equal(pair[0], pair[1]) {
			t.Fatalf("key %d differs", i)
		}
	}
	if bytes.Equal(ik.D, k0.D) {
		t.Fatal("keys unchanged")
	}
	iv, rv := ia.auth.Value(3), ra.auth.Value(3)
	if !bytes.Equal(iv, rv) || len(iv) != 48+48+4 {
		t.Fatalf("IntAuth differs or of %d bytes", len(iv))
	}
	// AUTH (task_auth.go's authOctets) covers IntAuth, and without
	// IKE_INTERMEDIATE is RFC 7296's.
	id := &ID{IDType: IDFQDN, Data: []byte("i")}
	mac := func(oct []byte) []byte { return prf.Sum(prf.Sum([]byte("psk"), []byte(keyPad)), oct) }
	a1 := mac(authOctets(prf, []byte("IKE_SA_INIT request"), nr, ik.Pi, id, iv))
	a2 := mac(authOctets(prf, []byte("IKE_SA_INIT request"), nr, rk.Pi, id, rv))
	if !bytes.Equal(a1, a2) || bytes.Equal(a1, PSKAuth(prf, []byte("psk"), []byte("IKE_SA_INIT request"), nr, ik.Pi, idBody(id))) {
		t.Fatal("AUTH does not cover IntAuth")
	}
	if !bytes.Equal(mac(authOctets(prf, []byte("m"), nr, ik.Pi, id, nil)), PSKAuth(prf, []byte("psk"), []byte("m"), nr, ik.Pi, idBody(id))) {
		t.Fatal("without IKE_INTERMEDIATE AUTH is not RFC 7296's")
	}
}

// TestAddKERefused: a responder answers a KE payload of another method,
// a second one, none or malformed data with INVALID_SYNTAX; an initiator
// fails on a malformed or missing KEr and on an error notification;
// nothing panics.
func TestAddKERefused(t *testing.T) {
	props, _ := ParseProposals(ProtoIKE, "aes256gcm16-prfsha384-x25519-ke1_mlkem768")
	s, _, _ := selectProposal(props, props, false)
	good, _ := NewDH(MLKEM768)
	for name, inner := range map[string][]Payload{
		"none":      nil,
		"method":    {&KE{Group: MLKEM1024, Data: make([]byte, 1568)}},
		"x25519":    {&KE{Group: DHCurve25519, Data: make([]byte, 32)}},
		"short":     {&KE{Group: MLKEM768, Data: good.Public()[:100]}},
		"modulus":   {&KE{Group: MLKEM768, Data: append([]byte{0xff, 0xff}, good.Public()[2:]...)}},
		"two":       {&KE{Group: MLKEM768, Data: good.Public()}, &KE{Group: MLKEM768, Data: good.Public()}},
		"notify":    {&Notify{NType: InvalidSyntax}},
		"empty-ke":  {&KE{Group: MLKEM768}},
		"unrelated": {&Nonce{Data: make([]byte, 32)}},
	} {
		a := newAddKE(s)
		_, _, nt, err := a.respond(inner)
		if err == nil || nt != InvalidSyntax || !a.pending() {
			t.Errorf("responder, %s: %v %d", name, err, nt)
		}
	}
	a := newAddKE(s)
	if _, err := a.finish(nil); err == nil {
		t.Error("initiator: response without a request accepted")
	}
	if _, err := a.request(); err != nil {
		t.Fatal(err)
	}
	for name, inner := range map[string][]Payload{
		"none":   nil,
		"short":  {&KE{Group: MLKEM768, Data: make([]byte, 1087)}},
		"method": {&KE{Group: MLKEM1024, Data: make([]byte, 1568)}},
		"notify": {&Notify{NType: InvalidSyntax}},
	} {
		if _, err := a.finish(inner); err == nil || !a.pending() {
			t.Errorf("initiator, %s: %v", name, err)
		}
	}
	// After the one exchange, no more.
	r := newAddKE(s)
	ke, _ := a.request()
	if _, _, _, err := r.respond([]Payload{ke}); err != nil {
		t.Fatal(err)
	}
	if _, _, nt, err := r.respond([]Payload{ke}); err == nil || nt != InvalidSyntax {
		t.Error("a second IKE_INTERMEDIATE accepted")
	}
	if _, err := r.request(); err == nil {
		t.Error("request with none pending")
	}
}
