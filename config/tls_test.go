package config

import (
	cryptotls "crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/gateway/certgen"
)

var (
	// tls1 is a [[tls]] table of 4 lines; keys written after it belong to
	// it until cert1, a [[tls.cert]] of 3 lines, follows.
	tls1  = "[[tls]]\nname = \"web\"\nlisten = \"127.0.0.1:8443\"\nbackend = \"static:www\"\n"
	cert1 = "[[tls.cert]]\ncert = \"a.pem\"\nkey = \"a.key\"\n"
	// orig1 is a [[tls_origin]] table of 4 lines.
	orig1 = "[[tls_origin]]\nname = \"o\"\nlisten = \"127.0.0.1:9080\"\nbackend = \"tls://127.0.0.1:8443\"\n"
)

func TestTLSValid(t *testing.T) {
	const file = "testdata/gateway-tls.toml"
	g, err := LoadGateway(file)
	if err != nil {
		t.Fatal(err)
	}
	pos := func(line int) Pos { return Pos{File: file, Line: line, Col: 1} }
	if !g.TLSOnly() || len(g.Tunnels) != 0 || g.UDP != nil || g.RawESP != nil {
		t.Errorf("want a TLS-only gateway, got %+v", g)
	}
	wantTLS := []TLSListener{
		{
			TLSCommon: TLSCommon{Name: "web", Listen: "0.0.0.0:8443", Engine: "sched",
				MinVersion: cryptotls.VersionTLS13, MaxVersion: cryptotls.VersionTLS13, ALPN: []string{"h2", "http/1.1"},
				HandshakeTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxConns: 500},
			Backend: "static:testdata/www", BackendKind: BackendStatic,
			ClientAuth: ClientAuthRequire, ClientCA: "/etc/sluice/clients.pem", SessionTickets: true,
			TicketRotation: 30 * time.Minute, HeaderTimeout: 10 * time.Second,
			Certs: []TLSCert{{"testdata/site.pem", "testdata/site.key"}, {"/etc/sluice/other.pem", "testdata/keys/other.key"}},
		},
		{
			TLSCommon: TLSCommon{Name: "api", Listen: "[::1]:8444",
				MinVersion: cryptotls.VersionTLS12, MaxVersion: cryptotls.VersionTLS13,
				HandshakeTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute, MaxConns: 10000},
			Backend: "tcp://127.0.0.1:8080", BackendKind: BackendTCP, ProxyProtocol: true, ClientAuth: ClientAuthNone,
			SessionTickets: true, TicketRotation: time.Hour, HeaderTimeout: 10 * time.Second, Certs: []TLSCert{{"testdata/api.pem", "testdata/api.key"}},
		},
	}
	if !reflect.DeepEqual(g.TLS, wantTLS) {
		t.Errorf("tls:\n got %+v\nwant %+v", g.TLS, wantTLS)
	}
	for f, line := range map[string]int{"tls[1]": 6, "tls[2]": 27, "tls_origin[1]": 36, "tls_origin[2]": 50} {
		if p := g.FieldPos(f); p != pos(line) {
			t.Errorf("%s at %v, want line %d", f, p, line)
		}
	}
	wantOrigins := []TLSOrigin{
		{
			TLSCommon: TLSCommon{Name: "upstream", Listen: "127.0.0.1:9080", Engine: "soft",
				MinVersion: cryptotls.VersionTLS12, MaxVersion: cryptotls.VersionTLS13, ALPN: []string{"http/1.1"},
				HandshakeTimeout: 3 * time.Second, IdleTimeout: 2 * time.Minute, MaxConns: 100},
			Backend: "tls://api.example.com:443", ServerName: "api.example.com",
			CA: "testdata/ca.pem", Cert: &TLSCert{"testdata/client.pem", "testdata/client.key"},
		},
		{
			TLSCommon: TLSCommon{Name: "plain-default", Listen: "localhost:9081",
				MinVersion: cryptotls.VersionTLS12, MaxVersion: cryptotls.VersionTLS13,
				HandshakeTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute, MaxConns: 10000},
			Backend: "tls://[2001:db8::5]:8443", ServerName: "internal.example",
		},
	}
	if !reflect.DeepEqual(g.TLSOrigins, wantOrigins) {
		t.Errorf("tls_origin:\n got %+v\nwant %+v", g.TLSOrigins, wantOrigins)
	}
	if got := g.TLSEngines(); !slices.Equal(got, []string{"sched", "soft"}) {
		t.Errorf("TLSEngines() = %q", got)
	}
	if got, want := g.FieldPos("tls[1].cert[2].key"), (Pos{File: file, Line: 25, Col: 9}); got != want {
		t.Errorf("FieldPos = %v, want %v", got, want)
	}
}

// TestOriginServerNameAddress: server_name is a DNS name or an IP
// address (verified against the certificate's IP SANs); one derived
// from an IP backend is that address without its zone, and what the
// encoder writes of it parses again (FuzzParseGateway found
// backend = "tls://[0::]:1" written back as a server_name it refused).
func TestOriginServerNameAddress(t *testing.T) {
	for _, tc := range []struct{ backend, serverName, want string }{
		{"tls://[0::]:1", "", "::"},
		{"tls://[fe80::1%eth0]:443", "", "fe80::1"},
		{"tls://192.0.2.7:443", "", "192.0.2.7"},
		{"tls://api.example.com:443", "2001:db8::9", "2001:db8::9"},
		{"tls://[2001:db8::5]:443", "10.0.0.1", "10.0.0.1"},
	} {
		text := "[[tls_origin]]\nname = \"o\"\nlisten = \"127.0.0.1:9080\"\nbackend = \"" + tc.backend + "\"\n"
		if tc.serverName != "" {
			text += "server_name = \"" + tc.serverName + "\"\n"
		}
		g, err := ParseGateway("o.toml", []byte(text))
		if err != nil {
			t.Errorf("%s, server_name %q: %v", tc.backend, tc.serverName, err)
			continue
		}
		if got := g.TLSOrigins[0].ServerName; got != tc.want {
			t.Errorf("%s, server_name %q: ServerName %q, want %q", tc.backend, tc.serverName, got, tc.want)
		}
		checkRoundTrip(t, g)
	}
}

func TestTLSDefaults(t *testing.T) {
	g, err := ParseGateway("/etc/sluice/gw.toml", []byte(tls1+cert1+orig1))
	if err != nil {
		t.Fatal(err)
	}
	l := g.TLS[0]
	if l.MinVersion != cryptotls.VersionTLS12 || l.MaxVersion != cryptotls.VersionTLS13 || l.ALPN != nil ||
		l.ClientAuth != ClientAuthNone || l.ClientCA != "" || !l.SessionTickets || l.TicketRotation != time.Hour ||
		l.HandshakeTimeout != 10*time.Second || l.IdleTimeout != 5*time.Minute || l.MaxConns != 10000 || l.HeaderTimeout != 10*time.Second ||
		l.Engine != "" || l.ProxyProtocol {
		t.Errorf("[[tls]] defaults: %+v", l)
	}
	// Relative paths are the file's directory's.
	if l.Backend != "static:/etc/sluice/www" || l.Certs[0] != (TLSCert{"/etc/sluice/a.pem", "/etc/sluice/a.key"}) {
		t.Errorf("paths: %q %+v", l.Backend, l.Certs)
	}
	o := g.TLSOrigins[0]
	if o.ServerName != "127.0.0.1" || o.CA != "" || o.Cert != nil || o.MaxConns != 10000 ||
		o.HandshakeTimeout != 10*time.Second || o.IdleTimeout != 5*time.Minute || o.MinVersion != cryptotls.VersionTLS12 {
		t.Errorf("[[tls_origin]] defaults: %+v", o)
	}
	// The gateway's defaults, and no ESP parts.
	if !g.TLSOnly() || g.UDP != nil || g.RawESP != nil || g.StateDir != DefaultStateDir {
		t.Errorf("TLS-only gateway: %+v", g)
	}
	if got := g.TLSEngines(); !slices.Equal(got, []string{""}) {
		t.Errorf("TLSEngines() = %q, want the [gateway] engine", got)
	}
}

// TestTLSWithTunnels: TLS sections sit next to an IPsec gateway's; it is
// not TLS-only.
func TestTLSWithTunnels(t *testing.T) {
	g, err := ParseGateway("gw.toml", []byte(tun1+sas1+tls1+cert1+orig1))
	if err != nil {
		t.Fatal(err)
	}
	if g.TLSOnly() || len(g.Tunnels) != 1 || len(g.TLS) != 1 || len(g.TLSOrigins) != 1 || g.UDP == nil {
		t.Errorf("got %+v", g)
	}
}

func TestTLSErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []wantErr
	}{
		// Valid variations.
		{"origin only", orig1, nil},
		{"two listeners", tls1 + cert1 + strings.NewReplacer(`"web"`, `"web2"`, "8443", "8444").Replace(tls1) + cert1, nil},
		{"same port, two hosts", tls1 + cert1 + strings.NewReplacer(`"web"`, `"web2"`, "127.0.0.1", "127.0.0.2").Replace(tls1) + cert1, nil},
		{"inline tables", "tls = [{name = \"w\", listen = \":1\", backend = \"tcp://b:2\", cert = [{cert = \"c\", key = \"k\"}]}]\n", nil},

		// Structure.
		{"tls table", "[tls]\nname = \"web\"\n", []wantErr{{1, "tls", "want an array of tables, got table (write [[tls]], not [tls])"}}},
		{"tls_origin table", "[tls_origin]\nname = \"o\"\n", []wantErr{{1, "tls_origin", "write [[tls_origin]], not [tls_origin]"}}},
		{"unknown key", tls1 + "listn = 1\n" + cert1, []wantErr{{5, "tls[1].listn", "unknown key (valid: name, listen, ipv6_only, backend, proxy_protocol, engine, versions, alpn, client_auth, client_ca, session_tickets, ticket_rotation, handshake_timeout, idle_timeout, header_timeout, max_conns, max_conns_per_source, serve_dotfiles, cert)"}}},
		{"key case", tls1 + "ALPN = []\n" + cert1, []wantErr{{5, "tls[1].ALPN", "did you mean alpn?"}}},
		{"unknown cert key", tls1 + cert1 + "chain = \"x\"\n", []wantErr{{8, "tls[1].cert[1].chain", "unknown key (valid: cert, key)"}}},
		{"unknown origin key", orig1 + "sni = \"x\"\n", []wantErr{{5, "tls_origin[1].sni", "unknown key (valid: name, listen, ipv6_only, backend, server_name, ca, cert, key, engine, versions, alpn, handshake_timeout, idle_timeout, max_conns, max_conns_per_source)"}}},
		{"listener missing everything", "[[tls]]\n", []wantErr{
			{1, "tls[1].name", "missing required key"},
			{1, "tls[1].listen", "missing required key"},
			{1, "tls[1].backend", `missing required key ("static:DIR" to serve files, or "tcp://HOST:PORT"`},
			{1, "tls[1].cert", "missing required [[tls.cert]]"},
		}},
		{"origin missing everything", "[[tls_origin]]\n", []wantErr{
			{1, "tls_origin[1].name", "missing required key"},
			{1, "tls_origin[1].listen", "missing required key"},
			{1, "tls_origin[1].backend", "missing required key"},
		}},
		{"cert without key", tls1 + "[[tls.cert]]\ncert = \"a.pem\"\n", []wantErr{{5, "tls[1].cert[1].key", "missing required key (the PEM private key"}}},
		{"cert without cert", tls1 + "[[tls.cert]]\nkey = \"a.key\"\n", []wantErr{{5, "tls[1].cert[1].cert", "missing required key"}}},
		{"cert empty path", tls1 + "[[tls.cert]]\ncert = \"\"\nkey = \"a.key\"\n", []wantErr{{6, "tls[1].cert[1].cert", "empty path"}}},
		{"cert table", tls1 + "[tls.cert]\ncert = \"a.pem\"\nkey = \"a.key\"\n", []wantErr{{5, "tls[1].cert", "write [[tls.cert]], not [tls.cert]"}}},
		{"cert string", tls1 + "cert = \"a.pem\"\n", []wantErr{{5, "tls[1].cert", "write the certificate in its own table"}}},
		{"cert empty array", tls1 + "cert = []\n", []wantErr{{5, "tls[1].cert", "no certificate"}}},

		// Names.
		{"empty name", strings.Replace(tls1, `"web"`, `""`, 1) + cert1, []wantErr{{2, "tls[1].name", "empty name"}}},
		{"duplicate across kinds", tls1 + cert1 + strings.Replace(orig1, `"o"`, `"web"`, 1),
			[]wantErr{{9, "tls_origin[1].name", `duplicate TLS name "web": tls[1] (line 2) and tls_origin[1] (line 9)`}}},
		{"duplicate listeners", tls1 + cert1 + strings.Replace(tls1, "8443", "8444", 1) + cert1,
			[]wantErr{{9, "tls[2].name", `duplicate TLS name "web": tls[1] (line 2) and tls[2] (line 9)`}}},

		// Listen addresses.
		{"listen no port", strings.Replace(tls1, "127.0.0.1:8443", "127.0.0.1", 1) + cert1, []wantErr{{3, "tls[1].listen", `invalid listen address "127.0.0.1" (want "host:port"`}}},
		{"listen port 65536", strings.Replace(tls1, "8443", "65536", 1) + cert1, []wantErr{{3, "tls[1].listen", `invalid port "65536" in "127.0.0.1:65536" (want 1..65535, or 0 for a free port)`}}},
		{"listen empty", strings.Replace(tls1, "127.0.0.1:8443", "", 1) + cert1, []wantErr{{3, "tls[1].listen", "empty listen address"}}},
		{"listen host", strings.Replace(orig1, "127.0.0.1:9080", "bad_host!:9080", 1), []wantErr{{3, "tls_origin[1].listen", `invalid host "bad_host!"`}}},
		{"listen multicast", strings.Replace(tls1, "127.0.0.1", "224.0.0.1", 1) + cert1, []wantErr{{3, "tls[1].listen", "cannot listen on multicast address"}}},
		{"listen integer", strings.Replace(tls1, `"127.0.0.1:8443"`, "8443", 1) + cert1, []wantErr{{3, "tls[1].listen", "want a string, got integer"}}},
		{"same address", tls1 + cert1 + strings.Replace(tls1, `"web"`, `"web2"`, 1) + cert1,
			[]wantErr{{10, "tls[2].listen", `"127.0.0.1:8443" clashes with tls[1].listen "127.0.0.1:8443" (tls[1].listen, line 3): two listeners cannot share an address and port`}}},
		{"wildcard clash", tls1 + cert1 + strings.NewReplacer(`"o"`, `"o2"`, "127.0.0.1:9080", "0.0.0.0:8443").Replace(orig1),
			[]wantErr{{10, "tls_origin[1].listen", `"0.0.0.0:8443" clashes with tls[1].listen`}}},
		{"empty host clash", tls1 + cert1 + strings.NewReplacer(`"o"`, `"o2"`, "127.0.0.1:9080", ":8443").Replace(orig1),
			[]wantErr{{10, "tls_origin[1].listen", `":8443" clashes with tls[1].listen`}}},
		{"v4 and v6 wildcards", tls1 + cert1 + strings.NewReplacer(`"o"`, `"o2"`, "127.0.0.1:9080", "[::]:9443").Replace(orig1) +
			strings.NewReplacer(`"web"`, `"w4"`, "127.0.0.1:8443", "0.0.0.0:9443").Replace(tls1) + cert1, nil},
		{"v6 wildcard and v4 address", tls1 + cert1 + strings.NewReplacer(`"o"`, `"o2"`, "127.0.0.1:9080", "[::]:8443").Replace(orig1), nil},
		{"dual stack clash", tls1 + cert1 + strings.NewReplacer(`"o"`, `"o2"`, "127.0.0.1:9080", "[::]:8443").Replace(orig1) + "ipv6_only = false\n",
			[]wantErr{{10, "tls_origin[1].listen", `"[::]:8443" clashes with tls[1].listen`}}},
		{"v6 wildcard clash", "[[tls]]\nname = \"a\"\nlisten = \"[::1]:8443\"\nbackend = \"static:www\"\n" + cert1 +
			strings.NewReplacer(`"o"`, `"o2"`, "127.0.0.1:9080", "[::]:8443").Replace(orig1),
			[]wantErr{{10, "tls_origin[1].listen", `"[::]:8443" clashes with tls[1].listen "[::1]:8443"`}}},
		{"ipv6_only false", strings.Replace(tls1, "127.0.0.1:8443", "[::]:8443", 1) + "ipv6_only = false\n" + cert1, nil},
		{"ipv6_only false on v4", tls1 + "ipv6_only = false\n" + cert1,
			[]wantErr{{5, "tls[1].ipv6_only", `ipv6_only = false with listen "127.0.0.1:8443": only "[::]:PORT" can bind IPv4 too`}}},
		{"ipv6_only false on origin", orig1 + "ipv6_only = false\n",
			[]wantErr{{5, "tls_origin[1].ipv6_only", `only "[::]:PORT" can bind IPv4 too (to listen on both families, write listen = "[::]:9080")`}}},
		{"ipv6_only string", tls1 + "ipv6_only = \"no\"\n" + cert1, []wantErr{{5, "tls[1].ipv6_only", "want a boolean"}}},
		{"metrics clash", "[gateway]\nmetrics = \"127.0.0.1:8443\"\n" + tls1 + cert1,
			[]wantErr{{5, "tls[1].listen", `clashes with gateway.metrics "127.0.0.1:8443" (gateway.metrics, line 2)`}}},

		// Backends.
		{"backend scheme", strings.Replace(tls1, "static:www", "udp://127.0.0.1:53", 1) + cert1, []wantErr{{4, "tls[1].backend", `unknown backend scheme "udp"`}}},
		{"backend tls on listener", strings.Replace(tls1, "static:www", "tls://127.0.0.1:443", 1) + cert1, []wantErr{{4, "tls[1].backend", "is a TLS server: a [[tls]] listener hands the backend plaintext"}}},
		{"backend no port", strings.Replace(tls1, "static:www", "tcp://127.0.0.1", 1) + cert1, []wantErr{{4, "tls[1].backend", `invalid address "127.0.0.1" (want HOST:PORT`}}},
		{"backend port 0", strings.Replace(tls1, "static:www", "tcp://b:0", 1) + cert1, []wantErr{{4, "tls[1].backend", `invalid port "0"`}}},
		{"backend no host", strings.Replace(tls1, "static:www", "tcp://:80", 1) + cert1, []wantErr{{4, "tls[1].backend", `no host in backend "tcp://:80"`}}},
		{"backend bad host", strings.Replace(tls1, "static:www", "tcp://a b:80", 1) + cert1, []wantErr{{4, "tls[1].backend", `invalid host "a b"`}}},
		{"backend static empty", strings.Replace(tls1, "static:www", "static:", 1) + cert1, []wantErr{{4, "tls[1].backend", "static backend without a directory"}}},
		{"backend path", strings.Replace(tls1, "static:www", "/srv/www", 1) + cert1, []wantErr{{4, "tls[1].backend", `invalid backend "/srv/www" (want "static:DIR"`}}},
		{"origin backend tcp", strings.Replace(orig1, "tls://", "tcp://", 1), []wantErr{{4, "tls_origin[1].backend", "is not a TLS server: a [[tls_origin]] carries connections over TLS"}}},
		{"origin backend static", strings.Replace(orig1, "tls://127.0.0.1:8443", "static:www", 1), []wantErr{{4, "tls_origin[1].backend", "is not a TLS server"}}},
		{"origin backend https", strings.Replace(orig1, "tls://", "https://", 1), []wantErr{{4, "tls_origin[1].backend", `unknown backend scheme "https"`}}},
		{"proxy_protocol with static", tls1 + "proxy_protocol = true\n" + cert1, []wantErr{{5, "tls[1].proxy_protocol", "the PROXY header goes only to a tcp:// backend"}}},
		{"serve_dotfiles with tcp", strings.Replace(tls1, "static:www", "tcp://b:80", 1) + "serve_dotfiles = true\n" + cert1, []wantErr{{5, "tls[1].serve_dotfiles", `serve_dotfiles with backend "tcp://b:80": only a static: backend serves files`}}},
		{"serve_dotfiles string", tls1 + "serve_dotfiles = \"yes\"\n" + cert1, []wantErr{{5, "tls[1].serve_dotfiles", "want a boolean"}}},
		{"serve_dotfiles with static", tls1 + "serve_dotfiles = true\n" + cert1, nil},
		{"proxy_protocol false with static", tls1 + "proxy_protocol = false\n" + cert1, nil},
		{"proxy_protocol string", tls1 + "proxy_protocol = \"yes\"\n" + cert1, []wantErr{{5, "tls[1].proxy_protocol", "want a boolean"}}},

		// Versions and ALPN.
		{"version 1.1", tls1 + "versions = [\"1.1\", \"1.3\"]\n" + cert1, []wantErr{{5, "tls[1].versions[1]", "TLS 1.1 is not supported"}}},
		{"version unknown", tls1 + "versions = [\"TLSv1.3\"]\n" + cert1, []wantErr{{5, "tls[1].versions[1]", `unknown TLS version "TLSv1.3" (valid: "1.2", "1.3")`}}},
		{"versions empty", tls1 + "versions = []\n" + cert1, []wantErr{{5, "tls[1].versions", "no TLS version"}}},
		{"versions string", tls1 + "versions = \"1.3\"\n" + cert1, []wantErr{{5, "tls[1].versions", `want an array of strings, got string (write versions = ["1.2", "1.3"])`}}},
		{"versions float", tls1 + "versions = [1.3]\n" + cert1, []wantErr{{5, "tls[1].versions[1]", "want a string, got float"}}},
		{"versions duplicate", orig1 + "versions = [\"1.3\", \"1.3\"]\n", []wantErr{{5, "tls_origin[1].versions[2]", "duplicate version 1.3 (also tls_origin[1].versions[1])"}}},
		{"alpn empty", tls1 + "alpn = [\"\"]\n" + cert1, []wantErr{{5, "tls[1].alpn[1]", "empty protocol name"}}},
		{"alpn duplicate", tls1 + "alpn = [\"h2\", \"h2\"]\n" + cert1, []wantErr{{5, "tls[1].alpn[2]", `duplicate protocol "h2" (also tls[1].alpn[1])`}}},
		{"alpn long", tls1 + "alpn = [\"" + strings.Repeat("x", 256) + "\"]\n" + cert1, []wantErr{{5, "tls[1].alpn[1]", "protocol name of 256 bytes"}}},

		// Client certificates.
		{"client_auth unknown", tls1 + "client_auth = \"yes\"\n" + cert1, []wantErr{{5, "tls[1].client_auth", `unknown client_auth "yes" (valid: none, optional, require)`}}},
		{"client_auth case", tls1 + "client_auth = \"Require\"\nclient_ca = \"c.pem\"\n" + cert1, []wantErr{{5, "tls[1].client_auth", "did you mean require?"}}},
		{"client_auth without ca", tls1 + "client_auth = \"require\"\n" + cert1, []wantErr{{5, "tls[1].client_ca", `missing required key for client_auth = "require"`}}},
		{"optional without ca", tls1 + "client_auth = \"optional\"\n" + cert1, []wantErr{{5, "tls[1].client_ca", `missing required key for client_auth = "optional"`}}},
		{"ca without client_auth", tls1 + "client_ca = \"c.pem\"\n" + cert1, []wantErr{{5, "tls[1].client_ca", `client_ca with client_auth = "none"`}}},
		{"client_ca empty", tls1 + "client_auth = \"require\"\nclient_ca = \"\"\n" + cert1, []wantErr{{6, "tls[1].client_ca", "empty path"}}},
		{"origin cert without key", orig1 + "cert = \"c.pem\"\n", []wantErr{{5, "tls_origin[1].key", "cert without key"}}},
		{"origin key without cert", orig1 + "key = \"c.key\"\n", []wantErr{{5, "tls_origin[1].cert", "key without cert"}}},
		{"origin server_name", orig1 + "server_name = \"a b\"\n", []wantErr{{5, "tls_origin[1].server_name", `invalid server name "a b" (want a DNS name`}}},
		{"origin server_name zone", orig1 + "server_name = \"fe80::1%eth0\"\n", []wantErr{{5, "tls_origin[1].server_name", `invalid address "fe80::1%eth0": zones are not supported`}}},

		// Durations, limits, tickets, engines.
		{"duration zero", tls1 + "handshake_timeout = \"0s\"\n" + cert1, []wantErr{{5, "tls[1].handshake_timeout", `duration "0s" is not positive`}}},
		{"duration negative", orig1 + "idle_timeout = \"-1m\"\n", []wantErr{{5, "tls_origin[1].idle_timeout", "is not positive"}}},
		{"duration no unit", tls1 + "idle_timeout = \"10\"\n" + cert1, []wantErr{{5, "tls[1].idle_timeout", `invalid duration "10" (want a number and a unit`}}},
		{"duration integer", tls1 + "ticket_rotation = 3600\n" + cert1, []wantErr{{5, "tls[1].ticket_rotation", `got the integer 3600 (a number needs a unit: "3600s")`}}},
		{"ticket_rotation 1ns", tls1 + "ticket_rotation = \"1ns\"\n" + cert1, []wantErr{{5, "tls[1].ticket_rotation", `ticket_rotation "1ns" out of range (want 1m..24h; default 1h)`}}},
		{"ticket_rotation 1w", tls1 + "ticket_rotation = \"168h\"\n" + cert1, []wantErr{{5, "tls[1].ticket_rotation", `ticket_rotation "168h" out of range (want 1m..24h`}}},
		{"handshake_timeout 1ns", tls1 + "handshake_timeout = \"1ns\"\n" + cert1, []wantErr{{5, "tls[1].handshake_timeout", `handshake_timeout "1ns" out of range (want 1s..5m; default 10s)`}}},
		{"handshake_timeout 1h", orig1 + "handshake_timeout = \"1h\"\n", []wantErr{{5, "tls_origin[1].handshake_timeout", `out of range (want 1s..5m`}}},
		{"idle_timeout 1ms", orig1 + "idle_timeout = \"1ms\"\n", []wantErr{{5, "tls_origin[1].idle_timeout", `idle_timeout "1ms" out of range (want 1s..24h; default 5m)`}}},
		{"idle_timeout 48h", tls1 + "idle_timeout = \"48h\"\n" + cert1, []wantErr{{5, "tls[1].idle_timeout", `out of range (want 1s..24h`}}},
		{"header_timeout 1ns", tls1 + "header_timeout = \"1ns\"\n" + cert1, []wantErr{{5, "tls[1].header_timeout", `header_timeout "1ns" out of range (want 1s..5m; default 10s)`}}},
		{"header_timeout with tcp", strings.Replace(tls1, "static:www", "tcp://b:80", 1) + "header_timeout = \"5s\"\n" + cert1, []wantErr{{5, "tls[1].header_timeout", `header_timeout with backend "tcp://b:80": only a static: backend reads request heads`}}},
		{"bounds inclusive", tls1 + "ticket_rotation = \"1m\"\nhandshake_timeout = \"5m\"\nidle_timeout = \"24h\"\nheader_timeout = \"1s\"\n" + cert1, nil},
		{"ticket_rotation without tickets", tls1 + "session_tickets = false\nticket_rotation = \"1h\"\n" + cert1, []wantErr{{6, "tls[1].ticket_rotation", "ticket_rotation with session_tickets = false"}}},
		{"max_conns zero", tls1 + "max_conns = 0\n" + cert1, []wantErr{{5, "tls[1].max_conns", "0 out of range (want 1..1000000; default 10000)"}}},
		{"max_conns big", orig1 + "max_conns = 1000001\n", []wantErr{{5, "tls_origin[1].max_conns", "out of range"}}},
		{"max_conns_per_source zero", tls1 + "max_conns_per_source = 0\n" + cert1, []wantErr{{5, "tls[1].max_conns_per_source", "0 out of range (want 1..max_conns; default a tenth of max_conns, at least 100)"}}},
		{"max_conns_per_source above max_conns", orig1 + "max_conns = 50\nmax_conns_per_source = 51\n", []wantErr{{6, "tls_origin[1].max_conns_per_source", "max_conns_per_source 51 above max_conns 50 (tls_origin[1].max_conns, line 5)"}}},
		{"max_conns_per_source above default max_conns", tls1 + "max_conns_per_source = 10001\n" + cert1, []wantErr{{5, "tls[1].max_conns_per_source", "max_conns_per_source 10001 above max_conns 10000 (the default;"}}},
		{"max_conns_per_source ok", tls1 + "max_conns_per_source = 10\nmax_conns = 10\n" + cert1, nil},
		{"max_conns string", tls1 + "max_conns = \"100\"\n" + cert1, []wantErr{{5, "tls[1].max_conns", "want an integer, got string"}}},
		{"engine", tls1 + "engine = \"Soft\"\n" + cert1, []wantErr{{5, "tls[1].engine", `invalid engine name "Soft"`}}},

		// A TLS-only gateway has no ESP parts.
		{"tls-only with tun", "[tun]\nname = \"x\"\n" + tls1 + cert1, []wantErr{{1, "tun", "[tun] without any [[tunnel]]: a gateway with only [[tls]] and [[tls_origin]] sections is TLS-only"}}},
		// [udp] with TLS sections and no tunnel is an IPsec gateway whose
		// tunnels come later (TestEmptyIPsecGateway), not an error.
		{"tls-only with sa", tls1 + cert1 + gwSA("o", 0x1001, ""), []wantErr{{8, "sa", "[[sa]] without any [[tunnel]]"}}},
		{"tls-only with policy", tls1 + cert1 + "[[policy]]\naction = \"discard\"\n", []wantErr{{8, "policy", "[[policy]] without any [[tunnel]]"}}},
		{"no sections", "[gateway]\nworkers = 1\n", []wantErr{{1, "tunnel", "or TLS sections ([[tls]], [[tls_origin]]) for a TLS-only gateway"}}},
		{"tls errors only", "[[tls]]\nname = 1\nlisten = \":1\"\nbackend = \"tcp://b:2\"\n" + cert1, []wantErr{{2, "tls[1].name", "want a string"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.want) == 0 {
				if _, err := ParseGateway("gw.toml", []byte(tt.doc)); err != nil {
					t.Fatalf("want no error, got:\n%v", err)
				}
				return
			}
			errs := parseGWErrors(t, tt.doc)
			checkErrors(t, errs, tt.want)
			lines := strings.Count(tt.doc, "\n") + 1
			for _, e := range errs {
				if e.Pos.File != "gw.toml" || e.Pos.Line < 1 || e.Pos.Line > lines || e.Pos.Col < 1 || e.Field == "" {
					t.Errorf("bad position or field in %v", e)
				}
				if !strings.HasPrefix(e.Error(), fmt.Sprintf("gw.toml:%d:", e.Pos.Line)) {
					t.Errorf("error %q does not start with its file and line", e)
				}
			}
		})
	}
}

func TestTLSCheckEngines(t *testing.T) {
	g, err := LoadGateway("testdata/gateway-tls.toml")
	if err != nil {
		t.Fatal(err)
	}
	only := func(names ...string) func(string) error {
		return func(name string) error {
			if !slices.Contains(names, name) {
				return fmt.Errorf("cryptodev: engine %q is not registered (registered: %s)", name, strings.Join(names, ", "))
			}
			return nil
		}
	}
	if err := g.CheckEngines(only("soft", "sched")); err != nil {
		t.Errorf("all registered: %v", err)
	}
	err = g.CheckEngines(only("soft"))
	want := `testdata/gateway-tls.toml:10:10: tls[1].engine: engine "sched" is not registered (registered: soft)`
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	err = g.CheckEngines(only("sched"))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 2 || errs[0].Field != "gateway.engine" || errs[1].Field != "tls_origin[1].engine" || errs[1].Pos.Line != 43 {
		t.Errorf("got %v", err)
	}
}

func TestTLSCheckFiles(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	site, siteKey, _ := ca.Issue(false, "site.test")
	client, clientKey, _ := ca.Issue(true, "client")
	_, otherKey, _ := ca.Issue(false, "other.test")
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for f, b := range map[string][]byte{"a.pem": site, "a.key": siteKey, "ca.pem": ca.PEM, "c.pem": client, "c.key": clientKey} {
		write(f, b)
	}
	if err := os.Mkdir(filepath.Join(dir, "www"), 0o700); err != nil {
		t.Fatal(err)
	}
	doc := tls1 + cert1 + orig1 + "ca = \"ca.pem\"\ncert = \"c.pem\"\nkey = \"c.key\"\n"
	file := filepath.Join(dir, "gw.toml")
	g, err := ParseGateway(file, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CheckTLSFiles(); err != nil {
		t.Fatalf("every file there: %v", err)
	}
	os.Remove(filepath.Join(dir, "a.key"))
	os.Remove(filepath.Join(dir, "www"))
	os.WriteFile(filepath.Join(dir, "www"), nil, 0o600)
	os.Remove(filepath.Join(dir, "ca.pem"))
	os.Mkdir(filepath.Join(dir, "ca.pem"), 0o700)
	err = g.CheckTLSFiles()
	errs := asErrors(t, err)
	checkErrors(t, errs, []wantErr{
		{4, "tls[1].backend", "www is not a directory"},
		{7, "tls[1].cert[1].key", "no such file or directory"},
		{12, "tls_origin[1].ca", "is a directory, not a file"},
	})
	if !strings.HasPrefix(errs[1].Error(), file+":7:7: tls[1].cert[1].key: ") {
		t.Errorf("error %q", errs[1])
	}

	// What the files hold (issue 16: these were found only when the
	// listener started, without a position).
	os.Remove(filepath.Join(dir, "www"))
	os.Mkdir(filepath.Join(dir, "www"), 0o700)
	os.Remove(filepath.Join(dir, "ca.pem"))
	write("a.key", otherKey)       // another certificate's key
	write("ca.pem", clientKey)     // no certificate in a CA bundle
	write("c.pem", []byte("junk")) // no certificate at all
	errs = asErrors(t, g.CheckTLSFiles())
	checkErrors(t, errs, []wantErr{
		{7, "tls[1].cert[1].key", "the key does not match the certificate in " + filepath.Join(dir, "a.pem")},
		{12, "tls_origin[1].ca", "no CA certificate (want PEM CERTIFICATE blocks)"},
		{13, "tls_origin[1].cert", "no certificate (want a PEM CERTIFICATE block: the leaf, then its intermediates)"},
	})
	write("c.pem", client)
	write("c.key", []byte("junk"))
	errs = asErrors(t, g.CheckTLSFiles())
	checkErrors(t, errs, []wantErr{
		{7, "tls[1].cert[1].key", "the key does not match"},
		{12, "tls_origin[1].ca", "no CA certificate"},
		{14, "tls_origin[1].key", `no private key (want a PEM "PRIVATE KEY"`},
	})
	if !strings.HasPrefix(errs[2].Error(), file+":14:7: tls_origin[1].key: ") {
		t.Errorf("error %q", errs[2])
	}
}

// checkTLSOnlyInvariants checks what ParseGateway promises of a TLS-only
// Gateway it returns.
func checkTLSOnlyInvariants(t *testing.T, g *Gateway) {
	t.Helper()
	if !g.TLSOnly() || g.UDP != nil || g.RawESP != nil || len(g.Policies) != 0 || len(g.SAs) != 0 {
		t.Fatalf("invalid TLS-only gateway accepted: %+v", g)
	}
	checkTLSInvariants(t, g)
}

// checkTLSInvariants checks the TLS sections of a Gateway ParseGateway
// returned.
func checkTLSInvariants(t *testing.T, g *Gateway) {
	t.Helper()
	names := map[string]bool{}
	type bound struct {
		listen string
		dual   bool
	}
	var listens []bound
	seen := func(name, listen string, dual bool) {
		if name == "" || names[name] {
			t.Fatalf("TLS name %q empty or repeated", name)
		}
		names[name] = true
		for _, l := range listens {
			if listenClash(l.listen, l.dual, listen, dual) {
				t.Fatalf("listeners %q and %q clash", l.listen, listen)
			}
		}
		listens = append(listens, bound{listen, dual})
		if checkTLSListen(listen) != "" {
			t.Fatalf("invalid listen %q accepted", listen)
		}
	}
	versions := func(lo, hi uint16) {
		if lo < cryptotls.VersionTLS12 || hi > cryptotls.VersionTLS13 || lo > hi {
			t.Fatalf("versions %#x..%#x", lo, hi)
		}
	}
	inBounds := func(key string, d time.Duration) {
		if b := tlsDurationBounds[key]; d < b.lo || d > b.hi {
			t.Fatalf("%s %v accepted", key, d)
		}
	}
	for _, l := range g.TLS {
		inBounds("handshake_timeout", l.HandshakeTimeout)
		inBounds("idle_timeout", l.IdleTimeout)
		inBounds("header_timeout", l.HeaderTimeout)
		inBounds("ticket_rotation", l.TicketRotation)
		seen(l.Name, l.Listen, l.DualStack)
		versions(l.MinVersion, l.MaxVersion)
		if len(l.Certs) == 0 || (l.ClientAuth == ClientAuthNone) != (l.ClientCA == "") || l.MaxConns < 1 ||
			l.HandshakeTimeout <= 0 || l.IdleTimeout <= 0 || l.TicketRotation <= 0 ||
			(l.BackendKind == BackendTCP) != strings.HasPrefix(l.Backend, "tcp://") || (l.ProxyProtocol && l.BackendKind != BackendTCP) {
			t.Fatalf("invalid [[tls]] accepted: %+v", l)
		}
		for _, c := range l.Certs {
			if c.Cert == "" || c.Key == "" {
				t.Fatalf("empty cert or key accepted: %+v", l)
			}
		}
	}
	for _, o := range g.TLSOrigins {
		inBounds("handshake_timeout", o.HandshakeTimeout)
		inBounds("idle_timeout", o.IdleTimeout)
		seen(o.Name, o.Listen, o.DualStack)
		versions(o.MinVersion, o.MaxVersion)
		if !strings.HasPrefix(o.Backend, "tls://") || o.ServerName == "" || o.MaxConns < 1 ||
			o.HandshakeTimeout <= 0 || o.IdleTimeout <= 0 || (o.Cert != nil && (o.Cert.Cert == "" || o.Cert.Key == "")) {
			t.Fatalf("invalid [[tls_origin]] accepted: %+v", o)
		}
	}
}

// TestTLSExample loads examples/tls-gateway.toml: a TLS-only gateway with
// the listeners and origin its comments draw.
func TestTLSExample(t *testing.T) {
	g, err := LoadGateway("../examples/tls-gateway.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !g.TLSOnly() || len(g.TLS) != 2 || len(g.TLSOrigins) != 1 {
		t.Fatalf("got %+v", g)
	}
	web, app, api := g.TLS[0], g.TLS[1], g.TLSOrigins[0]
	if web.BackendKind != BackendStatic || web.Backend != "static:../examples/www" || web.Certs[0].Key != "../examples/site.key" {
		t.Errorf("web: %+v", web)
	}
	if app.BackendKind != BackendTCP || !app.ProxyProtocol {
		t.Errorf("app: %+v", app)
	}
	if api.ServerName != "api.example.com" || api.CA != "" || api.Cert != nil || api.MaxConns != 1000 {
		t.Errorf("api: %+v", api)
	}
}

// TestEmptyIPsecGateway: a file with [udp] (or [rawesp]) and no tunnel,
// connection or TLS section is an IPsec gateway with nothing configured
// yet, which tunnels are applied to later (issue 19's agent starts each
// gateway so); with TLS sections beside it, it is still not TLS-only. A
// [tun] alone is no such gateway: it has no socket to carry ESP.
func TestEmptyIPsecGateway(t *testing.T) {
	for _, doc := range []string{
		"[tun]\nname = \"sluice0\"\n[udp]\nlisten = \"192.0.2.1:4500\"\n",
		"[rawesp]\nlisten = \"192.0.2.1\"\n",
		"[udp]\nlisten = \"192.0.2.1:4500\"\n" + tls1 + cert1,
	} {
		g, err := ParseGateway("gw.toml", []byte(doc))
		if err != nil {
			t.Errorf("%q: %v", doc, err)
			continue
		}
		if g.TLSOnly() || len(g.Tunnels) != 0 || len(g.Connections) != 0 || (g.UDP == nil && g.RawESP == nil) {
			t.Errorf("%q: want an empty IPsec gateway, got %+v", doc, g)
		}
	}
	_, err := ParseGateway("gw.toml", []byte("[tun]\nname = \"sluice0\"\n"))
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("[tun] alone: %v", err)
	}
	checkErrors(t, errs, []wantErr{{1, "tunnel", "no [[tunnel]] or [[connection]]"}})
}
