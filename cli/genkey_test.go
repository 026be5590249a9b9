package cli_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/cli"
	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
)

// TestGenkeyPSK: a base64 key of the length asked for, new each time, in
// the 0s form config reads; lengths config would refuse are usage errors.
func TestGenkeyPSK(t *testing.T) {
	seen := map[string]bool{}
	for range 3 {
		code, out, stderr := run("genkey", "psk")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		out = strings.TrimSpace(out)
		b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(out, "0s"))
		if !strings.HasPrefix(out, "0s") || err != nil || len(b) != 32 || seen[out] {
			t.Fatalf("psk %q: %v, %d bytes, seen before %v", out, err, len(b), seen[out])
		}
		seen[out] = true
	}
	for _, n := range []string{"15", "0", "-1", "1025", "x"} {
		if code, _, _ := run("genkey", "psk", "--bytes", n); code != cli.ExitUsage {
			t.Errorf("--bytes %s: exit %d, want %d", n, code, cli.ExitUsage)
		}
	}
}

// TestGenkeyESP: for every suite, the lines printed make an [[sa]] table
// that config accepts.
func TestGenkeyESP(t *testing.T) {
	for _, alg := range cryptodev.Algs() {
		code, out, stderr := run("genkey", "esp", "--esp", alg.String())
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", alg, code, stderr)
		}
		doc := fmt.Sprintf("[[sa]]\nspi = 0x1001\nesp = %q\n%s", alg, out)
		sas, err := config.ParseSAs("gen.toml", []byte(doc))
		if err != nil {
			t.Fatalf("%v: config refuses what genkey printed: %v\n%s", alg, err, doc)
		}
		if len(sas[0].EncKey) != alg.EncKeyLen() || len(sas[0].AuthKey) != alg.Info().AuthKeyLen {
			t.Errorf("%v: keys of %d and %d bytes", alg, len(sas[0].EncKey), len(sas[0].AuthKey))
		}
	}
	if code, _, _ := run("genkey", "esp", "--esp", "des"); code != cli.ExitUsage {
		t.Errorf("--esp des: exit %d, want %d", code, cli.ExitUsage)
	}
}

// TestGenkeyCert: the key and self-signed certificate load as a TLS key
// pair with every name as a SAN; the CSR's signature verifies; the key is
// 0600; existing files are kept unless --force.
func TestGenkeyCert(t *testing.T) {
	dir := t.TempDir()
	for _, kind := range []string{"ecdsap256", "rsa2048", "ed25519"} {
		base := filepath.Join(dir, kind)
		code, _, stderr := run("genkey", "cert", "--type", kind, "--name", "gw.example.test", "--name", "192.0.2.1", "--name", "ops@example.test", base)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", kind, code, stderr)
		}
		pair, err := tls.LoadX509KeyPair(base+".pem", base+".key")
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		c, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if c.Subject.CommonName != "gw.example.test" || !slices.Equal(c.DNSNames, []string{"gw.example.test"}) ||
			len(c.IPAddresses) != 1 || !slices.Equal(c.EmailAddresses, []string{"ops@example.test"}) {
			t.Errorf("%s: subject %v, SANs %v %v %v", kind, c.Subject, c.DNSNames, c.IPAddresses, c.EmailAddresses)
		}
		if err := c.VerifyHostname("gw.example.test"); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
		if fi, err := os.Stat(base + ".key"); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: key file %v %v", kind, fi.Mode(), err)
		}
		if _, err := cryptodev.ReadPrivateKey(base + ".key"); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
	}

	base := filepath.Join(dir, "ecdsap256")
	before, _ := os.ReadFile(base + ".key")
	if code, _, stderr := run("genkey", "cert", "--name", "x", base); code != cli.ExitUsage || !strings.Contains(stderr, "exists") {
		t.Errorf("over an existing key: exit %d: %s", code, stderr)
	}
	if after, _ := os.ReadFile(base + ".key"); string(after) != string(before) {
		t.Error("the existing key was replaced without --force")
	}
	if code, _, stderr := run("genkey", "cert", "--force", "--name", "x", base); code != 0 {
		t.Errorf("--force: exit %d: %s", code, stderr)
	}

	req := filepath.Join(dir, "req")
	if code, _, stderr := run("genkey", "cert", "--csr", "--name", "vpn.example.test", req); code != 0 {
		t.Fatalf("--csr: exit %d: %s", code, stderr)
	}
	data, _ := os.ReadFile(req + ".csr")
	blk, _ := pem.Decode(data)
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		t.Fatalf("csr file: %q", data)
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil || csr.CheckSignature() != nil || csr.Subject.CommonName != "vpn.example.test" {
		t.Errorf("csr %v: %+v", err, csr)
	}

	for _, args := range [][]string{
		{"genkey", "cert", filepath.Join(dir, "noname")},
		{"genkey", "cert", "--name", "x"},
		{"genkey", "cert", "--name", "x", "--type", "x25519", filepath.Join(dir, "k")},
		{"genkey", "cert", "--name", "x", "--days", "0", filepath.Join(dir, "k")},
	} {
		if code, _, _ := run(args...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, cli.ExitUsage)
		}
	}
}
