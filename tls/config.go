package tls

import (
	gotls "crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"
)

// DefaultHeaderTimeout bounds the time a static backend waits for a
// request head once its first byte arrived (slowloris).
const DefaultHeaderTimeout = 10 * time.Second

// normListener returns c with its defaults filled in, or an error naming
// the field that is wrong.
func normListener(c ListenerConfig) (ListenerConfig, error) {
	bad := func(f string, a ...any) (ListenerConfig, error) {
		return c, &EndpointError{Kind: "listener", Name: c.Name, Err: fmt.Errorf(f, a...)}
	}
	if c.Name == "" {
		return c, fmt.Errorf("tls: listener on %q has no name", c.Listen)
	}
	if err := checkListen(c.Listen, c.DualStack); err != nil {
		return bad("%v", err)
	}
	if len(c.Certs) == 0 {
		return bad("no certificate")
	}
	var err error
	if c.MinVersion, c.MaxVersion, err = normVersions(c.MinVersion, c.MaxVersion); err != nil {
		return bad("%v", err)
	}
	switch c.ClientAuth {
	case "":
		c.ClientAuth = ClientAuthNone
	case ClientAuthNone, ClientAuthOptional, ClientAuthRequire:
	default:
		return bad("client_auth %q (valid: none, optional, require)", c.ClientAuth)
	}
	if c.ClientAuth != ClientAuthNone && c.ClientCA == "" {
		return bad("client_auth %q needs a client_ca", c.ClientAuth)
	}
	if c.TicketRotation == 0 {
		c.TicketRotation = DefaultTicketRotation
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.HeaderTimeout == 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.TicketRotation < 0 || c.HandshakeTimeout < 0 || c.IdleTimeout < 0 || c.HeaderTimeout < 0 || c.MaxConns < 0 {
		return bad("negative timeout or max_conns")
	}
	if c.MaxConnsPerSource, err = normPerSource(c.MaxConnsPerSource, c.MaxConns); err != nil {
		return bad("%v", err)
	}
	switch {
	case strings.HasPrefix(c.Backend, "static:"):
		dir := strings.TrimPrefix(c.Backend, "static:")
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() {
			return bad("backend %q: not a directory", c.Backend)
		}
		if c.ProxyProtocol {
			return bad("proxy_protocol needs a tcp:// backend")
		}
	case strings.HasPrefix(c.Backend, "tcp://"):
		if _, _, err := net.SplitHostPort(strings.TrimPrefix(c.Backend, "tcp://")); err != nil {
			return bad("backend %q: %v", c.Backend, err)
		}
	default:
		return bad("backend %q (valid: static:DIR, tcp://HOST:PORT)", c.Backend)
	}
	c.ALPN = slices.Clone(c.ALPN)
	c.Certs = slices.Clone(c.Certs)
	return c, nil
}

// normOrigin is normListener for an origin.
func normOrigin(c OriginConfig) (OriginConfig, error) {
	bad := func(f string, a ...any) (OriginConfig, error) {
		return c, &EndpointError{Kind: "origin", Name: c.Name, Err: fmt.Errorf(f, a...)}
	}
	if c.Name == "" {
		return c, fmt.Errorf("tls: origin on %q has no name", c.Listen)
	}
	if err := checkListen(c.Listen, c.DualStack); err != nil {
		return bad("%v", err)
	}
	hp, ok := strings.CutPrefix(c.Backend, "tls://")
	host, _, err := net.SplitHostPort(hp)
	if !ok || err != nil {
		return bad("backend %q (valid: tls://HOST:PORT)", c.Backend)
	}
	if c.ServerName == "" {
		c.ServerName = host
	}
	if c.MinVersion, c.MaxVersion, err = normVersions(c.MinVersion, c.MaxVersion); err != nil {
		return bad("%v", err)
	}
	if c.Cert != nil && (c.Cert.CertFile == "" || c.Cert.KeyFile == "") {
		return bad("a client certificate needs both cert and key")
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.HandshakeTimeout < 0 || c.IdleTimeout < 0 || c.MaxConns < 0 {
		return bad("negative timeout or max_conns")
	}
	if c.MaxConnsPerSource, err = normPerSource(c.MaxConnsPerSource, c.MaxConns); err != nil {
		return bad("%v", err)
	}
	c.ALPN = slices.Clone(c.ALPN)
	if c.Cert != nil {
		cc := *c.Cert
		c.Cert = &cc
	}
	return c, nil
}

// normPerSource returns a per-source limit with its default filled in.
func normPerSource(n, maxConns int) (int, error) {
	switch {
	case n == 0:
		return DefaultMaxConnsPerSource(maxConns), nil
	case n < 0 || n > maxConns:
		return 0, fmt.Errorf("max_conns_per_source %d (want 1..max_conns %d)", n, maxConns)
	}
	return n, nil
}

// checkListen checks a listen address and its DualStack setting.
func checkListen(listen string, dual bool) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("listen %q: %v", listen, err)
	}
	if a, err := netip.ParseAddr(host); dual && (err != nil || !a.Is6() || !a.IsUnspecified()) {
		return fmt.Errorf("dual stack needs listen on [::], not %q", listen)
	}
	return nil
}

func normVersions(lo, hi uint16) (uint16, uint16, error) {
	if lo == 0 {
		lo = gotls.VersionTLS12
	}
	if hi == 0 {
		hi = gotls.VersionTLS13
	}
	for _, v := range []uint16{lo, hi} {
		if v != gotls.VersionTLS12 && v != gotls.VersionTLS13 {
			return 0, 0, fmt.Errorf("version %#04x (valid: TLS 1.2, TLS 1.3)", v)
		}
	}
	if lo > hi {
		return 0, 0, fmt.Errorf("min version %s above max %s", gotls.VersionName(lo), gotls.VersionName(hi))
	}
	return lo, hi, nil
}
