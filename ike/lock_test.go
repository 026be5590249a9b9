package ike

import (
	"sync/atomic"
	"testing"
	"time"
)

// lockFree fails t unless e answers a call (takes its lock) within five
// seconds.
func lockFree(t *testing.T, e *Endpoint, what string) {
	t.Helper()
	stats := make(chan Stats, 1)
	go func() { stats <- e.Stats() }()
	select {
	case <-stats:
	case <-time.After(5 * time.Second):
		t.Fatalf("the Endpoint's lock is held while %s", what)
	}
}

// TestIKERekeyDHOffLock: the requester's Diffie-Hellman of an IKE SA
// rekey (g^ir when the answer comes) runs without the Endpoint's lock: while
// it is blocked, the Endpoint answers calls; once it finishes, the rekey
// completes and the Child SA is carried over.
func TestIKERekeyDHOffLock(t *testing.T) {
	// The responder's is still under the lock (ikeRekeyTask).
	for _, side := range []string{"initiator"} {
		t.Run(side, func(t *testing.T) {
			pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
			g := newGate(t)
			defer g.open() // before the pair's cleanup, which takes the lock
			var armed atomic.Bool
			slow := func(c *Config) {
				c.newDH = func(group uint16) (DH, error) {
					d, err := NewDH(group)
					if armed.Load() {
						return slowDH{d, g}, err
					}
					return d, err
				}
			}
			p := newPair(t, pa, pb, func(a, b *Config) {
				if side == "responder" {
					slow(b)
				} else {
					slow(a)
				}
			})
			c, err := p.a.Initiate(ctx(t), "to-b")
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, settled(p))
			armed.Store(true)
			done := make(chan error, 1)
			go func() { done <- p.a.RekeyIKE(ctx(t), c) }()
			slowSide := p.b
			if side == "initiator" {
				slowSide = p.a
			}
			select {
			case <-g.waiting:
			case err := <-done:
				t.Fatalf("the IKE SA rekey ended (%v) without the %s's DH", err, side)
			case <-time.After(5 * time.Second):
				t.Fatalf("the %s's DH for the IKE SA rekey did not start", side)
			}
			lockFree(t, slowSide, "the "+side+"'s DH of an IKE SA rekey runs")
			g.open()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			waitFor(t, settled(p))
			checkPair(t, p)
			if s := p.a.Stats(); s.IKESARekeyed != 1 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// dumpSAs is a debugging aid: the IKE SAs of e.
func dumpSAs(t *testing.T, name string, e *Endpoint) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for spi, sa := range e.sas {
		pk := -1
		if sa.pending != nil {
			pk = int(sa.pending.kind)
		}
		t.Logf("%s: sa %016x init=%v state=%v rekeying=%v rekeyed=%v removed=%v job=%d pending=%d children=%d queue=%d backlog=%d waits=%v peerRekey=%v",
			name, spi, sa.initiator, sa.state, sa.rekeying, sa.rekeyed, sa.removed, sa.job, pk, len(sa.children), len(sa.queue), len(sa.backlog), sa.waitsFor != nil, sa.peerRekey != nil)
	}
	t.Logf("%s: children %d stats %+v", name, len(e.children), e.stats)
}

func waitUntil(f func() bool) bool {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return false
}
