// Package gateway assembles a running sluice gateway from its configuration:
// crypto engines, the TUN device and ciphertext sockets, the SA database,
// the policies and the data plane; and applies a changed configuration
// without dropping traffic.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/internal/logging"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio/netutil"
	"github.com/sluicegw/sluice/pktio/rawesp"
	"github.com/sluicegw/sluice/pktio/tun"
	"github.com/sluicegw/sluice/pktio/udp"
	"github.com/sluicegw/sluice/sad"
	"github.com/sluicegw/sluice/spd"

	// The engines a configuration may name.
	_ "github.com/sluicegw/sluice/cryptodev/sched"
	_ "github.com/sluicegw/sluice/cryptodev/soft"
)

// UnderlayMTU is the MTU assumed for the network that carries ESP.
const UnderlayMTU = 1500

// Gateway is a running gateway.
type Gateway struct {
	// log is the gateway's own logger (subsystem "gateway"); ikeLog and
	// tlsLog are the IKE and TLS subsystems', which ike and tls get too
	// (Logger).
	log, ikeLog, tlsLog *slog.Logger
	logRoot             *slog.Logger
	mu                  sync.Mutex // serialises Reload and Close
	cfg                 *config.Gateway
	engines             map[string]cryptodev.Engine
	store               *sad.Store
	dp                  *dataplane.Dataplane
	pool                *packet.Pool
	policy              *policySet
	closed              bool
	cancel              context.CancelFunc

	stateLock *os.File // holds the state directory's flock; nil without one
	draining  map[*sad.SA]*drain

	stateMu    sync.Mutex
	stateFiles map[string]*stateFile // by path
	// closing, set by Close, gathers the final states of the SAs it
	// retires for one sync.
	closing atomic.Pointer[finalStates]
	// stateWriter records inbound SAs' bounds off the data path.
	stateWriter stateWriter

	tls tlsState // the TLS listeners and origins (tls.go)
	// totals sums the counters of each tunnel's SAs, retired ones
	// included (totals.go).
	totals tunnelTotals
	ike    ikeState // the IKE connections (ike.go)
	ha     haState  // the hot-standby pair, with [ha] (ha.go)
	vip    vipState // virtual IPs: pools, and ours on the TUN device (vip.go)
	esp    espLinks // the links of ESP in UDP: sockets, AF_XDP (xdp.go)

	// Fixed for the process (a change needs a restart), so read without
	// mu: data-plane workers, the default engine, the state directory.
	workers int
	cfg0    fixedConfig
	// tunMTU0 is the TUN device's MTU at start, which the packet pool's
	// slots are sized for; tunMTU is its MTU now (reload may lower it).
	// Both are read and written under mu.
	tunMTU0, tunMTU int
}

// fixedConfig is what of the configuration a reload cannot change and
// code outside Gateway.mu reads.
type fixedConfig struct {
	Engine   string
	StateDir string
}

// Logger returns the logger of subsystem sub (config.LogSubsystems): the
// logger Start was given with a "subsys" attribute (logging.Key), which
// a handler from package internal/logging filters at that subsystem's
// level.
func (g *Gateway) Logger(sub string) *slog.Logger {
	switch {
	case sub == "ike" && g.ikeLog != nil:
		return g.ikeLog
	case sub == "tls" && g.tlsLog != nil:
		return g.tlsLog
	case sub == "gateway" || g.logRoot == nil: // a Gateway made by a test
		return g.log
	}
	return g.logRoot.With(logging.Key, sub)
}

// Start brings a gateway up from cfg: it creates the TUN device and the
// sockets, opens the engines, installs the tunnels and starts the data
// plane, then starts the TLS listeners and origins. A TLS-only
// configuration (config.Gateway.TLSOnly) starts only those (tls.go). On
// error everything created is torn down.
func Start(ctx context.Context, cfg *config.Gateway, log *slog.Logger) (g *Gateway, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g = &Gateway{log: log.With(logging.Key, "gateway"), ikeLog: log.With(logging.Key, "ike"), tlsLog: log.With(logging.Key, "tls"), logRoot: log, cfg: cfg, engines: map[string]cryptodev.Engine{}, cfg0: fixedConfig{Engine: cfg.Engine, StateDir: cfg.StateDir}}
	if cfg.TLSOnly() {
		if err := g.startTLSOnly(ctx, cfg); err != nil {
			return nil, err
		}
		return g, nil
	}
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	if cfg.StateDir != "" {
		if err := checkStateDir(cfg.StateDir); err != nil {
			return nil, fmt.Errorf("%s: gateway.state_dir: %w", cfg.FieldPos("gateway.state_dir"), err)
		}
		lock, err := lockStateDir(cfg.StateDir)
		if err != nil {
			return nil, fmt.Errorf("%s: gateway.state_dir: %w", cfg.FieldPos("gateway.state_dir"), err)
		}
		g.stateLock = lock
		closers = append(closers, func() { lock.Close() })
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	g.workers = workers
	for _, name := range engineNames(cfg) {
		eng, err := cryptodev.Open(name)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		g.engines[name] = eng
		log.Info("crypto engine", "name", eng.Name(), "runs", cryptodev.Describe(eng))
		closers = append(closers, func() { eng.Close() })
	}

	mtu := tunnelMTU(cfg)
	queues := cfg.TUN.Queues
	if queues <= 0 {
		queues = workers
	}
	g.tunMTU0, g.tunMTU = mtu, mtu
	plain, err := tun.Open(cfg.TUN.Name, mtu, queues)
	if err != nil {
		return nil, fmt.Errorf("gateway: TUN %s: %w", cfg.TUN.Name, needCap(err, "CAP_NET_ADMIN"))
	}
	for _, l := range plain {
		closers = append(closers, func() { l.Close() })
	}
	if err := netutil.Configure(plain[0].(*tun.Queue).Name(), cfg.TUN.Addresses, allRemotes(cfg)); err != nil {
		return nil, fmt.Errorf("gateway: TUN %s: %w", cfg.TUN.Name, needCap(err, "CAP_NET_ADMIN"))
	}
	var netLinks []dataplane.Link
	if cfg.UDP != nil {
		ls, err := udp.OpenN(cfg.UDP.Listen, workers, udp.Options{GSO: cfg.UDP.GSO, GRO: cfg.UDP.GRO, SocketBuffer: 4 << 20,
			Control: g.ikeControlHook, FreeBind: cfg.HAGroupOf(cfg.UDP.Listen.Addr()) != ""})
		if err != nil {
			return nil, fmt.Errorf("gateway: udp %v: %w", cfg.UDP.Listen, err)
		}
		for _, l := range ls {
			closers = append(closers, func() { l.Close() })
		}
		netLinks, err = g.openESPLinks(cfg, ls)
		for _, l := range g.esp.xdp {
			closers = append(closers, func() { l.Close() })
		}
		if err != nil {
			return nil, err
		}
		// IKE on the NAT-T port leaves from the first socket of the group.
		g.ike.natt = ls[0].(*udp.Conn)
		g.ike.nattPort = g.ike.natt.LocalAddr().Port()
		// The offloads are probed per socket; they are the same for all.
		if gso, gro := ls[0].(*udp.Conn).Offloads(); (cfg.UDP.GSO && !gso) || (cfg.UDP.GRO && !gro) {
			log.Warn("UDP offloads unavailable in this kernel, sending and receiving datagram by datagram",
				"gso", gso, "gro", gro)
		}
	}
	var raw4, raw6 dataplane.Link
	if cfg.RawESP != nil {
		// A raw socket carries one family: an unspecified IPv6 address
		// ("::") serves IPv4 tunnels through a second, IPv4 socket.
		addrs := []netip.Addr{cfg.RawESP.Listen}
		if l := cfg.RawESP.Listen; l.Is6() && l.IsUnspecified() && hasIPv4Tunnel(cfg) {
			addrs = append(addrs, netip.IPv4Unspecified())
		}
		for _, a := range addrs {
			l, err := rawesp.Open(a)
			if err != nil {
				return nil, fmt.Errorf("gateway: raw ESP %v: %w", a, needCap(err, "CAP_NET_RAW"))
			}
			closers = append(closers, func() { l.Close() })
			if a.Is4() {
				raw4 = l
			} else {
				raw6 = l
			}
		}
	}
	g.initHA(cfg)
	closers = append(closers, g.closeHA)
	slot := packet.UDPHeader + mtu + esp.MaxHeadroom + esp.MaxTailroom + 64
	slot = max(slot, 2048)
	g.pool = packet.NewPool(4096*max(1, workers/2), slot, esp.MaxHeadroom+32)

	var dp *dataplane.Dataplane
	g.store = sad.NewStore(func(gen uint64, sas []*sad.SA) {
		if dp != nil {
			dp.Retire(gen, sas)
			return
		}
		for _, s := range sas {
			s.End()
		}
	})
	plainLinks := make([]dataplane.Link, len(plain))
	for i, l := range plain {
		plainLinks[i] = l
	}
	dcfg := dataplane.Config{
		Engines: g.engines, Default: cfg.Engine,
		Plain: plainLinks, Net: netLinks, Raw4: raw4, Raw6: raw6, Store: g.store, Pool: g.pool,
		Logger: g.Logger("dataplane"), NoSA: g.onNoSA,
	}
	if cfg.Oversize == "drop" {
		dcfg.Oversize = dataplane.OversizeDrop
	}
	if len(cfg.Policies) > 0 {
		ps, err := newPolicySet(cfg)
		if err != nil {
			return nil, err
		}
		g.policy = ps
		dcfg.NewClassifier = ps.classifier
		dcfg.InboundCheck = ps.inboundCheck
	}
	if dp, err = dataplane.New(dcfg); err != nil {
		return nil, err
	}
	g.dp = dp
	for i := range cfg.Tunnels {
		if err := g.addTunnel(&cfg.Tunnels[i], i%workers); err != nil {
			g.store.Close()
			return nil, err
		}
	}
	if g.policy != nil {
		if err := g.policy.bind(g.store.Load()); err != nil {
			return nil, err
		}
	}
	if err := g.startIKE(cfg); err != nil {
		g.closeIKE()
		g.store.Close()
		return nil, err
	}
	if err := g.startTLS(cfg); err != nil {
		g.closeTLS()
		g.closeIKE()
		g.store.Close()
		return nil, err
	}
	ctx, g.cancel = context.WithCancel(ctx)
	dp.Start(ctx)
	if err := g.startHA(cfg); err != nil {
		g.cancel()
		dp.Close()
		g.closeTLS()
		g.closeIKE()
		g.store.Close()
		return nil, err
	}
	g.kickIKE()
	log.Info("gateway up", "tunnels", len(cfg.Tunnels), "workers", workers, "engine", cfg.Engine, "tun", cfg.TUN.Name, "mtu", mtu)
	return g, nil
}

func hasIPv4Tunnel(cfg *config.Gateway) bool {
	for _, t := range cfg.Tunnels {
		if t.Local.Is4() {
			return true
		}
	}
	for _, c := range cfg.Connections {
		if c.Local.Is4() && !c.Encap {
			return true
		}
	}
	return false
}

func engineNames(cfg *config.Gateway) []string {
	set := map[string]bool{cfg.Engine: true}
	for _, t := range cfg.Tunnels {
		if t.Engine != "" {
			set[t.Engine] = true
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func allRemotes(cfg *config.Gateway) []netip.Prefix {
	var out []netip.Prefix
	for _, t := range cfg.Tunnels {
		out = append(out, t.Remote...)
	}
	for _, c := range cfg.Connections {
		for _, ch := range c.Children {
			out = append(out, ch.RemoteTS...)
		}
	}
	for _, p := range cfg.Policies {
		if p.Action == "protect" && p.Dst.IsValid() {
			out = append(out, p.Dst)
		}
	}
	return out
}

// openSA builds the SAD entry for the named SA of tunnel t in one
// direction. An SA that leaves out its addresses takes the tunnel's.
func (g *Gateway) openSA(cfg *config.Gateway, t *config.Tunnel, name string, dir esp.Direction) (*sad.SA, error) {
	def := cfg.SA(name)
	if def == nil {
		return nil, fmt.Errorf("gateway: no SA %q", name)
	}
	sa := withTunnelAddrs(*def, t.Local, t.Peer, dir)
	engine := t.Engine
	if engine == "" {
		engine = cfg.Engine
	}
	return g.openEntry(engine, &sa, name, dir)
}

// openEntry makes the runtime of sa in one direction on the named engine,
// keeping its sequence numbers in the state directory (state.go), and the
// SAD entry that holds it.
func (g *Gateway) openEntry(engine string, sa *config.SA, name string, dir esp.Direction) (*sad.SA, error) {
	return g.openRuntime(engine, sa, name, dir, true)
}

// openRuntime is openEntry, with durable state only if durable. Only an
// SA whose keys can be installed again (a configured one) needs it: the
// state file is what keeps the SA, installed again after a restart, from
// reusing a sequence number or accepting a packet twice, and each record
// is a write and fsync (off the data path, statewriter.go, but a cost).
func (g *Gateway) openRuntime(engine string, sa *config.SA, name string, dir esp.Direction, durable bool) (*sad.SA, error) {
	cfg, err := ESPConfig(g.engines[engine], sa)
	if err != nil {
		return nil, err
	}
	var hs *haSA
	local, peer := sa.Src, sa.Dst
	if dir == esp.Inbound {
		local, peer = peer, local
	}
	if grp := g.ha.groupOf(local); grp != nil {
		hs = g.leaseFor(&cfg, grp, haKey(dir, sa.SPI, peer), durable)
	}
	var health *sad.StateHealth
	var file *stateFile
	if durable {
		if health, file, err = g.withState(&cfg, sa, name, dir); err != nil {
			cfg.Key.Destroy()
			return nil, err
		}
	}
	rt, err := newRuntime(cfg, sa, dir)
	if err != nil {
		if file != nil {
			file.retire(cfg.Seq, g.log)
		}
		return nil, err
	}
	s := &sad.SA{Name: name, SA: rt, Key: rt.Config().Key, Engine: engine, State: health, Def: saDef(sa, dir)}
	rt.SetUser(s)
	if file != nil {
		s.Retired = func() { file.retire(rt.Seq(), g.log) }
	}
	if hs != nil {
		hs.durable = file != nil
		if file != nil {
			// A group's SA keeps its recorded bound when it ends: on a
			// standby that bound is the owner's use (haHandler.Record),
			// which its own last number knows nothing of.
			s.Retired = func() { file.retire(max(rt.Seq(), file.bound()), g.log) }
		}
		g.ha.track(rt, hs)
		retired := s.Retired
		s.Retired = func() {
			if retired != nil {
				retired()
			}
			g.ha.untrack(rt)
		}
	}
	g.totals.register(s, dir)
	return s, nil
}

// withTunnelAddrs gives a tunnel SA that leaves out its addresses the
// tunnel's: local to peer outbound, peer to local inbound.
func withTunnelAddrs(sa config.SA, local, peer netip.Addr, dir esp.Direction) config.SA {
	src, dst := local, peer
	if dir == esp.Inbound {
		src, dst = dst, src
	}
	if !sa.Src.IsValid() {
		sa.Src = src
	}
	if !sa.Dst.IsValid() {
		sa.Dst = dst
	}
	return sa
}

func (g *Gateway) addTunnel(t *config.Tunnel, owner int) error {
	spec := sad.TunnelSpec{Name: t.Name, Local: t.Local, Peer: t.Peer, PeerPort: t.PeerPort, Remote: t.Remote, Owner: owner}
	spec.Encap = esp.EncapNone
	if t.Encap == config.EncapUDP {
		spec.Encap = esp.EncapUDP
	}
	spec.MTU = staticTunnelMTU(g.cfg, t)
	spec.TS = staticTS(t.Remote, g.policy != nil)
	var opened []*sad.SA
	fail := func(err error) error {
		for _, s := range opened {
			s.End()
		}
		return fmt.Errorf("gateway: tunnel %q: %w", t.Name, err)
	}
	out, err := g.openSA(g.cfg, t, t.Out, esp.Outbound)
	if err != nil {
		return fail(err)
	}
	opened = append(opened, out)
	spec.Out = out
	for _, n := range t.In {
		in, err := g.openSA(g.cfg, t, n, esp.Inbound)
		if err != nil {
			return fail(err)
		}
		opened = append(opened, in)
		spec.In = append(spec.In, in)
	}
	if _, err := g.store.AddTunnel(spec); err != nil {
		return fail(err)
	}
	return nil
}

// staticTS are the traffic selectors of a static tunnel's SAs: its routed
// remote prefixes on the peer's side, as WireGuard's AllowedIPs, and any
// address on ours. A packet it decrypts from another source is dropped
// (RFC 4301 section 5.2). A tunnel without prefixes in policy-based mode
// has none (nil): the reverse of its protect policies checks its packets
// (policy.go). A route-based tunnel without prefixes accepts nothing.
func staticTS(remote []netip.Prefix, policyMode bool) *spd.SATS {
	if policyMode && len(remote) == 0 {
		return nil
	}
	rs := make([]spd.Range, len(remote))
	for i, p := range remote {
		rs[i] = spd.RangeOf(p)
	}
	return spd.NewSATS(spd.AnyAddress, rs)
}

// Store gives read access to the SAD.
func (g *Gateway) Store() *sad.Store { return g.store }

// Dataplane gives access to the counters; nil for a TLS-only gateway.
func (g *Gateway) Dataplane() *dataplane.Dataplane { return g.dp }

// Config returns the configuration in force.
func (g *Gateway) Config() *config.Gateway {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cfg
}

// Close drains the data plane, removes the tunnels and zeroes their keys.
// It is idempotent.
func (g *Gateway) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	// The pair first: no takeover or release runs after it.
	g.closeHA()
	// TLS next: its listeners may use the data plane's engines.
	errs := []error{g.closeTLS()}
	g.closeIKE()
	if g.dp != nil {
		g.dp.Close()
	}
	g.cancel()
	// The SAs' final states are written as they retire and made durable
	// together (finalStates).
	fs := &finalStates{}
	g.closing.Store(fs)
	g.store.Close()
	fs.sync(&g.stateWriter.slots, g.log)
	for _, e := range g.engines {
		errs = append(errs, e.Close())
	}
	g.stateWriter.slots.close()
	if g.stateLock != nil {
		g.stateLock.Close()
	}
	g.log.Info("gateway down")
	return errors.Join(errs...)
}
