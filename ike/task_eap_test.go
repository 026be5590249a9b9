package ike

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ike/eap"
)

// A peer whose initiators authenticate with EAP needs no credential for
// their direction besides Peer.EAP (our side signs), and a Peer.EAP that
// cannot run is refused when the Endpoint is made.
func TestEAPPeerConfig(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	mschap := &eap.Config{Methods: []eap.Type{eap.TypeMSCHAPv2}, Password: func(string) ([]byte, bool) { return nil, false }}
	n := newMemNet(t)
	for _, c := range []struct {
		name string
		eap  *eap.Config
		want string // "" for no error
	}{
		{"no EAP, no credential for the peer", nil, "needs a PSK"},
		{"EAP", mschap, ""},
		{"EAP without a method", &eap.Config{}, "no method"},
		{"EAP-TLS without a certificate", &eap.Config{Methods: []eap.Type{eap.TypeTLS}}, "EAP-TLS needs"},
	} {
		_, b := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
		b.PSK, b.Signer, b.Certificates, b.EAP = nil, key, []*x509.Certificate{cert}, c.eap
		ep, err := NewEndpoint(Config{Peers: []*Peer{b}}, memPort{n})
		if ep != nil {
			ep.Close()
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// The EAP payload (section 3.16) decodes as *EAP and encodes back.
func TestEAPPayload(t *testing.T) {
	msg := eap.Packet{Code: eap.CodeRequest, Identifier: 7, Type: eap.TypeIdentity}.Marshal()
	m := &Message{Header: Header{SPIi: 1, SPIr: 2, Version: 0x20, Exchange: IKE_AUTH}, Payloads: []Payload{&EAP{Data: msg}}}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := got.Payloads[0].(*EAP)
	if !ok || string(p.Data) != string(msg) {
		t.Fatalf("decoded %#v, want the EAP payload % x", got.Payloads[0], msg)
	}
	m.Payloads = []Payload{&EAP{Data: msg[:2]}}
	if b, err = m.Encode(); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseMessage(b); err == nil || !strings.Contains(err.Error(), "EAP payload shorter") {
		t.Fatalf("an EAP payload shorter than the EAP header: %v", err)
	}
}
