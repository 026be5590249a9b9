package gateway

// Read-only views and the control operations the control socket serves.

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/ha"
	"github.com/sluicegw/sluice/sad"
)

// SAInfo describes one SA in the database, without key material.
type SAInfo struct {
	Name       string            `json:"name"`
	Tunnel     string            `json:"tunnel"`
	Direction  string            `json:"direction"` // "in" or "out"
	SPI        uint32            `json:"spi"`
	Alg        string            `json:"alg"`
	Mode       string            `json:"mode"`
	Encap      string            `json:"encap"`
	ESN        bool              `json:"esn"`
	Engine     string            `json:"engine"`
	Packets    uint64            `json:"packets"`
	Bytes      uint64            `json:"bytes"`
	Drops      map[string]uint64 `json:"drops"`
	NeedsRekey bool              `json:"needs_rekey"`
	// StateFailing is true while the SA's sequence-number reservations
	// cannot be recorded in the state directory: it drops its packets.
	StateFailing  bool   `json:"state_failing,omitempty"`
	StateFailures uint64 `json:"state_failures,omitempty"` // reservations that could not be recorded
	StateError    string `json:"state_error,omitempty"`    // the last such error
}

// TunnelInfo describes one tunnel.
type TunnelInfo struct {
	Name   string   `json:"name"`
	Local  string   `json:"local"`
	Peer   string   `json:"peer"`
	Encap  string   `json:"encap"`
	Remote []string `json:"remote"`
	MTU    int      `json:"mtu"`
	Worker int      `json:"worker"`
	Out    string   `json:"out"`
	In     []string `json:"in"`
}

// PolicyInfo describes one policy.
type PolicyInfo struct {
	Name     string `json:"name"`
	Selector string `json:"selector"`
	Action   string `json:"action"`
	Tunnel   string `json:"tunnel,omitempty"`
}

// Stats are the gateway's counters. A TLS-only gateway has no data plane:
// its Dataplane is empty and its SAs are none.
type Stats struct {
	Dataplane dataplane.Stats `json:"dataplane"`
	SAs       []SAInfo        `json:"sas"`
	TLS       []TLSInfo       `json:"tls"` // the TLS listeners and origins, in configuration order
	// IKE is the IKE side, when the configuration has [[connection]]s.
	IKE *IKEInfo `json:"ike,omitempty"`
	// Config is the absolute path of the configuration file the gateway
	// runs ("" when its configuration did not come from a file), so that
	// a client given a file can tell whether it reached that file's
	// gateway.
	Config string `json:"config,omitempty"`
	// Tunnels are the counters of each tunnel by direction, summed over
	// its SAs, retired ones included (totals.go).
	Tunnels []TunnelStats `json:"tunnels,omitempty"`
	// HA is the hot-standby pair's status, with [ha].
	HA *ha.Status `json:"ha,omitempty"`
	// ESPLink says which link carries ESP in UDP ([udp] link), with
	// [udp].
	ESPLink *ESPLinkInfo `json:"esp_link,omitempty"`
}

func saInfo(s *sad.SA, dir string) SAInfo {
	rt := s.SA
	c := rt.Config()
	info := SAInfo{Name: s.Name, Direction: dir, SPI: rt.SPI(), Alg: c.Alg.String(), Mode: c.Mode.String(),
		Encap: c.Encap.String(), ESN: c.ESN, Engine: s.Engine,
		Packets: rt.Counters.Packets.Load(), Bytes: rt.Counters.Bytes.Load(), Drops: rt.Counters.Drops.Map(),
		NeedsRekey: rt.NeedsRekey()}
	if s.Tunnel != nil {
		info.Tunnel = s.Tunnel.Name
	}
	if h := s.State; h != nil {
		info.StateFailing, info.StateFailures = h.Failing.Load(), h.Failures.Load()
		if e := h.LastError.Load(); e != nil {
			info.StateError = *e
		}
	}
	return info
}

// SAs lists every SA: each tunnel's outbound SA, then its inbound ones.
// Sequence numbers are not shown: they belong to the workers that own the
// SAs and are not read from other goroutines.
func (g *Gateway) SAs() []SAInfo { return SAsOf(g.store.Load()) }

// SAsOf lists the SAs of a SAD snapshot, as Gateway.SAs does.
func SAsOf(db *sad.DB) []SAInfo {
	var out []SAInfo
	for _, t := range db.Tunnels() {
		if s := t.Out(); s != nil {
			out = append(out, saInfo(s, "out"))
		}
		for _, s := range t.Inbound() {
			out = append(out, saInfo(s, "in"))
		}
	}
	return out
}

// Tunnels lists the tunnels.
func (g *Gateway) Tunnels() []TunnelInfo { return TunnelsOf(g.store.Load()) }

// TunnelsOf lists the tunnels of a SAD snapshot, as Gateway.Tunnels does.
func TunnelsOf(db *sad.DB) []TunnelInfo {
	var out []TunnelInfo
	for _, t := range db.Tunnels() {
		ti := TunnelInfo{Name: t.Name, Local: t.Local.String(), Peer: t.Peer.String(), Encap: t.Encap.String(), MTU: t.MTU, Worker: t.Owner}
		for _, p := range t.Remote {
			ti.Remote = append(ti.Remote, p.String())
		}
		if s := t.Out(); s != nil {
			ti.Out = s.Name
		}
		for _, s := range t.Inbound() {
			ti.In = append(ti.In, s.Name)
		}
		out = append(out, ti)
	}
	return out
}

// Policies lists the policies in force (empty in route-based mode).
func (g *Gateway) Policies() []PolicyInfo {
	if g.policy == nil {
		return nil
	}
	var out []PolicyInfo
	for _, p := range g.policy.Policies() {
		pi := PolicyInfo{Name: p.Name, Selector: p.Sel.String(), Action: p.Action.String()}
		if name, ok := p.Target.(string); ok {
			pi.Tunnel = name
		}
		out = append(out, pi)
	}
	return out
}

// Stats reads every counter.
func (g *Gateway) Stats() Stats {
	var st Stats
	if g.dp != nil {
		st.Dataplane = g.dp.Stats()
	}
	st.SAs = g.SAs()
	st.Tunnels = g.TunnelStats()
	st.TLS = g.TLS()
	if g.hasIKE() {
		info := g.IKE()
		st.IKE = &info
	}
	if hs, ok := g.HAStatus(); ok {
		st.HA = &hs
	}
	if l, ok := g.ESPLink(); ok {
		st.ESPLink = &l
	}
	st.Config = absPath(g.Config().File)
	return st
}

// absPath is path made absolute against the working directory, which
// is where a relative path given to sluice run was resolved; "" stays "".
func absPath(path string) string {
	if path == "" {
		return ""
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// errTLSOnly is the answer of the SA operations on a TLS-only gateway.
var errTLSOnly = errors.New("gateway: a TLS-only gateway has no tunnels or SAs (its configuration has only [[tls]] and [[tls_origin]] sections)")

// AddSA installs sa on a running tunnel: dir "in" adds an inbound SA, "out"
// switches the outbound SA (the old one is reclaimed once drained). sa is
// checked against the tunnel as the configuration file's SAs are, and its
// sequence numbers are kept in the state directory like theirs. The SA
// lives until the next reload that does not mention it.
func (g *Gateway) AddSA(tunnel, dir string, sa *config.SA) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cfg.TLSOnly() {
		return errTLSOnly
	}
	return InstallSA(g.store, g.cfg, tunnel, dir, sa, g.openEntry)
}

// InstallSA is AddSA on any store: it checks sa against the tunnel of cfg
// as the file's SAs are checked, gives it the tunnel's addresses where it
// leaves them out, opens it with open (on the engine of the tunnel's
// outbound SA, else cfg's default) and adds it to store: next to the
// tunnel's inbound SAs (dir "in") or in place of its outbound SA ("out").
// If the store refuses it, its key is destroyed. In-memory gateways
// (internal/lab) rekey through it, so that they take the control socket's
// path.
func InstallSA(store *sad.Store, cfg *config.Gateway, tunnel, dir string, sa *config.SA,
	open func(engine string, sa *config.SA, name string, d esp.Direction) (*sad.SA, error)) error {
	t := store.Load().Tunnel(tunnel)
	if t == nil {
		return fmt.Errorf("gateway: no tunnel %q", tunnel)
	}
	engine := ""
	if s := t.Out(); s != nil {
		engine = s.Engine
	}
	if engine == "" {
		engine = cfg.Engine
	}
	d := esp.Inbound
	if dir == "out" {
		d = esp.Outbound
	} else if dir != "in" {
		return fmt.Errorf("gateway: direction must be \"in\" or \"out\", not %q", dir)
	}
	// The checks the file's SAs get (config.Gateway.CheckTunnelSA): an SA
	// the file would refuse is refused here too.
	if err := cfg.CheckTunnelSA(tunnel, sa, d == esp.Outbound); err != nil {
		return err
	}
	sac := withTunnelAddrs(*sa, t.Local, t.Peer, d)
	s, err := open(engine, &sac, sa.Name, d)
	if err != nil {
		return err
	}
	if d == esp.Outbound {
		err = store.SwitchOutbound(tunnel, s)
	} else {
		err = store.AddInbound(tunnel, s)
	}
	if err != nil {
		s.End()
	}
	return err
}

// DelSA removes the inbound SA with the given SPI.
func (g *Gateway) DelSA(spi uint32) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cfg.TLSOnly() {
		return errTLSOnly
	}
	return g.store.RemoveInbound(spi)
}
