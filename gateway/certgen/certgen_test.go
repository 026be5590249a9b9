package certgen

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
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
