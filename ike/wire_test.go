package ike

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// sampleMessages are messages with every payload type this package
// decodes, used by the round-trip tests and as fuzz seeds.
func sampleMessages(t testing.TB) [][]byte {
	t.Helper()
	ike, err := ParseProposals(ProtoIKE, "aes256gcm16-prfsha384-ecp384,aes128-sha256-modp2048")
	if err != nil {
		t.Fatal(err)
	}
	esp, err := ParseProposals(ProtoESP, "aes128gcm16,aes256gcm16-esn")
	if err != nil {
		t.Fatal(err)
	}
	esp[0].SPI = []byte{1, 2, 3, 4}
	esp[1].SPI = []byte{1, 2, 3, 4}
	nonce := bytes.Repeat([]byte{0xab}, 32)
	msgs := []*Message{
		{Header: Header{SPIi: 0x0102030405060708, Exchange: IKE_SA_INIT, Flags: FlagInitiator}, Payloads: []Payload{
			&SA{Proposals: ike},
			&KE{Group: DHECP384, Data: bytes.Repeat([]byte{7}, 96)},
			&Nonce{Data: nonce},
			&Notify{NType: NATDetectionSourceIP, Data: bytes.Repeat([]byte{1}, 20)},
			&Notify{NType: NATDetectionDestinationIP, Data: bytes.Repeat([]byte{2}, 20)},
			&VendorID{Data: []byte("sluice")},
			&Cert{Request: true, Encoding: CertX509Signature, Data: bytes.Repeat([]byte{3}, 20)},
		}},
		{Header: Header{SPIi: 1, SPIr: 2, Exchange: IKE_AUTH, Flags: FlagInitiator, MessageID: 1}, Payloads: []Payload{
			&ID{IDType: IDFQDN, Data: []byte("a.example")},
			&Cert{Encoding: CertX509Signature, Data: []byte{0x30, 0x00}},
			&ID{Responder: true, IDType: IDIPv4Addr, Data: []byte{192, 0, 2, 2}},
			&Auth{Method: AuthPSK, Data: bytes.Repeat([]byte{9}, 48)},
			&CP{CfgType: CfgRequest, Attrs: []ConfigAttr{{Type: AttrInternalIP4Address}, {Type: AttrInternalIP4DNS}, {Type: AttrInternalIP6Address}, {Type: AttrInternalIP6DNS}, {Type: 0x5000, Value: []byte{1, 2}}}},
			&SA{Proposals: esp},
			&TS{Selectors: []Selector{{StartPort: 0, EndPort: 65535, Start: netip.MustParseAddr("10.1.0.0"), End: netip.MustParseAddr("10.1.0.255")}}},
			&TS{Responder: true, Selectors: []Selector{
				{IPProto: 6, StartPort: 80, EndPort: 80, Start: netip.MustParseAddr("10.2.0.1"), End: netip.MustParseAddr("10.2.0.1")},
				{EndPort: 65535, Start: netip.MustParseAddr("2001:db8::"), End: netip.MustParseAddr("2001:db8::ffff")},
			}},
			&Notify{Protocol: ProtoESP, SPI: []byte{1, 2, 3, 4}, NType: UseTransportMode},
		}},
		{Header: Header{SPIi: 1, SPIr: 2, Exchange: IKE_AUTH, Flags: FlagResponse, MessageID: 1}, Payloads: []Payload{
			&ID{Responder: true, IDType: IDFQDN, Data: []byte("gw.example")},
			&Auth{Method: AuthPSK, Data: bytes.Repeat([]byte{9}, 32)},
			&CP{CfgType: CfgReply, Attrs: []ConfigAttr{
				{Type: AttrInternalIP4Address, Value: []byte{10, 3, 0, 1}},
				{Type: AttrInternalIP4Netmask, Value: []byte{255, 255, 255, 255}},
				{Type: AttrInternalIP4DNS, Value: []byte{10, 3, 0, 53}},
				{Type: AttrInternalIP6Address, Value: append(netip.MustParseAddr("fd00:3::1").AsSlice(), 128)},
				{Type: AttrInternalIP6DNS, Value: netip.MustParseAddr("fd00:3::53").AsSlice()},
				{Type: AttrInternalIP4Subnet, Value: []byte{10, 2, 0, 0, 255, 255, 0, 0}},
				{Type: AttrApplicationVersion, Value: []byte("sluice")},
			}},
			&Notify{NType: InternalAddressFailure},
		}},
		{Header: Header{SPIi: 1, SPIr: 2, Exchange: INFORMATIONAL, Flags: FlagResponse, MessageID: 7}, Payloads: []Payload{
			&Delete{Protocol: ProtoESP, SPIs: []uint32{0xc0ffee, 7}},
			&Delete{Protocol: ProtoIKE},
			&Unknown{T: 200, Data: []byte{1, 2, 3}},
			&Encrypted{Inner: PayloadNotify, Data: bytes.Repeat([]byte{5}, 40)},
		}},
	}
	var out [][]byte
	for _, m := range msgs {
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func TestMessageRoundTrip(t *testing.T) {
	for i, b := range sampleMessages(t) {
		m, err := ParseMessage(b)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		b2, err := m.Encode()
		if err != nil {
			t.Fatalf("message %d: reencode: %v", i, err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("message %d: reencoded differently\n%x\n%x", i, b, b2)
		}
		m2, err := ParseMessage(b2)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("message %d: decoded differently", i)
		}
	}
}

// TestParseKnownBytes decodes a hand-assembled IKE_SA_INIT request whose
// fields are laid out per RFC 7296 sections 3.1-3.4 and 3.9.
func TestParseKnownBytes(t *testing.T) {
	b := []byte{
		// header: SPIi, SPIr
		1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0,
		33, 0x20, 34, 0x08, 0, 0, 0, 0, 0, 0, 0, 0,
		// SA payload: next KE, length 48
		34, 0, 0, 48,
		// proposal: last, length 44, num 1, IKE, SPI size 0, 4 transforms
		0, 0, 0, 44, 1, 1, 0, 4,
		3, 0, 0, 12, 1, 0, 0, 12, 0x80, 14, 0, 128, // ENCR_AES_CBC, 128 bits
		3, 0, 0, 8, 2, 0, 0, 5, // PRF_HMAC_SHA2_256
		3, 0, 0, 8, 3, 0, 0, 12, // AUTH_HMAC_SHA2_256_128
		0, 0, 0, 8, 4, 0, 0, 31, // Curve25519
		// KE: next Nonce, length 12, group 31, 4 bytes of data (short, fine for the codec)
		40, 0, 0, 12, 0, 31, 0, 0, 0xa, 0xb, 0xc, 0xd,
		// Nonce: last, length 20
		0, 0, 0, 20, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
	}
	b[27] = byte(len(b))
	m, err := ParseMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.SPIi != 0x0102030405060708 || m.Header.Exchange != IKE_SA_INIT || !m.Header.IsInitiator() || m.Header.IsResponse() {
		t.Fatalf("header %+v", m.Header)
	}
	sa := m.Payloads[0].(*SA)
	want := []Transform{{TransformEncr, EncrAESCBC, 128, false}, {TransformPRF, PRFHMACSHA256, 0, false},
		{TransformInteg, IntegHMACSHA256_128, 0, false}, {TransformDH, DHCurve25519, 0, false}}
	if !reflect.DeepEqual(sa.Proposals[0].Transforms, want) {
		t.Fatalf("transforms %+v", sa.Proposals[0].Transforms)
	}
	if ke := m.Payloads[1].(*KE); ke.Group != 31 || len(ke.Data) != 4 {
		t.Fatalf("KE %+v", ke)
	}
	if n := m.Payloads[2].(*Nonce); len(n.Data) != 16 {
		t.Fatalf("nonce %+v", n)
	}
	// The same proposal from strongSwan keywords encodes to the same bytes.
	p, err := ParseProposal(ProtoIKE, "aes128-sha256-x25519")
	if err != nil {
		t.Fatal(err)
	}
	m2 := &Message{Header: m.Header, Payloads: []Payload{&SA{Proposals: []Proposal{p}}, m.Payloads[1], m.Payloads[2]}}
	// ParseProposal orders ENCR, PRF, INTEG, DH as above.
	b2, err := m2.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatalf("encoded\n%x\nwant\n%x", b2, b)
	}
}

// TestParseMalformed cuts and corrupts valid messages: every result is an
// error or a message, never a panic, and lengths are never trusted.
func TestParseMalformed(t *testing.T) {
	for _, b := range sampleMessages(t) {
		for n := 0; n < len(b); n++ {
			c := append([]byte(nil), b[:n]...)
			if _, err := ParseMessage(c); err == nil {
				t.Fatalf("message cut to %d of %d bytes parsed", n, len(b))
			}
			// The same, with the header's length fixed up to match.
			if n >= HeaderLen {
				c[24], c[25], c[26], c[27] = 0, 0, byte(n>>8), byte(n)
				ParseMessage(c)
			}
		}
		for i := 0; i < len(b); i++ {
			for _, v := range []byte{0, 0xff, b[i] + 1, b[i] - 1} {
				c := append([]byte(nil), b...)
				c[i] = v
				ParseMessage(c)
			}
		}
	}
	critical := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0, 200, 0x20, 34, 8, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0x80, 0, 4}
	if _, err := ParseMessage(critical); !errors.Is(err, ErrUnsupportedCritical) {
		t.Fatalf("critical unknown payload: %v", err)
	}
	critical[29] = 0
	if m, err := ParseMessage(critical); err != nil || m.Payloads[0].Type() != 200 {
		t.Fatalf("non-critical unknown payload: %v", err)
	}
}

func FuzzParseMessage(f *testing.F) {
	for _, b := range sampleMessages(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMessage(b)
		if err != nil {
			return
		}
		b2, err := m.Encode()
		if err != nil {
			return // e.g. a selector mixing families decodes but cannot encode
		}
		m2, err := ParseMessage(b2)
		if err != nil {
			t.Fatalf("reencoded message does not parse: %v\n%x", err, b2)
		}
		b3, err := m2.Encode()
		if err != nil || !bytes.Equal(b2, b3) {
			t.Fatalf("encoding is not stable: %v", err)
		}
	})
}

// TestWriteFuzzSeeds writes the sample messages as the seed corpus of
// FuzzParseMessage when IKE_WRITE_SEEDS=1.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("IKE_WRITE_SEEDS") != "1" {
		t.Skip("set IKE_WRITE_SEEDS=1 to rewrite testdata/fuzz/FuzzParseMessage")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParseMessage")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, b := range sampleMessages(t) {
		s := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("sample-%d", i)), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
