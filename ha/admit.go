package ha

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Admission to the sync listener. Only the configured peer may connect
// (as keepalived takes VRRP only from its unicast_peer addresses): a
// connection from any other address is closed before anything is read
// from it, TLS included, and counted; so a stranger, from one address or
// many, holds nothing the peer needs. The peer's own address gets a pool
// of maxHandshakes handshakes in progress, which bounds what a flood from
// that address (another process on the peer's host, or someone who can
// forge its TCP handshakes) can hold; when the pool is full a new
// connection evicts the oldest, so that idle connections cannot keep the
// peer out: it takes maxHandshakes new connections within one of the
// peer's handshakes (milliseconds) to cut it off, a flood that is counted
// (as failed handshakes) and seen. Refusals are logged at most once per
// logEvery (package lograte), with the count held back since the last
// line.

// logEvery is the least time between two log lines about refused
// connections of one kind.
const logEvery = 10 * time.Second

// fromPeer reports whether raw comes from the peer's configured address
// (its port is the peer's choice; IPv4-mapped IPv6 compares as IPv4).
func (m *Member) fromPeer(raw net.Conn) bool {
	ta, ok := raw.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	return sameHost(ta.AddrPort().Addr(), m.cfg.Peer.Addr())
}

func sameHost(a, b netip.Addr) bool {
	return a.Unmap().WithZone("") == b.Unmap().WithZone("")
}

// dialSource is the address the dialing member connects from: its listen
// address, so that the peer's check of the source passes whatever the
// routing table would choose; nil (the kernel's choice) when it listens
// on every address or on another family than the peer's.
func (m *Member) dialSource() *net.TCPAddr {
	a := m.cfg.Listen.Addr().Unmap()
	if a.IsUnspecified() || a.Is4() != m.cfg.Peer.Addr().Unmap().Is4() {
		return nil
	}
	return &net.TCPAddr{IP: a.AsSlice(), Zone: a.Zone()}
}

// handshakes are the handshakes in progress on the listener, oldest
// first, at most maxHandshakes. Its methods are safe for concurrent use.
type handshakes struct {
	mu   sync.Mutex
	live []net.Conn
}

// add makes raw one of the handshakes in progress and returns the oldest
// if it had to make room (nil if not): the caller closes it, which ends
// its handshake.
func (h *handshakes) add(raw net.Conn) (evicted net.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.live) >= maxHandshakes {
		evicted = h.live[0]
		h.live = slices.Delete(h.live, 0, 1)
	}
	h.live = append(h.live, raw)
	return evicted
}

// done takes raw out of the handshakes in progress, if it is there.
func (h *handshakes) done(raw net.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.live, raw); i >= 0 {
		h.live = slices.Delete(h.live, i, i+1)
	}
}

// count returns how many handshakes are in progress.
func (h *handshakes) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.live)
}
