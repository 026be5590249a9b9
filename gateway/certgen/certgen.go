// Package certgen makes throwaway certificates: a CA and the ECDSA P-256
// server and client certificates it issues, as PEM, for `sluice demo tls`
// and for tests of TLS gateways, and certificates for keys the caller
// holds (Certify), for tests of IKE peers, and the CA's revocation lists
// (CRL). Nothing it makes is fit for production: the keys are never
// protected and the certificates live a day.
package certgen

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Lifetime is how long the certificates are valid, from an hour before
// they are made (for clocks slightly behind).
const Lifetime = 24 * time.Hour

// CA is a certificate authority with its key in memory.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte // the certificate, PEM-encoded: the trust anchor to give clients
}

// NewCA makes a self-signed CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certgen: %w", err)
	}
	tmpl := template(name)
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("certgen: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certgen: %w", err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Pool returns a pool holding only the CA, for a client that verifies
// what it issued.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue makes an ECDSA P-256 key and a certificate for it, signed by the
// CA, and returns both PEM-encoded (the key as PKCS #8). names are DNS
// names, IP addresses or e-mail addresses (those with an @); the first is
// the subject's common name. client makes a client certificate, otherwise
// a server certificate.
func (ca *CA) Issue(client bool, names ...string) (certPEM, keyPEM []byte, err error) {
	tmpl, err := leafTemplate(names)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("certgen: %w", err)
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("certgen: %w", err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("certgen: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), nil
}

// Certify makes a certificate, signed by the CA, for pub, the public half
// of a key the caller holds (ECDSA, RSA or Ed25519), as IKE peers use
// them: for signatures, with no extended key usage. names are as for
// Issue; extra are further extensions (a test's padding, say).
func (ca *CA) Certify(pub crypto.PublicKey, names []string, extra ...pkix.Extension) (*x509.Certificate, error) {
	return ca.CertifySubject(pub, nil, names, extra...)
}

// CertifySubject is Certify with the subject given as the DER of an
// X.501 Name, encoded as the caller chose (a test of distinguished-name
// identities gives its values as UTF8Strings, as openssl does); nil is
// the first name as common name, as Certify makes it.
func (ca *CA) CertifySubject(pub crypto.PublicKey, subject []byte, names []string, extra ...pkix.Extension) (*x509.Certificate, error) {
	tmpl, err := leafTemplate(names)
	if err != nil {
		return nil, err
	}
	tmpl.RawSubject = subject
	tmpl.ExtraExtensions = extra
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("certgen: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certgen: %w", err)
	}
	return cert, nil
}

// CRL makes a certificate revocation list of the CA (RFC 5280 section 5)
// with CRL number number, valid from thisUpdate to nextUpdate (zero: no
// nextUpdate), listing revoked as revoked an hour before thisUpdate. It
// returns the DER.
func (ca *CA) CRL(number int64, thisUpdate, nextUpdate time.Time, revoked ...*x509.Certificate) ([]byte, error) {
	tmpl := &x509.RevocationList{Number: big.NewInt(number), ThisUpdate: thisUpdate, NextUpdate: nextUpdate}
	for _, c := range revoked {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: c.SerialNumber, RevocationTime: thisUpdate.Add(-time.Hour)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca.Cert, ca.key)
	if err != nil {
		return nil, fmt.Errorf("certgen: %w", err)
	}
	return der, nil
}

// leafTemplate is the template of an end-entity certificate for names,
// for signatures; the first name is the common name.
func leafTemplate(names []string) (*x509.Certificate, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("certgen: a certificate needs a name")
	}
	tmpl := template(names[0])
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if strings.Contains(n, "@") {
			tmpl.EmailAddresses = append(tmpl.EmailAddresses, n)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	return tmpl, nil
}

// IssueFiles is Issue writing DIR/BASE.pem and DIR/BASE.key (mode 0600),
// replacing files of those names. It returns their paths.
func (ca *CA) IssueFiles(dir, base string, client bool, names ...string) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := ca.Issue(client, names...)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, base+".pem"), filepath.Join(dir, base+".key")
	if err := writeFile(certFile, certPEM); err != nil {
		return "", "", err
	}
	if err := writeFile(keyFile, keyPEM); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// writeFile replaces path with data through a rename, so that a reader
// never sees half a file.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("certgen: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("certgen: %w", err)
	}
	return nil
}

func template(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"sluice throwaway"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(Lifetime),
	}
}
