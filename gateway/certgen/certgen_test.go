package certgen

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"testing"
	"time"
)

// TestIssue: a server certificate verifies against its CA for its names,
// and its key pairs with it.
func TestIssue(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, err := ca.IssueFiles(dir, "site", false, "localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf := pair.Leaf
	for _, name := range []string{"localhost", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: ca.Pool()}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other", Roots: ca.Pool()}); err == nil {
		t.Error("verifies for a name it does not have")
	}
	cpem, _, err := ca.Issue(true, "client")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(cpem, cpem); err == nil {
		t.Error("a certificate pairs with itself")
	}
	if _, _, err := ca.Issue(false); err == nil {
		t.Error("a certificate without a name")
	}
}

// TestCertify: a certificate for a key the caller holds names an e-mail
// address as such, carries the extra extension and no extended key
// usage, and verifies against its CA.
func TestCertify(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ext := pkix.Extension{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 32473, 1}, Value: []byte{4, 2, 0, 0}}
	cert, err := ca.Certify(key.Public(), []string{"peer@example.net", "peer.example.net"}, ext)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "peer@example.net" || len(cert.EmailAddresses) != 1 || cert.EmailAddresses[0] != "peer@example.net" ||
		len(cert.DNSNames) != 1 || cert.DNSNames[0] != "peer.example.net" {
		t.Errorf("names: CN %q, e-mail %v, DNS %v", cert.Subject.CommonName, cert.EmailAddresses, cert.DNSNames)
	}
	if len(cert.ExtKeyUsage) != 0 || cert.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("usage %v, extended %v", cert.KeyUsage, cert.ExtKeyUsage)
	}
	found := false
	for _, e := range cert.Extensions {
		found = found || (e.Id.Equal(ext.Id) && string(e.Value) == string(ext.Value))
	}
	if !found {
		t.Error("the extra extension is missing")
	}
	if !cert.PublicKey.(*ecdsa.PublicKey).Equal(key.Public()) {
		t.Error("certifies another key")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Error(err)
	}
	if _, err := ca.Certify(key.Public(), nil); err == nil {
		t.Error("a certificate without a name")
	}
}

// TestCRL: the CA's revocation list carries its number, times and the
// revoked serial, and verifies against the CA (which needs the cRLSign
// key usage).
func TestCRL(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Certify(key.Public(), []string{"peer.example.net"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	der, err := ca.CRL(7, now, now.Add(time.Hour), cert)
	if err != nil {
		t.Fatal(err)
	}
	l, err := x509.ParseRevocationList(der)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CheckSignatureFrom(ca.Cert); err != nil {
		t.Fatal(err)
	}
	if l.Number.Int64() != 7 || !l.ThisUpdate.Equal(now) || !l.NextUpdate.Equal(now.Add(time.Hour)) ||
		len(l.RevokedCertificateEntries) != 1 || l.RevokedCertificateEntries[0].SerialNumber.Cmp(cert.SerialNumber) != 0 {
		t.Errorf("CRL %v %v %v %v", l.Number, l.ThisUpdate, l.NextUpdate, l.RevokedCertificateEntries)
	}
}
