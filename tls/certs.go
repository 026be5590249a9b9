package tls

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	gotls "crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/sluicegw/sluice/cryptodev"
)

// loadedCert is one certificate chain whose private key an engine holds.
// It is immutable once loaded.
type loadedCert struct {
	file  string
	chain [][]byte
	leaf  *x509.Certificate
	names []string // the leaf's DNS SANs
	fp    [32]byte // SHA-256 of the chain, to tell a changed file on reload
	key   *engineKey
}

// certificate returns the tls.Certificate one handshake uses: its signer
// gives up when ctx (the handshake's) ends, and keeps store, which holds
// c, from destroying c's key while a signature is in the engine.
func (c *loadedCert) certificate(ctx context.Context, store *certStore) *gotls.Certificate {
	return &gotls.Certificate{
		Certificate: c.chain,
		PrivateKey:  &handshakeSigner{k: c.key, ctx: ctx, store: store},
		Leaf:        c.leaf,
	}
}

// certStore is the certificates of one listener or origin. Its keys live
// until the store is retired by its owner and no handshake holds it any
// more: each handshake takes a reference (acquire) before its ClientHello
// is read and drops it (release) when the handshake ends, so a reload never
// destroys a key a handshake may still sign with.
type certStore struct {
	certs []*loadedCert
	names [][]string // certs[i].names, for pickCert

	mu   sync.Mutex
	refs int // the owner's reference plus one per handshake
}

func newCertStore(certs []*loadedCert) *certStore {
	s := &certStore{certs: certs, refs: 1}
	for _, c := range certs {
		s.names = append(s.names, c.names)
	}
	return s
}

// tryAcquire takes a reference unless the store is already retired and
// released.
func (s *certStore) tryAcquire() bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs == 0 {
		return false
	}
	s.refs++
	return true
}

// release drops a reference; the last one destroys the keys.
func (s *certStore) release() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.refs--
	last := s.refs == 0
	s.mu.Unlock()
	if last {
		for _, c := range s.certs {
			c.key.key.Destroy()
		}
	}
}

// pick returns the certificate for a ClientHello's server name.
func (s *certStore) pick(serverName string) *loadedCert {
	return s.certs[pickCert(s.names, serverName)]
}

// pickCert returns the index of the first name list that covers host
// (matchName), or 0: the default certificate serves ClientHellos without
// SNI or with a name no certificate covers. It does not allocate.
func pickCert(names [][]string, host string) int {
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		return 0
	}
	for i, ns := range names {
		for _, n := range ns {
			if matchName(n, host) {
				return i
			}
		}
	}
	return 0
}

// matchName reports whether a certificate's DNS name covers host, case
// insensitively. A wildcard "*.example.com" covers exactly one more label
// ("a.example.com", not "example.com" nor "a.b.example.com"), as RFC 6125
// section 6.4.3 allows and browsers do; a "*" anywhere else is literal.
func matchName(pattern, host string) bool {
	pattern = strings.TrimSuffix(pattern, ".")
	if pattern == "" || host == "" {
		return false
	}
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		if rest == "" {
			return false
		}
		dot := strings.IndexByte(host, '.')
		if dot <= 0 {
			return false
		}
		return strings.EqualFold(host[dot+1:], rest)
	}
	return strings.EqualFold(pattern, host)
}

// loadCert reads a certificate chain and its key, imports the key into
// eng and wipes the key file's bytes. The chain's leaf must match the key.
// A key file others may read is loaded, with a warning in log. On error,
// which is "cert" or "key": the file at fault.
func loadCert(c Cert, eng cryptodev.Engine, q *signQueue, log *slog.Logger) (lc *loadedCert, which string, err error) {
	ae, ok := eng.(cryptodev.AsymEngine)
	if !ok {
		return nil, "key", fmt.Errorf("tls: engine %s does not hold private keys", eng.Name())
	}
	certPEM, err := os.ReadFile(c.CertFile)
	if err != nil {
		return nil, "cert", fmt.Errorf("tls: certificate: %w", err)
	}
	var chain [][]byte
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			chain = append(chain, b.Bytes)
		}
	}
	if len(chain) == 0 {
		return nil, "cert", fmt.Errorf("tls: %s: no CERTIFICATE block", c.CertFile)
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return nil, "cert", fmt.Errorf("tls: %s: %w", c.CertFile, err)
	}
	priv, err := cryptodev.ReadPrivateKey(c.KeyFile)
	if err != nil {
		return nil, "key", err
	}
	if mode, loose := cryptodev.LooseKeyFile(c.KeyFile); loose {
		log.Warn("tls: private key file readable by others (chmod 600 it, or 640 for a group)", "file", c.KeyFile, "mode", fmt.Sprintf("%#o", mode))
	}
	if pk, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pk.Equal(publicOf(priv)) {
		return nil, "key", fmt.Errorf("tls: %s: the key does not match the certificate in %s", c.KeyFile, c.CertFile)
	}
	k, err := ae.NewPrivateKey(priv)
	if err != nil {
		return nil, "key", fmt.Errorf("tls: %s: engine %s: %w", c.KeyFile, eng.Name(), err)
	}
	// The engine has its copy; crypto/tls will only see the signer.
	wipePrivateKey(priv)
	h := sha256.New()
	for _, d := range chain {
		h.Write(d)
	}
	lc = &loadedCert{file: c.CertFile, chain: chain, leaf: leaf, names: leaf.DNSNames, key: &engineKey{key: k, pub: k.Public(), q: q}}
	h.Sum(lc.fp[:0])
	return lc, "", nil
}

func publicOf(priv crypto.PrivateKey) crypto.PublicKey {
	if s, ok := priv.(crypto.Signer); ok {
		return s.Public()
	}
	return nil
}

// wipePrivateKey zeroes what it can of a parsed key (the big.Int words of
// RSA and ECDSA keys, Ed25519's bytes); the Go runtime may hold copies.
func wipePrivateKey(priv crypto.PrivateKey) {
	switch k := priv.(type) {
	case *rsa.PrivateKey:
		k.D.SetInt64(0)
		for _, p := range k.Primes {
			p.SetInt64(0)
		}
	case *ecdsa.PrivateKey:
		if k.D != nil {
			k.D.SetInt64(0)
		}
	case ed25519.PrivateKey:
		clear(k)
	}
}

// loadCAs reads a PEM bundle of CA certificates.
func loadCAs(file string) (*x509.CertPool, []byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, nil, fmt.Errorf("tls: %s: no CA certificate", file)
	}
	sum := sha256.Sum256(data)
	return pool, sum[:], nil
}

// sameChains reports whether two stores hold the same certificates.
func sameChains(a, b *certStore) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(a.certs) != len(b.certs) {
		return false
	}
	for i := range a.certs {
		if !bytes.Equal(a.certs[i].fp[:], b.certs[i].fp[:]) {
			return false
		}
	}
	return true
}

var errNoCert = errors.New("tls: no certificate")
