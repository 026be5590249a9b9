package tls

import (
	"bytes"
	gotls "crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoServer accepts TCP connections; with proxy set each must start with
// a PROXY v2 header, which it records; then it echoes.
type echoServer struct {
	ln      net.Listener
	mu      sync.Mutex
	headers []ProxyHeader
	wg      sync.WaitGroup
}

func newEchoServer(t *testing.T, proxy bool) *echoServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				var rest []byte
				if proxy {
					buf := make([]byte, 0, 256)
					for {
						tmp := make([]byte, 64)
						n, err := c.Read(tmp)
						buf = append(buf, tmp[:n]...)
						h, k, perr := ParseProxyV2(buf)
						if perr == nil {
							e.mu.Lock()
							e.headers = append(e.headers, h)
							e.mu.Unlock()
							rest = buf[k:]
							break
						}
						if perr != ErrProxyIncomplete || err != nil {
							return
						}
					}
				}
				c.Write(rest)
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); e.wg.Wait() })
	return e
}

func TestTCPBackendProxyV2(t *testing.T) {
	for _, eng := range testEngines {
		t.Run(eng, func(t *testing.T) {
			dir := t.TempDir()
			ca := newCA(t, dir, "root")
			cert := ca.issue(t, dir, "site", "ecdsa", false, "site.test")
			echo := newEchoServer(t, true)
			s := startService(t, Config{Listeners: []ListenerConfig{{
				Name: "fwd", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Engine: eng,
				Backend: "tcp://" + echo.ln.Addr().String(), ProxyProtocol: true,
			}}})
			c, err := goClient(t, addrOf(t, s, "fwd"), "site.test", ca, nil)
			if err != nil {
				t.Fatal(err)
			}
			msg := bytes.Repeat([]byte("ping "), 20000)
			go c.Write(msg)
			got := make([]byte, len(msg))
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("echo: %v", err)
			}
			// Half-close: the client's close_notify ends the backend's
			// input; the backend's FIN comes back as EOF.
			if err := c.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if n, err := c.Read(got); err != io.EOF {
				t.Fatalf("after CloseWrite: %d, %v", n, err)
			}
			echo.mu.Lock()
			h := echo.headers
			echo.mu.Unlock()
			if len(h) != 1 || h[0].Local || h[0].Src != netip.MustParseAddrPort(c.LocalAddr().String()) ||
				h[0].Dst != netip.MustParseAddrPort(c.RemoteAddr().String()) {
				t.Fatalf("PROXY headers %+v (client %v)", h, c.LocalAddr())
			}
			waitFor(t, "the connection to end", func() bool { return statsOf(t, s, "fwd").Open == 0 })
			st := statsOf(t, s, "fwd")
			if st.BytesIn != uint64(len(msg)) || st.BytesOut != uint64(len(msg)) {
				t.Fatalf("bytes %d/%d, want %d", st.BytesIn, st.BytesOut, len(msg))
			}
		})
	}
}

// TestTCPBackendDown: a backend that refuses the connection, of a
// listener and of an origin, is a backend failure (not a handshake
// failure), logged at WARN with the listener or origin and the backend's
// address, as nginx logs "connect() failed (111) while connecting to
// upstream"; a second failure within the second is counted, not logged.
func TestTCPBackendDown(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "root")
	cert := ca.issue(t, dir, "site", "ecdsa", false, "site.test")
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	var buf syncBuffer
	s := startServiceOpts(t, Config{
		Listeners: []ListenerConfig{{Name: "fwd", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Backend: "tcp://" + dead}},
		Origins:   []OriginConfig{{Name: "api", Listen: "127.0.0.1:0", Backend: "tls://" + dead, CA: ca.file}},
	}, Options{Log: slog.New(slog.NewTextHandler(&buf, nil))})
	for i := range 2 {
		c, err := goClient(t, addrOf(t, s, "fwd"), "site.test", ca, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("read from a dead backend")
		}
		c.Close()
		waitFor(t, "a backend failure", func() bool { return statsOf(t, s, "fwd").BackendFailures == uint64(i+1) })
	}
	st := statsOf(t, s, "fwd")
	if st.Handshakes != 2 || st.HandshakeFailures["backend"] != 0 {
		t.Errorf("counted as a handshake failure: %+v", st)
	}
	c, err := net.Dial("tcp", addrOf(t, s, "api"))
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a dead backend")
	}
	c.Close()
	waitFor(t, "the origin's backend failure", func() bool { return statsOf(t, s, "api").BackendFailures == 1 })
	if st := statsOf(t, s, "api"); st.HandshakeFailures[failProtocol] != 0 || st.HandshakeFailures[failClosed] != 0 {
		t.Errorf("origin: counted as a handshake failure: %+v", st)
	}
	out := buf.String()
	for _, want := range []string{
		`level=WARN msg="tls: backend connect failed" listener=fwd backend=` + dead + " client=127.0.0.1:",
		`level=WARN msg="tls: backend connect failed" origin=api backend=` + dead + " client=127.0.0.1:",
		"connection refused",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "listener=fwd backend="); n != 1 {
		t.Errorf("%d lines for two failures within a second, want 1:\n%s", n, out)
	}
}

// syncBuffer is a bytes.Buffer that a logger may write to from several
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestIdleTimeout(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "root")
	cert := ca.issue(t, dir, "site", "ecdsa", false, "site.test")
	echo := newEchoServer(t, false)
	www := t.TempDir()
	s := startService(t, Config{Listeners: []ListenerConfig{
		{Name: "fwd", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Backend: "tcp://" + echo.ln.Addr().String(), IdleTimeout: time.Second},
		{Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Backend: "static:" + www, IdleTimeout: time.Second},
	}})
	for _, name := range []string{"fwd", "web"} {
		c, err := goClient(t, addrOf(t, s, name), "site.test", ca, nil)
		if err != nil {
			t.Fatal(err)
		}
		if name == "fwd" {
			// Traffic keeps it open past the timeout (1.5 s of it, a
			// byte every 100 ms: a stall of most of a second is no failure).
			for range 15 {
				c.Write([]byte("x"))
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(100 * time.Millisecond) // the traffic pattern under test, not a wait
			}
		}
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("%s: read on an idle connection", name)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%s: closed after %v", name, d)
		}
		waitFor(t, "an idle close", func() bool { return statsOf(t, s, name).IdleClosed == 1 })
	}
}

func TestOrigin(t *testing.T) {
	for _, eng := range testEngines {
		t.Run(eng, func(t *testing.T) {
			dir := t.TempDir()
			ca := newCA(t, dir, "root")
			other := newCA(t, dir, "other")
			srvCert := ca.issue(t, dir, "backend", "rsa", false, "backend.test")
			cliCA := newCA(t, dir, "clients")
			cli := cliCA.issue(t, dir, "client", "ecdsa", true)
			pair, err := gotls.LoadX509KeyPair(srvCert.CertFile, srvCert.KeyFile)
			if err != nil {
				t.Fatal(err)
			}
			// The backend: Go TLS, requiring a client certificate, echoing.
			ln, err := gotls.Listen("tcp", "127.0.0.1:0", &gotls.Config{
				Certificates: []gotls.Certificate{pair}, ClientAuth: gotls.RequireAndVerifyClientCert, ClientCAs: cliCA.pool(),
			})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					wg.Add(1)
					go func() { defer wg.Done(); defer c.Close(); io.Copy(c, c) }()
				}
			}()
			t.Cleanup(func() { ln.Close(); wg.Wait() })
			oc := OriginConfig{
				Name: "api", Listen: "127.0.0.1:0", Backend: "tls://" + ln.Addr().String(),
				ServerName: "backend.test", CA: ca.file, Cert: &cli, Engine: eng,
			}
			bad := oc
			bad.Name, bad.CA = "api-wrong-ca", other.file
			s := startService(t, Config{Origins: []OriginConfig{oc, bad}})

			c, err := net.Dial("tcp", addrOf(t, s, "api"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write([]byte("hello origin"))
			got := make([]byte, 12)
			if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello origin" {
				t.Fatalf("echo %q %v", got, err)
			}
			st := statsOf(t, s, "api")
			if st.Kind != "originate" || st.Handshakes != 1 || st.SignOps != 1 {
				t.Fatalf("stats %+v", st)
			}

			c2, err := net.Dial("tcp", addrOf(t, s, "api-wrong-ca"))
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			c2.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c2.Read(got); err == nil {
				t.Fatal("origin to a backend it cannot verify carried data")
			}
			waitFor(t, "a server_cert failure", func() bool {
				return statsOf(t, s, "api-wrong-ca").HandshakeFailures["server_cert"] == 1
			})
		})
	}
}

func TestReloadSwapsCertificate(t *testing.T) {
	for _, eng := range testEngines {
		t.Run(eng, func(t *testing.T) {
			dir := t.TempDir()
			www := t.TempDir()
			os.WriteFile(filepath.Join(www, "index.html"), []byte("hi\n"), 0o644)
			ca := newCA(t, dir, "root")
			first := ca.issue(t, dir, "first", "ecdsa", false, "site.test")
			lc := ListenerConfig{Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{first}, Engine: eng, Backend: "static:" + www}
			s := startService(t, Config{Listeners: []ListenerConfig{lc}})
			addr := addrOf(t, s, "web")
			lc.Listen = addr // the same socket
			oldStore := s.eps[0].state.Load().store

			c1, err := goClient(t, addr, "site.test", ca, nil)
			if err != nil {
				t.Fatal(err)
			}
			if cn := c1.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "first" {
				t.Fatal(cn)
			}
			httpGet(t, c1, "/")

			// The same files, new contents.
			second := ca.issue(t, t.TempDir(), "second", "rsa", false, "site.test")
			for _, p := range [][2]string{{second.CertFile, first.CertFile}, {second.KeyFile, first.KeyFile}} {
				b, _ := os.ReadFile(p[0])
				os.WriteFile(p[1], b, 0o600)
			}
			lc.MaxConns = 50
			lines, err := s.Reload(Config{Listeners: []ListenerConfig{lc, {Name: "web2", Listen: "127.0.0.1:0", Certs: []Cert{first}, Backend: "static:" + www}}})
			if err != nil {
				t.Fatal(err)
			}
			joined := strings.Join(lines, "\n")
			for _, want := range []string{`listener "web": certificates changed`, `MaxConns 10000 -> 50`, `listener "web2" on 127.0.0.1:`} {
				if !strings.Contains(joined, want) {
					t.Errorf("reload lines %q lack %q", lines, want)
				}
			}
			waitFor(t, "the old key's destruction", func() bool { return oldStore.certs[0].key.key.Destroyed() })

			c2, err := goClient(t, addr, "site.test", ca, nil)
			if err != nil {
				t.Fatal(err)
			}
			if cn := c2.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "second" {
				t.Fatalf("after reload: %s", cn)
			}
			// The connection opened before the reload still works.
			if r := httpGet(t, c1, "/"); !strings.HasSuffix(r, "hi\n") {
				t.Fatal(r)
			}

			// The same configuration again changes nothing.
			web2 := ListenerConfig{Name: "web2", Listen: addrOf(t, s, "web2"), Certs: []Cert{first}, Backend: "static:" + www}
			if lines, err := s.Reload(Config{Listeners: []ListenerConfig{lc, web2}}); err != nil || len(lines) != 0 {
				t.Fatalf("an unchanged reload: %q %v", lines, err)
			}

			// A reload that fails changes nothing.
			bad := lc
			bad.Certs = []Cert{{CertFile: filepath.Join(dir, "missing.pem"), KeyFile: first.KeyFile}}
			if _, err := s.Reload(Config{Listeners: []ListenerConfig{bad}}); err == nil {
				t.Fatal("reload with a missing certificate succeeded")
			}
			if len(s.Stats()) != 2 {
				t.Fatalf("a failed reload changed the listeners: %+v", s.Stats())
			}
			c3, err := goClient(t, addr, "site.test", ca, nil)
			if err != nil || c3.ConnectionState().PeerCertificates[0].Subject.CommonName != "second" {
				t.Fatalf("after a failed reload: %v", err)
			}

			// Removing a listener stops its accepting; its open
			// connection may finish.
			lines, err = s.Reload(Config{Listeners: []ListenerConfig{{Name: "web2", Listen: addrOf(t, s, "web2"), Certs: []Cert{first}, Backend: "static:" + www}}})
			if err != nil || !strings.Contains(strings.Join(lines, "\n"), `listener "web" on `+addr+` removed`) {
				t.Fatalf("%q %v", lines, err)
			}
			if r := httpGet(t, c1, "/"); !strings.HasSuffix(r, "hi\n") {
				t.Fatal(r)
			}
			if _, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
				t.Fatal("a removed listener still accepts")
			}
		})
	}
}

// TestReloadUnderHandshakes reloads new keys while handshakes run: no
// handshake may sign with a key a reload has destroyed.
func TestReloadUnderHandshakes(t *testing.T) {
	for _, eng := range testEngines {
		t.Run(eng, func(t *testing.T) {
			dir := t.TempDir()
			ca := newCA(t, dir, "root")
			var certs []Cert
			for i := range 3 {
				certs = append(certs, ca.issue(t, dir, "c"+string(rune('a'+i)), "ecdsa", false, "site.test"))
			}
			lc := ListenerConfig{Name: "web", Listen: "127.0.0.1:0", Certs: certs[:1], Engine: eng, Backend: "static:" + dir}
			s := startService(t, Config{Listeners: []ListenerConfig{lc}})
			lc.Listen = addrOf(t, s, "web")
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			var errs []error
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					conf := &gotls.Config{RootCAs: ca.pool(), ServerName: "site.test"}
					for {
						select {
						case <-stop:
							return
						default:
						}
						c, err := gotls.Dial("tcp", lc.Listen, conf)
						if err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
							return
						}
						c.Close()
					}
				}()
			}
			// Reload until a good many handshakes ran across reloads.
			for i := 0; i < 20 || statsOf(t, s, "web").Handshakes < 60; i++ {
				if i > 100000 {
					t.Fatal("handshakes do not progress")
				}
				lc.Certs = certs[i%3 : i%3+1]
				if _, err := s.Reload(Config{Listeners: []ListenerConfig{lc}}); err != nil {
					t.Fatal(err)
				}
			}
			close(stop)
			wg.Wait()
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if st := statsOf(t, s, "web"); st.HandshakeFailures["sign"] != 0 || st.Handshakes == 0 {
				t.Fatalf("%+v", st)
			}
		})
	}
}

// TestKeyFileModeWarning: a private key file that others may read loads,
// with a warning naming it in the log (sshd refuses such a key; issue 16).
func TestKeyFileModeWarning(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "root")
	cert := ca.issue(t, dir, "site", "ecdsa", false, "site.test")
	www := filepath.Join(dir, "www")
	os.Mkdir(www, 0o755)
	for _, tt := range []struct {
		mode os.FileMode
		warn bool
	}{{0o600, false}, {0o640, false}, {0o644, true}, {0o666, true}} {
		if err := os.Chmod(cert.KeyFile, tt.mode); err != nil {
			t.Fatal(err)
		}
		var logBuf bytes.Buffer
		s, err := Start(Config{Listeners: []ListenerConfig{{Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Backend: "static:" + www}}},
			Options{Log: slog.New(slog.NewTextHandler(&logBuf, nil))})
		if err != nil {
			t.Fatalf("mode %#o: %v", tt.mode, err)
		}
		s.Close()
		log := logBuf.String()
		warned := strings.Contains(log, "level=WARN") && strings.Contains(log, cert.KeyFile)
		if warned != tt.warn {
			t.Errorf("mode %#o: warned %v, want %v; log:\n%s", tt.mode, warned, tt.warn, log)
		}
	}
}
