package lab

// Two gateways in one process, without root: each is a dataplane.Dataplane
// built from a gateway configuration, its ciphertext side joined to the
// other's by a pktio/pipe pair, its plaintext side a pipe whose far end is
// a MemHost, a small UDP/IPv4 host standing in for the kernel behind the TUN
// device:
//
//	MemHost A <-pipe-> dataplane A <-pipe-> dataplane B <-pipe-> MemHost B
//
// Everything above the links is the gateway's own code: the SAD, the ESP
// runtime, the crypto engines, the workers. Only the kernel's part (TUN,
// UDP sockets, the wire) is replaced, so this measures the data plane, not
// the I/O path; DESIGN.md decision 12 keeps it out of integration tests.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/pipe"
	"github.com/sluicegw/sluice/sad"

	// The engines a configuration may name.
	_ "github.com/sluicegw/sluice/cryptodev/sched"
	_ "github.com/sluicegw/sluice/cryptodev/soft"
)

// memQueue is the capacity of each in-memory link, in packets per
// direction; a full link drops and counts (pipe.TxFull).
const memQueue = 4096

// MemorySite is one gateway of a MemoryPair.
type MemorySite struct {
	Config *config.Gateway
	// Host is the plaintext side: sockets on it send into the tunnel and
	// receive what comes out of it.
	Host *MemHost

	dp      *dataplane.Dataplane
	store   *sad.Store
	engines map[string]cryptodev.Engine
}

// MemoryPair builds two gateways from a and b, whose tunnels must point at
// each other (a's peer is b's local address), joined back to back in
// memory, and starts them. The lab's Close stops them. Route-based tunnels
// only: configurations with policies are refused. [tun], [udp] and
// [rawesp] are ignored but for the TUN MTU.
func (l *Lab) MemoryPair(ctx context.Context, a, b *config.Gateway) (sa, sb *MemorySite, err error) {
	return l.MemoryPairWith(ctx, a, b, MemoryOptions{})
}

// MemoryOptions vary a MemoryPair.
type MemoryOptions struct {
	// Wire, if set, wraps the two ends of the in-memory wire, a's and b's
	// (a sends its ESP on wa and reads the peer's from it), for example in
	// pktio/fault links. The wrappers own the ends: closing a wrapper
	// closes its end.
	Wire func(a, b pktio.Link) (wa, wb pktio.Link)
}

// MemoryPairWith is MemoryPair with options.
func (l *Lab) MemoryPairWith(ctx context.Context, a, b *config.Gateway, o MemoryOptions) (sa, sb *MemorySite, err error) {
	var netA, netB pktio.Link
	netA, netB = pipe.New(memQueue)
	if o.Wire != nil {
		netA, netB = o.Wire(netA, netB)
	}
	if err := l.register("close in-memory wire", func() error { netA.Close(); return netB.Close() }); err != nil {
		return nil, nil, err
	}
	if sa, err = l.memorySite(ctx, a, netA); err != nil {
		return nil, nil, err
	}
	if sb, err = l.memorySite(ctx, b, netB); err != nil {
		return nil, nil, err
	}
	return sa, sb, nil
}

func (l *Lab) memorySite(ctx context.Context, cfg *config.Gateway, wire pktio.Link) (s *MemorySite, err error) {
	if len(cfg.Policies) > 0 {
		return nil, fmt.Errorf("lab: %s: policies are not supported in memory", cfg.File)
	}
	s = &MemorySite{Config: cfg, engines: map[string]cryptodev.Engine{}}
	if err := l.register("close in-memory gateway "+cfg.File, s.close); err != nil {
		return nil, err
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	names := []string{cfg.Engine}
	for _, t := range cfg.Tunnels {
		if t.Engine != "" && !slices.Contains(names, t.Engine) {
			names = append(names, t.Engine)
		}
	}
	for _, name := range names {
		eng, err := cryptodev.Open(name)
		if err != nil {
			return nil, fmt.Errorf("lab: %s: %w", cfg.File, err)
		}
		s.engines[name] = eng
	}

	user, plain := pipe.New(memQueue)
	s.Host = NewMemHost(user)
	// Slots as the gateway sizes them: a full packet and the most ESP adds.
	slot := max(2048, packet.UDPHeader+config.DefaultUnderlayMTU+esp.MaxHeadroom+esp.MaxTailroom+64)
	pool := packet.NewPool(4096*max(1, workers/2), slot, esp.MaxHeadroom+32)
	s.store = sad.NewStore(func(gen uint64, sas []*sad.SA) {
		if s.dp != nil {
			s.dp.Retire(gen, sas)
			return
		}
		for _, x := range sas {
			x.Key.Destroy()
		}
	})
	s.dp, err = dataplane.New(dataplane.Config{
		Engines: s.engines, Default: cfg.Engine,
		Plain: []dataplane.Link{plain}, Net: []dataplane.Link{wire}, Store: s.store, Pool: pool,
		Logger: l.log.With("gateway", cfg.File),
	})
	if err != nil {
		plain.Close()
		return nil, fmt.Errorf("lab: %s: %w", cfg.File, err)
	}
	for i := range cfg.Tunnels {
		if err := s.addTunnel(&cfg.Tunnels[i], i%workers); err != nil {
			return nil, fmt.Errorf("lab: %s: tunnel %q: %w", cfg.File, cfg.Tunnels[i].Name, err)
		}
	}
	s.dp.Start(ctx)
	return s, nil
}

// addTunnel installs a configured tunnel with freshly opened SAs.
func (s *MemorySite) addTunnel(t *config.Tunnel, owner int) error {
	engine := t.Engine
	if engine == "" {
		engine = s.Config.Engine
	}
	var opened []*sad.SA
	open := func(name string, dir esp.Direction) (*sad.SA, error) {
		c := s.Config.SA(name)
		if c == nil {
			return nil, fmt.Errorf("no SA %q", name)
		}
		x, err := s.openEntry(engine, c, name, dir)
		if err != nil {
			return nil, err
		}
		opened = append(opened, x)
		return x, nil
	}
	fail := func(err error) error {
		for _, x := range opened {
			x.Key.Destroy()
		}
		return err
	}
	spec := sad.TunnelSpec{Name: t.Name, Local: t.Local, Peer: t.Peer, PeerPort: t.PeerPort, Remote: t.Remote, Owner: owner, Encap: esp.EncapNone}
	if t.Encap == config.EncapUDP {
		spec.Encap = esp.EncapUDP
	}
	out, err := open(t.Out, esp.Outbound)
	if err != nil {
		return fail(err)
	}
	spec.Out = out
	for _, n := range t.In {
		in, err := open(n, esp.Inbound)
		if err != nil {
			return fail(err)
		}
		spec.In = append(spec.In, in)
	}
	spec.MTU = t.MTU
	if spec.MTU == 0 {
		spec.MTU = s.Config.TUN.MTU
	}
	if spec.MTU == 0 {
		// The largest packet that the outbound SA keeps within the
		// underlay MTU, as a gateway computes it.
		c := s.Config.SA(t.Out)
		spec.MTU = esp.TunnelMTU(c.Alg, t.Peer.Is6(), t.Encap == config.EncapUDP, config.DefaultUnderlayMTU)
	}
	if _, err := s.store.AddTunnel(spec); err != nil {
		return fail(err)
	}
	return nil
}

// openEntry makes the runtime of sa in one direction on the named engine
// and the SAD entry that holds it. In-memory gateways keep no state
// directory.
func (s *MemorySite) openEntry(engine string, c *config.SA, name string, dir esp.Direction) (*sad.SA, error) {
	rt, err := gateway.OpenSA(s.engines[engine], c, dir)
	if err != nil {
		return nil, err
	}
	x := &sad.SA{Name: name, SA: rt, Key: rt.Config().Key, Engine: engine}
	rt.SetUser(x)
	return x, nil
}

// AddSA installs sa on a running tunnel as the control socket's `sa add`
// does (gateway.InstallSA): dir "in" adds an inbound SA, "out" switches
// the outbound SA. Calls are serialised by the store.
func (s *MemorySite) AddSA(tunnel, dir string, sa *config.SA) error {
	return gateway.InstallSA(s.store, s.Config, tunnel, dir, sa, s.openEntry)
}

// DelSA removes the inbound SA with the given SPI, as `sa del` does; its
// key is destroyed once no lane can hold it.
func (s *MemorySite) DelSA(spi uint32) error { return s.store.RemoveInbound(spi) }

// close stops the data plane and its host and releases the SAs and
// engines.
func (s *MemorySite) close() error {
	if s.dp != nil {
		s.dp.Close()
	}
	if s.Host != nil {
		s.Host.Close()
	}
	if s.store != nil {
		s.store.Close()
	}
	var errs []error
	for _, e := range s.engines {
		errs = append(errs, e.Close())
	}
	return errors.Join(errs...)
}

// Tunnels lists the site's tunnels, as gateway.Gateway.Tunnels does.
func (s *MemorySite) Tunnels() []gateway.TunnelInfo { return gateway.TunnelsOf(s.store.Load()) }

// SAs lists the site's SAs with their counters, as gateway.Gateway.SAs
// does: each tunnel's outbound SA, then its inbound ones.
func (s *MemorySite) SAs() []gateway.SAInfo { return gateway.SAsOf(s.store.Load()) }

// Stats reads the site's counters, as gateway.Gateway.Stats does.
func (s *MemorySite) Stats() gateway.Stats {
	return gateway.Stats{Dataplane: s.dp.Stats(), SAs: s.SAs()}
}
