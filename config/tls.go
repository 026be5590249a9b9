package config

// tls.go reads the TLS sections of the gateway configuration:
//
//	[[tls]]          TLS termination: TLS from clients on listen, the
//	  [[tls.cert]]   plaintext stream to backend; certificates by SNI
//	[[tls_origin]]   TLS origination: plaintext from clients on listen,
//	                 carried over TLS to backend
//
// Each table is decoded on its own (first pass); crossCheckTLS then checks
// names across both kinds and listen addresses across every listener (second
// pass). Relative paths (certificates, keys, CAs, a static backend's
// directory) are resolved against the configuration file's directory, so a
// Gateway holds only paths that do not depend on the working directory.

import (
	"crypto"
	cryptotls "crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
)

// Defaults and limits of the TLS sections. The defaults are those of
// package tls (tls.DefaultHandshakeTimeout, ...); config does not import it.
const (
	DefaultTLSHandshakeTimeout = 10 * time.Second
	DefaultTLSIdleTimeout      = 5 * time.Minute
	DefaultTLSMaxConns         = 10000
	DefaultTLSTicketRotation   = time.Hour
	DefaultTLSHeaderTimeout    = 10 * time.Second
	MaxTLSMaxConns             = 1000000
)

// tlsDurationBounds are the ranges of the TLS sections' durations, each
// refused outside it with its line. The lower bounds keep a typo or a
// hostile file from making a gateway useless: ticket_rotation = "1ns"
// spun a core on key rotation and no ticket ever resumed, a 1ns handshake
// or header timeout fails every client. The upper bounds keep connection
// slots from being held by a client that stalls (handshake and header
// timeouts), an idle connection from living for days, and a ticket key
// (which, stolen, decrypts the resumed sessions it covered) from living
// more than three days (a key serves for two more periods after its own).
var tlsDurationBounds = map[string]struct{ lo, hi, def time.Duration }{
	"handshake_timeout": {time.Second, 5 * time.Minute, DefaultTLSHandshakeTimeout},
	"header_timeout":    {time.Second, 5 * time.Minute, DefaultTLSHeaderTimeout},
	"idle_timeout":      {time.Second, 24 * time.Hour, DefaultTLSIdleTimeout},
	"ticket_rotation":   {time.Minute, 24 * time.Hour, DefaultTLSTicketRotation},
}

// Client certificate policies of a [[tls]] listener (mTLS).
const (
	ClientAuthNone     = "none"
	ClientAuthOptional = "optional"
	ClientAuthRequire  = "require"
)

// The kinds of backend a TLS section names.
const (
	BackendStatic = "static" // static:DIR, the built-in HTTP/1.1 file server
	BackendTCP    = "tcp"    // tcp://HOST:PORT, the plaintext stream forwarded
	BackendTLS    = "tls"    // tls://HOST:PORT, a TLS server (origination)
)

// TLSCert is a [[tls.cert]]: a PEM certificate chain and its private key.
// Both paths are absolute or relative to the working directory, resolved
// against the configuration file's directory when the file gives them
// relative.
type TLSCert struct {
	Cert, Key string
}

// TLSCommon holds what [[tls]] and [[tls_origin]] tables share.
type TLSCommon struct {
	Name string // unique among [[tls]] and [[tls_origin]]
	// Listen is "host:port"; host may be empty (IPv4's every address,
	// as nginx's "listen 8443"). An IPv4 address binds IPv4 only, an IPv6
	// address IPv6 only: "[::]" binds IPv4 too only with DualStack
	// (ipv6_only = false).
	Listen    string
	DualStack bool
	Engine    string // engine holding the keys; "" = Gateway.Engine
	// MinVersion and MaxVersion are crypto/tls's VersionTLS12 or
	// VersionTLS13; versions = ["1.2", "1.3"] (the default) gives both.
	MinVersion, MaxVersion uint16
	ALPN                   []string      // in preference order; nil = none
	HandshakeTimeout       time.Duration // tlsDurationBounds has each duration's range
	IdleTimeout            time.Duration
	MaxConns               int
	// MaxConnsPerSource bounds the connections of one source (an IPv4
	// address, an IPv6 /64); 0 = package tls's default, a tenth of
	// MaxConns but at least 100 (and at most MaxConns).
	MaxConnsPerSource int
	Pos               Pos // where its table starts
}

// TLSListener is a [[tls]] table: a TLS termination listener.
type TLSListener struct {
	TLSCommon
	// Backend is "static:DIR" (DIR resolved like the other paths) or
	// "tcp://HOST:PORT"; BackendKind says which.
	Backend       string
	BackendKind   string // BackendStatic or BackendTCP
	ProxyProtocol bool   // a PROXY v2 header to a tcp:// backend
	// ServeDotfiles lets a static: backend serve names with a component
	// starting with '.'; by default they get 404 (but /.well-known/ is
	// served).
	ServeDotfiles  bool
	ClientAuth     string // ClientAuthNone (default), ClientAuthOptional or ClientAuthRequire
	ClientCA       string // PEM bundle; set when ClientAuth is not none
	SessionTickets bool   // default true
	TicketRotation time.Duration
	// HeaderTimeout bounds, for a static: backend, the time from a
	// request's first byte to the end of its head (slowloris).
	HeaderTimeout time.Duration
	// Certs are served by SNI; Certs[0] is the default. At least one.
	Certs []TLSCert
}

// TLSOrigin is a [[tls_origin]] table: plaintext TCP from clients on
// Listen, carried over TLS to Backend, whose certificate is verified.
type TLSOrigin struct {
	TLSCommon
	Backend string // "tls://HOST:PORT"
	// ServerName is sent as SNI and verified in the backend's
	// certificate; it defaults to HOST of Backend.
	ServerName string
	CA         string   // PEM bundle verifying the backend; "" = system roots
	Cert       *TLSCert // optional client certificate; nil = none
}

// TLSOnly reports whether g is a TLS-only gateway: TLS sections, no
// [[tunnel]] or [[connection]], and no [udp] or [rawesp] section. Such a
// gateway has no TUN device, no ESP sockets, no SAs and no state
// directory.
func (g *Gateway) TLSOnly() bool {
	return len(g.Tunnels) == 0 && len(g.Connections) == 0 && !g.HasField("udp") && !g.HasField("rawesp") &&
		(len(g.TLS) > 0 || len(g.TLSOrigins) > 0)
}

// EmptyIPsec reports whether g is an IPsec gateway with no tunnel yet: no
// [[tunnel]] or [[connection]], and a [udp] or [rawesp] section for the
// ESP it is to carry once a reload or config.apply brings tunnels. Such a
// gateway starts its TUN device, sockets and data plane as one with
// tunnels does.
func (g *Gateway) EmptyIPsec() bool {
	return len(g.Tunnels) == 0 && len(g.Connections) == 0 && (g.HasField("udp") || g.HasField("rawesp"))
}

// TLSEngines lists the engines the TLS sections use, each once, in file
// order: a section's own engine, or the [gateway] engine for one that
// names none.
func (g *Gateway) TLSEngines() []string {
	var names []string
	add := func(e string) {
		if e == "" {
			e = g.Engine
		}
		if !slices.Contains(names, e) {
			names = append(names, e)
		}
	}
	for i := range g.TLS {
		add(g.TLS[i].Engine)
	}
	for i := range g.TLSOrigins {
		add(g.TLSOrigins[i].Engine)
	}
	return names
}

// CheckTLSFiles reports, with their positions, the files and directories
// the TLS sections and the sync channel of [ha] name that cannot be used:
// certificates, keys and CAs that cannot be read or hold no certificate or
// key, a key that does not match its certificate, static backends'
// directories that are not there, and an [ha] hook that is not an
// executable file. It is a check of the file system at the time of the call, for
// `sluice run`, reloads and the gateway to refuse a configuration whose
// listeners could not start with an error at the field that names the
// file; package tls loads the files again when it starts them.
func (g *Gateway) CheckTLSFiles() error {
	var errs Errors
	fail := func(field, msg string) {
		errs = append(errs, &Error{Pos: g.FieldPos(field), Field: field, Msg: msg})
	}
	check := func(field, path string, dir bool) bool {
		if path == "" {
			return false
		}
		msg := ""
		switch fi, err := os.Stat(path); {
		case err != nil:
			msg = err.Error()
		case dir && !fi.IsDir():
			msg = fmt.Sprintf("%s is not a directory", path)
		case !dir && fi.IsDir():
			msg = fmt.Sprintf("%s is a directory, not a file", path)
		case !dir:
			f, err := os.Open(path)
			if err != nil {
				msg = err.Error()
			} else {
				f.Close()
			}
		}
		if msg != "" {
			fail(field, msg)
			return false
		}
		return true
	}
	// pair checks a certificate and its key.
	pair := func(certField, keyField string, c TLSCert) {
		certOK, keyOK := check(certField, c.Cert, false), check(keyField, c.Key, false)
		var leaf *x509.Certificate
		if certOK {
			var msg string
			if leaf, msg = readLeaf(c.Cert); msg != "" {
				fail(certField, msg)
			}
		}
		if !keyOK {
			return
		}
		priv, err := cryptodev.ReadPrivateKey(c.Key)
		if err != nil {
			fail(keyField, strings.TrimPrefix(err.Error(), "cryptodev: "))
			return
		}
		signer, ok := priv.(crypto.Signer)
		pub, ok2 := publicKeyOf(leaf)
		if leaf != nil && (!ok || !ok2 || !pub.Equal(signer.Public())) {
			fail(keyField, fmt.Sprintf("%s: the key does not match the certificate in %s", c.Key, c.Cert))
		}
	}
	ca := func(field, path string) {
		if !check(field, path, false) {
			return
		}
		data, err := os.ReadFile(path)
		if err != nil {
			fail(field, err.Error())
		} else if !x509.NewCertPool().AppendCertsFromPEM(data) {
			fail(field, fmt.Sprintf("%s: no CA certificate (want PEM CERTIFICATE blocks)", path))
		}
	}
	for i := range g.TLS {
		l, f := &g.TLS[i], elemPath("tls", i)
		if l.BackendKind == BackendStatic {
			check(f+".backend", strings.TrimPrefix(l.Backend, "static:"), true)
		}
		ca(f+".client_ca", l.ClientCA)
		for k, c := range l.Certs {
			cf := elemPath(f+".cert", k)
			pair(cf+".cert", cf+".key", c)
		}
	}
	for i := range g.TLSOrigins {
		o, f := &g.TLSOrigins[i], elemPath("tls_origin", i)
		ca(f+".ca", o.CA)
		if o.Cert != nil {
			pair(f+".cert", f+".key", *o.Cert)
		}
	}
	g.checkHAFiles(pair, ca, fail)
	errs.Sort()
	return errs.Err()
}

// readLeaf returns the first certificate of a PEM file, or what is wrong.
func readLeaf(file string) (*x509.Certificate, string) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err.Error()
	}
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return nil, fmt.Sprintf("%s: no certificate (want a PEM CERTIFICATE block: the leaf, then its intermediates)", file)
		}
		if b.Type == "CERTIFICATE" {
			leaf, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Sprintf("%s: %v", file, err)
			}
			return leaf, ""
		}
	}
}

// publicKeyOf returns a certificate's public key, comparable with a
// private key's.
func publicKeyOf(c *x509.Certificate) (interface{ Equal(crypto.PublicKey) bool }, bool) {
	if c == nil {
		return nil, false
	}
	pk, ok := c.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	return pk, ok
}

// The first pass.

var (
	tlsKeys = []string{"name", "listen", "ipv6_only", "backend", "proxy_protocol", "engine", "versions", "alpn", "client_auth",
		"client_ca", "session_tickets", "ticket_rotation", "handshake_timeout", "idle_timeout", "header_timeout", "max_conns", "max_conns_per_source", "serve_dotfiles", "cert"}
	tlsCertKeys   = []string{"cert", "key"}
	tlsOriginKeys = []string{"name", "listen", "ipv6_only", "backend", "server_name", "ca", "cert", "key", "engine", "versions",
		"alpn", "handshake_timeout", "idle_timeout", "max_conns", "max_conns_per_source"}
	clientAuths = []string{ClientAuthNone, ClientAuthOptional, ClientAuthRequire}
)

// path resolves a file name of the configuration against its directory.
func (d *gwDecoder) path(s string) string {
	if s == "" || filepath.IsAbs(s) {
		return s
	}
	return filepath.Join(filepath.Dir(d.g.File), s)
}

// newTLSCommon returns the shared keys' defaults.
func newTLSCommon(pos Pos) TLSCommon {
	return TLSCommon{MinVersion: cryptotls.VersionTLS12, MaxVersion: cryptotls.VersionTLS13,
		HandshakeTimeout: DefaultTLSHandshakeTimeout, IdleTimeout: DefaultTLSIdleTimeout, MaxConns: DefaultTLSMaxConns,
		Pos: pos}
}

// tlsCommonAfter checks, once a table's keys are all read, what its
// shared keys say together: ipv6_only = false needs listen on "[::]",
// max_conns_per_source is at most max_conns.
func (d *gwDecoder) tlsCommonAfter(c *TLSCommon, f string, seen map[string]*Entry) {
	if e := seen["max_conns_per_source"]; e != nil && c.MaxConnsPerSource > c.MaxConns && !d.failed(f+".max_conns") {
		d.errorf(e.Value.Pos, f+".max_conns_per_source", "max_conns_per_source %d above max_conns %d (%s)", c.MaxConnsPerSource, c.MaxConns, d.where(f+".max_conns"))
	}
	e := seen["ipv6_only"]
	if e == nil || !c.DualStack || c.Listen == "" || d.failed(f+".listen") {
		return
	}
	host, port, _ := net.SplitHostPort(c.Listen)
	if a, err := netip.ParseAddr(host); err != nil || !a.Is6() || !a.IsUnspecified() || a.Zone() != "" {
		d.errorf(e.Value.Pos, f+".ipv6_only", "ipv6_only = false with listen %s: only \"[::]:PORT\" can bind IPv4 too (to listen on both families, write listen = %q)",
			shortQuote(c.Listen), net.JoinHostPort("::", port))
	}
}

// tlsCommon decodes e into c if it is one of the keys [[tls]] and
// [[tls_origin]] share, and reports whether it was; what names the table's
// kind in errors.
func (d *gwDecoder) tlsCommon(c *TLSCommon, kf string, e *Entry, what string) bool {
	v := e.Value
	switch e.Key {
	case "name":
		if s, ok := d.name(kf, v, "empty name ("+what+" needs a name, unique among [[tls]] and [[tls_origin]])"); ok {
			c.Name = s
		}
	case "listen":
		if s, ok := d.checked(kf, v, checkTLSListen); ok {
			c.Listen = s
		}
	case "ipv6_only":
		if b, ok := d.boolean(kf, v); ok {
			c.DualStack = !b
		}
	case "engine":
		if s, ok := d.engine(kf, v, `"" uses the [gateway] engine`); ok {
			c.Engine = s
		}
	case "versions":
		if lo, hi, ok := d.tlsVersions(kf, v); ok {
			c.MinVersion, c.MaxVersion = lo, hi
		}
	case "alpn":
		if p, ok := d.alpn(kf, v); ok {
			c.ALPN = p
		}
	case "handshake_timeout":
		if t, ok := d.tlsDuration(kf, e.Key, v); ok {
			c.HandshakeTimeout = t
		}
	case "idle_timeout":
		if t, ok := d.tlsDuration(kf, e.Key, v); ok {
			c.IdleTimeout = t
		}
	case "max_conns":
		if n, ok := d.maxConns(kf, v); ok {
			c.MaxConns = n
		}
	case "max_conns_per_source":
		if n, ok := d.intIn(kf, v, "", 1, MaxTLSMaxConns, "1..max_conns; default a tenth of max_conns, at least 100"); ok {
			c.MaxConnsPerSource = int(n)
		}
	default:
		return false
	}
	return true
}

func (d *gwDecoder) tlsListener(te tableElem) {
	f := te.field
	l := TLSListener{TLSCommon: newTLSCommon(te.pos),
		ClientAuth: ClientAuthNone, SessionTickets: true, TicketRotation: DefaultTLSTicketRotation,
		HeaderTimeout: DefaultTLSHeaderTimeout}
	seen := make(map[string]*Entry)
	authOK, backendOK := true, false
	for _, e := range te.t.Entries() {
		kf, v := fieldPath(f, e.Key), e.Value
		seen[e.Key] = e
		if d.tlsCommon(&l.TLSCommon, kf, e, "a TLS listener") {
			continue
		}
		switch e.Key {
		case "backend":
			if kind, s, ok := d.backend(kf, v, false); ok {
				l.BackendKind, l.Backend, backendOK = kind, s, true
			}
		case "proxy_protocol":
			if b, ok := d.boolean(kf, v); ok {
				l.ProxyProtocol = b
			}
		case "serve_dotfiles":
			if b, ok := d.boolean(kf, v); ok {
				l.ServeDotfiles = b
			}
		case "client_auth":
			var s string
			s, authOK = d.oneOf(kf, v, "client_auth", clientAuths, "")
			if authOK {
				l.ClientAuth = s
			}
		case "client_ca":
			if s, ok := d.checked(kf, v, nonEmpty("empty path (want a PEM bundle of the CAs that issue client certificates)")); ok {
				l.ClientCA = d.path(s)
			}
		case "session_tickets":
			if b, ok := d.boolean(kf, v); ok {
				l.SessionTickets = b
			}
		case "ticket_rotation":
			if t, ok := d.tlsDuration(kf, e.Key, v); ok {
				l.TicketRotation = t
			}
		case "header_timeout":
			if t, ok := d.tlsDuration(kf, e.Key, v); ok {
				l.HeaderTimeout = t
			}
		case "cert":
			l.Certs = d.tlsCerts(kf, v)
		default:
			d.errs = append(d.errs, unknownKey(e, kf, tlsKeys, ""))
		}
	}
	for _, k := range []struct{ key, what string }{
		{"name", "a name, unique among [[tls]] and [[tls_origin]]"},
		{"listen", `the address to listen on, e.g. "0.0.0.0:8443"`},
		{"backend", `"static:DIR" to serve files, or "tcp://HOST:PORT" to forward the plaintext stream`},
	} {
		if seen[k.key] == nil {
			d.errorf(te.pos, f+"."+k.key, "missing required key (%s)", k.what)
		}
	}
	d.tlsCommonAfter(&l.TLSCommon, f, seen)
	if seen["cert"] == nil {
		d.errorf(te.pos, f+".cert", "missing required [[tls.cert]] (at least one, with cert and key: the first is served to clients without a matching SNI)")
	}
	if e := seen["proxy_protocol"]; e != nil && l.ProxyProtocol && backendOK && l.BackendKind != BackendTCP {
		d.errorf(e.Value.Pos, f+".proxy_protocol", "proxy_protocol with backend %s: the PROXY header goes only to a tcp:// backend", shortQuote(l.Backend))
	}
	if e := seen["header_timeout"]; e != nil && backendOK && l.BackendKind != BackendStatic {
		d.errorf(e.Value.Pos, f+".header_timeout", "header_timeout with backend %s: only a static: backend reads request heads", shortQuote(l.Backend))
	}
	if e := seen["serve_dotfiles"]; e != nil && l.ServeDotfiles && backendOK && l.BackendKind != BackendStatic {
		d.errorf(e.Value.Pos, f+".serve_dotfiles", "serve_dotfiles with backend %s: only a static: backend serves files", shortQuote(l.Backend))
	}
	if authOK {
		e := seen["client_ca"]
		switch {
		case l.ClientAuth != ClientAuthNone && e == nil:
			d.errorf(d.at(f+".client_auth"), f+".client_ca", "missing required key for client_auth = %q (a PEM bundle of the CAs that issue client certificates)", l.ClientAuth)
		case l.ClientAuth == ClientAuthNone && e != nil:
			d.errorf(e.Value.Pos, f+".client_ca", "client_ca with client_auth = \"none\": no client certificate is asked for (set client_auth = \"optional\" or \"require\", or remove client_ca)")
		}
	}
	if e := seen["ticket_rotation"]; e != nil && !l.SessionTickets && !d.failed(f+".session_tickets") {
		d.errorf(e.Value.Pos, f+".ticket_rotation", "ticket_rotation with session_tickets = false: there are no ticket keys to rotate")
	}
	d.g.TLS = append(d.g.TLS, l)
	d.tlsFields = append(d.tlsFields, f)
}

// tlsCerts reads the [[tls.cert]] tables of a listener.
func (d *gwDecoder) tlsCerts(f string, v *Value) []TLSCert {
	if v.Kind == KindTable {
		d.errorf(v.Pos, f, "want an array of tables, got table (write [[tls.cert]], not [tls.cert])")
		return nil
	}
	if v.Kind == KindString {
		d.errorf(v.Pos, f, "want an array of tables, got string (write the certificate in its own table: [[tls.cert]] with cert = \"site.pem\" and key = \"site.key\")")
		return nil
	}
	tables, ok := d.arrayOfTables(f, v)
	if !ok {
		return nil
	}
	if len(tables) == 0 {
		if elems, _ := v.Array(); len(elems) == 0 {
			d.errorf(v.Pos, f, "no certificate (want at least one [[tls.cert]] with cert and key)")
		}
		return nil
	}
	var out []TLSCert
	for _, te := range tables {
		var c TLSCert
		seen := map[string]bool{}
		for _, e := range te.t.Entries() {
			kf, v := fieldPath(te.field, e.Key), e.Value
			seen[e.Key] = true
			switch e.Key {
			case "cert":
				if s, ok := d.checked(kf, v, nonEmpty("empty path (want a PEM file: the certificate, then its intermediates)")); ok {
					c.Cert = d.path(s)
				}
			case "key":
				if s, ok := d.checked(kf, v, nonEmpty("empty path (want the PEM private key of the certificate)")); ok {
					c.Key = d.path(s)
				}
			default:
				d.errs = append(d.errs, unknownKey(e, kf, tlsCertKeys, ""))
			}
		}
		if !seen["cert"] {
			d.errorf(te.pos, te.field+".cert", "missing required key (a PEM file: the certificate, then its intermediates)")
		}
		if !seen["key"] {
			d.errorf(te.pos, te.field+".key", "missing required key (the PEM private key of the certificate)")
		}
		out = append(out, c)
	}
	return out
}

func (d *gwDecoder) tlsOrigin(te tableElem) {
	f := te.field
	o := TLSOrigin{TLSCommon: newTLSCommon(te.pos)}
	seen := make(map[string]*Entry)
	var cert, key string
	backendOK := false
	for _, e := range te.t.Entries() {
		kf, v := fieldPath(f, e.Key), e.Value
		seen[e.Key] = e
		if d.tlsCommon(&o.TLSCommon, kf, e, "a TLS origin") {
			continue
		}
		switch e.Key {
		case "backend":
			if _, s, ok := d.backend(kf, v, true); ok {
				o.Backend, backendOK = s, true
			}
		case "server_name":
			if s, ok := d.checked(kf, v, checkServerName); ok {
				o.ServerName = s
			}
		case "ca":
			if s, ok := d.str(kf, v); ok {
				o.CA = d.path(s)
			}
		case "cert":
			if s, ok := d.str(kf, v); ok {
				cert = d.path(s)
			}
		case "key":
			if s, ok := d.str(kf, v); ok {
				key = d.path(s)
			}
		default:
			d.errs = append(d.errs, unknownKey(e, kf, tlsOriginKeys, ""))
		}
	}
	for _, k := range []struct{ key, what string }{
		{"name", "a name, unique among [[tls]] and [[tls_origin]]"},
		{"listen", `the plaintext address to listen on, e.g. "127.0.0.1:9080"`},
		{"backend", `the TLS server to carry connections to, e.g. "tls://api.example.com:443"`},
	} {
		if seen[k.key] == nil {
			d.errorf(te.pos, f+"."+k.key, "missing required key (%s)", k.what)
		}
	}
	d.tlsCommonAfter(&o.TLSCommon, f, seen)
	// cert and key: both or neither. An empty string is "not given".
	switch {
	case cert != "" && key == "" && !d.failed(f+".key"):
		d.errorf(d.at(f+".cert"), f+".key", "cert without key: a client certificate needs its private key (give both, or neither)")
	case key != "" && cert == "" && !d.failed(f+".cert"):
		d.errorf(d.at(f+".key"), f+".cert", "key without cert: give the client certificate too (both, or neither)")
	case cert != "":
		o.Cert = &TLSCert{Cert: cert, Key: key}
	}
	if o.ServerName == "" && backendOK {
		host, _, _ := net.SplitHostPort(strings.TrimPrefix(o.Backend, "tls://"))
		o.ServerName = host
	}
	d.g.TLSOrigins = append(d.g.TLSOrigins, o)
	d.originFields = append(d.originFields, f)
}

// Readers of TLS values.

// duration reads a Go duration string that must be positive.
func (d *decoder) duration(f string, v *Value) (time.Duration, bool) {
	if i, ok := v.Int(); ok {
		d.errorf(v.Pos, f, "want a duration string such as \"10s\" or \"5m\", got the integer %d (a number needs a unit: \"%ds\")", i, i)
		return 0, false
	}
	return parsed(d, f, v, func(s string) (time.Duration, string) {
		t, err := time.ParseDuration(s)
		switch {
		case err != nil:
			return 0, fmt.Sprintf("invalid duration %s (want a number and a unit, such as \"10s\", \"5m\" or \"1h\")", shortQuote(s))
		case t <= 0:
			return 0, fmt.Sprintf("duration %s is not positive (want at least 1ns, e.g. \"10s\")", shortQuote(s))
		}
		return t, ""
	})
}

// tlsDuration reads the duration key of a TLS section, within its
// tlsDurationBounds.
func (d *decoder) tlsDuration(f, key string, v *Value) (time.Duration, bool) {
	t, ok := d.duration(f, v)
	b := tlsDurationBounds[key]
	if ok && (t < b.lo || t > b.hi) {
		s, _ := v.Str()
		d.errorf(v.Pos, f, "%s %s out of range (want %s..%s; default %s)", key, shortQuote(s), shortDuration(b.lo), shortDuration(b.hi), shortDuration(b.def))
		return 0, false
	}
	return t, ok
}

// shortDuration formats t as a person writes it: "1m", "24h", "10s".
func shortDuration(t time.Duration) string {
	s := t.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// maxConns reads a connection limit.
func (d *decoder) maxConns(f string, v *Value) (int, bool) {
	i, ok := d.intIn(f, v, "", 1, MaxTLSMaxConns, fmt.Sprintf("1..%d; default %d", MaxTLSMaxConns, DefaultTLSMaxConns))
	return int(i), ok
}

// tlsVersions reads versions = ["1.2", "1.3"]: the lowest and highest of
// the versions given. TLS has no gaps between 1.2 and 1.3, so the list is
// a range.
func (d *decoder) tlsVersions(f string, v *Value) (lo, hi uint16, ok bool) {
	elems, ok := d.strList(f, v, `versions = ["1.2", "1.3"]`)
	if !ok {
		return 0, 0, false
	}
	if len(elems) == 0 {
		d.errorf(v.Pos, f, "no TLS version (want \"1.2\", \"1.3\" or both; leave the key out for both)")
		return 0, 0, false
	}
	seen := map[uint16]int{}
	for i, ev := range elems {
		ef := elemPath(f, i)
		s, _ := ev.Str()
		var ver uint16
		switch s {
		case "1.2":
			ver = cryptotls.VersionTLS12
		case "1.3":
			ver = cryptotls.VersionTLS13
		case "1.0", "1.1":
			d.errorf(ev.Pos, ef, "TLS %s is not supported (want \"1.2\" or \"1.3\": older versions are deprecated, RFC 8996)", s)
			ok = false
			continue
		default:
			d.errorf(ev.Pos, ef, "unknown TLS version %s (valid: \"1.2\", \"1.3\")", shortQuote(s))
			ok = false
			continue
		}
		if j, dup := seen[ver]; dup {
			d.errorf(ev.Pos, ef, "duplicate version %s (also %s)", s, elemPath(f, j))
			ok = false
			continue
		}
		seen[ver] = i
		if lo == 0 || ver < lo {
			lo = ver
		}
		hi = max(hi, ver)
	}
	return lo, hi, ok
}

// alpn reads a list of ALPN protocol names (RFC 7301 section 3.1: 1 to 255
// bytes each).
func (d *decoder) alpn(f string, v *Value) ([]string, bool) {
	elems, ok := d.strList(f, v, `alpn = ["http/1.1"]`)
	if !ok {
		return nil, false
	}
	var out []string
	for i, ev := range elems {
		ef := elemPath(f, i)
		s, _ := ev.Str()
		switch j := slices.Index(out, s); {
		case s == "":
			d.errorf(ev.Pos, ef, "empty protocol name (want a name such as \"h2\" or \"http/1.1\")")
			ok = false
		case len(s) > 255:
			d.errorf(ev.Pos, ef, "protocol name of %d bytes (ALPN allows at most 255, RFC 7301 section 3.1)", len(s))
			ok = false
		case j >= 0:
			d.errorf(ev.Pos, ef, "duplicate protocol %s (also %s)", shortQuote(s), elemPath(f, j))
			ok = false
		default:
			out = append(out, s)
		}
	}
	if !ok {
		return nil, false
	}
	return out, true
}

// backend reads a TLS section's backend: "static:DIR" or "tcp://HOST:PORT"
// for a [[tls]] listener, "tls://HOST:PORT" for an origin. It returns the
// kind and the value, a static DIR resolved against the file's directory.
func (d *gwDecoder) backend(f string, v *Value, origin bool) (kind, s string, ok bool) {
	s, ok = d.str(f, v)
	if !ok {
		return "", "", false
	}
	want := `want "static:DIR" to serve the files of DIR, or "tcp://HOST:PORT" to forward the plaintext stream`
	if origin {
		want = `want "tls://HOST:PORT", the TLS server to carry connections to`
	}
	scheme, rest, hasScheme := strings.Cut(s, "://")
	switch {
	case !origin && strings.HasPrefix(s, "static:"):
		dir := strings.TrimPrefix(s, "static:")
		if dir == "" {
			d.errorf(v.Pos, f, "static backend without a directory (want \"static:DIR\", e.g. \"static:/srv/www\")")
			return "", "", false
		}
		return BackendStatic, "static:" + d.path(dir), true
	case origin && (scheme == "tcp" || strings.HasPrefix(s, "static:")):
		d.errorf(v.Pos, f, "backend %s is not a TLS server: a [[tls_origin]] carries connections over TLS (%s; to terminate TLS, use [[tls]])", shortQuote(s), want)
		return "", "", false
	case !hasScheme:
		d.errorf(v.Pos, f, "invalid backend %s (%s)", shortQuote(s), want)
		return "", "", false
	case !origin && scheme == "tls":
		d.errorf(v.Pos, f, "backend %s is a TLS server: a [[tls]] listener hands the backend plaintext (want tcp://HOST:PORT; carrying plaintext to a TLS server is what [[tls_origin]] does)", shortQuote(s))
		return "", "", false
	case !origin && scheme != "tcp", origin && scheme != "tls":
		d.errorf(v.Pos, f, "unknown backend scheme %s in %s (%s)", shortQuote(scheme), shortQuote(s), want)
		return "", "", false
	}
	if msg := checkDialAddr(rest); msg != "" {
		d.errorf(v.Pos, f, "%s in backend %s (%s)", msg, shortQuote(s), want)
		return "", "", false
	}
	if origin {
		return BackendTLS, s, true
	}
	return BackendTCP, s, true
}

// checkDialAddr returns what is wrong with a backend's HOST:PORT, or "".
// The host is an IP address or a DNS name, and is required.
func checkDialAddr(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("invalid address %s (want HOST:PORT, with an IPv6 address in brackets)", shortQuote(s))
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Sprintf("invalid port %s (want 1..65535)", shortQuote(port))
	}
	if host == "" {
		return "no host"
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	if msg := checkServerName(host); msg != "" {
		return fmt.Sprintf("invalid host %s", shortQuote(host))
	}
	return ""
}

// checkServerName returns what is wrong with a DNS name (an origin's
// server_name, a backend's host), or "".
func checkServerName(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > 253 {
		return fmt.Sprintf("name of %d bytes (a DNS name has at most 253)", len(s))
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		ok := label != "" && len(label) <= 63 && label[0] != '-' && label[len(label)-1] != '-'
		for i := 0; ok && i < len(label); i++ {
			c := label[i]
			ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
		}
		if !ok {
			return fmt.Sprintf("invalid DNS name %s (want letters, digits and hyphens in dot-separated labels, e.g. \"api.example.com\")", shortQuote(s))
		}
	}
	return ""
}

// checkTLSListen returns what is wrong with a TLS section's listen
// address, or "": "host:port", where host may be empty (IPv4's every
// address), an IP address or a host name, and port is 0..65535; port 0 takes a free
// port, which `sluice stats` shows (for tests and demos: clients cannot
// know it in advance).
func checkTLSListen(s string) string {
	const want = `want "host:port" such as "0.0.0.0:8443", "[::]:8443", "127.0.0.1:9080" or ":8443"`
	if s == "" {
		return "empty listen address (" + want + ")"
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("invalid listen address %s (%s)", shortQuote(s), want)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Sprintf("invalid port %s in %s (want 1..65535, or 0 for a free port)", shortQuote(port), shortQuote(s))
	}
	if host == "" {
		return ""
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.IsMulticast() {
			return fmt.Sprintf("cannot listen on multicast address %s", a)
		}
		if a.Zone() != "" {
			return fmt.Sprintf("invalid address %s in %s: zones are not supported", shortQuote(host), shortQuote(s))
		}
		return ""
	}
	if checkServerName(host) != "" {
		return fmt.Sprintf("invalid host %s in %s (%s)", shortQuote(host), shortQuote(s), want)
	}
	return ""
}

// The second pass.

// crossCheckTLS checks what the TLS sections say about each other: names
// unique across [[tls]] and [[tls_origin]], and no two listeners (nor the
// metrics endpoint) on one address.
func (d *gwDecoder) crossCheckTLS() {
	g := d.g
	type named struct {
		field, name, listen string
		dual                bool
	}
	var all []named
	for i := range g.TLS {
		all = append(all, named{d.tlsFields[i], g.TLS[i].Name, g.TLS[i].Listen, g.TLS[i].DualStack})
	}
	for i := range g.TLSOrigins {
		all = append(all, named{d.originFields[i], g.TLSOrigins[i].Name, g.TLSOrigins[i].Listen, g.TLSOrigins[i].DualStack})
	}
	seen := map[string]int{}
	for i, n := range all {
		f := n.field + ".name"
		if n.name == "" || d.failed(f) {
			continue
		}
		if j, dup := seen[n.name]; dup {
			d.errorf(d.at(f), f, "duplicate TLS name %s: %s (line %d) and %s (line %d); names are unique among [[tls]] and [[tls_origin]]",
				shortQuote(n.name), all[j].field, d.at(all[j].field+".name").Line, n.field, d.at(f).Line)
			continue
		}
		seen[n.name] = i
	}
	// Addresses: the metrics endpoint first, so that a listener on its
	// address is the one reported.
	type bound struct {
		field, addr string
		dual        bool
	}
	var binds []bound
	if g.Metrics != "" && !d.failed("gateway.metrics") {
		// The metrics endpoint is net/http's: its wildcards bind both
		// families.
		binds = append(binds, bound{"gateway.metrics", g.Metrics, true})
	}
	for _, n := range all {
		f := n.field + ".listen"
		if n.listen == "" || d.failed(f) {
			continue
		}
		for _, b := range binds {
			if listenClash(b.addr, b.dual, n.listen, n.dual) {
				d.errorf(d.at(f), f, "%s clashes with %s %s (%s): two listeners cannot share an address and port",
					shortQuote(n.listen), b.field, shortQuote(b.addr), d.line(b.field))
				break
			}
		}
		binds = append(binds, bound{f, n.listen, n.dual})
	}
}

// listenClash reports whether two "host:port" listen addresses cannot both
// be bound: the same port, and on a family both bind, the same address or
// either on every address of it. dual says that a wildcard binds both
// families (ipv6_only = false on "[::]"). A host name clashes with the
// same name and with any wildcard.
func listenClash(a string, aDual bool, b string, bDual bool) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	na, _ := strconv.ParseUint(pa, 10, 16)
	nb, _ := strconv.ParseUint(pb, 10, 16)
	if na != nb || na == 0 {
		return false // port 0: each gets a free port of its own
	}
	sa, okA := bindSpanOf(ha, aDual)
	sb, okB := bindSpanOf(hb, bDual)
	if !okA || !okB {
		wild := func(s bindSpan, ok bool) bool { return ok && s.any }
		return wild(sa, okA) || wild(sb, okB) || !okA && !okB && strings.EqualFold(ha, hb)
	}
	same := sa.any || sb.any || sa.addr == sb.addr
	return same && (sa.v4 && sb.v4 || sa.v6 && sb.v6)
}

// bindSpan is what a listen host binds: its families, and one address of
// them or every address.
type bindSpan struct {
	v4, v6 bool
	any    bool
	addr   netip.Addr
}

// bindSpanOf returns what host binds, as package tls listens; false for
// a host name.
func bindSpanOf(host string, dual bool) (bindSpan, bool) {
	if host == "" {
		return bindSpan{v4: true, v6: dual, any: true}, true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return bindSpan{}, false
	}
	a = a.Unmap()
	s := bindSpan{v4: a.Is4(), v6: a.Is6(), any: a.IsUnspecified(), addr: a}
	if s.any && dual {
		s.v4, s.v6 = true, true
	}
	return s, true
}

// tlsOnlySections reports the IPsec sections of a file without any
// [[tunnel]] but with TLS sections: such a gateway is TLS-only, and has no
// TUN device, sockets, policies or SAs for them to configure.
func (d *gwDecoder) tlsOnlySections() {
	for _, s := range []string{"tun", "udp", "rawesp", "policy", "sa", "ike", "pool", "secret"} {
		if !d.has(s) {
			continue
		}
		head := "[" + s + "]"
		if s == "policy" || s == "sa" || s == "pool" {
			head = "[" + head + "]"
		}
		d.errorf(d.at(s), s, "%s without any [[tunnel]]: a gateway with only [[tls]] and [[tls_origin]] sections is TLS-only and has no ESP data plane (add a [[tunnel]], or remove %s)", head, head)
	}
}
