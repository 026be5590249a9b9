package ike

// What an established IKE SA does on its own (RFC 7296 sections 1.4, 2.4,
// 2.8): requests wait their turn for the window in a short queue; Child
// SAs and the IKE SA are rekeyed at their Lifetime's rekey time minus a
// random jitter and deleted at its life time; a peer not heard from for
// Peer.DPDDelay is sent an empty INFORMATIONAL, and a peer that does not
// answer a request within the retransmission schedule is dead: its SAs go
// (OnDelete), OnPeerDead is told, and Peer.DPDAction may initiate again.
//
//	timer fires ──> op queued on the IKE SA ──> window free? ──> request out
//	                                                ^                 │
//	                                                └── response ─────┘

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"sort"
	"time"
)

// maxQueued bounds the requests waiting for one IKE SA's window.
const maxQueued = 8

// op is a request waiting for an IKE SA's window: run sends it (with
// Endpoint.mu held, on whichever IKE SA then carries the work: an IKE SA
// rekey moves the queue to the new one); fail tells its waiter it will
// never run.
type op struct {
	run  func(sa *ikeSA) []func()
	fail func(err error) []func()
}

// childEntry is the Endpoint's record of an established Child SA: which
// IKE SA carries it now, where its ESP goes, its lifetime timers and its
// rekey state.
type childEntry struct {
	c  *ChildSA
	sa *ikeSA
	// local and remote are the outer addresses its ESP goes between
	// now: c's own until a move (MOBIKE, a NAT followed) reported other
	// ones (childaddr.go). c keeps those it was made with.
	local, remote   netip.AddrPort
	rekeyT, expireT stopper
	// rekeyAt and expireAt are when rekeyT and expireT fire (zero:
	// never), for snapshots.
	rekeyAt, expireAt time.Time
	rekeying          bool        // a rekey of ours is queued or in flight
	ours              *rekeyState // our CREATE_CHILD_SA for it, while outstanding
	peer              *collision  // the peer's rekey of it that we answered meanwhile
	replaced          bool        // a rekey made its successor
	deleting          bool        // our Delete of it is out or held
	// held is our Delete of it after a rekey, waiting out
	// Config.RekeyDeleteDelay on holdT.
	held  *heldDelete
	holdT stopper
}

// heldDelete is the Delete of a Child SA made redundant by a rekey, held
// for Config.RekeyDeleteDelay: next is the Child SA that replaced it,
// waiter the Rekey caller that learns next once the Delete is done.
type heldDelete struct {
	next   *ChildSA
	waiter chan result
}

// collision is a rekey by the peer that we answered while one of ours of
// the same SA was outstanding (section 2.8.1): the exchange with the
// lowest of the four nonces made the redundant SA.
type collision struct {
	ni, nr []byte
	child  *ChildSA // the Child SA that the peer's exchange made
	ike    *ikeSA   // or the IKE SA
}

// lowestIsOurs reports whether the lowest of the four nonces of two
// colliding exchanges is one of ours (then our new SA is redundant).
func lowestIsOurs(ourNi, ourNr, peerNi, peerNr []byte) bool {
	low := func(a, b []byte) []byte {
		if bytes.Compare(a, b) <= 0 {
			return a
		}
		return b
	}
	return bytes.Compare(low(ourNi, ourNr), low(peerNi, peerNr)) < 0
}

// times resolves a Lifetime's defaults: rekey (0: never), the hard
// expiry and the jitter bound.
func (l Lifetime) times() (rekey, life, jitter time.Duration) {
	if l.RekeyTime <= 0 {
		return 0, 0, 0
	}
	rekey, life, jitter = l.RekeyTime, l.LifeTime, l.RandTime
	if life == 0 {
		life = rekey + rekey/10
	}
	life = max(life, rekey)
	if jitter == 0 {
		jitter = life - rekey
	}
	return rekey, life, min(jitter, rekey)
}

// randDuration returns a uniformly random duration in [0, d).
func randDuration(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	var b [8]byte
	rand.Read(b[:])
	return time.Duration(binary.BigEndian.Uint64(b[:]) % uint64(d))
}

// enqueueLocked runs o on sa at once when its window is free, else
// queues it; a full queue fails o (counted), and so does an IKE SA that is
// gone (its queue would never run).
func (sa *ikeSA) enqueueLocked(o op) []func() {
	if sa.removed {
		return o.fail(errDeleted)
	}
	if sa.windowFree() {
		return o.run(sa)
	}
	if len(sa.queue) >= maxQueued {
		sa.ep.stats.RequestQueueFull++
		return o.fail(errors.New("ike: too many requests waiting on the IKE SA"))
	}
	sa.queue = append(sa.queue, o)
	return nil
}

// idleLocked runs queued requests while sa's window is free.
func (sa *ikeSA) idleLocked() []func() {
	var after []func()
	for sa.up() && sa.pending == nil && sa.job == 0 && len(sa.queue) > 0 {
		o := sa.queue[0]
		sa.queue = sa.queue[1:]
		after = append(after, o.run(sa)...)
	}
	return after
}

// failQueueLocked fails every queued request of sa.
func (sa *ikeSA) failQueueLocked(err error) []func() {
	var after []func()
	for _, o := range sa.queue {
		after = append(after, o.fail(err)...)
	}
	sa.queue = nil
	return after
}

func reply(w chan result, c *ChildSA, err error) []func() {
	if w == nil {
		return nil
	}
	return []func(){func() { w <- result{child: c, err: err} }}
}

// startTimersLocked starts an established IKE SA's lifetime and liveness
// timers, and its NAT-keepalives (keepalive.go).
func (sa *ikeSA) startTimersLocked() {
	now := sa.ep.cfg.clock.Now()
	sa.established = now
	var rekeyAt, expireAt time.Time
	if rekey, life, jitter := sa.peer.IKELifetime.times(); rekey > 0 {
		rekeyAt, expireAt = now.Add(rekey-randDuration(jitter)), now.Add(life)
	}
	sa.startTimersAtLocked(rekeyAt, expireAt)
}

// startTimersAtLocked starts sa's timers with its rekey and expiry at
// the times given (zero: none), as startTimersLocked or Adopt chose
// them.
func (sa *ikeSA) startTimersAtLocked(rekeyAt, expireAt time.Time) {
	e := sa.ep
	now := e.cfg.clock.Now()
	sa.lastHeard = now
	sa.rekeyAt, sa.expireAt = rekeyAt, expireAt
	if !rekeyAt.IsZero() {
		sa.rekeyT = e.cfg.clock.AfterFunc(max(rekeyAt.Sub(now), 0), func() { e.ikeRekeyDue(sa) })
	}
	if !expireAt.IsZero() {
		sa.expireT = e.cfg.clock.AfterFunc(max(expireAt.Sub(now), 0), func() { e.ikeExpired(sa) })
	}
	if d := sa.peer.DPDDelay; d > 0 {
		sa.dpdT = e.cfg.clock.AfterFunc(d, func() { e.dpdDue(sa) })
	}
	sa.startKeepAliveLocked()
	sa.startReauthLocked() // reauth.go
}

func (sa *ikeSA) stopLifeTimersLocked() {
	stop(sa.rekeyT)
	stop(sa.expireT)
	stop(sa.dpdT)
	sa.rekeyT, sa.expireT, sa.dpdT = nil, nil, nil
	sa.stopKeepAliveLocked()
	sa.stopReauthLocked() // reauth.go
}

// scheduleChildLocked starts the lifetime timers of a new Child SA.
func (e *Endpoint) scheduleChildLocked(ent *childEntry) {
	rekey, life, jitter := ent.sa.confOf(ent.c).life.times()
	if rekey == 0 {
		return
	}
	now := e.cfg.clock.Now()
	e.scheduleChildAtLocked(ent, now.Add(rekey-randDuration(jitter)), now.Add(life))
}

// scheduleChildAtLocked starts ent's lifetime timers with its rekey and
// expiry at the times given (zero: none).
func (e *Endpoint) scheduleChildAtLocked(ent *childEntry, rekeyAt, expireAt time.Time) {
	now := e.cfg.clock.Now()
	spi := ent.c.InSPI
	ent.rekeyAt, ent.expireAt = rekeyAt, expireAt
	if !rekeyAt.IsZero() {
		ent.rekeyT = e.cfg.clock.AfterFunc(max(rekeyAt.Sub(now), 0), func() { e.childRekeyDue(spi, ent) })
	}
	if !expireAt.IsZero() {
		ent.expireT = e.cfg.clock.AfterFunc(max(expireAt.Sub(now), 0), func() { e.childExpired(spi, ent) })
	}
}

// childRekeyDue starts the rekey of a Child SA whose rekey time came.
func (e *Endpoint) childRekeyDue(spi uint32, ent *childEntry) {
	e.mu.Lock()
	var after []func()
	if e.children[spi] == ent && !e.closed {
		e.cfg.Log.Info("ike: Child SA rekey time", ent.sa.logAttrs("child", ent.c.Child, "in_spi", ESPSPI(spi))...)
		after = e.rekeyChildLocked(ent, nil)
	}
	e.unlock()
	run(after)
}

// childExpired deletes a Child SA that reached its life time unrekeyed.
func (e *Endpoint) childExpired(spi uint32, ent *childEntry) {
	e.mu.Lock()
	var after []func()
	if e.children[spi] == ent && !e.closed {
		sa := ent.sa
		e.stats.ChildSAExpired++
		e.cfg.Log.Info("ike: Child SA expired; deleting it", sa.logAttrs("in_spi", ESPSPI(spi))...)
		after = sa.dropChildLocked(ent.c)
		after = append(after, sa.enqueueLocked(op{
			run: func(sa *ikeSA) []func() {
				sa.requestOutLocked(INFORMATIONAL, []Payload{&Delete{Protocol: ProtoESP, SPIs: []uint32{spi}}})
				return nil
			},
			fail: func(error) []func() { return nil },
		})...)
	}
	e.unlock()
	run(after)
}

// rekeyChildLocked queues a rekey of ent's Child SA; w, if set, learns the
// new Child SA once the old one is deleted.
func (e *Endpoint) rekeyChildLocked(ent *childEntry, w chan result) []func() {
	if ent.rekeying || ent.replaced || ent.deleting {
		if w != nil {
			return reply(w, nil, errors.New("ike: the Child SA is being rekeyed or deleted"))
		}
		return nil
	}
	ent.rekeying = true
	gone := func(err error) []func() {
		ent.rekeying = false
		return reply(w, nil, err)
	}
	return ent.sa.enqueueLocked(op{
		run: func(sa *ikeSA) []func() {
			if e.children[ent.c.InSPI] != ent || ent.replaced || ent.deleting {
				return gone(errors.New("ike: no such Child SA"))
			}
			if len(sa.children) >= 2*e.cfg.MaxChildSAs {
				return gone(errors.New("ike: too many Child SAs on the IKE SA"))
			}
			conf := sa.confOf(ent.c)
			r := &rekeyState{old: ent.c, conf: conf, spi: e.newChildSPILocked(), ni: randomNonce(), tsi: ent.c.LocalTS, tsr: ent.c.RemoteTS, waiter: w}
			if g := firstDH(conf.esp); g != 0 {
				dh, err := NewDH(g)
				if err != nil {
					return gone(err)
				}
				r.dh = dh
			}
			if err := sa.sendRekeyLocked(r); err != nil {
				return gone(err)
			}
			ent.ours = r
			return nil
		},
		fail: gone,
	})
}

// RequestRekey asks for child to be rekeyed now, make-before-break,
// without waiting: the new Child SA is reported through OnChildSA and the
// old one through OnDelete once it is gone. It is meant for the data
// plane, for an SA close to its sequence-number or byte limit. It returns
// an error if child is not established here; a rekey already under way
// makes it do nothing. It does not block and is safe for concurrent use.
func (e *Endpoint) RequestRekey(child *ChildSA) error {
	e.mu.Lock()
	ent := e.children[child.InSPI]
	if ent == nil || ent.c != child || e.closed {
		e.unlock()
		return errors.New("ike: no such Child SA")
	}
	after := e.rekeyChildLocked(ent, nil)
	e.unlock()
	run(after)
	return nil
}

// ikeSAOfLocked finds the IKE SA that carries child now (an IKE SA rekey
// moves Child SAs) or, failing that, the one that made it.
func (e *Endpoint) ikeSAOfLocked(child *ChildSA) *ikeSA {
	if ent := e.children[child.InSPI]; ent != nil && ent.c == child {
		return ent.sa
	}
	spi := child.IKESPIr
	if child.Initiator {
		spi = child.IKESPIi
	}
	return e.sas[spi]
}

// ikeRekeyDue starts the rekey of an IKE SA whose rekey time came.
func (e *Endpoint) ikeRekeyDue(sa *ikeSA) {
	e.mu.Lock()
	var after []func()
	if !sa.removed && !sa.rekeyed && !e.closed {
		after = e.rekeyIKELocked(sa, nil)
	}
	e.unlock()
	run(after)
}

// ikeExpired deletes an IKE SA that reached its life time unrekeyed.
func (e *Endpoint) ikeExpired(sa *ikeSA) {
	e.mu.Lock()
	var after []func()
	if !sa.removed && !e.closed {
		e.stats.IKESAExpired++
		e.stats.Deleted++
		e.cfg.Log.Info("ike: IKE SA expired", sa.logAttrs()...)
		sa.deleteBestEffortLocked()
		after = e.removeLocked(sa, errors.New("ike: IKE SA expired"))
	}
	e.unlock()
	run(after)
}

// dpdDue runs when an IKE SA may not have heard from its peer for
// DPDDelay: it sends an empty INFORMATIONAL if so and nothing else is
// outstanding (an outstanding request checks the peer already), and
// re-arms.
func (e *Endpoint) dpdDue(sa *ikeSA) {
	e.mu.Lock()
	defer e.unlock()
	if sa.removed || sa.rekeyed || e.closed {
		return
	}
	d := sa.peer.DPDDelay
	idle := e.cfg.clock.Now().Sub(sa.lastHeard)
	next := d
	if idle < d {
		next = d - idle
	} else if sa.windowFree() {
		if err := sa.requestOutLocked(INFORMATIONAL, nil); err == nil {
			e.cfg.Log.Debug("ike: DPD: liveness check", sa.logAttrs("idle", idle)...)
			e.stats.LivenessChecks++
		}
	}
	sa.dpdT = e.cfg.clock.AfterFunc(next, func() { e.dpdDue(sa) })
}

// peerDeadLocked handles an established IKE SA whose peer stopped
// answering: OnPeerDead and, by the peer's DPDAction, a restart, which
// makes the IKE SA with IKE_AUTH's Child SA and then the additional Child
// SAs the dead one carried (children, additionalChildren). The caller
// removes the SA.
func (e *Endpoint) peerDeadLocked(sa *ikeSA, children []string, err error) []func() {
	e.stats.PeersDead++
	e.cfg.Log.Warn("ike: peer is dead", sa.logAttrs("dpd_action", sa.peer.DPDAction, "err", err)...)
	var after []func()
	if f := e.cfg.OnPeerDead; f != nil {
		name := sa.peer.Name
		after = append(after, func() { f(name, err) })
	}
	if sa.peer.DPDAction == ActionRestart {
		e.restartLocked(sa.peer, children)
	}
	return after
}

// additionalChildren names the children of sa's Child SAs other than
// IKE_AUTH's (Peer.Children), each once, oldest first.
func (sa *ikeSA) additionalChildren() []string {
	var out []string
	for _, c := range sa.children {
		if c.Child != sa.peer.ChildName && !slices.Contains(out, c.Child) {
			out = append(out, c.Child)
		}
	}
	return out
}

// restartLocked starts initiating to peer again in the background, once
// per peer at a time; children are the additional children to make on
// the new IKE SA.
func (e *Endpoint) restartLocked(peer *Peer, children []string) {
	if e.stopping || e.restarting[peer.Name] {
		return
	}
	e.restarting[peer.Name] = true
	e.wg.Add(1)
	go e.restart(peer, children)
}

// restart initiates to peer until it succeeds or the Endpoint closes,
// waiting RetransmitTimeout after the first failure and doubling up to
// maxRestartWait, then makes children's Child SAs on the new IKE SA
// (CREATE_CHILD_SA, one at a time; one the peer refuses is counted in
// Stats.RestartChildFailed and left out).
func (e *Endpoint) restart(peer *Peer, children []string) {
	defer e.wg.Done()
	defer func() {
		e.mu.Lock()
		delete(e.restarting, peer.Name)
		e.unlock()
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-e.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	wait := e.cfg.RetransmitTimeout
	for {
		e.mu.Lock()
		if e.peerLocked(peer.Name) != peer {
			e.unlock()
			return // SetPeers took it out
		}
		e.stats.Restarts++
		e.unlock()
		_, err := e.Initiate(ctx, peer.Name)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			e.remakeChildren(ctx, peer.Name, children, "restart")
			return
		}
		e.cfg.Log.Warn("ike: restart failed", "peer", peer.Name, "err", err, "retry_in", wait)
		tick := make(chan struct{})
		t := e.cfg.clock.AfterFunc(wait, func() { close(tick) })
		select {
		case <-tick:
		case <-ctx.Done():
			t.Stop()
			return
		}
		wait = min(2*wait, maxRestartWait)
	}
}

// remakeChildren makes the additional Child SAs children again on peer's
// newest IKE SA (after a restart or a reauthentication, named by why),
// one after the other; one that fails is counted and logged, and the
// others are still tried. It reports false if ctx ended first.
func (e *Endpoint) remakeChildren(ctx context.Context, peer string, children []string, why string) bool {
	for _, name := range children {
		if _, err := e.InitiateChild(ctx, peer, name); err != nil {
			if ctx.Err() != nil {
				return false
			}
			e.mu.Lock()
			e.stats.RestartChildFailed++
			e.unlock()
			e.cfg.Log.Warn("ike: "+why+": Child SA not made again", "peer", peer, "child", name, "err", err)
		}
	}
	return true
}

// maxRestartWait bounds the wait between two restart attempts.
const maxRestartWait = 30 * time.Second

// IKESAInfo describes one IKE SA for listings (sluice ike list).
type IKESAInfo struct {
	// Peer is the peer's configured name.
	Peer string
	// SPIi and SPIr are the IKE SA's SPIs; Initiator is true when we are
	// its original initiator (for a rekeyed IKE SA: we requested the
	// rekey).
	SPIi, SPIr uint64
	Initiator  bool
	// Local and Remote are the addresses and ports IKE uses.
	Local, Remote netip.AddrPort
	// State is "connecting", "established", "rekeyed" (replaced by a
	// rekey, waiting for its Delete) or "deleting".
	State string
	// Established is when it was established (zero while connecting).
	Established time.Time
	// Suite is the negotiated IKE suite in strongSwan's keywords, as
	// proposals = takes them ("aes256gcm16-prfsha384-ecp384"); "" until
	// IKE_SA_INIT chose one.
	Suite string
	// LocalID is the identity we authenticate with; RemoteID the one the
	// peer authenticated with ("" before IKE_AUTH).
	LocalID, RemoteID string
	// Children are its Child SAs, oldest first (shared with what
	// OnChildSA reported: do not modify them).
	Children []*ChildSA
}

// IKESAs lists the Endpoint's IKE SAs, half-open ones aside.
func (e *Endpoint) IKESAs() []IKESAInfo {
	e.mu.Lock()
	defer e.unlock()
	var out []IKESAInfo
	for _, sa := range e.sas {
		if sa.state == stateHalfOpen {
			continue
		}
		st := "connecting"
		switch {
		case sa.rekeyed:
			st = "rekeyed"
		case sa.state == stateDeleting:
			st = "deleting"
		case sa.state == stateEstablished:
			st = "established"
		}
		info := IKESAInfo{Peer: sa.peer.Name, SPIi: sa.spii, SPIr: sa.spir, Initiator: sa.initiator,
			Local: sa.local, Remote: sa.remote, State: st, Established: sa.established,
			LocalID: sa.peer.LocalID.String(), Children: append([]*ChildSA(nil), sa.children...)}
		if sa.suite.Encr != 0 {
			info.Suite = sa.suite.Name()
		}
		if len(sa.remoteID.Data) > 0 {
			info.RemoteID = sa.remoteID.String()
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Peer != out[j].Peer {
			return out[i].Peer < out[j].Peer
		}
		return out[i].Established.Before(out[j].Established)
	})
	return out
}
