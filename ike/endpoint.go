package ike

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/internal/lograte"
)

// Transport sends IKE datagrams. Send sends pkt (the UDP payload; on the
// NAT-T port it already begins with the non-ESP marker, unless it is a
// NAT-keepalive, the one byte 0xFF) from local to remote. It must not
// keep pkt after it returns. It is called without the Endpoint's lock
// (it may call back into the Endpoint), one datagram after another in
// the order the Endpoint made them, but from whichever goroutine released
// the lock: it must be safe for concurrent use.
type Transport interface {
	Send(local, remote netip.AddrPort, pkt []byte) error
}

// nonESPMarker precedes IKE messages on the NAT-T port (RFC 3948 section
// 2.2).
var nonESPMarker = []byte{0, 0, 0, 0}

// Endpoint runs IKE SAs for a set of peers over one Transport: it answers
// as responder whatever arrives through Receive and initiates with
// Initiate. Its methods are safe for concurrent use; one mutex guards all
// SA state, and callbacks run without it.
type Endpoint struct {
	cfg Config
	tr  Transport

	mu         sync.Mutex
	sas        map[uint64]*ikeSA      // by our SPI
	halfOpen   map[halfOpenKey]*ikeSA // responder SAs before IKE_AUTH, by the initiator's
	halfOpenBy map[netip.Addr]int     // how many of them each initiator (halfOpenSource) holds (BlockThreshold)
	children   map[uint32]*childEntry // established Child SAs, by our inbound SPI
	restarting map[string]bool        // peers that DPDAction restart initiates to
	cookies    cookieSecrets          // section 2.6
	propWarn   lograte.Bucket         // IKE_SA_INIT's NO_PROPOSAL_CHOSEN WARN (task_ikeinit.go)
	stats      Stats
	stopping   bool // Close has begun: start no goroutines
	closed     bool
	tap        func(pkt []byte) // tests: sees each received datagram (export_test.go)
	snapDirty  []*ikeSA         // IKE SAs whose state OnSnapshot has yet to see (snapshot.go)
	outbox     []datagram       // what sendLocked queued; unlock sends it without the lock

	authLog lograte.Bucket // the rate of refused authentications' log lines (authlog.go)

	jobs   chan struct{} // one token per computation off the lock (job.go)
	jobSeq uint64        // numbers the jobs

	queue     chan datagram // Deliver's hand-off to the goroutine in run
	queueFull atomic.Uint64
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

type datagram struct {
	local, remote netip.AddrPort
	pkt           []byte
}

type halfOpenKey struct {
	remote netip.AddrPort
	spii   uint64
}

// NewEndpoint returns an Endpoint for cfg that sends through tr. Feed it
// received datagrams with Receive.
func NewEndpoint(cfg Config, tr Transport) (*Endpoint, error) {
	if tr == nil {
		return nil, errors.New("ike: NewEndpoint needs a Transport")
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	e := &Endpoint{cfg: cfg, tr: tr,
		propWarn: lograte.Bucket{Burst: propWarnBurst, Every: propWarnEvery},
		authLog:  lograte.Bucket{Burst: authLogBurst, Every: authLogEvery},
		sas:      map[uint64]*ikeSA{}, halfOpen: map[halfOpenKey]*ikeSA{}, halfOpenBy: map[netip.Addr]int{},
		children: map[uint32]*childEntry{}, restarting: map[string]bool{},
		queue: make(chan datagram, cfg.QueueLen), done: make(chan struct{}), jobs: make(chan struct{}, cfg.MaxCryptoJobs)}
	if _, err := rand.Read(e.cookies.cur[:]); err != nil {
		return nil, fmt.Errorf("ike: %w", err)
	}
	e.cookies.since = cfg.clock.Now()
	e.wg.Add(1)
	go e.run()
	return e, nil
}

// run handles what Deliver queued, until Close.
func (e *Endpoint) run() {
	defer e.wg.Done()
	for {
		select {
		case d := <-e.queue:
			e.Receive(d.local, d.remote, d.pkt)
		case <-e.done:
			return
		}
	}
}

// Deliver is Receive for callers on a data path, such as pktio/udp's
// Control hook: it copies pkt into a bounded queue and returns at once;
// the endpoint's own goroutine processes it. When the queue is full the
// datagram is dropped and counted (Stats.RxQueueFull), and Deliver returns
// false. It is safe for concurrent use and does not block.
func (e *Endpoint) Deliver(local, remote netip.AddrPort, pkt []byte) bool {
	select {
	case <-e.done:
		return false
	default:
	}
	select {
	case e.queue <- datagram{local, remote, append([]byte(nil), pkt...)}:
		return true
	default:
		e.queueFull.Add(1)
		return false
	}
}

// Stats returns a copy of the counters.
func (e *Endpoint) Stats() Stats {
	e.mu.Lock()
	defer e.unlock()
	s := e.stats
	s.RxQueueFull = e.queueFull.Load()
	return s
}

// Close stops all timers and the endpoint's goroutine and forgets all SAs
// without telling the peers (use Delete first for that). Initiate calls in
// progress fail; datagrams still queued by Deliver are dropped; a
// signature or Diffie-Hellman computation in progress (a Signer may take
// its time) is not waited for, and its result is dropped. It is
// idempotent. It must not be called from OnChildSA or OnDelete, which may
// run on the goroutine it waits for.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	e.stopping = true
	e.unlock()
	e.closeOnce.Do(func() { close(e.done) })
	e.wg.Wait()
	e.mu.Lock()
	var after []func()
	if !e.closed {
		e.closed = true
		for _, sa := range e.sas {
			after = append(after, e.removeLocked(sa, errors.New("ike: endpoint closed"))...)
		}
	}
	e.unlock()
	run(after)
	return nil
}

func run(fns []func()) {
	for _, f := range fns {
		f()
	}
}

// Receive handles one datagram received on local from remote: pkt is the
// UDP payload (with the non-ESP marker when local's port is the NAT-T
// port). It does not keep pkt. Malformed, unexpected, replayed and
// unauthenticated messages are dropped and counted (Stats).
func (e *Endpoint) Receive(local, remote netip.AddrPort, pkt []byte) {
	e.mu.Lock()
	after := e.receiveLocked(local, remote, pkt)
	e.unlock()
	run(after)
}

func (e *Endpoint) receiveLocked(local, remote netip.AddrPort, pkt []byte) []func() {
	e.stats.RxPackets++
	if e.tap != nil {
		e.tap(pkt)
	}
	if e.closed {
		return nil
	}
	if local.Port() != e.cfg.Port {
		if len(pkt) < 4 || !bytes.Equal(pkt[:4], nonESPMarker) {
			e.stats.RxNoMarker++
			return nil
		}
		pkt = pkt[4:]
	}
	raw := append([]byte(nil), pkt...) // messages are kept (AUTH, retransmission)
	m, err := ParseMessage(raw)
	if err != nil {
		if errors.Is(err, ErrUnsupportedCritical) {
			e.stats.RxUnsupportedCrit++
		} else {
			e.stats.RxMalformed++
		}
		e.cfg.Log.Debug("ike: dropped message", "from", remote, "err", err)
		return nil
	}
	raw = raw[:m.Header.Length]
	h := &m.Header
	if h.SPIi == 0 {
		e.stats.RxMalformed++
		return nil
	}
	if h.Exchange == IKE_SA_INIT && !h.IsResponse() {
		if h.SPIr != 0 || h.MessageID != 0 || !h.IsInitiator() {
			e.stats.RxMalformed++
			return nil
		}
		return e.initRequestLocked(local, remote, raw, m)
	}
	return e.dispatchLocked(local, remote, raw, m)
}

// maxBacklog bounds the messages that wait for an IKE SA's work off the
// lock.
const maxBacklog = 4

// dispatchLocked hands a parsed message of an existing IKE SA to it.
func (e *Endpoint) dispatchLocked(local, remote netip.AddrPort, raw []byte, m *Message) []func() {
	h := &m.Header
	ours := h.SPIr
	if !h.IsInitiator() {
		ours = h.SPIi
	}
	sa := e.sas[ours]
	if sa == nil || (sa.initiator == h.IsInitiator()) {
		e.stats.RxUnknownSPI++
		return nil
	}
	park := false
	if w := sa.waitsFor; w != nil {
		if w.removed {
			sa.waitsFor = nil
		} else {
			sa, park = w, true // until the collision is decided (ikeSA.waitsFor)
		}
	}
	if sa.job != 0 || park {
		// Work off the lock is in flight (job.go): the message waits
		// for it, in order (replayBacklogLocked), or, beyond
		// maxBacklog, is dropped (the peer retransmits).
		if len(sa.backlog) >= maxBacklog {
			e.stats.RxBusy++
			return nil
		}
		sa.backlog = append(sa.backlog, func() []func() { return e.dispatchLocked(local, remote, raw, m) })
		return nil
	}
	sa = e.sas[ours]
	if h.IsResponse() {
		return sa.responseLocked(local, remote, raw, m)
	}
	return sa.requestLocked(local, remote, raw, m)
}

// newSPI returns a random SPI not in use; the caller holds e.mu.
func (e *Endpoint) newSPILocked() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		s := binary.BigEndian.Uint64(b[:])
		if s != 0 && e.sas[s] == nil {
			return s
		}
	}
}

// newChildSPI returns a random ESP SPI of ours not in use (256 and
// up: RFC 4303 section 2.1 reserves the values below).
func (e *Endpoint) newChildSPILocked() uint32 {
	var b [4]byte
	for {
		rand.Read(b[:])
		s := binary.BigEndian.Uint32(b[:])
		if s < 256 {
			continue
		}
		inUse := e.children[s] != nil
		for _, sa := range e.sas {
			if inUse {
				break
			}
			inUse = sa.childSPI == s || (sa.pending != nil && sa.pending.rekey != nil && sa.pending.rekey.spi == s)
		}
		if !inUse {
			return s
		}
	}
}

// sendLocked queues one message (raw, without marker) from local to
// remote; unlock sends it once the lock is released, after OnSnapshot
// has seen the state that the message shows the peer. raw is not
// changed afterwards (messages are kept for retransmissions as they are).
func (e *Endpoint) sendLocked(local, remote netip.AddrPort, raw []byte) {
	e.flushSnapshotsLocked() // a standby knows what the peer may see
	pkt := raw
	if local.Port() != e.cfg.Port {
		pkt = append(append(make([]byte, 0, len(raw)+4), nonESPMarker...), raw...)
	}
	e.stats.TxPackets++
	e.outbox = append(e.outbox, datagram{local, remote, pkt})
}

// removeLocked forgets sa, stops its timers and returns the callbacks to
// run once the lock is released (OnDelete, the initiator's waiter).
func (e *Endpoint) removeLocked(sa *ikeSA, why error) []func() {
	if sa.removed {
		return nil
	}
	sa.removed = true
	sa.changedLocked()
	if e.sas[sa.ourSPI()] == sa {
		delete(e.sas, sa.ourSPI())
	}
	if !sa.initiator {
		e.dropHalfOpenLocked(sa)
	}
	sa.stopTimerLocked()
	stop(sa.halfOpenTimer)
	sa.dropReassemblyLocked(&sa.fragReq)
	sa.dropReassemblyLocked(&sa.fragResp)
	if k := sa.keys; k != nil {
		// The SK payload ciphers keep their own expanded keys; the raw
		// ones go now (the ChildSA's keys belong to whoever got it).
		for _, b := range [][]byte{k.D, k.Ai, k.Ar, k.Ei, k.Er, k.Pi, k.Pr} {
			clear(b)
		}
		sa.keys = nil
	}
	sa.stopLifeTimersLocked()
	sa.releaseLeasesLocked() // task_config.go
	if why == nil {
		why = errors.New("ike: IKE SA deleted")
	}
	after := sa.failQueueLocked(why)
	if sa.pending != nil {
		if r := sa.pending.rekey; r != nil {
			after = append(after, reply(r.waiter, nil, why)...)
		}
		if r := sa.pending.ikeRekey; r != nil {
			after = append(after, reply(r.waiter, nil, why)...)
		}
		after = append(after, reply(sa.pending.waiter, nil, why)...)
	}
	for _, c := range sa.children {
		after = append(after, e.forgetChildLocked(c, why)...)
		if f := e.cfg.OnDelete; f != nil && !sa.released {
			after = append(after, func() { f(c) })
		}
	}
	sa.children = nil
	for _, f := range saGoneHooks {
		f(sa)
	}
	if sa.waiter != nil {
		w := sa.waiter
		sa.waiter = nil
		after = append(after, func() { w <- result{err: why} })
	}
	if len(sa.backlog) > 0 {
		// Messages of an IKE SA that waited for this one (waitsFor)
		// go to theirs; its own find it gone.
		after = append(after, sa.replayLater())
	}
	return after
}

// forgetChildLocked stops a Child SA's timers and forgets its entry. A
// Delete of it held after a rekey (deleteRekeyedLocked) is moot: its
// waiter learns the successor, or why, when the IKE SA goes with both.
func (e *Endpoint) forgetChildLocked(c *ChildSA, why error) []func() {
	ent := e.children[c.InSPI]
	if ent == nil || ent.c != c {
		return nil
	}
	stop(ent.rekeyT)
	stop(ent.expireT)
	stop(ent.holdT)
	delete(e.children, c.InSPI)
	h := ent.held
	ent.held, ent.holdT = nil, nil
	if h == nil {
		return nil
	}
	if why != nil {
		return reply(h.waiter, nil, why)
	}
	return reply(h.waiter, h.next, nil)
}

// cookieSecrets are the secrets cookies are made with (section 2.6): the
// current one, numbered ver, and the one before it, which still verifies
// the cookies it made until the next change.
type cookieSecrets struct {
	cur, prev [32]byte
	ver       uint32
	hasPrev   bool
	since     time.Time // when cur took its place
}

// rotateCookieSecretLocked puts a fresh cookie secret in place once the
// current one has served Config.CookieSecretLifetime; after two
// lifetimes or more the previous one goes too.
func (e *Endpoint) rotateCookieSecretLocked() {
	c, now, life := &e.cookies, e.cfg.clock.Now(), e.cfg.CookieSecretLifetime
	age := now.Sub(c.since)
	if age < life {
		return
	}
	c.prev, c.hasPrev = c.cur, age < 2*life
	c.ver++
	c.since = now
	if _, err := rand.Read(c.cur[:]); err != nil {
		panic("ike: no randomness for the cookie secret: " + err.Error())
	}
}

// cookieLocked computes the cookie of section 2.6 for an initiator with
// the current secret: version | SHA-256(Ni | IPi | SPIi | secret).
func (e *Endpoint) cookieLocked(ni []byte, remote netip.AddrPort, spii uint64) []byte {
	return makeCookie(&e.cookies.cur, e.cookies.ver, ni, remote, spii)
}

// cookieValidLocked reports whether cookie is one made with the current
// secret or, when it names the version before, with the previous one.
func (e *Endpoint) cookieValidLocked(cookie, ni []byte, remote netip.AddrPort, spii uint64) bool {
	if len(cookie) < 4 {
		return false
	}
	c := &e.cookies
	switch binary.BigEndian.Uint32(cookie) {
	case c.ver:
		return subtle.ConstantTimeCompare(cookie, makeCookie(&c.cur, c.ver, ni, remote, spii)) == 1
	case c.ver - 1:
		return c.hasPrev && subtle.ConstantTimeCompare(cookie, makeCookie(&c.prev, c.ver-1, ni, remote, spii)) == 1
	}
	return false
}

func makeCookie(secret *[32]byte, ver uint32, ni []byte, remote netip.AddrPort, spii uint64) []byte {
	h := sha256.New()
	h.Write(ni)
	h.Write(remote.Addr().Unmap().AsSlice())
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], spii)
	h.Write(b[:])
	h.Write(secret[:])
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+sha256.Size), ver)
	return h.Sum(out)
}

// addHalfOpenLocked counts sa, a responder's SA before IKE_AUTH, against
// MaxHalfOpen and its initiator's address's BlockThreshold.
func (e *Endpoint) addHalfOpenLocked(sa *ikeSA) {
	e.halfOpen[sa.hoKey] = sa
	e.halfOpenBy[halfOpenSource(sa.hoKey.remote)]++
}

// halfOpenSource is the initiator a half-open SA counts against for
// BlockThreshold: its IPv4 address, or the /64 of its IPv6 address, all
// of which one host usually holds (counting each IPv6 address alone
// would give it 2^64 times the limit).
func halfOpenSource(remote netip.AddrPort) netip.Addr {
	a := remote.Addr().Unmap()
	if a.Is6() {
		p, _ := a.WithZone("").Prefix(64)
		return p.Addr()
	}
	return a
}

// dropHalfOpenLocked forgets sa as half open, if it is.
func (e *Endpoint) dropHalfOpenLocked(sa *ikeSA) {
	if e.halfOpen[sa.hoKey] != sa {
		return
	}
	delete(e.halfOpen, sa.hoKey)
	a := halfOpenSource(sa.hoKey.remote)
	if e.halfOpenBy[a] <= 1 {
		delete(e.halfOpenBy, a)
	} else {
		e.halfOpenBy[a]--
	}
}

// Initiate negotiates an IKE SA and its Child SA with the configured peer
// named name (its Remote address, port Config.Port) and returns the Child
// SA. It returns when the negotiation completes, fails, runs out of
// retransmissions, or ctx ends (the half-made SA is then forgotten).
func (e *Endpoint) Initiate(ctx context.Context, name string) (*ChildSA, error) {
	e.mu.Lock()
	peer := e.peerLocked(name)
	e.unlock()
	if peer == nil {
		return nil, fmt.Errorf("ike: no peer named %q", name)
	}
	if !peer.Remote.IsValid() {
		return nil, fmt.Errorf("ike: peer %q has no Remote address to initiate to", name)
	}
	// The key pair is made before the lock is taken (job.go).
	dh, err := e.newDH(firstDH(peer.IKE))
	if err != nil {
		return nil, err
	}
	var sa *ikeSA
	r, err := e.call(ctx, func(w chan result) ([]func(), error) {
		if e.peerLocked(name) != peer {
			return nil, fmt.Errorf("ike: peer %q was reconfigured", name)
		}
		if len(e.sas) >= e.cfg.MaxSAs {
			return nil, errors.New("ike: too many IKE SAs")
		}
		var after []func()
		sa, after = e.newInitiatorLocked(peer, dh, w)
		return after, nil
	}, func(err error) []func() { return e.removeLocked(sa, err) })
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, fmt.Errorf("ike: initiating to %s: %w", name, err)
	}
	return r.child, err
}

// call is the one shape of the Endpoint's requests that wait for their
// outcome (Initiate, Delete, Rekey, RekeyIKE, InitiateChild): start runs
// with the lock held and starts the work (sends a request, or queues it
// for the IKE SA's window) that tells w its outcome, or returns an error
// at once; call then waits for w or for ctx. When ctx ends first, abandon
// (if not nil) runs with the lock held, with ctx's error, and call
// returns that error.
func (e *Endpoint) call(ctx context.Context, start func(w chan result) ([]func(), error), abandon func(err error) []func()) (result, error) {
	w := make(chan result, 1)
	e.mu.Lock()
	if e.closed {
		e.unlock()
		return result{}, errors.New("ike: endpoint closed")
	}
	after, err := start(w)
	e.unlock()
	if err != nil {
		return result{}, err
	}
	run(after)
	select {
	case r := <-w:
		return r, r.err
	case <-ctx.Done():
		if abandon != nil {
			e.mu.Lock()
			after := abandon(ctx.Err())
			e.unlock()
			run(after)
		}
		return result{}, ctx.Err()
	}
}

// Delete deletes the IKE SA that carries child (the one that made it, or
// the one a rekey moved it to), and with it its Child SAs, telling the
// peer with an INFORMATIONAL exchange (section 1.4.1); when another
// request of the IKE SA is outstanding, it waits for it first. It waits
// for the peer's answer (retransmitting) or ctx; the SA is gone either way
// when it returns.
func (e *Endpoint) Delete(ctx context.Context, child *ChildSA) error {
	var sa *ikeSA
	_, err := e.call(ctx, func(w chan result) ([]func(), error) {
		if sa = e.ikeSAOfLocked(child); sa == nil || !sa.up() {
			return nil, errors.New("ike: no such IKE SA")
		}
		return sa.enqueueLocked(op{
			run: func(sa *ikeSA) []func() {
				if sa.waiter != nil {
					return reply(w, nil, errors.New("ike: the IKE SA is being deleted"))
				}
				sa.state = stateDeleting
				sa.waiter = w
				if err := sa.startLocked(&request{exch: INFORMATIONAL}, deleteIKEOurs{}); err != nil {
					sa.waiter = nil
					return reply(w, nil, err)
				}
				return nil
			},
			fail: func(err error) []func() { return reply(w, nil, err) },
		}), nil
	}, func(err error) []func() { return e.removeLocked(sa, err) })
	if errors.Is(err, errDeleted) {
		return nil
	}
	return err
}

var errDeleted = errors.New("ike: IKE SA deleted")

type result struct {
	child *ChildSA
	err   error
}

// timer helpers ----------------------------------------------------------

// armLocked (re)starts the retransmission timer of sa's outstanding
// request (section 2.1): the n-th retransmission waits base * 2^n.
func (sa *ikeSA) armLocked() {
	sa.stopTimerLocked()
	d := sa.ep.cfg.RetransmitTimeout << sa.pending.tries
	id, gen := sa.pending.id, sa.timerGen
	sa.timer = sa.ep.cfg.clock.AfterFunc(d, func() { sa.ep.retransmit(sa, id, gen) })
}

func (sa *ikeSA) stopTimerLocked() {
	sa.timerGen++
	if sa.timer != nil {
		sa.timer.Stop()
		sa.timer = nil
	}
}

func (e *Endpoint) retransmit(sa *ikeSA, id uint32, gen uint64) {
	e.mu.Lock()
	var after []func()
	switch {
	case sa.removed || sa.pending == nil || sa.pending.id != id || sa.timerGen != gen:
	case sa.pending.tries >= e.cfg.RetransmitTries:
		e.stats.Timeouts++
		e.stats.Deleted++
		err := fmt.Errorf("ike: no answer from %v after %d retransmissions", sa.remote, sa.pending.tries)
		dead := sa.up()
		var children []string
		if dead {
			children = sa.additionalChildren()
		}
		if !dead {
			// An established SA's end is peerDeadLocked's line.
			e.cfg.Log.Warn("ike: request not answered; giving up", sa.logAttrs("exchange", sa.pending.exch.String(), "msgid", id, "tries", sa.pending.tries)...)
		}
		after = e.removeLocked(sa, err)
		if dead {
			after = append(after, e.peerDeadLocked(sa, children, err)...)
		}
	default:
		sa.pending.tries++
		e.stats.TxRetransmits++
		e.cfg.Log.Debug("ike: retransmitting", sa.logAttrs("exchange", sa.pending.exch.String(), "msgid", id, "try", sa.pending.tries)...)
		e.sendAllLocked(sa.local, sa.remote, sa.pending.pkts)
		sa.sentLocked(sa.local, sa.remote)
		sa.armLocked()
	}
	e.unlock()
	run(after)
}

// peerLocked returns the configured peer named name, or nil.
func (e *Endpoint) peerLocked(name string) *Peer {
	var peer *Peer
	for _, p := range e.cfg.Peers {
		if p.Name == name {
			peer = p
		}
	}
	return peer
}

// SetPeers replaces the configured peers (Config.Peers) with peers,
// checked as NewEndpoint checks them, so that a configuration reload
// changes only what changed. Peers are told apart by pointer:
//
//   - a *Peer in both the old and the new set keeps its IKE and Child
//     SAs untouched;
//   - the IKE SAs of a *Peer no longer in the set are deleted: an
//     established one with an INFORMATIONAL Delete (the peer is told,
//     once the SA's window is free; OnDelete reports its Child SAs when
//     the peer answered or the retransmissions ran out), one still being
//     negotiated at once (Initiate fails); a DPDAction restart to it
//     stops;
//   - a new *Peer is configured only: responders accept it at once, and
//     the caller initiates to it (Initiate, InitiateChild) as its start
//     action says.
//
// A changed peer is a new *Peer (in place of the old one of the same
// name): its old SAs go as above, and the caller initiates again. One
// change keeps them: a new *Peer that differs from the old one of its name
// only in its pre-shared key (a key rotation) takes over the old one's
// SAs, which carry on; the new key authenticates the next IKE SA made with
// the peer, as strongSwan's reloaded secrets do; so does one that differs
// only in its revocation lists (RotatesCRLs). SetPeers does not wait for
// the network.
func (e *Endpoint) SetPeers(peers []*Peer) error {
	e.mu.Lock()
	if e.closed {
		e.unlock()
		return errors.New("ike: endpoint closed")
	}
	c := e.cfg
	c.Peers = slices.Clone(peers)
	if err := c.defaults(); err != nil {
		e.unlock()
		return err
	}
	e.cfg.Peers = c.Peers
	var after []func()
	for _, sa := range e.sas {
		if !sa.removed && !slices.Contains(c.Peers, sa.peer) {
			if np := pskRotated(c.Peers, sa.peer); np != nil {
				sa.peer = np
				continue
			}
			after = append(after, e.retireLocked(sa)...)
		}
	}
	e.unlock()
	run(after)
	return nil
}

var errPeerRemoved = errors.New("ike: peer removed from the configuration")

// pskRotated returns the peer in peers that old's SAs carry on with: one of
// old's name that differs from it only in its pre-shared key
// (Peer.RotatesPSK) or only in its revocation lists (Peer.RotatesCRLs,
// crl.go). Nil when there is none.
func pskRotated(peers []*Peer, old *Peer) *Peer {
	for _, p := range peers {
		if p.RotatesPSK(old) || p.RotatesCRLs(old) {
			return p
		}
	}
	return nil
}

// RotatesPSK reports whether p is old with a different pre-shared key and
// nothing else changed, both authenticating with a key (no Signer, no RemoteCAs):
// SetPeers keeps old's SAs for p.
func (p *Peer) RotatesPSK(old *Peer) bool {
	if p.Name != old.Name || p.Signer != nil || old.Signer != nil || len(p.RemoteCAs) > 0 || len(old.RemoteCAs) > 0 ||
		len(p.PSK) == 0 || len(old.PSK) == 0 || bytes.Equal(p.PSK, old.PSK) {
		return false
	}
	a, b := *old, *p
	a.PSK, b.PSK = nil, nil
	return reflect.DeepEqual(a, b)
}

// retireLocked deletes sa, whose peer left the configuration: an
// established IKE SA with a Delete the peer answers (or the
// retransmissions run out), any other at once.
func (e *Endpoint) retireLocked(sa *ikeSA) []func() {
	if !sa.up() {
		if sa.state == stateDeleting || sa.rekeyed {
			return nil // going already
		}
		e.stats.Deleted++
		return e.removeLocked(sa, errPeerRemoved)
	}
	e.cfg.Log.Info("ike: peer removed from the configuration; deleting its IKE SA", sa.logAttrs()...)
	return sa.enqueueLocked(op{
		run: func(sa *ikeSA) []func() {
			if sa.state != stateEstablished {
				return nil
			}
			sa.state = stateDeleting
			if err := sa.startLocked(&request{exch: INFORMATIONAL}, deleteIKEOurs{}); err != nil {
				e.stats.Deleted++
				return e.removeLocked(sa, err)
			}
			return nil
		},
		fail: func(err error) []func() {
			if sa.removed {
				return nil
			}
			e.stats.Deleted++
			return e.removeLocked(sa, err)
		},
	})
}
