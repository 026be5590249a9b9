package cryptodev_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
)

// TestReadPrivateKey reads each PEM form of a private key, skipping other
// blocks before it, and refuses files without one.
func TestReadPrivateKey(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 1024) // parsing only; never used to sign
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, blocks ...*pem.Block) string {
		var b []byte
		for _, bl := range blocks {
			b = append(b, pem.EncodeToMemory(bl)...)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	other := &pem.Block{Type: "CERTIFICATE", Bytes: []byte("not parsed")}
	for name, tc := range map[string]struct {
		file string
		want interface{ Equal(crypto.PrivateKey) bool }
	}{
		"pkcs8": {write("p8.pem", other, &pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), ec},
		"sec1":  {write("sec1.pem", &pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}), ec},
		"pkcs1": {write("p1.pem", &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)}), rk},
	} {
		k, err := cryptodev.ReadPrivateKey(tc.file)
		if err != nil || !tc.want.Equal(k) {
			t.Errorf("%s: %v, %v", name, k, err)
		}
	}
	for name, file := range map[string]string{
		"no key":  write("cert.pem", other),
		"garbage": write("bad.pem", &pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}),
		"missing": filepath.Join(dir, "nope.pem"),
	} {
		if _, err := cryptodev.ReadPrivateKey(file); err == nil || !strings.HasPrefix(err.Error(), "cryptodev: ") {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

// TestLooseKeyFile: a key file with any permission for others is loose;
// owner and group bits are not.
func TestLooseKeyFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "k.pem")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for mode, want := range map[os.FileMode]bool{0o600: false, 0o400: false, 0o640: false, 0o644: true, 0o666: true, 0o602: true} {
		os.Chmod(file, mode)
		if got, loose := cryptodev.LooseKeyFile(file); got != mode || loose != want {
			t.Errorf("mode %#o: got %#o, %v; want loose %v", mode, got, loose, want)
		}
	}
	if _, loose := cryptodev.LooseKeyFile(file + ".missing"); loose {
		t.Error("a missing file is loose")
	}
}
