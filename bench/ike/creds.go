package ikebench

// The credentials of each authentication kind: a pre-shared key, or a CA
// (certgen's, ECDSA P-256) with a certificate for the responder and one
// for each road warrior (its identity as an rfc822 subjectAltName). Road
// warriors share one key pair of the kind (their certificates differ), so
// that making 2,000 of them does not cost 2,000 RSA key generations;
// neither responder can tell.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"path/filepath"

	"github.com/sluicegw/sluice/gateway/certgen"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/internal/lab"
)

// Authentication kinds with certificates.
const (
	AuthECDSA = "ecdsa"   // ECDSA P-256 certificates, both ways
	AuthRSA   = "rsa2048" // RSA-2048 certificates, both ways
)

// credentials are one kind's secrets, shared by the initiators and the
// responder.
type credentials struct {
	kind string
	psk  []byte

	ca     *certgen.CA
	gwKey  crypto.Signer
	gwCert *x509.Certificate
	rwKey  crypto.Signer
}

// newCredentials makes kind's credentials.
func newCredentials(kind string) (*credentials, error) {
	c := &credentials{kind: kind, psk: make([]byte, 32)}
	if _, err := rand.Read(c.psk); err != nil {
		return nil, err
	}
	if kind == AuthPSK {
		return c, nil
	}
	var err error
	if c.ca, err = certgen.NewCA("sluice bench ike CA"); err != nil {
		return nil, err
	}
	newKey := func() (crypto.Signer, error) {
		if kind == AuthRSA {
			return rsa.GenerateKey(rand.Reader, 2048)
		}
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if c.gwKey, err = newKey(); err != nil {
		return nil, err
	}
	if c.rwKey, err = newKey(); err != nil {
		return nil, err
	}
	if c.gwCert, err = c.ca.Certify(c.gwKey.Public(), []string{gwID}); err != nil {
		return nil, err
	}
	return c, nil
}

// initiator sets road warrior i's credentials in peer.
func (c *credentials) initiator(peer *ike.Peer, i int) error {
	if c.kind == AuthPSK {
		peer.PSK = c.psk
		return nil
	}
	cert, err := c.ca.Certify(c.rwKey.Public(), []string{warriorID(i)})
	if err != nil {
		return fmt.Errorf("road warrior %d's certificate: %w", i, err)
	}
	peer.Certificates, peer.Signer, peer.RemoteCAs = []*x509.Certificate{cert}, c.rwKey, []*x509.Certificate{c.ca.Cert}
	return nil
}

// writeSluice writes the responder's certificate, key and CA for sluice
// into dir and returns their paths.
func (c *credentials) writeSluice(dir string) (cert, key, ca string, err error) {
	cert, key, ca = filepath.Join(dir, "gw.pem"), filepath.Join(dir, "gw.key"), filepath.Join(dir, "ca.pem")
	der, err := x509.MarshalPKCS8PrivateKey(c.gwKey)
	if err != nil {
		return "", "", "", err
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{cert, "CERTIFICATE", c.gwCert.Raw}, {key, "PRIVATE KEY", der}, {ca, "CERTIFICATE", c.ca.Cert.Raw}} {
		if err := lab.WritePEM(f.path, f.typ, f.der); err != nil {
			return "", "", "", err
		}
	}
	return cert, key, ca, nil
}
