package xdp

import (
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Resolver timing and bounds.
const (
	refreshEvery = time.Second           // every known destination's route and neighbour are looked up again
	askGap       = 20 * time.Millisecond // at most one lookup round per gap when Write asks
	maxDests     = 4096                  // destinations the resolver follows
	idleAfter    = time.Minute           // a destination Write has not used for this long is forgotten
	askQueue     = 64                    // pending asks; more are dropped (and asked again by the next Write)
)

// usableNUD are the neighbour states whose link-layer address Write uses.
// A STALE entry is used too (the kernel would use it and confirm it);
// sendProbe makes Write hand a packet to the kernel now and then so that
// the kernel confirms it.
const usableNUD = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT

// hop is a resolved destination: the next hop's MAC address, and whether
// the kernel should see a packet to it (the entry was not REACHABLE at the
// last lookup: the kernel confirms it only when it sends to it itself).
type hop struct {
	mac   [6]byte
	probe *atomic.Bool
	used  *atomic.Bool // set by Write, taken by the resolver's refresh
	// kernel says that the destination is the kernel's until the next
	// refresh: its route leaves by another interface, or there is none.
	kernel bool
}

// markUsed tells the resolver that Write sent to the destination (a load
// only, once the flag is set, so the cache line stays shared).
func (h hop) markUsed() {
	if !h.used.Load() {
		h.used.Store(true)
	}
}

// dest is what the resolver goroutine keeps of a wanted destination.
type dest struct {
	probe, used atomic.Bool
	last        time.Time // when Write last used or asked about it
}

// resolver keeps, for the destinations Write asked about, the MAC address
// of the next hop on the interface: a snapshot map that Write reads
// without locks or allocation, rebuilt from netlink (route lookup, then
// the neighbour table) by one goroutine per interface.
type resolver struct {
	h       *netlink.Handle
	ifindex int
	log     *slog.Logger
	snap    atomic.Pointer[map[netip.Addr]hop]
	ask     chan netip.Addr
	done    chan struct{}
	ended   chan struct{}
	started bool
	wanted  map[netip.Addr]*dest // the resolver goroutine's own
	now     func() time.Time     // time.Now; tests replace it
	// addrs, if set, refreshes the program's addresses with each round.
	addrs func()
}

func newResolver(h *netlink.Handle, ifindex int, log *slog.Logger) *resolver {
	r := &resolver{
		h: h, ifindex: ifindex, log: log,
		ask: make(chan netip.Addr, askQueue), done: make(chan struct{}), ended: make(chan struct{}),
		wanted: map[netip.Addr]*dest{}, now: time.Now,
	}
	m := map[netip.Addr]hop{}
	r.snap.Store(&m)
	return r
}

// lookup returns the next hop of dst, or false: after asking the
// resolver to find it if it is new or its neighbour unknown, without
// asking if the last refresh found it is the kernel's. It does not
// allocate.
func (r *resolver) lookup(dst netip.Addr) (hop, bool) {
	h, ok := (*r.snap.Load())[dst]
	if !ok {
		select {
		case r.ask <- dst:
		default:
		}
		return h, false
	}
	h.markUsed()
	return h, !h.kernel
}

func (r *resolver) start() {
	r.started = true
	go r.run()
}

// stop ends the goroutine (if it was started) and closes the netlink
// handle.
func (r *resolver) stop() {
	if r.started {
		close(r.done)
		<-r.ended
	}
	r.h.Close()
}

func (r *resolver) run() {
	defer close(r.ended)
	tick := time.NewTicker(refreshEvery)
	defer tick.Stop()
	soon := time.NewTimer(time.Hour)
	soon.Stop()
	armed := false
	var last time.Time
	for {
		select {
		case <-r.done:
			return
		case dst := <-r.ask:
			r.want(dst)
			if armed {
				continue
			}
			if wait := askGap - time.Since(last); wait > 0 {
				soon.Reset(wait)
				armed = true
				continue
			}
		case <-soon.C:
			armed = false
		case <-tick.C:
		}
		last = time.Now()
		r.refresh()
	}
}

// want adds dst to the wanted destinations, or notes that it is still
// wanted. When maxDests are followed, dst waits for an ask after a
// refresh has forgotten the idle ones (forget).
func (r *resolver) want(dst netip.Addr) {
	now := r.now()
	if d, ok := r.wanted[dst]; ok {
		d.last = now
		return
	}
	if len(r.wanted) < maxDests {
		r.wanted[dst] = &dest{last: now}
	}
}

// forget drops the wanted destinations Write has not used or asked about
// for idleAfter.
func (r *resolver) forget(now time.Time) {
	for dst, d := range r.wanted {
		if d.used.Swap(false) {
			d.last = now
		}
		if now.Sub(d.last) > idleAfter {
			delete(r.wanted, dst)
		}
	}
}

// refresh looks up every wanted destination's route and next hop and
// publishes a new snapshot.
func (r *resolver) refresh() {
	r.forget(r.now())
	if r.addrs != nil {
		r.addrs()
	}
	neighs, err := r.h.NeighList(r.ifindex, unix.AF_UNSPEC)
	if err != nil {
		r.log.Warn("xdp: neighbour table", "err", err)
		return
	}
	type entry struct {
		mac   [6]byte
		state int
	}
	table := make(map[netip.Addr]entry, len(neighs))
	for _, n := range neighs {
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok || n.State&usableNUD == 0 || len(n.HardwareAddr) != 6 {
			continue
		}
		table[ip.Unmap()] = entry{[6]byte(n.HardwareAddr), n.State}
	}
	m := make(map[netip.Addr]hop, len(r.wanted))
	for dst, d := range r.wanted {
		routes, err := r.h.RouteGet(dst.AsSlice())
		if err != nil || len(routes) == 0 || routes[0].LinkIndex != r.ifindex {
			// No route, or not out of this interface: the kernel's
			// until the next refresh (asking sooner would change
			// nothing).
			m[dst] = hop{probe: &d.probe, used: &d.used, kernel: true}
			continue
		}
		nh := dst
		if gw, ok := netip.AddrFromSlice(routes[0].Gw); ok && !gw.IsUnspecified() {
			nh = gw.Unmap()
		}
		e, ok := table[nh]
		if !ok {
			continue
		}
		if e.state&(netlink.NUD_REACHABLE|netlink.NUD_PERMANENT) == 0 {
			d.probe.Store(true)
		}
		m[dst] = hop{mac: e.mac, probe: &d.probe, used: &d.used}
	}
	r.snap.Store(&m)
}
