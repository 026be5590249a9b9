package gateway

// The data plane of the IKE children: ike.DataPlane over the SAD. The
// ike.Controller decides which pair a child's tunnel sends with; this
// opens the SAs and puts them into the tunnels, make-before-break:
//
//  1. Install: the new inbound SA first, then the outbound switch (or,
//     for a pair the peer's rekey made, the outbound SA held aside).
//  2. Promote: the held outbound SA takes over.
//  3. Retire: a replaced pair's inbound SA drains for DrainTime (ESP the
//     peer sent before the rekey still arrives), then goes.
//  4. Down / Trap: the tunnel goes, or stays without SAs: its packets are
//     dropped (no_sa) and reported to the Controller (onNoSA).
//  5. Traffic: the SAs' counters, for the byte, packet and
//     sequence-number limits and the NAT-keepalives.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/sad"
	"github.com/sluicegw/sluice/spd"
)

// ikeDataPlane is the gateway's ike.DataPlane. mu guards its maps; it is
// taken under the Controller's lock (its callers) and alone by the drain
// timers, never the other way round.
type ikeDataPlane struct {
	g        *Gateway
	mu       sync.Mutex
	children map[string]ikeChildConf // by child name: what a trap tunnel is made of
	// tunnels are by tunnel name: the child's, or a road warrior's of a
	// responder-only connection's child ("<child>/<virtual IP>",
	// ike.TunnelName); an entry goes with its tunnel (Down).
	tunnels map[string]*ikeTunnel
}

// ikeChildConf is a configured child and its connection.
type ikeChildConf struct {
	conn  *config.Connection
	child *config.Child
}

// ikeTunnel is what the data plane keeps of a child's tunnel beyond the
// SAD: the inbound SPIs of retired pairs still draining, oldest first,
// and a held pair's outbound SA.
type ikeTunnel struct {
	draining []uint32
	held     *ike.ChildSA
	heldOut  *sad.SA
}

func newIKEDataPlane(g *Gateway) *ikeDataPlane {
	return &ikeDataPlane{g: g, children: map[string]ikeChildConf{}, tunnels: map[string]*ikeTunnel{}}
}

// setConfig makes conns' children the ones trap tunnels are made for.
func (d *ikeDataPlane) setConfig(conns []config.Connection) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.children = map[string]ikeChildConf{}
	for i := range conns {
		c := &conns[i]
		for j := range c.Children {
			d.children[c.Children[j].Name] = ikeChildConf{c, &c.Children[j]}
		}
	}
}

// tunnelLocked returns the state of the child's tunnel. d.mu is held.
func (d *ikeDataPlane) tunnelLocked(child string) *ikeTunnel {
	t := d.tunnels[child]
	if t == nil {
		t = &ikeTunnel{}
		d.tunnels[child] = t
	}
	return t
}

// dropHeld ends t's held outbound SA, which never carried a packet.
func (t *ikeTunnel) dropHeld() {
	if t.heldOut != nil {
		t.heldOut.End()
	}
	t.held, t.heldOut = nil, nil
}

// childSAConfig is the SA definition of one direction of a negotiated
// pair, in the configuration's terms.
func childSAConfig(name string, c *ike.ChildSA, dir esp.Direction) (*config.SA, error) {
	alg, err := cryptodev.ParseAlg(c.Suite)
	if err != nil {
		return nil, fmt.Errorf("gateway: negotiated suite %q: %w", c.Suite, err)
	}
	sa := &config.SA{Mode: config.ModeTunnel, Encap: config.EncapNone, Alg: alg, ESN: c.ESN, ReplayWindow: IKEReplayWindow}
	local, remote := c.Local, c.Remote
	if dir == esp.Outbound {
		sa.SPI, sa.EncKey, sa.AuthKey = c.OutSPI, c.OutKey, c.OutAuthKey
		sa.Src, sa.Dst = local.Addr().Unmap(), remote.Addr().Unmap()
		if c.Encap {
			sa.SPort, sa.DPort = local.Port(), remote.Port()
		}
		sa.Name = fmt.Sprintf("%s-out-%08x", name, c.OutSPI)
	} else {
		sa.SPI, sa.EncKey, sa.AuthKey = c.InSPI, c.InKey, c.InAuthKey
		sa.Src, sa.Dst = remote.Addr().Unmap(), local.Addr().Unmap()
		if c.Encap {
			sa.SPort, sa.DPort = remote.Port(), local.Port()
		}
		sa.Name = fmt.Sprintf("%s-in-%08x", name, c.InSPI)
	}
	if c.Encap {
		sa.Encap = config.EncapUDP
	}
	return sa, nil
}

// Install opens both SAs of c and puts them in the child's tunnel: the
// inbound one first, then the outbound switch (a rekey loses nothing),
// or, with hold, the outbound one aside (Promote puts it in); a tunnel
// whose outer endpoints differ (a first pair, a NAT found) is replaced.
func (d *ikeDataPlane) Install(name string, c *ike.ChildSA, hold bool) error {
	if err := d.install(name, c, hold); err != nil {
		return err
	}
	d.g.vipChildUp(c) // vip.go: a virtual IP we were given goes on the TUN device
	return nil
}

func (d *ikeDataPlane) install(name string, c *ike.ChildSA, hold bool) error {
	g := d.g
	d.mu.Lock()
	defer d.mu.Unlock()
	tn := d.tunnelLocked(name)
	engine := g.ikeEngine()
	var opened []*sad.SA
	fail := func(err error) error {
		for _, s := range opened {
			s.End()
		}
		return err
	}
	var out, in *sad.SA
	for _, dir := range []esp.Direction{esp.Inbound, esp.Outbound} {
		def, err := childSAConfig(name, c, dir)
		if err != nil {
			return fail(err)
		}
		// No state file: the keys are in memory only and never
		// installed again (openRuntime).
		s, err := g.openRuntime(engine, def, def.Name, dir, false)
		if err != nil {
			return fail(err)
		}
		opened = append(opened, s)
		if dir == esp.Outbound {
			out = s
		} else {
			in = s
		}
	}
	// The negotiated selectors, not the configured ones: the peer may
	// have narrowed them (RFC 7296 section 2.9). They are the SAs' check
	// both ways and the tunnel's routes; what the peer narrowed away has
	// no route here (no_route) instead of going out to be discarded.
	ts, routes := childTS(c)
	in.TS, out.TS = ts, ts
	spec := sad.TunnelSpec{Name: name, Local: c.Local.Addr().Unmap(), Peer: c.Remote.Addr().Unmap(), Remote: routes,
		TS: ts, Owner: g.ownerOf(name), Encap: esp.EncapNone}
	if c.Encap {
		spec.Encap, spec.PeerPort = esp.EncapUDP, c.Remote.Port()
	}
	def, _ := childSAConfig(name, c, esp.Outbound)
	spec.MTU = saMTU(def, spec.Peer.Is6())
	t := g.store.Load().Tunnel(name)
	if t != nil && t.Local == spec.Local && t.Peer == spec.Peer && t.Encap == spec.Encap && t.PeerPort == spec.PeerPort &&
		slices.Equal(t.Remote, spec.Remote) && t.Out() != nil {
		// Room for the new inbound SA: the oldest draining one goes
		// first if the tunnel is full. The current pair's inbound SA
		// stays: the peer may send with it until our Delete of it.
		for len(t.Inbound()) >= sad.MaxInbound && len(tn.draining) > 0 {
			g.store.RemoveInbound(tn.draining[0])
			tn.draining = tn.draining[1:]
		}
		if err := g.store.AddInbound(name, in); err != nil {
			return fail(err)
		}
		if hold {
			tn.dropHeld()
			tn.held, tn.heldOut = c, out
			return nil
		}
		if err := g.store.SwitchOutbound(name, out); err != nil {
			g.store.RemoveInbound(in.SA.SPI())
			out.End()
			return err
		}
		return nil
	}
	if t != nil {
		g.store.RemoveTunnel(name)
	}
	tn.dropHeld()
	spec.Out, spec.In = out, []*sad.SA{in}
	if _, err := g.store.AddTunnel(spec); err != nil {
		return fail(err)
	}
	if hold {
		// The outer endpoints moved (MOBIKE, a NAT found): the old
		// pair cannot carry the traffic there, so the new one sends
		// at once and its Promote has nothing left to do.
		tn.held = c
	}
	return nil
}

// Promote switches the child's outbound traffic to c's held SA.
func (d *ikeDataPlane) Promote(name string, c *ike.ChildSA) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	tn := d.tunnels[name]
	if tn != nil && tn.held == c && tn.heldOut == nil {
		tn.held = nil // sending with it since Install replaced the tunnel
		return nil
	}
	if tn == nil || tn.held != c || tn.heldOut == nil {
		return errors.New("gateway: no held outbound SA for the pair")
	}
	out := tn.heldOut
	tn.held, tn.heldOut = nil, nil
	if d.g.store.Load().Tunnel(name) == nil {
		out.End()
		return errors.New("gateway: the tunnel is gone")
	}
	if err := d.g.store.SwitchOutbound(name, out); err != nil {
		out.End()
		return err
	}
	return nil
}

// Retire ends c's outbound SA if it is still held, and removes its
// inbound SA after DrainTime, so that packets the peer sent with it
// before its rekey still arrive.
func (d *ikeDataPlane) Retire(name string, c *ike.ChildSA) {
	d.g.vipChildDown(c) // vip.go
	d.mu.Lock()
	defer d.mu.Unlock()
	tn := d.tunnels[name]
	if tn == nil {
		return // the tunnel went (Down), and its SAs with it
	}
	if tn.held == c {
		tn.dropHeld()
	}
	spi := c.InSPI
	if !slices.Contains(tn.draining, spi) {
		tn.draining = append(tn.draining, spi)
	}
	time.AfterFunc(DrainTime, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		i := slices.Index(tn.draining, spi)
		if i < 0 {
			return // made room for a newer one already, or the tunnel went
		}
		tn.draining = slices.Delete(tn.draining, i, i+1)
		if cur := d.g.store.Load().Inbound(spi); cur != nil && cur.Tunnel != nil && cur.Tunnel.Name == name {
			d.g.store.RemoveInbound(spi)
		}
	})
}

// Down removes the child's tunnel; with trap, one without SAs takes its
// place.
func (d *ikeDataPlane) Down(name string, last *ike.ChildSA, trap bool) {
	if last != nil {
		d.g.vipChildDown(last) // vip.go
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if tn := d.tunnels[name]; tn != nil {
		tn.dropHeld()
		tn.draining = nil
		delete(d.tunnels, name)
	}
	if d.g.store.Load().Tunnel(name) != nil {
		d.g.store.RemoveTunnel(name)
	}
	if trap {
		d.trapLocked(name)
	}
}

// Trap installs the child's tunnel without SAs: packets routed into it
// are dropped (no_sa) and start a negotiation (onNoSA).
func (d *ikeDataPlane) Trap(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.trapLocked(name)
}

func (d *ikeDataPlane) trapLocked(name string) {
	cc, ok := d.children[name]
	g := d.g
	if !ok || !cc.conn.Remote.IsValid() || g.store.Load().Tunnel(name) != nil {
		return
	}
	spec := sad.TunnelSpec{Name: name, Local: cc.conn.Local, Peer: cc.conn.Remote, Remote: cc.child.RemoteTS,
		Owner: g.ownerOf(name), Encap: esp.EncapUDP, PeerPort: g.ike.nattPort}
	if _, err := g.store.AddTunnel(spec); err != nil {
		g.Logger("ike").Error("trap tunnel not installed", "child", name, "err", err)
	}
}

// Traffic reads the counters of c's SAs, and whether either nears its
// sequence-number limit (esp.SA.NeedsRekey).
func (d *ikeDataPlane) Traffic(name string, c *ike.ChildSA) ike.Traffic {
	var t ike.Traffic
	db := d.g.store.Load()
	if in := db.Inbound(c.InSPI); in != nil {
		t.PacketsIn, t.BytesIn = in.SA.Counters.Packets.Load(), in.SA.Counters.Bytes.Load()
		t.SeqLimit = in.SA.NeedsRekey()
	}
	if tn := db.Tunnel(name); tn != nil {
		if out := tn.Out(); out != nil && out.SA.SPI() == c.OutSPI {
			t.PacketsOut, t.BytesOut = out.SA.Counters.Packets.Load(), out.SA.Counters.Bytes.Load()
			t.SeqLimit = t.SeqLimit || out.SA.NeedsRekey()
		}
	}
	return t
}

// childTS returns the negotiated traffic selectors of c as its SAs check
// them, and the prefixes its tunnel routes: those that cover exactly the
// address ranges of the peer's selectors (a protocol or ports narrow what
// the route takes further, in the SAs' check).
func childTS(c *ike.ChildSA) (*spd.SATS, []netip.Prefix) {
	conv := func(sels []ike.Selector) []spd.Range {
		out := make([]spd.Range, len(sels))
		for i, s := range sels {
			out[i] = spd.Range{Start: s.Start.Unmap(), End: s.End.Unmap(), Proto: s.IPProto,
				Ports: spd.PortRange{Lo: s.StartPort, Hi: s.EndPort}}
		}
		return out
	}
	ts := spd.NewSATS(conv(c.LocalTS), conv(c.RemoteTS))
	var routes []netip.Prefix
	for _, r := range ts.Remote {
		for _, p := range r.Prefixes() {
			if !slices.Contains(routes, p) {
				routes = append(routes, p)
			}
		}
	}
	return ts, routes
}
