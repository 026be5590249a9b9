package ike

// MOBIKE's tasks (RFC 4555; the protocol parts are in mobike.go):
//
//   - mobikeAuthTask, in IKE_AUTH: both sides announce
//     N(MOBIKE_SUPPORTED) (section 4.2.1; the responder only in answer to
//     the initiator's, in its response with AUTH and the Child SA: the
//     last round with EAP); ikeSA.mobike when both did.
//   - mobikeUpdateTask, answering an INFORMATIONAL: UPDATE_SA_ADDRESSES
//     moves the IKE SA to the addresses the request came from and to, the
//     answer carries NAT detection for them and echoes COOKIE2; once the
//     answer is out, the return routability check goes to the new address.
//   - the check (checkRoutabilityLocked), an INFORMATIONAL of ours:
//     N(COOKIE2) and NAT detection; with our cookie echoed the Child SAs
//     move (Config.OnChildAddress).
//   - Endpoint.UpdateAddresses (mobikeMoveTask): the side that moves,
//     usually the original initiator: UPDATE_SA_ADDRESSES from our new
//     address; the peer's answer must echo our COOKIE2.

import (
	"context"
	"errors"
	"net/netip"
)

func init() {
	registerTask(IKE_AUTH, orderMOBIKE, newMobikeAuthTask)
	registerTask(INFORMATIONAL, orderMOBIKE, newMobikeUpdateTask)
}

// mobikeAuthTask announces MOBIKE in IKE_AUTH.
type mobikeAuthTask struct {
	peer bool // responder: the initiator announced it
}

func newMobikeAuthTask(*ikeSA) task { return &mobikeAuthTask{} }

// mobikeEnabled reports whether MOBIKE may be announced to p.
func mobikeEnabled(p *Peer) bool { return p != nil && !p.NoMOBIKE }

func (t *mobikeAuthTask) build(x *exchange) taskStatus {
	sa := x.sa
	if sa.initiator {
		if x.round > 0 || !mobikeEnabled(sa.peer) {
			return taskDone
		}
		x.add(&Notify{NType: MOBIKESupported})
		return taskMore
	}
	// The responder's peer is the one chosen by identity (the auth
	// task's process). The notify goes in the response that
	// authenticates the initiator and carries the Child SA (AUTH, SA,
	// TS): with EAP that is the last of several rounds, and it is where
	// strongSwan looks for it (a charon that misses it reauthenticates
	// on every address change instead of moving).
	if !x.setup.peerAuthed {
		return taskMore // EAP's rounds
	}
	if t.peer && mobikeEnabled(x.setup.peer) {
		sa.mobike = true
		x.add(&Notify{NType: MOBIKESupported})
	}
	return taskDone
}

func (t *mobikeAuthTask) process(x *exchange) taskStatus {
	announced := findNotify(x.in, MOBIKESupported) != nil
	if x.sa.initiator {
		x.sa.mobike = announced
		return taskDone
	}
	t.peer = t.peer || announced
	return taskMore
}

// mobikeUpdateTask answers the MOBIKE notifies of the peer's
// INFORMATIONAL request (section 3.5): UPDATE_SA_ADDRESSES moves the IKE
// SA; a COOKIE2 is echoed whatever else the request carries. Any other
// request (the peer's probe of a path is an empty one) moves nothing: it
// is answered where it came from.
type mobikeUpdateTask struct {
	resp   []Payload
	update *addrUpdate
}

func newMobikeUpdateTask(*ikeSA) task { return &mobikeUpdateTask{} }

func (t *mobikeUpdateTask) process(x *exchange) taskStatus {
	sa, e := x.sa, x.sa.ep
	m, err := readMobike(x.in)
	if err != nil {
		return x.fail(InvalidSyntax, err)
	}
	if !m.update {
		if m.cookie2 != nil {
			t.resp = []Payload{&Notify{NType: Cookie2, Data: m.cookie2}}
		}
		return taskMore
	}
	if !sa.mobike {
		// Section 3.2: only an IKE SA that agreed MOBIKE moves.
		e.stats.MOBIKERefused++
		e.cfg.Log.Warn("ike: UPDATE_SA_ADDRESSES without MOBIKE agreed: ignored", sa.logAttrs("from", x.remote)...)
		return taskMore
	}
	resp, u, ok := answerUpdate(m, x.in, sa.spii, sa.spir, x.local, x.remote, sa.peer.ForceEncap)
	t.resp = resp
	if !ok {
		e.stats.MOBIKERefused++
		e.cfg.Log.Warn("ike: UPDATE_SA_ADDRESSES refused: a NAT where NO_NATS_ALLOWED forbids one", sa.logAttrs("from", x.remote)...)
		return taskMore
	}
	e.stats.MOBIKEUpdates++
	e.cfg.Log.Info("ike: the peer moved the IKE SA (MOBIKE)", sa.logAttrs("new_local", x.local, "new_remote", x.remote,
		"local_behind_nat", u.ourNAT, "remote_behind_nat", u.peerNAT)...)
	sa.setAddrsLocked(u.local, u.remote)
	sa.natHere = u.ourNAT
	if !sa.encap && (u.ourNAT || u.peerNAT) {
		// ESP of an installed SA cannot start going in UDP here; the
		// peer's next rekey makes Child SAs that do.
		e.cfg.Log.Warn("ike: a NAT on the new path; the Child SAs keep ESP without UDP", sa.logAttrs()...)
	}
	t.update = &u
	return taskMore
}

func (t *mobikeUpdateTask) build(x *exchange) taskStatus {
	x.add(t.resp...)
	if u := t.update; u != nil {
		sa := x.sa
		x.onSent(func() { sa.checkRoutabilityLocked(*u) })
	}
	return taskDone
}

// checkRoutabilityLocked sends the return routability check of update u
// (section 3.5) when the IKE SA's window is free: an INFORMATIONAL
// request of ours (mobikeCheckTask) to the peer's new address. A check
// that goes unanswered fails the IKE SA as any request does; one that a
// newer update overtook before it left is not sent.
func (sa *ikeSA) checkRoutabilityLocked(u addrUpdate) {
	e := sa.ep
	sa.enqueueLocked(op{
		run: func(sa *ikeSA) []func() {
			if sa.local != u.local || sa.remote != u.remote {
				return nil
			}
			if err := sa.startLocked(&request{exch: INFORMATIONAL}, &mobikeCheckTask{update: u}); err != nil {
				e.cfg.Log.Warn("ike: return routability check not sent", sa.logAttrs("err", err)...)
			}
			return nil
		},
		fail: func(error) []func() { return nil },
	})
}

// mobikeCheckTask is our return routability check of an update: a
// fresh COOKIE2 and NAT detection for the new path in our request; when
// the answer echoes the cookie, the Child SAs move
// (Config.OnChildAddress), unless a newer update moved the IKE SA on
// meanwhile (its own check moves them). A Child SA already on the new
// path (the peer rekeyed it after the update) needs no move; one that
// was there before and moved away (the peer came back) does
// (childaddr.go).
type mobikeCheckTask struct {
	update addrUpdate
	check  *routabilityCheck
}

func (t *mobikeCheckTask) build(x *exchange) taskStatus {
	sa := x.sa
	c, ps := newRoutabilityCheck(t.update, sa.spii, sa.spir, sa.peer.ForceEncap)
	t.check = c
	x.add(ps...)
	return taskMore
}

func (t *mobikeCheckTask) process(x *exchange) taskStatus {
	sa, e := x.sa, x.sa.ep
	if !t.check.passed(x.in) {
		e.stats.RoutabilityFailed++
		e.cfg.Log.Warn("ike: return routability check answered without our COOKIE2: the Child SAs stay", sa.logAttrs()...)
		return taskDone
	}
	u := t.update
	if sa.local != u.local || sa.remote != u.remote {
		return taskDone
	}
	e.stats.RoutabilityChecked++
	e.cfg.Log.Info("ike: return routability checked; the Child SAs move (MOBIKE)", sa.logAttrs("children", len(sa.children))...)
	x.later(sa.moveChildAddrsLocked(u.local, u.remote)...)
	return taskDone
}

// UpdateAddresses moves the IKE SA that carries child, and its Child
// SAs, to our address local (MOBIKE, RFC 4555 section 3.5: the side
// whose address changed tells the peer): it sends UPDATE_SA_ADDRESSES
// from local, with NAT detection and a COOKIE2, to the peer's address;
// when the answer echoes the cookie, each Child SA's new outer addresses
// are reported (Config.OnChildAddress) and UpdateAddresses returns nil.
// The port stays the one IKE uses. MOBIKE must have been agreed in
// IKE_AUTH, and the Transport must be able to send from local. It waits
// for the answer (retransmitting) or ctx; an answer without our cookie
// leaves the IKE SA at local and returns an error.
func (e *Endpoint) UpdateAddresses(ctx context.Context, child *ChildSA, local netip.Addr) error {
	_, err := e.call(ctx, func(w chan result) ([]func(), error) {
		sa := e.ikeSAOfLocked(child)
		if sa == nil || !sa.up() {
			return nil, errors.New("ike: no such IKE SA")
		}
		if !sa.mobike {
			return nil, errors.New("ike: MOBIKE was not agreed on the IKE SA")
		}
		return sa.enqueueLocked(op{
			run: func(sa *ikeSA) []func() {
				to := netip.AddrPortFrom(local, sa.local.Port())
				sa.setAddrsLocked(to, sa.remote)
				e.cfg.Log.Info("ike: moving the IKE SA (MOBIKE)", sa.logAttrs("new_local", to)...)
				if err := sa.startLocked(&request{exch: INFORMATIONAL}, &mobikeMoveTask{w: w}); err != nil {
					return reply(w, nil, err)
				}
				return nil
			},
			fail: func(err error) []func() { return reply(w, nil, err) },
		}), nil
	}, nil)
	return err
}

// mobikeMoveTask is our UPDATE_SA_ADDRESSES (UpdateAddresses): sent from
// the IKE SA's new local address; the answer must echo our COOKIE2, and
// its NAT detection tells whether we are behind a NAT on the new path.
type mobikeMoveTask struct {
	w      chan result
	check  *routabilityCheck
	update addrUpdate
}

func (t *mobikeMoveTask) build(x *exchange) taskStatus {
	sa := x.sa
	t.update = addrUpdate{local: sa.local, remote: sa.remote}
	c, ps := newRoutabilityCheck(t.update, sa.spii, sa.spir, sa.peer.ForceEncap)
	t.check = c
	x.add(&Notify{NType: UpdateSAAddresses})
	x.add(ps...)
	return taskMore
}

func (t *mobikeMoveTask) process(x *exchange) taskStatus {
	sa, e := x.sa, x.sa.ep
	if !t.check.passed(x.in) {
		e.stats.RoutabilityFailed++
		x.later(reply(t.w, nil, errors.New("ike: the answer to UPDATE_SA_ADDRESSES does not echo our COOKIE2"))...)
		return taskDone
	}
	u := t.update
	u.ourNAT, u.peerNAT = natCheck(x.in, sa.spii, sa.spir, u.local, u.remote)
	sa.natHere = u.ourNAT
	e.stats.MOBIKEUpdates++
	e.stats.RoutabilityChecked++
	e.cfg.Log.Info("ike: the peer took the move (MOBIKE)", sa.logAttrs("local_behind_nat", u.ourNAT, "remote_behind_nat", u.peerNAT)...)
	x.later(sa.moveChildAddrsLocked(u.local, u.remote)...)
	x.later(reply(t.w, nil, nil)...)
	return taskDone
}
