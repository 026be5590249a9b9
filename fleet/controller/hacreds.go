package controller

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Validity of the HA channel's certificates. A member certificate is
// issued again when less than renewBefore of it is left.
const (
	caValidity     = 10 * 365 * 24 * time.Hour
	memberValidity = 365 * 24 * time.Hour
	renewBefore    = 30 * 24 * time.Hour
)

// Keys of the HA Secrets' data.
const (
	keyCert = "tls.crt"
	keyKey  = "tls.key"
	keyCA   = "ca.crt"
)

// newCA returns a self-signed ECDSA P-256 CA for a pool's sync channels,
// certificate and key in PEM.
func newCA(pool string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "sluice " + pool + " HA CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = pemKey(key)
	return pemCert(der), keyPEM, err
}

// issueMember returns a certificate and key for gateway name, signed by
// the CA: ECDSA P-256, the name as common name and as DNS name (ha.TLSConfig
// checks the peer's certificate chains to the CA and names its peer_name
// in either), usable as client and server.
func issueMember(caCertPEM, caKeyPEM []byte, name string, now time.Time) (certPEM, keyPEM []byte, err error) {
	caCert, caKey, err := parseCA(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(memberValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = pemKey(key)
	return pemCert(der), keyPEM, err
}

// memberCertCurrent reports whether a member Secret's data holds a
// certificate for name, from the CA caCertPEM, with more than renewBefore
// left at now.
func memberCertCurrent(data map[string][]byte, caCertPEM []byte, name string, now time.Time) bool {
	if !bytes.Equal(data[keyCA], caCertPEM) || len(data[keyKey]) == 0 {
		return false
	}
	b, _ := pem.Decode(data[keyCert])
	if b == nil {
		return false
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return false
	}
	return c.Subject.CommonName == name && now.Add(renewBefore).Before(c.NotAfter)
}

func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("controller: HA CA secret: no PEM certificate or key")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("controller: HA CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("controller: HA CA key: %w", err)
	}
	return cert, key, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
