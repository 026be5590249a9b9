package gateway

// Reload applies a changed configuration to a running gateway without
// dropping traffic. The rules:
//   - links, workers and engines are fixed for the process: a change to
//     them is refused (it needs a restart);
//   - a new tunnel is added, a removed one removed;
//   - a tunnel whose SAs changed is rekeyed in the order that loses nothing
//     (RFC 4301 section 4.5, as IKE does it): new inbound SAs first, then
//     the outbound switch, and old inbound SAs are removed only after
//     DrainTime, so packets the peer sent with them still arrive;
//   - a tunnel whose endpoints or prefixes changed is replaced.
// An SA whose settings are unchanged keeps its runtime: sequence numbers
// and replay windows carry on.

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/esp"
)

// DrainTime is how long an inbound SA that left the configuration keeps
// accepting packets.
var DrainTime = 2 * time.Second

// Reload applies next. On error the running configuration stays in force.
func (g *Gateway) Reload(next *config.Gateway) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("gateway: closed")
	}
	old := g.cfg
	if err := fixedPartsEqual(old, next); err != nil {
		return err
	}
	g.cfg = next
	workers := len(g.dp.Stats().Workers)
	db := g.store.Load()
	added := 0
	oldByName := map[string]*config.Tunnel{}
	for i := range old.Tunnels {
		oldByName[old.Tunnels[i].Name] = &old.Tunnels[i]
	}
	newByName := map[string]bool{}
	var errs []error
	for i := range next.Tunnels {
		nt := &next.Tunnels[i]
		newByName[nt.Name] = true
		ot := oldByName[nt.Name]
		owner := (len(db.Tunnels()) + added) % workers
		if t := db.Tunnel(nt.Name); t != nil {
			owner = t.Owner
		} else {
			added++
		}
		switch {
		case ot == nil:
			errs = append(errs, g.addTunnel(nt, owner))
			g.log.Info("tunnel added", "tunnel", nt.Name)
		case !sameEndpoints(ot, nt):
			g.store.RemoveTunnel(nt.Name)
			errs = append(errs, g.addTunnel(nt, owner))
			g.log.Info("tunnel replaced", "tunnel", nt.Name)
		default:
			errs = append(errs, g.rekey(old, ot, nt))
		}
	}
	for name := range oldByName {
		if !newByName[name] {
			errs = append(errs, g.store.RemoveTunnel(name))
			g.log.Info("tunnel removed", "tunnel", name)
		}
	}
	if g.policy != nil || len(next.Policies) > 0 {
		if err := g.policy.update(next, g.store.Load()); err != nil {
			errs = append(errs, err)
		}
	}
	for _, err := range errs {
		if err != nil {
			g.log.Error("reload", "err", err)
			return fmt.Errorf("gateway: reload partly applied: %w", err)
		}
	}
	g.log.Info("configuration reloaded", "file", next.File, "tunnels", len(next.Tunnels))
	return nil
}

// rekey moves a tunnel from its old SAs to its new ones.
func (g *Gateway) rekey(oldCfg *config.Gateway, ot, nt *config.Tunnel) error {
	t := g.store.Load().Tunnel(nt.Name)
	if t == nil {
		return fmt.Errorf("gateway: tunnel %q vanished", nt.Name)
	}
	// 1. Inbound SAs that are new (or changed).
	keep := map[uint32]bool{}
	for _, name := range nt.In {
		if slices.Contains(ot.In, name) && sameSA(oldCfg.SA(name), g.cfg.SA(name), true) {
			keep[g.cfg.SA(name).SPI] = true
			continue
		}
		in, err := g.openSA(g.cfg, nt, name, esp.Inbound)
		if err != nil {
			return err
		}
		if old := g.store.Load().Inbound(in.SA.SPI()); old != nil && old.Tunnel == t {
			// The SA changed but kept its SPI: the old one must go first,
			// and packets still in flight under it are lost.
			g.store.RemoveInbound(in.SA.SPI())
			g.log.Warn("inbound SA replaced under the same SPI; packets in flight under the old key are lost",
				"tunnel", nt.Name, "sa", name, "spi", fmt.Sprintf("%#x", in.SA.SPI()))
		}
		if err := g.store.AddInbound(nt.Name, in); err != nil {
			in.Key.Destroy()
			return err
		}
		keep[in.SA.SPI()] = true
		g.log.Info("inbound SA added", "tunnel", nt.Name, "sa", name, "spi", fmt.Sprintf("%#x", in.SA.SPI()))
	}
	// 2. The outbound switch.
	if nt.Out != ot.Out || !sameSA(oldCfg.SA(ot.Out), g.cfg.SA(nt.Out), false) {
		out, err := g.openSA(g.cfg, nt, nt.Out, esp.Outbound)
		if err != nil {
			return err
		}
		if err := g.store.SwitchOutbound(nt.Name, out); err != nil {
			out.Key.Destroy()
			return err
		}
		g.log.Info("outbound SA switched", "tunnel", nt.Name, "sa", nt.Out, "spi", fmt.Sprintf("%#x", out.SA.SPI()))
	}
	// 3. Old inbound SAs drain, then go.
	for _, in := range t.Inbound() {
		if keep[in.SA.SPI()] {
			continue
		}
		victim := in
		time.AfterFunc(DrainTime, func() {
			if cur := g.store.Load().Inbound(victim.SA.SPI()); cur == victim {
				g.store.RemoveInbound(victim.SA.SPI())
				g.log.Info("inbound SA removed after draining", "tunnel", nt.Name, "sa", victim.Name)
			}
		})
	}
	return nil
}

// fixedPartsEqual refuses changes that need a restart.
func fixedPartsEqual(a, b *config.Gateway) error {
	var what []string
	if a.Workers != b.Workers {
		what = append(what, "gateway.workers")
	}
	if a.Engine != b.Engine || !slices.Equal(engineNames(a), engineNames(b)) {
		what = append(what, "engines")
	}
	if a.TUN.Name != b.TUN.Name || a.TUN.MTU != b.TUN.MTU || a.TUN.Queues != b.TUN.Queues || !slices.Equal(a.TUN.Addresses, b.TUN.Addresses) {
		what = append(what, "[tun]")
	}
	if (a.UDP == nil) != (b.UDP == nil) || (a.UDP != nil && *a.UDP != *b.UDP) {
		what = append(what, "[udp]")
	}
	if (a.RawESP == nil) != (b.RawESP == nil) || (a.RawESP != nil && *a.RawESP != *b.RawESP) {
		what = append(what, "[rawesp]")
	}
	if a.ControlSocket != b.ControlSocket || a.Metrics != b.Metrics {
		what = append(what, "control_socket/metrics")
	}
	if a.Oversize != b.Oversize {
		what = append(what, "gateway.oversize")
	}
	if (len(a.Policies) == 0) != (len(b.Policies) == 0) {
		what = append(what, "route-based/policy-based mode")
	}
	if len(what) > 0 {
		// Joined, not %v: a list formatted with %v wraps "[tun]" in
		// brackets of its own.
		return fmt.Errorf("gateway: %s: changing %s needs a restart; the running configuration stays", b.File, strings.Join(what, ", "))
	}
	return nil
}

func sameEndpoints(a, b *config.Tunnel) bool {
	return a.Local == b.Local && a.Peer == b.Peer && a.Encap == b.Encap && a.PeerPort == b.PeerPort &&
		slices.Equal(a.Remote, b.Remote) && a.MTU == b.MTU && a.Engine == b.Engine
}

// sameSA reports whether two SA definitions describe the same SA (the
// starting sequence number aside: a running SA keeps its own). The replay
// window matters only inbound.
func sameSA(a, b *config.SA, inbound bool) bool {
	if a == nil || b == nil {
		return false
	}
	return a.SPI == b.SPI && a.Src == b.Src && a.Dst == b.Dst && a.Mode == b.Mode && a.Encap == b.Encap &&
		a.SPort == b.SPort && a.DPort == b.DPort && a.Alg == b.Alg && bytes.Equal(a.EncKey, b.EncKey) &&
		bytes.Equal(a.AuthKey, b.AuthKey) && a.ESN == b.ESN && (!inbound || a.ReplayWindow == b.ReplayWindow)
}
