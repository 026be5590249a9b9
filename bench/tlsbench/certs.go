package tlsbench

// The material both systems serve: a throwaway CA, one leaf certificate
// and key per key type, and one static file per response size, written
// into the run's directory.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The key types a bench offers.
const (
	ECDSAP256 = "ecdsap256"
	RSA2048   = "rsa2048"
	RSA4096   = "rsa4096"
)

// Keys lists every key type.
var Keys = []string{ECDSAP256, RSA2048, RSA4096}

// ServerName is the name every leaf certificate covers (with 127.0.0.1)
// and every client sends.
const ServerName = "localhost"

// newKey makes a private key of a type.
func newKey(kind string) (crypto.Signer, error) {
	switch kind {
	case ECDSAP256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case RSA2048:
		return rsa.GenerateKey(rand.Reader, 2048)
	case RSA4096:
		return rsa.GenerateKey(rand.Reader, 4096)
	}
	return nil, fmt.Errorf("tlsbench: unknown key type %q (want %s)", kind, strings.Join(Keys, ", "))
}

// CertFiles are one key type's PEM files.
type CertFiles struct {
	Cert string // the leaf certificate
	Key  string // its private key, PKCS #8
}

// Material is what a run serves and trusts.
type Material struct {
	Dir   string               // everything below is in it
	Roots *x509.CertPool       // the CA, for the clients
	Certs map[string]CertFiles // by key type
	WWW   string               // the static files' directory
	Files map[int]string       // URL path by body size
}

// NewMaterial writes a CA, a certificate and key for each of keys and a
// file of random bytes for each of sizes into dir, which must exist.
// Directories are 0755 and files 0644 (the key files 0600), so that
// nginx's workers, which drop root, can read the static files.
func NewMaterial(dir string, keys []string, sizes []int) (*Material, error) {
	m := &Material{Dir: dir, Roots: x509.NewCertPool(), Certs: map[string]CertFiles{}, Files: map[int]string{},
		WWW: filepath.Join(dir, "www")}
	caKey, err := newKey(ECDSAP256)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice bench tls CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("tlsbench: CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	m.Roots.AddCert(ca)
	if err := writePEM(filepath.Join(dir, "ca.pem"), "CERTIFICATE", caDER, 0o644); err != nil {
		return nil, err
	}
	for i, kind := range keys {
		key, err := newKey(kind)
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)),
			Subject:      pkix.Name{CommonName: ServerName},
			DNSNames:     []string{ServerName},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(7 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		if _, ok := key.(*rsa.PrivateKey); ok {
			tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		if err != nil {
			return nil, fmt.Errorf("tlsbench: %s certificate: %w", kind, err)
		}
		p8, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, err
		}
		cf := CertFiles{Cert: filepath.Join(dir, kind+".pem"), Key: filepath.Join(dir, kind+".key")}
		if err := writePEM(cf.Cert, "CERTIFICATE", der, 0o644); err != nil {
			return nil, err
		}
		if err := writePEM(cf.Key, "PRIVATE KEY", p8, 0o600); err != nil {
			return nil, err
		}
		m.Certs[kind] = cf
	}
	if err := os.Mkdir(m.WWW, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(m.WWW, 0o755); err != nil { // whatever the umask
		return nil, err
	}
	for _, n := range sizes {
		name := SizeLabel(n) + ".bin"
		b := make([]byte, n)
		rand.Read(b)
		f := filepath.Join(m.WWW, name)
		if err := os.WriteFile(f, b, 0o644); err != nil {
			return nil, err
		}
		if err := os.Chmod(f, 0o644); err != nil {
			return nil, err
		}
		m.Files[n] = "/" + name
	}
	return m, nil
}

func writePEM(file, typ string, der []byte, mode os.FileMode) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(file, b, mode); err != nil {
		return err
	}
	return os.Chmod(file, mode)
}

// ParseSize reads a response size: bytes, or a number with k or m (1024
// and 1048576 bytes): "1k", "64k", "1m", "512".
func ParseSize(s string) (int, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mul := 1
	switch {
	case strings.HasSuffix(t, "k"):
		mul, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "m"):
		mul, t = 1<<20, t[:len(t)-1]
	}
	n, err := strconv.Atoi(t)
	if err != nil || n <= 0 || n > MaxSize/mul {
		return 0, fmt.Errorf("--sizes %q: want 1 to %s bytes, as a number or with k or m (1k, 64k, 1m)", s, SizeLabel(MaxSize))
	}
	return n * mul, nil
}

// MaxSize is the largest response a bench serves.
const MaxSize = 64 << 20

// SizeLabel writes n as ParseSize reads it, shortest first: 1k, 1m, 1000.
func SizeLabel(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "m"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "k"
	}
	return strconv.Itoa(n)
}

// Versions lists the TLS versions a bench offers.
var Versions = []string{"1.2", "1.3"}

// ParseVersion returns crypto/tls's constant for "1.2" or "1.3".
func ParseVersion(s string) (uint16, error) {
	switch strings.TrimSpace(s) {
	case "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("--versions %q: want 1.2 or 1.3", s)
}
