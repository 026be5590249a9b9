package ike

// NAT-keepalives (RFC 3948 section 2.3, RFC 7296 section 2.23). When NAT
// detection finds our own address translated (NAT_DETECTION_DESTINATION_IP
// did not match the address the peer's message came to), a NAT between us
// and the peer keeps a mapping for our UDP flow only while packets go
// out: when it expires, the peer can reach us no longer, neither with IKE
// nor with ESP. So while we are behind a NAT, a one-byte datagram (0xFF)
// goes to the peer from the IKE SA's addresses (port 4500: the socket ESP
// in UDP leaves from) whenever nothing else went out on them for a
// little less than Config.KeepAlive, so that a NAT whose mappings live
// exactly KeepAlive (strongSwan's keep_alive, 20 s) keeps ours:
//
//	every KeepAlive/10 (a look), for each established IKE SA behind a NAT:
//	  1. locked:   note its Child SAs
//	  2. unlocked: ask the data plane what it sent on them (Config.ESPSent)
//	  3. locked:   if that grew, ESP went out after the last look: count
//	               the last look as a datagram sent (the latest time we
//	               are sure of); IKE messages we send are noted as they go
//	  4.           if the last datagram sent is KeepAlive*9/10 old, send
//	               0xFF; the next look comes KeepAlive/10 later, or sooner
//	               when the next keepalive is due sooner
//
// The gap between two datagrams we send is then at most KeepAlive*9/10:
// a tenth of KeepAlive is left for a timer that fires late on a loaded
// machine. The ESPSent counters are published once per run of packets
// (esp.Counters), so the looks cost the data path nothing; a look costs
// one ESPSent call per Child SA, ten times per KeepAlive per IKE SA behind
// a NAT.
//
// A look that finds more than KeepAlive passed since the last datagram
// (the process was stopped, the machine suspended, a timer fired very
// late) knows that the NAT may have forgotten the mapping and made a new
// one, with another port, for the keepalive it is about to send; the peer
// would go on sending to the old one. So it also sends a liveness check,
// an authenticated INFORMATIONAL request, through the new mapping: a peer
// not behind a NAT moves the IKE SA and its Child SAs to the address and
// port it came from (section 2.23, natupdate.go). With MOBIKE agreed the
// peer moves only on UPDATE_SA_ADDRESSES, so the initiator sends that
// instead (RFC 4555 section 3.8).

import (
	"net/netip"
	"slices"
	"time"
)

// DefaultKeepAlive is Config.KeepAlive's default (strongSwan's
// keep_alive).
const DefaultKeepAlive = 20 * time.Second

// natKeepalive is the payload of a NAT-keepalive.
var natKeepalive = []byte{0xff}

// keepAliveTimes returns, for Config.KeepAlive k, how long the IKE SA's
// addresses may go without a datagram of ours (every) and how often the
// data plane's counters are looked at (look).
func keepAliveTimes(k time.Duration) (every, look time.Duration) {
	look = max(k/10, time.Millisecond)
	return k - look, look
}

// keepAlive is an IKE SA's NAT-keepalive state (keepalive.go).
type keepAlive struct {
	t       stopper
	sent    uint64    // what Config.ESPSent said at the last look
	looked  time.Time // the last look
	lastOut time.Time // the last datagram of ours on the IKE SA's addresses (for ESP: no earlier)
	check   bool      // a liveness check for a mapping that may be lost is queued
}

// startKeepAliveLocked starts sa's keepalives if we are behind a NAT.
func (sa *ikeSA) startKeepAliveLocked() {
	e := sa.ep
	if !sa.natHere || e.cfg.KeepAlive <= 0 || sa.ka.t != nil {
		return
	}
	e.cfg.Log.Info("ike: we are behind a NAT: sending NAT-keepalives", "peer", sa.peer.Name, "every", e.cfg.KeepAlive)
	now := e.cfg.clock.Now()
	sa.ka.looked, sa.ka.lastOut = now, now // the setup's or the rekey's messages just went
	sa.armKeepAliveLocked(now)
}

// armKeepAliveLocked sets sa's next look: a look after now, sooner if
// the keepalive is due sooner.
func (sa *ikeSA) armKeepAliveLocked(now time.Time) {
	e := sa.ep
	every, look := keepAliveTimes(e.cfg.KeepAlive)
	d := min(look, max(sa.ka.lastOut.Add(every).Sub(now), 0))
	sa.ka.t = e.cfg.clock.AfterFunc(d, func() { e.keepAliveDue(sa) })
}

func (sa *ikeSA) stopKeepAliveLocked() {
	stop(sa.ka.t)
	sa.ka.t = nil
}

// sentLocked notes a datagram of ours from local to remote: when those
// are sa's addresses it keeps the NAT's mapping as a keepalive would.
func (sa *ikeSA) sentLocked(local, remote netip.AddrPort) {
	if sa.ka.t != nil && local == sa.local && remote == sa.remote {
		sa.ka.lastOut = sa.ep.cfg.clock.Now()
	}
}

// sinceOut is how long before now the last datagram of ours went: by
// the monotonic clock or, when more, by the wall clock, which goes on
// while the machine is suspended (Go's monotonic clock does not).
func (ka *keepAlive) sinceOut(now time.Time) time.Duration {
	return max(now.Sub(ka.lastOut), now.Round(0).Sub(ka.lastOut.Round(0)))
}

// keepAliveDue is one look at sa (drawn at the top of the file).
func (e *Endpoint) keepAliveDue(sa *ikeSA) {
	e.mu.Lock()
	if sa.removed || sa.ka.t == nil || e.closed {
		e.unlock()
		return
	}
	children := slices.Clone(sa.children)
	e.unlock()
	var sent uint64
	if f := e.cfg.ESPSent; f != nil {
		for _, c := range children {
			sent += f(c)
		}
	}
	e.mu.Lock()
	var after []func()
	if !sa.removed && sa.ka.t != nil && !e.closed {
		after = sa.keepAliveLookLocked(sent)
	}
	e.unlock()
	run(after)
}

// keepAliveLookLocked is step 3 and 4 of a look, sent what Config.ESPSent
// says now.
func (sa *ikeSA) keepAliveLookLocked(sent uint64) []func() {
	e, ka := sa.ep, &sa.ka
	now := e.cfg.clock.Now()
	if sent != ka.sent {
		ka.sent = sent
		if ka.looked.After(ka.lastOut) {
			ka.lastOut = ka.looked
		}
	}
	ka.looked = now
	every, _ := keepAliveTimes(e.cfg.KeepAlive)
	var after []func()
	if gap := ka.sinceOut(now); gap > e.cfg.KeepAlive {
		after = sa.mappingCheckLocked(gap) // when it goes now, no keepalive is due
	}
	if ka.sinceOut(now) >= every {
		e.stats.KeepAlives++
		ka.lastOut = now
		e.outbox = append(e.outbox, datagram{sa.local, sa.remote, natKeepalive}) // unlock sends it
	}
	sa.armKeepAliveLocked(now)
	return after
}

// mappingCheckLocked queues a liveness check (an empty INFORMATIONAL
// request) on sa, behind a NAT that may have forgotten its mapping: gap
// passed since our last datagram, more than Config.KeepAlive. Through
// the NAT's new mapping it tells the peer where we are now (section
// 2.23). One is queued at a time.
func (sa *ikeSA) mappingCheckLocked(gap time.Duration) []func() {
	e := sa.ep
	if sa.ka.check {
		return nil
	}
	e.stats.NATMappingChecks++
	e.cfg.Log.Info("ike: nothing sent through the NAT for longer than keep_alive: its mapping may have changed; sending a liveness check",
		sa.logAttrs("silent", gap.Round(time.Millisecond), "keep_alive", e.cfg.KeepAlive)...)
	sa.ka.check = true
	return sa.enqueueLocked(op{
		run: func(sa *ikeSA) []func() {
			sa.ka.check = false
			if sa.mobike && sa.initiator {
				// MOBIKE's peer follows UPDATE_SA_ADDRESSES alone (RFC
				// 4555 section 3.8): ours, from where we are, with
				// NAT detection; the peer checks the new path and
				// moves the Child SAs (task_mobike.go).
				if err := sa.startLocked(&request{exch: INFORMATIONAL}, &mobikeMoveTask{}); err != nil {
					e.cfg.Log.Warn("ike: UPDATE_SA_ADDRESSES not sent", sa.logAttrs("err", err)...)
				}
				return nil
			}
			if err := sa.requestOutLocked(INFORMATIONAL, nil); err == nil {
				e.stats.LivenessChecks++
			}
			return nil
		},
		fail: func(error) []func() { sa.ka.check = false; return nil },
	})
}
