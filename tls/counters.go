package tls

import (
	"context"
	gotls "crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Handshake failure reasons (Stats.HandshakeFailures keys).
const (
	failTimeout    = "timeout"
	failProtocol   = "protocol"
	failVersion    = "version"
	failNoCert     = "no_cert"
	failClientCert = "client_cert"
	failServerCert = "server_cert"
	failSign       = "sign"
	failClosed     = "closed"
)

var failReasons = [...]string{failTimeout, failProtocol, failVersion, failNoCert, failClientCert, failServerCert, failSign, failClosed}

// FailureReasons lists the keys of Stats.HandshakeFailures in a stable
// order (for metrics that want every series from the start).
func FailureReasons() []string { return append([]string(nil), failReasons[:]...) }

// counters are one listener's or origin's counters. Every field is
// updated atomically by connection goroutines and read by Stats; they
// survive a reload of their listener.
type counters struct {
	open, accepted, refused  atomic.Uint64
	refusedSource            atomic.Uint64
	handshakes, resumed      atomic.Uint64
	failures                 [len(failReasons)]atomic.Uint64
	bytesIn, bytesOut        atomic.Uint64
	idleClosed               atomic.Uint64
	headerTimeouts, requests atomic.Uint64
	dotfiles                 atomic.Uint64
	backend                  atomic.Uint64
}

func (c *counters) fail(reason string) {
	for i, r := range failReasons {
		if r == reason {
			c.failures[i].Add(1)
			return
		}
	}
	c.failures[1].Add(1)
}

func (c *counters) fill(s *Stats) {
	s.Open = c.open.Load()
	s.Accepted = c.accepted.Load()
	s.Refused = c.refused.Load()
	s.RefusedPerSource = c.refusedSource.Load()
	s.Handshakes = c.handshakes.Load()
	s.Resumed = c.resumed.Load()
	s.HandshakeFailures = make(map[string]uint64, len(failReasons))
	for i, r := range failReasons {
		s.HandshakeFailures[r] = c.failures[i].Load()
	}
	s.BytesIn = c.bytesIn.Load()
	s.BytesOut = c.bytesOut.Load()
	s.IdleClosed = c.idleClosed.Load()
	s.HeaderTimeouts = c.headerTimeouts.Load()
	s.Requests = c.requests.Load()
	s.DotfilesRefused = c.dotfiles.Load()
	s.BackendFailures = c.backend.Load()
}

// classify names the reason a handshake failed. ctx is the handshake's.
func classify(err error, ctx context.Context) string {
	var (
		recErr  gotls.RecordHeaderError
		alert   gotls.AlertError
		verify  *gotls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		host    x509.HostnameError
	)
	switch {
	case errors.Is(err, errSign):
		return failSign
	case errors.Is(err, errNoCert):
		return failNoCert
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		ctx != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return failTimeout
	case errors.As(err, &recErr):
		return failProtocol
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &host):
		return failClientCert
	case errors.As(err, &alert):
		if alert == 70 { // protocol_version
			return failVersion
		}
		if alert == 42 || alert == 43 || alert == 44 || alert == 45 || alert == 46 || alert == 48 {
			return failClientCert // the peer refused our certificate
		}
		return failProtocol
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, context.Canceled):
		return failClosed
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "protocol version"), strings.Contains(msg, "unsupported versions"):
		return failVersion
	case strings.Contains(msg, "certificate"):
		return failClientCert
	}
	return failProtocol
}

// backendFailed counts a connection whose backend could not be reached
// (refused, unresolvable, unreachable, timed out, or the PROXY header not
// written) and logs it at WARN with the listener or origin and the
// backend's address, as nginx's "connect() failed (111: Connection
// refused) while connecting to upstream". Lines are at most one a second
// an endpoint: the next says how many were left out.
func (e *endpoint) backendFailed(client net.Addr, backend string, err error) {
	e.ctr.backend.Add(1)
	now := time.Now()
	e.warnMu.Lock()
	if !e.warnLast.IsZero() && now.Sub(e.warnLast) < time.Second {
		e.warnSkipped++
		e.warnMu.Unlock()
		return
	}
	skipped := e.warnSkipped
	e.warnLast, e.warnSkipped = now, 0
	e.warnMu.Unlock()
	args := []any{e.attrKey(), e.name, "backend", backend, "client", client.String(), "err", err}
	if skipped > 0 {
		args = append(args, "not_logged", skipped)
	}
	e.svc.log.Warn("tls: backend connect failed", args...)
}

// attrKey is the attribute key naming the endpoint: "listener" or "origin".
func (e *endpoint) attrKey() string {
	if e.kind == "terminate" {
		return "listener"
	}
	return "origin"
}

// handshakeFailed counts a failed handshake under reason and logs it at
// debug: one line a connection, which a scan or a flood makes many of.
func (e *endpoint) handshakeFailed(client net.Addr, reason string, err error) {
	e.ctr.fail(reason)
	e.svc.log.Debug("tls: handshake failed", e.attrKey(), e.name, "client", client.String(), "reason", reason, "err", err)
}
