package gateway

// Reload makes a running gateway what a configuration file says, without
// dropping traffic. The rules:
//   - links, workers and engines are fixed for the process: a change to
//     them is refused (it needs a restart);
//   - a new tunnel is added, a removed one removed;
//   - a tunnel whose running SAs differ from the file's (changed in the
//     file, or through the control socket since) is rekeyed in the order
//     that loses nothing (RFC 4301 section 4.5, as IKE does it): new
//     inbound SAs first, then the outbound switch, and old inbound SAs are
//     removed only after DrainTime, so packets the peer sent with them
//     still arrive;
//   - a tunnel whose endpoints or prefixes changed is replaced.
// An SA whose settings are unchanged keeps its runtime: sequence numbers
// and replay windows carry on.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/pktio/netutil"
	"github.com/sluicegw/sluice/sad"
)

// DrainTime is how long an inbound SA that left the configuration keeps
// accepting packets.
var DrainTime = 2 * time.Second

// Reload applies next and returns what it changed, one line per change.
// It first checks what Start would: the IKE port binds on every local
// address next's connections name (checkIKEBinds).
// The running state it compares next with is the SAD itself, not the file
// it last applied, so whatever the control socket changed since (an SA
// added or deleted, an outbound SA switched) is put back to what next
// says. On an error in fixed parts nothing changes; an error in a tunnel
// (an SA the engine refuses, prefixes that overlap) leaves the changes
// made to the other tunnels in force, and they are returned with it.
func (g *Gateway) Reload(next *config.Gateway) ([]string, error) {
	return g.Apply(next, nil)
}

// Apply is Reload with a session ticket key ring: when ticketKeys is not
// nil, every TLS listener with session tickets uses exactly those keys
// from now on, the first to issue tickets and all to accept them
// (tls.Service.SetTicketKeys), in place of its own rotation; nil leaves
// the ring in force (or the listeners' own rotation, if none was ever
// given). The ring changes with the TLS sections, all or nothing.
func (g *Gateway) Apply(next *config.Gateway, ticketKeys [][32]byte) ([]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, fmt.Errorf("gateway: closed")
	}
	old := g.cfg
	if err := fixedPartsEqual(old, next); err != nil {
		return nil, err
	}
	if err := checkRegroupedTunnels(old, next); err != nil {
		return nil, err
	}
	// What Start checks by binding, a reload checks before it changes
	// anything.
	if err := g.checkIKEBinds(next); err != nil {
		return nil, err
	}
	var changes []string
	note := func(msg string, args ...any) {
		g.log.Info(msg, args...)
		line := msg
		for i := 0; i+1 < len(args); i += 2 {
			line += fmt.Sprintf(" %v=%v", args[i], args[i+1])
		}
		changes = append(changes, line)
	}
	// TLS first: it changes all or nothing, so a TLS error leaves the
	// whole running configuration as it was.
	if err := g.reloadTLS(next, ticketKeys, note); err != nil {
		return nil, err
	}
	noteLogLevels(old, next, note)
	g.cfg = next
	var errs []error
	// The groups' addresses before the tunnels and connections on them:
	// those added on a group's address are leased as the group's.
	errs = append(errs, g.reloadHA(next, note))
	// A tunnel or connection whose local address changed group is
	// replaced: its SAs are leased for one group, or for none.
	regrouped := map[string]bool{}
	for _, c := range next.Connections {
		if old.HAGroupOf(c.Local) != next.HAGroupOf(c.Local) {
			regrouped[c.Name] = true
		}
	}
	if next.TLSOnly() {
		g.log.Info("configuration reloaded", "file", next.File, "tls", len(next.TLS), "origins", len(next.TLSOrigins), "changes", len(changes))
		return changes, errors.Join(errs...)
	}
	workers := len(g.dp.Stats().Workers)
	db := g.store.Load()
	added := 0
	oldByName := map[string]*config.Tunnel{}
	for i := range old.Tunnels {
		oldByName[old.Tunnels[i].Name] = &old.Tunnels[i]
	}
	newByName := map[string]bool{}
	for _, c := range next.Connections {
		for _, ch := range c.Children {
			newByName[ch.Name] = true // the IKE side's (reloadIKE)
		}
	}
	for i := range next.Tunnels {
		nt := &next.Tunnels[i]
		newByName[nt.Name] = true
		t := db.Tunnel(nt.Name)
		owner := (len(db.Tunnels()) + added) % workers
		if t != nil {
			owner = t.Owner
		} else {
			added++
		}
		switch ot := oldByName[nt.Name]; {
		case t == nil:
			if err := g.addTunnel(nt, owner); err != nil {
				errs = append(errs, err)
			} else {
				note("tunnel added", "tunnel", nt.Name)
			}
		case ot == nil || !sameEndpoints(ot, nt) || old.HAGroupOf(nt.Local) != next.HAGroupOf(nt.Local):
			g.store.RemoveTunnel(nt.Name)
			if err := g.addTunnel(nt, owner); err != nil {
				errs = append(errs, err)
				note("tunnel removed", "tunnel", nt.Name, "err", err)
			} else {
				note("tunnel replaced", "tunnel", nt.Name)
			}
		default:
			errs = append(errs, g.reconcile(t, nt, note))
		}
	}
	for _, t := range db.Tunnels() {
		if !newByName[t.Name] && !g.isIKEChild(t.Name) {
			if err := g.store.RemoveTunnel(t.Name); err != nil {
				errs = append(errs, err)
			} else {
				note("tunnel removed", "tunnel", t.Name)
			}
		}
	}
	if err := g.reloadIKE(next, regrouped, note); err != nil {
		errs = append(errs, err)
	}
	if g.policy != nil || len(next.Policies) > 0 {
		if err := g.policy.update(next, g.store.Load()); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, g.syncRoutes(old, next, note))
	errs = append(errs, g.syncTUNMTU(next, note))
	if err := errors.Join(errs...); err != nil {
		g.log.Error("reload partly applied", "changes", len(changes), "err", err)
		return changes, fmt.Errorf("gateway: reload partly applied (%d changes made; the rest failed): %w", len(changes), err)
	}
	g.log.Info("configuration reloaded", "file", next.File, "tunnels", len(next.Tunnels), "changes", len(changes))
	return changes, nil
}

// noteLogLevels lists the log levels next changes: log_level, and each
// subsystem's that log_levels names (config.Gateway.LevelOf). The caller of Reload applies them
// (sluice run's OnReload).
func noteLogLevels(old, next *config.Gateway, note func(string, ...any)) {
	if old.LevelOf("") != next.LevelOf("") {
		note("log level", "from", old.LevelOf(""), "to", next.LevelOf(""))
	}
	for _, sub := range config.LogSubsystems {
		// A subsystem that follows log_level in both is listed with it.
		own := old.LogLevels[sub] != "" || next.LogLevels[sub] != ""
		if a, b := old.LevelOf(sub), next.LevelOf(sub); a != b && own {
			note("log level", "subsystem", sub, "from", a, "to", b)
		}
	}
}

// syncRoutes routes into the TUN device the remote prefixes next has and
// old had not (tunnels' remote routes, IKE children's remote selectors,
// protect policies' destinations), and removes the routes of those old had
// and next has not, as Start routes them at first.
func (g *Gateway) syncRoutes(old, next *config.Gateway, note func(string, ...any)) error {
	was, is := map[netip.Prefix]bool{}, map[netip.Prefix]bool{}
	for _, p := range allRemotes(old) {
		was[p.Masked()] = true
	}
	for _, p := range allRemotes(next) {
		is[p.Masked()] = true
	}
	var errs []error
	for _, p := range slices.SortedFunc(maps.Keys(is), netip.Prefix.Compare) {
		if !was[p] {
			if err := netutil.ReplaceRoute(next.TUN.Name, p); err != nil {
				errs = append(errs, err)
			} else {
				note("route added", "dst", p, "dev", next.TUN.Name)
			}
		}
	}
	for _, p := range slices.SortedFunc(maps.Keys(was), netip.Prefix.Compare) {
		if !is[p] {
			if err := netutil.DelRoute(next.TUN.Name, p); err != nil {
				errs = append(errs, err)
			} else {
				note("route removed", "dst", p, "dev", next.TUN.Name)
			}
		}
	}
	return errors.Join(errs...)
}

// syncTUNMTU sets the TUN device's MTU to what next's tunnels take
// (tunnelMTU), so that a tunnel or IKE child that takes less than the
// device did learns its senders the path MTU as those at start do. It is
// never raised above the MTU at start, which the packet pool's slots are
// sized for. g.mu is held.
func (g *Gateway) syncTUNMTU(next *config.Gateway, note func(string, ...any)) error {
	want := min(tunnelMTU(next), g.tunMTU0)
	if want == g.tunMTU {
		return nil
	}
	if err := netutil.SetMTU(next.TUN.Name, want); err != nil {
		return err
	}
	note("TUN MTU changed", "dev", next.TUN.Name, "from", g.tunMTU, "to", want)
	g.tunMTU = want
	return nil
}

// reconcile makes tunnel t's running SAs those nt names, in the order that
// loses nothing: new inbound SAs first, then the outbound switch, and
// running inbound SAs nt does not name are removed only after DrainTime.
// A running SA is kept, with its sequence numbers and replay window, when
// it was built from the definition nt gives it (sad.SA.Def).
func (g *Gateway) reconcile(t *sad.Tunnel, nt *config.Tunnel, note func(string, ...any)) error {
	// 1. Inbound SAs that are missing or differ.
	keep := map[*sad.SA]bool{}
	for _, name := range nt.In {
		def := withTunnelAddrs(*g.cfg.SA(name), nt.Local, nt.Peer, esp.Inbound)
		cur := g.store.Load().Inbound(def.SPI)
		if cur != nil && cur.Tunnel == t && cur.Def == saDef(&def, esp.Inbound) {
			keep[cur] = true
			g.undrain(cur, note)
			continue
		}
		in, err := g.openSA(g.cfg, nt, name, esp.Inbound)
		if err != nil {
			return err
		}
		if cur != nil && cur.Tunnel == t {
			// The SA changed but kept its SPI: the old one must go first,
			// and packets still in flight under it are lost.
			g.store.RemoveInbound(def.SPI)
			g.log.Warn("inbound SA replaced under the same SPI; packets in flight under the old key are lost",
				"tunnel", nt.Name, "sa", name, "spi", ike.ESPSPI(def.SPI))
		}
		if err := g.store.AddInbound(nt.Name, in); err != nil {
			in.End()
			return err
		}
		keep[in] = true
		note("inbound SA installed", "tunnel", nt.Name, "sa", name, "spi", ike.ESPSPI(def.SPI))
	}
	// 2. The outbound switch.
	def := withTunnelAddrs(*g.cfg.SA(nt.Out), nt.Local, nt.Peer, esp.Outbound)
	if cur := t.Out(); cur == nil || cur.Def != saDef(&def, esp.Outbound) {
		out, err := g.openSA(g.cfg, nt, nt.Out, esp.Outbound)
		if err != nil {
			return err
		}
		if err := g.store.SwitchOutbound(nt.Name, out); err != nil {
			out.End()
			return err
		}
		note("outbound SA switched", "tunnel", nt.Name, "sa", nt.Out, "spi", ike.ESPSPI(def.SPI))
	}
	// 3. Running inbound SAs the file does not name drain, then go.
	for _, in := range t.Inbound() {
		if keep[in] || g.draining[in] != nil {
			continue
		}
		victim, d := in, new(drain)
		if g.draining == nil {
			g.draining = map[*sad.SA]*drain{}
		}
		g.draining[victim] = d
		d.timer = time.AfterFunc(DrainTime, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if d.kept || g.closed {
				return
			}
			delete(g.draining, victim)
			if cur := g.store.Load().Inbound(victim.SA.SPI()); cur == victim {
				g.store.RemoveInbound(victim.SA.SPI())
				g.log.Info("inbound SA removed after draining", "tunnel", nt.Name, "sa", victim.Name)
			}
		})
		note("inbound SA draining", "tunnel", nt.Name, "sa", victim.Name, "spi", ike.ESPSPI(victim.SA.SPI()),
			"removed_after", DrainTime)
	}
	return nil
}

// drain is an inbound SA on its way out. kept, set under Gateway.mu, calls
// the removal off even when its timer has already fired.
type drain struct {
	timer *time.Timer
	kept  bool
}

// undrain keeps an inbound SA that an earlier reload set draining and the
// file names again.
func (g *Gateway) undrain(s *sad.SA, note func(string, ...any)) {
	if d := g.draining[s]; d != nil {
		d.kept = true
		d.timer.Stop()
		delete(g.draining, s)
		note("inbound SA kept", "tunnel", s.Tunnel.Name, "sa", s.Name, "spi", ike.ESPSPI(s.SA.SPI()))
	}
}

// saDef is the digest that identifies the definition an SA is built from
// in one direction (sad.SA.Def): everything that makes it a different SA.
// The starting sequence number is left out (a running SA keeps its own),
// and the replay window matters only inbound.
func saDef(sa *config.SA, dir esp.Direction) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%d|%d|%v|%v|%s|%s|%d|%d|%d|%t|", dir, sa.SPI, sa.Src, sa.Dst, sa.Mode, sa.Encap, sa.SPort, sa.DPort, sa.Alg, sa.ESN)
	if dir == esp.Inbound {
		fmt.Fprintf(h, "%d|", sa.ReplayWindow)
	}
	var n [8]byte
	for _, k := range [][]byte{sa.EncKey, sa.AuthKey} {
		binary.BigEndian.PutUint64(n[:], uint64(len(k)))
		h.Write(n[:])
		h.Write(k)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// fixedPartsEqual refuses changes that need a restart.
func fixedPartsEqual(a, b *config.Gateway) error {
	var what []string
	if a.TLSOnly() != b.TLSOnly() {
		// A TLS-only gateway has no data plane to add tunnels to, and an
		// IPsec gateway's data plane stays for the process's life.
		what = append(what, "TLS-only/IPsec mode (tunnels added to or removed from a gateway that had none or has none left)")
	}
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
	if a.StateDir != b.StateDir {
		what = append(what, "gateway.state_dir")
	}
	if a.LogFormat != b.LogFormat {
		what = append(what, "gateway.log_format")
	}
	if !haFixedEqual(a.HA, b.HA) {
		// The pair's channel and groups live for the process; only the
		// groups' addresses may change (reloadHA).
		what = append(what, "[ha] (other than the groups' addresses)")
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

// checkRegroupedTunnels refuses a static [[tunnel]] whose local address
// moves into, out of or between [[ha.group]]s while it keeps an SA it
// has (the same SPI and key): its sequence numbers were leased in one
// group and its replacement, perhaps on the other member, would start
// again below them, repeating nonces under the same key. New SAs, or an
// IKE [[connection]] (renegotiated when it moves), are safe.
func checkRegroupedTunnels(old, next *config.Gateway) error {
	for i := range next.Tunnels {
		nt := &next.Tunnels[i]
		ot := old.Tunnel(nt.Name)
		if ot == nil {
			continue
		}
		from, to := old.HAGroupOf(ot.Local), next.HAGroupOf(nt.Local)
		if from == to {
			continue
		}
		kept := false
		for _, name := range append([]string{ot.Out}, ot.In...) {
			a := old.SA(name)
			for _, nname := range append([]string{nt.Out}, nt.In...) {
				if b := next.SA(nname); a != nil && b != nil && a.SPI == b.SPI && bytes.Equal(a.EncKey, b.EncKey) {
					kept = true
				}
			}
		}
		if !kept {
			continue
		}
		group := func(g string) string {
			if g == "" {
				return "no group"
			}
			return "group " + g
		}
		field := fmt.Sprintf("tunnel[%d].local", i+1)
		return fmt.Errorf("%s: %s: %v moves from %s to %s with SAs it has: their sequence numbers stay with the group they were leased in; give the tunnel new SAs (SPIs and keys), or restart; the running configuration stays",
			next.FieldPos(field), field, nt.Local, group(from), group(to))
	}
	return nil
}

// haFixedEqual reports whether two [ha] sections are the same but for the
// addresses of their groups.
func haFixedEqual(a, b *config.HA) bool {
	if a == nil || b == nil {
		return a == b
	}
	strip := func(h *config.HA) config.HA {
		c := *h
		c.Groups = slices.Clone(h.Groups)
		for i := range c.Groups {
			c.Groups[i].Addresses = nil
		}
		return c
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

func sameEndpoints(a, b *config.Tunnel) bool {
	return a.Local == b.Local && a.Peer == b.Peer && a.Encap == b.Encap && a.PeerPort == b.PeerPort &&
		slices.Equal(a.Remote, b.Remote) && a.MTU == b.MTU && a.Engine == b.Engine
}

// checkIKEBinds does what Start does first for the IKE endpoint
// (buildEndpoint), for the local addresses that next's connections name
// and no running socket holds: it binds the IKE port on each, and closes
// it again. An address the host lacks, or a port another process holds,
// refuses the reload with the file, line and field before it changes
// anything, as the same file is refused by `sluice run`. Otherwise a
// changed connection would have its SAs deleted and then fail to send
// from the new address.
func (g *Gateway) checkIKEBinds(next *config.Gateway) error {
	s := &g.ike
	s.mu.Lock()
	held := map[netip.Addr]bool{}
	if s.ep != nil && s.ikeOpts.Port == next.IKE.Port {
		for _, c := range s.conns {
			held[c.Local] = true
		}
	}
	portChanged := s.ep != nil && s.ikeOpts.Port != next.IKE.Port
	s.mu.Unlock()
	port := next.IKE.Port
	for i := range next.Connections {
		a := next.Connections[i].Local
		if held[a] {
			continue
		}
		held[a] = true
		// A group's virtual address is bound while another member may
		// hold it, as buildEndpoint binds it.
		uc, err := listenUDP(netip.AddrPortFrom(a, port), next.HAGroupOf(a) != "")
		if err == nil {
			uc.Close()
			continue
		}
		field := config.ConnectionField(i) + ".local_addrs"
		if portChanged && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			field = "ike.port"
		}
		why := err.Error()
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			why = "the host has no such address"
		}
		return fmt.Errorf("%s: %s: cannot bind IKE port %d on %v: %s; the running configuration stays",
			next.FieldPos(field), field, port, a, why)
	}
	return nil
}
