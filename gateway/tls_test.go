package gateway

import (
	"bytes"
	"context"
	cryptotls "crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/gateway/certgen"
	"github.com/sluicegw/sluice/tls"
)

// TestTLSConfigMapping: every key of the TLS sections reaches package
// tls, with engines resolved to the [gateway] engine where a section names
// none.
func TestTLSConfigMapping(t *testing.T) {
	cfg, err := config.LoadGateway("../config/testdata/gateway-tls.toml")
	if err != nil {
		t.Fatal(err)
	}
	tc := TLSConfig(cfg)
	want := tls.Config{
		Listeners: []tls.ListenerConfig{
			{
				Name: "web", Listen: "0.0.0.0:8443", Engine: "sched",
				Certs: []tls.Cert{
					{CertFile: "../config/testdata/site.pem", KeyFile: "../config/testdata/site.key"},
					{CertFile: "/etc/sluice/other.pem", KeyFile: "../config/testdata/keys/other.key"},
				},
				MinVersion: cryptotls.VersionTLS13, MaxVersion: cryptotls.VersionTLS13, ALPN: []string{"h2", "http/1.1"},
				ClientAuth: "require", ClientCA: "/etc/sluice/clients.pem", SessionTickets: true, TicketRotation: 30 * time.Minute,
				HandshakeTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxConns: 500, Backend: "static:../config/testdata/www",
				HeaderTimeout: 10 * time.Second,
			},
			{
				Name: "api", Listen: "[::1]:8444", Engine: "soft",
				Certs:      []tls.Cert{{CertFile: "../config/testdata/api.pem", KeyFile: "../config/testdata/api.key"}},
				MinVersion: cryptotls.VersionTLS12, MaxVersion: cryptotls.VersionTLS13, ClientAuth: "none",
				SessionTickets: true, TicketRotation: time.Hour, HandshakeTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute,
				MaxConns: 10000, Backend: "tcp://127.0.0.1:8080", ProxyProtocol: true, HeaderTimeout: 10 * time.Second,
			},
		},
		Origins: []tls.OriginConfig{
			{
				Name: "upstream", Listen: "127.0.0.1:9080", Backend: "tls://api.example.com:443", ServerName: "api.example.com",
				CA: "../config/testdata/ca.pem", Cert: &tls.Cert{CertFile: "../config/testdata/client.pem", KeyFile: "../config/testdata/client.key"},
				Engine: "soft", MinVersion: cryptotls.VersionTLS12, MaxVersion: cryptotls.VersionTLS13, ALPN: []string{"http/1.1"},
				HandshakeTimeout: 3 * time.Second, IdleTimeout: 2 * time.Minute, MaxConns: 100,
			},
			{
				Name: "plain-default", Listen: "localhost:9081", Backend: "tls://[2001:db8::5]:8443", ServerName: "internal.example",
				Engine: "soft", MinVersion: cryptotls.VersionTLS12, MaxVersion: cryptotls.VersionTLS13,
				HandshakeTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute, MaxConns: 10000,
			},
		},
	}
	if !reflect.DeepEqual(tc, want) {
		t.Errorf("TLSConfig:\n got %+v\nwant %+v", tc, want)
	}
}

// TestFixedPartsTLSOnly: a reload may not turn a TLS-only gateway into
// one with tunnels, nor the other way round.
func TestFixedPartsTLSOnly(t *testing.T) {
	tlsOnly := &config.Gateway{File: "gw.toml", TLS: []config.TLSListener{{TLSCommon: config.TLSCommon{Name: "web"}}}}
	withTunnel := &config.Gateway{File: "gw.toml", TLS: tlsOnly.TLS, Tunnels: []config.Tunnel{{Name: "t"}}}
	for _, pair := range [][2]*config.Gateway{{tlsOnly, withTunnel}, {withTunnel, tlsOnly}} {
		err := fixedPartsEqual(pair[0], pair[1])
		if err == nil || !strings.Contains(err.Error(), "changing TLS-only/IPsec mode") {
			t.Errorf("got %v", err)
		}
	}
	more := *tlsOnly
	more.TLSOrigins = []config.TLSOrigin{{TLSCommon: config.TLSCommon{Name: "o"}}}
	if err := fixedPartsEqual(tlsOnly, &more); err != nil {
		t.Errorf("adding an origin refused: %v", err)
	}
}

// tlsSite is the files of a TLS-only gateway for tests: a CA, a server
// certificate for 127.0.0.1, a static directory and the configuration.
type tlsSite struct {
	dir, file string
	ca        *certgen.CA
	addr      string // the listener's address
	body      []byte // of /hello.txt
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func newTLSSite(t *testing.T) *tlsSite {
	t.Helper()
	s := &tlsSite{dir: t.TempDir(), addr: freeAddr(t), body: []byte("hello from sluice\n")}
	var err error
	if s.ca, err = certgen.NewCA("gateway test CA"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ca.IssueFiles(s.dir, "site", false, "127.0.0.1", "localhost"); err != nil {
		t.Fatal(err)
	}
	www := filepath.Join(s.dir, "www")
	if err := os.Mkdir(www, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(www, "hello.txt"), s.body, 0o600); err != nil {
		t.Fatal(err)
	}
	s.file = filepath.Join(s.dir, "gw.toml")
	s.write(t, "")
	return s
}

// write writes the configuration with extra appended.
func (s *tlsSite) write(t *testing.T, extra string) {
	t.Helper()
	// state_dir is where nothing may be made: a TLS-only gateway has none.
	text := fmt.Sprintf("[gateway]\nengine = \"soft\"\nstate_dir = %q\n\n[[tls]]\nname = \"web\"\nlisten = %q\nbackend = \"static:www\"\n  [[tls.cert]]\n  cert = \"site.pem\"\n  key = \"site.key\"\n%s", filepath.Join(s.dir, "no-such-dir", "state"), s.addr, extra)
	if err := os.WriteFile(s.file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (s *tlsSite) load(t *testing.T) *config.Gateway {
	t.Helper()
	cfg, err := config.LoadGateway(s.file)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// get fetches path over TLS from addr, verifying with the site's CA, and
// returns the body and the leaf certificate the server showed.
func (s *tlsSite) get(t *testing.T, path string) ([]byte, []byte) {
	t.Helper()
	conn, err := cryptotls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.addr,
		&cryptotls.Config{RootCAs: s.ca.Pool(), ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path)
	resp, err := io.ReadAll(conn)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_, body, ok := bytes.Cut(resp, []byte("\r\n\r\n"))
	if !ok || !bytes.HasPrefix(resp, []byte("HTTP/1.1 200")) {
		t.Fatalf("GET %s: %q", path, resp)
	}
	return body, conn.ConnectionState().PeerCertificates[0].Raw
}

// TestTLSOnlyGateway starts a gateway from a configuration with only a
// [[tls]] section, without root: no TUN device, sockets or state
// directory. Its file is served over TLS, its counters show in Stats, the
// SA views are empty and the SA operations say why, and a reload after the
// certificate file changed serves the new certificate.
func TestTLSOnlyGateway(t *testing.T) {
	s := newTLSSite(t)
	cfg := s.load(t)
	g, err := Start(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	if _, err := os.Stat(cfg.StateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory made: %v", err)
	}
	body, leaf1 := s.get(t, "/hello.txt")
	if !bytes.Equal(body, s.body) {
		t.Fatalf("body %q, want %q", body, s.body)
	}
	st := g.Stats()
	if len(st.TLS) != 1 || st.TLS[0].Name != "web" || st.TLS[0].Kind != "terminate" || st.TLS[0].Handshakes < 1 || st.TLS[0].Accepted < 1 {
		t.Errorf("TLS stats %+v", st.TLS)
	}
	if len(st.SAs) != 0 || len(st.Dataplane.Workers) != 0 || len(g.Tunnels()) != 0 || len(g.Policies()) != 0 {
		t.Errorf("a TLS-only gateway has ESP state: %+v", st)
	}
	if err := g.DelSA(0x100); !errors.Is(err, errTLSOnly) {
		t.Errorf("DelSA: %v", err)
	}

	// A new certificate and an origin; the reload applies both.
	if _, _, err := s.ca.IssueFiles(s.dir, "site", false, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	s.write(t, fmt.Sprintf("\n[[tls_origin]]\nname = \"o\"\nlisten = %q\nbackend = \"tls://%s\"\nca = \"%s\"\n", freeAddr(t), s.addr, "ca.pem"))
	if err := os.WriteFile(filepath.Join(s.dir, "ca.pem"), s.ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	changes, err := g.Reload(s.load(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("changes: %q", changes)
	if len(changes) == 0 {
		t.Error("a reload that added an origin reports no change")
	}
	if _, leaf2 := s.get(t, "/hello.txt"); bytes.Equal(leaf1, leaf2) {
		t.Error("the old certificate is still served after the reload")
	}
	if st := g.Stats(); len(st.TLS) != 2 || st.TLS[1].Name != "o" || st.TLS[1].Kind != "originate" {
		t.Errorf("after the reload: %+v", st.TLS)
	}

	// Adding a tunnel to a TLS-only gateway needs a restart.
	ipsec := *s.load(t)
	ipsec.Tunnels = []config.Tunnel{{Name: "t"}}
	if _, err := g.Reload(&ipsec); err == nil || !strings.Contains(err.Error(), "needs a restart") {
		t.Errorf("reload to IPsec: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
		t.Error("the listener is still open after Close")
	}
}

// TestTLSOnlyStartFails: a listener that cannot start leaves nothing
// behind, and the error says which.
func TestTLSOnlyStartFails(t *testing.T) {
	s := newTLSSite(t)
	os.Remove(filepath.Join(s.dir, "site.key"))
	_, err := Start(context.Background(), s.load(t), nil)
	if err == nil || !strings.HasPrefix(err.Error(), s.file+":11:9: tls[1].cert[1].key: ") {
		t.Fatalf("got %v", err)
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		t.Fatalf("the address is still taken: %v", err)
	}
	ln.Close()
}
