package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/gateway/certgen"
	"github.com/sluicegw/sluice/ike"
)

// crlTestConfig is a gateway whose one connection authenticates its peer
// with certificates of ca.pem, checked against crls under revocation.
func crlTestConfig(crls, revocation string) string {
	return `[[connection]]
name = "b"
local_addrs = ["127.0.0.1"]
remote_addrs = ["192.0.2.2"]
  [connection.local]
  auth = "psk"
  id = "a.example"
  [connection.remote]
  auth = "pubkey"
  id = "b.example"
  cacerts = ["ca.pem"]
  crls = [` + crls + `]
  revocation = "` + revocation + `"
  [[connection.children]]
  name = "b-net"
  local_ts = ["10.1.0.0/24"]
  remote_ts = ["10.2.0.0/24"]
[[secret]]
type = "ike"
secret = "0x00112233445566778899aabbccddeeff"
`
}

// TestPeerCRLs: [connection.remote] crls (PEM and DER files, relative to
// the configuration) and revocation reach the ike.Peer; a file that is
// missing or holds no CRL is an error naming its line and field.
func TestPeerCRLs(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA("crl test CA")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	der, err := ca.CRL(1, now, now.Add(time.Hour), ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"ca.pem":  ca.PEM,
		"a.crl":   pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}),
		"b.der":   der,
		"bad.crl": []byte("not a CRL\n"),
		"odd.crl": criticalCRL(t),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	parse := func(text string) *config.Gateway {
		t.Helper()
		cfg, err := config.ParseGateway(filepath.Join(dir, "gw.toml"), []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	p, _, _, err := ikeCredentials(parse(crlTestConfig(`"a.crl", "b.der"`, "strict")), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.CRLs) != 2 || p.Revocation != ike.RevocationStrict || p.CRLs[1].Number.Int64() != 1 {
		t.Errorf("peer CRLs %d, revocation %v", len(p.CRLs), p.Revocation)
	}
	p, _, _, err = ikeCredentials(parse(crlTestConfig(`"b.der"`, "relaxed")), 0, nil)
	if err != nil || len(p.CRLs) != 1 || p.Revocation != ike.RevocationRelaxed {
		t.Errorf("relaxed: %v, %d CRLs, %v", err, len(p.CRLs), p.Revocation)
	}
	for _, c := range []struct{ crls, want string }{
		{`"a.crl", "bad.crl"`, "gw.toml:12:20: connection[1].remote.crls[2]: " + filepath.Join(dir, "bad.crl") + ": ike: CRL"},
		{`"none.crl"`, "gw.toml:12:11: connection[1].remote.crls[1]: open " + filepath.Join(dir, "none.crl")},
		// RFC 5280 section 5.2: a CRL with a critical extension not
		// understood must not be used.
		{`"odd.crl"`, "gw.toml:12:11: connection[1].remote.crls[1]: " + filepath.Join(dir, "odd.crl") + ": ike: CRL: critical extension 1.3.6.1.4.1.99999.7 not understood (RFC 5280 section 5.2)"},
	} {
		_, _, _, err := ikeCredentials(parse(crlTestConfig(c.crls, "relaxed")), 0, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("crls = [%s]: %v, want %q", c.crls, err, c.want)
		}
	}
}

// TestReloadCRLOnly: a reload that changes only a connection's CRL file
// or revocation is a change of credentials (before, sameCredentials
// ignored them and the running peer kept the old lists), but not of its
// keys: reloadPeers gives the endpoint the running peer with the new
// lists (withRevocation), which takes over its SAs (ike.Peer.RotatesCRLs)
// and applies the lists to the next authentication.
func TestReloadCRLOnly(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA("crl reload CA")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", ca.PEM)
	crl := func(n int64) []byte {
		t.Helper()
		der, err := ca.CRL(n, now, now.Add(time.Hour), ca.Cert)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	peer := func(revocation string) *ike.Peer {
		t.Helper()
		cfg, err := config.ParseGateway(filepath.Join(dir, "gw.toml"), []byte(crlTestConfig(`"ca.crl"`, revocation)))
		if err != nil {
			t.Fatal(err)
		}
		p, _, _, err := ikeCredentials(cfg, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("ca.crl", crl(1))
	old := peer("relaxed")
	if again := peer("relaxed"); !sameCredentials(old, again) {
		t.Fatal("the same CRL file read again is a change")
	}
	write("ca.crl", crl(2)) // the CA published its next list
	for _, next := range []*ike.Peer{peer("relaxed"), peer("strict")} {
		if sameCredentials(old, next) {
			t.Fatalf("a new CRL (revocation %v) is not a change of credentials", next.Revocation)
		}
		if !sameKeys(old, next) {
			t.Fatal("a new CRL changed the keys")
		}
		np := withRevocation(old, next)
		if !np.RotatesCRLs(old) || !sameRevocation(np, next) || np.Signer != old.Signer {
			t.Fatalf("the reloaded peer does not take over the SAs with the new lists (%v)", next.Revocation)
		}
	}
}

// criticalCRL returns a CRL, in DER, with a critical extension nobody
// knows (1.3.6.1.4.1.99999.7).
func criticalCRL(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "odd CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCRLSign | x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	crl, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: time.Now(), NextUpdate: time.Now().Add(time.Hour),
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 99999, 7}, Critical: true, Value: []byte{5, 0}}}}, ca, key)
	if err != nil {
		t.Fatal(err)
	}
	return crl
}
