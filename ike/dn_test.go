package ike

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"strings"
	"testing"
	"time"
)

// utf8Name is the DER of a Name whose attributes are UTF8Strings, as
// openssl writes them.
func utf8Name(t *testing.T, cn string) []byte {
	t.Helper()
	rdns := pkix.RDNSequence{{{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: asn1.RawValue{Tag: asn1.TagUTF8String, Bytes: []byte(cn)}}}}
	der, err := asn1.Marshal(rdns)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// TestIdentityDN: an id of "CN=..." is a distinguished name (as
// swanctl.conf reads it), sent with PrintableStrings as strongSwan does,
// and it matches the same name encoded with UTF8Strings, as a peer's
// IDi/IDr and as a certificate's subject (issue 16, defect 6).
func TestIdentityDN(t *testing.T) {
	id := ParseIdentity("CN=sw.example.test")
	if id.Type != IDDERASN1 {
		t.Fatalf("CN=sw.example.test parsed as type %d, want a DN (%d)", id.Type, IDDERASN1)
	}
	// SEQUENCE { SET { SEQUENCE { OID 2.5.4.3, PrintableString } } }
	want := append([]byte{0x30, 0x1a, 0x31, 0x18, 0x30, 0x16, 0x06, 0x03, 0x55, 0x04, 0x03, 0x13, 0x0f}, "sw.example.test"...)
	if string(id.Data) != string(want) {
		t.Fatalf("DER %x, want %x (a PrintableString CN)", id.Data, want)
	}
	peer := utf8Name(t, "sw.example.test")
	if !id.equal(&ID{IDType: IDDERASN1, Data: peer}) {
		t.Fatal("the same DN with a UTF8String does not match")
	}
	// A certificate whose subject is that DN, in UTF8String.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), RawSubject: peer, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if !certNames(cert, &ID{IDType: IDDERASN1, Data: id.Data}) {
		t.Fatal("the certificate with subject CN=sw.example.test (UTF8String) does not name CN=sw.example.test (PrintableString)")
	}
	if certNames(cert, &ID{IDType: IDDERASN1, Data: ParseIdentity("CN=other.example.test").Data}) {
		t.Fatal("the certificate names another CN")
	}
}

// TestParseDN covers the forms swanctl.conf writes and by-value
// comparison.
func TestParseDN(t *testing.T) {
	same := [][2]string{
		{"C=CH, O=strongSwan, CN=gw.example", "C=CH,O=strongSwan,CN=gw.example"},
		{"C=CH, O=strongSwan, CN=gw.example", "/C=CH/O=strongSwan/CN=gw.example"},
		{"C=CH, O=strongSwan, CN=gw.example", "c=ch, o=STRONGSWAN, commonName=GW.example"},
		{"CN=gw.example", "2.5.4.3=gw.example"},
		{"asn1dn:CN=gw.example", "CN=gw.example"},
		{"O=a\\, b, CN=x", "O=A\\, B,CN=X"},
	}
	for _, p := range same {
		a, err1 := ReadIdentity(p[0])
		b, err2 := ReadIdentity(p[1])
		if err1 != nil || err2 != nil || a.Type != IDDERASN1 || !a.Equal(b) {
			t.Errorf("%q and %q: %v %v %v", p[0], p[1], err1, err2, a.Equal(b))
		}
	}
	differ := [][2]string{
		{"C=CH, CN=gw.example", "CN=gw.example, C=CH"},
		{"CN=gw.example", "CN=gw.example, O=x"},
		{"CN=gw.example", "O=gw.example"},
		{"CN=gw.example", "CN=gw2.example"},
	}
	for _, p := range differ {
		if ParseIdentity(p[0]).Equal(ParseIdentity(p[1])) {
			t.Errorf("%q and %q match", p[0], p[1])
		}
	}
	if s := ParseIdentity("C=CH, O=a\\, b, E=x@y.example, CN=gw.example").String(); s != "C=CH, O=a\\, b, E=x@y.example, CN=gw.example" {
		t.Errorf("String %q", s)
	}
	// UTF-8 values go as UTF8String, e-mail as IA5String.
	der, err := ParseDN("CN=grüezi, E=a@b.example")
	if err != nil {
		t.Fatal(err)
	}
	var rdns pkix.RDNSequence
	if _, err := asn1.Unmarshal(der, &rdns); err != nil || rdns[0][0].Value != "grüezi" {
		t.Fatalf("%v %v", rdns, err)
	}
	// Not DNs: these stay what they were.
	for _, s := range []string{"gw.example", "a@b.example", "@x=y", "x=y.example", "192.0.2.1", "fqdn:CN=x"} {
		if id := ParseIdentity(s); id.Type == IDDERASN1 {
			t.Errorf("%q read as a DN", s)
		}
	}
	for _, c := range []struct{ s, msg string }{
		{"CN=", "empty value"},
		{"CN=a, XYZ=b", `unknown attribute type "XYZ"`},
		{"CN=a, b", "has no '='"},
		{"E=ü@b", "not ASCII"},
	} {
		if _, err := ReadIdentity(c.s); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want %q", c.s, err, c.msg)
		}
	}
}
