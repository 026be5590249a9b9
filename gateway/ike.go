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
//     record is an fsync on a lane). The Endpoint holds the Delete of a
//     rekeyed SA for ike.Config.RekeyDeleteDelay, so ESP already sealed
//     under it arrives; behind a NAT it sends NAT-keepalives ([ike]
//     keep_alive) when the child's outbound SA sent nothing.
//  5. Reloads (reloadIKE): with the same [ike] options the endpoint stays
//     and takes the new connections (ike.Controller.Reload), so unchanged
//     connections keep their SAs; otherwise it is rebuilt.

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
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

// ikeCred is the endpoint's peer of one connection and its credentials:
// the signer and the engine's key, for certificates.
type ikeCred struct {
	peer   *ike.Peer
	signer crypto.Signer
	key    *cryptodev.Key
}

func (c ikeCred) close() {
	if c.signer != nil {
		closeSigner(c.signer)
	}
	if c.key != nil {
		c.key.Destroy()
	}
}

func closeCreds(cs map[string]ikeCred) {
	for _, c := range cs {
		c.close()
	}
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

// ikePolicies makes the Controller's children of cfg's connections.
func ikePolicies(cfg *config.Gateway) []ike.ChildPolicy {
	var out []ike.ChildPolicy
	for i := range cfg.Connections {
		c := &cfg.Connections[i]
		for j := range c.Children {
			ch := &c.Children[j]
			pol := ike.ChildPolicy{Peer: c.Name, Child: ch.Name, RekeyBytes: ch.RekeyBytes, LifeBytes: ch.LifeBytes,
				RekeyPackets: ch.RekeyPackets, LifePackets: ch.LifePackets}
			switch ch.StartAction {
			case config.StartStart:
				pol.Start = ike.StartStart
			case config.StartTrap:
				pol.Start = ike.StartTrap
			}
			out = append(out, pol)
		}
	}
	return out
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

func closeSigner(s crypto.Signer) {
	if c, ok := s.(interface{ Close() error }); ok {
		c.Close()
	}
}

// ikePeer makes the ike.Peer of connection i, with its credentials: the
// pre-shared key, or our certificates with the private key loaded into the
// gateway's engine and signed through it (cryptodev.NewSigner).
func (g *Gateway) ikePeer(cfg *config.Gateway, i int) (*ike.Peer, crypto.Signer, *cryptodev.Key, error) {
	p, priv, field, err := ikeCredentials(cfg, i, g.log)
	if err != nil || priv == nil {
		return p, nil, nil, err
	}
	eng := g.engines[cfg.Engine]
	ae, ok := eng.(cryptodev.AsymEngine)
	if !ok {
		return nil, nil, nil, fmt.Errorf("%s: gateway.engine: engine %q holds no private keys (auth = \"pubkey\" of connection %q needs one that does, such as soft)",
			cfg.FieldPos("gateway.engine"), eng.Name(), cfg.Connections[i].Name)
	}
	key, err := ae.NewPrivateKey(priv)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %s: engine %s: %w", cfg.FieldPos(field), field, eng.Name(), err)
	}
	sg, err := cryptodev.NewSigner(eng, key)
	if err != nil {
		key.Destroy()
		return nil, nil, nil, fmt.Errorf("gateway: %w", err)
	}
	p.Signer = sg
	return p, sg, key, nil
}

// ikeCredentials makes the ike.Peer of connection i with its pre-shared
// key or certificates, and finds the private key of our certificate among
// the [[secret]]s (priv, with field, the secret's file field), without
// touching an engine: ikePeer imports priv, Check only wants to know that
// it is there. priv is nil for a connection that does not sign.
func ikeCredentials(cfg *config.Gateway, i int, log *slog.Logger) (*ike.Peer, crypto.PrivateKey, string, error) {
	c := &cfg.Connections[i]
	cf := config.ConnectionField(i)
	ch := &c.Children[0]
	p := &ike.Peer{
		Name: c.Name, Local: c.Local, Remote: c.Remote,
		LocalID: ike.ParseIdentity(c.LocalID()),
		IKE:     c.IKE, ESP: ch.ESP, LocalTS: ch.LocalTS, RemoteTS: ch.RemoteTS,
		ForceEncap: c.Encap,
	}
	if c.RemoteAuth.ID != "" {
		p.RemoteID = ike.ParseIdentity(c.RemoteAuth.ID)
	}
	if c.LocalAuth.Auth == config.AuthPSK || c.RemoteAuth.Auth == config.AuthPSK {
		p.PSK = cfg.PSK(c.LocalID(), c.RemoteAuth.ID)
	}
	setPeerLifetimes(p, c, ch)
	// The first child comes with IKE_AUTH; the others with
	// CREATE_CHILD_SA on the same IKE SA (ike.Peer.Children).
	p.ChildName = ch.Name
	for _, more := range c.Children[1:] {
		p.Children = append(p.Children, ike.Child{Name: more.Name, LocalTS: more.LocalTS, RemoteTS: more.RemoteTS, ESP: more.ESP,
			Lifetime: ike.Lifetime{RekeyTime: more.RekeyTime, LifeTime: more.LifeTime}})
	}
	if c.RemoteAuth.Auth == config.AuthPubkey {
		for k, files := range [][]string{c.RemoteAuth.CACerts, c.RemoteAuth.Certs} {
			key := "cacerts"
			if k == 1 {
				key = "certs"
			}
			for j, f := range files {
				certs, err := readCerts(f)
				if err != nil {
					field := fmt.Sprintf("%s.remote.%s[%d]", cf, key, j+1)
					return nil, nil, "", fmt.Errorf("%s: %s: %w", cfg.FieldPos(field), field, err)
				}
				p.RemoteCAs = append(p.RemoteCAs, certs...)
			}
		}
	}
	if c.LocalAuth.Auth != config.AuthPubkey {
		return p, nil, "", nil
	}
	for j, f := range c.LocalAuth.Certs {
		certs, err := readCerts(f)
		if err != nil {
			field := fmt.Sprintf("%s.local.certs[%d]", cf, j+1)
			return nil, nil, "", fmt.Errorf("%s: %s: %w", cfg.FieldPos(field), field, err)
		}
		p.Certificates = append(p.Certificates, certs...)
	}
	leaf := p.Certificates[0]
	if c.LocalAuth.ID == "" {
		// A certificate's identity is its first subjectAltName.
		switch {
		case len(leaf.DNSNames) > 0:
			p.LocalID = ike.ParseIdentity("@" + leaf.DNSNames[0])
		case len(leaf.EmailAddresses) > 0:
			p.LocalID = ike.ParseIdentity(leaf.EmailAddresses[0])
		default:
			// None: its subject, as strongSwan's default id.
			p.LocalID = ike.Identity{Type: ike.IDDERASN1, Data: leaf.RawSubject}
		}
	}
	for k := range cfg.Secrets {
		sec := &cfg.Secrets[k]
		if sec.Type != config.SecretPrivate {
			continue
		}
		field := config.SecretField(k) + ".file"
		priv, err := cryptodev.ReadPrivateKey(sec.File)
		if err != nil {
			return nil, nil, "", fmt.Errorf("%s: %s: %w", cfg.FieldPos(field), field, err)
		}
		if mode, loose := cryptodev.LooseKeyFile(sec.File); loose {
			log.Warn("gateway: private key file readable by others (chmod 600 it, or 640 for a group)", "file", sec.File, "mode", fmt.Sprintf("%#o", mode), "field", field)
		}
		ps, ok := priv.(crypto.Signer)
		pk, ok2 := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
		if !ok || !ok2 || !pk.Equal(ps.Public()) {
			continue
		}
		return p, priv, field, nil
	}
	field := cf + ".local.certs[1]"
	return nil, nil, "", fmt.Errorf("%s: %s: no [[secret]] with type = \"private\" holds the key of %s", cfg.FieldPos(field), field, c.LocalAuth.Certs[0])
}

func readCerts(file string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return out, nil
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
	s.mu.Lock()
	same := ikeSectionsEqual(s.conns, next.Connections) && reflect.DeepEqual(stripSecretPos(s.secrets), stripSecretPos(next.Secrets)) &&
		s.ikeOpts == next.IKE && len(regrouped) == 0
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
			had[st.Child] = db.Tunnel(st.Child) != nil
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

// ikeChildConn is the connection of the running child named name, or "".
func (g *Gateway) ikeChildConn(name string) string {
	s := &g.ike
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.conns {
		for j := range s.conns[i].Children {
			if s.conns[i].Children[j].Name == name {
				return s.conns[i].Name
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
		if nc, ok := creds[name]; !ok || nc.peer != c.peer {
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

// sameCredentials reports whether two peers built from equal sections
// authenticate alike: the same pre-shared key and certificates (the
// files behind them may have changed).
func sameCredentials(a, b *ike.Peer) bool {
	eq := func(x, y []*x509.Certificate) bool {
		return slices.EqualFunc(x, y, func(c, d *x509.Certificate) bool { return c.Equal(d) })
	}
	return bytes.Equal(a.PSK, b.PSK) && eq(a.Certificates, b.Certificates) && eq(a.RemoteCAs, b.RemoteCAs)
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

func stripConnPos(cs []config.Connection) []config.Connection {
	out := slices.Clone(cs)
	for i := range out {
		out[i].Pos = config.Pos{}
		out[i].Children = slices.Clone(out[i].Children)
		for j := range out[i].Children {
			out[i].Children[j].Pos = config.Pos{}
		}
	}
	return out
}

func stripSecretPos(ss []config.Secret) []config.Secret {
	out := slices.Clone(ss)
	for i := range out {
		out[i].Pos = config.Pos{}
	}
	return out
}

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

// setPeerLifetimes gives the endpoint the connection's times: it rekeys
// the child at rekey_time (less a random part, swanctl's rand_time) and
// the IKE SA at its rekey_time, and checks the peer's liveness every
// dpd_delay. (The Controller restarts a dead peer whose first child
// starts with the gateway; a trap child is negotiated again by its next
// packet.)
func setPeerLifetimes(p *ike.Peer, c *config.Connection, ch *config.Child) {
	p.ChildLifetime = ike.Lifetime{RekeyTime: ch.RekeyTime, LifeTime: ch.LifeTime}
	p.IKELifetime = ike.Lifetime{RekeyTime: c.RekeyTime}
	if c.OverTime > 0 {
		p.IKELifetime.LifeTime = c.RekeyTime + c.OverTime
	}
	p.DPDDelay = c.DPDDelay
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
