package ike

// Controller: the configured children of an Endpoint's peers, kept up.
//
// An Endpoint negotiates what it is asked to and reports what it made; a
// Controller decides what to ask for and when, and tells the data plane
// what to install:
//
//  1. Start: children with StartStart are initiated (Start), a peer's
//     children one after the other, the IKE_AUTH one first, so that they
//     share one IKE SA; their peer is restarted when it dies (DPD,
//     Peer.DPDAction).
//  2. Trap: a child with StartTrap has a tunnel without SAs
//     (DataPlane.Trap); the data plane reports a packet for it (Trap),
//     and the Controller initiates it, at most once per TrapHoldDown.
//  3. Install (OnChildSA): a new pair goes into the child's tunnel
//     make-before-break; a pair the peer's rekey made is held
//     (ChildSA.HoldOutbound) until the peer deletes the one it replaces.
//  4. Remove (OnDelete): a deleted pair drains (DataPlane.Retire), or
//     hands the tunnel to the held pair, or takes the tunnel down.
//  5. Limits: every CheckInterval the Controller reads the current pairs'
//     counters (DataPlane.Traffic) and rekeys a pair near its
//     sequence-number limit or past its rekey_bytes/rekey_packets, and
//     deletes one past its life_bytes/life_packets. Nothing of this runs
//     per packet.
//  6. Reload: Reload gives the Endpoint new peers and keeps the state of
//     the children of unchanged ones; Open puts a new Endpoint in place of
//     the old (Detach) and carries the children's pairs over.
//  7. Road warriors: a child of a peer without a Remote address (a
//     responder-only connection, remote %any) may run in several IKE SAs
//     at once, one per road warrior. Each gets a tunnel of its own,
//     named TunnelName(child, pair): "<child>/<its first virtual IP>",
//     or "<child>/<its address:port>" without one; the name stays
//     through the rekeys of its Child SA and of its IKE SA. The tunnel
//     and its state go with the road warrior's last pair (its IKE SA's
//     end), so what the Controller keeps per road warrior is bounded by
//     what the Endpoint holds.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// StartAction is what a Controller does with a child on its own
// (swanctl's start_action).
type StartAction uint8

const (
	// StartNone waits for the peer, or for Initiate.
	StartNone StartAction = iota
	// StartStart initiates the child at Start and after a reload that
	// changed it, and restarts its peer when it dies (ActionRestart).
	StartStart
	// StartTrap installs a tunnel without SAs and initiates the child on
	// the first packet routed into it (Controller.Trap).
	StartTrap
)

// ChildPolicy is one configured child as a Controller runs it.
type ChildPolicy struct {
	// Peer is the Peer.Name of its connection; Child its name:
	// Peer.ChildName for the Child SA of IKE_AUTH, or one of
	// Peer.Children.
	Peer, Child string
	// Start is its start action.
	Start StartAction
	// RekeyBytes and RekeyPackets rekey a pair whose inbound or outbound
	// SA carried that much (swanctl's rekey_bytes, rekey_packets);
	// LifeBytes and LifePackets delete it (life_bytes, life_packets). 0
	// is no limit. swanctl's default life, the rekey limit plus 10%, is
	// the caller's to apply (package config does).
	RekeyBytes, LifeBytes, RekeyPackets, LifePackets uint64
}

// Traffic is what the SAs of one pair carried: the inbound SA's opened
// packets and bytes, the outbound one's sealed ones (zero while the pair
// does not send).
type Traffic struct {
	PacketsIn, BytesIn, PacketsOut, BytesOut uint64
	// SeqLimit is set when either SA nears its sequence-number limit and
	// must be rekeyed.
	SeqLimit bool
}

// DataPlane is where a Controller installs Child SAs: one tunnel per
// configured child, named by ChildPolicy.Child, or, for a child of a
// responder-only peer, one per road warrior, named by TunnelName. Its
// methods other than
// Traffic are called with the Controller's lock held, in the order of the
// events: they must not call into the Controller, and must not take long
// (Install runs before the answer that makes the pair leaves).
type DataPlane interface {
	// Install opens both SAs of c and puts its inbound SA into the
	// child's tunnel, then switches the tunnel's outbound traffic to c,
	// unless hold: then c's outbound SA waits aside until Promote or
	// Retire names c. A tunnel whose outer endpoints differ from c's is
	// replaced (a held pair's outbound SA ends with it).
	Install(child string, c *ChildSA, hold bool) error
	// Promote switches the child's outbound traffic to c, a pair that
	// Install held; on an error the Controller takes the tunnel down.
	Promote(child string, c *ChildSA) error
	// Retire takes c, deleted or replaced, out of service: its inbound
	// SA keeps taking the peer's packets in flight for a while, then
	// goes; its outbound SA, if still held, ends.
	Retire(child string, c *ChildSA)
	// Down removes the child's tunnel and all of its SAs; last, if not
	// nil, is the pair the tunnel sent with, gone with it. With trap, a
	// tunnel without SAs stays in its place (Trap). Each pair Install
	// put in service leaves it once: by Retire, or as Down's last, or
	// with a Down of its child that names no pair (the child is
	// removed, or its IKE SAs handed elsewhere: Drop).
	Down(child string, last *ChildSA, trap bool)
	// Trap installs the child's tunnel without SAs, unless it has one:
	// packets routed into it are dropped, and reported with
	// Controller.Trap.
	Trap(child string)
	// Traffic reads the counters of c's SAs. It is called without the
	// Controller's lock (from the Endpoint's keepalives too) and must
	// be safe for concurrent use.
	Traffic(child string, c *ChildSA) Traffic
}

// ControllerConfig configures a Controller. The zero value of each
// optional field selects the default named.
type ControllerConfig struct {
	// DataPlane receives the Child SAs; it is required.
	DataPlane DataPlane
	// MayInitiate, if set, says whether the Controller may initiate to
	// p now (a hot standby's gateway does not): it is asked, with the
	// Controller's lock held, before each initiation of its own (not
	// Initiate's).
	MayInitiate func(p *Peer) bool
	// CheckInterval is how often the current pairs' counters are read
	// for their limits (default 1s).
	CheckInterval time.Duration
	// TrapHoldDown is the least time between two initiations of a trap
	// child by its packets (default 2s).
	TrapHoldDown time.Duration
	// InitiateTimeout bounds an initiation of the Controller's own
	// (default 1 minute).
	InitiateTimeout time.Duration
	// RetryDelay is how long after a failed initiation of its own the
	// Controller tries a child that starts again (default 10s); the delay
	// doubles with each failure in a row, up to MaxRetryDelay (default
	// 5 minutes).
	RetryDelay, MaxRetryDelay time.Duration
	// Log receives events; nil discards.
	Log *slog.Logger
}

// ChildStatus is one configured child, as Children reports it.
type ChildStatus struct {
	ChildPolicy
	// Index is its place in its peer's children: 0 for the Child SA of
	// IKE_AUTH.
	Index int
	// Pair is the pair its tunnel sends with, nil when it has none;
	// Since is when it was installed.
	Pair  *ChildSA
	Since time.Time
	// Busy is set while an initiation of the child is under way;
	// Terminated after Terminate, until Initiate; LastErr is the last
	// initiation's failure.
	Busy, Terminated bool
	LastErr          string
	// Tunnel is the data plane's name of the tunnel: Child, or for a
	// road warrior of a responder-only peer's child, TunnelName of its
	// pair. Children reports such a child once without a pair (Tunnel
	// empty) and once per road warrior.
	Tunnel string
}

// ctlChild is one configured child and what runs of it.
type ctlChild struct {
	pol   ChildPolicy
	index int
	cur   *ChildSA // the pair the tunnel sends with; nil when down
	gen   uint64   // the endpoint generation that made cur
	since time.Time
	// held is a pair the peer's rekey of cur made (HoldOutbound), whose
	// outbound SA waits for cur's Delete.
	held *ChildSA
	// expiring is cur once its life limit asked for its delete.
	expiring *ChildSA
	busy     bool
	lastTry  time.Time
	lastErr  string
	// retryAt is when a child that starts, whose last initiation of
	// ours failed, is tried again (zero: not); backoff the delay that
	// was.
	retryAt time.Time
	backoff time.Duration
	// terminated: Terminate asked; no initiation of ours until Initiate.
	terminated bool
	// tunnel is the data plane's name of the child's tunnel: pol.Child,
	// or, for a road warrior's instance, TunnelName of its pairs.
	tunnel string
	// multi is set on a child of a responder-only peer: its pairs go to
	// instances, one per road warrior, by tunnel name (insts), each
	// removed with its last pair. parent is an instance's child.
	multi  bool
	insts  map[string]*ctlChild
	parent *ctlChild
}

// TunnelName is the name of the tunnel of a road warrior's pair sa of a
// responder-only peer's child (see the top of controller.go):
// "<child>/<first virtual IP>", or "<child>/<remote address:port>" for
// a pair without virtual IPs. Both stay through rekeys of the Child SA
// and of the IKE SA (which keep the virtual IPs and the addresses).
func TunnelName(child string, sa *ChildSA) string {
	if len(sa.VIPs) > 0 {
		return child + "/" + sa.VIPs[0].String()
	}
	return child + "/" + sa.Remote.String()
}

// ChildOfTunnel is the configured child a road warrior's tunnel named
// tunnel would be of: the name up to its last "/" (TunnelName; no
// address or address:port has one), or "" without one.
func ChildOfTunnel(tunnel string) string {
	if i := strings.LastIndexByte(tunnel, '/'); i >= 0 {
		return tunnel[:i]
	}
	return ""
}

// Controller keeps the configured children of an Endpoint's peers up
// (see the top of controller.go). Its methods are safe for concurrent
// use.
type Controller struct {
	cfg ControllerConfig
	dp  DataPlane
	log *slog.Logger

	mu       sync.Mutex
	ep       *Endpoint
	gen      uint64 // the endpoint's generation: callbacks of an older one are ignored
	peers    map[string]*Peer
	children map[string]*ctlChild // by child name
	closed   bool

	trap chan string
	stop chan struct{}
	wg   sync.WaitGroup
}

// NewController makes a Controller; it runs an Endpoint once Open (or
// Prepare and Attach) gave it one. Close stops it.
func NewController(cfg ControllerConfig) *Controller {
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = time.Second
	}
	if cfg.TrapHoldDown <= 0 {
		cfg.TrapHoldDown = 2 * time.Second
	}
	if cfg.InitiateTimeout <= 0 {
		cfg.InitiateTimeout = time.Minute
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 10 * time.Second
	}
	if cfg.MaxRetryDelay <= 0 {
		cfg.MaxRetryDelay = 5 * time.Minute
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, dp: cfg.DataPlane, log: log, children: map[string]*ctlChild{}, peers: map[string]*Peer{},
		trap: make(chan string, 16), stop: make(chan struct{})}
	c.wg.Add(1)
	go c.loop()
	return c
}

// Open makes an Endpoint of cfg and tr for children (see Prepare) and puts
// it in service (Attach). The current Endpoint, if any, must have been
// Detached.
func (c *Controller) Open(cfg Config, tr Transport, children []ChildPolicy) (*Endpoint, error) {
	c.Prepare(&cfg, children)
	ep, err := NewEndpoint(cfg, tr)
	if err != nil {
		return nil, err
	}
	c.Attach(ep)
	return ep, nil
}

// Prepare readies cfg for an Endpoint the Controller runs: it sets cfg's
// OnChildSA, OnDelete, OnPeerDead (calling the one cfg had too) and ESPSent,
// and the DPDAction of its Peers (ActionRestart for a peer with a Remote
// address whose IKE_AUTH child starts). The children become children's;
// those of the same name keep their pair, which drains once the new
// Endpoint installs the child's next one. Callbacks of Endpoints prepared
// before are ignored from here on. Attach puts the Endpoint made of cfg in
// service.
func (c *Controller) Prepare(cfg *Config, children []ChildPolicy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	gen := c.gen
	c.peers = map[string]*Peer{}
	for _, p := range cfg.Peers {
		c.peers[p.Name] = p
	}
	SetDPDActions(cfg.Peers, children)
	old := c.children
	c.children = map[string]*ctlChild{}
	for _, pol := range children {
		ch := c.newChildLocked(pol)
		if o := old[pol.Child]; o != nil {
			if o.held != nil {
				c.dp.Retire(o.pol.Child, o.held) // the old endpoint will not delete it
			}
			ch.cur, ch.gen, ch.since, ch.terminated = o.cur, o.gen, o.since, o.terminated
			// The road warriors' IKE SAs end with the old Endpoint, and
			// no Delete of theirs will come: their tunnels go now (they
			// come back as new ones when the road warriors do).
			c.dropInstsLocked(o, nil)
		}
		c.children[pol.Child] = ch
	}
	c.forgetLocked(old)
	cfg.OnChildSA = func(sa *ChildSA) { c.onChildSA(gen, sa) }
	cfg.OnDelete = func(sa *ChildSA) { c.onDelete(gen, sa) }
	dead := cfg.OnPeerDead
	cfg.OnPeerDead = func(peer string, err error) {
		c.log.Warn("IKE peer dead", "connection", peer, "err", err)
		if dead != nil {
			dead(peer, err)
		}
	}
	cfg.ESPSent = c.espSent
}

// SetDPDActions sets the DPDAction of each of peers as a Controller that
// runs children does (Prepare, Reload): ActionRestart for a peer with a
// Remote address whose IKE_AUTH child starts. A caller that compares new
// peers with running ones (Peer.RotatesPSK) calls it on the new ones
// first.
func SetDPDActions(peers []*Peer, children []ChildPolicy) {
	for _, p := range peers {
		for _, pol := range children {
			if pol.Peer == p.Name && pol.Child == p.ChildName && pol.Start == StartStart && p.Remote.IsValid() {
				p.DPDAction = ActionRestart
			}
		}
	}
}

// newChildLocked makes the state of a child of pol. c.mu is held.
func (c *Controller) newChildLocked(pol ChildPolicy) *ctlChild {
	ch := &ctlChild{pol: pol, tunnel: pol.Child}
	if p := c.peers[pol.Peer]; p != nil && !p.Remote.IsValid() {
		ch.multi, ch.insts = true, map[string]*ctlChild{}
	}
	if p := c.peers[pol.Peer]; p != nil && pol.Child != p.ChildName {
		for i := range p.Children {
			if p.Children[i].Name == pol.Child {
				ch.index = i + 1
			}
		}
	}
	return ch
}

// forgetLocked takes down the tunnels of old's children that are no
// children any more. c.mu is held.
func (c *Controller) forgetLocked(old map[string]*ctlChild) {
	for name, o := range old {
		if c.children[name] == nil {
			c.dropInstsLocked(o, nil)
			c.dp.Down(name, o.cur, false)
		}
	}
}

// dropInstsLocked takes down the tunnels of the road warriors of ch (a
// responder-only peer's child) that want picks (nil: all), and forgets
// them. c.mu is held.
func (c *Controller) dropInstsLocked(ch *ctlChild, want func(ChildStatus) bool) {
	for name, in := range ch.insts {
		if want != nil && !want(in.status()) {
			continue
		}
		delete(ch.insts, name)
		last := in.cur
		in.cur, in.held, in.expiring = nil, nil, nil
		c.dp.Down(name, last, false)
	}
}

// instances lists ch and, for a responder-only peer's child, its road
// warriors' instances.
func (ch *ctlChild) instances() []*ctlChild {
	out := []*ctlChild{ch}
	for _, in := range ch.insts {
		out = append(out, in)
	}
	return out
}

// Attach puts ep, made of the Config that Prepare readied last, in
// service, and installs the trap tunnels of children without a pair. It
// initiates nothing: see Start.
func (c *Controller) Attach(ep *Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ep = ep
	for _, ch := range c.children {
		if ch.pol.Start == StartTrap && ch.cur == nil {
			c.dp.Trap(ch.pol.Child)
		}
	}
}

// Endpoint returns the Endpoint in service, or nil.
func (c *Controller) Endpoint() *Endpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ep
}

// Detach takes the Endpoint out of service and closes it without telling
// the peers; its callbacks are ignored from here on. The children keep
// their pairs (the next Endpoint's replace them, see Prepare).
func (c *Controller) Detach() {
	c.mu.Lock()
	ep := c.ep
	c.ep = nil
	c.gen++
	c.mu.Unlock()
	if ep != nil {
		ep.Close()
	}
}

// Start initiates the children want picks (with their status), a
// peer's one after the other in their order.
func (c *Controller) Start(want func(ChildStatus) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startLocked(want)
}

func (c *Controller) startLocked(want func(ChildStatus) bool) {
	byPeer := map[string][]*ctlChild{}
	for _, ch := range c.children {
		if want(ch.status()) {
			byPeer[ch.pol.Peer] = append(byPeer[ch.pol.Peer], ch)
		}
	}
	for _, chs := range byPeer {
		slices.SortFunc(chs, func(a, b *ctlChild) int { return a.index - b.index })
		c.initiateLocked(chs[0], chs[1:]...)
	}
}

func (ch *ctlChild) status() ChildStatus {
	st := ChildStatus{ChildPolicy: ch.pol, Index: ch.index, Pair: ch.cur, Since: ch.since, Busy: ch.busy,
		Terminated: ch.terminated, LastErr: ch.lastErr, Tunnel: ch.tunnel}
	if ch.multi {
		st.Tunnel = ""
	}
	return st
}

// Children reports the configured children.
func (c *Controller) Children() []ChildStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ChildStatus, 0, len(c.children))
	for _, ch := range c.children {
		for _, in := range ch.instances() {
			out = append(out, in.status())
		}
	}
	slices.SortFunc(out, func(a, b ChildStatus) int {
		if a.Peer != b.Peer {
			return strings.Compare(a.Peer, b.Peer)
		}
		if a.Index != b.Index {
			return a.Index - b.Index
		}
		return strings.Compare(a.Tunnel, b.Tunnel)
	})
	return out
}

// initiateLocked negotiates ch unless that is under way, then each of
// then in turn, in one goroutine: the child of IKE_AUTH with its IKE SA
// (Initiate), the others on it (InitiateChild, which makes the IKE SA
// first if there is none). c.mu is held.
func (c *Controller) initiateLocked(ch *ctlChild, then ...*ctlChild) {
	p := c.peers[ch.pol.Peer]
	if c.closed || c.ep == nil || p == nil || !p.Remote.IsValid() || (c.cfg.MayInitiate != nil && !c.cfg.MayInitiate(p)) {
		return
	}
	var todo []*ctlChild
	for _, x := range append([]*ctlChild{ch}, then...) {
		if !x.busy {
			x.busy, x.lastTry = true, time.Now()
			todo = append(todo, x)
		}
	}
	ep := c.ep
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for _, x := range todo {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.InitiateTimeout)
			err := initiate(ctx, ep, x)
			cancel()
			c.mu.Lock()
			x.busy = false
			if err != nil {
				x.lastErr = err.Error()
				if x.pol.Start == StartStart && !x.terminated && c.ep == ep {
					x.backoff = min(max(2*x.backoff, c.cfg.RetryDelay), c.cfg.MaxRetryDelay)
					x.retryAt = time.Now().Add(x.backoff)
				}
				c.log.Warn("IKE initiation failed", "connection", x.pol.Peer, "child", x.pol.Child, "err", err, "retry_in", x.backoff)
			} else {
				x.lastErr, x.retryAt, x.backoff = "", time.Time{}, 0
			}
			c.mu.Unlock()
		}
	}()
}

func initiate(ctx context.Context, ep *Endpoint, ch *ctlChild) error {
	var err error
	if ch.index == 0 && !ep.hasEstablished(ch.pol.Peer) {
		_, err = ep.Initiate(ctx, ch.pol.Peer)
	} else {
		// Beyond IKE_AUTH's child, or IKE_AUTH's child again while the
		// peer's IKE SA stands (its other children up): on that IKE SA,
		// not a second one.
		_, err = ep.InitiateChild(ctx, ch.pol.Peer, ch.pol.Child)
	}
	return err
}

// hasEstablished reports whether the Endpoint holds an established IKE
// SA with the peer named name.
func (e *Endpoint) hasEstablished(name string) bool {
	e.mu.Lock()
	defer e.unlock()
	p := e.peerLocked(name)
	return p != nil && e.establishedLocked(p) != nil
}

// ErrUnknownPeer is returned by Initiate and Terminate for a peer that
// has no configured child.
var ErrUnknownPeer = errors.New("ike: no such peer")

// ErrNoChildSA is returned by Terminate for a peer without a pair.
var ErrNoChildSA = errors.New("ike: no Child SA")

// ErrInitiating is returned by Initiate while an initiation of one of
// the peer's children is under way (the Controller's own, for its start
// action, a trap or a retry, or another Initiate).
var ErrInitiating = errors.New("ike: an initiation is under way")

// Initiate negotiates the children of the peer named peer that have no
// pair now, in order, and waits for them or ctx; a child that has one
// keeps it (no second IKE SA is made for it), so Initiate of a peer whose
// children are all up does nothing and returns nil. While one of the
// peer's children is being initiated it returns ErrInitiating and starts
// nothing. It lifts Terminate.
func (c *Controller) Initiate(ctx context.Context, peer string) error {
	c.mu.Lock()
	ep := c.ep
	var chs []*ctlChild
	for _, ch := range c.children {
		if ch.pol.Peer == peer {
			chs = append(chs, ch)
		}
	}
	if len(chs) == 0 || ep == nil {
		c.mu.Unlock()
		return fmt.Errorf("%w %q", ErrUnknownPeer, peer)
	}
	slices.SortFunc(chs, func(a, b *ctlChild) int { return a.index - b.index })
	for _, ch := range chs {
		if ch.busy {
			c.mu.Unlock()
			return fmt.Errorf("child %q of %q: %w", ch.pol.Child, peer, ErrInitiating)
		}
	}
	todo := chs[:0]
	for _, ch := range chs {
		ch.terminated = false
		if ch.cur != nil {
			continue // up: its pair stays
		}
		ch.busy, ch.lastTry = true, time.Now()
		todo = append(todo, ch)
	}
	c.mu.Unlock()
	var errs []error
	for _, ch := range todo {
		err := initiate(ctx, ep, ch)
		c.mu.Lock()
		ch.busy = false
		if err != nil {
			ch.lastErr = err.Error()
			errs = append(errs, fmt.Errorf("child %q: %w", ch.pol.Child, err))
		}
		c.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Terminate deletes the IKE SA of the peer named peer with its Child
// SAs, telling the peer; its children are not initiated again by the
// Controller until Initiate asks.
func (c *Controller) Terminate(ctx context.Context, peer string) error {
	c.mu.Lock()
	ep := c.ep
	var cur *ChildSA
	var rws []*ChildSA // one pair per road warrior of a responder-only peer
	seen := map[string]bool{}
	found := false
	for _, ch := range c.children {
		if ch.pol.Peer == peer {
			found = true
			ch.terminated, ch.retryAt = true, time.Time{}
			if ch.cur != nil && (cur == nil || ch.index == 0) {
				cur = ch.cur
			}
			for name, in := range ch.insts {
				rw := name[len(ch.pol.Child)+1:] // the road warrior (TunnelName)
				if in.cur != nil && !seen[rw] {
					seen[rw] = true
					rws = append(rws, in.cur)
				}
			}
		}
	}
	c.mu.Unlock()
	if !found || ep == nil {
		return fmt.Errorf("%w %q", ErrUnknownPeer, peer)
	}
	if cur != nil {
		rws = append(rws, cur)
	}
	if len(rws) == 0 {
		return fmt.Errorf("%w of peer %q", ErrNoChildSA, peer)
	}
	// Each road warrior's IKE SA goes (deleting one pair of an IKE SA
	// deletes the IKE SA: another pair of it finds it gone).
	return deleteEach(ctx, ep, rws)
}

// Trap reports a packet for the child's tunnel, which has no outbound
// SA. It does not block or allocate: the Controller's goroutine initiates
// a trap child without a pair, at most once per TrapHoldDown.
func (c *Controller) Trap(child string) {
	select {
	case c.trap <- child:
	default:
	}
}

// Drop forgets the pairs of the children want picks and takes their
// tunnels down, without telling the peers (their IKE SAs were handed
// elsewhere: Endpoint.Release).
func (c *Controller) Drop(want func(ChildStatus) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.children {
		c.dropInstsLocked(ch, want)
		if !want(ch.status()) {
			continue
		}
		last := ch.cur
		ch.cur, ch.held, ch.expiring = nil, nil, nil
		c.dp.Down(ch.pol.Child, last, false)
	}
}

// Reload gives the Endpoint peers and children (Endpoint.SetPeers).
// kept names the peers whose SAs stay (their section and credentials are
// unchanged, or only the pre-shared key rotated): their children keep all
// of their state. The others' SAs are deleted by SetPeers; their children
// that had a pair and were not terminated, and those that start, are
// initiated again, and trap children get their tunnels. The tunnels of
// children that are gone go (see Remove, which deletes their SAs first).
func (c *Controller) Reload(peers []*Peer, children []ChildPolicy, kept func(peer string) bool) error {
	c.mu.Lock()
	ep := c.ep
	c.mu.Unlock()
	if ep == nil {
		return errors.New("ike: the controller has no endpoint")
	}
	SetDPDActions(peers, children)
	c.mu.Lock()
	wasUp := map[string]bool{}
	for name, ch := range c.children {
		wasUp[name] = ch.cur != nil && !ch.terminated
	}
	c.mu.Unlock()
	if err := ep.SetPeers(peers); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.peers = map[string]*Peer{}
	for _, p := range peers {
		c.peers[p.Name] = p
	}
	old := c.children
	c.children = map[string]*ctlChild{}
	for _, pol := range children {
		o := old[pol.Child]
		if kept(pol.Peer) && o != nil && o.pol.Peer == pol.Peer {
			o.pol = pol
			for _, in := range o.insts {
				in.pol = pol
			}
			c.children[pol.Child] = o
			continue
		}
		ch := c.newChildLocked(pol)
		if o != nil {
			ch.cur, ch.gen, ch.since, ch.terminated = o.cur, o.gen, o.since, o.terminated
			if ch.multi {
				// SetPeers deleted their SAs; the Deletes find them here.
				for name, in := range o.insts {
					in.pol, in.parent = pol, ch
					ch.insts[name] = in
				}
				o.insts = nil
			} else {
				c.dropInstsLocked(o, nil)
			}
		}
		c.children[pol.Child] = ch
	}
	c.forgetLocked(old)
	for _, ch := range c.children {
		if !kept(ch.pol.Peer) && ch.pol.Start == StartTrap && ch.cur == nil {
			c.dp.Trap(ch.pol.Child)
		}
	}
	c.startLocked(func(s ChildStatus) bool {
		return !kept(s.Peer) && (s.Start == StartStart || (wasUp[s.Child] && !s.Terminated))
	})
	return nil
}

// Remove deletes the SAs of the children keep does not keep (the IKE SAs
// that carry them, telling the peers; waiting at most timeout) and takes
// their tunnels down. It returns the children removed. A reload calls it
// before Reload or a new Endpoint.
func (c *Controller) Remove(keep func(child string) bool, timeout time.Duration) []string {
	c.mu.Lock()
	ep := c.ep
	var gone []*ChildSA
	var names []string
	for name, ch := range c.children {
		if keep(name) {
			continue
		}
		names = append(names, name)
		for _, in := range ch.instances() {
			if in.cur != nil {
				gone = append(gone, in.cur)
			}
		}
	}
	c.mu.Unlock()
	if ep != nil {
		deleteAll(ep, gone, timeout)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range names {
		var last *ChildSA
		if ch := c.children[name]; ch != nil {
			c.dropInstsLocked(ch, nil)
			last = ch.cur
			ch.cur, ch.held, ch.expiring = nil, nil, nil
		}
		c.dp.Down(name, last, false)
	}
	slices.Sort(names)
	return names
}

// deleteAll deletes the IKE SAs of sas at once, waiting at most timeout.
func deleteAll(ep *Endpoint, sas []*ChildSA, timeout time.Duration) {
	if len(sas) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	deleteEach(ctx, ep, sas)
}

// deleteEach deletes the IKE SAs of sas at once, waiting for them or
// ctx; it returns their errors.
func deleteEach(ctx context.Context, ep *Endpoint, sas []*ChildSA) error {
	var wg sync.WaitGroup
	errs := make([]error, len(sas))
	for i, sa := range sas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = ep.Delete(ctx, sa)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close deletes the IKE SAs of the children's pairs, telling the peers
// (waiting at most timeout), then closes the Endpoint and waits for the
// Controller's goroutines. The tunnels stay for the caller to take down.
func (c *Controller) Close(timeout time.Duration) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	ep := c.ep
	var live []*ChildSA
	for _, ch := range c.children {
		for _, in := range ch.instances() {
			if in.cur != nil {
				live = append(live, in.cur)
			}
			if in.held != nil {
				c.dp.Retire(in.tunnel, in.held)
				in.held = nil
			}
		}
	}
	c.mu.Unlock()
	if ep != nil {
		deleteAll(ep, live, timeout)
	}
	close(c.stop)
	c.mu.Lock()
	c.ep = nil
	c.gen++
	c.mu.Unlock()
	if ep != nil {
		ep.Close()
	}
	c.wg.Wait()
}

// childOfLocked finds the configured child of a negotiated pair: by its
// child's name, or, without one, the IKE_AUTH child of its peer. c.mu is
// held.
func (c *Controller) childOfLocked(sa *ChildSA) *ctlChild {
	if ch := c.children[sa.Child]; ch != nil && ch.pol.Peer == sa.Name {
		return ch
	}
	if sa.Child != "" {
		return nil
	}
	for _, ch := range c.children {
		if ch.pol.Peer == sa.Name && ch.index == 0 {
			return ch
		}
	}
	return nil
}

// pairChildLocked finds the child whose tunnel sa goes to: its
// configured child (childOfLocked), or, for a responder-only peer's
// child, its road warrior's instance, made if create: by TunnelName,
// else (the road warrior's address moved) the instance that holds sa,
// or one whose pair the same IKE SA made. The scan runs only for a pair
// whose name is new, so a road warrior's first. c.mu is held.
func (c *Controller) pairChildLocked(sa *ChildSA, create bool) *ctlChild {
	ch := c.childOfLocked(sa)
	if ch == nil || !ch.multi {
		return ch
	}
	name := TunnelName(ch.pol.Child, sa)
	if in := ch.insts[name]; in != nil {
		return in
	}
	for _, in := range ch.insts {
		switch {
		case in.cur == sa || in.held == sa:
			// Its road warrior's address moved (MOBIKE) since the
			// instance was named, without a virtual IP.
			return in
		case create && len(sa.VIPs) == 0 && in.cur != nil && sa.IKESPIi != 0 &&
			in.cur.IKESPIi == sa.IKESPIi && in.cur.IKESPIr == sa.IKESPIr:
			// A rekey on the IKE SA of the instance's pair, from an
			// address MOBIKE moved it to: the same road warrior.
			return in
		}
	}
	if !create {
		return nil
	}
	in := &ctlChild{pol: ch.pol, index: ch.index, tunnel: name, parent: ch}
	ch.insts[name] = in
	return in
}

// onChildSA is the Endpoint's OnChildSA: it installs the pair into its
// child's tunnel (a road warrior's own, for a responder-only peer's
// child).
func (c *Controller) onChildSA(gen uint64, sa *ChildSA) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || gen != c.gen {
		return
	}
	ch := c.pairChildLocked(sa, true)
	if ch == nil {
		c.log.Warn("IKE child SA of no configured child", "connection", sa.Name, "child", sa.Child)
		return
	}
	name := ch.tunnel
	if ch.terminated && !ch.busy && sa.Initiator && ch.cur == nil && c.ep != nil {
		// A child the operator terminated, made again by the Endpoint on
		// its own (a reauthentication's or a restart's IKE_AUTH, which
		// always carries the peer's first child): it stays terminated
		// until Initiate asks. The pair goes without being installed.
		ep := c.ep
		c.log.Info("IKE child SA of a terminated child deleted: made again without Initiate (reauthentication or restart)",
			"child", name, "in_spi", ESPSPI(sa.InSPI), "out_spi", ESPSPI(sa.OutSPI))
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.InitiateTimeout)
			defer cancel()
			if err := ep.DeleteChild(ctx, sa); err != nil {
				c.log.Warn("IKE child SA of a terminated child not deleted", "child", name, "err", err)
			}
		}()
		return
	}
	hold := sa.HoldOutbound && ch.cur != nil && ch.gen == gen
	if err := c.dp.Install(name, sa, hold); err != nil {
		c.log.Error("IKE child SA not installed", "child", name, "err", err)
		if ch.parent != nil && ch.cur == nil {
			delete(ch.parent.insts, name)
		}
		return
	}
	if hold {
		ch.held = sa
		c.log.Info("IKE child SA installed inbound; outbound waits for the peer's Delete of the old one", "child", name,
			"in_spi", ESPSPI(sa.InSPI), "out_spi", ESPSPI(sa.OutSPI))
		return
	}
	if prev := ch.cur; prev != nil && ch.gen != gen {
		// A pair of an Endpoint replaced by a reload: no OnDelete will
		// come for it, so it retires now.
		c.dp.Retire(name, prev)
	}
	ch.cur, ch.gen, ch.since, ch.lastErr, ch.expiring = sa, gen, time.Now(), "", nil
	ch.retryAt, ch.backoff = time.Time{}, 0
	c.log.Info("IKE child SA installed", "child", name, "in_spi", ESPSPI(sa.InSPI), "out_spi", ESPSPI(sa.OutSPI),
		"suite", sa.Suite, "esn", sa.ESN, "encap", sa.Encap, "remote", sa.Remote)
}

// onDelete is the Endpoint's OnDelete: a deleted pair retires, or hands
// its child's tunnel to the held pair the peer's rekey made, or, the
// child's last, takes the tunnel down (a trap child keeps one without
// SAs).
func (c *Controller) onDelete(gen uint64, sa *ChildSA) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || gen != c.gen {
		return
	}
	ch := c.pairChildLocked(sa, false)
	if ch == nil {
		return
	}
	name := ch.tunnel
	switch {
	case ch.held == sa:
		// The peer deleted the pair it made (it lost a rekey
		// collision, RFC 7296 section 2.8.1): it never sent with it.
		ch.held = nil
		c.dp.Retire(name, sa)
	case ch.cur == sa && ch.held != nil:
		next := ch.held
		ch.held = nil
		if err := c.dp.Promote(name, next); err != nil {
			c.log.Error("IKE child SA: outbound switch failed", "child", name, "err", err)
			c.downLocked(ch, sa)
			return
		}
		ch.cur, ch.since, ch.expiring = next, time.Now(), nil
		c.log.Info("IKE child SA sends on the pair the peer's rekey made", "child", name,
			"in_spi", ESPSPI(next.InSPI), "out_spi", ESPSPI(next.OutSPI))
		c.dp.Retire(name, sa)
	case ch.cur == sa:
		c.downLocked(ch, sa)
	default:
		c.dp.Retire(name, sa)
	}
}

// downLocked takes ch's tunnel down: its last pair, sa, went. A road
// warrior's instance goes with it. c.mu is held.
func (c *Controller) downLocked(ch *ctlChild, sa *ChildSA) {
	ch.cur, ch.held, ch.expiring = nil, nil, nil
	if ch.parent != nil {
		delete(ch.parent.insts, ch.tunnel)
	}
	c.dp.Down(ch.tunnel, sa, ch.pol.Start == StartTrap && ch.parent == nil)
	c.log.Info("IKE child SA deleted; tunnel down", "child", ch.tunnel, "out_spi", ESPSPI(sa.OutSPI))
}

// espSent is the Endpoint's ESPSent: the packets sent on sa's outbound
// SA while it is its tunnel's.
func (c *Controller) espSent(sa *ChildSA) uint64 {
	c.mu.Lock()
	ch := c.pairChildLocked(sa, false)
	var name string
	if ch != nil {
		name = ch.tunnel
	}
	c.mu.Unlock()
	if ch == nil {
		return 0
	}
	return c.dp.Traffic(name, sa).PacketsOut
}

// loop initiates trap children on their packets, and checks the current
// pairs' limits every CheckInterval.
func (c *Controller) loop() {
	defer c.wg.Done()
	tick := time.NewTicker(c.cfg.CheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case name := <-c.trap:
			c.mu.Lock()
			if ch := c.children[name]; ch != nil && ch.cur == nil && !ch.terminated &&
				ch.pol.Start == StartTrap && time.Since(ch.lastTry) > c.cfg.TrapHoldDown {
				c.initiateLocked(ch)
			}
			c.mu.Unlock()
		case <-tick.C:
			c.retry()
			c.checkLimits()
		}
	}
}

// retry initiates again the children whose retry is due.
func (c *Controller) retry() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for _, ch := range c.children {
		if ch.retryAt.IsZero() || now.Before(ch.retryAt) {
			continue
		}
		ch.retryAt = time.Time{}
		if ch.cur == nil && !ch.busy && !ch.terminated {
			c.initiateLocked(ch)
		}
	}
}

// checkLimits rekeys each pair near its sequence-number limit or past
// its child's rekey_bytes or rekey_packets, and deletes each one past its
// life_bytes or life_packets; the Endpoint's own schedule rekeys on the
// times.
func (c *Controller) checkLimits() {
	type due struct {
		ch  *ctlChild
		sa  *ChildSA
		pol ChildPolicy
	}
	c.mu.Lock()
	if c.closed || c.ep == nil {
		c.mu.Unlock()
		return
	}
	ep := c.ep
	var cur []due
	for _, ch := range c.children {
		for _, in := range ch.instances() {
			if in.cur != nil && in.expiring != in.cur {
				cur = append(cur, due{in, in.cur, in.pol})
			}
		}
	}
	c.mu.Unlock()
	for _, d := range cur {
		name := d.ch.tunnel
		t := c.dp.Traffic(name, d.sa)
		pkts, bytes := max(t.PacketsIn, t.PacketsOut), max(t.BytesIn, t.BytesOut)
		switch {
		case (d.pol.LifePackets > 0 && pkts >= d.pol.LifePackets) || (d.pol.LifeBytes > 0 && bytes >= d.pol.LifeBytes):
			c.expire(ep, d.ch, d.sa, pkts, bytes)
		case t.SeqLimit || (d.pol.RekeyPackets > 0 && pkts >= d.pol.RekeyPackets) || (d.pol.RekeyBytes > 0 && bytes >= d.pol.RekeyBytes):
			// A rekey already under way makes it do nothing.
			if err := ep.RequestRekey(d.sa); err != nil {
				c.log.Debug("IKE rekey at the SA's limit not requested", "child", name, "err", err)
			}
		}
	}
}

// childDeleter is an Endpoint that deletes one Child SA and keeps its IKE
// SA.
type childDeleter interface {
	DeleteChild(ctx context.Context, child *ChildSA) error
}

// expire deletes sa, past its life limit, in a goroutine of its own: by
// itself where the Endpoint can delete one Child SA (childDeleter), else
// with its IKE SA; then the peer's other children that had a pair, gone
// with that IKE SA, are negotiated again (not sa's child, unless it comes
// with them in IKE_AUTH).
func (c *Controller) expire(ep *Endpoint, ch *ctlChild, sa *ChildSA, pkts, bytes uint64) {
	c.mu.Lock()
	name := ch.tunnel
	if ch.cur != sa || c.closed {
		c.mu.Unlock()
		return
	}
	ch.expiring = sa
	var others []string
	for n, o := range c.children {
		// A road warrior's children are its own to negotiate again.
		if o != ch && ch.parent == nil && o.pol.Peer == ch.pol.Peer && o.cur != nil {
			others = append(others, n)
		}
	}
	c.mu.Unlock()
	c.log.Info("IKE child SA reached its life limit; deleting it", "child", name, "in_spi", ESPSPI(sa.InSPI),
		"packets", pkts, "bytes", bytes)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.InitiateTimeout)
		defer cancel()
		d, one := any(ep).(childDeleter)
		var err error
		if one {
			err = d.DeleteChild(ctx, sa)
		} else {
			err = ep.Delete(ctx, sa)
		}
		if err != nil {
			c.log.Warn("IKE child SA at its life limit not deleted", "child", name, "err", err)
		}
		if !one && len(others) > 0 {
			c.Start(func(st ChildStatus) bool {
				return slices.Contains(others, st.Child) && st.Pair == nil && !st.Terminated
			})
		}
	}()
}
