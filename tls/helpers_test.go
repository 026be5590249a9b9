package tls

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	gotls "crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	_ "github.com/sluicegw/sluice/cryptodev/sched"
	_ "github.com/sluicegw/sluice/cryptodev/soft"
)

// engines every end-to-end test runs with.
var testEngines = []string{"soft", "sched"}

// keyTypes every end-to-end test runs with.
var keyTypes = []string{"ecdsa", "rsa"}

// testCA is a CA made for one test.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
	file string // PEM of cert
}

var serial int64 = 1

func genKey(t testing.TB, kind string) crypto.Signer {
	t.Helper()
	switch kind {
	case "rsa":
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		return k
	default:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
}

func writePEM(t testing.TB, file, typ string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func newCA(t testing.TB, dir, name string) *testCA {
	t.Helper()
	key := genKey(t, "ecdsa")
	serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, file: writePEM(t, filepath.Join(dir, name+"-ca.pem"), "CERTIFICATE", der)}
}

// issue makes a leaf certificate for names (server) or a client
// certificate, with a key of kind, and writes both to dir.
func (ca *testCA) issue(t testing.TB, dir, base, kind string, client bool, names ...string) Cert {
	t.Helper()
	key := genKey(t, kind)
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: base},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     names,
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Cert{
		CertFile: writePEM(t, filepath.Join(dir, base+".pem"), "CERTIFICATE", der),
		KeyFile:  writePEM(t, filepath.Join(dir, base+".key"), "PRIVATE KEY", kder),
	}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// startService starts cfg and closes it at the end of the test, checking
// that no goroutine is left behind.
func startService(t testing.TB, cfg Config) *Service {
	t.Helper()
	return startServiceOpts(t, cfg, Options{})
}

// startServiceOpts is startService with options (a logger).
func startServiceOpts(t testing.TB, cfg Config, o Options) *Service {
	t.Helper()
	before := runtime.NumGoroutine()
	s, err := Start(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	})
	return s
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for d := time.Millisecond; !cond(); d = min(2*d, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("timed out waiting for %s\n%s", what, buf)
		}
		time.Sleep(d)
	}
}

func statsOf(t testing.TB, s *Service, name string) Stats {
	t.Helper()
	for _, st := range s.Stats() {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no stats for %q", name)
	return Stats{}
}

func addrOf(t testing.TB, s *Service, name string) string {
	return statsOf(t, s, name).Listen
}

// needTool skips a test without cmd, unless CI=true.
func needTool(t testing.TB, cmd string) string {
	t.Helper()
	p, err := exec.LookPath(cmd)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found (CI=true)", cmd)
		}
		t.Skipf("%s not found", cmd)
	}
	return p
}

// goClient dials addr with a Go TLS client trusting ca.
func goClient(t testing.TB, addr, sni string, ca *testCA, mod func(*gotls.Config)) (*gotls.Conn, error) {
	t.Helper()
	conf := &gotls.Config{RootCAs: ca.pool(), ServerName: sni}
	if mod != nil {
		mod(conf)
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := gotls.DialWithDialer(d, "tcp", addr, conf)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func httpGet(t testing.TB, c net.Conn, path string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	return readResponse(t, c)
}

// readResponse reads one response with a Content-Length.
func readResponse(t testing.TB, c net.Conn) string {
	t.Helper()
	var buf []byte
	tmp := make([]byte, 4096)
	for {
		if i := strings.Index(string(buf), "\r\n\r\n"); i >= 0 {
			head := string(buf[:i])
			n := 0
			for _, l := range strings.Split(head, "\r\n") {
				if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "content-length") {
					n = atoiT(t, strings.TrimSpace(v))
				}
			}
			if len(buf) >= i+4+n {
				return string(buf[:i+4+n])
			}
		}
		k, err := c.Read(tmp)
		buf = append(buf, tmp[:k]...)
		if err != nil {
			t.Fatalf("reading response: %v (have %q)", err, buf)
		}
	}
}

func atoiT(t testing.TB, s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("bad number %q", s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}
