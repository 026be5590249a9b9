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
	wanted  map[netip.Addr]*atomic.Bool // the resolver goroutine's own
	// addrs, if set, refreshes the program's addresses with each round.
	addrs func()
}

func newResolver(h *netlink.Handle, ifindex int, log *slog.Logger) *resolver {
	r := &resolver{
		h: h, ifindex: ifindex, log: log,
		ask: make(chan netip.Addr, askQueue), done: make(chan struct{}), ended: make(chan struct{}),
		wanted: map[netip.Addr]*atomic.Bool{},
	}
	m := map[netip.Addr]hop{}
	r.snap.Store(&m)
	return r
}

// lookup returns the next hop of dst, or false after asking the resolver
// to find it. It does not allocate.
func (r *resolver) lookup(dst netip.Addr) (hop, bool) {
	h, ok := (*r.snap.Load())[dst]
	if !ok {
		select {
		case r.ask <- dst:
		default:
		}
	}
	return h, ok
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
			if _, ok := r.wanted[dst]; !ok && len(r.wanted) < maxDests {
				r.wanted[dst] = new(atomic.Bool)
			}
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

// refresh looks up every wanted destination's route and next hop and
// publishes a new snapshot.
func (r *resolver) refresh() {
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
	for dst, probe := range r.wanted {
		routes, err := r.h.RouteGet(dst.AsSlice())
		if err != nil || len(routes) == 0 || routes[0].LinkIndex != r.ifindex {
			continue // no route, or not out of this interface: the kernel's
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
			probe.Store(true)
		}
		m[dst] = hop{mac: e.mac, probe: probe}
	}
	r.snap.Store(&m)
}
