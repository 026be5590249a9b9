package gateway

// Remote access (RFC 7296 section 3.15): virtual IPs.
//
//  1. Peers (vipPeer, from ikePeer): a connection's pools become the
//     ike.Peer's Pools, the [[pool]]s as ike/ippool pools, one per
//     name, kept across reloads while the pool's definition stays (so
//     its leases do); its vips become the Peer's VIPs. A reload that
//     changes a pool's addrs or dns (and nothing else: poolsChanged)
//     changes the pool in place (ippool.Pool.Reconfigure), so that the
//     running peers and IKE SAs keep it: new leases come from the new
//     addresses; a live IKE SA's lease stays if its address is still in
//     the pool, and otherwise the IKE SA keeps its address until it ends
//     (the pool hands it to nobody meanwhile; logged). A pool that
//     changes family is a new pool (the old one's IKE SAs keep theirs).
//  2. As responder, nothing more: the Child SA's remote selector is the
//     address leased, and its tunnel routes it (the TUN device routes
//     the connection's remote_ts, the pool's addresses among them).
//  3. As initiator (vipChildUp when a Child SA is installed,
//     vipChildDown when it leaves service; both need only the
//     ike.ChildSA): the addresses the responder assigned go on the TUN
//     device, and the routes of the connection's remote_ts take them as
//     their source, so that what the host sends into the tunnel leaves
//     from the virtual IP the peer's selectors expect. They are counted
//     by the Child SAs that carry them (a rekey's new pair comes before
//     the old one goes) and taken off with the last. ike takes only one
//     unicast host address per family asked for, inside the narrowed
//     TSi (ike/cp.go acceptVIPs); childVIPs checks the same again here
//     and logs what it leaves off the device.

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/ike/ippool"
	"github.com/sluicegw/sluice/pktio/netutil"
)

// vipLocalWait bounds the wait for a virtual IP to become local.
const vipLocalWait = 5 * time.Second

// vipState is the gateway's pools and the virtual IPs it holds.
type vipState struct {
	mu    sync.Mutex
	tun   string              // the TUN device's name
	pools map[string]*vipPool // by name
	// conns are the remote_ts of each connection with vips, by name
	// (ike.ChildSA.Name), as vipPeer last saw them.
	conns map[string][]netip.Prefix
	// held counts, per virtual IP of ours on the TUN device, the Child
	// SAs that carry it; routes are the remote_ts whose routes it is the
	// source of.
	held   map[netip.Addr]int
	routes map[netip.Addr][]netip.Prefix
}

// vipPool is one [[pool]] and the pool made of it.
type vipPool struct {
	def  config.Pool
	pool *ippool.Pool
}

// vipPeer sets the Pools and VIPs of p, the peer of connection i.
func (g *Gateway) vipPeer(cfg *config.Gateway, i int, p *ike.Peer) error {
	c := &cfg.Connections[i]
	p.VIPs = slices.Clone(c.VIPs)
	s := &g.vip
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tun = cfg.TUN.Name
	if s.conns == nil {
		s.conns = map[string][]netip.Prefix{}
	}
	delete(s.conns, c.Name)
	if len(c.VIPs) > 0 {
		var ts []netip.Prefix
		for _, ch := range c.Children {
			for _, r := range ch.RemoteTS {
				if !slices.Contains(ts, r) {
					ts = append(ts, r)
				}
			}
		}
		s.conns[c.Name] = ts
	}
	for _, name := range c.Pools {
		k := slices.IndexFunc(cfg.Pools, func(p config.Pool) bool { return p.Name == name })
		if k < 0 {
			field := fmt.Sprintf("%s.pools", config.ConnectionField(i))
			return fmt.Errorf("%s: %s: no [[pool]] named %q", cfg.FieldPos(field), field, name)
		}
		def := cfg.Pools[k]
		vp := s.pools[name]
		if vp != nil && !samePool(vp.def, def) && poolIs6(vp.def) == poolIs6(def) {
			orphaned, err := vp.pool.Reconfigure(poolConfig(def))
			if err != nil {
				field := config.PoolField(k) + ".addrs"
				return fmt.Errorf("%s: %s: %w", cfg.FieldPos(field), field, err)
			}
			vp.def = def
			if log := g.Logger("ike"); log != nil {
				log.Info("virtual IP pool changed", "pool", name, "addrs", vp.pool.First().String()+"-"+vp.pool.Last().String())
				if len(orphaned) > 0 {
					log.Warn("virtual IPs outside the changed pool stay with their IKE SAs until they end", "pool", name, "vips", orphaned)
				}
			}
		}
		if vp == nil || !samePool(vp.def, def) {
			pool, err := newPool(def)
			if err != nil {
				field := config.PoolField(k) + ".addrs"
				return fmt.Errorf("%s: %s: %w", cfg.FieldPos(field), field, err)
			}
			if s.pools == nil {
				s.pools = map[string]*vipPool{}
			}
			vp = &vipPool{def: def, pool: pool}
			s.pools[name] = vp
		}
		p.Pools = append(p.Pools, vp.pool)
	}
	return nil
}

// newPool makes the pool of def: a prefix through ippool.New (which
// takes the first 2^31 addresses of a larger one, as strongSwan does),
// a range as config worked it out.
func newPool(def config.Pool) (*ippool.Pool, error) {
	if def.Prefix.IsValid() {
		return ippool.New(ippool.Config{Name: def.Name, Addrs: def.Prefix.String(), DNS: def.DNS})
	}
	return ippool.NewRange(def.Name, def.First, def.Last, def.DNS)
}

// poolConfig is def as ippool.Reconfigure takes it.
func poolConfig(def config.Pool) ippool.Config {
	c := ippool.Config{Name: def.Name, Addrs: def.Prefix.String(), DNS: def.DNS}
	if !def.Prefix.IsValid() {
		c.Addrs = def.First.String() + "-" + def.Last.String()
	}
	return c
}

func poolIs6(def config.Pool) bool {
	if def.Prefix.IsValid() {
		return def.Prefix.Addr().Is6()
	}
	return def.First.Is6()
}

// poolsChanged reports whether next defines a pool that a connection of
// next uses differently from the running one (or one not made yet): a
// reload that changes only [[pool]]s is applied then (reloadIKE).
func (g *Gateway) poolsChanged(next *config.Gateway) bool {
	s := &g.vip
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range next.Connections {
		for _, name := range next.Connections[i].Pools {
			k := slices.IndexFunc(next.Pools, func(p config.Pool) bool { return p.Name == name })
			if k < 0 {
				return true // an error, which the reload reports
			}
			if vp := s.pools[name]; vp == nil || !samePool(vp.def, next.Pools[k]) {
				return true
			}
		}
	}
	return false
}

func samePool(a, b config.Pool) bool {
	return a.Name == b.Name && a.Prefix == b.Prefix && a.First == b.First && a.Last == b.Last && slices.Equal(a.DNS, b.DNS)
}

// vipChildUp puts the virtual IPs the responder assigned us with c, a
// Child SA of a connection with vips, on the TUN device, and makes them
// the source of the routes of the connection's remote_ts of their
// family. A Child SA of another connection changes nothing.
func (g *Gateway) vipChildUp(c *ike.ChildSA) {
	if len(c.VIPs) == 0 {
		return
	}
	s := &g.vip
	s.mu.Lock()
	defer s.mu.Unlock()
	remoteTS, ok := s.conns[c.Name]
	if !ok {
		return // the peer's virtual IPs, not ours
	}
	if s.held == nil {
		s.held, s.routes = map[netip.Addr]int{}, map[netip.Addr][]netip.Prefix{}
	}
	log := g.Logger("ike")
	vips, refused := childVIPs(c)
	if len(refused) > 0 {
		log.Warn("virtual IPs not put on the TUN device", "connection", c.Name, "refused", strings.Join(refused, "; "))
	}
	for _, v := range vips {
		s.held[v]++
		if s.held[v] > 1 {
			continue
		}
		if err := netutil.AddAddr(s.tun, netip.PrefixFrom(v, v.BitLen())); err != nil {
			log.Error("virtual IP not put on the TUN device", "connection", c.Name, "vip", v, "err", err)
			continue
		}
		if err := netutil.WaitLocal(v, vipLocalWait); err != nil {
			log.Error("virtual IP not usable", "connection", c.Name, "vip", v, "err", err)
		}
		var routes []netip.Prefix
		for _, r := range remoteTS {
			if r.Addr().Is4() != v.Is4() {
				continue
			}
			if err := netutil.ReplaceRouteFrom(s.tun, r, v); err != nil {
				log.Error("route not sourced from the virtual IP", "connection", c.Name, "vip", v, "route", r, "err", err)
				continue
			}
			routes = append(routes, r)
		}
		s.routes[v] = routes
		log.Info("virtual IP on the TUN device", "connection", c.Name, "vip", v, "routes", routes)
	}
}

// vipChildDown lets go of c's virtual IPs: those no other Child SA
// carries leave the TUN device, and their routes lose their source.
func (g *Gateway) vipChildDown(c *ike.ChildSA) {
	if len(c.VIPs) == 0 {
		return
	}
	s := &g.vip
	s.mu.Lock()
	defer s.mu.Unlock()
	log := g.Logger("ike")
	vips, _ := childVIPs(c) // those vipChildUp took
	for _, v := range vips {
		if s.held[v] == 0 {
			continue // not ours, or never installed
		}
		s.held[v]--
		if s.held[v] > 0 {
			continue
		}
		delete(s.held, v)
		for _, r := range s.routes[v] {
			if err := netutil.ReplaceRouteFrom(s.tun, r, netip.Addr{}); err != nil {
				log.Error("route not restored", "vip", v, "route", r, "err", err)
			}
		}
		delete(s.routes, v)
		if err := netutil.DelAddr(s.tun, netip.PrefixFrom(v, v.BitLen())); err != nil {
			log.Error("virtual IP not taken off the TUN device", "vip", v, "err", err)
		}
		log.Info("virtual IP off the TUN device", "connection", c.Name, "vip", v)
	}
}

// childVIPs returns the virtual IPs of c that may go on the TUN device,
// and why each of the others may not: ike takes only what it asked for
// (ike.CheckVIP, one address per family, inside the Child SA's TSi), and
// this check, the same rules on what the ike.ChildSA says, stands in
// case a Child SA reaches the gateway by another road (an HA takeover's
// snapshot, a library user's OnChildSA). It is a function of c alone, so
// that vipChildDown lets go of exactly what vipChildUp took.
func childVIPs(c *ike.ChildSA) (vips []netip.Addr, refused []string) {
	for _, v := range c.VIPs {
		why := ""
		if err := ike.CheckVIP(v); err != nil {
			why = strings.TrimPrefix(err.Error(), "ike: ")
		} else if slices.ContainsFunc(vips, func(w netip.Addr) bool { return w.Is4() == v.Is4() }) {
			why = "virtual IP " + v.String() + " is a second one of its family"
		} else if !slices.ContainsFunc(c.LocalTS, func(s ike.Selector) bool { return s.Contains(v) }) {
			why = "virtual IP " + v.String() + " is outside the Child SA's local traffic selectors"
		}
		if why != "" {
			refused = append(refused, why)
			continue
		}
		vips = append(vips, v)
	}
	return vips, refused
}
