package ike

import (
	"log/slog"
	"testing"
)

// MemPair is two endpoints joined in memory (endpoint_test.go's memNet),
// for the tests of package ike_test that need the config package (which
// package ike's own tests cannot import): A initiates as its peer, B
// answers.
type MemPair struct {
	A, B *Endpoint
	p    *pair
}

// NewMemPair starts A with peer pa and B with peer pb, both logging to
// log (nil: discard), and sets their addresses: pa from 192.0.2.1 to
// 192.0.2.2, pb answering on 192.0.2.2 for any remote.
func NewMemPair(t *testing.T, pa, pb *Peer, log *slog.Logger) *MemPair {
	pa.Local, pa.Remote, pb.Local = addrA, addrB, addrB
	p := newPair(t, pa, pb, func(a, b *Config) {
		if log != nil {
			a.Log, b.Log = log.With("side", "a"), log.With("side", "b")
		}
	})
	return &MemPair{A: p.a, B: p.b, p: p}
}

// RespChild waits (5 s at most) for B's newest Child SA.
func (m *MemPair) RespChild(t *testing.T) *ChildSA { return m.p.respChild(t) }

// LogBuffer collects the log lines of both endpoints of a pair (log_test.go's logBuffer).
type LogBuffer = logBuffer

// Lines returns the lines holding every one of parts.
func (l *logBuffer) Lines(parts ...string) []string { return l.lines(parts...) }
