package ha

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
)

// Wire versions (wire.go): a connection's TLS handshake negotiates ALPN
// "sluice-ha/2"; a peer that offers or takes no protocol (a member of an
// earlier version) speaks version 1, and gets and sends heartbeats
// without IV blocks (iv.go). Nothing else differs.
const (
	wireV1 = 1
	wireV2 = 2
)

// alpnV2 is the ALPN name of wire version 2.
const alpnV2 = "sluice-ha/2"

// TLSConfig loads this member's certificate and key and the CA both
// members' certificates chain to, and returns a TLS 1.3 configuration for
// both ends of the sync channel: as a server it requires a client
// certificate, as a client it presents one, and on either end the peer's
// certificate must chain to the CA and carry peerName as a DNS name or as
// its common name. The certificates' extended key usages are not checked:
// each member is a client on one connection and a server on another, so a
// certificate issued for either use serves.
func TLSConfig(certFile, keyFile, caFile, peerName string) (*tls.Config, error) {
	if peerName == "" {
		return nil, errors.New("ha: the peer's name is required")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("ha: %s, %s: %w", certFile, keyFile, err)
	}
	pemCA, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("ha: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemCA) {
		return nil, fmt.Errorf("ha: %s: no PEM certificate", caFile)
	}
	verify := func(cs tls.ConnectionState) error {
		return verifyPeer(cs.PeerCertificates, roots, peerName)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ServerName:   peerName,
		// The chain and the name are checked in VerifyConnection, on
		// both ends, with any key usage accepted; the standard checks
		// would insist on serverAuth from a server and clientAuth from a
		// client.
		InsecureSkipVerify: true,
		ClientAuth:         tls.RequireAnyClientCert,
		VerifyConnection:   verify,
		// Every connection is a full handshake, verified afresh.
		SessionTicketsDisabled: true,
		// The wire version (wire.go); a member of an earlier version
		// offers and takes none, and speaks version 1.
		NextProtos: []string{alpnV2},
	}, nil
}

// verifyPeer checks that chain[0] chains to roots (through the other
// certificates of chain) and names peerName.
func verifyPeer(chain []*x509.Certificate, roots *x509.CertPool, peerName string) error {
	if len(chain) == 0 {
		return errors.New("ha: the peer sent no certificate")
	}
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return fmt.Errorf("ha: peer certificate: %w", err)
	}
	if leaf.Subject.CommonName != peerName && !slices.Contains(leaf.DNSNames, peerName) {
		return fmt.Errorf("ha: peer certificate names %q %q, not %q", leaf.Subject.CommonName, leaf.DNSNames, peerName)
	}
	return nil
}
