package ike

// Reauthentication (RFC 7296 section 2.8.3; swanctl's reauth_time), make-
// before-break as strongSwan's make_before_break does it: at
// Peer.ReauthTime, less a random part of up to a tenth of it, the IKE SA
// is replaced by a new one with a full IKE_SA_INIT and IKE_AUTH (a new
// authentication, without INITIAL_CONTACT so that the peer keeps the old
// one meanwhile), which makes the Child SA of IKE_AUTH again; the other
// children are made again on it with CREATE_CHILD_SA, and then the old
// IKE SA is deleted with its Child SAs. OnChildSA reports the new Child
// SAs, under the same child names, before OnDelete reports the old ones,
// so that the data plane switches to them as it does after a rekey.
//
// Only a side that can initiate (Peer.Remote set) reauthenticates. When
// the new IKE SA fails, the old one stays and tries again a little later
// (until its own life time, if any, ends it). An IKE SA rekey carries the
// reauthentication time over to the new IKE SA; an IKE SA adopted from a
// snapshot starts its reauthentication time again.
//
// The new IKE_AUTH always carries the peer's first child, even when the
// old IKE SA no longer had it (the operator terminated it with
// Controller.TerminateChild): the Controller deletes such a pair,
// uninstalled, as soon as it is reported (controller.go, onChildSA), so
// that a terminated child stays down until Initiate asks for it.

import (
	"context"
	"time"
)

// reauthState is an IKE SA's reauthentication (ikeSA.reauth).
type reauthState struct {
	t    stopper   // fires at at
	at   time.Time // when the reauthentication is due (zero: never)
	busy bool      // the new IKE SA is being made
	// of is, on the new IKE SA, the IKE SA it replaces: its IKE_AUTH
	// leaves out INITIAL_CONTACT.
	of *ikeSA
}

// startReauthLocked arms sa's reauthentication at Peer.ReauthTime less
// the jitter; startTimersAtLocked calls it for a new IKE SA, one a rekey
// made (which then takes its predecessor's time: carryReauthLocked) and
// one adopted from a snapshot (whose reauthentication time is not in
// the snapshot: it starts again).
func (sa *ikeSA) startReauthLocked() {
	d := sa.peer.ReauthTime
	if d <= 0 || !sa.peer.Remote.IsValid() {
		return
	}
	sa.armReauthLocked(sa.ep.cfg.clock.Now().Add(d - randDuration(d/10)))
}

// armReauthLocked (re)arms sa's reauthentication at at.
func (sa *ikeSA) armReauthLocked(at time.Time) {
	if sa.reauth == nil {
		sa.reauth = &reauthState{}
	}
	r, e := sa.reauth, sa.ep
	stop(r.t)
	r.at = at
	r.t = e.cfg.clock.AfterFunc(max(at.Sub(e.cfg.clock.Now()), 0), func() { e.reauthDue(sa) })
}

// stopReauthLocked stops sa's reauthentication timer.
func (sa *ikeSA) stopReauthLocked() {
	if r := sa.reauth; r != nil {
		stop(r.t)
		r.t = nil
	}
}

// carryReauthLocked gives to, the IKE SA that a rekey of from made, from's
// reauthentication time; while from's reauthentication is under way (the
// peer rekeyed it meanwhile), to has none: that reauthentication deletes
// to at its end.
func (to *ikeSA) carryReauthLocked(from *ikeSA) {
	r := from.reauth
	switch {
	case r == nil || r.at.IsZero() || to.peer.ReauthTime <= 0:
	case r.busy:
		to.stopReauthLocked()
	default:
		to.armReauthLocked(r.at)
	}
}

// initialContact is IKE_AUTH's N(INITIAL_CONTACT) (section 2.4), left out
// of a reauthentication's: the peer keeps the old IKE SA until we delete
// it.
func initialContact(sa *ikeSA) []Payload {
	if sa.reauth != nil && sa.reauth.of != nil {
		return nil
	}
	return []Payload{&Notify{NType: InitialContact}}
}

// reauthDue starts the reauthentication of sa, whose time came.
func (e *Endpoint) reauthDue(sa *ikeSA) {
	e.mu.Lock()
	r := sa.reauth
	if r == nil || r.busy || !sa.up() || e.closed || e.stopping || e.peerLocked(sa.peer.Name) != sa.peer {
		e.unlock()
		return
	}
	r.busy = true
	stop(sa.rekeyT) // the old IKE SA is not rekeyed any more
	children := sa.additionalChildren()
	var anchor *ChildSA // finds the IKE SA that carries old's Child SAs at the end
	if len(sa.children) > 0 {
		anchor = sa.children[0]
	}
	e.cfg.Log.Info("ike: reauthenticating the IKE SA", sa.logAttrs("children", len(sa.children))...)
	e.wg.Add(1)
	e.unlock()
	go e.reauth(sa, anchor, children)
}

// reauth makes old's replacement, its children on it, and deletes old.
func (e *Endpoint) reauth(old *ikeSA, anchor *ChildSA, children []string) {
	defer e.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-e.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	peer := old.peer
	failed := func(err error) {
		e.cfg.Log.Warn("ike: reauthentication failed; the IKE SA stays", old.logAttrs("err", err)...)
		e.mu.Lock()
		old.reauth.busy = false
		if old.up() && !e.stopping {
			old.armReauthLocked(e.cfg.clock.Now().Add(e.retryDelay()))
		}
		e.unlock()
	}
	dh, err := e.newDH(firstDH(peer.IKE))
	if err != nil {
		failed(err)
		return
	}
	var sa *ikeSA
	_, err = e.call(ctx, func(w chan result) ([]func(), error) {
		if !old.up() || e.peerLocked(peer.Name) != peer {
			return nil, errDeleted
		}
		var after []func()
		sa, after = e.newInitiatorLocked(peer, dh, w)
		sa.reauth = &reauthState{of: old}
		return after, nil
	}, func(err error) []func() { return e.removeLocked(sa, err) })
	if err != nil {
		if ctx.Err() == nil {
			failed(err)
		}
		return
	}
	// The new IKE SA is the newest established with peer: the children
	// go on it.
	if !e.remakeChildren(ctx, peer.Name, children, "reauthentication") {
		return
	}
	// Delete the old IKE SA, or the one a rekey by the peer moved its
	// Child SAs to meanwhile (Delete finds it by anchor); without a Child
	// SA, by our SPI of it.
	handle := anchor
	if handle == nil {
		e.mu.Lock()
		handle = &ChildSA{Initiator: true, IKESPIi: old.ourSPI()}
		e.unlock()
	}
	if err := e.Delete(ctx, handle); err != nil && ctx.Err() == nil {
		e.cfg.Log.Warn("ike: reauthentication: the old IKE SA not deleted", old.logAttrs("err", err)...)
		return
	}
	e.cfg.Log.Info("ike: IKE SA reauthenticated", sa.logAttrs()...)
}
