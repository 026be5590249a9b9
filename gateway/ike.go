package gateway

// IKE: the [[connection]]s of the configuration, negotiated by one
// ike.Endpoint per gateway, their children installed as route-based
// tunnels.
//
//  1. Datagrams in: port 4500 arrives on the ESP-in-UDP sockets, whose
//     Control hook hands IKE (non-ESP marker) to Endpoint.Deliver, a
//     bounded queue (nothing runs per ESP packet); port 500 has sockets of
//     its own, one per local address (ike.UDPTransport).
//  2. Datagrams out (ikeTransport): on 4500 from the ESP socket itself
//     (udp.Conn.SendDatagram), so that no second SO_REUSEPORT socket takes
//     a share of the peer's ESP; on 500 from the port-500 sockets.
//  3. Child SAs (OnChildSA): the SA pair opens like a static SA, but
//     keeps no state file (its keys are never installed again, so the
//     state would protect nothing, and each record is an fsync on a
//     lane), and goes into the child's
//     tunnel make-before-break: the new inbound SA first, then the
//     outbound switch (for a pair the peer's rekey made, only once the
//     peer deleted the old one: ike.ChildSA.HoldOutbound). The Endpoint
//     lets the peer learn of the pair only after OnChildSA returned. The
//     old pair's inbound SA drains for DrainTime
//     after its OnDelete, then goes. A child whose only pair goes (the
//     peer deleted it, or died) takes its tunnel with it; a trap child
//     keeps a tunnel without SAs, whose packets are dropped (no_sa) and
//     start a negotiation (dataplane.Config.NoSA).
//  4. Rekeys: the Endpoint rekeys on the lifetimes; the gateway asks it to
//     rekey a child whose SA nears its sequence-number limit. The
//     Endpoint holds the Delete of the replaced SA for
//     ike.Config.RekeyDeleteDelay, so ESP already sealed under it arrives.
//     Behind a NAT it sends NAT-keepalives ([ike] keep_alive) when the
//     child's outbound SA sent nothing (espSent).
//  5. Reloads (reloadIKE): with the same [ike] options the endpoint stays
//     and takes the new connections (ike.Endpoint.SetPeers), so unchanged
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
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/pktio/udp"
	"github.com/sluicegw/sluice/sad"
	"github.com/sluicegw/sluice/spd"
)

// IKEReplayWindow is the replay window of negotiated inbound SAs.
const IKEReplayWindow = 1024

// ikeCheckInterval is how often the gateway looks for children whose SAs
// near their sequence-number limit, and retries failed initiations.
var ikeCheckInterval = time.Second

// ikeState is the gateway's IKE side. mu guards the children and the
// endpoint's generation; it is never held while calling into the Endpoint
// (whose callbacks take it) nor with Gateway.mu wanted.
type ikeState struct {
	mu       sync.Mutex
	ep       *ike.Endpoint
	gen      uint64 // the endpoint's generation: callbacks of an older one are ignored
	port500  *ike.UDPTransport
	creds    map[string]ikeCred   // by connection name; closed with the endpoint or the connection
	children map[string]*ikeChild // by child (tunnel) name
	conns    []config.Connection  // what the endpoint was built from
	secrets  []config.Secret
	ikeOpts  config.IKEOptions
	closed   bool

	hook     atomic.Pointer[ike.Endpoint] // what the UDP Control hook delivers to
	natt     *udp.Conn                    // the ESP socket IKE on the NAT-T port leaves from
	nattPort uint16
	trap     chan string // child names whose tunnels dropped a packet for want of an SA
	stop     chan struct{}
	wg       sync.WaitGroup
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

// ikeChild is one configured child and what runs of it.
type ikeChild struct {
	conn  *config.Connection
	child *config.Child
	cur   *ike.ChildSA // the pair the tunnel sends with; nil when down
	gen   uint64       // the endpoint generation that made cur
	since time.Time    // when cur was installed
	// busy is set while an initiation or rekey of the child is under
	// way; lastTry is when the last initiation began.
	busy       bool
	lastTry    time.Time
	lastErr    string
	terminated bool // `sluice ike terminate`: no initiation until asked
	pairs      int  // pairs installed and not yet deleted
	// draining are the inbound SPIs of pairs IKE deleted that still take
	// the peer's packets in flight, oldest first.
	draining []uint32
	// held is a pair the peer's rekey of cur made
	// (ike.ChildSA.HoldOutbound): its inbound SA is in the tunnel, its
	// outbound one, heldOut, waits for cur's Delete.
	held    *ike.ChildSA
	heldOut *sad.SA
}

// dropHeld forgets ch's held pair, if any, and ends its outbound SA,
// which never carried a packet. s.mu is held.
func (ch *ikeChild) dropHeld() {
	if ch.heldOut != nil {
		ch.heldOut.End()
	}
	ch.held, ch.heldOut = nil, nil
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
	s := &g.ike
	s.children = map[string]*ikeChild{}
	s.trap = make(chan string, 16)
	s.stop = make(chan struct{})
	if len(cfg.Connections) == 0 {
		return nil
	}
	if err := g.buildEndpoint(cfg); err != nil {
		return err
	}
	s.wg.Add(1)
	go g.ikeLoop()
	return nil
}

// kickIKE initiates the children with start_action = start; it runs once
// the data plane carries traffic. A connection's children go one after
// the other, the first (IKE_AUTH's) first, so that they share one IKE SA.
func (g *Gateway) kickIKE() {
	s := &g.ike
	s.mu.Lock()
	defer s.mu.Unlock()
	g.initiateGroupsLocked(func(ch *ikeChild) bool { return ch.child.StartAction == config.StartStart })
}

// childIndex is ch's place among its connection's children.
func childIndex(ch *ikeChild) int {
	for i := range ch.conn.Children {
		if &ch.conn.Children[i] == ch.child {
			return i
		}
	}
	return 0
}

// buildEndpoint makes a new endpoint for cfg's connections, with their
// credentials, and puts it in place of the current one, which it closes
// without telling the peers. It installs the trap tunnels of new children.
func (g *Gateway) buildEndpoint(cfg *config.Gateway) (err error) {
	s := &g.ike
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
	// sockets. Its callbacks are ignored from here on (gen).
	s.mu.Lock()
	s.gen++
	gen := s.gen
	oldEP, oldP500, oldCreds := s.ep, s.port500, s.creds
	s.ep, s.port500, s.creds = nil, nil, nil
	s.mu.Unlock()
	s.hook.Store(nil)
	if oldEP != nil {
		oldEP.Close()
		oldP500.Close()
		closeCreds(oldCreds)
	}
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
		OnChildSA: func(c *ike.ChildSA) { g.onChildSA(gen, c) },
		OnDelete:  func(c *ike.ChildSA) { g.onChildDelete(gen, c) },
		KeepAlive: cfg.IKE.KeepAlive,
		ESPSent:   g.espSent,
		Log:       g.Logger("ike"),
	}
	setIKELifetimes(&ecfg, g)
	ecfg.OnChildAddress = g.onChildAddress // MOBIKE (ike_mobike.go)
	if g.ha.cfg != nil {
		ecfg.OnSnapshot = g.onIKESnapshot // a group's IKE SAs go to the standby (ha.go)
	}
	ep, err := ike.NewEndpoint(ecfg, ikeTransport{s: s, p500: p500})
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
	old := s.children
	s.children = map[string]*ikeChild{}
	for i := range cfg.Connections {
		c := &cfg.Connections[i]
		for j := range c.Children {
			ch := &ikeChild{conn: c, child: &c.Children[j]}
			if o := old[ch.child.Name]; o != nil {
				o.dropHeld() // the old endpoint will not delete what it replaces
				ch.cur, ch.gen, ch.since, ch.pairs, ch.terminated = o.cur, o.gen, o.since, o.pairs, o.terminated
			}
			s.children[ch.child.Name] = ch
		}
	}
	s.mu.Unlock()
	s.hook.Store(ep)
	for _, ch := range s.children {
		if ch.child.StartAction == config.StartTrap && ch.cur == nil {
			g.trapTunnel(ch)
		}
	}
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
	p.NoMOBIKE = !c.MOBIKE // swanctl's mobike (ike_mobike.go)
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
		if err := setPeerCRLs(cfg, i, p); err != nil {
			return nil, nil, "", err
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

// initiateLocked negotiates ch's child unless that is under way, then
// each of then in turn, in one goroutine: the first child of a connection
// comes with its IKE SA (Initiate), the others on it (InitiateChild,
// which makes the IKE SA first if there is none). s.mu must be held.
func (g *Gateway) initiateLocked(ch *ikeChild, then ...*ikeChild) {
	s := &g.ike
	if s.closed || s.ep == nil || !ch.conn.Remote.IsValid() || !g.haOwnsLocal(ch.conn.Local) {
		return
	}
	var todo []*ikeChild
	for _, c := range append([]*ikeChild{ch}, then...) {
		if !c.busy {
			c.busy, c.lastTry = true, time.Now()
			todo = append(todo, c)
		}
	}
	ep := s.ep
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for _, c := range todo {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			var err error
			if childIndex(c) == 0 {
				_, err = ep.Initiate(ctx, c.conn.Name)
			} else {
				_, err = ep.InitiateChild(ctx, c.conn.Name, c.child.Name)
			}
			cancel()
			s.mu.Lock()
			c.busy = false
			if err != nil {
				c.lastErr = err.Error()
				g.Logger("ike").Warn("IKE initiation failed", "connection", c.conn.Name, "child", c.child.Name, "err", err)
			} else {
				c.lastErr = ""
			}
			s.mu.Unlock()
		}
	}()
}

// onChildSA installs a negotiated pair into the child's tunnel.
func (g *Gateway) onChildSA(gen uint64, c *ike.ChildSA) {
	s := &g.ike
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || gen != s.gen {
		return
	}
	ch := g.childOfLocked(c)
	if ch == nil {
		g.Logger("ike").Warn("IKE child SA of no configured child", "connection", c.Name)
		return
	}
	hold := c.HoldOutbound && ch.cur != nil && ch.gen == gen
	if err := g.installPair(ch, c, hold); err != nil {
		g.Logger("ike").Error("IKE child SA not installed", "child", ch.child.Name, "err", err)
		return
	}
	if ch.held == c {
		ch.pairs++
		g.Logger("ike").Info("IKE child SA installed inbound; outbound waits for the peer's Delete of the old one", "child", ch.child.Name,
			"in_spi", ike.ESPSPI(c.InSPI), "out_spi", ike.ESPSPI(c.OutSPI))
		return
	}
	if prev := ch.cur; prev != nil && ch.gen != gen {
		// A pair of an endpoint replaced by a reload: no OnDelete will
		// come for it, so its inbound SA drains now.
		g.drainInbound(ch, prev.InSPI)
		ch.pairs = 0
	}
	ch.cur, ch.gen, ch.since, ch.lastErr = c, gen, time.Now(), ""
	ch.pairs++
	g.Logger("ike").Info("IKE child SA installed", "child", ch.child.Name, "in_spi", ike.ESPSPI(c.InSPI), "out_spi", ike.ESPSPI(c.OutSPI),
		"suite", c.Suite, "esn", c.ESN, "encap", c.Encap, "remote", c.Remote)
}

// espSent is ike.Config.ESPSent: the packets sent on c's outbound SA
// while it is its tunnel's, for the NAT-keepalives.
func (g *Gateway) espSent(c *ike.ChildSA) uint64 {
	s := &g.ike
	s.mu.Lock()
	ch := g.childOfLocked(c)
	s.mu.Unlock()
	if ch == nil {
		return 0
	}
	if t := g.store.Load().Tunnel(ch.child.Name); t != nil {
		if out := t.Out(); out != nil && out.SA.SPI() == c.OutSPI {
			return out.SA.Counters.Packets.Load()
		}
	}
	return 0
}

// childOfLocked finds the configured child of a negotiated SA: by its
// connection and child names.
func (g *Gateway) childOfLocked(c *ike.ChildSA) *ikeChild {
	if ch := g.ike.children[c.Child]; ch != nil && ch.conn.Name == c.Name {
		return ch
	}
	for _, ch := range g.ike.children {
		if ch.conn.Name == c.Name && c.Child == "" && ch.child == &ch.conn.Children[0] {
			return ch
		}
	}
	return nil
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

// installPair opens both SAs of c and puts them in ch's tunnel: the
// inbound one first, then the outbound switch (a rekey loses nothing),
// or, with hold, the outbound one aside as ch's held pair (it goes in
// when the pair it replaces is deleted: onChildDelete); a tunnel whose
// outer endpoints differ (a first pair, a NAT found) is replaced. s.mu is
// held.
func (g *Gateway) installPair(ch *ikeChild, c *ike.ChildSA, hold bool) error {
	name := ch.child.Name
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
		for len(t.Inbound()) >= sad.MaxInbound && len(ch.draining) > 0 {
			g.store.RemoveInbound(ch.draining[0])
			ch.draining = ch.draining[1:]
		}
		if err := g.store.AddInbound(name, in); err != nil {
			return fail(err)
		}
		if hold {
			ch.dropHeld()
			ch.held, ch.heldOut = c, out
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
	ch.dropHeld()
	spec.Out, spec.In = out, []*sad.SA{in}
	if _, err := g.store.AddTunnel(spec); err != nil {
		return fail(err)
	}
	return nil
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

// onChildDelete takes a pair that IKE deleted out of its tunnel: an
// inbound SA replaced by a rekey drains for DrainTime first; a pair that
// is still the tunnel's outbound one hands the tunnel to the held pair
// that the peer's rekey of it made, or takes the tunnel (a trap child
// keeps one without SAs).
func (g *Gateway) onChildDelete(gen uint64, c *ike.ChildSA) {
	s := &g.ike
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || gen != s.gen {
		return
	}
	ch := g.childOfLocked(c)
	if ch == nil {
		return
	}
	ch.pairs--
	name := ch.child.Name
	t := g.store.Load().Tunnel(name)
	if t == nil {
		ch.dropHeld()
		return
	}
	if ch.held == c {
		// The peer deleted the pair it made (it lost a rekey
		// collision, RFC 7296 section 2.8.1): it never sent with it.
		ch.dropHeld()
		g.drainInbound(ch, c.InSPI)
		return
	}
	if out := t.Out(); out != nil && out.SA.SPI() == c.OutSPI && ch.held != nil {
		next, nextOut := ch.held, ch.heldOut
		ch.held, ch.heldOut = nil, nil
		err := g.store.SwitchOutbound(name, nextOut)
		if err == nil {
			ch.cur, ch.since = next, time.Now()
			g.Logger("ike").Info("IKE child SA sends on the pair the peer's rekey made", "child", name,
				"in_spi", ike.ESPSPI(next.InSPI), "out_spi", ike.ESPSPI(next.OutSPI))
			g.drainInbound(ch, c.InSPI)
			return
		}
		nextOut.End()
		g.Logger("ike").Error("IKE child SA: outbound switch failed", "child", name, "err", err)
	}
	if out := t.Out(); out != nil && out.SA.SPI() == c.OutSPI {
		ch.dropHeld()
		ch.cur = nil
		g.store.RemoveTunnel(name)
		g.Logger("ike").Info("IKE child SA deleted; tunnel down", "child", name, "out_spi", ike.ESPSPI(c.OutSPI))
		if ch.child.StartAction == config.StartTrap {
			g.trapTunnel(ch)
		}
		return
	}
	g.drainInbound(ch, c.InSPI)
}

// drainInbound removes the inbound SA spi of ch's tunnel after DrainTime,
// so that packets the peer sent with it before its rekey still arrive.
// s.mu is held.
func (g *Gateway) drainInbound(ch *ikeChild, spi uint32) {
	s := &g.ike
	name := ch.child.Name
	ch.draining = append(ch.draining, spi)
	time.AfterFunc(DrainTime, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		i := slices.Index(ch.draining, spi)
		if i < 0 {
			return // made room for a newer one already
		}
		ch.draining = slices.Delete(ch.draining, i, i+1)
		if cur := g.store.Load().Inbound(spi); cur != nil && cur.Tunnel != nil && cur.Tunnel.Name == name {
			g.store.RemoveInbound(spi)
		}
	})
}

// trapTunnel installs ch's tunnel without SAs: packets routed into it are
// dropped (no_sa) and start a negotiation.
func (g *Gateway) trapTunnel(ch *ikeChild) {
	if !ch.conn.Remote.IsValid() || g.store.Load().Tunnel(ch.child.Name) != nil {
		return
	}
	spec := sad.TunnelSpec{Name: ch.child.Name, Local: ch.conn.Local, Peer: ch.conn.Remote, Remote: ch.child.RemoteTS,
		Owner: g.ownerOf(ch.child.Name), Encap: esp.EncapUDP, PeerPort: g.ike.nattPort}
	if _, err := g.store.AddTunnel(spec); err != nil {
		g.Logger("ike").Error("trap tunnel not installed", "child", ch.child.Name, "err", err)
	}
}

// onNoSA is dataplane.Config.NoSA: a packet for a tunnel without an
// outbound SA. It hands the name to ikeLoop without blocking or
// allocating.
func (g *Gateway) onNoSA(t *sad.Tunnel) {
	select {
	case g.ike.trap <- t.Name:
	default:
	}
}

// ikeLoop initiates trap children on their first packet, and rekeys
// children whose SAs near their sequence-number limit.
func (g *Gateway) ikeLoop() {
	s := &g.ike
	defer s.wg.Done()
	tick := time.NewTicker(ikeCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case name := <-s.trap:
			s.mu.Lock()
			if ch := s.children[name]; ch != nil && ch.cur == nil && !ch.terminated &&
				ch.child.StartAction == config.StartTrap && time.Since(ch.lastTry) > 2*time.Second {
				g.initiateLocked(ch)
			}
			s.mu.Unlock()
		case <-tick.C:
			g.checkRekeys()
		}
	}
}

// checkRekeys asks the endpoint to rekey each child whose SAs near their
// sequence-number limit (esp.SA.NeedsRekey); the endpoint's own schedule
// rekeys the others at their rekey_time.
func (g *Gateway) checkRekeys() {
	s := &g.ike
	s.mu.Lock()
	if s.closed || s.ep == nil {
		s.mu.Unlock()
		return
	}
	ep := s.ep
	db := g.store.Load()
	var due []*ike.ChildSA
	for _, ch := range s.children {
		if ch.cur == nil {
			continue
		}
		t := db.Tunnel(ch.child.Name)
		if t == nil {
			continue
		}
		out, in := t.Out(), db.Inbound(ch.cur.InSPI)
		if (out != nil && out.SA.NeedsRekey()) || (in != nil && in.SA.NeedsRekey()) {
			due = append(due, ch.cur)
		}
	}
	s.mu.Unlock()
	for _, c := range due {
		// A rekey already under way makes it do nothing.
		if err := ep.RequestRekey(c); err != nil {
			g.Logger("ike").Debug("IKE rekey at the sequence-number limit not requested", "connection", c.Name, "err", err)
		}
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
	if s.closed || s.stop == nil {
		s.closed = true
		s.mu.Unlock()
		return
	}
	s.closed = true
	ep, p500 := s.ep, s.port500
	var live []*ike.ChildSA
	for _, ch := range s.children {
		if ch.cur != nil {
			live = append(live, ch.cur)
		}
		ch.dropHeld()
	}
	s.mu.Unlock()
	if ep != nil && len(live) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), IKECloseTimeout)
		var wg sync.WaitGroup
		for _, c := range live {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ep.Delete(ctx, c)
			}()
		}
		wg.Wait()
		cancel()
	}
	close(s.stop)
	s.hook.Store(nil)
	if ep != nil {
		ep.Close()
		p500.Close()
	}
	s.wg.Wait()
	closeCreds(s.creds)
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
	ep := s.ep
	var gone []*ike.ChildSA
	var goneNames []string
	var again []string
	for name, ch := range s.children {
		_, nc := next.ChildRef(name)
		if nc == nil || next.Connection(ch.conn.Name) == nil {
			goneNames = append(goneNames, name)
			if ch.cur != nil {
				gone = append(gone, ch.cur)
			}
		} else if ch.cur != nil {
			again = append(again, name)
		}
	}
	s.mu.Unlock()
	if same || (ep == nil && len(next.Connections) == 0) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	var wg sync.WaitGroup
	for _, c := range gone {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep.Delete(ctx, c)
		}()
	}
	wg.Wait()
	cancel()
	for _, name := range goneNames {
		if g.store.Load().Tunnel(name) != nil {
			g.store.RemoveTunnel(name)
			note("IKE child removed", "child", name)
		}
	}
	if len(next.Connections) == 0 {
		g.closeIKEEndpoint()
		note("IKE stopped", "connections", 0)
		return nil
	}
	if s.stop == nil || s.closed {
		return errors.New("gateway: IKE is not running")
	}
	if ep != nil && s.ikeOpts == next.IKE && sameLocals {
		return g.reloadPeers(next, again, regrouped, note)
	}
	first := ep == nil
	if err := g.buildEndpoint(next); err != nil {
		return err
	}
	if first {
		s.wg.Add(1)
		go g.ikeLoop()
	}
	note("IKE endpoint rebuilt", "connections", len(next.Connections))
	s.mu.Lock()
	g.initiateGroupsLocked(func(ch *ikeChild) bool {
		return ch.child.StartAction == config.StartStart || (slices.Contains(again, ch.child.Name) && !ch.terminated)
	})
	s.mu.Unlock()
	return nil
}

// reloadPeers gives the running endpoint next's connections
// (ike.Endpoint.SetPeers): an unchanged connection (same section, same
// credentials) keeps its IKE and Child SAs and its children's state; a
// changed one has its SAs deleted (the peer told) and is negotiated again
// if it was up or starts; an added one starts per its start_action. Those
// of removed connections are deleted by reloadIKE already. again names
// the children that were up; regrouped the connections whose local
// address moved into, out of or between [[ha.group]]s, which are changed
// ones too (their SAs were leased, or not, for the group they were in).
func (g *Gateway) reloadPeers(next *config.Gateway, again []string, regrouped map[string]bool, note func(string, ...any)) error {
	s := &g.ike
	s.mu.Lock()
	ep := s.ep
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
	for i := range next.Connections {
		name := next.Connections[i].Name
		p, sg, k, err := g.ikePeer(next, i)
		if err != nil {
			return fail(err)
		}
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
	if err := ep.SetPeers(peers); err != nil {
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
	old := s.children
	s.children = map[string]*ikeChild{}
	for i := range next.Connections {
		c := &next.Connections[i]
		for j := range c.Children {
			o := old[c.Children[j].Name]
			if kept[c.Name] && o != nil && o.conn.Name == c.Name {
				o.conn, o.child = c, &c.Children[j]
				s.children[o.child.Name] = o
				continue
			}
			ch := &ikeChild{conn: c, child: &c.Children[j]}
			if o != nil {
				ch.cur, ch.gen, ch.since, ch.pairs, ch.terminated = o.cur, o.gen, o.since, o.pairs, o.terminated
			}
			s.children[ch.child.Name] = ch
		}
	}
	var traps []*ikeChild
	for _, ch := range s.children {
		if !kept[ch.conn.Name] && ch.child.StartAction == config.StartTrap && ch.cur == nil {
			traps = append(traps, ch)
		}
	}
	g.initiateGroupsLocked(func(ch *ikeChild) bool {
		return !kept[ch.conn.Name] && (ch.child.StartAction == config.StartStart || (slices.Contains(again, ch.child.Name) && !ch.terminated))
	})
	s.mu.Unlock()
	for _, ch := range traps {
		g.trapTunnel(ch)
	}
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

// initiateGroupsLocked initiates the children want picks, a connection's
// one after the other in file order (so that they share its IKE SA).
// s.mu must be held.
func (g *Gateway) initiateGroupsLocked(want func(*ikeChild) bool) {
	byConn := map[string][]*ikeChild{}
	for _, ch := range g.ike.children {
		if want(ch) {
			byConn[ch.conn.Name] = append(byConn[ch.conn.Name], ch)
		}
	}
	for _, chs := range byConn {
		slices.SortFunc(chs, func(a, b *ikeChild) int { return childIndex(a) - childIndex(b) })
		g.initiateLocked(chs[0], chs[1:]...)
	}
}

// closeIKEEndpoint drops the endpoint when no connection is left.
func (g *Gateway) closeIKEEndpoint() {
	s := &g.ike
	s.mu.Lock()
	ep, p500, creds := s.ep, s.port500, s.creds
	s.ep, s.port500, s.creds, s.conns, s.secrets = nil, nil, nil, nil, nil
	s.gen++
	s.children = map[string]*ikeChild{}
	s.mu.Unlock()
	s.hook.Store(nil)
	if ep != nil {
		ep.Close()
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
	s := &g.ike
	s.mu.Lock()
	ep := s.ep
	var chs []*ikeChild
	for _, c := range s.children {
		if c.conn.Name == name {
			chs = append(chs, c)
		}
	}
	if len(chs) == 0 || ep == nil {
		s.mu.Unlock()
		return fmt.Errorf("gateway: no IKE connection %q%s", name, g.connNamesLocked())
	}
	slices.SortFunc(chs, func(a, b *ikeChild) int { return childIndex(a) - childIndex(b) })
	for _, c := range chs {
		c.terminated = false
		c.busy, c.lastTry = true, time.Now()
	}
	s.mu.Unlock()
	var errs []error
	for _, c := range chs {
		var err error
		if childIndex(c) == 0 {
			_, err = ep.Initiate(ctx, name)
		} else {
			_, err = ep.InitiateChild(ctx, name, c.child.Name)
		}
		s.mu.Lock()
		c.busy = false
		if err != nil {
			c.lastErr = err.Error()
			errs = append(errs, fmt.Errorf("child %q: %w", c.child.Name, err))
		}
		s.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gateway: initiate %q: %w", name, err)
	}
	return nil
}

// TerminateIKE deletes the connection's IKE SA and its child, telling the
// peer (`sluice ike terminate`); its tunnel goes (a trap child's stays
// without SAs). It is not initiated again until asked, whatever its
// start action.
func (g *Gateway) TerminateIKE(ctx context.Context, name string) error {
	s := &g.ike
	s.mu.Lock()
	ep := s.ep
	var cur *ike.ChildSA
	found := false
	for _, c := range s.children {
		if c.conn.Name == name {
			found = true
			c.terminated = true
			if c.cur != nil {
				cur = c.cur
			}
		}
	}
	if !found || ep == nil {
		s.mu.Unlock()
		return fmt.Errorf("gateway: no IKE connection %q%s", name, g.connNamesLocked())
	}
	s.mu.Unlock()
	if cur == nil {
		return fmt.Errorf("gateway: IKE connection %q has no SA to terminate", name)
	}
	if err := ep.Delete(ctx, cur); err != nil {
		return fmt.Errorf("gateway: terminate %q: %w", name, err)
	}
	return nil
}

func (g *Gateway) connNamesLocked() string {
	var names []string
	for _, ch := range g.ike.children {
		names = append(names, ch.conn.Name)
	}
	if len(names) == 0 {
		return " (the configuration has no [[connection]])"
	}
	slices.Sort(names)
	return " (connections: " + strings.Join(names, ", ") + ")"
}

// IKEInfo is the IKE side for `sluice ike list` and `sluice stats`.
type IKEInfo struct {
	Connections []IKEConnInfo     `json:"connections"`
	Stats       map[string]uint64 `json:"stats"` // ike.Stats by snake_case name
}

// IKEConnInfo is one connection and its child.
type IKEConnInfo struct {
	Name    string `json:"name"`
	Local   string `json:"local"`
	Remote  string `json:"remote"` // configured; "%any" for any
	State   string `json:"state"`  // "established", "connecting", "down" or "terminated"
	IKESPIi string `json:"ike_spi_i,omitempty"`
	IKESPIr string `json:"ike_spi_r,omitempty"`
	// IKEEstablished is when the IKE SA in use was made (a rekey makes a
	// new one); IKEInitiator whether we made it; IKERemote the peer's
	// address and port IKE uses now (4500 after a NAT was found).
	IKEEstablished time.Time `json:"ike_established,omitzero"`
	IKEInitiator   bool      `json:"ike_initiator,omitempty"`
	IKERemote      string    `json:"ike_remote,omitempty"`
	// IKESuite is the IKE SA's negotiated suite ("aes256gcm16-prfsha384-
	// ecp384"); LocalID the identity we authenticated with, RemoteID the
	// peer's. All three are empty while no IKE SA is established.
	IKESuite string `json:"ike_suite,omitempty"`
	LocalID  string `json:"local_id,omitempty"`
	RemoteID string `json:"remote_id,omitempty"`
	// Proposal is the configured IKE proposals.
	Proposal string         `json:"proposals"`
	Error    string         `json:"error,omitempty"` // the last failure
	Children []IKEChildInfo `json:"children"`
}

// IKEChildInfo is one child: its current SA pair, if any.
type IKEChildInfo struct {
	Name        string `json:"name"`
	StartAction string `json:"start_action"`
	State       string `json:"state"` // "installed", "trap" or "down"
	InSPI       uint32 `json:"in_spi,omitempty"`
	OutSPI      uint32 `json:"out_spi,omitempty"`
	Suite       string `json:"suite,omitempty"` // the negotiated ESP suite
	ESN         bool   `json:"esn"`
	// BytesIn and PacketsIn count what the inbound SA of the installed
	// pair opened, BytesOut and PacketsOut what its outbound SA sealed
	// (the SAs' counters: ESP payload bytes). A rekey starts them again.
	BytesIn     uint64    `json:"bytes_in"`
	BytesOut    uint64    `json:"bytes_out"`
	PacketsIn   uint64    `json:"packets_in"`
	PacketsOut  uint64    `json:"packets_out"`
	Encap       bool      `json:"encap"`
	PeerAddr    string    `json:"peer,omitempty"` // the outer address and port ESP goes to
	LocalTS     []string  `json:"local_ts"`
	RemoteTS    []string  `json:"remote_ts"`
	Established time.Time `json:"established,omitzero"`
	RekeyTime   string    `json:"rekey_time"`
	LifeTime    string    `json:"life_time"`
}

// IKE describes the connections and the endpoint's counters.
func (g *Gateway) IKE() IKEInfo {
	s := &g.ike
	s.mu.Lock()
	ep := s.ep
	s.mu.Unlock()
	info := IKEInfo{Connections: []IKEConnInfo{}, Stats: map[string]uint64{}}
	ikeSAs := map[string]ike.IKESAInfo{} // the established IKE SA of each peer
	if ep != nil {
		info.Stats = IKEStatsMap(ep.Stats())
		for _, sa := range ep.IKESAs() {
			if sa.State == "established" {
				ikeSAs[sa.Peer] = sa
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	db := g.store.Load()
	for i := range s.conns {
		c := &s.conns[i]
		ci := IKEConnInfo{Name: c.Name, Local: c.Local.String(), Remote: "%any", Proposal: c.Proposals, State: "down"}
		if c.Remote.IsValid() {
			ci.Remote = c.Remote.String()
		}
		for j := range c.Children {
			ch := s.children[c.Children[j].Name]
			if ch == nil {
				continue
			}
			cc := IKEChildInfo{Name: ch.child.Name, StartAction: ch.child.StartAction, State: "down",
				RekeyTime: ch.child.RekeyTime.String(), LifeTime: ch.child.LifeTime.String()}
			// The negotiated selectors while a pair is installed (the
			// peer may have narrowed them), else the configured ones.
			if ch.cur != nil {
				for _, sel := range ch.cur.LocalTS {
					cc.LocalTS = append(cc.LocalTS, sel.String())
				}
				for _, sel := range ch.cur.RemoteTS {
					cc.RemoteTS = append(cc.RemoteTS, sel.String())
				}
			} else {
				for _, p := range ch.child.LocalTS {
					cc.LocalTS = append(cc.LocalTS, p.String())
				}
				for _, p := range ch.child.RemoteTS {
					cc.RemoteTS = append(cc.RemoteTS, p.String())
				}
			}
			switch {
			case ch.cur != nil:
				cc.State, cc.InSPI, cc.OutSPI, cc.Suite, cc.ESN, cc.Encap = "installed", ch.cur.InSPI, ch.cur.OutSPI, ch.cur.Suite, ch.cur.ESN, ch.cur.Encap
				cc.PeerAddr, cc.Established = ch.cur.Remote.String(), ch.since
				cc.PacketsIn, cc.BytesIn, cc.PacketsOut, cc.BytesOut = childCounters(db, ch.child.Name, ch.cur)
				ci.State = "established"
			case db.Tunnel(ch.child.Name) != nil:
				cc.State = "trap"
			}
			if ci.State != "established" {
				switch {
				case ch.busy:
					ci.State = "connecting"
				case ch.terminated:
					ci.State = "terminated"
				}
			}
			if ch.lastErr != "" {
				ci.Error = ch.lastErr
			}
			ci.Children = append(ci.Children, cc)
		}
		if sa, ok := ikeSAs[c.Name]; ok {
			ci.IKESPIi, ci.IKESPIr = fmt.Sprintf("%016x", sa.SPIi), fmt.Sprintf("%016x", sa.SPIr)
			ci.IKEEstablished, ci.IKEInitiator, ci.IKERemote = sa.Established, sa.Initiator, sa.Remote.String()
			ci.IKESuite, ci.LocalID, ci.RemoteID = sa.Suite, sa.LocalID, sa.RemoteID
		}
		info.Connections = append(info.Connections, ci)
	}
	return info
}

// childCounters reads the counters of the SAs of pair in db: the inbound
// SA by its SPI, the outbound one if it is still the one tunnel sends with
// (zero while a rekey's pair waits to take over).
func childCounters(db *sad.DB, tunnel string, pair *ike.ChildSA) (pktsIn, bytesIn, pktsOut, bytesOut uint64) {
	if in := db.Inbound(pair.InSPI); in != nil {
		pktsIn, bytesIn = in.SA.Counters.Packets.Load(), in.SA.Counters.Bytes.Load()
	}
	if t := db.Tunnel(tunnel); t != nil {
		if out := t.Out(); out != nil && out.SA.SPI() == pair.OutSPI {
			pktsOut, bytesOut = out.SA.Counters.Packets.Load(), out.SA.Counters.Bytes.Load()
		}
	}
	return
}

// IKEStatsMap names each counter of ike.Stats in snake_case, for JSON
// and Prometheus: RxIntegrityFailed is rx_integrity_failed.
func IKEStatsMap(st ike.Stats) map[string]uint64 {
	m := map[string]uint64{}
	v := reflect.ValueOf(st)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Uint64 {
			m[snake(v.Type().Field(i).Name)] = f.Uint()
		}
	}
	return m
}

// snake turns a Go name into snake_case: "TSUnacceptable" is
// "ts_unacceptable", "IKESAEstablished" "ike_sa_established".
func snake(s string) string {
	var b strings.Builder
	r := []rune(strings.ReplaceAll(s, "IKESA", "IkeSa"))
	for i, c := range r {
		upper := c >= 'A' && c <= 'Z'
		if upper && i > 0 {
			prevLower := r[i-1] >= 'a' && r[i-1] <= 'z'
			nextLower := i+1 < len(r) && r[i+1] >= 'a' && r[i+1] <= 'z'
			if prevLower || nextLower && r[i-1] >= 'A' && r[i-1] <= 'Z' {
				b.WriteByte('_')
			}
		}
		if upper {
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}

// setIKELifetimes and setPeerLifetimes pass the configuration's times to
// the endpoint, as far as package ike takes them.
func setIKELifetimes(ecfg *ike.Config, g *Gateway) {
	ecfg.OnPeerDead = func(peer string, err error) {
		g.Logger("ike").Warn("IKE peer dead", "connection", peer, "err", err)
	}
}

// setPeerLifetimes gives the endpoint the connection's times: it rekeys
// the child at rekey_time (less a random part, swanctl's rand_time) and
// the IKE SA at its rekey_time, checks the peer's liveness every
// dpd_delay, and initiates again to a dead peer when the child starts
// with the gateway (a trap child is negotiated again by its next packet).
func setPeerLifetimes(p *ike.Peer, c *config.Connection, ch *config.Child) {
	p.ChildLifetime = ike.Lifetime{RekeyTime: ch.RekeyTime, LifeTime: ch.LifeTime}
	p.IKELifetime = ike.Lifetime{RekeyTime: c.RekeyTime}
	if c.OverTime > 0 {
		p.IKELifetime.LifeTime = c.RekeyTime + c.OverTime
	}
	p.DPDDelay = c.DPDDelay
	if ch.StartAction == config.StartStart && c.Remote.IsValid() {
		p.DPDAction = ike.ActionRestart
	}
}

// isIKEChild reports whether the tunnel named name is a child's.
func (g *Gateway) isIKEChild(name string) bool {
	g.ike.mu.Lock()
	defer g.ike.mu.Unlock()
	return g.ike.children[name] != nil
}

// hasIKE reports whether IKE runs (the configuration has connections).
func (g *Gateway) hasIKE() bool {
	g.ike.mu.Lock()
	defer g.ike.mu.Unlock()
	return g.ike.ep != nil
}
