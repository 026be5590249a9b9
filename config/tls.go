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
	"reflect"
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
	// certificate; it defaults to HOST of Backend. An IP address is
	// verified against the certificate's IP addresses and not sent.
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

var clientAuths = []string{ClientAuthNone, ClientAuthOptional, ClientAuthRequire}

// path resolves a file name of the configuration against its directory.
func (d *gwDecoder) path(s string) string {
	if s == "" || filepath.IsAbs(s) {
		return s
	}
	return filepath.Join(filepath.Dir(d.g.File), s)
}

// tlsCommonAfter checks, once a table's keys are all read, what its
// shared keys say together: ipv6_only = false needs listen on "[::]",
// max_conns_per_source is at most max_conns.
func (d *gwDecoder) tlsCommonAfter(c *TLSCommon, f string, seen map[string]bool) {
	if seen["max_conns_per_source"] && c.MaxConnsPerSource > c.MaxConns && !d.failed(f+".max_conns") {
		d.errorf(d.at(f+".max_conns_per_source"), f+".max_conns_per_source", "max_conns_per_source %d above max_conns %d (%s)", c.MaxConnsPerSource, c.MaxConns, d.where(f+".max_conns"))
	}
	if !seen["ipv6_only"] || !c.DualStack || c.Listen == "" || d.failed(f+".listen") {
		return
	}
	host, port, _ := net.SplitHostPort(c.Listen)
	if a, err := netip.ParseAddr(host); err != nil || !a.Is6() || !a.IsUnspecified() || a.Zone() != "" {
		d.errorf(d.at(f+".ipv6_only"), f+".ipv6_only", "ipv6_only = false with listen %s: only \"[::]:PORT\" can bind IPv4 too (to listen on both families, write listen = %q)",
			shortQuote(c.Listen), net.JoinHostPort("::", port))
	}
}

// tlsCommonRules are the keys [[tls]] and [[tls_origin]] share, by key,
// for a model T whose TLSCommon common returns; what names the table's
// kind in messages ("a TLS listener").
func tlsCommonRules[T any](common func(*T) *TLSCommon, what string) map[string]rule[T] {
	rules := []rule[T]{
		field("name", nameOf("empty name ("+what+" needs a name, unique among [[tls]] and [[tls_origin]])"), "", func(x *T) *string { return &common(x).Name }),
		field("listen", checkedText(checkTLSListen), "", func(x *T) *string { return &common(x).Listen }),
		// ipv6_only is the opposite of DualStack.
		rule[T]{key: "ipv6_only", read: func(d *gwDecoder, f string, e *Entry, x *T) bool {
			b, ok := d.boolean(f, e.Value)
			if ok {
				common(x).DualStack = !b
			}
			return ok
		}, write: func(x *T) (any, bool) { return false, common(x).DualStack }},
		field("engine", engineName(`"" uses the [gateway] engine`), "", func(x *T) *string { return &common(x).Engine }),
		rule[T]{key: "versions", read: func(d *gwDecoder, f string, e *Entry, x *T) bool {
			lo, hi, ok := d.tlsVersions(f, e.Value)
			if ok {
				common(x).MinVersion, common(x).MaxVersion = lo, hi
			}
			return ok
		}, init: func(x *T) {
			common(x).MinVersion, common(x).MaxVersion = cryptotls.VersionTLS12, cryptotls.VersionTLS13
		},
			write: func(x *T) (any, bool) {
				c := common(x)
				var vs []string
				for _, v := range []struct {
					ver  uint16
					name string
				}{{cryptotls.VersionTLS12, "1.2"}, {cryptotls.VersionTLS13, "1.3"}} {
					if c.MinVersion <= v.ver && v.ver <= c.MaxVersion {
						vs = append(vs, v.name)
					}
				}
				return vs, len(vs) == 1
			}},
		field("alpn", codec[[]string]{read: func(d *gwDecoder, f string, e *Entry) ([]string, bool) { return d.alpn(f, e.Value) }, write: asIs[[]string]},
			nil, func(x *T) *[]string { return &common(x).ALPN }),
		field("handshake_timeout", tlsDuration("handshake_timeout"), DefaultTLSHandshakeTimeout, func(x *T) *time.Duration { return &common(x).HandshakeTimeout }),
		field("idle_timeout", tlsDuration("idle_timeout"), DefaultTLSIdleTimeout, func(x *T) *time.Duration { return &common(x).IdleTimeout }),
		field("max_conns", intIn[int]("", 1, MaxTLSMaxConns, fmt.Sprintf("1..%d; default %d", MaxTLSMaxConns, DefaultTLSMaxConns)), DefaultTLSMaxConns, func(x *T) *int { return &common(x).MaxConns }),
		field("max_conns_per_source", intIn[int]("", 1, MaxTLSMaxConns, "1..max_conns; default a tenth of max_conns, at least 100"), 0, func(x *T) *int { return &common(x).MaxConnsPerSource }),
	}
	m := make(map[string]rule[T], len(rules))
	for _, r := range rules {
		m[r.key] = r
	}
	return m
}

// tlsDuration reads the duration key of a TLS section (see
// decoder.tlsDuration).
func tlsDuration(key string) codec[time.Duration] {
	return codec[time.Duration]{
		read:  func(d *gwDecoder, f string, e *Entry) (time.Duration, bool) { return d.tlsDuration(f, key, e.Value) },
		write: func(t time.Duration) any { return shortDuration(t) },
	}
}

// tlsSide is a [[tls]] being read: what the checks across its keys need.
type tlsSide struct {
	TLSListener
	authBad, backendOK bool
}

// tlsRules are the keys of a [[tls]], the shared ones (tlsCommonRules)
// among them.
var tlsRules = func() *section[tlsSide] {
	c := tlsCommonRules(func(l *tlsSide) *TLSCommon { return &l.TLSCommon }, "a TLS listener")
	return newSection(reflect.TypeFor[FileTLS](),
		c["name"].required("a name, unique among [[tls]] and [[tls_origin]]"),
		c["listen"].required(`the address to listen on, e.g. "0.0.0.0:8443"`),
		c["ipv6_only"],
		rule[tlsSide]{key: "backend", read: func(d *gwDecoder, f string, e *Entry, l *tlsSide) bool {
			kind, s, ok := d.backend(f, e.Value, false)
			if ok {
				l.BackendKind, l.Backend, l.backendOK = kind, s, true
			}
			return ok
		}, write: func(l *tlsSide) (any, bool) { return l.Backend, l.Backend != "" }}.required(`"static:DIR" to serve files, or "tcp://HOST:PORT" to forward the plaintext stream`),
		field("proxy_protocol", flag(), false, func(l *tlsSide) *bool { return &l.ProxyProtocol }),
		c["engine"],
		c["versions"],
		c["alpn"],
		rule[tlsSide]{key: "client_auth", read: func(d *gwDecoder, f string, e *Entry, l *tlsSide) bool {
			s, ok := d.oneOf(f, e.Value, "client_auth", clientAuths, "")
			if ok {
				l.ClientAuth = s
			}
			l.authBad = !ok
			return ok
		}, init: func(l *tlsSide) { l.ClientAuth = ClientAuthNone }, write: func(l *tlsSide) (any, bool) { return l.ClientAuth, l.ClientAuth != ClientAuthNone }},
		field("client_ca", tlsPath("empty path (want a PEM bundle of the CAs that issue client certificates)"), "", func(l *tlsSide) *string { return &l.ClientCA }),
		field("session_tickets", flag(), true, func(l *tlsSide) *bool { return &l.SessionTickets }),
		field("ticket_rotation", tlsDuration("ticket_rotation"), DefaultTLSTicketRotation, func(l *tlsSide) *time.Duration { return &l.TicketRotation }),
		c["handshake_timeout"],
		c["idle_timeout"],
		field("header_timeout", tlsDuration("header_timeout"), DefaultTLSHeaderTimeout, func(l *tlsSide) *time.Duration { return &l.HeaderTimeout }),
		c["max_conns"],
		c["max_conns_per_source"],
		field("serve_dotfiles", flag(), false, func(l *tlsSide) *bool { return &l.ServeDotfiles }),
		field("cert", codec[[]TLSCert]{read: (*gwDecoder).tlsCerts, write: func(cs []TLSCert) any { return tableList(tlsCertRules, nil).write(cs) }},
			nil, func(l *tlsSide) *[]TLSCert { return &l.Certs }),
	)
}()

// tlsCertRules are the keys of a [[tls.cert]].
var tlsCertRules = newSection(reflect.TypeFor[FileTLSCert](),
	field("cert", tlsPath("empty path (want a PEM file: the certificate, then its intermediates)"), "", func(c *TLSCert) *string { return &c.Cert }).required("a PEM file: the certificate, then its intermediates"),
	field("key", tlsPath("empty path (want the PEM private key of the certificate)"), "", func(c *TLSCert) *string { return &c.Key }).required("the PEM private key of the certificate"),
)

// originSide is a [[tls_origin]] being read: its cert and key, which
// go together, and whether its backend read.
type originSide struct {
	TLSOrigin
	cert, key string
	backendOK bool
}

// tlsOriginRules are the keys of a [[tls_origin]].
var tlsOriginRules = func() *section[originSide] {
	c := tlsCommonRules(func(o *originSide) *TLSCommon { return &o.TLSCommon }, "a TLS origin")
	// A file name of an origin: any string, resolved.
	file := func(key string, dst func(o *originSide) *string) rule[originSide] {
		return field(key, codec[string]{read: func(d *gwDecoder, f string, e *Entry) (string, bool) {
			s, ok := d.str(f, e.Value)
			return d.path(s), ok
		}, write: asIs[string]}, "", dst)
	}
	return newSection(reflect.TypeFor[FileTLSOrigin](),
		c["name"].required("a name, unique among [[tls]] and [[tls_origin]]"),
		c["listen"].required(`the plaintext address to listen on, e.g. "127.0.0.1:9080"`),
		c["ipv6_only"],
		rule[originSide]{key: "backend", read: func(d *gwDecoder, f string, e *Entry, o *originSide) bool {
			_, s, ok := d.backend(f, e.Value, true)
			if ok {
				o.Backend, o.backendOK = s, true
			}
			return ok
		}, write: func(o *originSide) (any, bool) { return o.Backend, o.Backend != "" }}.required(`the TLS server to carry connections to, e.g. "tls://api.example.com:443"`),
		field("server_name", checkedText(checkOriginServerName), "", func(o *originSide) *string { return &o.ServerName }),
		file("ca", func(o *originSide) *string { return &o.CA }),
		file("cert", func(o *originSide) *string { return &o.cert }),
		file("key", func(o *originSide) *string { return &o.key }),
		c["engine"],
		c["versions"],
		c["alpn"],
		c["handshake_timeout"],
		c["idle_timeout"],
		c["max_conns"],
		c["max_conns_per_source"],
	)
}()

// tlsPath reads a file name of a TLS section, resolved against the
// configuration's directory; empty is the message for "".
func tlsPath(empty string) codec[string] {
	return codec[string]{read: func(d *gwDecoder, f string, e *Entry) (string, bool) {
		s, ok := d.checked(f, e.Value, nonEmpty(empty))
		return d.path(s), ok
	}, write: asIs[string]}
}

// ToFile returns the listener as a [[tls]] that ParseGateway reads back
// into l.
func (l *TLSListener) ToFile() FileTLS {
	return tlsRules.encode(&tlsSide{TLSListener: *l}).Interface().(FileTLS)
}

// ToFile returns the origin as a [[tls_origin]] that ParseGateway reads
// back into o.
func (o *TLSOrigin) ToFile() FileTLSOrigin {
	x := originSide{TLSOrigin: *o}
	if o.Cert != nil {
		x.cert, x.key = o.Cert.Cert, o.Cert.Key
	}
	return tlsOriginRules.encode(&x).Interface().(FileTLSOrigin)
}

func (d *gwDecoder) tlsListener(te tableElem) {
	l := decodeElem(d, tlsRules, te, (*gwDecoder).tlsListenerAfter)
	d.g.TLS = append(d.g.TLS, l.TLSListener)
	d.tlsFields = append(d.tlsFields, te.field)
}

// tlsListenerAfter checks a listener once its keys are read: what its
// keys say of each other.
func (d *gwDecoder) tlsListenerAfter(te tableElem, seen map[string]bool, l *tlsSide) {
	f := te.field
	at := func(key string) Pos { return d.at(f + "." + key) }
	d.tlsCommonAfter(&l.TLSCommon, f, seen)
	if !seen["cert"] {
		d.errorf(te.pos, f+".cert", "missing required [[tls.cert]] (at least one, with cert and key: the first is served to clients without a matching SNI)")
	}
	if seen["proxy_protocol"] && l.ProxyProtocol && l.backendOK && l.BackendKind != BackendTCP {
		d.errorf(at("proxy_protocol"), f+".proxy_protocol", "proxy_protocol with backend %s: the PROXY header goes only to a tcp:// backend", shortQuote(l.Backend))
	}
	if seen["header_timeout"] && l.backendOK && l.BackendKind != BackendStatic {
		d.errorf(at("header_timeout"), f+".header_timeout", "header_timeout with backend %s: only a static: backend reads request heads", shortQuote(l.Backend))
	}
	if seen["serve_dotfiles"] && l.ServeDotfiles && l.backendOK && l.BackendKind != BackendStatic {
		d.errorf(at("serve_dotfiles"), f+".serve_dotfiles", "serve_dotfiles with backend %s: only a static: backend serves files", shortQuote(l.Backend))
	}
	if !l.authBad {
		switch {
		case l.ClientAuth != ClientAuthNone && !seen["client_ca"]:
			d.errorf(d.at(f+".client_auth"), f+".client_ca", "missing required key for client_auth = %q (a PEM bundle of the CAs that issue client certificates)", l.ClientAuth)
		case l.ClientAuth == ClientAuthNone && seen["client_ca"]:
			d.errorf(at("client_ca"), f+".client_ca", "client_ca with client_auth = \"none\": no client certificate is asked for (set client_auth = \"optional\" or \"require\", or remove client_ca)")
		}
	}
	if seen["ticket_rotation"] && !l.SessionTickets && !d.failed(f+".session_tickets") {
		d.errorf(at("ticket_rotation"), f+".ticket_rotation", "ticket_rotation with session_tickets = false: there are no ticket keys to rotate")
	}
}

// tlsCerts reads the [[tls.cert]] tables of a listener.
func (d *gwDecoder) tlsCerts(f string, e *Entry) ([]TLSCert, bool) {
	v := e.Value
	if v.Kind == KindTable {
		d.errorf(v.Pos, f, "want an array of tables, got table (write [[tls.cert]], not [tls.cert])")
		return nil, false
	}
	if v.Kind == KindString {
		d.errorf(v.Pos, f, "want an array of tables, got string (write the certificate in its own table: [[tls.cert]] with cert = \"site.pem\" and key = \"site.key\")")
		return nil, false
	}
	tables, ok := d.arrayOfTables(f, v)
	if !ok {
		return nil, false
	}
	if len(tables) == 0 {
		if elems, _ := v.Array(); len(elems) == 0 {
			d.errorf(v.Pos, f, "no certificate (want at least one [[tls.cert]] with cert and key)")
		}
		return nil, false
	}
	var out []TLSCert
	for _, te := range tables {
		out = append(out, decodeElem(d, tlsCertRules, te, nil))
	}
	return out, true
}

func (d *gwDecoder) tlsOrigin(te tableElem) {
	o := decodeElem(d, tlsOriginRules, te, (*gwDecoder).tlsOriginAfter)
	d.g.TLSOrigins = append(d.g.TLSOrigins, o.TLSOrigin)
	d.originFields = append(d.originFields, te.field)
}

// tlsOriginAfter checks an origin once its keys are read.
func (d *gwDecoder) tlsOriginAfter(te tableElem, seen map[string]bool, o *originSide) {
	f := te.field
	d.tlsCommonAfter(&o.TLSCommon, f, seen)
	// cert and key: both or neither. An empty string is "not given".
	switch {
	case o.cert != "" && o.key == "" && !d.failed(f+".key"):
		d.errorf(d.at(f+".cert"), f+".key", "cert without key: a client certificate needs its private key (give both, or neither)")
	case o.key != "" && o.cert == "" && !d.failed(f+".cert"):
		d.errorf(d.at(f+".key"), f+".cert", "key without cert: give the client certificate too (both, or neither)")
	case o.cert != "":
		o.Cert = &TLSCert{Cert: o.cert, Key: o.key}
	}
	if o.ServerName == "" && o.backendOK {
		host, _, _ := net.SplitHostPort(strings.TrimPrefix(o.Backend, "tls://"))
		if a, err := netip.ParseAddr(host); err == nil {
			host = a.WithZone("").String() // a certificate names the address alone
		}
		o.ServerName = host
	}
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

// checkOriginServerName returns what is wrong with an origin's
// server_name, or "": a DNS name, or an IP address (no zone), which the
// backend's certificate must carry among its IP addresses (no SNI is
// sent then). It is what server_name defaults to with an IP backend.
func checkOriginServerName(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return fmt.Sprintf("invalid address %s: zones are not supported (a certificate names the address alone)", shortQuote(s))
		}
		return ""
	}
	if checkServerName(s) != "" {
		return fmt.Sprintf("invalid server name %s (want a DNS name, letters, digits and hyphens in dot-separated labels such as \"api.example.com\", or an IP address)", shortQuote(s))
	}
	return ""
}

// checkServerName returns what is wrong with a DNS name (an origin's
// server_name, a backend's host, a listener's host), or "".
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
