package xdp

import (
	"log/slog"
	"net/netip"
	"sync/atomic"

	"github.com/vishvananda/netlink"
)

// RxPending is how many frames wait in l's RX ring (for tests that must
// not block in Read).
func RxPending(l *Link) int {
	return int(atomic.LoadUint32(l.s.rx.prod) - l.s.rx.cached)
}

// SetGenericOnly makes Open attach the program in generic mode only, and
// returns a function that undoes it.
func SetGenericOnly() (undo func()) {
	genericOnly = true
	return func() { genericOnly = false }
}

// FillNeedsWakeup reports the fill ring's need-wakeup flag.
func FillNeedsWakeup(l *Link) bool { return l.s.fill.needWakeup() }

// Resolver is the next-hop resolver, for tests in namespaces (package
// xdp_test, which may import internal/lab).
type Resolver struct{ r *resolver }

// NewResolver follows next hops out of the interface with index ifindex
// through h.
func NewResolver(h *netlink.Handle, ifindex int) *Resolver {
	return &Resolver{newResolver(h, ifindex, slog.New(slog.DiscardHandler))}
}

func (r *Resolver) Want(a netip.Addr) { r.r.want(a) }
func (r *Resolver) Refresh()          { r.r.refresh() }
func (r *Resolver) Stop()             { r.r.stop() }

// Lookup is Write's lookup of a.
func (r *Resolver) Lookup(a netip.Addr) (any, bool) { return r.r.lookup(a) }

// Asked drains and counts the queued asks.
func (r *Resolver) Asked() int {
	n := 0
	for {
		select {
		case <-r.r.ask:
			n++
		default:
			return n
		}
	}
}
