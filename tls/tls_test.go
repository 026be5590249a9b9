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
		k0 := keys()[0]
		dial()
		if !dial() {
			t.Fatalf("%s: not resumed", gotls.VersionName(v))
		}
		// Once the key that made the ticket has left the three kept,
		// the ticket no longer resumes.
		waitFor(t, "three rotations", func() bool { ks := keys(); return len(ks) == 3 && !slices.Contains(ks, k0) })
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
