package gateway

// IKE: the [[connection]]s of the configuration, negotiated by one
// ike.Endpoint per gateway and run by an ike.Controller, their children
// installed as route-based tunnels by the Controller's data plane
// (ike_dataplane.go). What is here is wiring:
//
//  1. Datagrams in: port 4500 arrives on the ESP-in-UDP sockets, whose
//     Control hook hands IKE (non-ESP marker) to Endpoint.Deliver, a
//     bounded queue (nothing runs per ESP packet); port 500 has sockets of
//     its own, one per local address (ike.UDPTransport).
//  2. Datagrams out (ikeTransport): on 4500 from the ESP socket itself
//     (udp.Conn.SendDatagram), so that no second SO_REUSEPORT socket takes
//     a share of the peer's ESP; on 500 from the port-500 sockets.
//  3. Peers (ikePeer, ikeCredentials, ikePolicies): the one place where
//     ike.Peers and the Controller's ike.ChildPolicys are made of the
//     configuration, with the credentials (keys in the gateway's engine).
//  4. Child SAs: the Controller decides which pair each child's tunnel
//     sends with (start, trap, rekeys at the sequence-number, byte and
//     packet limits, holds for the peer's rekeys, DPD restarts) and calls
//     ikeDataPlane (ike_dataplane.go), the one place where Child SAs go
//     into the SAD. A negotiated pair keeps no state file (its keys are
//     never installed again, so the state would protect nothing, and each
//     record would cost the state writer an fdatasync). The Endpoint holds the Delete of a
//     rekeyed SA for ike.Config.RekeyDeleteDelay, so ESP already sealed
//     under it arrives; behind a NAT it sends NAT-keepalives ([ike]
//     keep_alive) when the child's outbound SA sent nothing.
//  5. Reloads (reloadIKE): with the same [ike] options the endpoint stays
//     and takes the new connections (ike.Controller.Reload), so unchanged
//     connections keep their SAs; otherwise it is rebuilt.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/pktio/udp"
	"github.com/sluicegw/sluice/sad"
)

// IKEReplayWindow is the replay window of negotiated inbound SAs.
const IKEReplayWindow = 1024

// ikeState is the gateway's IKE side. mu guards its fields; it is never
// held while calling into the Controller or the Endpoint (whose callbacks
// reach the data plane) nor with Gateway.mu wanted.
type ikeState struct {
	mu      sync.Mutex
	ctl     *ike.Controller
	dp      *ikeDataPlane
	ep      *ike.Endpoint // the Controller's, while it has one
	port500 *ike.UDPTransport
	creds   map[string]ikeCred  // by connection name; closed with the endpoint or the connection
	conns   []config.Connection // what the endpoint was built from
	secrets []config.Secret
	ikeOpts config.IKEOptions
	closed  bool

	hook     atomic.Pointer[ike.Endpoint]   // what the UDP Control hook delivers to
	trap     atomic.Pointer[ike.Controller] // what onNoSA reports to: ctl, without the lock
	natt     *udp.Conn                      // the ESP socket IKE on the NAT-T port leaves from
	nattPort uint16
}

// ikeControlHook is the Control function of the ESP-in-UDP sockets: IKE
// datagrams go to the endpoint's queue; NAT-keepalives (one byte) are
// only counted by the link. It does not allocate unless the datagram is
// IKE (Deliver copies it).
func (g *Gateway) ikeControlHook(pkt []byte, from, to netip.AddrPort) {
	if len(pkt) <= 1 {
		return
	}
	if ep := g.ike.hook.Load(); ep != nil {
		ep.Deliver(to, from, pkt)
	}
}

// ikeTransport sends the endpoint's datagrams: NAT-T from the ESP socket,
// port 500 from its own sockets.
type ikeTransport struct {
	s    *ikeState
	p500 *ike.UDPTransport // this endpoint's port-500 sockets
}

func (t ikeTransport) Send(local, remote netip.AddrPort, pkt []byte) error {
	if local.Port() == t.s.nattPort {
		if t.s.natt == nil {
			return errors.New("gateway: no ESP-in-UDP socket for IKE on the NAT-T port")
		}
		return t.s.natt.SendDatagram(pkt, local.Addr(), remote)
	}
	return t.p500.Send(local, remote, pkt)
}

// startIKE builds the endpoint for cfg's connections (it must be called
// before the data plane reads the sockets) and installs trap tunnels.
func (g *Gateway) startIKE(cfg *config.Gateway) error {
	if len(cfg.Connections) == 0 {
		return nil
	}
	return g.buildEndpoint(cfg)
}

// controller returns the Controller, made on first use.
func (g *Gateway) controller() *ike.Controller {
	s := &g.ike
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctl == nil {
		s.dp = newIKEDataPlane(g)
		s.ctl = ike.NewController(ike.ControllerConfig{DataPlane: s.dp, Log: g.Logger("ike"),
			MayInitiate: func(p *ike.Peer) bool { return g.haOwnsLocal(p.Local) }})
		s.trap.Store(s.ctl)
	}
	return s.ctl
}

// kickIKE initiates the children with start_action = start; it runs once
// the data plane carries traffic.
func (g *Gateway) kickIKE() {
	if ctl := g.ikeController(); ctl != nil {
		ctl.Start(func(st ike.ChildStatus) bool { return st.Start == ike.StartStart })
	}
}

// ikeController returns the Controller, or nil before IKE started.
func (g *Gateway) ikeController() *ike.Controller {
	g.ike.mu.Lock()
	defer g.ike.mu.Unlock()
	return g.ike.ctl
}

// buildEndpoint makes a new endpoint for cfg's connections, with their
// credentials, and puts it in place of the current one, which it closes
// without telling the peers. It installs the trap tunnels of new children.
func (g *Gateway) buildEndpoint(cfg *config.Gateway) (err error) {
	s := &g.ike
	ctl := g.controller()
	creds := map[string]ikeCred{}
	defer func() {
		if err != nil {
			closeCreds(creds)
		}
	}()
	var peers []*ike.Peer
	locals := map[netip.Addr]int{} // the first connection on each address
	var order []netip.Addr
	for i := range cfg.Connections {
		c := &cfg.Connections[i]
		p, sg, k, err := g.ikePeer(cfg, i)
		if err != nil {
			return err
		}
		creds[c.Name] = ikeCred{p, sg, k}
		peers = append(peers, p)
		if _, ok := locals[c.Local]; !ok {
			locals[c.Local] = i
			order = append(order, c.Local)
		}
	}
	// The old endpoint goes first: the new one binds the same port-500
	// sockets. Its callbacks are ignored from here on.
	s.hook.Store(nil)
	ctl.Detach()
	s.mu.Lock()
	oldP500, oldCreds := s.port500, s.creds
	s.ep, s.port500, s.creds = nil, nil, nil
	s.mu.Unlock()
	if oldP500 != nil {
		oldP500.Close()
	}
	closeCreds(oldCreds)
	port := cfg.IKE.Port
	var conns []*net.UDPConn
	for _, a := range order {
		// A virtual address of a group is bound while another member
		// holds it (IP_FREEBIND): its packets arrive once it moves here.
		uc, err := listenUDP(netip.AddrPortFrom(a, port), g.ha.groupOf(a) != nil)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return bindError(cfg, locals[a], port, a, err)
		}
		conns = append(conns, uc)
	}
	p500, err := ike.NewUDPTransport(conns...)
	if err != nil {
		for _, c := range conns {
			c.Close()
		}
		return fmt.Errorf("gateway: %w", err)
	}
	ecfg := ike.Config{
		Peers: peers, Port: port, NATTPort: s.nattPort,
		RetransmitTimeout: cfg.IKE.RetransmitTimeout, RetransmitTries: cfg.IKE.RetransmitTries,
		MaxChildSAs: cfg.IKE.MaxChildSAs, BlockThreshold: cfg.IKE.BlockThreshold,
		KeepAlive: cfg.IKE.KeepAlive,
		Log:       g.Logger("ike"),
	}
	ecfg.OnChildAddress = g.onChildAddress // MOBIKE (ike_mobike.go)
	if g.ha.cfg != nil {
		ecfg.OnSnapshot = g.onIKESnapshot // a group's IKE SAs go to the standby (ha.go)
	}
	s.dp.setConfig(cfg.Connections)
	ep, err := ctl.Open(ecfg, ikeTransport{s: s, p500: p500}, ikePolicies(cfg))
	if err != nil {
		p500.Close()
		return fmt.Errorf("gateway: %w", err)
	}
	p500.Serve(ep)
	s.mu.Lock()
	s.ep, s.port500, s.creds = ep, p500, creds
	s.conns = slices.Clone(cfg.Connections)
	s.secrets = slices.Clone(cfg.Secrets)
	s.ikeOpts = cfg.IKE
	s.mu.Unlock()
	s.hook.Store(ep)
	return nil
}

// bindError says why the IKE port could not be bound on address a, at
// the field to change: the [ike] port when the file sets it and the port
// is taken or forbidden, otherwise the local_addrs of connection i, the
// first on a (an address this host does not have, say).
func bindError(cfg *config.Gateway, i int, port uint16, a netip.Addr, err error) error {
	field := config.ConnectionField(i) + ".local_addrs"
	if cfg.HasField("ike.port") && !errors.Is(err, syscall.EADDRNOTAVAIL) {
		field = "ike.port"
	}
	if port < 1024 {
		err = needCap(err, "CAP_NET_BIND_SERVICE")
	}
	return fmt.Errorf("%s: %s: IKE port %d on %v: %w", cfg.FieldPos(field), field, port, a, err)
}

// onNoSA is dataplane.Config.NoSA: a packet for a tunnel without an
// outbound SA. It hands the name to the Controller without blocking or
// allocating.
func (g *Gateway) onNoSA(t *sad.Tunnel) {
	if ctl := g.ike.trap.Load(); ctl != nil {
		ctl.Trap(t.Name)
	}
}

// IKECloseTimeout bounds how long closing the gateway waits for the peers
// to answer the Deletes of its IKE SAs.
var IKECloseTimeout = time.Second

// closeIKE stops the IKE side: it deletes the IKE SAs, telling the peers
// (waiting at most IKECloseTimeout), then closes the endpoint, the
// sockets and the keys.
func (g *Gateway) closeIKE() {
	s := &g.ike
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	ctl, p500 := s.ctl, s.port500
	s.mu.Unlock()
	s.hook.Store(nil)
	if ctl != nil {
		ctl.Close(IKECloseTimeout)
	}
	if p500 != nil {
		p500.Close()
	}
	s.mu.Lock()
	s.ep = nil
	creds := s.creds
	s.creds = nil
	s.mu.Unlock()
	closeCreds(creds)
}

// reloadIKE makes the IKE side what next says. Unchanged sections change
// nothing. The children of connections that went are deleted (the peers
// told) and their tunnels removed. With the same [ike] options, the
// endpoint stays and only the connections that changed change
// (reloadPeers); otherwise it is rebuilt, and the other connections are
// negotiated again on the new endpoint, their tunnels carrying traffic on
// the old SAs until the new ones replace them.
func (g *Gateway) reloadIKE(next *config.Gateway, regrouped map[string]bool, note func(string, ...any)) error {
	s := &g.ike
	poolsSame := !g.poolsChanged(next) // vip.go
	s.mu.Lock()
	same := ikeSectionsEqual(s.conns, next.Connections) && reflect.DeepEqual(stripSecretPos(s.secrets), stripSecretPos(next.Secrets)) &&
		s.ikeOpts == next.IKE && len(regrouped) == 0 && poolsSame
	// The endpoint's port-500 sockets are bound per local address when it
	// is built: other addresses need a new endpoint.
	sameLocals := maps.Equal(localAddrs(s.conns), localAddrs(next.Connections))
	ep, ctl, closed := s.ep, s.ctl, s.closed
	s.mu.Unlock()
	if same || (ep == nil && len(next.Connections) == 0) {
		return nil
	}
	if ctl != nil {
		db := g.store.Load()
		// A child stays if next has it and the connection it was of.
		keep := func(name string) bool {
			_, nc := next.ChildRef(name)
			return nc != nil && next.Connection(g.ikeChildConn(name)) != nil
		}
		had := map[string]bool{}
		for _, st := range ctl.Children() {
			had[st.Child] = had[st.Child] || (st.Tunnel != "" && db.Tunnel(st.Tunnel) != nil)
		}
		for _, name := range ctl.Remove(keep, 3*time.Second) {
			if had[name] {
				note("IKE child removed", "child", name)
			}
		}
	}
	if len(next.Connections) == 0 {
		g.closeIKEEndpoint()
		note("IKE stopped", "connections", 0)
		return nil
	}
	if closed {
		return errors.New("gateway: IKE is not running")
	}
	if ep != nil && s.ikeOpts == next.IKE && sameLocals {
		return g.reloadPeers(next, regrouped, note)
	}
	if err := g.buildEndpoint(next); err != nil {
		return err
	}
	note("IKE endpoint rebuilt", "connections", len(next.Connections))
	// The children that were up are negotiated again on the new
	// endpoint (their pairs carry traffic until then).
	g.ikeController().Start(func(st ike.ChildStatus) bool {
		return st.Start == ike.StartStart || (st.Pair != nil && !st.Terminated)
	})
	return nil
}

// ikeChildConn is the connection of the running child named name, or
// "": name may be the tunnel of one of the road warriors of a connection
// without a remote address (ike.TunnelName).
func (g *Gateway) ikeChildConn(name string) string {
	rwOf := ike.ChildOfTunnel(name)
	s := &g.ike
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.conns {
		c := &s.conns[i]
		for j := range c.Children {
			if n := c.Children[j].Name; n == name || (n == rwOf && !c.Remote.IsValid()) {
				return c.Name
			}
		}
	}
	return ""
}

// reloadPeers gives the running endpoint next's connections
// (ike.Controller.Reload): an unchanged connection (same section, same
// credentials) keeps its IKE and Child SAs and its children's state; a
// changed one has its SAs deleted (the peer told) and is negotiated again
// if it was up or starts; an added one starts per its start_action. Those
// of removed connections are deleted by reloadIKE already. regrouped
// names the connections whose local address moved into, out of or
// between [[ha.group]]s, which are changed ones too (their SAs were
// leased, or not, for the group they were in).
func (g *Gateway) reloadPeers(next *config.Gateway, regrouped map[string]bool, note func(string, ...any)) error {
	s := &g.ike
	s.mu.Lock()
	ctl := s.ctl
	oldConns := map[string]config.Connection{}
	for _, c := range stripConnPos(s.conns) {
		oldConns[c.Name] = c
	}
	oldCreds := maps.Clone(s.creds)
	s.mu.Unlock()

	creds := map[string]ikeCred{}
	kept := map[string]bool{}
	borrowed := map[string]bool{} // creds whose signer and key are the running ones
	var peers []*ike.Peer
	var fresh []ikeCred // built for this reload: closed if it fails
	fail := func(err error) error {
		for _, c := range fresh {
			c.close()
		}
		return err
	}
	nextConns := stripConnPos(next.Connections)
	pols := ikePolicies(next)
	for i := range next.Connections {
		name := next.Connections[i].Name
		p, sg, k, err := g.ikePeer(next, i)
		if err != nil {
			return fail(err)
		}
		ike.SetDPDActions([]*ike.Peer{p}, pols) // as the running peers have it
		cr := ikeCred{p, sg, k}
		old, had := oldCreds[name]
		oc, ok := oldConns[name]
		same := ok && had && !regrouped[name] && reflect.DeepEqual(oc, nextConns[i])
		switch {
		case same && sameCredentials(old.peer, p):
			cr.close() // the running one stays
			cr, kept[name] = old, true
		case same && sameKeys(old.peer, p):
			// New revocation lists only (ike_peers.go): the SAs
			// carry on with the running peer's keys (SetPeers hands
			// them to the copy), and the lists apply to the next
			// authentication.
			cr.close()
			cr, kept[name], borrowed[name] = ikeCred{withRevocation(old.peer, p), old.signer, old.key}, true, true
			note("IKE revocation lists reloaded", "connection", name)
		case same && p.RotatesPSK(old.peer):
			// A new pre-shared key only: the SAs carry on (SetPeers
			// hands them to the new peer) and the key authenticates
			// the next IKE SA.
			fresh = append(fresh, cr)
			kept[name] = true
			note("IKE pre-shared key rotated", "connection", name)
		default:
			fresh = append(fresh, cr)
		}
		creds[name] = cr
		peers = append(peers, cr.peer)
	}
	s.dp.setConfig(next.Connections)
	if err := ctl.Reload(peers, pols, func(peer string) bool { return kept[peer] }); err != nil {
		s.mu.Lock()
		conns := s.conns
		s.mu.Unlock()
		s.dp.setConfig(conns)
		return fail(fmt.Errorf("gateway: %w", err))
	}
	s.mu.Lock()
	for name, c := range oldCreds {
		if nc, ok := creds[name]; !ok || (nc.peer != c.peer && !borrowed[name]) {
			c.close() // SetPeers deleted its SAs; deleting signs nothing
		}
	}
	s.creds = creds
	s.conns = slices.Clone(next.Connections)
	s.secrets = slices.Clone(next.Secrets)
	s.mu.Unlock()
	note("IKE connections reloaded", "connections", len(next.Connections), "unchanged", len(kept))
	return nil
}

// closeIKEEndpoint drops the endpoint when no connection is left.
func (g *Gateway) closeIKEEndpoint() {
	s := &g.ike
	s.hook.Store(nil)
	s.mu.Lock()
	ctl, p500, creds := s.ctl, s.port500, s.creds
	s.ep, s.port500, s.creds, s.conns, s.secrets = nil, nil, nil, nil, nil
	s.mu.Unlock()
	if ctl != nil {
		ctl.Detach() // reloadIKE removed the children's tunnels
	}
	if p500 != nil {
		p500.Close()
	}
	closeCreds(creds)
}

// localAddrs is the set of the connections' local addresses, on each of
// which the endpoint binds the IKE port.
func localAddrs(cs []config.Connection) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for i := range cs {
		m[cs[i].Local] = true
	}
	return m
}

func ikeSectionsEqual(a, b []config.Connection) bool {
	return reflect.DeepEqual(stripConnPos(a), stripConnPos(b))
}

// stripConnPos and stripSecretPos return their argument: config keeps
// positions beside the model (Gateway.FieldPos), so sections compare as
// they are.
func stripConnPos(cs []config.Connection) []config.Connection { return cs }

func stripSecretPos(ss []config.Secret) []config.Secret { return ss }

// ikeEngine is the engine of negotiated SAs: the gateway's default.
func (g *Gateway) ikeEngine() string { return g.cfg0.Engine }

// ownerOf spreads the children's tunnels over the workers by name.
func (g *Gateway) ownerOf(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % uint32(max(1, g.workers)))
}

// InitiateIKE negotiates the connection named name now (`sluice ike
// initiate`), and waits for the result or ctx.
func (g *Gateway) InitiateIKE(ctx context.Context, name string) error {
	ctl := g.ikeController()
	if ctl == nil {
		return fmt.Errorf("gateway: no IKE connection %q%s", name, g.connNames())
	}
	err := ctl.Initiate(ctx, name)
	switch {
	case errors.Is(err, ike.ErrUnknownPeer):
		return fmt.Errorf("gateway: no IKE connection %q%s", name, g.connNames())
	case err != nil:
		return fmt.Errorf("gateway: initiate %q: %w", name, err)
	}
	return nil
}

// TerminateIKE deletes the connection's IKE SA and its children, telling
// the peer (`sluice ike terminate`); its tunnels go (a trap child's stays
// without SAs). It is not initiated again until asked, whatever its
// start action.
func (g *Gateway) TerminateIKE(ctx context.Context, name string) error {
	ctl := g.ikeController()
	if ctl == nil {
		return fmt.Errorf("gateway: no IKE connection %q%s", name, g.connNames())
	}
	err := ctl.Terminate(ctx, name)
	switch {
	case errors.Is(err, ike.ErrUnknownPeer):
		return fmt.Errorf("gateway: no IKE connection %q%s", name, g.connNames())
	case errors.Is(err, ike.ErrNoChildSA):
		return fmt.Errorf("gateway: IKE connection %q has no SA to terminate", name)
	case err != nil:
		return fmt.Errorf("gateway: terminate %q: %w", name, err)
	}
	return nil
}

// connNames lists the configured connections for an error message.
func (g *Gateway) connNames() string {
	s := &g.ike
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for i := range s.conns {
		names = append(names, s.conns[i].Name)
	}
	if len(names) == 0 {
		return " (the configuration has no [[connection]])"
	}
	slices.Sort(names)
	return " (connections: " + strings.Join(names, ", ") + ")"
}

// isIKEChild reports whether the tunnel named name is a child's.
func (g *Gateway) isIKEChild(name string) bool {
	return g.ikeChildConn(name) != ""
}

// hasIKE reports whether IKE runs (the configuration has connections).
func (g *Gateway) hasIKE() bool {
	g.ike.mu.Lock()
	defer g.ike.mu.Unlock()
	return g.ike.ep != nil
}

// ikeEndpoint returns the IKE endpoint, or nil.
func (g *Gateway) ikeEndpoint() *ike.Endpoint {
	g.ike.mu.Lock()
	defer g.ike.mu.Unlock()
	return g.ike.ep
}

// ikeConnLocal is the local address of the running connection named
// name.
func (g *Gateway) ikeConnLocal(name string) (netip.Addr, bool) {
	s := &g.ike
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.conns {
		if s.conns[i].Name == name {
			return s.conns[i].Local, true
		}
	}
	return netip.Addr{}, false
}

// dropGroupChildren takes out the tunnels of the group's IKE children
// after their IKE SAs were released: the new owner installs them.
func (g *Gateway) dropGroupChildren(grp *haGroup) {
	if ctl := g.ikeController(); ctl != nil {
		ctl.Drop(func(st ike.ChildStatus) bool {
			local, ok := g.ikeConnLocal(st.Peer)
			return ok && g.ha.groupOf(local) == grp
		})
	}
}

// kickGroup initiates the group's children with start_action = start
// that have no Child SA (a takeover with nothing to adopt, or a member
// alone at start).
func (g *Gateway) kickGroup(grp *haGroup) {
	if ctl := g.ikeController(); ctl != nil {
		ctl.Start(func(st ike.ChildStatus) bool {
			local, ok := g.ikeConnLocal(st.Peer)
			return st.Start == ike.StartStart && st.Pair == nil && ok && g.ha.groupOf(local) == grp
		})
	}
}
