package tls

import (
	gotls "crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStaticGoClient(t *testing.T) {
	for _, eng := range testEngines {
		for _, kt := range keyTypes {
			t.Run(eng+"/"+kt, func(t *testing.T) {
				dir := t.TempDir()
				www := filepath.Join(dir, "www")
				os.Mkdir(www, 0o755)
				os.WriteFile(filepath.Join(www, "index.html"), []byte("hello\n"), 0o644)
				ca := newCA(t, dir, "root")
				cert := ca.issue(t, dir, "site", kt, false, "site.test")
				s := startService(t, Config{Listeners: []ListenerConfig{{
					Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Engine: eng,
					Backend: "static:" + www, SessionTickets: true,
				}}})
				c, err := goClient(t, addrOf(t, s, "web"), "site.test", ca, nil)
				if err != nil {
					t.Fatal(err)
				}
				resp := httpGet(t, c, "/")
				if !strings.HasPrefix(resp, "HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(resp, "\r\n\r\nhello\n") {
					t.Fatalf("response %q", resp)
				}
				resp = httpGet(t, c, "/nope")
				if !strings.HasPrefix(resp, "HTTP/1.1 404 ") {
					t.Fatalf("response %q", resp)
				}
				st := statsOf(t, s, "web")
				if st.Handshakes != 1 || st.SignOps != 1 || st.SignBatches != 1 || st.Open != 1 || st.Requests != 1 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
	}
}

func TestSessionTicketRotation(t *testing.T) {
	f := newSite(t, "soft", "ecdsa", func(lc *ListenerConfig) { lc.TicketRotation = 100 * time.Millisecond })
	ep := f.s.eps[0]
	keys := func() [][32]byte {
		ep.tickMu.Lock()
		defer ep.tickMu.Unlock()
		return slices.Clone(ep.keys)
	}
	for _, v := range []uint16{gotls.VersionTLS12, gotls.VersionTLS13} {
		cache := gotls.NewLRUClientSessionCache(4)
		dial := func() bool {
			c, err := goClient(t, f.addr, "alpha.test", f.ca, func(c *gotls.Config) { c.ClientSessionCache, c.MaxVersion = cache, v })
			if err != nil {
				t.Fatal(err)
			}
			httpGet(t, c, "/") // TLS 1.3 tickets arrive after the handshake
			c.Close()
			return c.ConnectionState().DidResume
		}
		// A ticket lives two to three periods (200-300 ms here): a dial
		// resumes with the ticket of the one before it unless a stall
		// (a loaded machine) came between them, so a few tries are
		// allowed. Each dial gets a fresh ticket under the newest key.
		dial() // its ticket
		resumed := false
		for i := 0; i < 20 && !resumed; i++ {
			resumed = dial()
		}
		if !resumed {
			t.Fatalf("%s: not resumed in 20 dials in a row", gotls.VersionName(v))
		}
		// The last ticket is under one of the keys kept now (or one
		// already retired): once all of them have left the three kept,
		// it no longer resumes.
		held := keys()
		waitFor(t, "the keys kept now to be retired", func() bool {
			ks := keys()
			return len(ks) == 3 && !slices.ContainsFunc(ks, func(k [32]byte) bool { return slices.Contains(held, k) })
		})
		if dial() {
			t.Fatalf("%s: resumed with a ticket under a retired key", gotls.VersionName(v))
		}
	}
}

func TestCloseWithOpenConnections(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "root")
	cert := ca.issue(t, dir, "site", "ecdsa", false, "site.test")
	echo := newEchoServer(t, false)
	before := runtime.NumGoroutine()
	s, err := Start(Config{Listeners: []ListenerConfig{
		{Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Backend: "static:" + t.TempDir()},
		{Name: "fwd", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Backend: "tcp://" + echo.ln.Addr().String()},
	}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for _, name := range []string{"web", "fwd"} {
		c, err := goClient(t, addrOf(t, s, name), "site.test", ca, nil)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	conns[1].Write([]byte("x"))
	io.ReadFull(conns[1], make([]byte, 1))
	stalled, err := net.Dial("tcp", addrOf(t, s, "web")) // mid-handshake
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	conns = append(conns, stalled)
	waitFor(t, "three open connections", func() bool { return statsOf(t, s, "web").Open+statsOf(t, s, "fwd").Open == 3 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("open after Close: %v", err)
		}
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	if _, err := s.Reload(Config{}); err == nil {
		t.Fatal("Reload after Close")
	}
}

func TestVersionsAndOptionalClientAuth(t *testing.T) {
	dir := t.TempDir()
	cliCA := newCA(t, dir, "clients")
	cli := cliCA.issue(t, dir, "client", "ecdsa", true)
	other := newCA(t, dir, "other").issue(t, dir, "stranger", "ecdsa", true)
	f := newSite(t, "soft", "ecdsa", func(lc *ListenerConfig) {
		lc.MinVersion, lc.MaxVersion = gotls.VersionTLS13, gotls.VersionTLS13
		lc.ClientAuth, lc.ClientCA = ClientAuthOptional, cliCA.file
	})
	if _, err := goClient(t, f.addr, "alpha.test", f.ca, func(c *gotls.Config) { c.MaxVersion = gotls.VersionTLS12 }); err == nil {
		t.Fatal("TLS 1.2 accepted by a 1.3-only listener")
	}
	waitFor(t, "a version failure", func() bool { return statsOf(t, f.s, "web").HandshakeFailures["version"] == 1 })

	load := func(c Cert) []gotls.Certificate {
		p, err := gotls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		return []gotls.Certificate{p}
	}
	for _, tc := range []struct {
		certs []gotls.Certificate
		ok    bool
	}{{nil, true}, {load(cli), true}, {load(other), false}} {
		c, err := goClient(t, f.addr, "alpha.test", f.ca, func(c *gotls.Config) {
			if tc.certs != nil {
				// Sent whatever CAs the server names (Go's client would
				// otherwise keep a certificate the server cannot verify).
				c.GetClientCertificate = func(*gotls.CertificateRequestInfo) (*gotls.Certificate, error) { return &tc.certs[0], nil }
			}
		})
		if err == nil {
			// TLS 1.3: the server's verdict on the client certificate
			// comes with the first read.
			c.SetDeadline(time.Now().Add(10 * time.Second))
			_, err = c.Write([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"))
			if err == nil {
				_, err = c.Read(make([]byte, 100))
			}
		}
		if (err == nil) != tc.ok {
			t.Fatalf("client certificates %d: %v", len(tc.certs), err)
		}
	}
	waitFor(t, "a client_cert failure", func() bool { return statsOf(t, f.s, "web").HandshakeFailures["client_cert"] == 1 })
	if got := FailureReasons(); len(got) != len(statsOf(t, f.s, "web").HandshakeFailures) {
		t.Fatal(got)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "root")
	cert := ca.issue(t, dir, "site", "ecdsa", false, "site.test")
	good := ListenerConfig{Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Backend: "static:" + dir}
	for _, tc := range []struct {
		mod  func(*ListenerConfig)
		want string
	}{
		{func(c *ListenerConfig) { c.Name = "" }, "no name"},
		{func(c *ListenerConfig) { c.Certs = nil }, "no certificate"},
		{func(c *ListenerConfig) { c.Backend = "http://x" }, "valid: static:DIR, tcp://HOST:PORT"},
		{func(c *ListenerConfig) { c.Backend = "static:" + dir + "/nope" }, "not a directory"},
		{func(c *ListenerConfig) { c.ClientAuth = ClientAuthRequire }, "needs a client_ca"},
		{func(c *ListenerConfig) { c.MinVersion = gotls.VersionTLS11 }, "valid: TLS 1.2, TLS 1.3"},
		{func(c *ListenerConfig) { c.Certs = []Cert{{CertFile: cert.CertFile, KeyFile: cert.CertFile}} }, "no private key"},
		{func(c *ListenerConfig) { c.Engine = "nosuch" }, "unknown engine"},
		{func(c *ListenerConfig) { c.ProxyProtocol = true }, "proxy_protocol needs a tcp:// backend"},
	} {
		lc := good
		tc.mod(&lc)
		s, err := Start(Config{Listeners: []ListenerConfig{lc}}, Options{})
		if err == nil {
			s.Close()
			t.Errorf("%+v: started", lc)
			continue
		}
		if !strings.HasPrefix(err.Error(), "tls: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q, want %q", err, tc.want)
		}
	}
	other := ca.issue(t, dir, "other", "ecdsa", false, "other.test")
	lc := good
	lc.Certs = []Cert{{CertFile: cert.CertFile, KeyFile: other.KeyFile}}
	if _, err := Start(Config{Listeners: []ListenerConfig{lc}}, Options{}); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("mismatched key: %v", err)
	}
	if _, err := Start(Config{Listeners: []ListenerConfig{good, good}}, Options{}); err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Errorf("duplicate names: %v", err)
	}
}
